// How the CUDA backend maps its row-major matmul / linear onto one
// column-major cuBLASLt call (D = op(A) op(B), strided batches). Plain host
// code without CUDA headers, so tests/cuda_host checks the mapping with a
// column-major GEMM emulator against the reference matmul on the views the
// backend passes (transposed, strided, batched: the attention fallback's).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/tensor.h"

namespace flick::cuda {

// One operand as stored: element (r, c) of the rows x cols column-major
// matrix of batch b is at p + b * batch_stride + r + c * ld (elements); the
// GEMM reads it transposed when trans.
struct GemmOperand {
  const void* p;
  DType dtype;
  bool trans;
  int64_t rows, cols, ld, batch_stride;
};
struct GemmCall {
  GemmOperand a, b;
  void* d;
  DType d_dtype;
  int64_t m, n, ld_d, d_batch_stride;
  int batch;
};

// Row-major t [.., rows, cols] (last two dims) read as the column-major
// cols x rows matrix tᵀ: no copy when one of its two last strides is 1.
inline GemmOperand transposed_operand(const Tensor& t, const char* what) {
  const int64_t rows = t.dim(-2), cols = t.dim(-1);
  const int64_t bs = t.ndim() == 3 && t.dim(0) != 1 ? t.stride(0) : 0;
  if (t.stride(-1) == 1 || cols == 1) return {t.data, t.dtype, false, cols, rows, t.stride(-2), bs};
  FLICK_CHECK(t.stride(-2) == 1 || rows == 1,
              std::string("matmul: ") + what +
                  " needs a unit stride in one of its two last dims, got " + t.str());
  return {t.data, t.dtype, true, rows, cols, t.stride(-1), bs};
}

// c[b] = a[b] @ b[b], all [Bt, ., .]: row-major C = A B is column-major
// Cᵀ = Bᵀ Aᵀ, so cuBLASLt's A is our b, its B our a, m = N, n = M.
inline GemmCall matmul_call(const Tensor& a, const Tensor& b, Tensor& c) {
  FLICK_CHECK(a.ndim() == 3 && b.ndim() == 3 && c.ndim() == 3 && a.dim(0) == b.dim(0) &&
                  a.dim(0) == c.dim(0) && a.dim(2) == b.dim(1) && c.dim(1) == a.dim(1) &&
                  c.dim(2) == b.dim(2),
              "matmul: a " + a.str() + ", b " + b.str() + ", c " + c.str());
  FLICK_CHECK(a.dtype == b.dtype, "matmul: the CUDA backend needs a and b of one dtype, got " +
                                      a.str() + ", " + b.str());
  FLICK_CHECK(c.stride(2) == 1 || c.dim(2) == 1,
              "matmul: c needs a unit last stride, got " + c.str());
  GemmCall g;
  g.a = transposed_operand(b, "b");
  g.b = transposed_operand(a, "a");
  g.d = c.data;
  g.d_dtype = c.dtype;
  g.m = b.dim(2);
  g.n = a.dim(1);
  g.ld_d = c.stride(1);
  g.d_batch_stride = c.stride(0);
  g.batch = static_cast<int>(a.dim(0));
  // cuBLASLt needs ld >= rows even where a dim is 1.
  if (g.a.ld < g.a.rows) g.a.ld = g.a.rows;
  if (g.b.ld < g.b.rows) g.b.ld = g.b.rows;
  if (g.ld_d < g.m) g.ld_d = g.m;
  return g;
}

// y [T, N] = x [T, K] (row stride ldx) @ Wᵀ, W [N, K] contiguous: TN, the
// form FP8 and IMMA require (D = W Xᵀ as column-major N x T, ld N).
inline GemmCall linear_call(const void* x, DType xdt, int64_t T, int64_t K, int64_t ldx,
                            const void* w, DType wdt, int64_t N, void* d, DType ddt) {
  GemmCall g;
  g.a = {w, wdt, true, K, N, K, 0};
  g.b = {x, xdt, false, K, T, ldx, 0};
  g.d = d;
  g.d_dtype = ddt;
  g.m = N;
  g.n = T;
  g.ld_d = N;
  g.d_batch_stride = 0;
  g.batch = 1;
  return g;
}

}  // namespace flick::cuda
