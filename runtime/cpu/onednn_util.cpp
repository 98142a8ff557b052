#include "runtime/cpu/onednn_util.h"

#include <cstring>

#include "runtime/log.h"

namespace flick::cpu {

const dnnl::engine& onednn_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& onednn_stream() {
  thread_local dnnl::stream stream(onednn_engine());
  return stream;
}

void* CallBuffers::get(Slot s, size_t bytes) {
  HostBuffer& b = bufs_[s];
  if (b.size() < bytes) b = HostBuffer(bytes);
  return b.data();
}

CallBuffers& onednn_call_buffers() {
  thread_local CallBuffers buffers;
  return buffers;
}

dnnl::memory::data_type onednn_dtype(DType t) {
  using dt = dnnl::memory::data_type;
  switch (t) {
    case DType::F32: return dt::f32;
    case DType::BF16: return dt::bf16;
    case DType::F16: return dt::f16;
    case DType::I8: return dt::s8;
    case DType::U8: return dt::u8;
    case DType::I32: return dt::s32;
    case DType::F8_E4M3:
    case DType::F8_E5M2: break;
  }
  FLICK_CHECK(false, "no oneDNN type for " + std::string(dtype_name(t)));
  return dt::undef;
}

void append_activation(dnnl::post_ops& po, Activation act) {
  using alg = dnnl::algorithm;
  switch (act) {
    case Activation::None: return;
    case Activation::GeluErf: po.append_eltwise(1.f, alg::eltwise_gelu_erf, 0.f, 0.f); return;
    case Activation::GeluTanh: po.append_eltwise(1.f, alg::eltwise_gelu_tanh, 0.f, 0.f); return;
    // swish(x) = x * sigmoid(alpha * x); alpha = 1 is SiLU.
    case Activation::Silu: po.append_eltwise(1.f, alg::eltwise_swish, 1.f, 0.f); return;
    case Activation::Relu: po.append_eltwise(1.f, alg::eltwise_relu, 0.f, 0.f); return;
    case Activation::Sigmoid: po.append_eltwise(1.f, alg::eltwise_logistic, 0.f, 0.f); return;
    // oneDNN has no rounding post-op; linear runs it as a second op.
    case Activation::RoundGeluTanh: break;
  }
  FLICK_CHECK(false, "RoundGeluTanh is not a oneDNN post-op (linear only)");
}

namespace {

dnnl::memory::format_tag plain_tag(size_t ndims) {
  using tag = dnnl::memory::format_tag;
  const tag tags[] = {tag::a, tag::ab, tag::abc, tag::abcd, tag::abcde, tag::abcdef};
  FLICK_CHECK(ndims >= 1 && ndims <= 6, "no plain layout for this rank");
  return tags[ndims - 1];
}

}  // namespace

ReorderChain::ReorderChain(const dnnl::memory::desc& from, const dnnl::memory& to,
                           bool round_to_bf16) {
  using dt = dnnl::memory::data_type;
  const auto& eng = onednn_engine();
  from_ = dnnl::memory(from, eng, DNNL_MEMORY_NONE);
  auto step = [&](const dnnl::memory& a, const dnnl::memory& b) {
    steps_.emplace_back(dnnl::reorder(a, b), std::unordered_map<int, dnnl::memory>{
                                                 {DNNL_ARG_FROM, a}, {DNNL_ARG_TO, b}});
  };
  if (round_to_bf16 && from.data_type() == dt::f32) {
    const auto dims = from.dims();
    mid_ = dnnl::memory({dims, dt::bf16, plain_tag(dims.size())}, eng);
    step(from_, mid_);
    step(mid_, to);
  } else {
    step(from_, to);
  }
}

void ReorderChain::run(dnnl::stream& s, void* from_data) {
  from_.set_data_handle(from_data);
  for (auto& [r, args] : steps_) r.execute(s, args);
}

std::string impl_name(const dnnl::primitive_desc_base& pd, const std::string& what) {
  std::string impl = pd.impl_info_str();
  if (impl.rfind("ref", 0) == 0) {
    log_warning("oneDNN picked its slow reference implementation '" + impl + "' for " + what);
  }
  return impl;
}

Tensor md_bytes(const dnnl::memory::desc& md) {
  static_assert(DNNL_VERSION_MAJOR == 2, "oneDNN 3 descs are opaque: serialise with get_blob()");
  return Tensor::view(const_cast<dnnl_memory_desc_t*>(&md.data), DType::U8,
                      Shape{static_cast<int64_t>(sizeof(dnnl_memory_desc_t))});
}

Status check_adopted_weights(const Tensor& md, const Tensor& weights,
                             const dnnl::memory::desc& want) {
  dnnl::memory::desc got;
  if (md.dtype != DType::U8 || weights.dtype != DType::U8 || md.nbytes() != sizeof(got.data))
    return invalid_input("oneDNN weights descriptor of the wrong size");
  std::memcpy(&got.data, md.data, sizeof(got.data));
  if (!(got == want))
    return invalid_input(
        "holds weights in another oneDNN layout than this process's primitive wants");
  if (weights.nbytes() != want.get_size())
    return invalid_input("holds " + std::to_string(weights.nbytes()) +
                         " bytes of weights, the layout needs " + std::to_string(want.get_size()));
  return ok_status();
}

}  // namespace flick::cpu
