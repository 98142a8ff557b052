#include "models/wan_vae/wan_vae_kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "models/wan_vae/wan_vae_kernels_internal.h"
#include "runtime/cpu/eltwise_kernels.h"
#include "runtime/status.h"
#include "runtime/threads.h"

namespace flick::wan_vae {
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
// (`Round` is the identity for F32).
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

void channel_rms_norm_rows(const void* x, void* y, bool bf16, int64_t rows, int64_t c,
                           const float* gamma, float scale, NormRounding rounding, bool silu) {
  const cpu::EltwiseKernels& k = cpu::eltwise_kernels();
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

void channel_rms_norm(const void* x, void* y, DType dt, int64_t rows, int64_t c, const float* gamma,
                      NormRounding rounding, bool silu) {
  FLICK_CHECK(dt == DType::F32 || dt == DType::BF16, "channel_rms_norm: F32 or BF16");
  FLICK_CHECK(c > 0, "channel_rms_norm: no channels");
  if (rows == 0) return;
  // torch: dim ** 0.5 (a double) multiplies an fp32 / bf16 tensor as a float.
  const float scale = static_cast<float>(std::sqrt(static_cast<double>(c)));
  const bool bf16 = dt == DType::BF16;
  const size_t es = dtype_size(dt);
  const auto rows_fn =
      has_avx512_kernels() ? avx512::channel_rms_norm_rows : portable::channel_rms_norm_rows;
  const int64_t block_rows = std::max<int64_t>(1, kBlockElems / c);
  const int64_t blocks = (rows + block_rows - 1) / block_rows;
  parallel_for(blocks, [&](int64_t begin, int64_t end) {
    const int64_t r0 = begin * block_rows, r1 = std::min(rows, end * block_rows);
    const size_t off = static_cast<size_t>(r0 * c) * es;
    rows_fn(static_cast<const char*>(x) + off, static_cast<char*>(y) + off, bf16, r1 - r0, c, gamma,
            scale, rounding, silu);
  });
}

void attention_probs(float* s, void* p, DType p_dtype, int64_t rows, int64_t cols, float scale,
                     float* sums) {
  FLICK_CHECK(p_dtype == DType::F32 || p_dtype == DType::BF16, "attention_probs: F32 or BF16");
  const cpu::EltwiseKernels& k = cpu::eltwise_kernels();
  const size_t es = dtype_size(p_dtype);
  parallel_for(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = s + r * cols;
      for (int64_t j = 0; j < cols; ++j) row[j] *= scale;
      const float m = k.max(row, cols);
      for (int64_t j = 0; j < cols; ++j) row[j] -= m;
      k.exp(row, row, cols);
      sums[r] = static_cast<float>(k.sum(row, cols));
      if (p_dtype != DType::F32 || p != s)
        k.from_f32(row, p_dtype, static_cast<char*>(p) + static_cast<size_t>(r * cols) * es, cols);
    }
  });
}

void attention_normalize(const float* o, const float* sums, void* y, DType y_dtype, int64_t rows,
                         int64_t c) {
  const cpu::EltwiseKernels& k = cpu::eltwise_kernels();
  const size_t es = dtype_size(y_dtype);
  parallel_for(rows, [&](int64_t begin, int64_t end) {
    float* buf = thread_buffer(t_out, c);
    for (int64_t r = begin; r < end; ++r) {
      const float inv = 1.f / sums[r];
      for (int64_t j = 0; j < c; ++j) buf[j] = o[r * c + j] * inv;
      k.from_f32(buf, y_dtype, static_cast<char*>(y) + static_cast<size_t>(r * c) * es, c);
    }
  });
}

void interleave_upsample_phases(const Tensor& src, Tensor& dst) {
  FLICK_CHECK(src.ndim() == 4 && dst.ndim() == 3 && src.dtype == dst.dtype && src.is_contiguous() &&
                  dst.is_contiguous() && src.dim(2) == 4 && dst.dim(0) == 2 * (src.dim(0) - 1) &&
                  dst.dim(1) == 2 * (src.dim(1) - 1) && dst.dim(2) == src.dim(3),
              "interleave_upsample_phases: src " + src.str() + ", dst " + dst.str());
  const int64_t w = src.dim(1) - 1;
  const size_t pixel = static_cast<size_t>(src.dim(3)) * dtype_size(src.dtype);
  const size_t src_row = static_cast<size_t>(w + 1) * 4 * pixel;
  const size_t dst_row = static_cast<size_t>(2 * w) * pixel;
  parallel_for(dst.dim(0), [&](int64_t begin, int64_t end) {
    for (int64_t y = begin; y < end; ++y) {
      const int64_t py = y % 2;
      // Row i + py of src; its phases 2 py and 2 py + 1.
      const char* s = static_cast<const char*>(src.data) +
                      static_cast<size_t>(y / 2 + py) * src_row +
                      static_cast<size_t>(2 * py) * pixel;
      char* d = static_cast<char*>(dst.data) + static_cast<size_t>(y) * dst_row;
      for (int64_t j = 0; j < w; ++j) {
        std::memcpy(d + static_cast<size_t>(2 * j) * pixel, s + static_cast<size_t>(j) * 4 * pixel,
                    pixel);
        std::memcpy(d + static_cast<size_t>(2 * j + 1) * pixel,
                    s + (static_cast<size_t>(j + 1) * 4 + 1) * pixel, pixel);
      }
    }
  });
}

void copy_bytes(void* dst, const void* src, size_t n) {
  constexpr size_t kChunk = size_t{1} << 20;
  const int64_t chunks = static_cast<int64_t>((n + kChunk - 1) / kChunk);
  parallel_for(chunks, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const size_t off = static_cast<size_t>(i) * kChunk;
      std::memcpy(static_cast<char*>(dst) + off, static_cast<const char*>(src) + off,
                  std::min(kChunk, n - off));
    }
  });
}

}  // namespace flick::wan_vae
