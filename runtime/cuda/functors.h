// The bodies of the CUDA backend's own kernels, written once as __host__
// __device__ functors: nvcc instantiates them behind the GPU launchers
// (runtime/cuda/launch_cuda.cuh), the host compiler behind the CPU launchers
// (runtime/cuda/launch_host.h) that tests/cuda_host runs against runtime/ref
// on machines without a GPU (docs: shared/research/cuda-backend.md, section 4).
//
// Three shape classes, one launcher each:
//  - elementwise: f(i) for i in [0, n), i = row-major index of the output;
//  - row-reduce:  per row, acc = combine(partial(row, i)...), stats =
//                 finalize(row, acc), then apply(row, i, stats) for every i;
//                 combine is associative (a GPU block reduces in a tree);
//  - index-map:   elementwise over the output with gather index arithmetic
//                 (RoPE pairs, nearest upsampling).
// Maths in fp32, one rounding at the store (the Backend convention). The
// functors hold only PODs (device pointers, dims, strides), so they copy to
// the GPU as kernel arguments. F32 and BF16 tensors only (the Backend's float
// types), plus I8 / FP8-E4M3 where an op names them.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "runtime/dtype.h"

#if defined(__CUDACC__)
#define FLICK_HD __host__ __device__ __forceinline__
#else
#define FLICK_HD inline
#endif

namespace flick::cuda {

inline constexpr int kDims = 6;  // = kMaxDims of runtime/tensor.h

// ---- scalar conversions, bit-exact with runtime/dtype.h on host and device ----
FLICK_HD uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
FLICK_HD float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
// c10 round-to-nearest-even, every NaN to 0x7FC0 (as f32_to_bf16).
FLICK_HD uint16_t to_bf16(float f) {
  if (f != f) return 0x7FC0;
  const uint32_t u = bits_of(f);
  return static_cast<uint16_t>((u + ((u >> 16) & 1u) + 0x7FFFu) >> 16);
}
FLICK_HD float from_bf16(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }
// As f8e4m3_to_f32 (weight dequantisation).
FLICK_HD float from_e4m3(uint8_t v) {
  const uint32_t sign = (v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xFu, mant = v & 0x7u;
  if (exp == 0xF && mant == 0x7) return float_of(sign | 0x7FF00000u);
  const float mag =
      exp == 0 ? static_cast<float>(mant) * 0x1p-9f : float_of(((exp + 120u) << 23) | (mant << 20));
  return float_of(bits_of(mag) | sign);
}

// As f32_to_f8e4m3 (runtime/dtype.h, c10's fp8e4m3fn_from_fp32_value):
// round to nearest even, finite overflow and +-inf to +-448, NaN to 0x7F.
FLICK_HD uint8_t to_e4m3(float f) {
  const uint32_t fp8_max = 1087u << 20, denorm_mask = 141u << 23;
  uint32_t b = bits_of(f);
  const uint32_t sign = b & 0x80000000u;
  b ^= sign;
  uint8_t r;
  if (b >= fp8_max) {
    r = b > 0x7F800000u ? 0x7F : 0x7E;
  } else if (b < (121u << 23)) {
    b = bits_of(float_of(b) + float_of(denorm_mask));
    r = static_cast<uint8_t>(b - denorm_mask);
  } else {
    const uint32_t mant_odd = (b >> 20) & 1u;
    b += (static_cast<uint32_t>(7 - 127) << 23) + 0x7FFFFu;
    b += mant_odd;
    r = static_cast<uint8_t>(b >> 20);
    if (r == 0x7F) r = 0x7E;
  }
  return static_cast<uint8_t>(r | (sign >> 24));
}

// Products and sums that must not fuse into an FMA (the stepwise ops round
// each op as PyTorch does): nvcc contracts a * b + c by default, and so does
// g++ for C++ (-ffp-contract=fast) with -mfma; the volatile store rounds the
// host's value to fp32 / fp64 whatever the flags (host code is for the
// tests). Float for the stepwise ops, double for rope_3d's complex128 product.
template <class T>
FLICK_HD T mul_rn(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 8) {
    return __dmul_rn(a, b);
  } else {
    return __fmul_rn(a, b);
  }
#else
  volatile T p = a * b;
  return p;
#endif
}
template <class T>
FLICK_HD T add_rn(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 8) {
    return __dadd_rn(a, b);
  } else {
    return __fadd_rn(a, b);
  }
#else
  volatile T s = a + b;
  return s;
#endif
}

// ---- strided operands ----
// n / d for n < 2^31 as one high multiply, an add and a shift (Granlund and
// Montgomery's round-up method, as PyTorch's IntDivider): the GPU has no
// integer divider, and a division by a runtime value is a long sequence.
struct FastDiv {
  uint32_t d = 1, m = 1;
  uint32_t shift = 0;
  FastDiv() = default;
  explicit FastDiv(uint32_t divisor) : d(divisor) {
    while (shift < 32 && (uint64_t{1} << shift) < divisor) ++shift;
    m = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - divisor)) / divisor +
                              1);
  }
  FLICK_HD uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t t = __umulhi(n, m);
#else
    const uint32_t t = static_cast<uint32_t>((static_cast<uint64_t>(n) * m) >> 32);
#endif
    return (t + n) >> shift;
  }
};

// The output's shape (row-major index space of the elementwise launcher).
struct Dims {
  int ndim = 0;
  int64_t d[kDims] = {};
  // Every flat index is below 2^31 (functor_ops.h finish_dims): walk()
  // divides in 32 bits through fd.
  bool narrow = false;
  FastDiv fd[kDims];
  FLICK_HD int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= d[i];
    return n;
  }
  // f(k, c) for the coordinate c of flat index i in every dim k, innermost first.
  template <class F>
  FLICK_HD void walk(int64_t i, F&& f) const {
    // One and two dims (what coalesce leaves of contiguous and row-broadcast
    // operands) with constant dim indices: a runtime index into the
    // functor's arrays makes nvcc copy the kernel parameters to local memory.
    if (narrow && ndim == 1) {
      f(0, i);
      return;
    }
    if (narrow && ndim == 2) {
      const uint32_t r = static_cast<uint32_t>(i), q = fd[1].div(r);
      f(1, static_cast<int64_t>(r - q * fd[1].d));
      f(0, static_cast<int64_t>(q));
      return;
    }
    if (narrow) {
      uint32_t r = static_cast<uint32_t>(i);
      for (int k = ndim - 1; k >= 0; --k) {
        const uint32_t q = fd[k].div(r);
        f(k, static_cast<int64_t>(r - q * fd[k].d));
        r = q;
      }
    } else {
      for (int k = ndim - 1; k >= 0; --k) {
        f(k, i % d[k]);
        i /= d[k];
      }
    }
  }
};
// An operand read or written at the output's index: its strides in elements,
// broadcast operands with stride 0 in the repeated dims.
struct Operand {
  void* data = nullptr;
  DType dtype = DType::F32;
  int64_t s[kDims] = {};

  FLICK_HD int64_t offset(const Dims& dims, int64_t i) const {
    int64_t off = 0;
    dims.walk(i, [&](int k, int64_t c) { off += c * s[k]; });
    return off;
  }
  FLICK_HD float load(int64_t off) const {
    return dtype == DType::BF16 ? from_bf16(static_cast<const uint16_t*>(data)[off])
                                : static_cast<const float*>(data)[off];
  }
  FLICK_HD void store(int64_t off, float v) const {
    if (dtype == DType::BF16) {
      static_cast<uint16_t*>(data)[off] = to_bf16(v);
    } else {
      static_cast<float*>(data)[off] = v;
    }
  }
  // v rounded to this operand's dtype (the RoundGeluTanh pre-rounding).
  FLICK_HD float round(float v) const { return dtype == DType::BF16 ? from_bf16(to_bf16(v)) : v; }
};

// ---- activations (the Activation enum of runtime/backend.h) ----
enum class Act : uint8_t { None, GeluErf, GeluTanh, Silu, RoundGeluTanh, Relu, Sigmoid };

FLICK_HD float sigmoid_f(float v) {
  // 1 / (1 + e^-v) for v >= 0, e^v / (1 + e^v) below: no overflow for either
  // sign. One exp for both (no divergent branches on a GPU); NaN stays NaN.
  const float e = expf(-fabsf(v));
  return (v >= 0.f ? 1.f : e) / (1.f + e);
}
FLICK_HD float gelu_tanh_f(float v) {
  // 0.5 v (1 + tanh(u)) = v sigmoid(2u): no cancellation for negative v.
  const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
  return v * sigmoid_f(2.f * u);
}
FLICK_HD float activate(float v, Act act, const Operand& out) {
  switch (act) {
    case Act::None: return v;
    case Act::GeluErf: return 0.5f * v * erfcf(-v * 0.7071067811865476f);
    case Act::GeluTanh: return gelu_tanh_f(v);
    case Act::RoundGeluTanh: return gelu_tanh_f(out.round(v));
    case Act::Silu: return v * sigmoid_f(v);
    case Act::Relu: return v > 0.f ? v : (v == v ? 0.f : v);  // NaN stays NaN, as torch
    case Act::Sigmoid: return sigmoid_f(v);
  }
  return v;
}

// ---- elementwise ----
// y = op(in[0], ..., in[N-1]) with every input broadcast to y's dims.
template <int N, class Op>
struct Map {
  Dims dims;
  Operand in[N];
  Operand out;
  Op op;
  FLICK_HD void operator()(int64_t i) const {
    int64_t off[N + 1] = {};  // the coordinates once, every operand's offset from them
    dims.walk(i, [&](int k, int64_t c) {
      for (int j = 0; j < N; ++j) off[j] += c * in[j].s[k];
      off[N] += c * out.s[k];
    });
    float v[N];
    for (int k = 0; k < N; ++k) v[k] = in[k].load(off[k]);
    out.store(off[N], op(v, out));
  }
};

struct CopyOp {  // dtype conversion, transpose, slice (copy of a strided view)
  FLICK_HD float operator()(const float* v, const Operand&) const { return v[0]; }
};
struct ActOp {
  Act act;
  FLICK_HD float operator()(const float* v, const Operand& out) const {
    return activate(v[0], act, out);
  }
};
struct AffineOp {
  float alpha, beta;
  FLICK_HD float operator()(const float* v, const Operand&) const { return v[0] * alpha + beta; }
};
struct AddOp {
  FLICK_HD float operator()(const float* v, const Operand&) const { return v[0] + v[1]; }
};
struct MulOp {
  FLICK_HD float operator()(const float* v, const Operand&) const { return v[0] * v[1]; }
};
struct MulAddOp {  // a + b * c (one rounding; FMA allowed)
  FLICK_HD float operator()(const float* v, const Operand&) const { return v[0] + v[1] * v[2]; }
};
struct ModulateOp {  // x * (1 + scale) + shift; inputs (x, shift, scale)
  FLICK_HD float operator()(const float* v, const Operand&) const {
    return v[0] * (1.f + v[2]) + v[1];
  }
};
struct MulAddStepwiseOp {  // a + round(b * c): PyTorch's separate mul and add
  FLICK_HD float operator()(const float* v, const Operand& out) const {
    return add_rn(v[0], out.round(mul_rn(v[1], v[2])));
  }
};

// ---- row-reduce ----
// A row functor provides: rows(), len(), Acc init(), Acc partial(row, i),
// Acc combine(Acc, Acc), Stats finalize(Acc), apply(row, i, Stats).
// Rows address the input/output through a row offset table given by the
// outer dims (last dim = the reduced one).
struct Rows {
  Dims outer;              // all dims but the last
  int64_t xs[kDims] = {};  // x's outer strides
  int64_t ys[kDims] = {};  // y's outer strides
  int64_t n = 0;           // row length
  int64_t sx = 1, sy = 1;  // last-dim strides
  FLICK_HD int64_t count() const { return outer.numel(); }
  FLICK_HD int64_t off(const int64_t* s, int64_t r) const {
    if (outer.ndim == 1) return r * s[0];  // rows_of merges what it can into one dim
    int64_t o = 0;
    outer.walk(r, [&](int k, int64_t c) { o += c * s[k]; });
    return o;
  }
};

// Chan's parallel mean/variance: combine in any order.
struct MeanVar {
  float count, mean, m2;
};
FLICK_HD MeanVar mean_var_combine(MeanVar a, MeanVar b) {
  const float n = a.count + b.count;
  if (n == 0.f) return a;
  const float d = b.mean - a.mean;
  const float f = b.count / n;
  return {n, a.mean + d * f, a.m2 + b.m2 + d * d * a.count * f};
}

// Affine parameter vector (weight / bias) or none.
struct Param {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t s = 1;
  FLICK_HD float at(int64_t i, float dflt) const {
    if (!data) return dflt;
    return dtype == DType::BF16 ? from_bf16(static_cast<const uint16_t*>(data)[i * s])
                                : static_cast<const float*>(data)[i * s];
  }
};

// Two floats of row statistics (mean and 1/std, max and 1/sum, ...).
struct Stats2 {
  float a, b;
};

// Base of the row functors: x and y as (data, dtype) with their strides in r.
struct RowIo {
  Rows r;
  Operand x, y;  // the Operand strides are unused: rows carry them
  FLICK_HD int64_t rows() const { return r.count(); }
  FLICK_HD int64_t len() const { return r.n; }
  FLICK_HD float ld(int64_t row, int64_t i) const { return x.load(r.off(r.xs, row) + i * r.sx); }
  FLICK_HD void st(int64_t row, int64_t i, float v) const {
    y.store(r.off(r.ys, row) + i * r.sy, v);
  }
};

// LayerNorm over the last dim: (x - mean) / sqrt(var + eps) * w + b.
struct LayerNormRow : RowIo {
  Param w, b;
  float eps;
  using Acc = MeanVar;
  FLICK_HD Acc init() const { return {0.f, 0.f, 0.f}; }
  FLICK_HD Acc partial(int64_t row, int64_t i) const { return {1.f, ld(row, i), 0.f}; }
  FLICK_HD Acc combine(Acc p, Acc q) const { return mean_var_combine(p, q); }
  FLICK_HD Stats2 finalize(Acc a) const { return {a.mean, 1.f / sqrtf(a.m2 / a.count + eps)}; }
  FLICK_HD void apply(int64_t row, int64_t i, Stats2 s) const {
    st(row, i, (ld(row, i) - s.a) * s.b * w.at(i, 1.f) + b.at(i, 0.f));
  }
};

// RMSNorm: x / sqrt(mean(x^2) + eps) * w.
struct RmsNormRow : RowIo {
  Param w;
  float eps;
  using Acc = float;
  FLICK_HD Acc init() const { return 0.f; }
  FLICK_HD Acc partial(int64_t row, int64_t i) const {
    const float v = ld(row, i);
    return v * v;
  }
  FLICK_HD Acc combine(Acc p, Acc q) const { return p + q; }
  FLICK_HD Stats2 finalize(Acc a) const {
    return {0.f, 1.f / sqrtf(a / static_cast<float>(r.n) + eps)};
  }
  FLICK_HD void apply(int64_t row, int64_t i, Stats2 s) const {
    st(row, i, ld(row, i) * s.b * w.at(i, 1.f));
  }
};

// Softmax over the last dim, one pass: the online (max, sum of exp) pair.
struct MaxSum {
  float m, s;
};
struct SoftmaxRow : RowIo {
  using Acc = MaxSum;
  FLICK_HD Acc init() const { return {-INFINITY, 0.f}; }
  FLICK_HD Acc partial(int64_t row, int64_t i) const { return {ld(row, i), 1.f}; }
  FLICK_HD Acc combine(Acc p, Acc q) const {
    if (p.m == -INFINITY) return q;
    if (q.m == -INFINITY) return p;
    const float m = fmaxf(p.m, q.m);
    return {m, p.s * expf(p.m - m) + q.s * expf(q.m - m)};
  }
  FLICK_HD Stats2 finalize(Acc a) const { return {a.m, 1.f / a.s}; }
  FLICK_HD void apply(int64_t row, int64_t i, Stats2 s) const {
    st(row, i, expf(ld(row, i) - s.a) * s.b);
  }
};

// Per-row dynamic quantisation; a zero row gets scale 1 and q = 0.
//  - int8 (ref quantize_row_int8): scale = amax / 127, q = clamp(rint(x / scale));
//  - FP8 E4M3 (the CUDA backend's W8A8 FP8): scale = amax / 448,
//    q = to_e4m3(x / scale).
// y is q (I8 or F8_E4M3 bytes; its dtype ignored), scale an F32 [rows] vector.
struct QuantizeRow : RowIo {
  float* scale;
  bool fp8;
  using Acc = float;
  FLICK_HD Acc init() const { return 0.f; }
  FLICK_HD Acc partial(int64_t row, int64_t i) const { return fabsf(ld(row, i)); }
  FLICK_HD Acc combine(Acc p, Acc q) const { return fmaxf(p, q); }
  FLICK_HD Stats2 finalize(Acc a) const { return {a / (fp8 ? 448.f : 127.f), 0.f}; }
  FLICK_HD void apply(int64_t row, int64_t i, Stats2 s) const {
    uint8_t* q = static_cast<uint8_t*>(y.data) + r.off(r.ys, row) + i * r.sy;
    if (i == 0) scale[row] = s.a == 0.f ? 1.f : s.a;
    if (s.a == 0.f) {
      *q = 0;
    } else if (fp8) {
      *q = to_e4m3(ld(row, i) / s.a);
    } else {
      *q = static_cast<uint8_t>(
          static_cast<int8_t>(fminf(fmaxf(rintf(ld(row, i) / s.a), -127.f), 127.f)));
    }
  }
};

// GroupNorm over x [N, C, S] (spatial dims flattened, contiguous within a
// channel): row = (n, g), its elements the cpg * S values of the group.
struct GroupNormRow {
  Operand x, y;
  int64_t N, C, S, groups;
  int64_t xs0, xs1, xs2, ys0, ys1, ys2;  // strides of [N, C, S]
  Param w, b;
  float eps;
  using Acc = MeanVar;
  FLICK_HD int64_t rows() const { return N * groups; }
  FLICK_HD int64_t len() const { return C / groups * S; }
  FLICK_HD int64_t ch(int64_t row, int64_t i) const { return row % groups * (C / groups) + i / S; }
  FLICK_HD float ld(int64_t row, int64_t i) const {
    return x.load(row / groups * xs0 + ch(row, i) * xs1 + i % S * xs2);
  }
  FLICK_HD Acc init() const { return {0.f, 0.f, 0.f}; }
  FLICK_HD Acc partial(int64_t row, int64_t i) const { return {1.f, ld(row, i), 0.f}; }
  FLICK_HD Acc combine(Acc p, Acc q) const { return mean_var_combine(p, q); }
  FLICK_HD Stats2 finalize(Acc a) const { return {a.mean, 1.f / sqrtf(a.m2 / a.count + eps)}; }
  FLICK_HD void apply(int64_t row, int64_t i, Stats2 s) const {
    const int64_t c = ch(row, i);
    y.store(row / groups * ys0 + c * ys1 + i % S * ys2,
            (ld(row, i) - s.a) * s.b * w.at(c, 1.f) + b.at(c, 0.f));
  }
};

// PyTorch-rounded weight-free RMS norm (rms_norm_stepwise): x^2 rounded to
// y's dtype, summed in fp32, the mean, + eps, the root and its inverse each
// rounded, then x * inv rounded at the store. Bit-exact with the reference
// through the CPU launcher (the same sequential sum); a GPU block sums in a
// tree, within fp32 rounding of it.
struct RmsNormStepwiseRow : RowIo {
  float eps;
  using Acc = float;
  FLICK_HD Acc init() const { return 0.f; }
  FLICK_HD Acc partial(int64_t row, int64_t i) const {
    const float v = ld(row, i);
    return y.round(mul_rn(v, v));
  }
  FLICK_HD Acc combine(Acc p, Acc q) const { return add_rn(p, q); }
  FLICK_HD Stats2 finalize(Acc a) const {
    const float mean = y.round(a / static_cast<float>(r.n));
    return {0.f, y.round(1.f / y.round(sqrtf(y.round(add_rn(mean, eps)))))};
  }
  FLICK_HD void apply(int64_t row, int64_t i, Stats2 s) const {
    st(row, i, mul_rn(ld(row, i), s.b));
  }
};

// F.normalize(x, dim=-1) * scale * gamma, then SiLU or not (normalize_l2),
// rounded per op (PerOp) or once (Once). Sum of squares in fp32 (the
// reference: double), so PerOp can differ from it by one rounding of y.
struct NormalizeL2Row : RowIo {
  const float* gamma;
  float scale;
  bool per_op, silu;
  using Acc = float;
  FLICK_HD Acc init() const { return 0.f; }
  FLICK_HD Acc partial(int64_t row, int64_t i) const {
    const float v = ld(row, i);
    return v * v;
  }
  FLICK_HD Acc combine(Acc p, Acc q) const { return p + q; }
  FLICK_HD Stats2 finalize(Acc a) const {
    float norm = sqrtf(a);
    if (per_op) norm = y.round(norm);
    return {fmaxf(norm, 1e-12f), 0.f};
  }
  FLICK_HD void apply(int64_t row, int64_t i, Stats2 s) const {
    const float v = ld(row, i);
    float q =
        per_op ? y.round(y.round(y.round(v / s.a) * scale) * gamma[i]) : v / s.a * scale * gamma[i];
    if (silu) q = q * sigmoid_f(q);
    st(row, i, q);
  }
};

// softmax_parts: p = exp(x * scale - max) (the scaled value and the shift
// in fp32) stored in p's dtype, inv_sum[row] = 1 / the fp32 sum of the exps.
// x F32 (y = p).
struct SoftmaxPartsRow : RowIo {
  float scale;
  float* inv_sum;
  using Acc = MaxSum;
  FLICK_HD float scaled(int64_t row, int64_t i) const { return mul_rn(ld(row, i), scale); }
  FLICK_HD Acc init() const { return {-INFINITY, 0.f}; }
  FLICK_HD Acc partial(int64_t row, int64_t i) const { return {scaled(row, i), 1.f}; }
  FLICK_HD Acc combine(Acc p, Acc q) const { return SoftmaxRow{}.combine(p, q); }
  FLICK_HD Stats2 finalize(Acc a) const { return {a.m, 1.f / a.s}; }
  FLICK_HD void apply(int64_t row, int64_t i, Stats2 s) const {
    st(row, i, expf(scaled(row, i) - s.a));
    if (i == 0) inv_sum[row] = s.b;
  }
};

// ---- index-map ----
// Interleaved-pair RoPE over x, y [B, L, H, D], F32 tables cos/sin [L, D/2]
// (contiguous): index i runs over the B * L * H * D/2 pairs.
struct RopePairs {
  Operand x, y;  // strides of [B, L, H, D] in s[0..3]
  int64_t B, L, H, half;
  const float *cos, *sin;
  bool unfused;
  FLICK_HD int64_t size() const { return B * L * H * half; }
  FLICK_HD void operator()(int64_t i) const {
    const int64_t p = i % half, h = i / half % H, l = i / (half * H) % L, b = i / (half * H * L);
    const int64_t ox = b * x.s[0] + l * x.s[1] + h * x.s[2];
    const int64_t oy = b * y.s[0] + l * y.s[1] + h * y.s[2];
    const float c = cos[l * half + p], s = sin[l * half + p];
    const float x0 = x.load(ox + 2 * p * x.s[3]), x1 = x.load(ox + (2 * p + 1) * x.s[3]);
    if (unfused) {  // rope_unfused: each product and the sum rounded to fp32
      y.store(oy + 2 * p * y.s[3], add_rn(mul_rn(x0, c), -mul_rn(x1, s)));
      y.store(oy + (2 * p + 1) * y.s[3], add_rn(mul_rn(x1, c), mul_rn(x0, s)));
      return;
    }
    y.store(oy + 2 * p * y.s[3], x0 * c - x1 * s);
    y.store(oy + (2 * p + 1) * y.s[3], x0 * s + x1 * c);
  }
};

// Wan's 3-D RoPE (rope_3d, Rope3dParams): x, y [tokens, H, D]; index i runs
// over tokens * H * D/2 pairs. Angles, cos/sin and the complex product in
// f64, rounded once. Bit-exact with the reference on the host; the GPU's f64
// cos/sin are within an ulp or two of glibc's, which the f32 rounding hides
// but for rare ties.
struct Rope3d {
  Operand x, y;  // strides of [tokens, H, D] in s[0..2]
  int64_t grid[3];
  int pairs[3];
  // (cos, sin) of each axis' angles, made on the host (functor_ops.h
  // rope_3d_table): axis a, position p, pair j at table[tab_off[a] + 2 (p
  // pairs[a] + j)]. f64 pow / cos / sin per element cost a GPU more than the
  // whole op otherwise.
  const double* table;
  int64_t tab_off[3];
  int64_t H, half;
  FLICK_HD int64_t size() const { return grid[0] * grid[1] * grid[2] * H * half; }
  FLICK_HD void operator()(int64_t i) const {
    // Indices in 32 bits: rope_3d checks size() < 2^31.
    const uint32_t u = static_cast<uint32_t>(i), uh = static_cast<uint32_t>(half),
                   uH = static_cast<uint32_t>(H), g1 = static_cast<uint32_t>(grid[1]),
                   g2 = static_cast<uint32_t>(grid[2]);
    const uint32_t pair = u % uh, h = u / uh % uH, tok = u / (uh * uH);
    const uint32_t coord[3] = {tok / (g1 * g2), tok / g2 % g1, tok % g2};
    int axis = 0, j = static_cast<int>(pair);
    while (j >= pairs[axis]) j -= pairs[axis++];
    const double* cs = table + tab_off[axis] + 2 * (coord[axis] * pairs[axis] + j);
    const double c = cs[0], s = cs[1];
    const int64_t ox = tok * x.s[0] + h * x.s[1], oy = tok * y.s[0] + h * y.s[1];
    const double a = x.load(ox + 2 * pair * x.s[2]), b = x.load(ox + (2 * pair + 1) * x.s[2]);
    const double re = add_rn(mul_rn(a, c), -mul_rn(b, s));
    const double im = add_rn(mul_rn(b, c), mul_rn(a, s));
    y.store(oy + 2 * pair * y.s[2], static_cast<float>(re));
    y.store(oy + (2 * pair + 1) * y.s[2], static_cast<float>(im));
  }
};

// reduce over one dim (y has it of size 1): each output element walks the
// reduced dim in order, in fp32 (the reference: double). NaN propagates.
struct ReduceDim {
  Dims ydims;
  Operand x, y;   // x's strides over ydims' rank (the reduced dim at index 0)
  int64_t n, sd;  // length and stride of the reduced dim
  int op;         // ReduceOp: 0 Sum, 1 Mean, 2 Max, 3 Min
  FLICK_HD void operator()(int64_t i) const {
    const int64_t ox = x.offset(ydims, i);
    float acc = op == 2 ? -INFINITY : (op == 3 ? INFINITY : 0.f);
    bool nan = false;
    for (int64_t k = 0; k < n; ++k) {
      const float v = x.load(ox + k * sd);
      nan |= v != v;
      acc = op <= 1 ? acc + v : (op == 2 ? fmaxf(acc, v) : fminf(acc, v));
    }
    if (op == 1) acc /= static_cast<float>(n);
    y.store(y.offset(ydims, i), nan ? NAN : acc);
  }
};

// Separable resize taps of one dim (runtime/ref/resample.h Taps, staged
// where the launcher runs): output i reads input first[i] + j, clamped, for
// j < count[i], weighted by weight[i * width + j].
struct ResizeTaps {
  const int64_t* first;
  const int* count;
  const float* weight;
  int width;
  int64_t in;
};

// F.interpolate over [N, C, H, W] (resize): every output pixel sums its H
// taps of W-tap rows, in fp32 (the reference: double).
struct Resize2d {
  Operand x, y;  // strides of [N, C, H, W] in s[0..3]
  int64_t N, C, Ho, Wo;
  ResizeTaps th, tw;
  FLICK_HD static int64_t clamp_i(int64_t v, int64_t n) { return v < 0 ? 0 : (v >= n ? n - 1 : v); }
  FLICK_HD void operator()(int64_t i) const {
    const int64_t ow = i % Wo, oh = i / Wo % Ho, c = i / (Wo * Ho) % C, n = i / (Wo * Ho * C);
    const int64_t bx = n * x.s[0] + c * x.s[1];
    float acc = 0.f;
    for (int a = 0; a < th.count[oh]; ++a) {
      const int64_t h = clamp_i(th.first[oh] + a, th.in);
      float row = 0.f;
      for (int b = 0; b < tw.count[ow]; ++b)
        row += tw.weight[ow * tw.width + b] *
               x.load(bx + h * x.s[2] + clamp_i(tw.first[ow] + b, tw.in) * x.s[3]);
      acc += th.weight[oh * th.width + a] * row;
    }
    y.store(n * y.s[0] + c * y.s[1] + oh * y.s[2] + ow * y.s[3], acc);
  }
};

// Nearest upsampling by integer factors: output index -> input index / factor.
struct UpsampleNearest {
  Dims ydims;
  Operand x, y;  // strides over ydims' rank
  int64_t factor[kDims];
  FLICK_HD void operator()(int64_t i) const {
    int64_t ox = 0, oy = 0;
    for (int k = ydims.ndim - 1; k >= 0; --k) {
      const int64_t idx = i % ydims.d[k];
      i /= ydims.d[k];
      ox += idx / factor[k] * x.s[k];
      oy += idx * y.s[k];
    }
    y.store(oy, x.load(ox));
  }
};

// Replicate padding of a channels-last volume x [N, D, H, W, C] into
// y [N, D + pd0 + pd1, H + ph0 + ph1, W + pw0 + pw1, C] (contiguous both):
// the HunyuanVideo VAE's F.pad(..., 'replicate') before its pad-0 convs
// (cuDNN pads with zeros only). Index i runs over y.
struct PadReplicateNdhwc {
  Operand x, y;
  int64_t N, D, H, W, C;
  int64_t pre[3];   // d, h, w
  int64_t post[3];  // d, h, w
  FLICK_HD int64_t size() const {
    return N * (D + pre[0] + post[0]) * (H + pre[1] + post[1]) * (W + pre[2] + post[2]) * C;
  }
  FLICK_HD static int64_t clamp_i(int64_t v, int64_t n) { return v < 0 ? 0 : (v >= n ? n - 1 : v); }
  FLICK_HD void operator()(int64_t i) const {
    const int64_t Wo = W + pre[2] + post[2], Ho = H + pre[1] + post[1], Do = D + pre[0] + post[0];
    const int64_t c = i % C, w = i / C % Wo, h = i / (C * Wo) % Ho, d = i / (C * Wo * Ho) % Do,
                  n = i / (C * Wo * Ho * Do);
    const int64_t sd = clamp_i(d - pre[0], D), sh = clamp_i(h - pre[1], H),
                  sw = clamp_i(w - pre[2], W);
    y.store(i, x.load((((n * D + sd) * H + sh) * W + sw) * C + c));
  }
};

// Dequantise an FP8-E4M3 / I8 weight [N, K] with per-channel (or per-tensor)
// scales into BF16: the weight-only path ahead of a BF16 cuBLASLt GEMM.
struct DequantWeight {
  const void* w;
  DType wdtype;  // F8_E4M3 or I8
  const float* scale;
  int64_t nscale;  // N or 1
  int64_t K;
  uint16_t* out;
  FLICK_HD void operator()(int64_t i) const {
    const float v = wdtype == DType::I8 ? static_cast<float>(static_cast<const int8_t*>(w)[i])
                                        : from_e4m3(static_cast<const uint8_t*>(w)[i]);
    out[i] = to_bf16(v * scale[nscale == 1 ? 0 : i / K]);
  }
};

// The W8A8 epilogue: y[t, n] = acc[t, n] * sw[n] * sx[t] + bias[n], acc the
// int32 (IMMA) or fp32 (FP8 with unit scales) GEMM result, row-major [T, N].
struct ScaleEpilogue {
  const void* acc;
  bool acc_i32;
  const float *sw, *sx;
  Param bias;
  Operand y;  // strides of [T, N] in s[0..1]
  Act act;
  int64_t T, N;
  FastDiv n_div;  // FastDiv(N) for 32-bit index arithmetic (the default: 64-bit)
  FLICK_HD void operator()(int64_t i) const {
    int64_t t, n;
    if (n_div.d == N && T * N < (int64_t{1} << 31)) {
      const uint32_t u = static_cast<uint32_t>(i), q = n_div.div(u);
      t = q, n = u - q * n_div.d;
    } else {
      t = i / N, n = i % N;
    }
    const float a = acc_i32 ? static_cast<float>(static_cast<const int32_t*>(acc)[i])
                            : static_cast<const float*>(acc)[i];
    const float v = a * sw[n] * sx[t] + bias.at(n, 0.f);
    y.store(t * y.s[0] + n * y.s[1], activate(v, act, y));
  }
};

// The linear / conv epilogue: y = act(acc + bias[c]) with acc the fp32 GEMM
// or convolution result (contiguous, the output's shape), c the channel
// index i / inner % channels (linear: inner 1, channels N; NCDHW conv:
// inner = spatial size, channels = C). The pre-activation is rounded once,
// to y's dtype, only where RoundGeluTanh asks for it.
struct BiasActEpilogue {
  const void* acc;  // F32, or BF16 (cuDNN's convolution result)
  bool acc_bf16;
  Param bias;
  Dims dims;  // y's shape
  Operand y;
  Act act;
  int64_t inner, channels;
  FastDiv inner_div, channel_div;  // of inner and channels, where dims.narrow
  FLICK_HD void operator()(int64_t i) const {
    int64_t ch;
    if (dims.narrow) {
      const uint32_t q = inner_div.div(static_cast<uint32_t>(i));
      ch = q - channel_div.div(q) * channel_div.d;
    } else {
      ch = i / inner % channels;
    }
    const float a = acc_bf16 ? from_bf16(static_cast<const uint16_t*>(acc)[i])
                             : static_cast<const float*>(acc)[i];
    const float v = a + bias.at(ch, 0.f);
    y.store(y.offset(dims, i), activate(v, act, y));
  }
};

// The attention fallback's softmax over one score row of S [H, Lq, Lk] (fp32,
// contiguous) into P (v's dtype, same shape): p = softmax(s * scale + bias)
// over the keys a query may see (key_padding, block-causal), masked keys 0,
// a row with every key masked all 0 (runtime/backend.h AttentionParams).
struct AttnSoftmaxRow {
  const float* s;
  Operand p;  // contiguous [H, Lq, Lk]
  int64_t H, Lq, Lk;
  float scale;
  const float* bias;  // [H or 1, Lq, Lk] view of this batch, or null
  int64_t bias_sh, bias_sq, bias_sk;
  // A separable bias (AttentionParams::bias_y / bias_x) of this batch, or
  // null: key j = y * grid_w + x gets bias_y[h, i, y] + bias_x[h, i, x].
  const float* bias_y;
  const float* bias_x;
  int64_t by_sh, by_sq, bx_sh, bx_sq, grid_w;
  const uint8_t* key_padding;  // [Lk] of this batch (0 = masked), or null
  int64_t kp_stride;
  int64_t causal_block;
  using Acc = MaxSum;
  FLICK_HD int64_t rows() const { return H * Lq; }
  FLICK_HD int64_t len() const { return Lk; }
  FLICK_HD bool visible(int64_t row, int64_t j) const {
    if (key_padding && key_padding[j * kp_stride] == 0) return false;
    if (causal_block > 0) {
      const int64_t qpos = row % Lq + Lk - Lq;
      if (j / causal_block > qpos / causal_block) return false;
    }
    return true;
  }
  FLICK_HD float logit(int64_t row, int64_t j) const {
    float v = s[row * Lk + j] * scale;
    if (bias) v += bias[row / Lq * bias_sh + row % Lq * bias_sq + j * bias_sk];
    if (bias_y) {
      const int64_t h = row / Lq, i = row % Lq;
      v += bias_y[h * by_sh + i * by_sq + j / grid_w] + bias_x[h * bx_sh + i * bx_sq + j % grid_w];
    }
    return v;
  }
  FLICK_HD Acc init() const { return {-INFINITY, 0.f}; }
  FLICK_HD Acc partial(int64_t row, int64_t j) const {
    return visible(row, j) ? Acc{logit(row, j), 1.f} : Acc{-INFINITY, 0.f};
  }
  FLICK_HD Acc combine(Acc a, Acc b) const { return SoftmaxRow{}.combine(a, b); }
  FLICK_HD Stats2 finalize(Acc a) const { return {a.m, a.s > 0.f ? 1.f / a.s : 0.f}; }
  FLICK_HD void apply(int64_t row, int64_t j, Stats2 st) const {
    const float v = (st.b == 0.f || !visible(row, j)) ? 0.f : expf(logit(row, j) - st.a) * st.b;
    p.store(row * Lk + j, v);
  }
};

}  // namespace flick::cuda
