#include "runtime/cpu/conv_onednn.h"

namespace flick::cpu {

using dnnl::memory;

memory::dims dims_of(const Tensor& t) {
  return {t.shape.dims.begin(), t.shape.dims.begin() + t.ndim()};
}

memory::dims strides_of(const Tensor& t) {
  return {t.strides.begin(), t.strides.begin() + t.ndim()};
}

bool channels_last(const Tensor& t) {
  int64_t acc = t.dim(1);
  if (t.stride(1) != 1 && t.dim(1) != 1) return false;
  for (int i = t.ndim() - 1; i >= 2; --i) {
    if (t.stride(i) != acc && t.dim(i) != 1) return false;
    acc *= t.dim(i);
  }
  return t.stride(0) == acc || t.dim(0) == 1;
}

memory::dims conv_weight_dims(const ConvDesc& d) {
  memory::dims wd = dims_of(d.w);
  if (d.groups > 1) {
    wd[0] /= d.groups;
    wd.insert(wd.begin(), d.groups);
  }
  return wd;
}

memory::format_tag plain_weight_tag(const memory::dims& weight_dims) {
  using tag = memory::format_tag;
  return weight_dims.size() == 4 ? tag::abcd : weight_dims.size() == 5 ? tag::abcde : tag::abcdef;
}

ConvPackShapes conv_pack_shapes(const ConvDesc& d) {
  const int sd = d.spatial_dims;
  const int64_t out_channels = d.w.dim(0);
  ConvPackShapes s;
  s.x = {1, d.w.dim(1) * d.groups};
  s.y = {1, out_channels};
  for (int i = 0; i < sd; ++i) {
    const auto at = static_cast<size_t>(i);
    const int64_t out = sd == 3 && i == 0 ? 2 : 16;
    const int64_t ek = (d.w.dim(2 + i) - 1) * d.dilation[at] + 1;
    s.x.push_back((out - 1) * d.stride[at] + ek - 2 * d.padding[at]);
    s.y.push_back(out);
  }
  s.channels_last = sd == 2 ? memory::format_tag::nhwc : memory::format_tag::ndhwc;
  return s;
}

ConvGeometry conv_geometry(const ConvDesc& d) {
  ConvGeometry g;
  for (int i = 0; i < d.spatial_dims; ++i) {
    const auto s = static_cast<size_t>(i);
    g.strides.push_back(d.stride[s]);
    g.dilation.push_back(d.dilation[s] - 1);
    g.padding.push_back(d.padding[s]);
  }
  return g;
}

ConvDst::ConvDst(const memory::desc& pd_dst, const memory::desc& y) : direct_(pd_dst == y) {
  const auto& eng = onednn_engine();
  dst_ = memory(pd_dst, eng, DNNL_MEMORY_NONE);
  if (!direct_) {
    staging_bytes_ = pd_dst.get_size();
    y_mem_ = memory(y, eng, DNNL_MEMORY_NONE);
    to_y_.emplace(pd_dst, y_mem_, false);
  }
}

void ConvDst::bind(CallBuffers& buf, void* y) {
  if (direct_) {
    dst_.set_data_handle(y);
    return;
  }
  staging_ = buf.get(CallBuffers::kDst, staging_bytes_);
  dst_.set_data_handle(staging_);
  y_mem_.set_data_handle(y);
}

void ConvDst::finish(dnnl::stream& s) {
  if (!direct_) to_y_->run(s, staging_);
}

}  // namespace flick::cpu
