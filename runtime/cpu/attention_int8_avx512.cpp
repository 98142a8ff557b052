// INT8 attention for AVX-512 VNNI (+BF16): the flash-style walk of
// attention_avx512.cpp (per batch, head and tile of kRows queries, key blocks
// of kCols with an fp32 online softmax, O in fp32) with S = Q K^T on
// vpdpbusd over the quantized operands of attention_int8.cpp:
//   Q rows as u8 (q + 128) broadcast 4 bytes at a time, K packed
//   [Lk/16][D/4][16] s8 quads; the +128 is taken back with 128 * sum_d K[j, d]
//   per key (exact integers), then S = float(dot) * kscale[j] * qscale[i] *
//   scale * log2(e).
// P.V is attention_avx512.cpp's bf16 product: P rounded to bf16, V (rounded
// to bf16) packed as key pairs, vdpbf16ps with fp32 accumulation. P.V stays
// 16-bit as in SageAttention v1: an INT8 P (a fixed 1/255 step, P <= 1)
// would lose the many weights of a 5280-key row that lie below one step. An
// INT8 P.V kernel was not built or measured; on this Intel host vdpbf16ps
// runs at half the FMA rate, so P.V takes at least half of this kernel's time
// here (the self-attention's 43 GFLOP of P.V at the 113 GFLOPS vdpbf16ps
// peak: >= 380 of 749 ms on one core; bench/RESULTS.md, "INT8 attention").
//
// See attention_kernels.h for why this file avoids inline functions of other
// headers: everything here (and in attention_avx512_common.h, the helpers it
// shares with the other AVX-512 kernel file) is in an anonymous namespace or
// intrinsics.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "runtime/cpu/attention_avx512_common.h"
#include "runtime/cpu/attention_int8_kernels.h"

namespace flick::cpu::attention_int8_detail {
namespace {

using attention_detail::attention_key_end;
using attention_detail::balanced_tile;
using attention_detail::Operand;
using attention_detail::ScratchLayout;
using attention_detail::take_row_state;
using namespace avx512_attention;  // the shared helpers (attention_avx512_common.h)

constexpr int64_t kRows = 192;  // queries per tile (a multiple of kRowAlign)
// Keys per block: 128 (8 vectors of 16) halves the per-block O rescale and
// softmax bookkeeping of 64: on a Zen 4 the DiT's 2640 x 5280 x 12 x 128
// 183-185 -> 177-180 ms, SAM3's 5184-token self 85 -> 81 ms, the other
// shapes of bench_attention 3-4 % faster.
constexpr int64_t kCols = 128;
constexpr int64_t kRowAlign = 12;  // rows padded to a multiple of every row tile below
constexpr int kQkRows = 6;         // S register tile: 6 rows x up to 4 vectors
constexpr float kLog2e = 1.44269504088896340736f;

// bf16 bits of f rounded to nearest even (finite f), as round_bf16 in dtype.h.
inline uint32_t f32_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

// ---- the shared quantizer, vectorised (quantize_k_avx512 / quantize_q_avx512) ----

constexpr int64_t kMaxQuantDim = 512;  // head_dim the vectorised quantizer takes

// Row (b, l, h) of an operand as fp32 into dst[0, n): the conversions of
// load_row in attention_int8.cpp (bf16 and f16 widen exactly). The rows of
// one head lie H * D elements apart (kilobytes: a new page every row or two,
// out of the hardware prefetchers' reach), so the row kAhead rows on (below
// `rows`) is prefetched.
constexpr int64_t kAhead = 8;
void load_row_f32(const Operand& t, int64_t b, int64_t l, int64_t h, int64_t n, float* dst,
                  int64_t rows) {
  const char* base = element(t, b, l, h);
  if (l + kAhead < rows && t.stride[3] == 1) {
    const int64_t esize = t.dtype == DType::F32 ? 4 : 2;
    const char* next = base + kAhead * t.stride[1] * esize;
    for (int64_t off = 0; off < n * esize; off += 64) _mm_prefetch(next + off, _MM_HINT_T0);
  }
  if (t.stride[3] == 1) {
    for (int64_t e = 0; e < n; e += 16) {
      const __mmask16 m = first_lanes(n - e);
      __m512 x;
      if (t.dtype == DType::BF16)
        x = _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, base + 2 * e)), 16));
      else if (t.dtype == DType::F16)
        x = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, base + 2 * e));
      else
        x = _mm512_maskz_loadu_ps(m, base + 4 * e);
      _mm512_mask_storeu_ps(dst + e, m, x);
    }
    return;
  }
  for (int64_t e = 0; e < n; ++e) dst[e] = load_f32(t.dtype, base, e * t.stride[3]);
}

// quantize_row of attention_int8.cpp on 16 lanes at a time: the same fp32
// operations (max |x|, 127 / amax, x * inv rounded to nearest even, clamp),
// so the same bits. Zero past n up to ld.
float quantize_row_avx512(const float* x, int64_t n, int64_t ld, int8_t* q) {
  __m512 amax = _mm512_setzero_ps();
  for (int64_t e = 0; e < n; e += 16)
    amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_maskz_loadu_ps(first_lanes(n - e), x + e)));
  const float a = _mm512_reduce_max_ps(amax);
  if (!(a > 0.f)) {
    std::memset(q, 0, size_t(ld));
    return 0.f;
  }
  const __m512 inv = _mm512_set1_ps(127.f / a);
  const __m512 lo = _mm512_set1_ps(-127.f), hi = _mm512_set1_ps(127.f);
  for (int64_t e = 0; e < ld; e += 16) {
    const __mmask16 m = first_lanes(n - e);
    const __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + e), inv),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i v = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(r, lo), hi));
    _mm_mask_storeu_epi8(q + e, first_lanes(ld - e), _mm512_maskz_cvtepi32_epi8(m, v));
  }
  return a / 127.f;
}

struct Dims {
  int64_t units;   // head_dim in 4-byte quads (Q.K^T reduction)
  int64_t dv;      // head_dim rounded up to a vector (P.V lanes)
  int64_t kvecs;   // ceil(Lk / 16)
  int64_t vunits;  // ceil(Lk / 2)
  explicit Dims(const Problem& p)
      : units(ceil_div(p.head_dim, 4)),
        dv(round_up(p.head_dim, 16)),
        kvecs(ceil_div(p.kv_len, 16)),
        vunits(ceil_div(p.kv_len, 2)) {}
};

struct Workspace {
  uint32_t* k;       // [kvecs][U][16] s8 quads
  int32_t* kcomp;    // [kvecs * 16] 128 * sum_d K[j, d]
  float* kscale;     // [kvecs * 16] (0 past Lk)
  int8_t* kq;        // [Lk][4U] quantize_k_avx512's output
  float* mean;       // [D]
  float* krows;      // [Lk][D] quantize_k_avx512's scratch
  uint32_t* v;       // [vunits][dv] bf16 key pairs
  uint32_t* q;       // [kRows][U] u8 quads (q + 128)
  int8_t* qq;        // [kRows][4U]
  float* qscale;     // [kRows] qscale * scale * log2(e)
  float* s;          // [kRows][kCols]
  uint32_t* p;       // [kRows][kCols / 2] bf16 pairs
  float* o;          // [kRows][dv]
  float* row_max;    // [kRows]
  float* row_sum;    // [kRows][16]
  float* alpha;      // [kRows]
  int64_t* key_end;  // [kRows]
};

Workspace layout(const Problem& p, void* scratch, size_t* bytes) {
  const Dims d(p);
  const auto r = static_cast<size_t>(kRows);
  const auto kv = static_cast<size_t>(d.kvecs * 16), u = static_cast<size_t>(d.units);
  ScratchLayout sl(scratch);
  Workspace w;
  w.k = reinterpret_cast<uint32_t*>(sl.take(kv * u * 4));
  w.kcomp = reinterpret_cast<int32_t*>(sl.take(kv * 4));
  w.kscale = reinterpret_cast<float*>(sl.take(kv * 4));
  w.kq = reinterpret_cast<int8_t*>(sl.take(size_t(p.kv_len) * u * 4));
  w.mean = reinterpret_cast<float*>(sl.take(size_t(p.head_dim) * 4));
  w.krows = reinterpret_cast<float*>(sl.take(size_t(p.kv_len * p.head_dim) * 4));
  w.v = reinterpret_cast<uint32_t*>(sl.take(size_t(d.vunits * d.dv) * 4));
  w.q = reinterpret_cast<uint32_t*>(sl.take(r * u * 4));
  w.qq = reinterpret_cast<int8_t*>(sl.take(r * u * 4));
  w.qscale = reinterpret_cast<float*>(sl.take(r * 4));
  w.s = reinterpret_cast<float*>(sl.take(r * kCols * 4));
  w.p = reinterpret_cast<uint32_t*>(sl.take(r * (kCols / 2) * 4));
  w.o = reinterpret_cast<float*>(sl.take(r * size_t(d.dv) * 4));
  take_row_state(sl, w, r);
  if (bytes != nullptr) *bytes = sl.used;
  return w;
}

// K of (b, h): quantized (quantize_k_avx512), then packed into 16-key vectors of
// quads with the per-key compensation and scale.
void pack_k(const Problem& p, int64_t b, int64_t h, const Dims& d, const Workspace& w) {
  const int64_t ldk = d.units * 4;
  quantize_k_avx512(p, b, h, ldk, w.kq, w.kscale, w.mean, w.krows);
  for (int64_t j = 0; j < d.kvecs * 16; ++j) {
    uint32_t* col = w.k + (j / 16) * d.units * 16 + j % 16;
    if (j < p.kv_len) {
      const int8_t* row = w.kq + j * ldk;
      int32_t sum = 0;
      for (int64_t e = 0; e < ldk; ++e) sum += row[e];
      for (int64_t u = 0; u < d.units; ++u) std::memcpy(col + u * 16, row + 4 * u, 4);
      w.kcomp[j] = 128 * sum;
    } else {
      for (int64_t u = 0; u < d.units; ++u) col[u * 16] = 0;
      w.kcomp[j] = 0;
      w.kscale[j] = 0.f;
    }
  }
}

// V of (b, h) -> [vunits][dv] bf16 key pairs (V rounded to bf16; zero past Lk / head_dim).
void pack_v(const Problem& p, int64_t b, int64_t h, const Dims& d, uint32_t* dst) {
  const Operand& v = p.v;
  const int64_t D = p.head_dim;
  if (v.dtype == DType::BF16 && v.stride[3] == 1) {
    for (int64_t ju = 0; ju < d.vunits; ++ju) {
      const int64_t j = 2 * ju;
      const auto* r0 = reinterpret_cast<const uint16_t*>(element(v, b, j, h));
      const auto* r1 =
          j + 1 < p.kv_len ? reinterpret_cast<const uint16_t*>(element(v, b, j + 1, h)) : nullptr;
      interleave_bf16(r0, r1, D, dst + ju * d.dv);
    }
    return;
  }
  std::memset(dst, 0, size_t(d.vunits * d.dv) * 4);
  for (int64_t j = 0; j < p.kv_len; ++j) {
    const char* row = element(v, b, j, h);
    uint32_t* out = dst + (j / 2) * d.dv;
    const int shift = static_cast<int>(j % 2) * 16;
    for (int64_t e = 0; e < D; ++e)
      out[e] |= f32_to_bf16_bits(load_f32(v.dtype, row, e * v.stride[3])) << shift;
  }
}

// acc += u8 quads of a . s8 quads of b (vpdpbusd). Inline asm rather than
// _mm512_dpbusd_epi32: with that intrinsic GCC 12 copies each accumulator to
// a scratch register and back around every product and spills the 6 x 4
// tile to the stack (perf annotate on Zen 4: Q.K^T took 45 % of the kernel's
// samples, P.V 39 %, though P.V's equal work runs at half vpdpbusd's rate);
// "+v" keeps each accumulator in its register: the kernel went from 2 %
// slower than the BF16 one to 20 % faster (bench/RESULTS.md).
inline void dpbusd(__m512i& acc, __m512i a, __m512i b) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
}

// S[R][16*C] = Q K^T (scaled) over one group of key vectors.
template <int R, int C>
void score_tile(const uint32_t* a, int64_t units, const uint32_t* kb, int64_t ldk,
                const int32_t* comp, const float* kscale, const float* qscale, float* c) {
  __m512i acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < C; ++j) acc[r][j] = _mm512_setzero_si512();
  for (int64_t u = 0; u < units; ++u) {
    __m512i bv[C];
#pragma GCC unroll 16
    for (int j = 0; j < C; ++j) bv[j] = _mm512_load_si512(kb + u * 16 + j * ldk);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512i av = _mm512_set1_epi32(static_cast<int>(a[r * units + u]));
#pragma GCC unroll 16
      for (int j = 0; j < C; ++j) dpbusd(acc[r][j], av, bv[j]);
    }
  }
#pragma GCC unroll 16
  for (int j = 0; j < C; ++j) {
    const __m512i cj = _mm512_load_si512(comp + 16 * j);
    const __m512 kj = _mm512_load_ps(kscale + 16 * j);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][j], cj));
      _mm512_store_ps(c + r * kCols + 16 * j,
                      _mm512_mul_ps(_mm512_mul_ps(x, kj), _mm512_set1_ps(qscale[r])));
    }
  }
}

void scores(const Workspace& w, const Dims& d, int64_t rows, int64_t kvec0, int64_t nvec) {
  const int64_t ldk = d.units * 16;
  for (int64_t vec = 0; vec < nvec; vec += 4) {
    const uint32_t* kb = w.k + (kvec0 + vec) * ldk;
    const int32_t* comp = w.kcomp + (kvec0 + vec) * 16;
    const float* ks = w.kscale + (kvec0 + vec) * 16;
    const int64_t n = min64(4, nvec - vec);
    for (int64_t r = 0; r < rows; r += kQkRows) {
      const uint32_t* a = w.q + r * d.units;
      float* c = w.s + r * kCols + vec * 16;
      const float* qs = w.qscale + r;
      switch (n) {
        case 1: score_tile<kQkRows, 1>(a, d.units, kb, ldk, comp, ks, qs, c); break;
        case 2: score_tile<kQkRows, 2>(a, d.units, kb, ldk, comp, ks, qs, c); break;
        case 3: score_tile<kQkRows, 3>(a, d.units, kb, ldk, comp, ks, qs, c); break;
        default: score_tile<kQkRows, 4>(a, d.units, kb, ldk, comp, ks, qs, c); break;
      }
    }
  }
}

// c[R][16*C] = c * row_scale + a (bf16 pairs) x b (bf16 pairs), as tile_gemm of
// attention_avx512.cpp.
template <int R, int C>
void pv_tile(const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb_u, int64_t units,
             float* c, int64_t ldc, const float* row_scale) {
  __m512 acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const __m512 s = _mm512_set1_ps(row_scale[r]);
#pragma GCC unroll 16
    for (int j = 0; j < C; ++j) acc[r][j] = _mm512_mul_ps(_mm512_load_ps(c + r * ldc + 16 * j), s);
  }
  for (int64_t u = 0; u < units; ++u) {
    __m512i bv[C];
#pragma GCC unroll 16
    for (int j = 0; j < C; ++j) bv[j] = _mm512_load_si512(b + u * ldb_u + j * 16);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512i av = _mm512_set1_epi32(static_cast<int>(a[r * lda + u]));
#pragma GCC unroll 16
      for (int j = 0; j < C; ++j)
        acc[r][j] = _mm512_dpbf16_ps(acc[r][j], (__m512bh)av, (__m512bh)bv[j]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < C; ++j) _mm512_store_ps(c + r * ldc + 16 * j, acc[r][j]);
}

template <int R, int C>
void pv_chunk(const Workspace& w, const Dims& d, int64_t rows, const uint32_t* vb, int64_t units,
              int64_t vec0) {
  constexpr int64_t ldp = kCols / 2;
  for (int64_t r = 0; r < rows; r += R)
    pv_tile<R, C>(w.p + r * ldp, ldp, vb + vec0 * 16, d.dv, units, w.o + r * d.dv + vec0 * 16, d.dv,
                  w.alpha + r);
}

void accumulate_pv(const Workspace& w, const Dims& d, int64_t rows, int64_t key0, int64_t nkeys) {
  const uint32_t* vb = w.v + (key0 / 2) * d.dv;
  const int64_t units = ceil_div(nkeys, 2);
  const int64_t nvec = d.dv / 16;
  int64_t vec = 0;
  for (; vec + 4 <= nvec; vec += 4) pv_chunk<6, 4>(w, d, rows, vb, units, vec);
  if (vec + 2 <= nvec) pv_chunk<12, 2>(w, d, rows, vb, units, vec), vec += 2;
  if (vec < nvec) pv_chunk<12, 1>(w, d, rows, vb, units, vec);
}

// Online-softmax step of row r over NV key vectors (scores already in log2
// units): S row -> P (bf16 pairs), running max / lane-wise sum, alpha.
template <bool kMasked, int NV>
void softmax_row(const Problem& p, const Workspace& w, int64_t r, const RowBias& bias_row,
                 int64_t key0, const __mmask16* valid) {
  const __m512 neg_inf = _mm512_set1_ps(-__builtin_inff());
  __m512 t[NV];
  __m512 vmax = neg_inf;
  GridPos at = bias_row.y ? grid_pos(key0, p.grid_w) : GridPos{0, 0};  // the separable bias's
#pragma GCC unroll 8
  for (int c = 0; c < NV; ++c) {
    __m512 x = _mm512_load_ps(w.s + r * kCols + 16 * c);
    if (bias_row) {
      const int64_t j = key0 + 16 * c;
      const __mmask16 m = kMasked ? valid[c] : __mmask16(0xFFFF);
      const __m512 bias = bias16(p, bias_row, j, at, m);
      x = _mm512_fmadd_ps(bias, _mm512_set1_ps(kLog2e), x);
    }
    t[c] = kMasked ? _mm512_mask_blend_ps(valid[c], neg_inf, x) : x;
    vmax = _mm512_max_ps(vmax, t[c]);
  }
  const float old_max = w.row_max[r];
  const __m512 new_max = _mm512_max_ps(_mm512_set1_ps(old_max), broadcast_max(vmax));
  const __m512 shift = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(new_max, neg_inf, _CMP_EQ_OQ),
                                            new_max, _mm512_setzero_ps());
  const __m512 alpha = rescale_alpha(old_max, new_max, shift);
  __m512 sum = _mm512_setzero_ps();
  uint32_t* prow = w.p + r * (kCols / 2);
#pragma GCC unroll 8
  for (int c = 0; c < NV; ++c) {
    __m512 pc = exp2_neg_bf16(_mm512_sub_ps(t[c], shift));
    if (kMasked) pc = _mm512_maskz_mov_ps(valid[c], pc);
    sum = _mm512_add_ps(sum, pc);
    t[c] = pc;
  }
#pragma GCC unroll 8
  for (int c = 0; c < NV; c += 2) {
    const __m512 hi = c + 1 < NV ? t[c + 1] : _mm512_setzero_ps();
    _mm512_store_si512(prow + 8 * c, (__m512i)_mm512_cvtne2ps_pbh(hi, t[c]));
  }
  w.alpha[r] = _mm512_cvtss_f32(alpha);
  w.row_max[r] = _mm512_cvtss_f32(new_max);
  float* row_sum = w.row_sum + 16 * r;
  _mm512_store_ps(row_sum, _mm512_fmadd_ps(_mm512_load_ps(row_sum), alpha, sum));
}

// softmax_row over nvec (1 .. kCols / 16) key vectors: the NV = nvec
// instance, sought from the block's full width down.
template <bool kMasked, int NV = kCols / 16>
void softmax_row_n(const Problem& p, const Workspace& w, int64_t r, const RowBias& bias_row,
                   int64_t key0, int64_t nvec, const __mmask16* valid) {
  if constexpr (NV > 1) {
    if (nvec < NV) return softmax_row_n<kMasked, NV - 1>(p, w, r, bias_row, key0, nvec, valid);
  }
  softmax_row<kMasked, NV>(p, w, r, bias_row, key0, valid);
}

void softmax_block(const Problem& p, const Workspace& w, int64_t b, int64_t h, int64_t row0,
                   int64_t rows, int64_t key0, int64_t nvec) {
  __mmask16 padding[kCols / 16];
  bool any_padded = false;
  for (int64_t c = 0; c < nvec; ++c) {
    padding[c] = 0xFFFF;
    if (!p.key_padding) continue;
    for (int64_t l = 0; l < 16; ++l) {
      const int64_t j = key0 + 16 * c + l;
      if (j < p.kv_len &&
          p.key_padding[b * p.key_padding_stride[0] + j * p.key_padding_stride[1]] == 0)
        padding[c] = static_cast<__mmask16>(padding[c] & ~(1u << l));
    }
    any_padded |= padding[c] != 0xFFFF;
  }
  const int64_t block_end = key0 + 16 * nvec;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t visible = w.key_end[r] - key0;
    if (visible <= 0) {
      std::memset(w.p + r * (kCols / 2), 0, size_t(nvec * 8) * 4);
      w.alpha[r] = 1.f;
      continue;
    }
    const RowBias bias_row = row_bias(p, b, h, row0 + r);
    if (!any_padded && w.key_end[r] >= block_end) {
      softmax_row_n<false>(p, w, r, bias_row, key0, nvec, nullptr);
    } else {
      __mmask16 valid[kCols / 16];
      for (int64_t c = 0; c < nvec; ++c) valid[c] = first_lanes(visible - 16 * c) & padding[c];
      softmax_row_n<true>(p, w, r, bias_row, key0, nvec, valid);
    }
  }
}

void store_rows(const Problem& p, const Workspace& w, const Dims& d, int64_t b, int64_t h,
                int64_t row0, int64_t rows) {
  const int64_t D = p.head_dim;
  const int64_t esize = p.out_dtype == DType::F32 ? 4 : 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float sum = _mm512_cvtss_f32(broadcast_sum(_mm512_load_ps(w.row_sum + 16 * r)));
    const __m512 inv = _mm512_set1_ps(sum > 0.f ? 1.f / sum : 0.f);
    char* dst = static_cast<char*>(p.out) +
                (b * p.out_stride[0] + (row0 + r) * p.out_stride[1] + h * p.out_stride[2]) * esize;
    const float* o = w.o + r * d.dv;
    for (int64_t e = 0; e < D; e += 16) {
      const __mmask16 m = first_lanes(D - e);
      const __m512 y = _mm512_mul_ps(_mm512_load_ps(o + e), inv);
      if (p.out_stride[3] == 1) {
        if (p.out_dtype == DType::F32)
          _mm512_mask_storeu_ps(reinterpret_cast<float*>(dst) + e, m, y);
        else
          _mm256_mask_storeu_epi16(reinterpret_cast<uint16_t*>(dst) + e, m,
                                   (__m256i)_mm512_cvtneps_pbh(y));
      } else {
        alignas(64) float tmp[16];
        alignas(32) uint16_t tmp16[16];
        _mm512_store_ps(tmp, y);
        _mm256_store_si256(reinterpret_cast<__m256i*>(tmp16), (__m256i)_mm512_cvtneps_pbh(y));
        for (int64_t l = 0; l < 16 && e + l < D; ++l) {
          const int64_t at = (e + l) * p.out_stride[3];
          if (p.out_dtype == DType::F32)
            reinterpret_cast<float*>(dst)[at] = tmp[l];
          else
            reinterpret_cast<uint16_t*>(dst)[at] = tmp16[l];
        }
      }
    }
  }
}

void run_tile(const Problem& p, const Workspace& w, const Dims& d, int64_t b, int64_t h,
              int64_t row0) {
  const int64_t rows = min64(kRows, p.q_len - row0);
  const int64_t padded_rows = round_up(rows, kRowAlign);
  const int64_t ldq = d.units * 4;
  quantize_q_avx512(p, b, h, row0, rows, ldq, w.qq, w.qscale);
  const float score_scale = p.scale * kLog2e;
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(-128));  // s8 + 128 as u8: x ^ 0x80
  for (int64_t r = 0; r < padded_rows; ++r) {
    uint32_t* dst = w.q + r * d.units;
    if (r >= rows) {  // zero scale: the padding rows' scores are 0, their P rows stay 0
      std::memset(dst, 0x80, size_t(d.units) * 4);
      w.qscale[r] = 0.f;
      std::memset(w.p + r * (kCols / 2), 0, size_t(kCols / 2) * 4);
      w.alpha[r] = 1.f;
      continue;
    }
    w.qscale[r] *= score_scale;
    const int8_t* src = w.qq + r * ldq;
    for (int64_t e = 0; e < ldq; e += 64) {
      const int64_t left = ldq - e;
      const __mmask64 m = left >= 64 ? ~__mmask64(0) : (__mmask64(1) << left) - 1;
      _mm512_mask_storeu_epi8(reinterpret_cast<char*>(dst) + e, m,
                              _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, src + e), offset));
    }
  }
  int64_t tile_key_end = 0;
  for (int64_t r = 0; r < rows; ++r) {
    w.key_end[r] = attention_key_end(p, row0 + r);
    tile_key_end = max64(tile_key_end, w.key_end[r]);
    w.row_max[r] = -__builtin_inff();
    _mm512_store_ps(w.row_sum + 16 * r, _mm512_setzero_ps());
  }
  std::memset(w.o, 0, size_t(padded_rows * d.dv) * 4);
  for (int64_t key0 = 0; key0 < tile_key_end; key0 += kCols) {
    const int64_t nkeys = min64(kCols, tile_key_end - key0);
    const int64_t nvec = ceil_div(nkeys, 16);
    scores(w, d, padded_rows, key0 / 16, nvec);
    softmax_block(p, w, b, h, row0, rows, key0, nvec);
    accumulate_pv(w, d, padded_rows, key0, nkeys);
  }
  store_rows(p, w, d, b, h, row0, rows);
}

size_t scratch_bytes(const Problem& p) {
  size_t bytes = 0;
  layout(p, nullptr, &bytes);
  return bytes;
}

void run_items(const Problem& p, int64_t begin, int64_t end, void* scratch) {
  const Dims d(p);
  const Workspace w = layout(p, scratch, nullptr);
  const int64_t tiles = ceil_div(p.q_len, kRows);
  int64_t packed = -1;
  for (int64_t item = begin; item < end; ++item) {
    const int64_t bh = item / tiles;
    const int64_t tile = balanced_tile(item % tiles, tiles);
    const int64_t b = bh / p.heads, h = bh % p.heads;
    if (bh != packed) {
      pack_k(p, b, h, d, w);
      pack_v(p, b, h, d, w.v);
      packed = bh;
    }
    run_tile(p, w, d, b, h, tile * kRows);
  }
}

bool vnni_accepts(const Problem& p) { return p.head_dim <= kMaxQuantDim; }

}  // namespace

void quantize_k_avx512(const Problem& p, int64_t b, int64_t h, int64_t ldk, int8_t* kq,
                       float* kscale, float* mean, float* rows) {
  const int64_t D = p.head_dim, Lk = p.kv_len;
  alignas(64) double sum[kMaxQuantDim];
  alignas(64) float x[kMaxQuantDim];
  const int64_t dv = round_up(D, 16);
  for (int64_t e = 0; e < dv; e += 8) _mm512_store_pd(sum + e, _mm512_setzero_pd());
  // Per dim in key order, in double: the reference's sums, lane by lane. The
  // rows are kept (fp32, contiguous) for the second pass.
  for (int64_t j = 0; j < Lk; ++j) {
    float* const row = rows + j * D;
    load_row_f32(p.k, b, j, h, D, row, Lk);
    for (int64_t e = 0; e < D; e += 8) {
      const __mmask8 m = __mmask8(first_lanes(D - e));
      const __m512d xe = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, row + e));
      _mm512_mask_store_pd(sum + e, m, _mm512_add_pd(_mm512_load_pd(sum + e), xe));
    }
  }
  const __m512d n = _mm512_set1_pd(static_cast<double>(Lk));
  for (int64_t e = 0; e < D; e += 8) {
    const __mmask8 m = __mmask8(first_lanes(D - e));
    const __m256 mv =
        Lk > 0 ? _mm512_cvtpd_ps(_mm512_div_pd(_mm512_load_pd(sum + e), n)) : _mm256_setzero_ps();
    _mm256_mask_storeu_ps(mean + e, m, mv);
  }
  for (int64_t j = 0; j < Lk; ++j) {
    const float* const row = rows + j * D;
    for (int64_t e = 0; e < D; e += 16) {
      const __mmask16 m = first_lanes(D - e);
      _mm512_mask_storeu_ps(
          x + e, m,
          _mm512_sub_ps(_mm512_maskz_loadu_ps(m, row + e), _mm512_maskz_loadu_ps(m, mean + e)));
    }
    kscale[j] = quantize_row_avx512(x, D, ldk, kq + j * ldk);
  }
}

void quantize_q_avx512(const Problem& p, int64_t b, int64_t h, int64_t row0, int64_t rows,
                       int64_t ldq, int8_t* qq, float* qscale) {
  alignas(64) float x[kMaxQuantDim];
  for (int64_t r = 0; r < rows; ++r) {
    load_row_f32(p.q, b, row0 + r, h, p.head_dim, x, row0 + rows);
    qscale[r] = quantize_row_avx512(x, p.head_dim, ldq, qq + r * ldq);
  }
}

const Kernel kInt8Avx512Kernel = {"int8_avx512_vnni", kRows, scratch_bytes, run_items,
                                  vnni_accepts};

}  // namespace flick::cpu::attention_int8_detail
