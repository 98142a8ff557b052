// Flash-style attention for AVX-512 (+BF16): per (batch, head, tile of kRows
// queries), walk the keys in blocks of kCols with an online softmax (running
// max and sum in fp32), O accumulated in fp32.
//
// Both products are one register-tiled micro-kernel over 32-bit "units"
// broadcast from A against 16-lane vectors of B:
//   bf16 inputs: a unit is a bf16 pair along the reduction dim and the
//                multiply-add is vdpbf16ps (two bf16 products, fp32 sum);
//   otherwise:   a unit is one fp32 and the multiply-add is vfmadd231ps.
// S = Q K^T: lanes over keys, units over head_dim; K packed [Lk/16][U][16].
// O += P V:  lanes over head_dim, units over keys;  V packed [Lk/u][Dv], each
//            entry a unit of consecutive keys for one d.
// K and V are packed once per (batch, head) a thread visits, so the inner
// loops stream contiguous, aligned memory.
//
// Error of the bf16 path beyond fp32 accumulation order: P is rounded to bf16
// (relative error <= 2^-9 per weight, as FlashAttention does with half
// inputs) while the normaliser sums the fp32 P, so each output element is off
// by at most 2^-9 * max_j |V[j]| (typically far less: the roundings average).
//
// See attention_kernels.h for why this file avoids inline functions of other
// headers: everything here (and in attention_avx512_common.h, the helpers it
// shares with the other AVX-512 kernel file) is in an anonymous namespace or
// intrinsics.
// GCC 12 reports the intrinsics' deliberately undefined pass-through operand
// (_mm512_undefined_ps) as (maybe-)uninitialized once they are inlined
// (GCC PR105593, fixed in 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "runtime/cpu/attention_avx512_common.h"
#include "runtime/cpu/attention_kernels.h"

namespace flick::cpu::attention_detail {
namespace {

using namespace avx512_attention;  // the shared helpers (attention_avx512_common.h)

// Tile sizes, measured on the real shape (2640 x 5280 x 12 x 128): a tall query
// tile reads each packed K/V block (L3-resident for long windows) for many rows;
// 192 rows ran 10-25 % faster than 48, 384 no faster. Keys per block: 64 for
// fp32 (a K/V block L1-sized; 128 was slower for fp32 on a Sapphire Rapids),
// 128 for bf16 (half the per-block O rescale and softmax bookkeeping; on a
// Zen 4, bf16 2640 x 5280 240-244 -> 228 ms, SAM3's 5184-token self 102 ->
// 95 ms, every other shape of bench_attention as fast or faster; on AMX
// hosts bf16 runs on attention_amx.cpp).
constexpr int64_t kRows = 192;  // queries per tile (a multiple of kRowAlign)
template <class M>
constexpr int64_t kCols = M::kPerUnit == 2 ? 128 : 64;  // keys per block
constexpr int64_t kRowAlign = 12;  // rows are padded to a multiple of every row tile below
constexpr int kQkRows = 6;         // S register tile: 6 rows x up to 4 vectors (24 accumulators)
constexpr float kLog2e = 1.44269504088896340736f;

// Per-thread workspace, carved from the driver's scratch.
struct Workspace {
  uint32_t* k;       // [ceil(Lk/16)][U][16] units
  uint32_t* v;       // [ceil(Lk/kPerUnit)][Dv] units
  uint32_t* q;       // [kRows][U] units
  float* s;          // [kRows][kCols]
  uint32_t* p;       // [kRows][kCols / kPerUnit] units
  float* o;          // [kRows][Dv]
  float* row_max;    // [kRows] running max of the log2-scaled scores
  float* row_sum;    // [kRows][16] running sum of 2^(s - max), lane-wise
  float* alpha;      // [kRows] rescale of O for the current block
  int64_t* key_end;  // [kRows] visible keys of each row
};

template <class M>
struct Dims {
  int64_t units;   // U: head_dim in units (Q.K^T reduction)
  int64_t dv;      // head_dim rounded up to a vector (P.V lanes)
  int64_t kvecs;   // ceil(Lk / 16)
  int64_t vunits;  // ceil(Lk / kPerUnit)
  explicit Dims(const Problem& p)
      : units(ceil_div(p.head_dim, M::kPerUnit)),
        dv(round_up(p.head_dim, 16)),
        kvecs(ceil_div(p.kv_len, 16)),
        vunits(ceil_div(p.kv_len, M::kPerUnit)) {}
};

// The workspace of `rows` rows and `kvecs` 16-key vectors of packed K,
// carved from `scratch`; with scratch == nullptr only *bytes is computed.
// The general kernel packs every key (ceil(Lk / 16) vectors, kRows rows),
// the short-key kernel one vector and kQkRows rows.
template <class M>
Workspace layout(const Problem& p, int64_t rows, int64_t kvecs, void* scratch, size_t* bytes) {
  const Dims<M> d(p);
  const auto r = static_cast<size_t>(rows);
  ScratchLayout sl(scratch);
  Workspace w;
  w.k = reinterpret_cast<uint32_t*>(sl.take(size_t(kvecs * 16 * d.units) * 4));
  w.v = reinterpret_cast<uint32_t*>(sl.take(size_t(d.vunits * d.dv) * 4));
  w.q = reinterpret_cast<uint32_t*>(sl.take(r * size_t(d.units) * 4));
  w.s = reinterpret_cast<float*>(sl.take(r * kCols<M> * 4));
  w.p = reinterpret_cast<uint32_t*>(sl.take(r * (kCols<M> / M::kPerUnit) * 4));
  w.o = reinterpret_cast<float*>(sl.take(r * size_t(d.dv) * 4));
  take_row_state(sl, w, r);
  if (bytes != nullptr) *bytes = sl.used;
  return w;
}

template <class M>
size_t scratch_bytes_for(const Problem& p) {
  size_t bytes = 0;
  layout<M>(p, kRows, Dims<M>(p).kvecs, nullptr, &bytes);
  return bytes;
}

template <class M>
Workspace carve(const Problem& p, void* scratch) {
  return layout<M>(p, kRows, Dims<M>(p).kvecs, scratch, nullptr);
}

// K of (b, h) -> [ceil(Lk/16)][U][16] units (keys past Lk are zero).
template <class M>
void pack_k(const Problem& p, int64_t b, int64_t h, const Dims<M>& d, uint32_t* dst) {
  const int64_t row_bytes = p.head_dim * (p.k.dtype == DType::F32 ? 4 : 2);
  for (int64_t j = 0; j < d.kvecs * 16; ++j) {
    uint32_t* col = dst + (j / 16) * d.units * 16 + j % 16;
    if (j + kPrefetchKeys < p.kv_len)
      prefetch_row(element(p.k, b, j + kPrefetchKeys, h), row_bytes);
    if (j < p.kv_len) {
      pack_row<M>(p.k, element(p.k, b, j, h), p.head_dim, d.units, col, 16);
    } else {
      for (int64_t u = 0; u < d.units; ++u) col[u * 16] = 0;
    }
  }
}

// V of (b, h) -> [ceil(Lk/kPerUnit)][Dv] units; unit (ju, d) holds V[ju*kPerUnit + e, d]
// for e < kPerUnit (zero past Lk and past head_dim).
template <class M>
void pack_v(const Problem& p, int64_t b, int64_t h, const Dims<M>& d, uint32_t* dst) {
  const Operand& v = p.v;
  const int64_t D = p.head_dim;
  if constexpr (M::kPerUnit == 2) {
    if (v.stride[3] == 1) {
      for (int64_t ju = 0; ju < d.vunits; ++ju) {
        const int64_t j = 2 * ju;
        const auto* r0 = reinterpret_cast<const uint16_t*>(element(v, b, j, h));
        const auto* r1 =
            j + 1 < p.kv_len ? reinterpret_cast<const uint16_t*>(element(v, b, j + 1, h)) : nullptr;
        interleave_bf16(r0, r1, D, dst + ju * d.dv);
      }
      return;
    }
  }
  std::memset(dst, 0, size_t(d.vunits * d.dv) * 4);
  for (int64_t j = 0; j < p.kv_len; ++j) {
    const char* row = element(v, b, j, h);
    uint32_t* out = dst + (j / M::kPerUnit) * d.dv;
    if constexpr (M::kPerUnit == 2) {
      const int shift = static_cast<int>(j % 2) * 16;
      for (int64_t e = 0; e < D; ++e) out[e] |= load_bf16(row, e * v.stride[3]) << shift;
    } else if (v.dtype == DType::F32 && v.stride[3] == 1) {
      std::memcpy(out, row, size_t(D) * 4);
    } else {
      for (int64_t e = 0; e < D; ++e) out[e] = f32_bits(load_f32(v.dtype, row, e * v.stride[3]));
    }
  }
}

// S[rows][0, 16*nvec) = Q K^T over key vectors [kvec0, kvec0 + nvec), in
// register tiles of kQkRows rows x up to 4 key vectors.
template <class M>
void scores(const Workspace& w, const Dims<M>& d, int64_t rows, int64_t kvec0, int64_t nvec) {
  for (int64_t vec = 0; vec < nvec; vec += 4) {
    const uint32_t* kb = w.k + (kvec0 + vec) * d.units * 16;
    const int64_t n = min64(4, nvec - vec);
    for (int64_t r = 0; r < rows; r += kQkRows) {
      const uint32_t* a = w.q + r * d.units;
      float* c = w.s + r * kCols<M> + vec * 16;
      const int64_t ldk = d.units * 16;
      switch (n) {
        case 1:
          tile_gemm<M, kQkRows, 1>(a, d.units, kb, 16, ldk, d.units, c, kCols<M>, nullptr);
          break;
        case 2:
          tile_gemm<M, kQkRows, 2>(a, d.units, kb, 16, ldk, d.units, c, kCols<M>, nullptr);
          break;
        case 3:
          tile_gemm<M, kQkRows, 3>(a, d.units, kb, 16, ldk, d.units, c, kCols<M>, nullptr);
          break;
        default:
          tile_gemm<M, kQkRows, 4>(a, d.units, kb, 16, ldk, d.units, c, kCols<M>, nullptr);
          break;
      }
    }
  }
}

// O[rows][lanes of c vectors starting at vec0] = O * alpha + P V over `units` key units.
template <class M, int R, int C>
void pv_chunk(const Workspace& w, const Dims<M>& d, int64_t rows, const uint32_t* vb, int64_t units,
              int64_t vec0) {
  constexpr int64_t ldp = kCols<M> / M::kPerUnit;
  for (int64_t r = 0; r < rows; r += R)
    tile_gemm<M, R, C>(w.p + r * ldp, ldp, vb + vec0 * 16, d.dv, 16, units,
                       w.o + r * d.dv + vec0 * 16, d.dv, w.alpha + r);
}

template <class M>
void accumulate_pv(const Workspace& w, const Dims<M>& d, int64_t rows, int64_t key0,
                   int64_t nkeys) {
  const uint32_t* vb = w.v + (key0 / M::kPerUnit) * d.dv;
  const int64_t units = ceil_div(nkeys, M::kPerUnit);
  const int64_t nvec = d.dv / 16;
  int64_t vec = 0;
  // Chunks of 4 vectors keep a 16 KB slice of the V block in L1 across all row groups.
  for (; vec + 4 <= nvec; vec += 4) pv_chunk<M, 6, 4>(w, d, rows, vb, units, vec);
  if (vec + 2 <= nvec) pv_chunk<M, 12, 2>(w, d, rows, vb, units, vec), vec += 2;
  if (vec < nvec) pv_chunk<M, 12, 1>(w, d, rows, vb, units, vec);
}

// Online-softmax step of one row over one key block of NV vectors: turns the
// row of S into P (as units), updates the running max and (lane-wise) sum, and
// sets alpha, the factor the row of O must be rescaled by. kMasked: some lanes
// are masked (by causality, key padding or the end of the keys); valid[c] says
// which. NV is a template argument so that the vectors stay in registers.
template <class M, bool kMasked, int NV>
void softmax_row(const Problem& p, const Workspace& w, int64_t r, const RowBias& bias_row,
                 int64_t key0, const __mmask16* valid) {
  const __m512 neg_inf = _mm512_set1_ps(-__builtin_inff());
  const __m512 score_scale = _mm512_set1_ps(p.scale * kLog2e);
  __m512 t[NV];
  __m512 vmax = neg_inf;
  GridPos at = bias_row.y ? grid_pos(key0, p.grid_w) : GridPos{0, 0};  // the separable bias's
#pragma GCC unroll 8
  for (int c = 0; c < NV; ++c) {
    __m512 x = _mm512_mul_ps(_mm512_load_ps(w.s + r * kCols<M> + 16 * c), score_scale);
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
  // While nothing is visible the max is -inf; shifting by 0 keeps 2^(-inf) = 0.
  const __m512 shift = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(new_max, neg_inf, _CMP_EQ_OQ),
                                            new_max, _mm512_setzero_ps());
  const __m512 alpha = rescale_alpha(old_max, new_max, shift);
  __m512 sum = _mm512_setzero_ps();
  uint32_t* prow = w.p + r * (kCols<M> / M::kPerUnit);
  // Unmasked and without a bias, every score is finite (unless Q.K^T
  // overflows fp32), and so is the shift: no clamp needed (1 of the ~12
  // operations per vector).
  const bool finite = !kMasked && !bias_row;
#pragma GCC unroll 8
  for (int c = 0; c < NV; ++c) {
    const __m512 x = _mm512_sub_ps(t[c], shift);
    __m512 pc;
    if constexpr (M::kPerUnit == 2)
      pc = finite ? exp2_neg_bf16<true>(x) : exp2_neg_bf16(x);
    else
      pc = finite ? exp2_neg<true>(x) : exp2_neg(x);
    if (kMasked) pc = _mm512_maskz_mov_ps(valid[c], pc);
    sum = _mm512_add_ps(sum, pc);
    t[c] = pc;
  }
  if constexpr (M::kPerUnit == 2) {
#pragma GCC unroll 8
    for (int c = 0; c < NV; c += 2) {
      const __m512 hi = c + 1 < NV ? t[c + 1] : _mm512_setzero_ps();
      _mm512_store_si512(prow + 8 * c, (__m512i)_mm512_cvtne2ps_pbh(hi, t[c]));
    }
  } else {
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) _mm512_store_ps(reinterpret_cast<float*>(prow) + 16 * c, t[c]);
  }
  w.alpha[r] = _mm512_cvtss_f32(alpha);
  w.row_max[r] = _mm512_cvtss_f32(new_max);
  float* row_sum = w.row_sum + 16 * r;
  _mm512_store_ps(row_sum, _mm512_fmadd_ps(_mm512_load_ps(row_sum), alpha, sum));
}

// softmax_row over nvec (1 .. kCols / 16) key vectors: the NV = nvec
// instance, sought from the block's full width down.
template <class M, bool kMasked, int NV = kCols<M> / 16>
void softmax_row_n(const Problem& p, const Workspace& w, int64_t r, const RowBias& bias_row,
                   int64_t key0, int64_t nvec, const __mmask16* valid) {
  if constexpr (NV > 1) {
    if (nvec < NV) return softmax_row_n<M, kMasked, NV - 1>(p, w, r, bias_row, key0, nvec, valid);
  }
  softmax_row<M, kMasked, NV>(p, w, r, bias_row, key0, valid);
}

// The online-softmax step of every row of the tile over keys [key0, key0 + 16 * nvec).
template <class M>
void softmax_block(const Problem& p, const Workspace& w, int64_t b, int64_t h, int64_t row0,
                   int64_t rows, int64_t key0, int64_t nvec) {
  __mmask16 padding[kCols<M> / 16];
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
    if (visible <= 0) {  // the block lies past the row's causal end
      std::memset(w.p + r * (kCols<M> / M::kPerUnit), 0, size_t(nvec * 16 / M::kPerUnit) * 4);
      w.alpha[r] = 1.f;
      continue;
    }
    const RowBias bias_row = row_bias(p, b, h, row0 + r);
    if (!any_padded && w.key_end[r] >= block_end) {
      softmax_row_n<M, false>(p, w, r, bias_row, key0, nvec, nullptr);
    } else {
      __mmask16 valid[kCols<M> / 16];
      for (int64_t c = 0; c < nvec; ++c) valid[c] = first_lanes(visible - 16 * c) & padding[c];
      softmax_row_n<M, true>(p, w, r, bias_row, key0, nvec, valid);
    }
  }
}

// out[b, row0 + r, h, :] = O[r] / sum (zero for fully masked rows). BF16 stores
// use vcvtneps2bf16: round to nearest even like c10, except that it flushes
// denormals (|x| < 2^-126) to zero and keeps NaN payloads.
template <class M>
void store_rows(const Problem& p, const Workspace& w, const Dims<M>& d, int64_t b, int64_t h,
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

template <class M>
void run_tile(const Problem& p, const Workspace& w, const Dims<M>& d, int64_t b, int64_t h,
              int64_t row0) {
  const int64_t rows = min64(kRows, p.q_len - row0);
  const int64_t padded_rows = round_up(rows, kRowAlign);
  // Q rows as units; padding rows are zero (their P rows stay zero too).
  for (int64_t r = 0; r < padded_rows; ++r) {
    uint32_t* dst = w.q + r * d.units;
    if (r >= rows) {
      std::memset(dst, 0, size_t(d.units) * 4);
      std::memset(w.p + r * (kCols<M> / M::kPerUnit), 0, size_t(kCols<M> / M::kPerUnit) * 4);
      w.alpha[r] = 1.f;
      continue;
    }
    pack_row<M>(p.q, element(p.q, b, row0 + r, h), p.head_dim, d.units, dst, 1);
  }
  int64_t tile_key_end = 0;
  for (int64_t r = 0; r < rows; ++r) {
    w.key_end[r] = attention_key_end(p, row0 + r);
    tile_key_end = max64(tile_key_end, w.key_end[r]);
    w.row_max[r] = -__builtin_inff();
    _mm512_store_ps(w.row_sum + 16 * r, _mm512_setzero_ps());
  }
  std::memset(w.o, 0, size_t(padded_rows * d.dv) * 4);

  for (int64_t key0 = 0; key0 < tile_key_end; key0 += kCols<M>) {
    const int64_t nkeys = min64(kCols<M>, tile_key_end - key0);
    const int64_t nvec = ceil_div(nkeys, 16);
    scores<M>(w, d, padded_rows, key0 / 16, nvec);
    softmax_block<M>(p, w, b, h, row0, rows, key0, nvec);
    accumulate_pv<M>(w, d, padded_rows, key0, nkeys);
  }
  store_rows<M>(p, w, d, b, h, row0, rows);
}

template <class M>
void run_items(const Problem& p, int64_t begin, int64_t end, void* scratch) {
  const Dims<M> d(p);
  const Workspace w = carve<M>(p, scratch);
  const int64_t tiles = ceil_div(p.q_len, kRows);
  int64_t packed = -1;  // (b, h) whose K/V are in the workspace
  for (int64_t item = begin; item < end; ++item) {
    const int64_t bh = item / tiles;
    const int64_t tile = balanced_tile(item % tiles, tiles);
    const int64_t b = bh / p.heads, h = bh % p.heads;
    if (bh != packed) {
      pack_k<M>(p, b, h, d, w.k);
      pack_v<M>(p, b, h, d, w.v);
      packed = bh;
    }
    run_tile<M>(p, w, d, b, h, tile * kRows);
  }
}

// ---- short key sequences (Lk <= 16: one key vector, one softmax block) ----
//
// The action module's attentions (mouse: 880 x 16 problems of 3 queries x 6
// keys; keyboard: 2640 queries x 6 keys) spend most of the general kernel's
// time on per-tile setup: K packed into 4 key vectors, rows padded to 12, O
// cleared, Q copied. Here a work item is (batch, head, tile of kShortRows
// queries) and groups of up to kQkRows rows go straight from Q to the output:
// S = Q K^T in one register tile (Q read in place when its rows are bf16
// pairs), the softmax over the single key block, O = P V in registers. The
// arithmetic is the general kernel's for one key block, in the same order, so
// the results are the same bit for bit.
constexpr int64_t kShortRows = 48;  // queries per work item (keyboard: 55 x 16 items)

bool short_accepts(const Problem& p) { return p.kv_len <= kShortKeys; }

// K [U][16], then the general workspace's arrays for kQkRows rows.
template <class M>
size_t short_scratch_bytes_for(const Problem& p) {
  size_t bytes = 0;
  layout<M>(p, kQkRows, 1, nullptr, &bytes);
  return bytes;
}

template <class M>
Workspace short_carve(const Problem& p, void* scratch) {
  return layout<M>(p, kQkRows, 1, scratch, nullptr);
}

// K of (b, h) -> [U][16] units: the Lk keys, zeros in the other lanes.
template <class M>
void short_pack_k(const Problem& p, int64_t b, int64_t h, const Dims<M>& d, uint32_t* dst) {
  for (int64_t u = 0; u < d.units; ++u) _mm512_store_si512(dst + u * 16, _mm512_setzero_si512());
  for (int64_t j = 0; j < p.kv_len; ++j)
    pack_row<M>(p.k, element(p.k, b, j, h), p.head_dim, d.units, dst + j, 16);
}

// Rows [row0, row0 + R) of (b, h): scores, softmax, P V and the store.
template <class M, int R>
void short_rows(const Problem& p, const Workspace& w, const Dims<M>& d, int64_t b, int64_t h,
                int64_t row0) {
  // Q as units: in place for contiguous bf16 pairs, else packed.
  const uint32_t* a = w.q;
  int64_t lda = d.units;
  const Operand& q = p.q;
  if (M::kPerUnit == 2 && q.stride[3] == 1 && p.head_dim % 2 == 0 && q.stride[1] % 2 == 0 &&
      (reinterpret_cast<uintptr_t>(q.data) & 3) == 0 && (q.stride[0] | q.stride[2]) % 2 == 0) {
    a = reinterpret_cast<const uint32_t*>(element(q, b, row0, h));
    lda = q.stride[1] / 2;
  } else {
    for (int r = 0; r < R; ++r)
      pack_row<M>(q, element(q, b, row0 + r, h), p.head_dim, d.units, w.q + r * d.units, 1);
  }
  tile_gemm<M, R, 1>(a, lda, w.k, 16, 16, d.units, w.s, kCols<M>, nullptr);
  for (int r = 0; r < R; ++r) {
    w.key_end[r] = attention_key_end(p, row0 + r);
    w.row_max[r] = -__builtin_inff();
    _mm512_store_ps(w.row_sum + 16 * r, _mm512_setzero_ps());
  }
  // The softmax reads the rows' bias at row0 + r; with one key block alpha
  // multiplies nothing (O starts at zero), so P V overwrites O.
  softmax_block<M>(p, w, b, h, row0, R, 0, 1);
  constexpr int64_t ldp = kCols<M> / M::kPerUnit;
  const int64_t units = ceil_div(p.kv_len, M::kPerUnit);
  const int64_t nvec = d.dv / 16;
  for (int64_t vec = 0; vec < nvec; vec += 4) {
    float* o = w.o + vec * 16;
    const uint32_t* vb = w.v + vec * 16;
    switch (min64(4, nvec - vec)) {
      case 1: tile_gemm<M, R, 1>(w.p, ldp, vb, d.dv, 16, units, o, d.dv, nullptr); break;
      case 2: tile_gemm<M, R, 2>(w.p, ldp, vb, d.dv, 16, units, o, d.dv, nullptr); break;
      case 3: tile_gemm<M, R, 3>(w.p, ldp, vb, d.dv, 16, units, o, d.dv, nullptr); break;
      default: tile_gemm<M, R, 4>(w.p, ldp, vb, d.dv, 16, units, o, d.dv, nullptr); break;
    }
  }
  store_rows<M>(p, w, d, b, h, row0, R);
}

template <class M>
void short_run_items(const Problem& p, int64_t begin, int64_t end, void* scratch) {
  const Dims<M> d(p);
  const Workspace w = short_carve<M>(p, scratch);
  const int64_t tiles = ceil_div(p.q_len, kShortRows);
  int64_t packed = -1;  // (b, h) whose K/V are in the workspace
  for (int64_t item = begin; item < end; ++item) {
    const int64_t bh = item / tiles, tile = item % tiles;
    const int64_t b = bh / p.heads, h = bh % p.heads;
    if (bh != packed) {
      short_pack_k<M>(p, b, h, d, w.k);
      pack_v<M>(p, b, h, d, w.v);
      packed = bh;
    }
    const int64_t row_end = min64(p.q_len, (tile + 1) * kShortRows);
    int64_t row = tile * kShortRows;
    for (; row + kQkRows <= row_end; row += kQkRows) short_rows<M, kQkRows>(p, w, d, b, h, row);
    static_assert(kQkRows == 6, "the tail dispatch below covers 1 to 5 rows");
    switch (row_end - row) {
      case 1: short_rows<M, 1>(p, w, d, b, h, row); break;
      case 2: short_rows<M, 2>(p, w, d, b, h, row); break;
      case 3: short_rows<M, 3>(p, w, d, b, h, row); break;
      case 4: short_rows<M, 4>(p, w, d, b, h, row); break;
      case 5: short_rows<M, 5>(p, w, d, b, h, row); break;
      default: break;
    }
  }
}

size_t short_scratch_bytes(const Problem& p) {
  return p.bf16_inputs ? short_scratch_bytes_for<Bf16Math>(p) : short_scratch_bytes_for<F32Math>(p);
}

void short_run(const Problem& p, int64_t begin, int64_t end, void* scratch) {
  if (p.bf16_inputs)
    short_run_items<Bf16Math>(p, begin, end, scratch);
  else
    short_run_items<F32Math>(p, begin, end, scratch);
}

size_t avx512_scratch_bytes(const Problem& p) {
  return p.bf16_inputs ? scratch_bytes_for<Bf16Math>(p) : scratch_bytes_for<F32Math>(p);
}

void avx512_run(const Problem& p, int64_t begin, int64_t end, void* scratch) {
  if (p.bf16_inputs)
    run_items<Bf16Math>(p, begin, end, scratch);
  else
    run_items<F32Math>(p, begin, end, scratch);
}

}  // namespace

const Kernel kAvx512Kernel = {"avx512", kRows, avx512_scratch_bytes, avx512_run, nullptr};
const Kernel kAvx512ShortKernel = {"avx512_short", kShortRows, short_scratch_bytes, short_run,
                                   short_accepts};

}  // namespace flick::cpu::attention_detail
