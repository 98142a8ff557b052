// The vectorised inner loops of the CPU backend's elementwise, normalisation,
// softmax, RoPE and reduction ops: plain functions over contiguous fp32 arrays
// (plus the F32/BF16/F16 conversions into and out of them), compiled once per
// ISA (eltwise_kernels_avx512.cpp, eltwise_kernels_avx2.cpp) and picked at
// run time. The ops in runtime/cpu/{eltwise,norm,data,resample}.cpp handle
// shapes, strides, dtypes and threads around them.
//
// Accuracy (measured in tests/ops/test_elementwise.cpp against double):
// exp, silu, gelu (both forms) and softmax are within a few fp32 ulp over the
// whole float range, including the far negative tails where PyTorch's
// 1 + erf / 1 + tanh formulation cancels.
#pragma once

#include <cstdint>

#include "runtime/backend.h"
#include "runtime/dtype.h"

namespace flick::cpu {

enum class ReduceKind : int { Sum, Max, Min };

struct EltwiseKernels {
  const char* isa;
  // n contiguous F32/BF16/F16 elements to and from fp32 (c10 rounding).
  void (*to_f32)(DType t, const void* src, float* dst, int64_t n);
  void (*from_f32)(const float* src, DType t, void* dst, int64_t n);

  // y[i] = f(x[i]).
  void (*exp)(const float* x, float* y, int64_t n);
  void (*gelu_erf)(const float* x, float* y, int64_t n);
  void (*gelu_tanh)(const float* x, float* y, int64_t n);
  void (*silu)(const float* x, float* y, int64_t n);
  // y[i] = act(x[i]) over n contiguous F32/BF16/F16 elements, converting in
  // registers (Activation::None: a plain dtype conversion).
  void (*activation)(Activation act, const void* x, DType xt, void* y, DType yt, int64_t n);
  // y[i] = a[i] * b[i] + c[i], one rounding; an operand whose flag is false is
  // the scalar *ptr instead of an array.
  void (*fma)(const float* a, bool a_vec, const float* b, bool b_vec, const float* c, bool c_vec,
              float* y, int64_t n);

  // Sums of fp32 terms accumulated in double lanes.
  double (*sum)(const float* x, int64_t n);
  double (*sum_sq)(const float* x, int64_t n);                  // sum x^2
  double (*sum_sq_dev)(const float* x, int64_t n, float mean);  // sum (x - mean)^2
  // max / min of n >= 1 elements; NaN if any is NaN.
  float (*max)(const float* x, int64_t n);
  float (*min)(const float* x, int64_t n);
  // acc[i] = acc[i] (+ | max | min) x[i], NaN-propagating.
  void (*accumulate)(float* acc, const float* x, int64_t n, ReduceKind kind);

  // y = (x - mean) * scale + shift.
  void (*shift_scale)(const float* x, int64_t n, float mean, float scale, float shift, float* y);
  // y = (x - mean) * rstd * w[i] (+ b[i] if b); w non-null.
  void (*normalize)(const float* x, int64_t n, float mean, float rstd, const float* w,
                    const float* b, float* y);
  // Norms over the rows of a [rows, cols] block (row stride ld), vectorised
  // across columns: the layout of a norm over the channels of NC* activations.
  // out[c] = sum_k v with v = x[k, c] - center[c] (center null: x[k, c]),
  // squared if `square`; in double lanes.
  void (*col_sums)(const float* x, int64_t rows, int64_t cols, int64_t ld, const float* center,
                   bool square, double* out);
  // y[k, c] = (x[k, c] - mean[c]) * scale[c] * w[k] + b[k]; w / b null for 1 / 0.
  void (*col_normalize)(const float* x, int64_t rows, int64_t cols, int64_t ldx, const float* mean,
                        const float* scale, const float* w, const float* b, float* y, int64_t ldy);
  // y = softmax(x) over n >= 1 elements (max subtracted); y may alias x.
  void (*softmax)(const float* x, float* y, int64_t n);
  // Interleaved pairs: (x[2i], x[2i+1]) -> (x0 c - x1 s, x0 s + x1 c), c = cos[i], s = sin[i].
  void (*rope)(const float* x, const float* cos, const float* sin, float* y, int64_t pairs);
};

enum class Isa { Avx2, Avx512 };

// The kernels of the best ISA of this CPU: AVX-512 (F, BW, VL, DQ) else AVX2.
const EltwiseKernels& eltwise_kernels();
// One ISA's kernels, or nullptr if this CPU lacks it (tests run both).
const EltwiseKernels* eltwise_kernels_for(Isa isa);

namespace avx512 {
const EltwiseKernels& kernels();
}
namespace avx2 {
const EltwiseKernels& kernels();
}

}  // namespace flick::cpu
