// cpu::mlp_relu's fused kernel (mlp_kernels.h): 16 rows a block, one row per
// lane. Each hidden unit j is a vector of the 16 rows' relu(x . w1[j] + b1[j])
// that goes straight into the N output accumulators, so the [M, H] hidden
// never reaches memory, and neither K = 2 nor N = 8 is padded to a GEMM
// tile: the DETR decoder's boxRPB MLP (2 -> 256 -> 8 on 200 x 72 rows, two
// per layer) cost ~35 ms a prompt as two linears, bound by that padding.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "runtime/cpu/eltwise_simd_avx512.h"
#include "runtime/cpu/mlp_kernels.h"
#include "runtime/dtype.h"

namespace flick::cpu {
namespace {

namespace v = flick::cpu::avx512;

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// fp32 -> bf16 -> fp32, as the bf16 stores of the GEMMs round.
inline __m512 round_bf16(__m512 x) { return v::bf16_bits_to_f32(v::f32_to_bf16_bits({x})).v; }

template <int K, int N>
void run(const ThinMlp& m, const ref::RowsView& x, const ref::RowsView& y, int64_t r0, int64_t r1) {
  alignas(64) float xs[K][16];
  alignas(64) float out[N][16];
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t b = r0; b < r1; b += 16) {
    const int rows = static_cast<int>(min64(16, r1 - b));
    for (int kk = 0; kk < K; ++kk)
      for (int r = 0; r < 16; ++r)
        xs[kk][r] = r < rows ? load_as_f32(x.dtype, x.row(b + r), kk) : 0.f;
    __m512 xv[K];
    for (int kk = 0; kk < K; ++kk) {
      xv[kk] = _mm512_load_ps(xs[kk]);
      if (m.round_x) xv[kk] = round_bf16(xv[kk]);
    }
    __m512 acc[N];
#pragma GCC unroll 16
    for (int c = 0; c < N; ++c) acc[c] = zero;
    for (int64_t j = 0; j < m.h; ++j) {
      const float* w1 = m.w1 + j * K;
      __m512 hj = _mm512_mul_ps(xv[0], _mm512_set1_ps(w1[0]));
#pragma GCC unroll 4
      for (int kk = 1; kk < K; ++kk) hj = _mm512_fmadd_ps(xv[kk], _mm512_set1_ps(w1[kk]), hj);
      if (m.b1 != nullptr) hj = _mm512_add_ps(hj, _mm512_set1_ps(m.b1[j]));
      hj = _mm512_max_ps(hj, zero);
      if (m.round_h) hj = round_bf16(hj);
      const float* w2 = m.w2t + j * kThinMlpMaxN;
#pragma GCC unroll 16
      for (int c = 0; c < N; ++c) acc[c] = _mm512_fmadd_ps(hj, _mm512_set1_ps(w2[c]), acc[c]);
    }
#pragma GCC unroll 16
    for (int c = 0; c < N; ++c)
      _mm512_store_ps(out[c], m.b2 != nullptr && c < m.n
                                  ? _mm512_add_ps(acc[c], _mm512_set1_ps(m.b2[c]))
                                  : acc[c]);
    for (int r = 0; r < rows; ++r)
      for (int64_t c = 0; c < m.n; ++c) store_from_f32(y.dtype, y.row(b + r), c, out[c][r]);
  }
}

template <int K>
void run_k(const ThinMlp& m, const ref::RowsView& x, const ref::RowsView& y, int64_t r0,
           int64_t r1) {
  switch (m.n_pad) {
    case 1: return run<K, 1>(m, x, y, r0, r1);
    case 2: return run<K, 2>(m, x, y, r0, r1);
    case 4: return run<K, 4>(m, x, y, r0, r1);
    case 8: return run<K, 8>(m, x, y, r0, r1);
    default: return run<K, 16>(m, x, y, r0, r1);
  }
}

}  // namespace

void thin_mlp_rows_avx512(const ThinMlp& m, const ref::RowsView& x, const ref::RowsView& y,
                          int64_t r0, int64_t r1) {
  switch (m.k) {
    case 1: return run_k<1>(m, x, y, r0, r1);
    case 2: return run_k<2>(m, x, y, r0, r1);
    case 3: return run_k<3>(m, x, y, r0, r1);
    default: return run_k<4>(m, x, y, r0, r1);
  }
}

}  // namespace flick::cpu
