// Helpers shared by the linear / matmul / conv op tests: deterministic data
// and the error bound the fast path must stay within against runtime/ref.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "runtime/backend.h"

namespace flick::test {

inline const char* act_name(Activation a) {
  switch (a) {
    case Activation::None: return "none";
    case Activation::GeluErf: return "gelu_erf";
    case Activation::GeluTanh: return "gelu_tanh";
    case Activation::Silu: return "silu";
    case Activation::RoundGeluTanh: return "round_gelu_tanh";
    case Activation::Relu: return "relu";
    case Activation::Sigmoid: return "sigmoid";
  }
  return "?";
}

inline constexpr Activation kAllActivations[] = {Activation::None,     Activation::GeluErf,
                                                 Activation::GeluTanh, Activation::Silu,
                                                 Activation::Relu,     Activation::Sigmoid};
// Linear also takes RoundGeluTanh (conv does not).
inline constexpr Activation kLinearActivations[] = {
    Activation::None,          Activation::GeluErf, Activation::GeluTanh, Activation::Silu,
    Activation::RoundGeluTanh, Activation::Relu,    Activation::Sigmoid};

// Fills every element of t (any strides, float dtypes) with N(mean, stddev)
// values, rounded by the store to t's dtype.
inline void fill_normal(const Tensor& t, uint32_t seed, float stddev = 1.f, float mean = 0.f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(mean, stddev);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    // Row-major multi-index of element i, then its strided offset.
    int64_t rem = i, off = 0;
    for (int d = t.ndim() - 1; d >= 0; --d) {
      off += (rem % t.dim(d)) * t.stride(d);
      rem /= t.dim(d);
    }
    store_from_f32(t.dtype, t.data, off, dist(gen));
  }
}

inline OwnedTensor random_tensor(DType dtype, Shape shape, uint32_t seed, float stddev = 1.f) {
  OwnedTensor t(dtype, shape);
  fill_normal(t.t, seed, stddev);
  return t;
}

inline float get(const Tensor& t, std::initializer_list<int64_t> idx) {
  return load_as_f32(t.dtype, t.at(idx), 0);
}

// Relative rounding error of the accumulator a precision produces against
// the reference's (see runtime/ref/matmul.cpp), as a fraction of
// sum_k |x_k * w_k| + |bias| (which bounds |acc| and every partial sum):
//   F32 / BF16: the reference sums exact products in double, the fast path in
//     fp32 in some order; the worst case of recursive fp32 summation is
//     gamma_K = K * 2^-24 (both round x to bf16 identically for BF16).
//   FP8: as BF16, plus one rounding of acc * scale.
//   INT8: same quantized operands and an exact integer sum on both sides;
//     only the fp32 scale/bias arithmetic rounds (at most 4 roundings, plus
//     an FMA contraction).
inline double acc_rel_error(Precision p, int64_t k) {
  const double u = std::ldexp(1.0, -24);
  switch (p) {
    case Precision::F32:
    case Precision::BF16: return (k + 2) * u;
    case Precision::FP8: return (k + 3) * u;
    case Precision::INT8: return 6 * u;
  }
  return 0;
}

// One rounding at the store: an element may land one output ulp away when
// the two fp32 values straddle a rounding boundary (bf16 ulp <= 2^-7 |y|).
inline double out_rel_error(DType y) { return y == DType::BF16 ? std::ldexp(1.0, -7) : 0.0; }

// oneDNN evaluates erf / tanh / exp with polynomial approximations good to a
// few fp32 ulps; GELU / SiLU have derivatives below 1.13, so the accumulator
// error passes through (x 1.13) and the activation adds a few ulps.
inline double act_rel_error(Activation a) {
  return a == Activation::None ? 0.0 : 8 * std::ldexp(1.0, -24);
}

// RoundGeluTanh rounds the pre-activation to y's dtype: where the fast and
// the reference accumulators straddle a bf16 rounding boundary, the rounded
// pre-activations differ by one bf16 ulp (<= 2^-7 of |acc|, itself <= the
// magnitude sum), which GELU passes on (x 1.13). Relative to the magnitude sum.
inline double pre_round_rel_error(Activation a, DType y) {
  return a == Activation::RoundGeluTanh && y == DType::BF16 ? 1.13 * std::ldexp(1.0, -7) : 0.0;
}

// Worst |fast - ref| / bound over checked elements; the test asserts <= 1.
struct BoundCheck {
  double worst = 0;
  std::string where;
  void add(double fast, double ref, double bound, const std::string& at) {
    const double d = std::fabs(fast - ref);
    const double r = bound > 0 ? d / bound : (d == 0 ? 0 : INFINITY);
    if (!(r <= worst)) {  // also catches NaN
      worst = std::isnan(r) ? INFINITY : r;
      where = at + ": fast " + std::to_string(fast) + " ref " + std::to_string(ref) + " bound " +
              std::to_string(bound);
    }
  }
};

}  // namespace flick::test
