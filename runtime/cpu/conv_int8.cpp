// CPU INT8 convolution (2-d and 3-d) on oneDNN: s8 weights per output channel
// (ref::prepare_weights), activations quantized per call and tensor
// (ref/conv_int8.h), a u8 (or s8) x s8 -> int32 oneDNN convolution, then
//   post-ops: acc * (x_scale * w_scale[o]) (binary_mul, per call), + the
//   call's bias (binary_add, below), activation; stored in y's dtype.
//
// Activation scale: dynamic, from this call's max |x| (S8) or min / max
// (U8): exact to the call's range, never clipping. It costs a pass over x
// (max |x| on the raw bf16 bits, then quantize into a dense channels-last
// buffer; AVX-512, multi-threaded): ~0.4 ns per value on one core, measured
// in the Wan VAE decoder at ~30 % of an int8 192-channel 3^3 conv at
// 176x320 whose 3-frame causal input has 2 cached frames (re-quantized every
// call, since the scale changes) and ~5-10 % at 384 channels. A static
// scale from a calibration run would save the first pass only, and clips
// wherever a video leaves the calibration range (the decoder's activation
// ranges follow the content); a cheaper estimate (a sample of x) clips too.
//
// Encoding: ref::conv_int8_act (U8 with a zero point zp). The zero point is
// not oneDNN's (its runtime src zero point is wrong in 2.6's AMX int8 conv
// on spatially padded 3-d inputs): the quantize pass writes x into a buffer
// padded explicitly with q = zp (x = 0), oneDNN convolves it without padding
// (u8 x s8, the instructions' own operand types: no s8s8 compensation), and
// the call's bias takes the zero point out:
//   sum (q - zp) w = sum q w - zp * wsum[o]   (exact in int32)
//   y = acc * s[o] + (bias[o] - zp * wsum[o] * s[o]),  s[o] = x_scale * w_scale[o]
// so each output differs from the reference's (acc - zp wsum) * s + bias by
// fp32 rounding only.
//
// Layouts: the quantized x is always dense channels-last (the layout
// oneDNN's int8 kernels read), padded; y channels-last is written in place,
// any other y through a staging buffer and a reorder, as in conv.cpp.
//
// 1x1 convs (unit kernel and strides, no padding, one group) into a dense
// channels-last y are the GEMM [pixels, C] x [O, C]^T over the same codes:
// on AMX hosts they run on flick's AMX GEMM (gemm.h, as INT8 linear layers
// do) with s8 codes q - 128 and 128 * wsum[o] * s[o] added to the call's
// bias (which already takes the zero point out), the integer sums being
// the same. oneDNN 2.6's
// brgconv_1x1:avx512_core_amx_int8 ran EfficientSAM3's neck 1x1s at 90-690
// GOPS on an Emerald Rapids (2 threads; the GEMM 1.2-1.5 TOPS at the same
// shapes: the neck's four 1x1s 150 -> 47-80 ms). Without AMX they stay on
// oneDNN: flick's VNNI GEMM was only ~25 % faster there (ISA capped on the
// same host) and moved the 224^2 golden's int8 boxes by more than its
// bound allows for summation-order changes (0.57 -> 0.60 px mean).
#include "runtime/cpu/conv_int8.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/cpu/conv_onednn.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/onednn_info.h"
#include "runtime/cpu/onednn_util.h"
#include "runtime/cpu/ops.h"
#include "runtime/ref/matmul_common.h"
#include "runtime/threads.h"

namespace flick::cpu {
namespace {

using dnnl::memory;
using odt = memory::data_type;
using tag = memory::format_tag;

// The activation passes run over blocks of this many values, one block per
// task (the min / max of each block kept apart, then reduced).
constexpr int64_t kBlock = int64_t{1} << 16;

// oneDNN's brgemm int8 convolution without AMX ("brgconv:avx512_core_vnni",
// v2.6.3 as Debian 12 ships it) computes some 3-d convolutions wrong: a
// 3x3x3 conv with 320-384 channels, spatial padding 1 and rows of 128-160
// pixels gives garbage (relative error ~9; tests/ops/test_conv_int8.cpp,
// ConvInt8.WideCausalConv), which took the Wan VAE decoder's INT8 frames to
// 10 dB from BF16 on a Zen 4. Bit-identical to jit_int8 at every other shape
// tried, so the fault is narrow, but its bounds are unknown: without AMX the
// int8 convs take the next implementation (jit_int8, measured as fast over
// the whole decoder: 3.16 s against 3.15 s per frame of a 3-latent block on
// Zen 4). The AMX brgconv is a different kernel, correct at these shapes.
bool trusted_int8_impl(const std::string& name) {
  return name.rfind("brg", 0) != 0 || name.find("amx") != std::string::npos;
}

struct PlanKey {
  Shape x_shape;
  std::array<int64_t, kMaxDims> y_strides;
  DType y;
  Activation act;
  bool operator==(const PlanKey& o) const {
    return x_shape == o.x_shape && y_strides == o.y_strides && y == o.y && act == o.act;
  }
};

struct Plan {
  PlanKey key;
  std::string impl;
  dnnl::convolution_forward prim;
  std::unordered_map<int, memory> args;
  memory src, scratchpad;
  memory weights_copy;  // only when this shape wants another weight layout
  size_t scratch_bytes = 0;
  ConvDst out;
};

class Int8Conv final : public PackedConv {
 public:
  Int8Conv(const ConvDesc& d, ref::PreparedWeights w);
  // Weights reordered earlier (packed_tensors() of a conv of this process's
  // ISA and oneDNN) used in place: checks that `md` is the layout this
  // process's pack-time primitive asks for. Views kept alive by `storage`.
  static Expected<std::unique_ptr<Int8Conv>> adopt(const ConvDesc& d, const Tensor& md,
                                                   const Tensor& weights, const Tensor& w_plain,
                                                   const Tensor& w_scale, const Tensor& bias,
                                                   std::shared_ptr<const void> storage);
  // Views of its state: the reordered weights (U8), their md (U8), the s8
  // weights [O, K], their scales F32 [O] and the bias (F32 [O] or an empty
  // tensor): see conv_cache.h.
  std::vector<Tensor> packed_tensors() const;
  const ConvDesc& desc() const override { return desc_; }
  void run(const Tensor& x, const Tensor& y, Activation act) const;
  std::string impl() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_impl_;
  }

 private:
  dnnl::primitive_attr attr(Activation act) const;
  std::optional<dnnl::convolution_forward::primitive_desc> try_primitive_desc(
      const memory::desc& src, const memory::desc& weights, const memory::desc& dst,
      Activation act) const;
  explicit Int8Conv(const ConvDesc& d);
  // Everything but the reordered weights, from the s8 weights [O, K], their
  // scales and the bias (owned, or views storage_ keeps): returns the
  // weights layout of the pack-time primitive.
  memory::desc init(OwnedTensor w_plain, OwnedTensor w_scale, OwnedTensor bias);
  memory::dims weight_dims() const { return conv_weight_dims(desc_); }
  Plan& plan(const PlanKey& key, const Tensor& x, const Tensor& y) const;
  void build(Plan& p, const Tensor& x, const Tensor& y) const;
  // dims [N, C, spatial...] with the explicit padding added.
  memory::dims padded(memory::dims d) const;
  // x as dense channels-last q, padded (CallBuffers::kSrc); sets the call's
  // scales and bias.
  void quantize(const Tensor& x, uint8_t* q) const;
  // The GEMM route of 1x1 convs (top of file): packs gemm_w_ when this conv
  // and host take it.
  void init_gemm();
  void run_gemm(const Tensor& x, const Tensor& y, Activation act) const;
  // quantize's second pass with explicit padding: x's values, dense
  // channels-last at `data`.
  void quantize_padded(const Tensor& x, const void* data, const ref::ConvInt8Quant& p,
                       uint8_t* q) const;

  ConvDesc desc_;
  int64_t out_channels_;
  ref::ConvInt8Act act_enc_;
  odt src_type_;
  // The s8 weights [O, I/g * k...] as prepared: the source of the layout a
  // plan may want beside the packed one (I8 weights are a quarter of the
  // F32 ones the loader frees).
  OwnedTensor w_plain_, w_scale_, bias_buf_;
  std::vector<int32_t> w_sum_;      // [O]: sum of the s8 weights of output o
  std::vector<int64_t> pad_;        // per spatial dim, both sides (desc_'s padding)
  mutable OwnedTensor call_scale_;  // F32 [O]: x_scale * w_scale[o] of the call
  mutable OwnedTensor call_bias_;   // F32 [O]: bias[o] - zp * wsum[o] * call_scale[o]
  memory weights_, scale_mem_, add_mem_;
  memory::desc weights_md_;              // weights_'s, for packed_tensors()
  std::shared_ptr<const void> storage_;  // adopted weights, scales and bias
  mutable memory plain_w_;               // over w_plain_ (reorder takes a non-const source)
  memory::desc oc_md_;                   // [1, O, 1, 1(, 1)] f32: the per-channel post-op operand
  // The GEMM route's s8 weights as B tiles (n = 0 where the conv is no
  // plain 1x1 or the host has no AMX).
  AmxWeights gemm_w_;

  mutable std::mutex mu_;  // guards the plans, the call's scales and last_impl_
  mutable std::vector<std::unique_ptr<Plan>> plans_;
  mutable std::string last_impl_;
};

Int8Conv::Int8Conv(const ConvDesc& d)
    : desc_(d),
      out_channels_(d.w.dim(0)),
      act_enc_(ref::conv_int8_act()),
      src_type_(act_enc_ == ref::ConvInt8Act::U8 ? odt::u8 : odt::s8) {}

memory::desc Int8Conv::init(OwnedTensor w_plain, OwnedTensor w_scale, OwnedTensor bias) {
  const auto& eng = onednn_engine();
  const int sd = desc_.spatial_dims;
  w_plain_ = std::move(w_plain);
  w_scale_ = std::move(w_scale);
  bias_buf_ = std::move(bias);
  call_scale_ = OwnedTensor(DType::F32, Shape{out_channels_});
  call_bias_ = OwnedTensor(DType::F32, Shape{out_channels_});
  memory::dims oc(static_cast<size_t>(sd + 2), 1);
  oc[1] = out_channels_;
  oc_md_ = memory::desc(oc, odt::f32, sd == 2 ? tag::abcd : tag::abcde);
  scale_mem_ = memory(oc_md_, eng, call_scale_.t.data);
  // U8 always adds (the zero point's term); S8 only a bias.
  if (!bias_buf_.t.empty() || act_enc_ == ref::ConvInt8Act::U8)
    add_mem_ = memory(oc_md_, eng, call_bias_.t.data);
  for (int64_t p : conv_geometry(desc_).padding) pad_.push_back(p);
  {
    const int64_t k = w_plain_.t.numel() / out_channels_;
    const int8_t* wp = w_plain_.t.ptr<const int8_t>();
    w_sum_.assign(static_cast<size_t>(out_channels_), 0);
    for (int64_t o = 0; o < out_channels_; ++o)
      for (int64_t i = 0; i < k; ++i) w_sum_[static_cast<size_t>(o)] += wp[o * k + i];
  }
  const Shape w_shape = desc_.w.shape;
  desc_.w = Tensor{};
  desc_.w.dtype = DType::I8;
  desc_.w.shape = w_shape;
  desc_.w_scale = w_scale_.t;
  desc_.bias = bias_buf_.t;
  plain_w_ =
      memory({weight_dims(), odt::s8, plain_weight_tag(weight_dims())}, eng, w_plain_.t.data);

  const ConvPackShapes pack = conv_pack_shapes(desc_);
  auto pd =
      try_primitive_desc(memory::desc(padded(pack.x), src_type_, pack.channels_last),
                         memory::desc(weight_dims(), odt::s8, tag::any),
                         memory::desc(pack.y, odt::bf16, pack.channels_last), Activation::None);
  FLICK_CHECK(pd.has_value(), "oneDNN has no INT8 convolution for weight " + desc_.w.str());
  last_impl_ = impl_name(*pd, "int8 conv " + desc_.w.str());
  init_gemm();
  return pd->weights_desc();
}

void Int8Conv::init_gemm() {
  const ConvGeometry g = conv_geometry(desc_);
  bool plain = desc_.groups == 1;
  for (size_t i = 0; i < g.padding.size(); ++i)
    plain = plain && desc_.w.dim(2 + static_cast<int>(i)) == 1 && g.strides[i] == 1 &&
            g.padding[i] == 0;
  if (!plain || !linear_uses_amx()) return;
  const int64_t k = w_plain_.t.numel() / out_channels_;
  gemm_w_ = amx_pack_weights(w_plain_.t.reshape({out_channels_, k}), AmxType::S8);
}

Int8Conv::Int8Conv(const ConvDesc& d, ref::PreparedWeights w) : Int8Conv(d) {
  weights_md_ = init(std::move(w.w), std::move(w.scale), std::move(w.bias));
  weights_ = memory(weights_md_, onednn_engine());
  dnnl::reorder(plain_w_, weights_).execute(onednn_stream(), plain_w_, weights_);
  onednn_stream().wait();
}

Expected<std::unique_ptr<Int8Conv>> Int8Conv::adopt(const ConvDesc& d, const Tensor& md,
                                                    const Tensor& weights, const Tensor& w_plain,
                                                    const Tensor& w_scale, const Tensor& bias,
                                                    std::shared_ptr<const void> storage) {
  std::unique_ptr<Int8Conv> c(new Int8Conv(d));
  c->storage_ = std::move(storage);
  OwnedTensor p, s, b;  // views into the entry
  p.t = w_plain;
  s.t = w_scale;
  b.t = bias;
  const memory::desc want = c->init(std::move(p), std::move(s), std::move(b));
  FLICK_TRY(check_adopted_weights(md, weights, want));
  // oneDNN only reads weights: the read-only mapping is fine.
  c->weights_ = memory(want, onednn_engine(), const_cast<void*>(weights.data));
  c->weights_md_ = want;
  return c;
}

std::vector<Tensor> Int8Conv::packed_tensors() const {
  return {Tensor::view(weights_.get_data_handle(), DType::U8,
                       Shape{static_cast<int64_t>(weights_md_.get_size())}),
          md_bytes(weights_md_), w_plain_.t, w_scale_.t, bias_buf_.t};
}

dnnl::primitive_attr Int8Conv::attr(Activation act) const {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops po;
  po.append_binary(dnnl::algorithm::binary_mul, oc_md_);
  if (add_mem_) po.append_binary(dnnl::algorithm::binary_add, oc_md_);
  append_activation(po, act);
  attr.set_post_ops(po);
  return attr;
}

std::optional<dnnl::convolution_forward::primitive_desc> Int8Conv::try_primitive_desc(
    const memory::desc& src, const memory::desc& weights, const memory::desc& dst,
    Activation act) const {
  const auto [strides, dilation, pad] = conv_geometry(desc_);
  const memory::dims none(pad.size(), 0);  // padded explicitly by quantize
  try {
    // od outlives first_impl's iteration.
    const dnnl::convolution_forward::desc od(dnnl::prop_kind::forward_inference,
                                             dnnl::algorithm::convolution_direct, src, weights, dst,
                                             strides, dilation, none, none);
    return first_impl(dnnl::convolution_forward::primitive_desc(od, attr(act), onednn_engine()),
                      trusted_int8_impl);
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

Plan& Int8Conv::plan(const PlanKey& key, const Tensor& x, const Tensor& y) const {
  return find_or_build_plan(plans_, key, [&](Plan& p) { build(p, x, y); });
}

void Int8Conv::build(Plan& p, const Tensor& x, const Tensor& y) const {
  const auto& eng = onednn_engine();
  const tag cl = x.ndim() == 4 ? tag::nhwc : tag::ndhwc;
  const memory::desc src_md(padded(dims_of(x)), src_type_, cl);
  const memory::desc y_md(dims_of(y), onednn_dtype(y.dtype), strides_of(y));
  const bool y_cl = channels_last(y);
  const memory::desc dst_md = y_cl ? y_md : memory::desc(dims_of(y), onednn_dtype(y.dtype), cl);
  const memory::desc any_weights(weight_dims(), odt::s8, tag::any);
  auto best = try_primitive_desc(src_md, any_weights, dst_md, p.key.act);
  FLICK_CHECK(best.has_value(), "oneDNN has no INT8 convolution for weight " + desc_.w.str() +
                                    " on " + x.str() + " -> " + y.str());
  auto pd = pd_on_packed_weights(*best, weights_.get_desc(), [&](const memory::desc& packed) {
    return try_primitive_desc(src_md, packed, dst_md, p.key.act);
  });
  memory weights = weights_;
  if (!pd) {
    pd = best;
    p.weights_copy = memory(best->weights_desc(), eng);
    // From the plain weights: oneDNN cannot reorder one s8 layout that
    // carries its s8s8 compensation (VNNI) into another.
    dnnl::reorder(plain_w_, p.weights_copy).execute(onednn_stream(), plain_w_, p.weights_copy);
    onednn_stream().wait();
    weights = p.weights_copy;
  }
  p.impl = impl_name(*pd, "int8 conv " + desc_.w.str() + " on " + x.str());
  p.prim = dnnl::convolution_forward(*pd);
  p.scratch_bytes = pd->scratchpad_desc().get_size();
  p.scratchpad = memory(pd->scratchpad_desc(), eng, DNNL_MEMORY_NONE);
  p.src = memory(pd->src_desc(), eng, DNNL_MEMORY_NONE);
  p.out = ConvDst(pd->dst_desc(), y_md);
  p.args = {{DNNL_ARG_SRC, p.src},
            {DNNL_ARG_WEIGHTS, weights},
            {DNNL_ARG_DST, p.out.arg()},
            {DNNL_ARG_SCRATCHPAD, p.scratchpad},
            {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, scale_mem_}};
  if (add_mem_) p.args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1] = add_mem_;
}

memory::dims Int8Conv::padded(memory::dims d) const {
  for (size_t i = 0; i < pad_.size(); ++i) d[2 + i] += 2 * pad_[i];
  return d;
}

void Int8Conv::quantize(const Tensor& x, uint8_t* q) const {
  // A dense channels-last x is one flat run in the order oneDNN reads; any
  // other layout is first copied into one (tests and odd callers only).
  Tensor flat = x;
  OwnedTensor dense;
  if (!channels_last(x)) {
    std::vector<int64_t> cl{x.dim(0)};
    for (int i = 2; i < x.ndim(); ++i) cl.push_back(x.dim(i));
    cl.push_back(x.dim(1));
    dense = OwnedTensor(x.dtype, Shape::from_vector(cl));
    Tensor view = x.ndim() == 4 ? dense.t.permute({0, 3, 1, 2}) : dense.t.permute({0, 4, 1, 2, 3});
    copy(x, view);
    flat = dense.t;
  }
  const int64_t n = x.numel();
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<float> mins(static_cast<size_t>(blocks)), maxs(static_cast<size_t>(blocks));
  const size_t esize = dtype_size(x.dtype);
  auto at = [&](int64_t b) { return static_cast<const char*>(flat.data) + b * kBlock * esize; };
  const bool s8 = act_enc_ == ref::ConvInt8Act::S8;
  parallel_for(blocks, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const auto i = static_cast<size_t>(b);
      const int64_t len = std::min(kBlock, n - b * kBlock);
      if (s8) {  // the rule reads max(|min|, |max|) only
        maxs[i] = absmax_avx512(at(b), x.dtype, len);
        mins[i] = -maxs[i];
      } else {
        minmax_avx512(at(b), x.dtype, len, &mins[i], &maxs[i]);
      }
    }
  });
  const float mn = *std::min_element(mins.begin(), mins.end());
  const float mx = *std::max_element(maxs.begin(), maxs.end());
  const ref::ConvInt8Quant p = ref::conv_int8_quant(mn, mx, act_enc_);
  if (std::all_of(pad_.begin(), pad_.end(), [](int64_t v) { return v == 0; })) {
    parallel_for(blocks, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b)
        quantize_int8_avx512(at(b), x.dtype, std::min(kBlock, n - b * kBlock), p, q + b * kBlock);
    });
  } else {
    quantize_padded(x, flat.data, p, q);
  }
  for (int64_t o = 0; o < out_channels_; ++o) {
    const float s = p.scale * w_scale_.t.ptr<float>()[o];
    call_scale_.t.ptr<float>()[o] = s;
    const float b = bias_buf_.t.empty() ? 0.f : bias_buf_.t.ptr<float>()[o];
    call_bias_.t.ptr<float>()[o] =
        b - static_cast<float>(int64_t{p.zero_point} * w_sum_[static_cast<size_t>(o)]) * s;
  }
}

void Int8Conv::quantize_padded(const Tensor& x, const void* data, const ref::ConvInt8Quant& p,
                               uint8_t* q) const {
  // One task per row of the padded buffer (its last spatial dim x channels):
  // a padding row is q = zp throughout, a source row gets zp on both sides.
  const int sd = x.ndim() - 2;
  const int64_t c = x.dim(1);
  std::vector<int64_t> in(static_cast<size_t>(sd)), out(static_cast<size_t>(sd));
  int64_t rows = x.dim(0);
  for (int i = 0; i < sd; ++i) {
    in[static_cast<size_t>(i)] = x.dim(2 + i);
    out[static_cast<size_t>(i)] = in[static_cast<size_t>(i)] + 2 * pad_[static_cast<size_t>(i)];
    if (i + 1 < sd) rows *= out[static_cast<size_t>(i)];
  }
  const int64_t w_in = in.back(), w_pad = pad_.back();
  const size_t row_out = static_cast<size_t>(out.back() * c), edge = static_cast<size_t>(w_pad * c);
  const auto fill = static_cast<uint8_t>(p.zero_point);  // q of x = 0 (S8: 0)
  const size_t esize = dtype_size(x.dtype);
  parallel_for(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      uint8_t* dst = q + static_cast<size_t>(r) * row_out;
      // r = ((n * out[0] + i0) * out[1] + i1) ...: the source row, if any.
      int64_t rest = r, src = 0, stride = 1;
      bool inside = true;
      for (int i = sd - 2; i >= 0; --i) {
        const int64_t idx = rest % out[static_cast<size_t>(i)] - pad_[static_cast<size_t>(i)];
        rest /= out[static_cast<size_t>(i)];
        inside = inside && idx >= 0 && idx < in[static_cast<size_t>(i)];
        src += idx * stride;
        stride *= in[static_cast<size_t>(i)];
      }
      src += rest * stride;  // the batch index
      if (!inside) {
        std::memset(dst, fill, row_out);
        continue;
      }
      std::memset(dst, fill, edge);
      quantize_int8_avx512(
          static_cast<const char*>(data) + static_cast<size_t>(src * w_in * c) * esize, x.dtype,
          w_in * c, p, dst + edge);
      std::memset(dst + edge + static_cast<size_t>(w_in * c), fill, edge);
    }
  });
}

void Int8Conv::run(const Tensor& x, const Tensor& y, Activation act) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (gemm_w_.n > 0 && channels_last(y) && (y.dtype == DType::F32 || y.dtype == DType::BF16)) {
    run_gemm(x, y, act);
    return;
  }
  Plan& p = plan({x.shape, y.strides, y.dtype, act}, x, y);
  last_impl_ = p.impl;
  dnnl::stream& s = onednn_stream();
  CallBuffers& buf = onednn_call_buffers();
  p.scratchpad.set_data_handle(buf.get(CallBuffers::kScratchpad, p.scratch_bytes));
  int64_t q_size = 1;
  for (int64_t d : padded(dims_of(x))) q_size *= d;
  auto* q = static_cast<uint8_t*>(buf.get(CallBuffers::kSrc, static_cast<size_t>(q_size)));
  quantize(x, q);
  p.src.set_data_handle(q);
  p.out.bind(buf, y.data);
  p.prim.execute(s, p.args);
  p.out.finish(s);
  s.wait();
}

void Int8Conv::run_gemm(const Tensor& x, const Tensor& y, Activation act) const {
  const int64_t k = x.dim(1), n = out_channels_, m = x.numel() / k;
  auto* q = static_cast<uint8_t*>(
      onednn_call_buffers().get(CallBuffers::kSrc, static_cast<size_t>(m * k)));
  quantize(x, q);  // [m, k] codes (no padding); the call's scales and bias
  // The tiles hold s8 codes q - 128 (S8 codes as they are): their sums are
  // sum (q - zp) w - (128 - zp) wsum, and call_bias_ already takes zp out.
  float* bias = call_bias_.t.ptr<float>();
  const float* s = call_scale_.t.ptr<float>();
  const bool u8 = act_enc_ == ref::ConvInt8Act::U8;
  if (u8)
    for (int64_t o = 0; o < n; ++o)
      bias[o] += static_cast<float>(int64_t{128} * w_sum_[static_cast<size_t>(o)]) * s[o];
  AmxCallBuffers& buf = amx_call_buffers();
  AmxActivations a;
  a.type = AmxType::S8;
  a.m = m;
  a.m_pad = amx_round_up(m, 32);
  a.k_pad = gemm_w_.k_pad;
  a.data = buf.reserve(buf.a, amx_activation_bytes(AmxType::S8, m, k));
  amx_pack_bytes(q, k, k, u8 ? 0x80 : 0, a, buf.scratch);
  AmxEpilogue e;
  e.col_scale = s;
  e.bias = bias;
  e.act = act;
  e.y = ref::RowsView{y.data, y.dtype, m, n, n};
  amx_gemm(a, gemm_w_, e, buf.scratch);
  last_impl_ = "flick:amx_int8 (1x1 as GEMM)";
}

const Int8Conv& as_int8(const PackedConv& w) {
  const auto* c = dynamic_cast<const Int8Conv*>(&w);
  FLICK_CHECK(c != nullptr, "weights were packed by another backend");
  return *c;
}

}  // namespace

std::unique_ptr<PackedConv> pack_conv_int8(const ConvDesc& d) {
  FLICK_CHECK(cpu_supports(Precision::INT8),
              "INT8 convolution needs AVX-512 VNNI or AMX (this CPU has neither)");
  FLICK_CHECK(d.groups >= 1 && d.w.dim(0) % d.groups == 0, "conv groups must divide O");
  return std::make_unique<Int8Conv>(d,
                                    ref::prepare_weights(d.w, d.w_scale, d.bias, Precision::INT8));
}

bool is_conv_int8(const PackedConv& w) { return dynamic_cast<const Int8Conv*>(&w) != nullptr; }

std::string conv_int8_impl(const PackedConv& w) { return as_int8(w).impl(); }

std::vector<Tensor> int8_conv_tensors(const PackedConv& w) { return as_int8(w).packed_tensors(); }

Expected<std::unique_ptr<PackedConv>> adopt_int8_conv(const ConvDesc& d, const Tensor& md,
                                                      const Tensor& weights, const Tensor& w_plain,
                                                      const Tensor& w_scale, const Tensor& bias,
                                                      std::shared_ptr<const void> storage) {
  FLICK_ASSIGN_OR_RETURN(
      std::unique_ptr<Int8Conv> c,
      Int8Conv::adopt(d, md, weights, w_plain, w_scale, bias, std::move(storage)));
  return std::unique_ptr<PackedConv>(std::move(c));
}

void conv_int8(const Tensor& x, const PackedConv& w, Tensor& y, Activation act) {
  const Int8Conv& c = as_int8(w);
  FLICK_CHECK(x.dtype == DType::F32 || x.dtype == DType::BF16,
              "INT8 conv: x must be F32 or BF16, got " + x.str());
  if (x.numel() == 0 || y.numel() == 0) return;
  c.run(x, y, act);
}

}  // namespace flick::cpu
