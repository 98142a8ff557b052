// Flash-style AVX-512 (+BF16) attention for narrow heads (head_dim <= 32:
// EfficientSAM3's fusion encoder and decoder, 8 heads x 32), computed
// transposed: lanes over queries.
//
// With lanes over keys (attention_avx512.cpp) a 32-wide head starves the
// products: P.V has only two 16-lane vectors of head_dim, so its register
// tile broadcasts one P unit per two multiply-adds, and every query row pays
// a horizontal max / sum per key block. Here a work item is a tile of kTq =
// 64 queries (four 16-lane vectors) of one (batch, head):
//   S^T = K Q^T   [keys][64]: units over head_dim broadcast from K, Q^T
//                 packed [U][64];
//   softmax down the columns: each query's running max and sum sit in a
//                 lane, so the block max is one vmaxps per score vector and
//                 nothing is reduced across lanes;
//   O^T += V^T P^T [D][64]: units over keys broadcast from V^T (packed
//                 [D][Lk/u]), P^T packed [Lk/u][64].
// Both products use a register tile of 4 query vectors against 6 (S) or 4
// (O) broadcast rows: one broadcast per 4 multiply-adds. A tile of fewer
// queries (the last of a row count that is no multiple of 64: the decoder's
// 201) runs on as many vectors as it fills.
//
// Numerics are the general AVX-512 kernel's: bf16 inputs multiply in
// vdpbf16ps with fp32 sums, P is rounded to bf16 (pairs of keys) for P.V
// while the normaliser sums the fp32 P, P's 2^x is the degree-4 polynomial;
// fp32 inputs use FMA and the degree-6 exp2. Only the summation order and
// the fused scale of the scores (one FMA: s * scale - max, where the other
// kernel rounds s * scale first) differ.
//
// A negative scale runs as -Q against |scale| (a sign flip, exact), so that
// the block max of the raw scores is that of the scaled ones.
//
// It takes problems without key padding or a causal mask; cpu::attention
// sends those to the general kernel (or drops padded keys first). Without a
// bias every score is finite and the block max is taken on the raw scores
// in the product's registers. With one (a full [B|1, H|1, Lq, Lk] bias, or
// the separable one of EfficientSAM3's boxRPB: the decoder's 201 queries x
// 5184 keys), a pass over S^T adds it and takes the max as the general
// kernel does: x = s * scale * log2(e) + bias * log2(e), -inf allowed
// (rows that see nothing give zeros). See attention_kernels.h for why
// this file calls no inline function of another header outside anonymous
// namespaces.
// GCC 12 reports the intrinsics' deliberately undefined pass-through operand
// (_mm512_undefined_ps) as (maybe-)uninitialized once they are inlined
// (GCC PR105593, fixed in 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "runtime/cpu/attention_avx512_common.h"
#include "runtime/cpu/attention_kernels.h"

namespace flick::cpu::attention_detail {
namespace {

using namespace avx512_attention;  // the shared helpers (attention_avx512_common.h)

constexpr int64_t kTq = 64;      // queries per work item: kQv vectors of 16 lanes
constexpr int kQv = 4;           // query vectors
constexpr int64_t kKb = 64;      // keys per softmax block
constexpr int kSRows = 6;        // S^T register tile: 6 keys x kQv query vectors
constexpr int kORows = 4;        // O^T register tile: 4 head dims x kQv query vectors
constexpr int64_t kMaxDim = 32;  // widest head taken
constexpr float kLog2e = 1.44269504088896340736f;

bool narrow_accepts(const Problem& p) {
  return p.head_dim <= kMaxDim && p.key_padding == nullptr && p.causal_block <= 0 && p.kv_len > 0;
}

template <class M>
struct Dims {
  int64_t units;   // U: head_dim in units (Q.K^T reduction)
  int64_t dp;      // head_dim rounded up to the O^T register tile
  int64_t keys;    // Lk rounded up to the key block
  int64_t vunits;  // keys in units (P.V reduction)
  explicit Dims(const Problem& p)
      : units(ceil_div(p.head_dim, M::kPerUnit)),
        dp(round_up(p.head_dim, kORows)),
        keys(round_up(p.kv_len, kKb)),
        vunits(round_up(p.kv_len, kKb) / M::kPerUnit) {}
};

struct Workspace {
  uint32_t* k;   // [keys][U] units; keys past Lk are zero
  uint32_t* vt;  // [dp][vunits] units: unit (d, u) holds V[u * kPerUnit + e, d]
  uint32_t* qt;  // [U][kTq] units; queries past the tile are zero
  float* s;      // [kKb][kTq] scores of the block
  uint32_t* pt;  // [kKb / kPerUnit][kTq] units of P (fp32: the scores' memory)
  float* ot;     // [dp][kTq]
  float* max;    // [kTq] running max of the log2-scaled scores
  float* sum;    // [kTq] running sum of 2^(s - max)
  float* alpha;  // [kTq] rescale of O^T for the current block
  // With a bias, its values for the tile's queries, transposed (lanes over
  // queries, zero past the tile's rows): a separable one's parts per tile
  // (transpose_bias_parts: [kTq / 16][grid_h + grid_w][16]); a full one's
  // per key block, [kKb][kTq].
  float* bias;
};

template <class M>
Workspace layout(const Problem& p, void* scratch, size_t* bytes) {
  const Dims<M> d(p);
  ScratchLayout sl(scratch);
  Workspace w;
  w.k = reinterpret_cast<uint32_t*>(sl.take(size_t(d.keys * d.units) * 4));
  w.vt = reinterpret_cast<uint32_t*>(sl.take(size_t(d.dp * d.vunits) * 4));
  w.qt = reinterpret_cast<uint32_t*>(sl.take(size_t(d.units * kTq) * 4));
  w.s = reinterpret_cast<float*>(sl.take(size_t(kKb * kTq) * 4));
  // fp32 P overwrites its scores (the softmax reads each score once, before
  // it writes the weight): 16 KB less of the tile's L1 working set.
  if constexpr (M::kPerUnit == 1)
    w.pt = reinterpret_cast<uint32_t*>(w.s);
  else
    w.pt = reinterpret_cast<uint32_t*>(sl.take(size_t(kKb / M::kPerUnit * kTq) * 4));
  w.ot = reinterpret_cast<float*>(sl.take(size_t(d.dp * kTq) * 4));
  w.max = reinterpret_cast<float*>(sl.take(kTq * 4));
  w.sum = reinterpret_cast<float*>(sl.take(kTq * 4));
  w.alpha = reinterpret_cast<float*>(sl.take(kTq * 4));
  const int64_t bias_rows = p.bias_y ? bias_parts(p) : p.bias ? kKb : 0;
  w.bias = reinterpret_cast<float*>(sl.take(size_t(bias_rows * kTq) * 4));
  if (bytes != nullptr) *bytes = sl.used;
  return w;
}

// V^T of (b, h), 16 units of keys at a time, from contiguous fp32 / bf16
// rows: 16 rows (fp32) or 16 interleaved pairs of rows (bf16, unit = even
// key | odd key << 16) as 16 vectors of units over head_dim, transposed into
// 16 vectors of units over keys, one per head_dim element. A scalar scatter
// here cost half the kernel's own time on the decoder's 201 x 5184 (4 query
// tiles a head to pay for it).
template <class M>
void pack_vt_rows(const Problem& p, int64_t b, int64_t h, const Dims<M>& d, uint32_t* vt) {
  const int64_t D = p.head_dim, n = p.kv_len;
  const int64_t row_bytes = D * (M::kPerUnit == 2 ? 2 : 4);
  const auto row = [&](int64_t j) -> const void* { return element(p.v, b, j, h); };
  for (int64_t u0 = 0; u0 * M::kPerUnit < n; u0 += 16) {
    __m512i lo[16], hi[16];  // per unit of keys: its units over head_dim [0, 16), [16, 32)
    for (int i = 0; i < 16; ++i) {
      const int64_t j = (u0 + i) * M::kPerUnit;
      for (int64_t ahead = j + 16 * M::kPerUnit; ahead < j + 17 * M::kPerUnit && ahead < n; ++ahead)
        prefetch_row(static_cast<const char*>(row(ahead)), row_bytes);
      if constexpr (M::kPerUnit == 2) {
        const __mmask32 words = D >= 32 ? ~__mmask32(0) : (__mmask32(1) << D) - 1;
        const __m512i a = j < n ? _mm512_maskz_loadu_epi16(words, row(j)) : _mm512_setzero_si512();
        const __m512i c =
            j + 1 < n ? _mm512_maskz_loadu_epi16(words, row(j + 1)) : _mm512_setzero_si512();
        interleave_pairs(a, c, &lo[i], &hi[i]);
      } else if (j < n) {
        const auto* r = static_cast<const uint32_t*>(row(j));
        lo[i] = _mm512_maskz_loadu_epi32(first_lanes(D), r);
        hi[i] = _mm512_maskz_loadu_epi32(first_lanes(D - 16), r + 16);
      } else {
        lo[i] = hi[i] = _mm512_setzero_si512();
      }
    }
    transpose16(lo);
    for (int64_t e = 0; e < min64(D, 16); ++e) _mm512_store_si512(vt + e * d.vunits + u0, lo[e]);
    if (D > 16) {
      transpose16(hi);
      for (int64_t e = 16; e < D; ++e) _mm512_store_si512(vt + e * d.vunits + u0, hi[e - 16]);
    }
  }
}

// K of (b, h) -> [keys][U] units, V of (b, h) -> V^T [dp][vunits] units
// (zero past Lk and past head_dim).
template <class M>
void pack_kv(const Problem& p, int64_t b, int64_t h, const Dims<M>& d, const Workspace& w) {
  std::memset(w.k, 0, size_t(d.keys * d.units) * 4);
  const int64_t k_bytes = p.head_dim * (p.k.dtype == DType::F32 ? 4 : 2);
  for (int64_t j = 0; j < p.kv_len; ++j) {
    if (j + kPrefetchKeys < p.kv_len)  // rows a head stride apart: a miss each
      prefetch_row(element(p.k, b, j + kPrefetchKeys, h), k_bytes);
    pack_row<M>(p.k, element(p.k, b, j, h), p.head_dim, d.units, w.k + j * d.units, 1);
  }
  const Operand& v = p.v;
  const DType rows_dtype = M::kPerUnit == 2 ? DType::BF16 : DType::F32;
  if (v.stride[3] == 1 && v.dtype == rows_dtype) {
    // Units [0, round_up(Lk / kPerUnit, 16)) of the first D rows come from
    // pack_vt_rows (zero past Lk); the rest is padding.
    const int64_t done = round_up(ceil_div(p.kv_len, M::kPerUnit), 16);
    for (int64_t e = 0; e < d.dp; ++e) {
      const int64_t from = e < p.head_dim ? done : 0;
      std::memset(w.vt + e * d.vunits + from, 0, size_t(d.vunits - from) * 4);
    }
    pack_vt_rows<M>(p, b, h, d, w.vt);
    return;
  }
  std::memset(w.vt, 0, size_t(d.dp * d.vunits) * 4);
  for (int64_t j = 0; j < p.kv_len; ++j) {
    const char* row = element(v, b, j, h);
    const int64_t u = j / M::kPerUnit;
    for (int64_t e = 0; e < p.head_dim; ++e) {
      uint32_t& unit = w.vt[e * d.vunits + u];
      if constexpr (M::kPerUnit == 2)
        unit |= load_bf16(row, e * v.stride[3]) << (16 * (j % 2));
      else
        unit = f32_bits(load_f32(v.dtype, row, e * v.stride[3]));
    }
  }
}

// S^T rows of `keys` (1 .. R) keys over QV query vectors: the R-key
// register tile, sought from kSRows down; bmax as in scores().
template <class M, int QV, int R = kSRows>
void score_tile(const uint32_t* a, int64_t units, const uint32_t* qt, float* c, int64_t keys,
                __m512* bmax) {
  if constexpr (R > 1)
    if (keys < R) return score_tile<M, QV, R - 1>(a, units, qt, c, keys, bmax);
  tile_gemm<M, R, QV>(a, units, qt, kTq, 16, units, c, kTq, nullptr, nullptr, bmax);
}

// S^T [nk][kTq] = K[key0, key0 + nk) Q^T, in register tiles of up to kSRows
// keys; bmax[c] (unless null): the block's max raw score per query lane,
// taken in the tiles (vmaxps beside the products, on a port they leave idle,
// instead of a pass of its own between them).
template <class M, int QV>
void scores(const Workspace& w, const Dims<M>& d, int64_t key0, int64_t nk, __m512* bmax) {
  if (bmax != nullptr)
#pragma GCC unroll 4
    for (int c = 0; c < QV; ++c) bmax[c] = _mm512_set1_ps(-__builtin_inff());
  for (int64_t j = 0; j < nk; j += kSRows)
    score_tile<M, QV>(w.k + (key0 + j) * d.units, d.units, w.qt, w.s + j * kTq,
                      min64(kSRows, nk - j), bmax);
}

// 2^x of the softmax for x <= 0 (kFinite: x finite, else -inf allowed).
template <class M, bool kFinite>
__m512 exp2_p(__m512 x) {
  if constexpr (M::kPerUnit == 2)
    return exp2_neg_bf16<kFinite>(x);
  else
    return exp2_neg<kFinite>(x);
}

// A tile's view of the bias: its rows and, for a full bias, the current
// key block transposed (fill_block); a separable one's parts are transposed
// once per tile (transpose_bias_parts).
struct TileBias {
  const Problem& p;
  const Workspace& w;
  int64_t b, h, row0, rows;

  // A full bias's block of keys [key0, key0 + nk), transposed: w.bias[j][lane].
  void fill_block(int64_t key0, int64_t nk) const {
    std::memset(w.bias, 0, size_t(kKb * kTq) * 4);
    for (int64_t r = 0; r < rows; ++r) {
      const RowBias rb = row_bias(p, b, h, row0 + r);
      for (int64_t j = 0; j < nk; ++j) w.bias[j * kTq + r] = rb.full[(key0 + j) * p.bias_stride[3]];
    }
  }
};

// With a bias: S^T's block becomes the log2-scaled, biased scores
// x = s * scale * log2(e) + bias * log2(e) (the general kernel's rounding;
// the separable sum y + x rounded once, as a materialised bias is), and m[c]
// their block max per query lane.
template <int QV>
void add_bias(const TileBias& tb, int64_t key0, int64_t nk, __m512* m) {
  const Problem& p = tb.p;
  const __m512 scale = _mm512_set1_ps(std::fabs(p.scale) * kLog2e);  // Q negated if < 0
  const __m512 log2e = _mm512_set1_ps(kLog2e);
#pragma GCC unroll 4
  for (int c = 0; c < QV; ++c) m[c] = _mm512_set1_ps(-__builtin_inff());
  if (p.bias_y == nullptr) tb.fill_block(key0, nk);
  GridPos at = p.bias_y ? grid_pos(key0, p.grid_w) : GridPos{0, 0};
  const int64_t parts = bias_parts(p);
  for (int64_t j = 0; j < nk; ++j) {
    float* row = tb.w.s + j * kTq;
#pragma GCC unroll 4
    for (int c = 0; c < QV; ++c) {
      __m512 bias;
      if (p.bias_y) {
        const float* group = tb.w.bias + c * parts * 16;
        bias = _mm512_add_ps(_mm512_load_ps(group + at.y * 16),
                             _mm512_load_ps(group + (p.grid_h + at.x) * 16));
      } else {
        bias = _mm512_load_ps(tb.w.bias + j * kTq + 16 * c);
      }
      const __m512 x =
          _mm512_fmadd_ps(bias, log2e, _mm512_mul_ps(_mm512_load_ps(row + 16 * c), scale));
      _mm512_store_ps(row + 16 * c, x);
      m[c] = _mm512_max_ps(m[c], x);
    }
    if (p.bias_y) advance1(at, p.grid_w);
  }
}

// The online-softmax step of the tile over the nk keys of S^T: running max,
// alpha and sum per query lane, P^T as units. bf16: unit (u, q) holds P of
// keys 2u and 2u + 1 for query q, rounded to bf16 (an odd tail pairs with 0).
// kBiased: S^T holds add_bias's scaled scores (-inf allowed) and m their
// max; else S^T holds raw scores, all finite, and m their max. Returns
// whether any lane's max moved (else every alpha is 1).
template <class M, int QV, bool kBiased>
bool softmax_block(const Problem& p, const Workspace& w, int64_t nk, const __m512* m) {
  const __m512 neg_inf = _mm512_set1_ps(-__builtin_inff());
  const __m512 scale = _mm512_set1_ps(kBiased ? 1.f : std::fabs(p.scale) * kLog2e);
  __m512 shift[QV], sum[QV];
  bool any_moved = false;
#pragma GCC unroll 4
  for (int c = 0; c < QV; ++c) {
    const __m512 old_max = _mm512_load_ps(w.max + 16 * c);
    // Unbiased, m is the block max of the raw scores (scores()): scaling by
    // a positive constant keeps the order, so max(s) * scale is the max of
    // the scaled scores, bit for bit.
    const __m512 new_max = _mm512_max_ps(old_max, kBiased ? m[c] : _mm512_mul_ps(m[c], scale));
    // While a lane has seen only -inf (a bias), its max is -inf: shifting by
    // 0 keeps its weights 2^-inf = 0.
    shift[c] = kBiased ? _mm512_mask_blend_ps(_mm512_cmp_ps_mask(new_max, neg_inf, _CMP_EQ_OQ),
                                              new_max, _mm512_setzero_ps())
                       : new_max;
    // Lanes whose max did not move rescale by exactly 1 (2^0); the first
    // block's old max is -inf (2^-inf = 0, O^T and the sum are zero anyway).
    const __mmask16 moved = _mm512_cmp_ps_mask(new_max, old_max, _CMP_NEQ_UQ);
    __m512 alpha = _mm512_set1_ps(1.f);
    if (moved != 0) {
      alpha = _mm512_mask_mov_ps(alpha, moved, exp2_neg(_mm512_sub_ps(old_max, shift[c])));
      any_moved = true;
    }
    _mm512_store_ps(w.alpha + 16 * c, alpha);
    _mm512_store_ps(w.max + 16 * c, new_max);
    sum[c] = _mm512_mul_ps(_mm512_load_ps(w.sum + 16 * c), alpha);
  }
  // x - shift; biased S^T is scaled already (scale 1 is exact).
  const auto arg = [&](int64_t j, int c) {
    const __m512 sj = _mm512_load_ps(w.s + j * kTq + 16 * c);
    return kBiased ? _mm512_sub_ps(sj, shift[c]) : _mm512_fmsub_ps(sj, scale, shift[c]);
  };
  if constexpr (M::kPerUnit == 2) {
    // Word 2q of a unit vector: P[j][q]; word 2q + 1: P[j + 1][q]
    // (cvtne2ps_pbh puts row j in words 0-15 and row j + 1 in words 16-31).
    alignas(64) static constexpr uint16_t kInterleave[32] = {
        0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
        8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i idx = _mm512_load_si512(kInterleave);
    for (int64_t j = 0; j < nk; j += 2) {
      const bool pair = j + 1 < nk;
#pragma GCC unroll 4
      for (int c = 0; c < QV; ++c) {
        const __m512 p0 = exp2_p<M, !kBiased>(arg(j, c));
        __m512 p1 = _mm512_setzero_ps();
        if (pair) p1 = exp2_p<M, !kBiased>(arg(j + 1, c));
        sum[c] = _mm512_add_ps(sum[c], _mm512_add_ps(p0, p1));
        const __m512i units = _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(p1, p0));
        _mm512_store_si512(w.pt + (j / 2) * kTq + 16 * c, units);
      }
    }
  } else {
    for (int64_t j = 0; j < nk; ++j)
#pragma GCC unroll 4
      for (int c = 0; c < QV; ++c) {
        const __m512 pj = exp2_p<M, !kBiased>(arg(j, c));
        sum[c] = _mm512_add_ps(sum[c], pj);
        _mm512_store_ps(reinterpret_cast<float*>(w.pt) + j * kTq + 16 * c, pj);
      }
  }
#pragma GCC unroll 4
  for (int c = 0; c < QV; ++c) _mm512_store_ps(w.sum + 16 * c, sum[c]);
  return any_moved;
}

// O^T = O^T * alpha + V^T[:, key0 .. key0 + nk) P^T; `rescale` false when
// every alpha is 1 (once the running maxes settle, most blocks): O^T is then
// loaded as it is, without the multiply by 1.
template <class M, int QV>
void accumulate_pv(const Workspace& w, const Dims<M>& d, int64_t key0, int64_t nk, bool rescale) {
  const int64_t units = ceil_div(nk, M::kPerUnit);
  const uint32_t* vb = w.vt + key0 / M::kPerUnit;
  for (int64_t e = 0; e < d.dp; e += kORows)
    tile_gemm<M, kORows, QV>(vb + e * d.vunits, d.vunits, w.pt, kTq, 16, units, w.ot + e * kTq, kTq,
                             nullptr, rescale ? w.alpha : nullptr, nullptr, !rescale);
}

// out[b, row0 + q, h, :] = O^T[:, q] / sum[q] for the tile's rows (zero
// where a bias left a row nothing visible: sum 0). BF16 stores round as the
// other kernels (vcvtneps2bf16).
void store_rows(const Problem& p, const Workspace& w, int64_t b, int64_t h, int64_t row0,
                int64_t rows) {
  const int64_t D = p.head_dim;
  const bool f32 = p.out_dtype == DType::F32;
  const int64_t esize = f32 ? 4 : 2;
  alignas(64) float y[kMaxDim][16];
  alignas(64) uint16_t y16[kMaxDim][16];
  for (int c = 0; c * 16 < rows; ++c) {
    const __m512 sum = _mm512_load_ps(w.sum + 16 * c);
    const __m512 inv = _mm512_maskz_div_ps(
        _mm512_cmp_ps_mask(sum, _mm512_setzero_ps(), _CMP_NEQ_OQ), _mm512_set1_ps(1.f), sum);
    for (int64_t e = 0; e < D; ++e) {
      const __m512 v = _mm512_mul_ps(_mm512_load_ps(w.ot + e * kTq + 16 * c), inv);
      if (f32)
        _mm512_store_ps(y[e], v);
      else
        _mm256_store_si256(reinterpret_cast<__m256i*>(y16[e]), (__m256i)_mm512_cvtneps_pbh(v));
    }
    for (int64_t l = 0; l < 16 && 16 * c + l < rows; ++l) {
      char* dst =
          static_cast<char*>(p.out) +
          (b * p.out_stride[0] + (row0 + 16 * c + l) * p.out_stride[1] + h * p.out_stride[2]) *
              esize;
      for (int64_t e = 0; e < D; ++e) {
        const int64_t at = e * p.out_stride[3];
        if (f32)
          reinterpret_cast<float*>(dst)[at] = y[e][l];
        else
          reinterpret_cast<uint16_t*>(dst)[at] = y16[e][l];
      }
    }
  }
}

// One tile of `rows` <= 16 * QV queries from row0.
template <class M, int QV>
void run_tile(const Problem& p, const Workspace& w, const Dims<M>& d, int64_t b, int64_t h,
              int64_t row0, int64_t rows) {
  std::memset(w.qt, 0, size_t(d.units * kTq) * 4);
  for (int64_t r = 0; r < rows; ++r)
    pack_row<M>(p.q, element(p.q, b, row0 + r, h), p.head_dim, d.units, w.qt + r, kTq);
  if (p.scale < 0) {
    // Scores of -Q against |scale| (exact: a sign flip), so that the block
    // max of the raw scores is the max of the scaled ones.
    const uint32_t sign = M::kPerUnit == 2 ? 0x80008000u : 0x80000000u;
    for (int64_t i = 0; i < d.units * kTq; ++i) w.qt[i] ^= sign;
  }
#pragma GCC unroll 4
  for (int c = 0; c < QV; ++c) {
    _mm512_store_ps(w.max + 16 * c, _mm512_set1_ps(-__builtin_inff()));
    _mm512_store_ps(w.sum + 16 * c, _mm512_setzero_ps());
  }
  std::memset(w.ot, 0, size_t(d.dp * kTq) * 4);
  const TileBias tb{p, w, b, h, row0, rows};
  const bool biased = p.bias != nullptr || p.bias_y != nullptr;
  transpose_bias_parts(p, b, h, row0, rows, w.bias);  // separable only
  for (int64_t key0 = 0; key0 < p.kv_len; key0 += kKb) {
    const int64_t nk = min64(kKb, p.kv_len - key0);
    __m512 m[QV];
    bool rescale;
    if (biased) {
      scores<M, QV>(w, d, key0, nk, nullptr);
      add_bias<QV>(tb, key0, nk, m);
      rescale = softmax_block<M, QV, true>(p, w, nk, m);
    } else {
      scores<M, QV>(w, d, key0, nk, m);
      rescale = softmax_block<M, QV, false>(p, w, nk, m);
    }
    accumulate_pv<M, QV>(w, d, key0, nk, rescale);
  }
  store_rows(p, w, b, h, row0, rows);
}

template <class M>
void run_items(const Problem& p, int64_t begin, int64_t end, void* scratch) {
  const Dims<M> d(p);
  const Workspace w = layout<M>(p, scratch, nullptr);
  const int64_t tiles = ceil_div(p.q_len, kTq);
  int64_t packed = -1;  // (b, h) whose K / V^T are in the workspace
  for (int64_t item = begin; item < end; ++item) {
    const int64_t bh = item / tiles, tile = item % tiles;
    const int64_t b = bh / p.heads, h = bh % p.heads;
    if (bh != packed) {
      pack_kv<M>(p, b, h, d, w);
      packed = bh;
    }
    const int64_t row0 = tile * kTq, rows = min64(kTq, p.q_len - row0);
    switch (ceil_div(rows, 16)) {
      case 1: run_tile<M, 1>(p, w, d, b, h, row0, rows); break;
      case 2: run_tile<M, 2>(p, w, d, b, h, row0, rows); break;
      case 3: run_tile<M, 3>(p, w, d, b, h, row0, rows); break;
      default: run_tile<M, kQv>(p, w, d, b, h, row0, rows); break;
    }
  }
}

size_t narrow_scratch_bytes(const Problem& p) {
  size_t bytes = 0;
  if (p.bf16_inputs)
    layout<Bf16Math>(p, nullptr, &bytes);
  else
    layout<F32Math>(p, nullptr, &bytes);
  return bytes;
}

void narrow_run(const Problem& p, int64_t begin, int64_t end, void* scratch) {
  if (p.bf16_inputs)
    run_items<Bf16Math>(p, begin, end, scratch);
  else
    run_items<F32Math>(p, begin, end, scratch);
}

}  // namespace

const Kernel kAvx512NarrowKernel = {"avx512_narrow", kTq, narrow_scratch_bytes, narrow_run,
                                    narrow_accepts};

}  // namespace flick::cpu::attention_detail
