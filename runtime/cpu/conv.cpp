// CPU convolution (2-d and 3-d) on oneDNN. Weights are reordered once at
// pack time; one primitive per (input shape, strides, dtypes, activation) is
// created on the first call and cached in the packed weights.
//
// Layouts: oneDNN's fast convolutions (brgconv, jit) read blocked
// (nChw16c-like) or channels-last activations; on plain NCHW / NCDHW it
// falls back to im2col + GEMM at ~10x the time. So:
//   - plain (or any other strided) x: x is reordered into a blocked buffer and
//     the blocked result reordered into y. The reorders are built once per
//     plan; their staging buffers and the scratchpad are the calling thread's
//     CallBuffers, shared by all plans. They cost one pass over x and y each
//     (see bench/RESULTS.md for their share of VAE-sized layers);
//   - channels-last x (an [N, C, D, H, W] view with C innermost, e.g. a
//     permuted NDHWC buffer): the convolution reads it in place and writes y
//     in place when y is channels-last too. A model that keeps its activations
//     channels-last pays no reorders.
// Epilogue: F32 / BF16: oneDNN bias, then the activation post-op.
//           FP8: acc * scale[o] (binary_mul), + bias (binary_add), activation.
// F32 1x1 convolutions (stride 1, no padding, one group) on channels-last x
// and y are the GEMM [pixels, I] x [I, O]: they run on flick's AVX-512 FMA
// GEMM (gemm.h, as F32 linears do) where linear_uses_avx512_f32(). oneDNN
// 2.7's brgconv_1x1 ran EfficientSAM3's neck and trunk 1x1s at 50-70 % of
// the FMA peak (Emerald Rapids, 2 threads).
// Implementation: oneDNN's first choice, except for large frames (see
// prefer_direct_amx) and 3x3 stride-1 convolutions, F32 and (without AMX)
// BF16, which run on its Winograd kernel where the host has one
// (kWinogradMinPixels, bf16_on_winograd).
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "runtime/cpu/conv_cache.h"
#include "runtime/cpu/conv_int8.h"
#include "runtime/cpu/conv_onednn.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/onednn_info.h"
#include "runtime/cpu/onednn_util.h"
#include "runtime/cpu/ops.h"
#include "runtime/log.h"
#include "runtime/plan_cache.h"
#include "runtime/ref/matmul_common.h"

namespace flick::cpu {
namespace {

using dnnl::memory;
using odt = memory::data_type;
using tag = memory::format_tag;

// oneDNN 2.6 ranks brgconv first for AMX bf16, but on output frames of
// 2^15 pixels and more its direct AMX kernel reads the same channels-last
// tensors 20-30 % faster (the Wan VAE decoder's 3x3x3 convs at 176x320 and
// 352x640: 96-192 channels, thread CPU time, both kernels interleaved in one
// process); on smaller frames (44x80, 88x160) brgconv is as fast or faster.
constexpr const char* kDirectAmx = "jit:avx512_core_amx_bf16";
constexpr int64_t kDirectAmxMinPixels = int64_t{1} << 15;

bool prefer_direct_amx(const Tensor& y) {
  const int n = y.ndim();  // [N, C, (D,) H, W]
  return n >= 4 && y.dim(n - 1) * y.dim(n - 2) >= kDirectAmxMinPixels;
}

// F32 3x3 stride-1 2-d convolutions run on oneDNN's Winograd kernels
// (AVX-512) where it has one: F(4x4, 3x3) (jit_wino_4x3, 36 multiplies per
// 4x4 output tile instead of 144) for wide layers, F(2x2, 3x3) for some
// narrow ones. Measured (one thread, thread CPU time,
// 256 -> 256 channels): 288^2 622 -> 310 ms, 144^2 151 -> 75 ms, 72^2 35 ->
// 17 ms; 1024 channels at 32^2 117 -> 62 ms (EfficientSAM3's pixel decoder
// and neck). Error against a double-precision convolution, relative to the
// output's largest magnitude: max 2.3-2.8e-6, mean 2.4-2.9e-7, against
// 1.5-2.4e-6 / 1.4-2.6e-7 for the direct kernel, i.e. the same few fp32 ulps
// of a 2304-term sum (the transforms' constants are small: 1, 2, 4, 8 and
// their inverses). Frames under 32^2 output pixels keep the direct kernel
// (too few 4x4 tiles to split; not measured to pay). Cost: the plan keeps
// the weights in oneDNN's Winograd layout too (6x6 per 3x3 kernel, 4x the
// f32 size: 151 MB for a 1024 -> 1024 conv), reordered on its first call.
constexpr int64_t kWinogradMinPixels = 32 * 32;

// BF16 3x3 stride-1 2-d convolutions take the same Winograd kernel on hosts
// where oneDNN's best bf16 convolution is vdpbf16ps (AVX-512 BF16, no AMX):
// an f32 convolution on the bf16 operands (exact in f32), i.e. the products
// a bf16 convolution forms, summed in fp32 with the transforms' few extra
// roundings (the bound above), then rounded to y's dtype as the direct
// kernel's fp32 sums are. F(4x4, 3x3) needs 4x fewer multiplies at half
// vdpbf16ps's rate. Measured (Zen 4, 2 threads, EfficientSAM3 at 1008^2,
// bf16, in the model, input and output reorders included): 256 -> 256 at
// 288^2 219 -> 197 ms (neck) and 227 -> 176 ms (pixel decoder), 144^2 57 ->
// 42 ms, 72^2 13.5 -> 12 ms; frame + prompt 1.97 -> 1.85 s. With AMX the
// direct bf16 kernel is several times faster, so there it stays. The f32
// Winograd weights (6x6 per 3x3 kernel, f32) take 8x the bf16 weights'
// bytes, so wide layers stay direct: the 1024 -> 1024 conv (41 -> 28 ms)
// would hold 151 MB. Frames under kWinogradMinPixels keep the bf16 kernel.
constexpr int64_t kWinogradBf16MaxWeights = 512 * 512 * 9;

// Whether a BF16 conv may take the f32 Winograd kernel on this host (the
// layer's shape and frame are try_winograd's to check, as for F32).
bool bf16_on_winograd(const ConvDesc& d) {
  static const bool host = [] {
    const auto isa = dnnl::get_effective_cpu_isa();
    const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    return (static_cast<unsigned>(isa) & bf16) == bf16 && isa < dnnl::cpu_isa::avx512_core_amx;
  }();
  return host && d.precision == Precision::BF16 && d.w.numel() <= kWinogradBf16MaxWeights;
}

// Whether a convolution takes the F32 1x1 GEMM route (top of file) on
// channels-last calls: from one 16-wide K step on, as F32 linears.
bool on_f32_gemm(const ConvDesc& d) {
  bool one_by_one = d.groups == 1 && d.precision == Precision::F32 && d.w.dim(1) >= 16;
  for (int i = 0; i < d.spatial_dims; ++i) {
    const auto s = static_cast<size_t>(i);
    one_by_one = one_by_one && d.w.dim(2 + i) == 1 && d.stride[s] == 1 && d.padding[s] == 0;
  }
  return one_by_one && linear_uses_avx512_f32();
}

struct PlanKey {
  Shape x_shape;
  std::array<int64_t, kMaxDims> x_strides, y_strides;
  DType x, y;
  Activation act;
  bool operator==(const PlanKey& o) const {
    return x_shape == o.x_shape && x_strides == o.x_strides && y_strides == o.y_strides &&
           x == o.x && y == o.y && act == o.act;
  }
};

struct Plan {
  PlanKey key;
  std::string impl;
  dnnl::convolution_forward prim;
  std::unordered_map<int, memory> args;
  memory src;
  memory weights_copy;                      // only when this shape wants another weight layout
  memory scratchpad;                        // data handles of scratchpad and src (when not
  size_t scratch_bytes = 0, src_bytes = 0;  // direct) set per call
  bool x_direct = false;
  std::optional<ReorderChain> x_in;
  ConvDst out;
};

class OnednnConv final : public PackedConv {
 public:
  // Packs w: its weights reordered into the blocked layout of the primitive.
  OnednnConv(const ConvDesc& d, ref::PreparedWeights w);
  // Weights reordered earlier (packed_tensors() of a conv of this process's
  // ISA and oneDNN) used in place: checks that `md` is the layout this
  // process's pack-time primitive asks for. Views kept alive by `storage`.
  static Expected<std::unique_ptr<OnednnConv>> adopt(const ConvDesc& d, const Tensor& md,
                                                     const Tensor& weights, const Tensor& scale,
                                                     const Tensor& bias,
                                                     std::shared_ptr<const void> storage);
  // Views of its state: the reordered weights (U8), their md (U8), the
  // scale and the bias (F32 [O], or empty tensors): see conv_cache.h.
  std::vector<Tensor> packed_tensors() const;
  const ConvDesc& desc() const override { return desc_; }
  // The Winograd kernels read nChw16c: oneDNN 2.7 reorders F32 NCHW maps
  // into it 2-2.5x faster than channels-last ones (jit:blk against jit:uni,
  // 256 channels at 288^2: 7.4 against 17 ms, Emerald Rapids). A BF16 layer
  // on them converts to f32 on the way, as slow from either layout (jit:uni,
  // 12-14 ms), so it keeps channels-last like every other layer.
  bool prefers_channels_last() const override {
    return desc_.precision != Precision::F32 || !winograd_layer();
  }
  void run(const Tensor& x, const Tensor& y, Activation act) const;
  std::string impl() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_impl_;
  }

 private:
  explicit OnednnConv(const ConvDesc& d);
  // Everything but the weights: scale and bias (views that bias_buf_ /
  // scale_buf_ own or storage_ keeps), the descriptor, the operand type.
  // Returns the weights layout of the pack-time primitive.
  memory::desc init(OwnedTensor scale, OwnedTensor bias);
  dnnl::primitive_attr attr(Activation act) const;
  dnnl::convolution_forward::desc op_desc(
      const memory::desc& src, const memory::desc& weights, const memory::desc& dst,
      dnnl::algorithm alg = dnnl::algorithm::convolution_direct) const;
  // Whether this layer is one try_winograd takes (frames large enough).
  bool winograd_layer() const;
  // oneDNN's Winograd convolution for this call, if it should and can run it.
  std::optional<dnnl::convolution_forward::primitive_desc> try_winograd(const Tensor& x,
                                                                        const Tensor& y,
                                                                        Activation act) const;
  // Empty when oneDNN has no implementation for these descriptors.
  std::optional<dnnl::convolution_forward::primitive_desc> try_primitive_desc(
      const memory::desc& src, const memory::desc& weights, const memory::desc& dst,
      Activation act) const;
  dnnl::convolution_forward::primitive_desc primitive_desc(const memory::desc& src,
                                                           const memory::desc& weights,
                                                           const memory::desc& dst,
                                                           Activation act) const {
    auto pd = try_primitive_desc(src, weights, dst, act);
    FLICK_CHECK(pd.has_value(), "oneDNN has no convolution for weight " + desc_.w.str());
    return *pd;
  }
  // The implementation named `impl` among oneDNN's candidates, if any.
  std::optional<dnnl::convolution_forward::primitive_desc> find_impl(const memory::desc& src,
                                                                     const memory::desc& weights,
                                                                     const memory::desc& dst,
                                                                     Activation act,
                                                                     const std::string& impl) const;
  Plan& plan(const PlanKey& key, const Tensor& x, const Tensor& y) const;
  // The GEMM route of F32 1x1 convolutions (top of file): packs gemm_w_
  // from the plain [O, I] weights when this convolution qualifies.
  void init_gemm(const Tensor& w_plain);
  void run_gemm(const Tensor& x, const Tensor& y, Activation act) const;
  void build(Plan& p, const Tensor& x, const Tensor& y) const;
  memory::dims weight_dims() const { return conv_weight_dims(desc_); }

  ConvDesc desc_;
  int64_t out_channels_;
  odt src_type_;
  // BF16 / FP8 where oneDNN has no bf16 kernels (below AVX-512): an f32
  // convolution on the same bf16-rounded operands (see matmul.cpp). A BF16
  // plan on the f32 Winograd kernel (bf16_on_winograd) does the same for
  // its call shape only.
  bool emulate_bf16_ = false;
  OwnedTensor bias_buf_, scale_buf_;     // owned, or views into storage_
  memory bias_, scale_, weights_;        // weights_ owns its bytes unless adopted
  memory::desc weights_md_;              // weights_'s, for packed_tensors()
  std::shared_ptr<const void> storage_;  // adopted weights, scale and bias
  AmxWeights gemm_w_;                    // F32 1x1 on the GEMM, else empty (n = 0)

  mutable std::mutex mu_;  // guards plans_ and last_impl_
  mutable std::vector<std::unique_ptr<Plan>> plans_;
  mutable std::string last_impl_;
};

OnednnConv::OnednnConv(const ConvDesc& d)
    : desc_(d),
      out_channels_(d.w.dim(0)),
      src_type_(d.precision == Precision::F32 ? odt::f32 : odt::bf16) {}

memory::desc OnednnConv::init(OwnedTensor scale, OwnedTensor bias) {
  FLICK_CHECK(desc_.precision != Precision::INT8, "INT8 convolutions are conv_int8.cpp's");
  const auto& eng = onednn_engine();
  const int sd = desc_.spatial_dims;
  bias_buf_ = std::move(bias);
  scale_buf_ = std::move(scale);
  if (!bias_buf_.t.empty())
    bias_ = memory({{out_channels_}, odt::f32, tag::a}, eng, bias_buf_.t.data);
  if (!scale_buf_.t.empty()) {
    memory::dims sdims(static_cast<size_t>(sd + 2), 1);
    sdims[1] = out_channels_;
    scale_ = memory({sdims, odt::f32, sd == 2 ? tag::abcd : tag::abcde}, eng, scale_buf_.t.data);
  }
  // The descriptor keeps shapes and dtypes (prepare_weights' operand type);
  // the weights live reordered here.
  const Shape w_shape = desc_.w.shape;
  desc_.w = Tensor{};
  desc_.w.dtype = src_type_ == odt::f32 ? DType::F32 : DType::BF16;
  desc_.w.shape = w_shape;
  desc_.w_scale = scale_buf_.t.empty() ? Tensor{} : scale_buf_.t.reshape({out_channels_});
  desc_.bias = bias_buf_.t;

  const ConvPackShapes pack = conv_pack_shapes(desc_);
  auto pack_pd = [&] {
    return try_primitive_desc(memory::desc(pack.x, src_type_, pack.channels_last),
                              memory::desc(weight_dims(), src_type_, tag::any),
                              memory::desc(pack.y, src_type_, pack.channels_last),
                              Activation::None);
  };
  auto pd = pack_pd();
  if (!pd && src_type_ == odt::bf16) {
    emulate_bf16_ = true;
    src_type_ = odt::f32;
    pd = pack_pd();
  }
  FLICK_CHECK(pd.has_value(), "oneDNN has no convolution for weight " + desc_.w.str());
  last_impl_ = impl_name(*pd, "conv " + desc_.w.str());
  return pd->weights_desc();
}

OnednnConv::OnednnConv(const ConvDesc& d, ref::PreparedWeights w) : OnednnConv(d) {
  const auto& eng = onednn_engine();
  weights_md_ = init(std::move(w.scale), std::move(w.bias));
  weights_ = memory(weights_md_, eng);
  memory plain_w({weight_dims(), onednn_dtype(w.w.t.dtype), plain_weight_tag(weight_dims())}, eng,
                 w.w.t.data);
  dnnl::reorder(plain_w, weights_).execute(onednn_stream(), plain_w, weights_);
  onednn_stream().wait();
  init_gemm(w.w.t);
}

void OnednnConv::init_gemm(const Tensor& w_plain) {
  if (!on_f32_gemm(desc_)) return;
  gemm_w_ = amx_pack_weights(w_plain.reshape({out_channels_, desc_.w.dim(1)}), AmxType::F32);
}

void OnednnConv::run_gemm(const Tensor& x, const Tensor& y, Activation act) const {
  const int64_t k = x.dim(1), n = out_channels_, m = x.numel() / k;
  AmxEpilogue e;
  e.bias = bias_buf_.t.empty() ? nullptr : bias_buf_.t.ptr<float>();
  e.act = act;
  e.y = ref::RowsView{y.data, y.dtype, m, n, n};
  vnni_gemm_float_rows(ref::RowsView{x.data, x.dtype, m, k, k}, gemm_w_, e, amx_call_buffers());
  last_impl_ = "flick:avx512_f32 (1x1 as GEMM)";
}

Expected<std::unique_ptr<OnednnConv>> OnednnConv::adopt(const ConvDesc& d, const Tensor& md,
                                                        const Tensor& weights, const Tensor& scale,
                                                        const Tensor& bias,
                                                        std::shared_ptr<const void> storage) {
  std::unique_ptr<OnednnConv> c(new OnednnConv(d));
  c->storage_ = std::move(storage);
  OwnedTensor s, b;  // views into the entry
  s.t = scale;
  b.t = bias;
  const memory::desc want = c->init(std::move(s), std::move(b));
  FLICK_TRY(check_adopted_weights(md, weights, want));
  // oneDNN only reads weights: the read-only mapping is fine.
  c->weights_ = memory(want, onednn_engine(), const_cast<void*>(weights.data));
  c->weights_md_ = want;
  if (on_f32_gemm(d)) {
    // The GEMM route packs from plain weights: reordered back from the entry.
    OwnedTensor plain(DType::F32, d.w.shape);
    memory plain_w({c->weight_dims(), odt::f32, plain_weight_tag(c->weight_dims())},
                   onednn_engine(), plain.t.data);
    dnnl::reorder(c->weights_, plain_w).execute(onednn_stream(), c->weights_, plain_w);
    onednn_stream().wait();
    c->init_gemm(plain.t);
  }
  return c;
}

std::vector<Tensor> OnednnConv::packed_tensors() const {
  return {Tensor::view(weights_.get_data_handle(), DType::U8,
                       Shape{static_cast<int64_t>(weights_md_.get_size())}),
          md_bytes(weights_md_), scale_buf_.t, bias_buf_.t};
}

dnnl::primitive_attr OnednnConv::attr(Activation act) const {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops po;
  if (scale_) {
    po.append_binary(dnnl::algorithm::binary_mul, scale_.get_desc());
    if (bias_) po.append_binary(dnnl::algorithm::binary_add, scale_.get_desc());
  }
  append_activation(po, act);
  attr.set_post_ops(po);
  return attr;
}

dnnl::convolution_forward::desc OnednnConv::op_desc(const memory::desc& src,
                                                    const memory::desc& weights,
                                                    const memory::desc& dst,
                                                    dnnl::algorithm alg) const {
  const auto [strides, dilation, pad] = conv_geometry(desc_);
  const auto kind = dnnl::prop_kind::forward_inference;
  if (bias_ && !scale_) {  // FP8 adds the bias after the scale, as a post-op
    return {kind, alg, src, weights, bias_.get_desc(), dst, strides, dilation, pad, pad};
  }
  return {kind, alg, src, weights, dst, strides, dilation, pad, pad};
}

std::optional<dnnl::convolution_forward::primitive_desc> OnednnConv::try_primitive_desc(
    const memory::desc& src, const memory::desc& weights, const memory::desc& dst,
    Activation act) const {
  try {
    const auto od = op_desc(src, weights, dst);
    return dnnl::convolution_forward::primitive_desc(od, attr(act), onednn_engine());
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

std::optional<dnnl::convolution_forward::primitive_desc> OnednnConv::find_impl(
    const memory::desc& src, const memory::desc& weights, const memory::desc& dst, Activation act,
    const std::string& impl) const {
  try {
    const auto od = op_desc(src, weights, dst);  // outlives first_impl's iteration
    return first_impl(dnnl::convolution_forward::primitive_desc(od, attr(act), onednn_engine()),
                      [&](const std::string& name) { return name == impl; });
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

bool OnednnConv::winograd_layer() const {
  const ConvDesc& d = desc_;
  const bool f32 = src_type_ == odt::f32 || bf16_on_winograd(d);
  return f32 && !scale_ && d.spatial_dims == 2 && d.groups == 1 && d.w.dim(2) == 3 &&
         d.w.dim(3) == 3 && d.stride[0] == 1 && d.stride[1] == 1 && d.dilation[0] == 1 &&
         d.dilation[1] == 1;
}

std::optional<dnnl::convolution_forward::primitive_desc> OnednnConv::try_winograd(
    const Tensor& x, const Tensor& y, Activation act) const {
  const int n = y.ndim();
  if (n != 4 || !winograd_layer() || y.dim(n - 1) * y.dim(n - 2) < kWinogradMinPixels)
    return std::nullopt;
  try {
    const memory::desc src(dims_of(x), odt::f32, tag::any), dst(dims_of(y), odt::f32, tag::any);
    const auto od = op_desc(src, memory::desc(weight_dims(), odt::f32, tag::any), dst,
                            dnnl::algorithm::convolution_winograd);
    return dnnl::convolution_forward::primitive_desc(od, attr(act), onednn_engine());
  } catch (const dnnl::error&) {  // no Winograd kernel for this ISA / channel count
    return std::nullopt;
  }
}

Plan& OnednnConv::plan(const PlanKey& key, const Tensor& x, const Tensor& y) const {
  return find_or_build_plan(plans_, key, [&](Plan& p) { build(p, x, y); });
}

void OnednnConv::build(Plan& p, const Tensor& x, const Tensor& y) const {
  const auto& eng = onednn_engine();
  const odt y_type = onednn_dtype(y.dtype);
  const odt dst_type = src_type_ == odt::f32 ? odt::f32 : y_type;
  const memory::desc x_md(dims_of(x), onednn_dtype(x.dtype), strides_of(x));
  const memory::desc y_md(dims_of(y), y_type, strides_of(y));
  // Channels-last x: convolve in place in that layout; otherwise blocked.
  const bool cl = channels_last(x);
  const tag cl_tag = x.ndim() == 4 ? tag::nhwc : tag::ndhwc;
  const memory::desc src_md = cl ? memory::desc(dims_of(x), src_type_, strides_of(x))
                                 : memory::desc(dims_of(x), src_type_, tag::any);
  const memory::desc dst_md = cl && channels_last(y)
                                  ? memory::desc(dims_of(y), dst_type, strides_of(y))
                                  : memory::desc(dims_of(y), dst_type, cl ? cl_tag : tag::any);

  // Prefer the packed weights; re-layout only if this shape's best
  // implementation wants another layout.
  const memory::desc any_weights(weight_dims(), src_type_, tag::any);
  auto best = primitive_desc(src_md, any_weights, dst_md, p.key.act);
  bool f32_wino_of_bf16 = false;  // x rounded to bf16 as emulate_bf16_ does
  if (auto wino = try_winograd(x, y, p.key.act)) {
    best = *wino;
    f32_wino_of_bf16 = src_type_ != odt::f32;
  } else if (prefer_direct_amx(y)) {
    if (auto direct = find_impl(src_md, any_weights, dst_md, p.key.act, kDirectAmx)) best = *direct;
  }
  auto pd = pd_on_packed_weights(best, weights_.get_desc(), [&](const memory::desc& packed) {
    return try_primitive_desc(src_md, packed, dst_md, p.key.act);
  });
  memory weights = weights_;
  if (!pd) {
    pd = best;
    p.weights_copy = memory(best.weights_desc(), eng);
    // oneDNN reorders into its Winograd weight format only from a plain one
    // (of its f32 type: bf16 packed weights convert exactly).
    const bool via_plain = best.weights_desc().data.format_kind == dnnl_format_kind_wino;
    memory from = weights;
    if (via_plain) {
      from = memory(
          {weight_dims(), best.weights_desc().data_type(), plain_weight_tag(weight_dims())}, eng);
      dnnl::reorder(weights, from).execute(onednn_stream(), weights, from);
    }
    dnnl::reorder(from, p.weights_copy).execute(onednn_stream(), from, p.weights_copy);
    weights = p.weights_copy;
    log_debug("conv " + desc_.w.str() + ": input " + x.str() + " uses its own weight layout");
  }
  p.impl = impl_name(*pd, "conv " + desc_.w.str() + " on " + x.str());
  p.prim = dnnl::convolution_forward(*pd);
  p.scratch_bytes = pd->scratchpad_desc().get_size();
  p.scratchpad = memory(pd->scratchpad_desc(), eng, DNNL_MEMORY_NONE);

  p.x_direct = !emulate_bf16_ && pd->src_desc() == x_md;
  if (!p.x_direct) p.src_bytes = pd->src_desc().get_size();
  p.src = memory(pd->src_desc(), eng, DNNL_MEMORY_NONE);
  if (!p.x_direct) p.x_in.emplace(x_md, p.src, emulate_bf16_ || f32_wino_of_bf16);
  p.out = ConvDst(pd->dst_desc(), y_md);

  p.args = {{DNNL_ARG_SRC, p.src},
            {DNNL_ARG_WEIGHTS, weights},
            {DNNL_ARG_DST, p.out.arg()},
            {DNNL_ARG_SCRATCHPAD, p.scratchpad}};
  if (scale_) {
    p.args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = scale_;
    if (bias_) {
      p.args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1] =
          memory(scale_.get_desc(), eng, bias_buf_.t.data);
    }
  } else if (bias_) {
    p.args[DNNL_ARG_BIAS] = bias_;
  }
}

void OnednnConv::run(const Tensor& x, const Tensor& y, Activation act) const {
  // The plan's memory objects carry this call's data handles, so one call
  // at a time per convolution (calls on different convolutions overlap).
  std::lock_guard<std::mutex> lock(mu_);
  if (gemm_w_.n > 0 && channels_last(x) && channels_last(y)) return run_gemm(x, y, act);
  Plan& p = plan({x.shape, x.strides, y.strides, x.dtype, y.dtype, act}, x, y);
  last_impl_ = p.impl;
  dnnl::stream& s = onednn_stream();
  CallBuffers& buf = onednn_call_buffers();
  p.scratchpad.set_data_handle(buf.get(CallBuffers::kScratchpad, p.scratch_bytes));
  if (p.x_direct) {
    p.src.set_data_handle(x.data);
  } else {
    p.src.set_data_handle(buf.get(CallBuffers::kSrc, p.src_bytes));
    p.x_in->run(s, x.data);
  }
  p.out.bind(buf, y.data);
  p.prim.execute(s, p.args);
  p.out.finish(s);
  s.wait();
}

const OnednnConv& as_onednn(const PackedConv& w) {
  const auto* c = dynamic_cast<const OnednnConv*>(&w);
  FLICK_CHECK(c != nullptr, "weights were packed by another backend");
  return *c;
}

}  // namespace

std::string conv_impl(const PackedConv& w) {
  return is_conv_int8(w) ? conv_int8_impl(w) : as_onednn(w).impl();
}

std::unique_ptr<PackedConv> pack_conv(const ConvDesc& d) {
  FLICK_CHECK(d.spatial_dims == 2 || d.spatial_dims == 3, "conv spatial_dims must be 2 or 3");
  FLICK_CHECK(d.w.ndim() == d.spatial_dims + 2, "conv weight rank: " + d.w.str());
  if (d.precision == Precision::INT8) return pack_conv_int8(d);  // conv_int8.cpp
  FLICK_CHECK(d.groups >= 1 && d.w.dim(0) % d.groups == 0, "conv groups must divide O");
  return std::make_unique<OnednnConv>(d, ref::prepare_weights(d.w, d.w_scale, d.bias, d.precision));
}

void conv(const Tensor& x, const PackedConv& w, Tensor& y, Activation act) {
  const bool int8 = is_conv_int8(w);
  const ConvDesc& d = int8 ? w.desc() : as_onednn(w).desc();
  const int sd = d.spatial_dims;
  FLICK_CHECK(x.ndim() == sd + 2 && y.ndim() == sd + 2,
              "conv ranks: x " + x.str() + ", y " + y.str() + ", weight " + d.w.str());
  FLICK_CHECK(x.dim(1) == d.w.dim(1) * d.groups && y.dim(1) == d.w.dim(0) && y.dim(0) == x.dim(0),
              "conv channels: x " + x.str() + ", y " + y.str() + ", weight " + d.w.str());
  for (int i = 0; i < sd; ++i) {
    const auto s = static_cast<size_t>(i);
    const int64_t ek = (d.w.dim(2 + i) - 1) * d.dilation[s] + 1;
    FLICK_CHECK(y.dim(2 + i) == (x.dim(2 + i) + 2 * d.padding[s] - ek) / d.stride[s] + 1,
                "conv output size: x " + x.str() + ", y " + y.str() + ", weight " + d.w.str());
  }
  FLICK_CHECK((x.dtype == DType::F32 || x.dtype == DType::BF16) &&
                  (y.dtype == DType::F32 || y.dtype == DType::BF16),
              "conv: x and y must be F32 or BF16");
  if (x.numel() == 0 || y.numel() == 0) return;
  if (int8) return conv_int8(x, w, y, act);
  as_onednn(w).run(x, y, act);
}

// ---- packed convolutions through the plan cache (conv_cache.h) ----

namespace {

// meta: layout, format version, precision, O, K, has scale, has bias,
// INT8's activation encoding + 1 (0 otherwise). Bump kPackedFormat when a
// layout's bytes change.
enum PackedLayout : int32_t { kLayoutOnednn = 1, kLayoutInt8 = 2 };
constexpr int32_t kPackedFormat = 1;
constexpr int32_t kMetaLen = 8;

// A bias given by its shape alone (adopt's d) or by its data.
bool layer_has_bias(const ConvDesc& d) { return d.bias.ndim() > 0; }

int32_t act_code(const ConvDesc& d) {
  return d.precision == Precision::INT8 ? static_cast<int32_t>(ref::conv_int8_act()) + 1 : 0;
}

std::string joined(const std::array<int64_t, 3>& v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    if (i > 0) s += ',';
    s += std::to_string(v[static_cast<size_t>(i)]);
  }
  return s;
}

}  // namespace

std::vector<Tensor> packed_conv_tensors(const PackedConv& w) {
  // Rebuilt per call into thread-local storage (PlanCache::store copies it
  // before the next call on this thread), as packed_linear_tensors does.
  thread_local int32_t meta[kMetaLen];
  const bool int8 = is_conv_int8(w);
  const ConvDesc& d = w.desc();
  std::vector<Tensor> p = int8 ? int8_conv_tensors(w) : as_onednn(w).packed_tensors();
  const Tensor& scale = int8 ? p[3] : p[2];
  const Tensor& bias = p.back();
  const int64_t o = d.w.dim(0);
  const int32_t m[kMetaLen] = {int8 ? kLayoutInt8 : kLayoutOnednn,
                               kPackedFormat,
                               static_cast<int32_t>(d.precision),
                               static_cast<int32_t>(o),
                               static_cast<int32_t>(d.w.numel() / o),
                               !scale.empty(),
                               !bias.empty(),
                               act_code(d)};
  std::copy(m, m + kMetaLen, meta);
  std::vector<Tensor> t{Tensor::view(meta, DType::I32, Shape{kMetaLen}), p[0], p[1]};
  if (int8) t.push_back(p[2]);
  if (!scale.empty()) t.push_back(scale);
  if (!bias.empty()) t.push_back(bias);
  return t;
}

Expected<std::unique_ptr<PackedConv>> adopt_packed_conv(std::span<const Tensor> t,
                                                        const ConvDesc& d,
                                                        std::shared_ptr<const void> storage) {
  if (t.empty() || t[0].dtype != DType::I32 || t[0].shape != Shape{kMetaLen})
    return invalid_input("is not a packed convolution");
  const int32_t* m = t[0].ptr<const int32_t>();
  const bool int8 = d.precision == Precision::INT8;
  const int64_t o = d.w.dim(0), k = d.w.numel() / o;
  if (m[0] != (int8 ? kLayoutInt8 : kLayoutOnednn) || m[1] != kPackedFormat ||
      m[2] != static_cast<int32_t>(d.precision) || m[3] != o || m[4] != k || m[7] != act_code(d))
    return invalid_input("holds another layout, precision or shape than this process packs");
  const bool has_scale = m[5] != 0, has_bias = m[6] != 0;
  const bool wants_scale = int8 || d.precision == Precision::FP8;
  if (has_scale != wants_scale || has_bias != layer_has_bias(d))
    return invalid_input("has scales or a bias where the layer has none, or none where it has");
  const size_t fixed = int8 ? 4 : 3;  // meta, packed, md (, s8 weights)
  if (t.size() != fixed + has_scale + has_bias)
    return invalid_input("has " + std::to_string(t.size()) + " tensors");
  const Shape vec{o};
  auto f32_vec = [&](const Tensor& v) { return v.dtype == DType::F32 && v.shape == vec; };
  const Tensor scale = has_scale ? t[fixed] : Tensor{};
  const Tensor bias = has_bias ? t[fixed + has_scale] : Tensor{};
  if ((has_scale && !f32_vec(scale)) || (has_bias && !f32_vec(bias)))
    return invalid_input("has scales or a bias of the wrong shape");
  if (int8) {
    if (t[3].dtype != DType::I8 || t[3].shape != Shape{o, k})
      return invalid_input("has s8 weights of the wrong shape");
    return adopt_int8_conv(d, t[2], t[1], t[3], scale, bias, std::move(storage));
  }
  FLICK_ASSIGN_OR_RETURN(std::unique_ptr<OnednnConv> c,
                         OnednnConv::adopt(d, t[2], t[1], scale, bias, std::move(storage)));
  return std::unique_ptr<PackedConv>(std::move(c));
}

std::string packed_conv_kind(const ConvDesc& d) {
  const int n = d.spatial_dims;
  std::string layout = "onednn";
  if (d.precision == Precision::INT8)
    layout = ref::conv_int8_act() == ref::ConvInt8Act::U8 ? "onednn-u8s8" : "onednn-s8s8";
  return "packed-conv-v" + std::to_string(kPackedFormat) + " " + layout + " " +
         precision_name(d.precision) + " w " + d.w.shape.str() + " stride " + joined(d.stride, n) +
         " padding " + joined(d.padding, n) + " dilation " + joined(d.dilation, n) + " groups " +
         std::to_string(d.groups) + (layer_has_bias(d) ? " bias" : "");
}

Expected<std::unique_ptr<PackedConv>> pack_conv_cached(
    std::string_view layer, const ConvDesc& d,
    const std::function<Expected<std::unique_ptr<PackedConv>>()>& pack) {
  return plan_cached_object<PackedConv>(
      layer, packed_conv_kind(d),
      [&]() -> Expected<std::unique_ptr<PackedConv>> {
        FLICK_ASSIGN_OR_RETURN(std::unique_ptr<PackedConv> c, pack());
        FLICK_CHECK(c->desc().w.shape == d.w.shape && c->desc().precision == d.precision,
                    "pack_conv_cached: pack() made another convolution");
        return c;
      },
      packed_conv_tensors,
      [&](const PlanEntry& e) { return adopt_packed_conv(e.tensors(), d, e.storage()); });
}

}  // namespace flick::cpu
