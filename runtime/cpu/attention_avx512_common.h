// Helpers shared by the flash-attention kernels built with AVX-512 flags
// (attention_avx512.cpp and attention_narrow_avx512.cpp: BF16/fp32;
// attention_int8_avx512.cpp: INT8 Q.K^T): integer tile arithmetic, element
// access of an Operand, the register-tiled product and row packing of the
// BF16/fp32 kernels, the exp2 polynomials of the online softmax and lane
// reductions. Include only from translation units built with AVX-512 (+BF16)
// flags.
//
// Everything is in an anonymous namespace: each including file gets its own
// copy, as attention_kernels.h asks of shared helpers (no inline function
// whose AVX-512 body the linker could pick for code that runs on AVX2-only
// hosts).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "runtime/cpu/attention_kernels.h"

namespace flick::cpu::avx512_attention {
namespace {

using attention_detail::Operand;

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// ---- element access (local copies; see the header comment) ----

inline float bf16_bits_to_f32(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Element idx of an F32, BF16 or F16 buffer as fp32 (exact).
inline float load_f32(DType t, const void* data, int64_t idx) {
  switch (t) {
    case DType::BF16: return bf16_bits_to_f32(static_cast<const uint16_t*>(data)[idx]);
    case DType::F16: return _cvtsh_ss(static_cast<const uint16_t*>(data)[idx]);
    default: return static_cast<const float*>(data)[idx];
  }
}

// Address of element (b, l, h, 0) of a 4-d F32 / BF16 / F16 operand.
inline const char* element(const Operand& t, int64_t b, int64_t l, int64_t h) {
  return static_cast<const char*>(t.data) +
         (b * t.stride[0] + l * t.stride[1] + h * t.stride[2]) * (t.dtype == DType::F32 ? 4 : 2);
}

// Packing K or V of one head reads a 64-128 byte piece of every key row, a
// row stride apart (the heads interleave): each piece is a cache miss once
// the projections' output has left L2, and the scalar packing loop keeps
// only a few in flight. Prefetching a fixed distance ahead overlaps them
// (EfficientSAM3's geometry CLS, 1 query x 5184 keys x 8 heads of 32, f32 on
// the general kernel, 1 thread, Emerald Rapids, best of 8 alternated runs:
// 2.62 -> 2.13 ms).
constexpr int64_t kPrefetchKeys = 16;
inline void prefetch_row(const char* row, int64_t bytes) {
  for (int64_t at = 0; at < bytes; at += 64) _mm_prefetch(row + at, _MM_HINT_T0);
}

// ---- the two arithmetic flavours of the BF16 / fp32 kernels ----

// bf16 bits of element idx of a BF16 buffer.
inline uint32_t load_bf16(const void* data, int64_t idx) {
  return static_cast<const uint16_t*>(data)[idx];
}

struct Bf16Math {
  static constexpr int64_t kPerUnit = 2;  // reduction elements per 32-bit unit
  static __m512 madd(__m512 acc, __m512i a, __m512i b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
  }
};

struct F32Math {
  static constexpr int64_t kPerUnit = 1;
  static __m512 madd(__m512 acc, __m512i a, __m512i b) {
    return _mm512_fmadd_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(b), acc);
  }
};

// c[R][16*C] (=|+= scale * c) = a[R][units] x b[units][16*C].
// a: broadcast units, row stride lda. b: vector j of unit u at b + u*ldb_u + j*ldb_c
// (64-byte aligned). c: fp32, row stride ldc (64-byte aligned rows). Without
// a scale, c is overwritten; with row_scale, c = c * row_scale[r] + a.b; with
// col_scale (16 * C floats, 64-byte aligned), c = c * col_scale[lane] + a.b.
// col_max, if given: col_max[j] = max(col_max[j], the tile's rows of vector
// j), taken as the results leave the registers (the narrow kernel's block
// max, without a pass of its own over c). accumulate (no scale given): c +=
// a.b.
template <class M, int R, int C>
void tile_gemm(const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb_u, int64_t ldb_c,
               int64_t units, float* c, int64_t ldc, const float* row_scale,
               const float* col_scale = nullptr, __m512* col_max = nullptr,
               bool accumulate = false) {
  __m512 acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int j = 0; j < C; ++j) {
      if (row_scale)
        acc[r][j] =
            _mm512_mul_ps(_mm512_load_ps(c + r * ldc + 16 * j), _mm512_set1_ps(row_scale[r]));
      else if (col_scale)
        acc[r][j] =
            _mm512_mul_ps(_mm512_load_ps(c + r * ldc + 16 * j), _mm512_load_ps(col_scale + 16 * j));
      else if (accumulate)
        acc[r][j] = _mm512_load_ps(c + r * ldc + 16 * j);
      else
        acc[r][j] = _mm512_setzero_ps();
    }
  }
  for (int64_t u = 0; u < units; ++u) {
    __m512i bv[C];
#pragma GCC unroll 16
    for (int j = 0; j < C; ++j) bv[j] = _mm512_load_si512(b + u * ldb_u + j * ldb_c);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512i av = _mm512_set1_epi32(static_cast<int>(a[r * lda + u]));
#pragma GCC unroll 16
      for (int j = 0; j < C; ++j) acc[r][j] = M::madd(acc[r][j], av, bv[j]);
    }
  }
  if (col_max != nullptr) {
#pragma GCC unroll 16
    for (int j = 0; j < C; ++j) {
      __m512 m = acc[0][j];
#pragma GCC unroll 16
      for (int r = 1; r < R; ++r) m = _mm512_max_ps(m, acc[r][j]);
      col_max[j] = _mm512_max_ps(col_max[j], m);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < C; ++j) _mm512_store_ps(c + r * ldc + 16 * j, acc[r][j]);
}

// One row of Q or K (head_dim elements of `t`) as `units` units, written to
// dst[u * dst_stride]; the odd tail of a bf16 pair is zero.
template <class M>
void pack_row(const Operand& t, const char* row, int64_t n, int64_t units, uint32_t* dst,
              int64_t dst_stride) {
  const int64_t stride = t.stride[3];
  if constexpr (M::kPerUnit == 2) {
    const int64_t pairs = n / 2;
    if (stride == 1) {
      for (int64_t u = 0; u < pairs; ++u) std::memcpy(dst + u * dst_stride, row + 4 * u, 4);
    } else {
      for (int64_t u = 0; u < pairs; ++u)
        dst[u * dst_stride] =
            load_bf16(row, 2 * u * stride) | (load_bf16(row, (2 * u + 1) * stride) << 16);
    }
    if (pairs < units) dst[pairs * dst_stride] = load_bf16(row, (n - 1) * stride);
  } else if (t.dtype == DType::F32 && stride == 1) {
    for (int64_t u = 0; u < n; ++u) std::memcpy(dst + u * dst_stride, row + 4 * u, 4);
  } else {
    for (int64_t u = 0; u < n; ++u)
      dst[u * dst_stride] = f32_bits(load_f32(t.dtype, row, u * stride));
  }
}

// ---- vector helpers ----

// Transposes a 16 x 16 matrix of 32-bit elements held as 16 row vectors.
inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 16; i += 8)
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
  }
}

// Two rows of 32 bf16 words as 32-bit units of pairs: unit k = a[k] | b[k]
// << 16 (the even key's element in the low half: the layout vdpbf16ps reads
// for a reduction over keys), units 0-15 in *lo, 16-31 in *hi.
inline void interleave_pairs(__m512i a, __m512i b, __m512i* lo, __m512i* hi) {
  // Word w of a result: a[w/2] for even w, b[w/2] for odd w (vpermt2w picks b from 32 on).
  alignas(64) static constexpr uint16_t kLo[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                   37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                   11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr uint16_t kHi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21,
                                                   53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58,
                                                   27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  *lo = _mm512_permutex2var_epi16(a, _mm512_load_si512(kLo), b);
  *hi = _mm512_permutex2var_epi16(a, _mm512_load_si512(kHi), b);
}

// Interleaves two contiguous bf16 rows: dst[e] = a[e] | b[e] << 16 for e < n
// (b null: zero high halves), zero past n up to round_up(n, 16).
inline void interleave_bf16(const uint16_t* a, const uint16_t* b, int64_t n, uint32_t* dst) {
  for (int64_t e = 0; e < n; e += 32) {
    const int64_t left = n - e;
    const __mmask32 m = left >= 32 ? ~__mmask32(0) : (__mmask32(1) << left) - 1;
    const __m512i va = _mm512_maskz_loadu_epi16(m, a + e);
    const __m512i vb = b ? _mm512_maskz_loadu_epi16(m, b + e) : _mm512_setzero_si512();
    __m512i lo, hi;
    interleave_pairs(va, vb, &lo, &hi);
    _mm512_store_si512(dst + e, lo);
    if (left > 16) _mm512_store_si512(dst + e + 16, hi);
  }
}

// ---- the online softmax's exponentials ----

// 2^x for x <= 0 (x = -inf allowed): 2^f of f = x - floor(x) in [0, 1)
// (vreduceps) by a degree-6 minimax polynomial (relative error 1.9e-9; at
// most 0.98 ulp with fp32 Horner steps, checked on 64M points; p(0) = 1
// exactly), scaled by 2^floor(x) (vscalefps floors its exponent itself).
// One vreduceps in place of vrndscaleps (two uops on Intel cores) and a
// subtraction: 10 instead of 12 uops a vector, the f32 softmax's cost beside
// its products. kFinite: the caller knows x is finite, so the clamp is left
// out; the result is the same (below -200 both round to 0).
template <bool kFinite = false>
inline __m512 exp2_neg(__m512 x) {
  if (!kFinite) x = _mm512_max_ps(x, _mm512_set1_ps(-200.f));  // 2^-200 scales to 0; no inf - inf
  const __m512 f = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 p = _mm512_set1_ps(2.1702254889532924e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.243968727067113e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.678840637207031e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5483341217041016e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022983014583588e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931470036506653e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, x);
}

// P's 2^x for x <= 0 when P is rounded to bf16 next: a degree-4 minimax
// polynomial of f = x - floor(x) in [0, 1) (vreduceps; relative error 2.7e-6,
// far below bf16's 2^-9 step; the AMX kernel's exp2_poly), scaled by
// 2^floor(x) (vscalefps floors its exponent itself). Two FMAs fewer than
// exp2_neg per score vector. kFinite as there.
template <bool kFinite = false>
inline __m512 exp2_neg_bf16(__m512 x) {
  if (!kFinite) x = _mm512_max_ps(x, _mm512_set1_ps(-200.f));
  const __m512 f = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 p = _mm512_set1_ps(1.3534167781472206e-2f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.201146379113197e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.414427548646927e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.930038332939148e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000026226043701f));
  return _mm512_scalef_ps(p, x);
}

// The factor 2^(old_max - shift) that rescales a row's O and sum when its
// running max moves from old_max to shift (0 while the max is -inf). A
// finite max that did not move (most blocks after the first few) gives 2^0,
// which exp2_neg returns as exactly 1, so the polynomial is skipped there
// with the same bits.
inline __m512 rescale_alpha(float old_max, __m512 new_max, __m512 shift) {
  if (_mm512_cvtss_f32(new_max) == old_max && old_max != -__builtin_inff())
    return _mm512_set1_ps(1.f);
  return exp2_neg(_mm512_sub_ps(_mm512_set1_ps(old_max), shift));
}

// ---- lanes ----

// Mask of the first n of 16 lanes (n clamped to [0, 16]).
inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// A key's place in the separable bias's grid (key = y * grid_w + x), kept
// up to date as the kernels walk the keys 16 at a time (no division per
// vector).
struct GridPos {
  int64_t y, x;
};
inline GridPos grid_pos(int64_t j, int64_t grid_w) { return {j / grid_w, j % grid_w}; }
inline void advance16(GridPos& at, int64_t grid_w) {
  for (at.x += 16; at.x >= grid_w; at.x -= grid_w) ++at.y;
}
inline void advance1(GridPos& at, int64_t grid_w) {
  if (++at.x == grid_w) {
    at.x = 0;
    ++at.y;
  }
}

// Rows of a separable bias's parts kept transposed per group of 16 queries:
// grid_h + grid_w (0 without one).
inline int64_t bias_parts(const attention_detail::Problem& p) {
  return p.bias_y != nullptr ? p.grid_h + p.grid_w : 0;
}

// A separable bias's parts of queries [row0, row0 + rows) of (b, h),
// transposed per group of 16: bias_t[g][y][lane] = bias_y[b, h, row0 + 16 g +
// lane, y], then [g][grid_h + x][lane] = bias_x[...]; lanes past Lq zero.
// The kernels that keep lanes over queries (AMX, narrow) then read a key's
// bias for 16 queries as two rows of it instead of gathering every query
// row's parts.
inline void transpose_bias_parts(const attention_detail::Problem& p, int64_t b, int64_t h,
                                 int64_t row0, int64_t rows, float* bias_t) {
  const int64_t parts = bias_parts(p);
  if (parts == 0) return;
  for (int64_t g = 0; g * 16 < rows; ++g) {
    float* t = bias_t + g * parts * 16;
    for (int64_t n = 0; n < 16; ++n) {
      const int64_t row = row0 + g * 16 + n;
      if (row >= p.q_len) {
        for (int64_t e = 0; e < parts; ++e) t[e * 16 + n] = 0.f;
        continue;
      }
      const attention_detail::RowBias r = attention_detail::row_bias(p, b, h, row);
      for (int64_t y = 0; y < p.grid_h; ++y) t[y * 16 + n] = r.y[y];
      for (int64_t x = 0; x < p.grid_w; ++x) t[(p.grid_h + x) * 16 + n] = r.x[x];
    }
  }
}

// The separable bias (Problem::bias_y / bias_x) of the 16 keys from `at` of
// one query row (y: its grid_h row parts, x: its grid_w column parts), lanes
// outside m zero. With grid_w >= 16 the 16 keys span at most two grid rows:
// the column parts as one load up to the row's end and an expanding load of
// the next row's first ones, the row parts blended; narrower grids a lane at
// a time. y + x is rounded once, as a materialised bias would be.
inline __m512 separable_bias16(const float* y, const float* x, int64_t grid_w, int64_t grid_h,
                               GridPos at, __mmask16 m) {
  if (grid_w < 16) {
    alignas(64) float v[16] = {};
    const int64_t j = at.y * grid_w + at.x;
    for (int l = 0; l < 16; ++l)
      if (m >> l & 1) v[l] = y[(j + l) / grid_w] + x[(j + l) % grid_w];
    return _mm512_load_ps(v);
  }
  const __mmask16 here = first_lanes(grid_w - at.x), next = static_cast<__mmask16>(~here);
  __m512 cols = _mm512_maskz_loadu_ps(here, x + at.x);
  __m512 rows = _mm512_set1_ps(at.y < grid_h ? y[at.y] : 0.f);
  if (next != 0) {
    cols = _mm512_mask_expandloadu_ps(cols, next, x);  // x[0 ..] into the lanes past the row
    rows = _mm512_mask_mov_ps(rows, next, _mm512_set1_ps(at.y + 1 < grid_h ? y[at.y + 1] : 0.f));
  }
  return _mm512_maskz_add_ps(m, rows, cols);
}

// The bias of the 16 keys from j of one query row (row_bias), lanes outside
// m zero: the separable parts' sums (walking `at`, the grid place of j, on
// by 16 keys), a contiguous row's load, or a strided row a key at a time.
inline __m512 bias16(const attention_detail::Problem& p, const attention_detail::RowBias& row,
                     int64_t j, GridPos& at, __mmask16 m) {
  if (row.y) {
    const __m512 v = separable_bias16(row.y, row.x, p.grid_w, p.grid_h, at, m);
    advance16(at, p.grid_w);
    return v;
  }
  if (p.bias_stride[3] == 1) return _mm512_maskz_loadu_ps(m, row.full + j);
  alignas(64) float tmp[16] = {};
  for (int64_t l = 0; l < 16; ++l)
    if (m >> l & 1) tmp[l] = row.full[(j + l) * p.bias_stride[3]];
  return _mm512_load_ps(tmp);
}

// Max / sum of the 16 lanes, broadcast to all lanes.
inline __m512 broadcast_max(__m512 v) {
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));  // swap 256-bit halves
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));  // swap 128-bit quarters
  v = _mm512_max_ps(v, _mm512_permute_ps(v, 0x4E));
  return _mm512_max_ps(v, _mm512_permute_ps(v, 0xB1));
}
inline __m512 broadcast_sum(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4E));
  return _mm512_add_ps(v, _mm512_permute_ps(v, 0xB1));
}

}  // namespace
}  // namespace flick::cpu::avx512_attention
