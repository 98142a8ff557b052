// CPU linear and matmul.
//
// On CPUs with AMX, BF16 / FP8 / INT8 linear layers run on flick's own AMX
// GEMM (runtime/cpu/gemm.h): oneDNN 2.6 reaches 13-34 % of the AMX peak at
// the DiT shapes, the hand-written kernel several times that
// (bench/RESULTS.md). On CPUs with AVX-512 and no AMX they run on flick's
// GEMMs over the same packed weights: INT8 on vpdpbusd (AVX-512 VNNI; 3-16 %
// faster than oneDNN 2.6's brgemm at the DiT's shapes on a Zen 4, and
// bit-identical to the AMX kernel and runtime/ref), BF16 / FP8 on vdpbf16ps
// (AVX-512 BF16; 2-13 % faster than oneDNN's brgemm at the DiT's and SAM3's
// shapes on a Zen 4, which re-blocks plain weights inside every call, and
// with GELU fused; layers with K from 5 to 31 stay on oneDNN, faster there).
// F32 layers run on flick's AVX-512 FMA GEMM over the same
// packed layout on every AVX-512 CPU, AMX or not: oneDNN 2.7's f32 brgemm
// reached 61-71 % of the FMA peak at SAM3's shapes on an Emerald Rapids, the
// FMA kernel 15-50 % more (bench/RESULTS.md, session 18).
// Capping oneDNN's ISA (ONEDNN_MAX_CPU_ISA) below AMX turns
// the AMX GEMM off, below AVX512_CORE_BF16 the BF16 one (BF16 / FP8 then run
// on oneDNN), below VNNI leaves no INT8 linear, below AVX512_CORE no F32
// one: one variable selects the kernels of a CPU class.
//
// Everywhere else (F32 without AVX-512, and BF16 / FP8 without AVX-512 BF16): linear = one oneDNN
// matmul primitive per (M, dtypes, strides, activation), created on the first call and cached in
// the packed weights; weights are reordered once at pack time into the layout brgemm asks for. That
// layout depends on N, K, the dtypes and the ISA but not on M (checked for M = 1 .. 2640), so one
// reorder serves every M (oneDNN 2.6 asks for plain [K, N] weights at these batched shapes and
// re-blocks them inside each call: ONEDNN_VERBOSE shows wei_s8::blocked:abc). Everything after the
// matmul is oneDNN post-ops, in this order:
//   F32 / BF16:  acc + bias -> act
//   FP8:         acc * w_scale[n] (output scales) + bias -> act
// INT8 runs only on flick's GEMMs, so only where a CPU has AVX-512 VNNI (or
// AMX): oneDNN 2.6's int8 fallback below VNNI (gemm:jit) gave wrong sums
// even without post-ops when checked here with ONEDNN_MAX_CPU_ISA=
// AVX512_CORE. cpu_supports() tells loaders which precisions this CPU can
// run.
// oneDNN 2.6's brgemm needs dense rows: strided x is copied (or converted)
// into a dense buffer owned by the plan, strided y is written
// through a dense buffer and copied out.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "runtime/cpu/eltwise_kernels.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/linear_cache.h"
#include "runtime/cpu/mlp_kernels.h"
#include "runtime/cpu/onednn_info.h"
#include "runtime/cpu/onednn_util.h"
#include "runtime/cpu/ops.h"
#include "runtime/cpu/quantize.h"
#include "runtime/log.h"
#include "runtime/plan_cache.h"
#include "runtime/ref/matmul_common.h"
#include "runtime/threads.h"

namespace flick::cpu {
namespace {

using dnnl::memory;
using odt = memory::data_type;
using tag = memory::format_tag;

// The M the weights are packed for (any M works with the result, see above).
constexpr int64_t kPackM = 1024;

size_t odt_size(odt t) { return t == odt::f32 ? 4 : t == odt::bf16 ? 2 : 1; }

// Rows of a [M, C] matrix as oneDNN sees them: [1, M, C].
memory::desc rows_md(int64_t m, int64_t c, int64_t ld, odt t) {
  return memory::desc({1, m, c}, t, memory::dims{m * ld, ld, 1});
}

struct PlanKey {
  int64_t m;
  DType x, y;
  int64_t ldx, ldy;
  Activation act;
  bool operator==(const PlanKey&) const = default;
};

// Everything one PlanKey needs, built on its first call. Its working
// memory (dense src / dst, oneDNN's scratchpad) is the calling
// thread's CallBuffers, shared by every plan of every layer and bound per
// call: a plan per layer and M kept its own before, 1.3 GB over the
// Matrix-Game DiT's INT8 layers at M = 2640 on CPUs without AMX.
struct Plan {
  PlanKey key;
  std::string impl;
  dnnl::matmul prim;
  std::unordered_map<int, memory> args;
  memory src, dst;  // what the primitive reads / writes (dense)
  memory scratchpad;
  size_t src_bytes = 0, dst_bytes = 0, scratchpad_bytes = 0;
  memory weights_copy;    // only when this M wants another weight layout
  bool x_direct = false;  // x is src: same dtype, dense rows
  bool y_direct = false;  // y is dst
  // x -> src and dst -> y conversions when not direct (strides, dtypes).
  std::optional<ReorderChain> x_in, y_out;
  memory y_mem;  // y as the caller laid it out; data handle set per call
};

class OnednnLinear final : public PackedLinear {
 public:
  // Packs w: its weights reordered into the blocked layout of the primitive.
  explicit OnednnLinear(ref::PreparedWeights w);
  // Weights reordered earlier (packed_tensors() of a linear of this
  // process's ISA and oneDNN) used in place: checks that `md` is the layout
  // this process's primitive asks for. Views kept alive by `storage`.
  static Expected<std::unique_ptr<OnednnLinear>> adopt(Precision p, int64_t n, int64_t k,
                                                       const Tensor& md, const Tensor& weights,
                                                       const Tensor& scale, const Tensor& bias,
                                                       std::shared_ptr<const void> storage);
  // Views of its state: the reordered weights (U8), their md (U8), the
  // scale and the bias (F32 [N], or empty tensors): see linear_cache.h.
  std::vector<Tensor> packed_tensors() const;
  int64_t in_features() const override { return k_; }
  int64_t out_features() const override { return n_; }
  Precision precision() const override { return precision_; }

  void run(const ref::RowsView& x, const ref::RowsView& y, Activation act) const;
  std::string impl() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_impl_;
  }

 private:
  // Empty when oneDNN has no implementation for these descriptors.
  std::optional<dnnl::matmul::primitive_desc> try_primitive_desc(int64_t m,
                                                                 const memory::desc& weights,
                                                                 odt dst_type,
                                                                 Activation act) const;
  dnnl::matmul::primitive_desc primitive_desc(int64_t m, const memory::desc& weights, odt dst_type,
                                              Activation act) const {
    auto pd = try_primitive_desc(m, weights, dst_type, act);
    FLICK_CHECK(pd.has_value(), "oneDNN has no matmul for linear M=" + std::to_string(m) +
                                    " K=" + std::to_string(k_) + " N=" + std::to_string(n_) + " (" +
                                    precision_name(precision_) + ")");
    return *pd;
  }
  // The GEMM's output type: f32 GEMMs write f32 only, the others y's dtype.
  odt dst_type_for(odt y_type) const { return src_type_ == odt::f32 ? odt::f32 : y_type; }
  Plan& plan(const PlanKey& key) const;
  void build(Plan& p) const;
  OnednnLinear(Precision p, int64_t n, int64_t k) : k_(k), n_(n), precision_(p) {}
  // Everything but the weights: types, scales, bias (a view kept by
  // storage_ or owned), the pack-time primitive desc (kPackM).
  dnnl::matmul::primitive_desc init(const float* scale, const Tensor& bias);

  int64_t k_, n_;
  Precision precision_;
  odt src_type_ = odt::undef;
  // BF16 / FP8 on a CPU where oneDNN has no bf16 kernels (below AVX-512):
  // an f32 GEMM on the same bf16-rounded operands, which is exact to the
  // same products (bf16 x bf16 is exact in fp32) with fp32 accumulation.
  bool emulate_bf16_ = false;
  std::vector<float> w_scale_;  // FP8
  OwnedTensor bias_buf_;
  memory bias_, weights_;
  memory::desc weights_md_;              // weights_'s, for packed_tensors()
  HostBuffer weights_buf_;               // the reordered weights, unless adopted
  std::shared_ptr<const void> storage_;  // adopted weights and bias

  // One call at a time per packed layer: a plan's memory objects are bound
  // to the calling thread's buffers during its call.
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<Plan>> plans_;
  mutable std::string last_impl_;
};

// The operands' dtype in the primitive: f32, or bf16 (BF16 and FP8 as
// widened to bf16, which prepare_weights makes). INT8 never gets here
// (pack_linear).
odt operand_type_for(Precision p) { return p == Precision::F32 ? odt::f32 : odt::bf16; }

dnnl::matmul::primitive_desc OnednnLinear::init(const float* scale, const Tensor& bias) {
  FLICK_CHECK(precision_ != Precision::INT8, "INT8 linears run on flick's GEMMs");
  src_type_ = operand_type_for(precision_);
  const auto& eng = onednn_engine();
  if (scale != nullptr) w_scale_.assign(scale, scale + n_);
  if (!bias.empty())
    bias_ = memory({{1, 1, n_}, odt::f32, tag::abc}, eng, const_cast<void*>(bias.data));
  // The weights as the primitive wants them for any M (see the top).
  const odt wt = operand_type_for(precision_);
  auto any_weights = [&] { return memory::desc({1, k_, n_}, wt, tag::any); };
  auto pd = try_primitive_desc(kPackM, any_weights(), dst_type_for(odt::bf16), Activation::None);
  if (!pd && src_type_ == odt::bf16) {
    emulate_bf16_ = true;
    src_type_ = odt::f32;
    pd = try_primitive_desc(kPackM, memory::desc({1, k_, n_}, odt::f32, tag::any), odt::f32,
                            Activation::None);
  }
  FLICK_CHECK(pd.has_value(),
              std::string("oneDNN has no ") + precision_name(precision_) + " matmul on this CPU");
  last_impl_ = impl_name(*pd, "linear " + std::to_string(n_) + "x" + std::to_string(k_));
  return *pd;
}

OnednnLinear::OnednnLinear(ref::PreparedWeights w) : k_(w.k()), n_(w.n()), precision_(w.precision) {
  bias_buf_ = std::move(w.bias);
  const dnnl::matmul::primitive_desc pd =
      init(w.has_scale() ? w.scale.t.ptr<float>() : nullptr, bias_buf_.t);
  // W is [N, K] row-major, i.e. the [K, N] matmul operand in column-major.
  const auto& eng = onednn_engine();
  memory plain({{1, k_, n_}, onednn_dtype(w.w.t.dtype), memory::dims{k_ * n_, 1, k_}}, eng,
               w.w.t.data);
  weights_buf_ = HostBuffer(pd.weights_desc().get_size());
  weights_ = memory(pd.weights_desc(), eng, weights_buf_.data());
  dnnl::reorder(plain, weights_).execute(onednn_stream(), plain, weights_);
  onednn_stream().wait();
  weights_md_ = pd.weights_desc();
}

Expected<std::unique_ptr<OnednnLinear>> OnednnLinear::adopt(Precision p, int64_t n, int64_t k,
                                                            const Tensor& md, const Tensor& weights,
                                                            const Tensor& scale, const Tensor& bias,
                                                            std::shared_ptr<const void> storage) {
  std::unique_ptr<OnednnLinear> l(new OnednnLinear(p, n, k));
  l->storage_ = std::move(storage);
  const dnnl::matmul::primitive_desc pd =
      l->init(scale.empty() ? nullptr : scale.ptr<float>(), bias);
  const memory::desc want = pd.weights_desc();
  FLICK_TRY(check_adopted_weights(md, weights, want));
  // oneDNN only reads weights: the read-only mapping is fine.
  l->weights_ = memory(want, onednn_engine(), const_cast<void*>(weights.data));
  l->weights_md_ = want;
  return l;
}

std::vector<Tensor> OnednnLinear::packed_tensors() const {
  std::vector<Tensor> t;
  t.push_back(Tensor::view(weights_.get_data_handle(), DType::U8,
                           Shape{static_cast<int64_t>(weights_md_.get_size())}));
  t.push_back(md_bytes(weights_md_));
  t.push_back(w_scale_.empty()
                  ? Tensor{}
                  : Tensor::view(const_cast<float*>(w_scale_.data()), DType::F32, Shape{n_}));
  t.push_back(bias_ ? Tensor::view(bias_.get_data_handle(), DType::F32, Shape{n_}) : Tensor{});
  return t;
}

std::optional<dnnl::matmul::primitive_desc> OnednnLinear::try_primitive_desc(
    int64_t m, const memory::desc& weights, odt dst_type, Activation act) const {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (!w_scale_.empty()) attr.set_output_scales(1 << 2, w_scale_);  // per N
  dnnl::post_ops po;
  if (bias_) po.append_binary(dnnl::algorithm::binary_add, bias_.get_desc());
  append_activation(po, act);
  attr.set_post_ops(po);
  const auto src = rows_md(m, k_, k_, src_type_);
  const auto dst = rows_md(m, n_, n_, dst_type);
  try {
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst), attr,
                                        onednn_engine());
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

Plan& OnednnLinear::plan(const PlanKey& key) const {
  return find_or_build_plan(plans_, key, [&](Plan& p) { build(p); });
}

void OnednnLinear::build(Plan& p) const {
  const auto& eng = onednn_engine();
  const PlanKey& key = p.key;
  const int64_t m = key.m;
  const odt y_type = onednn_dtype(key.y);
  const odt dst_type = dst_type_for(y_type);
  std::optional<dnnl::matmul::primitive_desc> found =
      try_primitive_desc(m, weights_.get_desc(), dst_type, key.act);
  // This M's implementation may want another weight layout: a copy for it.
  memory weights = weights_;
  if (!found) {
    const memory::desc any({1, k_, n_}, weights_.get_desc().data_type(), tag::any);
    found = try_primitive_desc(m, any, dst_type, key.act);
    FLICK_CHECK(found.has_value(), "oneDNN has no matmul for linear M=" + std::to_string(m) +
                                       " K=" + std::to_string(k_) + " N=" + std::to_string(n_));
    // A second copy of the weights, for as long as the layer lives: worth
    // seeing in a memory hunt (FLICK_LOG=debug).
    log_debug("linear " + std::to_string(n_) + "x" + std::to_string(k_) +
              " M=" + std::to_string(m) + " uses its own weight layout (" +
              std::to_string(found->weights_desc().get_size()) + " bytes)");
    p.weights_copy = memory(found->weights_desc(), eng);
    dnnl::reorder(weights, p.weights_copy).execute(onednn_stream(), weights, p.weights_copy);
    weights = p.weights_copy;
  }
  const dnnl::matmul::primitive_desc& pd = *found;
  p.impl = impl_name(pd, "linear M=" + std::to_string(m));
  p.prim = dnnl::matmul(pd);
  p.scratchpad_bytes = pd.scratchpad_desc().get_size();
  p.scratchpad = memory(pd.scratchpad_desc(), eng, DNNL_MEMORY_NONE);

  p.x_direct = !emulate_bf16_ && onednn_dtype(key.x) == src_type_ && key.ldx == k_;
  if (!p.x_direct) p.src_bytes = static_cast<size_t>(m * k_) * odt_size(src_type_);
  p.src = memory(pd.src_desc(), eng, DNNL_MEMORY_NONE);
  if (!p.x_direct)
    p.x_in.emplace(rows_md(m, k_, key.ldx, onednn_dtype(key.x)), p.src, emulate_bf16_);

  p.y_direct = dst_type == y_type && key.ldy == n_;
  if (!p.y_direct) p.dst_bytes = static_cast<size_t>(m * n_) * odt_size(dst_type);
  p.dst = memory(pd.dst_desc(), eng, DNNL_MEMORY_NONE);
  if (!p.y_direct) {
    // dst -> y: the chain's source is dst, its target a view of y set per call.
    p.y_mem = memory(rows_md(m, n_, key.ldy, y_type), eng, DNNL_MEMORY_NONE);
    p.y_out.emplace(p.dst.get_desc(), p.y_mem, false);
  }

  p.args = {{DNNL_ARG_SRC, p.src},
            {DNNL_ARG_WEIGHTS, weights},
            {DNNL_ARG_DST, p.dst},
            {DNNL_ARG_SCRATCHPAD, p.scratchpad}};
  if (bias_) p.args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = bias_;
}

void OnednnLinear::run(const ref::RowsView& x, const ref::RowsView& y, Activation act) const {
  if (x.rows == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  Plan& p = plan({x.rows, x.dtype, y.dtype, x.ld, y.ld, act});
  last_impl_ = p.impl;
  dnnl::stream& s = onednn_stream();
  CallBuffers& cb = onednn_call_buffers();
  // Bound per call: another plan may have grown (moved) the buffers since.
  p.scratchpad.set_data_handle(cb.get(CallBuffers::kScratchpad, p.scratchpad_bytes));
  void* src = p.x_direct ? nullptr : cb.get(CallBuffers::kSrc, p.src_bytes);
  void* dst = p.y_direct ? nullptr : cb.get(CallBuffers::kDst, p.dst_bytes);
  if (p.x_direct) {
    p.src.set_data_handle(x.data);
  } else {
    p.src.set_data_handle(src);
    p.x_in->run(s, x.data);
  }
  p.dst.set_data_handle(p.y_direct ? y.data : dst);
  p.prim.execute(s, p.args);
  if (!p.y_direct) {
    p.y_mem.set_data_handle(y.data);
    p.y_out->run(s, dst);
  }
  s.wait();
}

// A linear layer on flick's GEMMs: weights packed once into B tiles (BF16 for
// BF16 and FP8, whose values bf16 holds exactly; s8 for INT8; f32 for F32);
// activations converted or quantized per call (into A tiles for AMX, into
// dense rows for the AVX-512 kernels).
class AmxLinear final : public PackedLinear {
 public:
  // scale: F32 [N] for INT8 / FP8, bias F32 [N] or empty; views into
  // `owned` or `storage`, which the linear keeps.
  AmxLinear(Precision precision, AmxWeights weights, const Tensor& scale, const Tensor& bias,
            std::vector<OwnedTensor> owned, std::shared_ptr<const void> storage)
      : precision_(precision),
        vnni_(!linear_uses_amx()),
        weights_(std::move(weights)),
        scale_(scale),
        bias_(bias),
        owned_(std::move(owned)),
        storage_(std::move(storage)) {}
  int64_t in_features() const override { return weights_.k; }
  int64_t out_features() const override { return weights_.n; }
  Precision precision() const override { return precision_; }
  std::string impl() const {
    if (weights_.type == AmxType::F32) return "flick:avx512_f32";
    if (vnni_) return weights_.type == AmxType::S8 ? "flick:vnni_int8" : "flick:avx512_bf16";
    return weights_.type == AmxType::S8 ? "flick:amx_int8" : "flick:amx_bf16";
  }
  const AmxWeights& weights() const { return weights_; }
  // F32 / BF16 weights as fp32, unpacked on first use (cpu::mlp_relu's
  // fused kernel): rows [N, K]; for N <= kThinMlpMaxN also columns [K,
  // kThinMlpMaxN], zeros past N.
  struct PlainF32 {
    std::vector<float> rows, columns;
  };
  const PlainF32& plain_f32() const {
    std::call_once(plain_once_, [&] {
      const int64_t n = weights_.n, k = weights_.k;
      plain_.rows = amx_unpack_f32(weights_);
      if (n > kThinMlpMaxN) return;
      plain_.columns.assign(static_cast<size_t>(k * kThinMlpMaxN), 0.f);
      for (int64_t j = 0; j < k; ++j)
        for (int64_t c = 0; c < n; ++c)
          plain_.columns[static_cast<size_t>(j * kThinMlpMaxN + c)] =
              plain_.rows[static_cast<size_t>(c * k + j)];
    });
    return plain_;
  }
  const Tensor& scale() const { return scale_; }
  const Tensor& bias() const { return bias_; }

  void run(const ref::RowsView& x, const ref::RowsView& y, Activation act) const {
    if (x.rows == 0) return;
    AmxCallBuffers& buf = amx_call_buffers();
    AmxEpilogue e;
    e.col_scale = scale_.empty() ? nullptr : scale_.ptr<float>();
    e.bias = bias_.empty() ? nullptr : bias_.ptr<float>();
    e.act = act;
    e.y = y;
    if (weights_.type == AmxType::F32 || (vnni_ && weights_.type == AmxType::BF16))
      return vnni_gemm_float_rows(x, weights_, e, buf);
    if (vnni_) return run_vnni(x, e, buf);
    const AmxActivations a = amx_activations_for(weights_, x.rows, buf);
    if (a.type == AmxType::S8) {
      auto* scales = static_cast<float*>(buf.reserve(buf.row_scales, sizeof(float) * x.rows));
      amx_pack_s8(x, a, scales, buf.scratch);
      e.row_scale = scales;
    } else {
      amx_pack_bf16(x, a, buf.scratch);
    }
    amx_gemm(a, weights_, e, buf.scratch);
  }

 private:
  // INT8 on AVX-512 VNNI: rows quantized as u8 (q + 128, dense rows of k_pad
  // bytes), the compensation of the weights made on the first call.
  void run_vnni(const ref::RowsView& x, AmxEpilogue& e, AmxCallBuffers& buf) const {
    std::call_once(comp_once_, [&] {
      comp_.resize(static_cast<size_t>(weights_.n_pad));
      vnni_compensation(weights_, comp_.data());
    });
    const int64_t lda = weights_.k_pad, k = weights_.k;
    auto* a = static_cast<uint8_t*>(buf.reserve(buf.a, static_cast<size_t>(x.rows * lda)));
    auto* scales = static_cast<float*>(buf.reserve(buf.row_scales, sizeof(float) * x.rows));
    quantize_rows(x, a, lda, scales, kVnniOffset);
    if (lda > k)  // met by zero weights; zeroed so no byte read is stale
      for (int64_t m = 0; m < x.rows; ++m) std::memset(a + m * lda + k, 0, size_t(lda - k));
    e.row_scale = scales;
    vnni_gemm(a, lda, x.rows, weights_, comp_.data(), e, buf.scratch);
  }

  Precision precision_;
  bool vnni_;  // no AMX: INT8 / BF16 / FP8 on vnni_gemm, see linear_uses_vnni
  mutable std::once_flag comp_once_;
  mutable std::vector<int32_t> comp_;  // [n_pad] vnni_compensation, made on first use
  mutable std::once_flag plain_once_;
  mutable PlainF32 plain_;
  AmxWeights weights_;
  Tensor scale_;  // F32 [N] for INT8 / FP8
  Tensor bias_;   // F32 [N] or empty
  std::vector<OwnedTensor> owned_;
  std::shared_ptr<const void> storage_;
};

AmxType amx_type_for(Precision p) {
  if (p == Precision::F32) return AmxType::F32;
  return p == Precision::INT8 ? AmxType::S8 : AmxType::BF16;
}

// The AVX-512 BF16 GEMM takes K from one 32-element step on: below it
// oneDNN's matmul was faster (Zen 4, 14400 rows -> 256, bf16: K = 2 0.54 vs
// 1.12 ms, K = 16 0.71 vs 1.11 ms, where the rows are also copied to pad K;
// K = 32 and 128 tie; bench/RESULTS.md, session 14). Since the kernel runs
// only the k pairs a short K fills, K <= 4 is level with oneDNN (2 threads,
// ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 on an Emerald Rapids, 1024 x 2 ->
// 256 alternated four times: 11-14 against 11-13 GFLOPS; not re-measured on
// a Zen) and mlp_relu can fuse it (kThinMlpMaxK): those go to flick too.
constexpr int64_t kAvx512Bf16MinK = 32;
// F32 from K = 1 on: the kernel runs only the k a short K fills of its
// 16-element step.
constexpr int64_t kAvx512F32MinK = 1;

// Whether pack_linear puts a `p` layer of K inputs on flick's GEMMs
// (AmxLinear): AMX for BF16 / FP8 / INT8; without AMX, AVX-512 VNNI for INT8
// and AVX-512 BF16 for BF16 / FP8 from kAvx512Bf16MinK on and up to
// kThinMlpMaxK; F32 on AVX-512 FMA from kAvx512F32MinK on, AMX or not.
bool on_flick_gemm(Precision p, int64_t k) {
  if (p == Precision::F32) return linear_uses_avx512_f32() && k >= kAvx512F32MinK;
  if (linear_uses_amx()) return true;
  if (p == Precision::INT8) return linear_uses_vnni();
  return linear_uses_avx512_bf16() && (k >= kAvx512Bf16MinK || k <= kThinMlpMaxK);
}

std::unique_ptr<AmxLinear> amx_linear(ref::PreparedWeights w) {
  AmxWeights packed = amx_pack_weights(w.w, amx_type_for(w.precision));
  const Tensor scale = w.scale.t, bias = w.bias.t;
  std::vector<OwnedTensor> owned;
  owned.push_back(std::move(w.scale));
  owned.push_back(std::move(w.bias));
  return std::make_unique<AmxLinear>(w.precision, std::move(packed), scale, bias, std::move(owned),
                                     nullptr);
}

// The AMX linear of d packed straight from d.w where prepare_weights would
// only copy it (I8 weights at INT8, BF16 at BF16): no [N, K] copy. Null
// where prepare_weights has real work (quantizing, widening).
std::unique_ptr<AmxLinear> amx_linear_direct(const LinearDesc& d) {
  const bool s8 = d.precision == Precision::INT8 && d.w.dtype == DType::I8;
  const bool bf16 = d.precision == Precision::BF16 && d.w.dtype == DType::BF16;
  const bool f32 = d.precision == Precision::F32 && d.w.dtype == DType::F32;
  if (!(s8 || bf16 || f32) || !d.w.is_contiguous() || (!d.bias.empty() && !d.bias.is_contiguous()))
    return nullptr;
  const int64_t n = d.w.dim(0), k = d.w.numel() / n;
  // The scale and bias as prepare_weights makes them (the bias in F32, a
  // per-tensor scale broadcast), without its weight copy.
  ref::PreparedWeights small = ref::prepare_weights(Tensor::view(d.w.data, d.w.dtype, Shape{n, 1}),
                                                    d.w_scale, d.bias, d.precision);
  const AmxWeights packed =
      amx_pack_weights(Tensor::view(d.w.data, d.w.dtype, Shape{n, k}), amx_type_for(d.precision));
  const Tensor scale = small.scale.t, bias = small.bias.t;
  std::vector<OwnedTensor> owned;
  owned.push_back(std::move(small.scale));
  owned.push_back(std::move(small.bias));
  return std::make_unique<AmxLinear>(d.precision, packed, scale, bias, std::move(owned), nullptr);
}

const OnednnLinear& as_onednn(const PackedLinear& w) {
  const auto* l = dynamic_cast<const OnednnLinear*>(&w);
  FLICK_CHECK(l != nullptr, "weights were packed by another backend");
  return *l;
}

// A 2-d operand of matmul as a batch of one.
Tensor batched(const Tensor& t) {
  if (t.ndim() == 3) return t;
  FLICK_CHECK(t.ndim() == 2, "matmul operands are [Bt, M, K] / [Bt, K, N]: " + t.str());
  Tensor u = t;
  u.shape = Shape{1, t.dim(0), t.dim(1)};
  u.strides = {t.dim(0) * t.stride(0), t.stride(0), t.stride(1)};
  return u;
}

memory::desc strided_md(const Tensor& t, odt type) {
  return memory::desc({t.dim(0), t.dim(1), t.dim(2)}, type,
                      memory::dims{t.stride(0), t.stride(1), t.stride(2)});
}

// oneDNN's matmul reads matrices with unit stride along one of the two
// matrix dims (row- or column-major, any leading dimension).
bool blas_layout(const Tensor& t) { return t.stride(2) == 1 || t.stride(1) == 1; }

// c = a @ b computed in type ct (operands converted to it where they differ
// or oneDNN cannot read them in place). False if oneDNN has no such matmul.
bool matmul_in(odt ct, const Tensor& A, const Tensor& B, const Tensor& C) {
  const auto& eng = onednn_engine();
  dnnl::stream& s = onednn_stream();
  std::vector<HostBuffer> copies;
  auto dense_md = [&](const Tensor& t, odt type) {
    return memory::desc({t.dim(0), t.dim(1), t.dim(2)}, type, tag::abc);
  };
  auto as_given = [&](const Tensor& t) {
    return memory(strided_md(t, onednn_dtype(t.dtype)), eng, t.data);
  };
  auto in_place = [&](const Tensor& t) { return onednn_dtype(t.dtype) == ct && blas_layout(t); };
  const bool c_direct = (ct == odt::bf16 || C.dtype == DType::F32) && blas_layout(C);
  const memory::desc a_md = in_place(A) ? strided_md(A, ct) : dense_md(A, ct);
  const memory::desc b_md = in_place(B) ? strided_md(B, ct) : dense_md(B, ct);
  const memory::desc c_md = c_direct ? strided_md(C, onednn_dtype(C.dtype)) : dense_md(C, odt::f32);
  std::optional<dnnl::matmul::primitive_desc> pd;
  try {
    pd.emplace(dnnl::matmul::desc(a_md, b_md, c_md), eng);
  } catch (const dnnl::error&) {
    return false;
  }
  auto operand = [&](const Tensor& t, const memory::desc& md) {
    if (in_place(t)) return as_given(t);
    copies.emplace_back(md.get_size());
    memory dense(md, eng, copies.back().data());
    memory given = as_given(t);
    dnnl::reorder(given, dense).execute(s, given, dense);
    return dense;
  };
  memory am = operand(A, a_md), bm = operand(B, b_md);
  memory cm = as_given(C), dst = cm;
  if (!c_direct) {
    copies.emplace_back(c_md.get_size());
    dst = memory(c_md, eng, copies.back().data());
  }
  dnnl::matmul(*pd).execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, dst}});
  if (!c_direct) dnnl::reorder(dst, cm).execute(s, dst, cm);
  s.wait();
  return true;
}

}  // namespace

bool amx_not_capped() {
  static const bool yes = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core_amx;
  return yes;
}

bool linear_uses_amx() {
  static const bool yes = amx_available() && amx_not_capped();
  return yes;
}

bool linear_uses_vnni() {
  static const bool yes = !linear_uses_amx() && vnni_available() &&
                          dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core_vnni;
  return yes;
}

bool linear_uses_avx512_bf16() {
  static const bool yes = !linear_uses_amx() && avx512_bf16_available() &&
                          dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core_bf16;
  return yes;
}

bool linear_uses_avx512_f32() {
  static const bool yes = eltwise_kernels_for(Isa::Avx512) != nullptr &&
                          dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core;
  return yes;
}

std::string linear_impl(const PackedLinear& w) {
  if (const auto* amx = dynamic_cast<const AmxLinear*>(&w)) return amx->impl();
  return as_onednn(w).impl();
}

bool cpu_supports(Precision p) {
  // F32 everywhere; BF16 / FP8 natively from AVX-512 on, else emulated
  // exactly in f32; INT8 only on flick's GEMMs (see the top of this file).
  return p != Precision::INT8 || linear_uses_amx() || linear_uses_vnni();
}

std::unique_ptr<PackedLinear> pack_linear(const LinearDesc& d) {
  FLICK_CHECK(d.w.ndim() == 2, "linear weight must be [N, K]: " + d.w.str());
  FLICK_CHECK(cpu_supports(d.precision),
              std::string(precision_name(d.precision)) + " linear is not supported on this CPU");
  if (on_flick_gemm(d.precision, d.w.dim(1))) {
    if (std::unique_ptr<AmxLinear> l = amx_linear_direct(d)) return l;
    return amx_linear(ref::prepare_weights(d.w, d.w_scale, d.bias, d.precision));
  }
  return std::make_unique<OnednnLinear>(ref::prepare_weights(d.w, d.w_scale, d.bias, d.precision));
}

// ---- packed linears through the plan cache (linear_cache.h) ----

namespace {

// meta: layout, format version, precision, n, k, AMX type or 0, has scale,
// has bias. Bump kPackedFormat when a layout's bytes change.
enum PackedLayout : int32_t { kLayoutAmx = 1, kLayoutOnednn = 2 };
constexpr int32_t kPackedFormat = 1;
constexpr int32_t kMetaLen = 8;

}  // namespace

std::vector<Tensor> packed_linear_tensors(const PackedLinear& w) {
  // The meta tensor lives in a per-layer buffer the views outlive: it is
  // rebuilt here into thread-local storage, valid until the next call on
  // this thread (PlanCache::store copies it before that).
  thread_local int32_t meta[kMetaLen];
  std::vector<Tensor> t;
  t.push_back(Tensor::view(meta, DType::I32, Shape{kMetaLen}));
  Tensor scale, bias;
  if (const auto* amx = dynamic_cast<const AmxLinear*>(&w)) {
    const AmxWeights& aw = amx->weights();
    const int32_t m[kMetaLen] = {kLayoutAmx,
                                 kPackedFormat,
                                 static_cast<int32_t>(amx->precision()),
                                 static_cast<int32_t>(aw.n),
                                 static_cast<int32_t>(aw.k),
                                 static_cast<int32_t>(aw.type) + 1,
                                 !amx->scale().empty(),
                                 !amx->bias().empty()};
    std::copy(m, m + kMetaLen, meta);
    t.push_back(Tensor::view(const_cast<void*>(aw.data), DType::U8,
                             Shape{static_cast<int64_t>(aw.bytes())}));
    scale = amx->scale();
    bias = amx->bias();
  } else {
    const OnednnLinear& l = as_onednn(w);
    std::vector<Tensor> p = l.packed_tensors();  // weights, md, scale, bias
    const int32_t m[kMetaLen] = {kLayoutOnednn,
                                 kPackedFormat,
                                 static_cast<int32_t>(l.precision()),
                                 static_cast<int32_t>(l.out_features()),
                                 static_cast<int32_t>(l.in_features()),
                                 0,
                                 !p[2].empty(),
                                 !p[3].empty()};
    std::copy(m, m + kMetaLen, meta);
    t.push_back(p[0]);
    t.push_back(p[1]);
    scale = p[2];
    bias = p[3];
  }
  if (!scale.empty()) t.push_back(scale);
  if (!bias.empty()) t.push_back(bias);
  return t;
}

Expected<std::unique_ptr<PackedLinear>> adopt_packed_linear(std::span<const Tensor> t,
                                                            Precision precision, int64_t n,
                                                            int64_t k,
                                                            std::shared_ptr<const void> storage) {
  if (t.empty() || t[0].dtype != DType::I32 || t[0].shape != Shape{kMetaLen})
    return invalid_input("is not a packed linear");
  const int32_t* m = t[0].ptr<const int32_t>();
  const bool amx = on_flick_gemm(precision, k);
  const int32_t layout = amx ? kLayoutAmx : kLayoutOnednn;
  if (m[0] != layout || m[1] != kPackedFormat || m[2] != static_cast<int32_t>(precision) ||
      m[3] != n || m[4] != k)
    return invalid_input("holds another layout, precision or shape than this process packs");
  const bool has_scale = m[6] != 0, has_bias = m[7] != 0;
  const size_t packed_count = amx ? 1 : 2;
  if (t.size() != 1 + packed_count + has_scale + has_bias)
    return invalid_input("has " + std::to_string(t.size()) + " tensors");
  const Shape vec{n};
  auto f32_vec = [&](const Tensor& v) { return v.dtype == DType::F32 && v.shape == vec; };
  const Tensor scale = has_scale ? t[1 + packed_count] : Tensor{};
  const Tensor bias = has_bias ? t[1 + packed_count + has_scale] : Tensor{};
  const bool wants_scale = precision == Precision::INT8 || precision == Precision::FP8;
  if (has_scale != wants_scale || (has_scale && !f32_vec(scale)) || (has_bias && !f32_vec(bias)))
    return invalid_input("has scales or a bias of the wrong shape");
  if (amx) {
    const AmxType type = amx_type_for(precision);
    if (m[5] != static_cast<int32_t>(type) + 1) return invalid_input("holds another AMX type");
    AmxWeights w = amx_adopt_weights(type, n, k, t[1].data, storage);
    if (t[1].dtype != DType::U8 || t[1].nbytes() != static_cast<size_t>(w.bytes()))
      return invalid_input("holds " + std::to_string(t[1].nbytes()) +
                           " bytes of AMX weights, not " + std::to_string(w.bytes()));
    std::unique_ptr<PackedLinear> l = std::make_unique<AmxLinear>(
        precision, std::move(w), scale, bias, std::vector<OwnedTensor>{}, std::move(storage));
    return l;
  }
  FLICK_ASSIGN_OR_RETURN(
      std::unique_ptr<OnednnLinear> l,
      OnednnLinear::adopt(precision, n, k, t[2], t[1], scale, bias, std::move(storage)));
  return std::unique_ptr<PackedLinear>(std::move(l));
}

std::string packed_linear_kind(Precision precision, int64_t n, int64_t k, bool bias) {
  std::string layout;
  if (on_flick_gemm(precision, k)) {
    const AmxType t = amx_type_for(precision);
    layout = t == AmxType::S8 ? "amx-s8" : t == AmxType::F32 ? "amx-f32" : "amx-bf16";
  } else {
    layout = std::string("onednn-") + precision_name(precision);
  }
  return "packed-linear-v" + std::to_string(kPackedFormat) + " " + layout + " " +
         precision_name(precision) + " [" + std::to_string(n) + ", " + std::to_string(k) + "]" +
         (bias ? " bias" : "");
}

Expected<std::unique_ptr<PackedLinear>> pack_linear_cached(
    std::string_view layer, Precision precision, int64_t n, int64_t k, bool bias,
    const std::function<Expected<std::unique_ptr<PackedLinear>>()>& pack) {
  return plan_cached_object<PackedLinear>(
      layer, packed_linear_kind(precision, n, k, bias),
      [&]() -> Expected<std::unique_ptr<PackedLinear>> {
        FLICK_ASSIGN_OR_RETURN(std::unique_ptr<PackedLinear> l, pack());
        FLICK_CHECK(l->out_features() == n && l->in_features() == k,
                    "pack_linear_cached: pack() made another shape");
        return l;
      },
      packed_linear_tensors,
      [&](const PlanEntry& e) {
        return adopt_packed_linear(e.tensors(), precision, n, k, e.storage());
      });
}

void linear(const Tensor& x, const PackedLinear& w, Tensor& y, Activation act) {
  const ref::RowsView xr = ref::as_rows(x);
  const ref::RowsView yr = ref::as_rows(y);
  FLICK_CHECK(xr.cols == w.in_features() && yr.cols == w.out_features() && xr.rows == yr.rows,
              "linear shapes: x " + x.str() + ", y " + y.str() + ", weight [" +
                  std::to_string(w.out_features()) + ", " + std::to_string(w.in_features()) + "]");
  FLICK_CHECK((x.dtype == DType::F32 || x.dtype == DType::BF16) &&
                  (y.dtype == DType::F32 || y.dtype == DType::BF16),
              "linear: x and y must be F32 or BF16");
  if (const auto* amx = dynamic_cast<const AmxLinear*>(&w)) return amx->run(xr, yr, act);
  if (act == Activation::RoundGeluTanh) {
    // oneDNN cannot round between the matmul and a post-op: the linear
    // stores y and the GELU op runs on it, as PyTorch does (the GELU code
    // the AMX epilogue shares, so the paths differ only in the matmul).
    as_onednn(w).run(xr, yr, Activation::None);
    return gelu(y, y, /*tanh_approx=*/true);
  }
  as_onednn(w).run(xr, yr, act);
}

namespace {

// The fused kernel's operands when l1 -> l2 is an MLP it takes: K <= 4
// inputs, N <= 16 outputs, F32 / BF16 layers on flick's GEMMs (no weight
// scale), an AVX-512 CPU, rows with unit column stride. The weights come
// from the packed layers (exact, unpacked once per layer).
std::optional<ThinMlp> thin_mlp(const PackedLinear& l1, const PackedLinear& l2,
                                const ref::RowsView& x, const Tensor& hidden) {
  const auto* a = dynamic_cast<const AmxLinear*>(&l1);
  const auto* b = dynamic_cast<const AmxLinear*>(&l2);
  if (a == nullptr || b == nullptr || eltwise_kernels_for(Isa::Avx512) == nullptr) return {};
  auto plain = [](const AmxLinear& l) {
    return (l.weights().type == AmxType::F32 || l.weights().type == AmxType::BF16) &&
           l.scale().empty();
  };
  const int64_t k = l1.in_features(), h = l1.out_features(), n = l2.out_features();
  if (!plain(*a) || !plain(*b) || k > kThinMlpMaxK || n > kThinMlpMaxN || l2.in_features() != h)
    return {};
  ThinMlp m;
  m.k = k;
  m.h = h;
  m.n = n;
  m.n_pad = n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : n <= 8 ? 8 : 16;
  m.w1 = a->plain_f32().rows.data();
  m.b1 = a->bias().empty() ? nullptr : a->bias().ptr<float>();
  m.w2t = b->plain_f32().columns.data();
  m.b2 = b->bias().empty() ? nullptr : b->bias().ptr<float>();
  m.round_x = a->weights().type == AmxType::BF16 && x.dtype != DType::BF16;
  m.round_h = hidden.dtype == DType::BF16 || b->weights().type == AmxType::BF16;
  return m;
}

}  // namespace

void mlp_relu(const Tensor& x, const PackedLinear& l1, const PackedLinear& l2, Tensor& hidden,
              Tensor& y) {
  const ref::RowsView xr = ref::as_rows(x), yr = ref::as_rows(y), hr = ref::as_rows(hidden);
  // The scratch is checked even where the fused kernel leaves it unused, so
  // a wrong one fails alike on every backend and shape.
  FLICK_CHECK(hr.rows == xr.rows && hr.cols == l1.out_features() &&
                  (hidden.dtype == DType::F32 || hidden.dtype == DType::BF16),
              "mlp_relu: hidden " + hidden.str() + " is not F32 / BF16 [" +
                  std::to_string(xr.rows) + ", " + std::to_string(l1.out_features()) + "]");
  const bool unit_cols = x.stride(x.ndim() - 1) == 1 && y.stride(y.ndim() - 1) == 1;
  std::optional<ThinMlp> m;
  if (unit_cols && xr.cols == l1.in_features() && yr.cols == l2.out_features() &&
      xr.rows == yr.rows && (x.dtype == DType::F32 || x.dtype == DType::BF16) &&
      (y.dtype == DType::F32 || y.dtype == DType::BF16))
    m = thin_mlp(l1, l2, xr, hidden);
  if (!m) {
    linear(x, l1, hidden, Activation::Relu);
    linear(hidden, l2, y, Activation::None);
    return;
  }
  const int64_t blocks = (xr.rows + 15) / 16;
  parallel_for(
      blocks,
      [&](int64_t b0, int64_t b1) {
        thin_mlp_rows_avx512(*m, xr, yr, b0 * 16, std::min(xr.rows, b1 * 16));
      },
      4);
}

void matmul(const Tensor& a, const Tensor& b, Tensor& c) {
  const Tensor A = batched(a), B = batched(b), C = batched(c);
  const int64_t bt = A.dim(0), m = A.dim(1), k = A.dim(2), n = B.dim(2);
  FLICK_CHECK(B.dim(0) == bt && B.dim(1) == k && C.dim(0) == bt && C.dim(1) == m && C.dim(2) == n,
              "matmul shapes: a " + a.str() + ", b " + b.str() + ", c " + c.str());
  for (const Tensor* t : {&A, &B, &C})
    FLICK_CHECK(t->dtype == DType::F32 || t->dtype == DType::BF16,
                "matmul operands must be F32 or BF16: " + t->str());
  if (bt == 0 || m == 0 || n == 0) return;
  // bf16 x bf16 runs as such (exact products, fp32 accumulation); anything
  // mixed, or bf16 where oneDNN has no bf16 kernels, runs in f32 on exactly
  // converted operands. The primitive is created per call (oneDNN's
  // primitive cache makes a repeat cheap); this op is not a hot path.
  const bool both_bf16 = A.dtype == DType::BF16 && B.dtype == DType::BF16;
  if (!(both_bf16 && matmul_in(odt::bf16, A, B, C))) matmul_in(odt::f32, A, B, C);
}

}  // namespace flick::cpu
