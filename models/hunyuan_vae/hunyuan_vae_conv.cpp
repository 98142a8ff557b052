#include "models/hunyuan_vae/hunyuan_vae_conv.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "runtime/threads.h"

namespace flick::hunyuan_vae {

void replicate_pad(const Tensor& x, Tensor& y, int64_t pt, int64_t ph, int64_t pw) {
  const int64_t c = x.dim(1), t = x.dim(2), h = x.dim(3), w = x.dim(4);
  FLICK_CHECK(x.is_contiguous() && y.is_contiguous() && x.dtype == y.dtype &&
                  y.shape == Shape({1, c, t + pt, h + 2 * ph, w + 2 * pw}),
              "replicate_pad: " + x.str() + " -> " + y.str());
  const size_t es = dtype_size(x.dtype);
  const int64_t tp = t + pt, hp = h + 2 * ph, wp = w + 2 * pw;
  const char* src = static_cast<const char*>(x.data);
  char* dst = static_cast<char*>(y.data);
  // One output row per (channel, padded frame, padded row): the source row
  // with every index clamped into the input.
  parallel_for(c * tp * hp, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t ch = r / (tp * hp), f = r / hp % tp, i = r % hp;
      const int64_t sf = std::max<int64_t>(f - pt, 0);
      const int64_t si = std::clamp<int64_t>(i - ph, 0, h - 1);
      const char* s = src + static_cast<size_t>(((ch * t + sf) * h + si) * w) * es;
      char* d = dst + static_cast<size_t>(r * wp) * es;
      std::memcpy(d + static_cast<size_t>(pw) * es, s, static_cast<size_t>(w) * es);
      for (int64_t j = 0; j < pw; ++j) {
        std::memcpy(d + static_cast<size_t>(j) * es, s, es);
        std::memcpy(d + static_cast<size_t>(pw + w + j) * es, s + static_cast<size_t>(w - 1) * es,
                    es);
      }
    }
  });
}

Expected<CausalConv3d> CausalConv3d::load(const WeightView& v, std::string_view prefix, Backend& be,
                                          const Numerics& num, int64_t in, int64_t out,
                                          std::array<int64_t, 3> stride) {
  const std::string p = std::string(prefix) + ".conv.";
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* info, v.require(p + "weight", 5));
  const std::vector<int64_t>& s = info->shape;
  if ((in >= 0 && s[1] != in) || (out >= 0 && s[0] != out))
    return invalid_input(v.full_name(p + "weight") + ": expected " + std::to_string(in) + " -> " +
                         std::to_string(out) + " channels, file has " + info->shape_str());
  CausalConv3d c;
  c.cout_ = s[0];
  c.cin_ = s[1];
  c.kernel_ = {s[2], s[3], s[4]};
  c.stride_ = stride;
  c.act_ = num.act;
  FLICK_ASSIGN_OR_RETURN(OwnedTensor w, load_f32(v, p + "weight", Shape::from_vector(s)));
  FLICK_ASSIGN_OR_RETURN(OwnedTensor b, load_f32(v, p + "bias", Shape{s[0]}));
  ConvDesc d;
  d.w = w.t;
  d.bias = b.t;
  d.spatial_dims = 3;
  d.stride = stride;
  d.precision = num.conv;
  c.conv_ = be.pack_conv(d);
  return c;
}

Expected<CausalConv3d> CausalConv3d::load_pointwise(const WeightView& v, std::string_view prefix,
                                                    Backend& be, const Numerics& num,
                                                    int64_t channels) {
  const std::string p = std::string(prefix) + ".";
  CausalConv3d c;
  c.cin_ = c.cout_ = channels;
  c.act_ = num.act;
  FLICK_ASSIGN_OR_RETURN(OwnedTensor w,
                         load_f32(v, p + "weight", Shape{channels, channels, 1, 1, 1}));
  FLICK_ASSIGN_OR_RETURN(OwnedTensor b, load_f32(v, p + "bias", Shape{channels}));
  ConvDesc d;
  d.w = w.t;
  d.bias = b.t;
  d.spatial_dims = 3;
  d.precision = num.conv;
  c.conv_ = be.pack_conv(d);
  return c;
}

OwnedTensor CausalConv3d::forward(Backend& be, const Tensor& x) const {
  OwnedTensor view;
  view.t = x;  // not owned: nothing to free
  return forward(be, std::move(view));
}

OwnedTensor CausalConv3d::forward(Backend& be, OwnedTensor&& in) const {
  const Tensor& x = in.t;
  FLICK_CHECK(x.ndim() == 5 && x.dim(0) == 1 && x.dim(1) == cin_,
              "CausalConv3d: x " + x.str() + ", expected " + std::to_string(cin_) + " channels");
  const int64_t pt = kernel_[0] - 1, ph = kernel_[1] / 2, pw = kernel_[2] / 2;
  const int64_t tp = x.dim(2) + pt, hp = x.dim(3) + 2 * ph, wp = x.dim(4) + 2 * pw;
  const Shape out_shape{1, cout_, (tp - kernel_[0]) / stride_[0] + 1,
                        (hp - kernel_[1]) / stride_[1] + 1, (wp - kernel_[2]) / stride_[2] + 1};
  // The convolution's input: x itself when it is dense in the activation
  // dtype and needs no padding, else a padded (or converted) copy.
  OwnedTensor padded;
  const bool pointwise = pt == 0 && ph == 0 && pw == 0;
  if (!(pointwise && x.is_contiguous() && x.dtype == act_)) {
    OwnedTensor converted;
    const Tensor* src = &x;
    if (!x.is_contiguous() || x.dtype != act_) {
      converted = contiguous_copy(be, x, act_);
      src = &converted.t;
    }
    if (pointwise) {
      padded = std::move(converted);
    } else {
      padded = OwnedTensor(act_, Shape{1, cin_, tp, hp, wp});
      replicate_pad(*src, padded.t, pt, ph, pw);
    }
    in = OwnedTensor();  // x is no longer needed (a no-op for a borrowed view)
  }
  OwnedTensor y(act_, out_shape);
  be.conv(padded.t.empty() ? in.t : padded.t, *conv_, y.t, Activation::None);
  return y;
}

}  // namespace flick::hunyuan_vae
