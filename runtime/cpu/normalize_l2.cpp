// The CPU backend's normalize_l2 (the Wan VAE's RMS_norm: F.normalize(x) *
// sqrt(C) * gamma, + SiLU) and softmax_parts (the softmax of its single-head
// attention as PyTorch's CPU flash attention evaluates a block of keys), over
// contiguous rows, threaded; normalize_l2's rows run the AVX-512 loop of
// normalize_l2_avx512.cpp where the CPU has it, else the portable loop below
// on the backend's vectorised fp32 kernels.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/cpu/eltwise_kernels.h"
#include "runtime/cpu/normalize_l2_kernels.h"
#include "runtime/cpu/ops.h"
#include "runtime/ref/data_iter.h"
#include "runtime/status.h"
#include "runtime/threads.h"

namespace flick::cpu {
namespace l2norm {
namespace {

// Rows per block: enough elements to amortise the per-block calls, few enough
// to stay in L1/L2.
constexpr int64_t kBlockElems = 4096;

// The nearest bf16, as c10 rounds (NaN inputs aside: activations never hold them).
inline float round_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  return std::bit_cast<float>(u);
}

// One row of the PerOp chain, every op rounded to the activation dtype
// (the identity for F32).
template <bool kBf16>
void norm_row_per_op(const float* x, float* y, int64_t c, float n, float scale,
                     const float* gamma) {
  auto rd = [](float v) { return kBf16 ? round_to_bf16(v) : v; };
  for (int64_t j = 0; j < c; ++j) {
    const float q = rd(x[j] / n);
    y[j] = rd(rd(q * scale) * gamma[j]);
  }
}

void norm_row_once(const float* x, float* y, int64_t c, float n, float scale, const float* gamma) {
  const float s = scale / n;
  for (int64_t j = 0; j < c; ++j) y[j] = x[j] * s * gamma[j];
}

thread_local std::vector<float> t_in, t_out;

float* thread_buffer(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

}  // namespace

bool has_avx512_kernels() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512bf16");
  return yes;
}

namespace portable {

void normalize_rows(const void* x, void* y, bool bf16, int64_t rows, int64_t c, const float* gamma,
                    float scale, NormRounding rounding, bool silu) {
  const EltwiseKernels& k = eltwise_kernels();
  const DType dt = bf16 ? DType::BF16 : DType::F32;
  const size_t es = dtype_size(dt);
  const int64_t block_rows = std::max<int64_t>(1, kBlockElems / c);
  for (int64_t r0 = 0; r0 < rows; r0 += block_rows) {
    const int64_t nr = std::min(block_rows, rows - r0), n = nr * c;
    const char* xb = static_cast<const char*>(x) + static_cast<size_t>(r0 * c) * es;
    char* yb = static_cast<char*>(y) + static_cast<size_t>(r0 * c) * es;
    const float* xf = reinterpret_cast<const float*>(xb);
    if (bf16) {
      float* buf = thread_buffer(t_in, n);
      k.to_f32(dt, xb, buf, n);
      xf = buf;
    }
    float* out = bf16 ? thread_buffer(t_out, n) : reinterpret_cast<float*>(yb);
    for (int64_t r = 0; r < nr; ++r) {
      const float* xr = xf + r * c;
      float* yr = out + r * c;
      // |x| accumulated wide, rounded once to fp32 (torch reduces in fp32
      // and, for bf16, rounds the norm to bf16 before dividing).
      float norm = static_cast<float>(std::sqrt(k.sum_sq(xr, c)));
      if (rounding == NormRounding::PerOp && bf16) norm = round_to_bf16(norm);
      norm = std::max(norm, 1e-12f);
      if (rounding == NormRounding::Once) {
        norm_row_once(xr, yr, c, norm, scale, gamma);
      } else if (bf16) {
        norm_row_per_op<true>(xr, yr, c, norm, scale, gamma);
      } else {
        norm_row_per_op<false>(xr, yr, c, norm, scale, gamma);
      }
    }
    if (silu) k.silu(out, out, n);
    if (bf16) k.from_f32(out, dt, yb, n);
  }
}

}  // namespace portable
}  // namespace l2norm

void normalize_l2(const Tensor& x, const Tensor& gamma, float scale, NormRounding rounding,
                  Activation act, Tensor& y) {
  FLICK_CHECK(
      (x.dtype == DType::F32 || x.dtype == DType::BF16) && x.shape == y.shape &&
          x.dtype == y.dtype && x.ndim() >= 1 && x.is_contiguous() && y.is_contiguous(),
      "normalize_l2: expected contiguous F32 or BF16 x and y, got x " + x.str() + " y " + y.str());
  FLICK_CHECK(act == Activation::None || act == Activation::Silu,
              "normalize_l2: activation None or Silu");
  const int64_t c = x.dim(-1), rows = x.numel() / std::max<int64_t>(c, 1);
  FLICK_CHECK(
      c > 0 && gamma.dtype == DType::F32 && gamma.shape == Shape{c} && gamma.is_contiguous(),
      "normalize_l2: gamma must be F32 [" + std::to_string(c) + "], got " + gamma.str());
  if (rows == 0) return;
  const bool bf16 = x.dtype == DType::BF16, silu = act == Activation::Silu;
  const size_t es = dtype_size(x.dtype);
  const auto rows_fn = l2norm::has_avx512_kernels() ? l2norm::avx512::normalize_rows
                                                    : l2norm::portable::normalize_rows;
  const int64_t block_rows = std::max<int64_t>(1, l2norm::kBlockElems / c);
  const int64_t blocks = (rows + block_rows - 1) / block_rows;
  const float* g = gamma.ptr<float>();
  parallel_for(blocks, [&](int64_t begin, int64_t end) {
    const int64_t r0 = begin * block_rows, r1 = std::min(rows, end * block_rows);
    const size_t off = static_cast<size_t>(r0 * c) * es;
    rows_fn(static_cast<const char*>(x.data) + off, static_cast<char*>(y.data) + off, bf16, r1 - r0,
            c, g, scale, rounding, silu);
  });
}

void softmax_parts(const Tensor& x, float scale, Tensor& p, Tensor& inv_sum) {
  FLICK_CHECK(x.dtype == DType::F32 && x.ndim() >= 1 && x.shape == p.shape && x.is_contiguous() &&
                  p.is_contiguous() && (p.dtype == DType::F32 || p.dtype == DType::BF16),
              "softmax_parts: expected contiguous F32 x and F32 / BF16 p, got x " + x.str() +
                  " p " + p.str());
  const int64_t cols = x.dim(-1), rows = x.numel() / std::max<int64_t>(cols, 1);
  FLICK_CHECK(inv_sum.dtype == DType::F32 && inv_sum.is_contiguous() && inv_sum.numel() == rows,
              "softmax_parts: inv_sum " + inv_sum.str() + " for " + std::to_string(rows) + " rows");
  const EltwiseKernels& k = eltwise_kernels();
  const size_t es = dtype_size(p.dtype);
  // In place when p is x; otherwise a row of fp32 exps per thread.
  const bool in_place = p.dtype == DType::F32 && p.data == x.data;
  float* inv = inv_sum.ptr<float>();
  parallel_for(rows, [&](int64_t begin, int64_t end) {
    float* buf = in_place ? nullptr : l2norm::thread_buffer(l2norm::t_out, cols);
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x.ptr<float>() + r * cols;
      float* row = in_place ? p.ptr<float>() + r * cols : buf;
      for (int64_t j = 0; j < cols; ++j) row[j] = xr[j] * scale;
      const float m = k.max(row, cols);
      for (int64_t j = 0; j < cols; ++j) row[j] -= m;
      k.exp(row, row, cols);
      inv[r] = 1.f / static_cast<float>(k.sum(row, cols));
      if (!in_place)
        k.from_f32(row, p.dtype, static_cast<char*>(p.data) + static_cast<size_t>(r * cols) * es,
                   cols);
    }
  });
}

}  // namespace flick::cpu
