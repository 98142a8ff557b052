// CPU linear and matmul.
//
// On CPUs with AMX, BF16 / FP8 / INT8 linear layers run on flick's own AMX
// GEMM (runtime/cpu/gemm.h): oneDNN 2.6 reaches 13-34 % of the AMX peak at
// the DiT shapes, the hand-written kernel several times that
// (bench/RESULTS.md). Capping oneDNN's ISA below AMX (ONEDNN_MAX_CPU_ISA)
// turns it off too, so one variable selects the kernels of a CPU class.
//
// Everywhere else (and for F32 layers): linear = one oneDNN matmul primitive per (M, dtypes,
// strides, activation), created on the first call and cached in the packed weights; weights are
// reordered once at pack time into the blocked layout brgemm wants. That
// layout depends on N, K, the dtypes and the ISA but not on M (checked for
// M = 1 .. 2640), so one reorder serves every M. Everything after the
// matmul is oneDNN post-ops, in this order:
//   F32 / BF16:  acc + bias -> act
//   FP8:         acc * w_scale[n] (output scales) + bias -> act
//   INT8:        acc * w_scale[n] (output scales) * x_scale[m] (binary_mul over
//                a [1, M, 1] tensor) + bias -> act
// INT8 runs only on oneDNN's brgemm int8 kernels (AVX-512 VNNI, AMX): they
// apply the [1, M, 1] row-scale post-op right, while oneDNN 2.6's gemm:jit
// int8 fallback below VNNI gave wrong sums even without post-ops when
// checked here with ONEDNN_MAX_CPU_ISA=AVX512_CORE. cpu_supports() tells
// loaders which precisions this CPU can run.
// oneDNN 2.6's brgemm needs dense rows: strided x is copied (or converted,
// or quantized) into a dense buffer owned by the plan, strided y is written
// through a dense buffer and copied out.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "runtime/cpu/gemm.h"
#include "runtime/cpu/onednn_info.h"
#include "runtime/cpu/onednn_util.h"
#include "runtime/cpu/ops.h"
#include "runtime/cpu/quantize.h"
#include "runtime/ref/matmul_common.h"

namespace flick::cpu {
namespace {

using dnnl::memory;
using odt = memory::data_type;
using tag = memory::format_tag;

// The M the weights are packed for (any M works with the result, see above).
constexpr int64_t kPackM = 1024;

size_t odt_size(odt t) { return t == odt::f32 ? 4 : t == odt::bf16 ? 2 : 1; }

// Rows of a [M, C] matrix as oneDNN sees them: [1, M, C] (3-d, so the
// per-row INT8 scale can be a binary post-op broadcast over [1, M, 1]).
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

// Everything one PlanKey needs, built on its first call.
struct Plan {
  PlanKey key;
  std::string impl;
  dnnl::matmul prim;
  std::unordered_map<int, memory> args;
  memory src, dst;  // what the primitive reads / writes (dense)
  HostBuffer src_buf, dst_buf, x_scales, scratchpad;
  bool quantize = false;  // INT8: x -> src_buf by quantize_rows()
  memory weights_copy;    // only when this M wants another weight layout
  bool x_direct = false;  // x is src: same dtype, dense rows
  bool y_direct = false;  // y is dst
  // x -> src and dst -> y conversions when not direct (strides, dtypes).
  std::optional<ReorderChain> x_in, y_out;
  memory y_mem;  // y as the caller laid it out; data handle set per call
};

class OnednnLinear final : public PackedLinear {
 public:
  explicit OnednnLinear(ref::PreparedWeights w);
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

  int64_t k_, n_;
  Precision precision_;
  odt src_type_;
  // BF16 / FP8 on a CPU where oneDNN has no bf16 kernels (below AVX-512):
  // an f32 GEMM on the same bf16-rounded operands, which is exact to the
  // same products (bf16 x bf16 is exact in fp32) with fp32 accumulation.
  bool emulate_bf16_ = false;
  int x_offset_ = 0;  // 128 when INT8 activations go in as u8
  std::vector<float> w_scale_;
  OwnedTensor bias_buf_;
  memory bias_, weights_, zero_point_;

  // One call at a time per packed layer: plans own the scratch buffers.
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<Plan>> plans_;
  mutable std::string last_impl_;
};

odt src_type_for(Precision p) {
  switch (p) {
    case Precision::F32: return odt::f32;
    case Precision::BF16:
    case Precision::FP8: return odt::bf16;
    case Precision::INT8: return int8_uses_u8_activations() ? odt::u8 : odt::s8;
  }
  return odt::undef;
}

OnednnLinear::OnednnLinear(ref::PreparedWeights w)
    : k_(w.k()), n_(w.n()), precision_(w.precision), src_type_(src_type_for(w.precision)) {
  const auto& eng = onednn_engine();
  if (src_type_ == odt::u8) {
    x_offset_ = 128;
    zero_point_ = memory({{1}, odt::s32, tag::a}, eng);
    *static_cast<int32_t*>(zero_point_.get_data_handle()) = x_offset_;
  }
  if (w.has_scale()) w_scale_.assign(w.scale.t.ptr<float>(), w.scale.t.ptr<float>() + n_);
  if (w.has_bias()) {
    bias_buf_ = std::move(w.bias);
    bias_ = memory({{1, 1, n_}, odt::f32, tag::abc}, eng, bias_buf_.t.data);
  }
  // W is [N, K] row-major, i.e. the [K, N] matmul operand in column-major.
  const odt wt = onednn_dtype(w.w.t.dtype);
  memory plain({{1, k_, n_}, wt, memory::dims{k_ * n_, 1, k_}}, eng, w.w.t.data);
  auto any_weights = [&] {
    return memory::desc({1, k_, n_}, wt == odt::bf16 ? src_type_ : wt, tag::any);
  };
  auto pd = try_primitive_desc(kPackM, any_weights(), dst_type_for(odt::bf16), Activation::None);
  if (!pd && src_type_ == odt::bf16) {
    emulate_bf16_ = true;
    src_type_ = odt::f32;
    pd = try_primitive_desc(kPackM, any_weights(), odt::f32, Activation::None);
  }
  FLICK_CHECK(pd.has_value(),
              std::string("oneDNN has no ") + precision_name(precision_) + " matmul on this CPU");
  last_impl_ = impl_name(*pd, "linear " + std::to_string(n_) + "x" + std::to_string(k_));
  weights_ = memory(pd->weights_desc(), eng);
  dnnl::reorder(plain, weights_).execute(onednn_stream(), plain, weights_);
  onednn_stream().wait();
}

std::optional<dnnl::matmul::primitive_desc> OnednnLinear::try_primitive_desc(
    int64_t m, const memory::desc& weights, odt dst_type, Activation act) const {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (!w_scale_.empty()) attr.set_output_scales(1 << 2, w_scale_);  // per N
  if (x_offset_ != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  dnnl::post_ops po;
  if (precision_ == Precision::INT8)
    po.append_binary(dnnl::algorithm::binary_mul, memory::desc({1, m, 1}, odt::f32, tag::abc));
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
  for (auto& p : plans_)
    if (p->key == key) return *p;
  auto p = std::make_unique<Plan>();
  p->key = key;
  build(*p);
  plans_.push_back(std::move(p));
  return *plans_.back();
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
    p.weights_copy = memory(found->weights_desc(), eng);
    dnnl::reorder(weights, p.weights_copy).execute(onednn_stream(), weights, p.weights_copy);
    weights = p.weights_copy;
  }
  const dnnl::matmul::primitive_desc& pd = *found;
  FLICK_CHECK(precision_ != Precision::INT8 || std::string(pd.impl_info_str()).rfind("brg", 0) == 0,
              std::string("INT8 linear got oneDNN's ") + pd.impl_info_str() +
                  ", which mishandles the per-row scale; INT8 needs AVX-512 VNNI or AMX");
  p.impl = impl_name(pd, "linear M=" + std::to_string(m));
  p.prim = dnnl::matmul(pd);
  p.scratchpad = HostBuffer(pd.scratchpad_desc().get_size());

  p.quantize = precision_ == Precision::INT8;
  p.x_direct = !p.quantize && !emulate_bf16_ && onednn_dtype(key.x) == src_type_ && key.ldx == k_;
  if (!p.x_direct) p.src_buf = HostBuffer(static_cast<size_t>(m * k_) * odt_size(src_type_));
  p.src = memory(pd.src_desc(), eng, p.x_direct ? DNNL_MEMORY_NONE : p.src_buf.data());
  if (!p.x_direct && !p.quantize)
    p.x_in.emplace(rows_md(m, k_, key.ldx, onednn_dtype(key.x)), p.src, emulate_bf16_);

  p.y_direct = dst_type == y_type && key.ldy == n_;
  if (!p.y_direct) p.dst_buf = HostBuffer(static_cast<size_t>(m * n_) * odt_size(dst_type));
  p.dst = memory(pd.dst_desc(), eng, p.y_direct ? DNNL_MEMORY_NONE : p.dst_buf.data());
  if (!p.y_direct) {
    // dst -> y: the chain's source is dst, its target a view of y set per call.
    p.y_mem = memory(rows_md(m, n_, key.ldy, y_type), eng, DNNL_MEMORY_NONE);
    p.y_out.emplace(p.dst.get_desc(), p.y_mem, false);
  }

  p.args = {{DNNL_ARG_SRC, p.src},
            {DNNL_ARG_WEIGHTS, weights},
            {DNNL_ARG_DST, p.dst},
            {DNNL_ARG_SCRATCHPAD, memory(pd.scratchpad_desc(), eng, p.scratchpad.data())}};
  int post_op = 0;
  if (p.quantize) {
    p.x_scales = HostBuffer(static_cast<size_t>(m) * sizeof(float));
    p.args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(post_op++) | DNNL_ARG_SRC_1] =
        memory({{1, m, 1}, odt::f32, tag::abc}, eng, p.x_scales.data());
  }
  if (bias_) p.args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(post_op++) | DNNL_ARG_SRC_1] = bias_;
  if (x_offset_ != 0) p.args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC] = zero_point_;
}

void OnednnLinear::run(const ref::RowsView& x, const ref::RowsView& y, Activation act) const {
  if (x.rows == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  Plan& p = plan({x.rows, x.dtype, y.dtype, x.ld, y.ld, act});
  last_impl_ = p.impl;
  dnnl::stream& s = onednn_stream();
  if (p.quantize) {
    quantize_rows(x, p.src_buf.data(), k_, static_cast<float*>(p.x_scales.data()), x_offset_);
  } else if (p.x_direct) {
    p.src.set_data_handle(x.data);
  } else {
    p.x_in->run(s, x.data);
  }
  if (p.y_direct) p.dst.set_data_handle(y.data);
  p.prim.execute(s, p.args);
  if (!p.y_direct) {
    p.y_mem.set_data_handle(y.data);
    p.y_out->run(s, p.dst_buf.data());
  }
  s.wait();
}

// Per calling thread: the packed activations, row scales and per-worker
// scratch of the AMX GEMM. Shared by every layer the thread runs (one call
// at a time), sized by the largest; grows on first use only.
struct AmxCallBuffers {
  HostBuffer a, row_scales;
  AmxScratch scratch;
  void* reserve(HostBuffer& b, size_t bytes) {
    if (b.size() < bytes) b = HostBuffer(bytes);
    return b.data();
  }
};
AmxCallBuffers& amx_call_buffers() {
  thread_local AmxCallBuffers buffers;
  return buffers;
}

// A linear layer on the AMX GEMM: weights packed once into B tiles (BF16 for
// BF16 and FP8, whose values bf16 holds exactly; s8 for INT8); activations
// converted or quantized into A tiles per call.
class AmxLinear final : public PackedLinear {
 public:
  explicit AmxLinear(ref::PreparedWeights w)
      : precision_(w.precision),
        weights_(
            amx_pack_weights(w.w, w.precision == Precision::INT8 ? AmxType::S8 : AmxType::BF16)),
        scale_(std::move(w.scale)),
        bias_(std::move(w.bias)) {}
  int64_t in_features() const override { return weights_.k; }
  int64_t out_features() const override { return weights_.n; }
  Precision precision() const override { return precision_; }
  std::string impl() const {
    return weights_.type == AmxType::S8 ? "flick:amx_int8" : "flick:amx_bf16";
  }

  void run(const ref::RowsView& x, const ref::RowsView& y, Activation act) const {
    if (x.rows == 0) return;
    AmxCallBuffers& buf = amx_call_buffers();
    AmxActivations a;
    a.type = weights_.type;
    a.m = x.rows;
    a.m_pad = amx_round_up(x.rows, 32);
    a.k_pad = weights_.k_pad;
    a.data = buf.reserve(buf.a, amx_activation_bytes(a.type, a.m, weights_.k));
    AmxEpilogue e;
    e.col_scale = scale_.t.empty() ? nullptr : scale_.t.ptr<float>();
    e.bias = bias_.t.empty() ? nullptr : bias_.t.ptr<float>();
    e.act = act;
    e.y = y;
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
  Precision precision_;
  AmxWeights weights_;
  OwnedTensor scale_;  // F32 [N] for INT8 / FP8
  OwnedTensor bias_;   // F32 [N] or empty
};

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

bool int8_uses_u8_activations() {
  // Measured (bench/RESULTS.md): with AMX, s8 and u8 run at the same speed
  // and s8 needs no zero-point compensation; on AVX-512 VNNI, which has no
  // s8 x s8 instruction, oneDNN's own s8 handling is ~20 % slower than
  // feeding u8 with a zero point of 128.
  static const bool u8 = dnnl::get_effective_cpu_isa() < dnnl::cpu_isa::avx512_core_amx;
  return u8;
}

bool linear_uses_amx() {
  static const bool yes =
      amx_available() && dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core_amx;
  return yes;
}

std::string linear_impl(const PackedLinear& w) {
  if (const auto* amx = dynamic_cast<const AmxLinear*>(&w)) return amx->impl();
  return as_onednn(w).impl();
}

bool cpu_supports(Precision p) {
  // F32 everywhere; BF16 / FP8 natively from AVX-512 on, else emulated
  // exactly in f32; INT8 only with brgemm int8 (see the top of this file).
  return p != Precision::INT8 || dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core_vnni;
}

std::unique_ptr<PackedLinear> pack_linear(const LinearDesc& d) {
  FLICK_CHECK(d.w.ndim() == 2, "linear weight must be [N, K]: " + d.w.str());
  FLICK_CHECK(cpu_supports(d.precision),
              std::string(precision_name(d.precision)) + " linear is not supported on this CPU");
  ref::PreparedWeights w = ref::prepare_weights(d.w, d.w_scale, d.bias, d.precision);
  if (d.precision != Precision::F32 && linear_uses_amx())
    return std::make_unique<AmxLinear>(std::move(w));
  return std::make_unique<OnednnLinear>(std::move(w));
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
