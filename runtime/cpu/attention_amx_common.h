// Pieces of the flash-attention kernels on the AMX tile unit, for
// translation units built with AMX flags (*_amx.cpp) only: the queue that
// interleaves tile products with the AVX-512 softmax, vector helpers, the
// online-softmax state and output stores of the transposed-score layout, the
// schedule and the tile chunks of its phases. Shared by attention_amx.cpp
// (BF16: tdpbf16ps only) and attention_int8_amx.cpp (tdpbssd for Q.K^T,
// tdpbf16ps for P.V).
//
// Everything is in an anonymous namespace: each including file gets its own
// copy, as attention_kernels.h asks of shared helpers (no inline function
// whose AVX-512 / AMX body the linker could pick for other code).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "runtime/cpu/amx_tiles.h"
#include "runtime/cpu/attention_avx512_common.h"
#include "runtime/cpu/attention_kernels.h"

namespace flick::cpu::amx {
namespace {

// ---- the schedule's sizes ----

constexpr int64_t kRows = 128;       // queries per work item (a multiple of kPair)
constexpr int64_t kBlock = 512;      // keys per block (a multiple of kPair)
constexpr int64_t kPair = 32;        // queries per pair of groups; keys per P.V k-step
constexpr int64_t kGroup = 16;       // queries per group: the lanes of a vector
constexpr int64_t kTileElems = 512;  // bf16 elements of a 16 x 64-byte tile
constexpr int64_t kMaxHeadDim = 512;
constexpr float kLog2e = 1.44269504088896340736f;
constexpr int kLazyBits = 8;
constexpr float kLazyLog2 = kLazyBits;  // see attention_amx.cpp's Numerics
// A block's weight sum per query when none exceeds 2^kLazyLog2, at most.
constexpr float kLazySum = float(kBlock << kLazyBits);
// Tile chunks of one pipeline iteration, at most: Q.K^T's key-tile pairs of
// a block and P.V's head_dim-tile pairs.
constexpr int kMaxChunks = kBlock / kPair + kMaxHeadDim / kPair;

// ---- tiles ----

// All eight tiles 16 x 64 bytes (configure_full_tiles): C tiles 0-3, A tiles
// 4-5, B tiles 6-7. A 2 x 2 block of C tiles accumulated over `steps`
// k-steps:
//   C[2a + b] (+)= A[a] . B[b]   (a: A tile, b: B tile)
// with A[a] at a[a] + s * a_step and B[b] at b[b] + s * b_step on step s
// (byte strides; every tile is 1 KB contiguous, rows 64 bytes apart). A half
// chunk (a[1] == nullptr) has C[0] and C[1] only. load_c: accumulate onto C in
// memory; otherwise start from zero. int8: tdpbssd (s8 x s8 -> s32), else
// tdpbf16ps (bf16 x bf16 -> fp32); read only by a TileQueue<., true>.
struct Chunk {
  void* c[4];
  const char* a[2];
  const char* b[2];
  int64_t a_step, b_step;
  int64_t steps;
  bool load_c;
  bool int8 = false;
};

// The tile work of one pipeline iteration (at most kMaxChunks chunks),
// executed half a k-step at a time so that the softmax can be interleaved
// between the pieces. kInt8: chunks may be int8 (Chunk::int8 is checked per
// half step); otherwise every chunk is tdpbf16ps and the check compiles away.
template <int kMaxChunks, bool kInt8 = false>
class TileQueue {
 public:
  void clear() { n_ = cur_ = step_ = half_ = total_ = 0; }
  void push(const Chunk& c) {
    chunks_[n_++] = c;
    total_ += c.a[1] ? 2 * c.steps : c.steps;
  }
  // The half k-steps queued since clear(); the caller that spreads them
  // between pieces of its own work calls issue() exactly that many times
  // (then or through finish()).
  int64_t half_steps() const { return total_; }
  void issue() { half_step(); }
  void finish() {
    while (cur_ < n_) half_step();
  }

 private:
  // Half a k-step: A row 0 against both B tiles, or A row 1 against both.
  // C tiles are stored as soon as their last product is issued.
  void half_step() {
    const Chunk& k = chunks_[cur_];
    const bool full = k.a[1] != nullptr;
    const bool last = step_ + 1 == k.steps;
    if (half_ == 0) {
      if (step_ == 0) {
        if (k.load_c) {
          _tile_loadd(0, k.c[0], 64);
          _tile_loadd(1, k.c[1], 64);
          if (full) {
            _tile_loadd(2, k.c[2], 64);
            _tile_loadd(3, k.c[3], 64);
          }
        } else {
          _tile_zero(0);
          _tile_zero(1);
          _tile_zero(2);
          _tile_zero(3);
        }
      }
      _tile_loadd(4, k.a[0] + step_ * k.a_step, 64);
      _tile_loadd(6, k.b[0] + step_ * k.b_step, 64);
      _tile_loadd(7, k.b[1] + step_ * k.b_step, 64);
      if (kInt8 && k.int8) {
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
      } else {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
      }
      if (last) {
        _tile_stored(0, k.c[0], 64);
        _tile_stored(1, k.c[1], 64);
      }
      if (full) {
        half_ = 1;
        return;
      }
    } else {
      _tile_loadd(5, k.a[1] + step_ * k.a_step, 64);
      if (kInt8 && k.int8) {
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
      } else {
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      if (last) {
        _tile_stored(2, k.c[2], 64);
        _tile_stored(3, k.c[3], 64);
      }
      half_ = 0;
    }
    if (!last) {
      ++step_;
      return;
    }
    step_ = 0;
    ++cur_;
  }

  Chunk chunks_[kMaxChunks];
  int n_ = 0, cur_ = 0;
  int64_t step_ = 0, total_ = 0;
  int half_ = 0;
};

// ---- vector helpers ----

using avx512_attention::bias_parts;
using avx512_attention::transpose16;
using avx512_attention::transpose_bias_parts;

// 2^x for finite x: attention_avx512_common.h's degree-4 polynomial
// (relative error 2.7e-6) without its clamp.
inline __m512 exp2_poly(__m512 x) { return avx512_attention::exp2_neg_bf16<true>(x); }

inline __mmask32 first_words(int64_t n) {
  return n >= 32 ? ~__mmask32(0) : n <= 0 ? __mmask32(0) : (__mmask32(1) << n) - 1;
}
inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// ---- softmax state and output of the transposed-score kernels ----
// Queries in groups of 16 (the lanes of a vector); per group one vector each
// of running max (log2 units), sum and rescale factor alpha, and O^T as
// [dtiles] tiles of 16 head_dim x 16 queries (fp32).

// Lanes of key j that the queries of a group (visible keys [0, key_end[lane]))
// may see, key padding of batch b applied.
inline __mmask16 visible_lanes(const attention_detail::Problem& p, int64_t b,
                               const int32_t* key_end, int64_t j) {
  if (p.key_padding &&
      p.key_padding[b * p.key_padding_stride[0] + j * p.key_padding_stride[1]] == 0)
    return 0;
  return _mm512_cmplt_epi32_mask(_mm512_set1_epi32(static_cast<int32_t>(j)),
                                 _mm512_load_si512(key_end));
}

// bias[b, h, q0 + lane, j] * log2(e) for the lanes in m (others 0).
inline __m512 bias_lanes(const attention_detail::Problem& p, int64_t b, int64_t h, int64_t q0,
                         int64_t j, __mmask16 m) {
  const float* base = p.bias + b * p.bias_stride[0] + h * p.bias_stride[1] + q0 * p.bias_stride[2] +
                      j * p.bias_stride[3];
  const __m512i idx_lo = _mm512_mullo_epi64(_mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi64(p.bias_stride[2]));
  const __m512i idx_hi = _mm512_add_epi64(idx_lo, _mm512_set1_epi64(8 * p.bias_stride[2]));
  const __m256 lo = _mm512_mask_i64gather_ps(_mm256_setzero_ps(), __mmask8(m), idx_lo, base, 4);
  const __m256 hi =
      _mm512_mask_i64gather_ps(_mm256_setzero_ps(), __mmask8(m >> 8), idx_hi, base, 4);
  const __m512 v = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
  return _mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896340736f));
}

// bias[b, h, q0 + lane, j0 + e] * log2(e) as out[e] for the 16 keys from j0.
// A separable bias: the sum of the group's transposed parts (parts:
// transpose_bias_parts) rows y and grid_h + x of each key, rounded once as a
// materialised bias is. A full one: 16 query rows of 16 contiguous keys,
// transposed, instead of two gathers per key (bias_lanes); it needs
// bias_stride[3] == 1. Lanes outside `real` and keys past Lk are 0.
inline void bias_tile(const attention_detail::Problem& p, int64_t b, int64_t h, int64_t q0,
                      int64_t j0, __mmask16 real, const float* parts, __m512 out[16]) {
  const __mmask16 keys = first_lanes(p.kv_len - j0);
  const __m512 log2e = _mm512_set1_ps(1.44269504088896340736f);
  if (p.bias_y) {
    avx512_attention::GridPos at = avx512_attention::grid_pos(j0, p.grid_w);
    for (int e = 0; e < 16; ++e) {
      out[e] = _mm512_setzero_ps();
      if (!(keys >> e & 1)) continue;
      const __m512 sum = _mm512_add_ps(_mm512_load_ps(parts + at.y * 16),
                                       _mm512_load_ps(parts + (p.grid_h + at.x) * 16));
      out[e] = _mm512_mul_ps(sum, log2e);
      avx512_attention::advance1(at, p.grid_w);
    }
    return;
  }
  __m512i rows[16];
  for (int n = 0; n < 16; ++n) {
    rows[n] = _mm512_setzero_si512();
    if (!(real >> n & 1)) continue;
    const attention_detail::RowBias r = attention_detail::row_bias(p, b, h, q0 + n);
    rows[n] = _mm512_castps_si512(_mm512_maskz_loadu_ps(keys, r.full + j0));
  }
  transpose16(rows);
  for (int e = 0; e < 16; ++e) out[e] = _mm512_mul_ps(_mm512_castsi512_ps(rows[e]), log2e);
}

// Folds a block's max per query into a group's running max, raised only
// where the block exceeds it by more than lazy_log2; sets alpha (2^(old -
// new): 1 where kept, 0 where the old max was -inf), rescales the sum, flags
// O^T for rescaling where a finite max was raised, and returns the shift the
// block's weights are taken against (0 while a query sees nothing).
inline __m512 update_max(float* max, float* sum, float* alpha, uint8_t* rescale, __m512 bmax,
                         float lazy_log2) {
  const __m512 neg_inf = _mm512_set1_ps(-__builtin_inff());
  const __m512 old_max = _mm512_load_ps(max);
  const __mmask16 raise =
      _mm512_cmp_ps_mask(bmax, _mm512_add_ps(old_max, _mm512_set1_ps(lazy_log2)), _CMP_GT_OQ);
  const __m512 new_max = _mm512_mask_blend_ps(raise, old_max, bmax);
  const __m512 a = _mm512_mask_blend_ps(
      raise, _mm512_set1_ps(1.f),
      exp2_poly(_mm512_max_ps(_mm512_sub_ps(old_max, new_max), _mm512_set1_ps(-200.f))));
  _mm512_store_ps(max, new_max);
  _mm512_store_ps(alpha, a);
  _mm512_store_ps(sum, _mm512_mul_ps(_mm512_load_ps(sum), a));
  *rescale |= (raise & _mm512_cmp_ps_mask(old_max, neg_inf, _CMP_NEQ_OQ)) != 0;
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(new_max, neg_inf, _CMP_EQ_OQ), new_max,
                              _mm512_setzero_ps());
}

// The lanes of y (head_dim 16 dt + lane of one query) into out at dst.
inline void store_lanes(const attention_detail::Problem& p, char* dst, __m512 y, __mmask16 lanes) {
  const int64_t stride = p.out_stride[3];
  if (stride == 1) {
    if (p.out_dtype == DType::F32)
      _mm512_mask_storeu_ps(dst, lanes, y);
    else
      _mm256_mask_storeu_epi16(dst, lanes, (__m256i)_mm512_cvtneps_pbh(y));
    return;
  }
  alignas(64) float f[16];
  alignas(32) uint16_t bf[16];
  _mm512_store_ps(f, y);
  _mm256_store_si256(reinterpret_cast<__m256i*>(bf), (__m256i)_mm512_cvtneps_pbh(y));
  for (int l = 0; l < 16; ++l) {
    if (!(lanes >> l & 1)) break;
    if (p.out_dtype == DType::F32)
      reinterpret_cast<float*>(dst)[l * stride] = f[l];
    else
      reinterpret_cast<uint16_t*>(dst)[l * stride] = bf[l];
  }
}

// out[b, row0 + q, h, :] = O^T[:, q] / sum[q] for the first `rows` queries
// (zero where nothing was visible). BF16 stores use vcvtneps2bf16 (round to
// nearest even; flushes denormals to zero).
inline void store_output(const attention_detail::Problem& p, const float* o, const float* sum,
                         int64_t dtiles, int64_t b, int64_t h, int64_t row0, int64_t rows) {
  const int64_t esize = p.out_dtype == DType::F32 ? 4 : 2;
  for (int64_t g = 0; g * 16 < rows; ++g) {
    const __m512 s = _mm512_load_ps(sum + g * 16);
    alignas(64) float inv[16];
    _mm512_store_ps(inv, _mm512_maskz_div_ps(_mm512_cmp_ps_mask(s, _mm512_setzero_ps(), _CMP_GT_OQ),
                                             _mm512_set1_ps(1.f), s));
    const int64_t n_rows = rows - g * 16 < 16 ? rows - g * 16 : 16;
    for (int64_t dt = 0; dt < dtiles; ++dt) {
      __m512i r[16];
      const float* tile = o + (g * dtiles + dt) * 256;
      for (int m = 0; m < 16; ++m) r[m] = _mm512_load_si512(tile + m * 16);
      transpose16(r);
      const __mmask16 lanes = first_lanes(p.head_dim - 16 * dt);
      for (int64_t n = 0; n < n_rows; ++n) {
        const __m512 y = _mm512_mul_ps(_mm512_castsi512_ps(r[n]), _mm512_set1_ps(inv[n]));
        char* dst = static_cast<char*>(p.out) +
                    (b * p.out_stride[0] + (row0 + g * 16 + n) * p.out_stride[1] +
                     h * p.out_stride[2] + 16 * dt * p.out_stride[3]) *
                        esize;
        store_lanes(p, dst, y, lanes);
      }
    }
  }
}

// ---- the schedule ----

// One step of the schedule: keys [key0, key0 + nkeys) for the queries of
// pair `pair` (two groups; computed up to a multiple of 32 keys, the keys
// past nkeys weigh 0); masked: some query of the pair cannot see some of
// those keys, or there is a bias.
struct Step {
  int32_t key0, nkeys, pair;
  bool masked;
};

// A work item's per-group state (one 16-lane vector per group each) and O^T.
struct GroupState {
  int32_t* key_end;  // visible keys [0, key_end) of each query
  float* max;        // running max (log2 units)
  float* sum;        // running sum of the weights
  uint8_t* rescale;  // whether O^T must be rescaled by alpha before the next P.V
  float* o;          // O^T: [group][dtiles] tiles of 16 head_dim x 16 queries
  int64_t dtiles;
};

// The workspace's per-item buffers, taken in this order after the kernel's
// own: S^T and P^T of two steps, O^T, the group state and the schedule of
// `blocks` key blocks.
template <class Workspace>
void take_step_buffers(attention_detail::ScratchLayout& sl, Workspace& w, int64_t dtiles,
                       int64_t blocks, const attention_detail::Problem& p) {
  const size_t groups = kRows / kGroup;
  for (auto& s : w.s) s = reinterpret_cast<float*>(sl.take(kBlock * kPair * 4));
  for (auto& p_buf : w.p) p_buf = reinterpret_cast<uint16_t*>(sl.take(kBlock * kPair * 2));
  w.o = reinterpret_cast<float*>(sl.take(size_t(kRows * dtiles * 16) * 4));
  w.max = reinterpret_cast<float*>(sl.take(groups * 64));
  w.sum = reinterpret_cast<float*>(sl.take(groups * 64));
  w.alpha = reinterpret_cast<float*>(sl.take(groups * 64));
  w.key_end = reinterpret_cast<int32_t*>(sl.take(groups * 64));
  w.rescale = reinterpret_cast<uint8_t*>(sl.take(groups));
  w.steps = reinterpret_cast<Step*>(sl.take(size_t(blocks * (kRows / kPair)) * sizeof(Step)));
  w.bias_t = reinterpret_cast<float*>(sl.take(size_t(groups * bias_parts(p) * 16) * 4));
}

// Resets the state of queries [row0, row0 + rows) of (b, .) and writes their
// schedule: per block of `block` keys, one step per pair of 16-query groups
// that sees any key of it. Padding queries copy the last real one, so they
// never widen the schedule. Reverse (odd work items) walks the blocks
// backwards, starting on the ones the previous item left in L2. Returns the
// number of steps.
inline int64_t plan_steps(const attention_detail::Problem& p, int64_t b, int64_t row0, int64_t rows,
                          int64_t block, bool reverse, const GroupState& st, Step* steps) {
  const __m512 neg_inf = _mm512_set1_ps(-__builtin_inff());
  const int64_t pairs = (rows + 31) / 32;
  for (int64_t g = 0; g < 2 * pairs; ++g) {
    int32_t* ke = st.key_end + g * 16;
    for (int64_t n = 0; n < 16; ++n) {
      const int64_t i = row0 + (g * 16 + n < rows - 1 ? g * 16 + n : rows - 1);
      ke[n] = static_cast<int32_t>(attention_detail::attention_key_end(p, i));
    }
    _mm512_store_ps(st.max + g * 16, neg_inf);
    _mm512_store_ps(st.sum + g * 16, _mm512_setzero_ps());
    st.rescale[g] = 0;
  }
  for (int64_t e = 0; e < 2 * pairs * st.dtiles * 256; e += 16)
    _mm512_store_ps(st.o + e, _mm512_setzero_ps());
  int64_t n = 0;
  const int64_t blocks = (p.kv_len + block - 1) / block;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t key0 = (reverse ? blocks - 1 - blk : blk) * block;
    const int64_t key_stop = key0 + block < p.kv_len ? key0 + block : p.kv_len;
    bool padded = false;
    if (p.key_padding) {
      const uint8_t* pad = p.key_padding + b * p.key_padding_stride[0];
      for (int64_t j = key0; j < key_stop && !padded; ++j)
        padded = pad[j * p.key_padding_stride[1]] == 0;
    }
    for (int64_t pr = 0; pr < pairs; ++pr) {
      const __m512i ka = _mm512_load_si512(st.key_end + 2 * pr * 16);
      const __m512i kb = _mm512_load_si512(st.key_end + (2 * pr + 1) * 16);
      const int64_t pair_min = _mm512_reduce_min_epi32(_mm512_min_epi32(ka, kb));
      const int64_t pair_max = _mm512_reduce_max_epi32(_mm512_max_epi32(ka, kb));
      if (pair_max <= key0) continue;
      const int64_t nkeys = pair_max - key0 < block ? pair_max - key0 : block;
      Step& s = steps[n++];
      s.key0 = static_cast<int32_t>(key0);
      s.nkeys = static_cast<int32_t>(nkeys);
      s.pair = static_cast<int32_t>(pr);
      s.masked = p.bias != nullptr || p.bias_y != nullptr || padded || pair_min < key0 + nkeys;
    }
  }
  return n;
}

// ---- the phases' tile work ----

// S^T of step s into buffer `sbuf` (tiles (kt, group) of 16 keys x 16
// queries, [kt][2]): K tiles x the pair's two Q^T tiles, `ksteps` k-steps of
// 1 KB tiles, tiles of a key (query) row block `row_bytes` apart.
template <class Queue>
void push_qk(Queue& queue, const Step& s, float* sbuf, const char* k, const char* qt,
             int64_t row_bytes, int64_t ksteps, bool int8) {
  const int64_t ktiles = (s.nkeys + 31) / 32 * 2;
  for (int64_t kt = 0; kt < ktiles; kt += 2) {
    Chunk c;
    float* st = sbuf + kt * 2 * 256;  // tiles (kt, 0), (kt, 1), (kt + 1, 0), (kt + 1, 1)
    for (int t = 0; t < 4; ++t) c.c[t] = st + t * 256;
    c.a[0] = k + (s.key0 / 16 + kt) * row_bytes;
    c.a[1] = c.a[0] + row_bytes;
    c.b[0] = qt + 2 * s.pair * row_bytes;
    c.b[1] = c.b[0] + row_bytes;
    c.a_step = c.b_step = 1024;
    c.steps = ksteps;
    c.load_c = false;
    c.int8 = int8;
    queue.push(c);
  }
}

// O^T of step s's two groups += V^T P^T over the step's keys (bf16): vt the
// V^T tiles ([kv_pad / 32][dtiles]), pbuf the step's P^T ([kBlock / 32][2]).
template <class Queue>
void push_pv(Queue& queue, const Step& s, const GroupState& st, const uint16_t* vt_tiles,
             const uint16_t* pbuf_tiles) {
  const int64_t tile_bytes = 1024, dtiles = st.dtiles;
  const int64_t ksteps = (s.nkeys + 31) / 32;
  const char* vt = reinterpret_cast<const char*>(vt_tiles) + (s.key0 / 32) * dtiles * tile_bytes;
  const char* pbuf = reinterpret_cast<const char*>(pbuf_tiles);
  float* o0 = st.o + (2 * s.pair) * dtiles * 256;  // group 2 * pair
  float* o1 = o0 + dtiles * 256;                   // group 2 * pair + 1
  for (int64_t dt = 0; dt < dtiles; dt += 2) {
    const bool full = dt + 1 < dtiles;
    Chunk c;
    c.c[0] = o0 + dt * 256;
    c.c[1] = o1 + dt * 256;
    c.c[2] = full ? o0 + (dt + 1) * 256 : nullptr;
    c.c[3] = full ? o1 + (dt + 1) * 256 : nullptr;
    c.a[0] = vt + dt * tile_bytes;
    c.a[1] = full ? c.a[0] + tile_bytes : nullptr;
    c.b[0] = pbuf;
    c.b[1] = pbuf + tile_bytes;
    c.a_step = dtiles * tile_bytes;
    c.b_step = 2 * tile_bytes;
    c.steps = ksteps;
    c.load_c = true;
    c.int8 = false;
    queue.push(c);
  }
}

// O^T of step s's groups *= alpha (one vector per group) where the softmax
// raised the max.
inline void apply_rescale(const Step& s, const GroupState& st, const float* alpha) {
  for (int64_t g = 2 * s.pair; g < 2 * s.pair + 2; ++g) {
    if (!st.rescale[g]) continue;
    st.rescale[g] = 0;
    const __m512 a = _mm512_load_ps(alpha + g * 16);
    float* o = st.o + g * st.dtiles * 256;
    for (int64_t e = 0; e < st.dtiles * 256; e += 16)
      _mm512_store_ps(o + e, _mm512_mul_ps(_mm512_load_ps(o + e), a));
  }
}

// ---- the online softmax of a step ----

// The lazy running max: raised only where a block exceeds it by more than
// log2 (log2 units); sum: a block's weight sum per query when no weight
// exceeds 2^log2, at most (block * 2^log2).
struct Lazy {
  float log2, sum;
};

// One step's weight sums per query, for the pair's two groups.
struct StepSums {
  __m512 g[2];
};

// The online-softmax step: S^T (buffer buf) -> P^T (buffer buf), running
// max / sum / alpha of the pair's two groups, with the tile queue's k-steps
// spread between key pairs (attention_amx.cpp describes the numerics).
//
// Unmasked steps whose queries all have a finite running max take one pass
// over S^T: weights against the running max. The block raises a query's max
// (update_max) only if one of its scores exceeds it by more than the lazy
// margin, i.e. one weight exceeds 2^margin; the block's weight sum stays
// within lazy.sum (block * 2^margin) unless some weight does, and that is
// checked once per step instead of a max per score. Where it is exceeded
// (after a query's first block: almost never) the step is redone in two
// passes. Other steps first take the block's max in a pass of their own
// (masked ones also store the masked, scaled scores).
//
// Run holds p_, b_, h_, row0_ and w_ (s[2], p[2], max, sum, alpha, key_end,
// rescale), and says what a score is (log2 units: a raw S^T
// entry times a per-key and a per-group factor):
//   factors(g0, f)        the group factors of groups g0, g0 + 1;
//   key_factor(j)         the factor of key j, for arg (may be unused);
//   raw(t, j)             S^T row t of key j times the key's factor;
//   arg(t, kf, f, shift)  the exponent of an unmasked weight: score - shift;
//   scaled(t, j, f)       the score, for the masked pass.
template <class Run>
void add_sums(Run& r, const Step& s, const StepSums& sums) {
  for (int gi = 0; gi < 2; ++gi) {
    float* acc = r.w_.sum + (2 * s.pair + gi) * 16;
    _mm512_store_ps(acc, _mm512_add_ps(_mm512_load_ps(acc), sums.g[gi]));
  }
}

// Masked pass 1 of group g, whose S^T tiles start at `scores` (512 floats
// apart): scaled, biased scores with -inf where invisible, stored back (as
// fp32); returns their max per query.
template <class Run>
__m512 masked_scores(Run& r, const Step& s, int64_t g, float* scores, int64_t ktiles, __m512 f) {
  const attention_detail::Problem& p = r.p_;
  const __m512 neg_inf = _mm512_set1_ps(-__builtin_inff());
  // Padding queries past Lq have no bias row to read.
  const __mmask16 real = first_lanes(p.q_len - (r.row0_ + g * 16));
  // A separable bias or one with contiguous keys is read a 16 x 16 block at
  // a time (bias_tile); other strides a key at a time.
  const bool tiled_bias = (p.bias_y || (p.bias && p.bias_stride[3] == 1)) && real != 0;
  __m512 bias[16];
  __m512 bmax = neg_inf;
  for (int64_t kt = 0; kt < ktiles; ++kt) {
    const int64_t j0 = s.key0 + kt * 16;
    if (tiled_bias && j0 < p.kv_len)
      bias_tile(p, r.b_, r.h_, r.row0_ + g * 16, j0, real, r.w_.bias_t + g * bias_parts(p) * 16,
                bias);
    for (int e = 0; e < 16; ++e) {
      const int64_t j = j0 + e;
      const __mmask16 m =
          j < p.kv_len ? visible_lanes(p, r.b_, r.w_.key_end + g * 16, j) : __mmask16(0);
      float* t = scores + kt * 512 + e * 16;
      __m512 x = r.scaled(t, j, f);
      if ((p.bias || p.bias_y) && (m & real))
        x = _mm512_add_ps(
            x, tiled_bias ? bias[e] : bias_lanes(p, r.b_, r.h_, r.row0_ + g * 16, j, m & real));
      x = _mm512_mask_blend_ps(m, neg_inf, x);
      _mm512_store_ps(t, x);
      bmax = _mm512_max_ps(bmax, x);
    }
  }
  return bmax;
}

// The weights of keys jl, jl + 1 of one group (S^T rows sv, sv + 16):
// sum += both, and their P^T row (bf16 pairs) at dst. Keys from nkeys on
// (a step's padding to 32) weigh nothing. kf0 / kf1: the keys' factors
// (unmasked only).
template <bool kMasked, class Run>
__attribute__((always_inline)) inline __m512 pair_weights(const Run& r, const float* sv, __m512 kf0,
                                                          __m512 kf1, __m512 f, __m512 shift,
                                                          int64_t jl, int64_t nkeys,
                                                          __m512i interleave, __m512 sum,
                                                          uint16_t* dst) {
  const __m512 floor = _mm512_set1_ps(-200.f);
  __m512 w0, w1;
  if constexpr (kMasked) {
    w0 = exp2_poly(_mm512_max_ps(_mm512_sub_ps(_mm512_load_ps(sv), shift), floor));
    w1 = exp2_poly(_mm512_max_ps(_mm512_sub_ps(_mm512_load_ps(sv + 16), shift), floor));
  } else {
    w0 = exp2_poly(r.arg(sv, kf0, f, shift));
    w1 = exp2_poly(r.arg(sv + 16, kf1, f, shift));
  }
  if (jl + 2 > nkeys) {
    if (jl >= nkeys) w0 = _mm512_setzero_ps();
    w1 = _mm512_setzero_ps();
  }
  _mm512_store_si512(dst,
                     _mm512_permutexvar_epi16(interleave, (__m512i)_mm512_cvtne2ps_pbh(w1, w0)));
  return _mm512_add_ps(sum, _mm512_add_ps(w0, w1));
}

// Pass 2: weights 2^(score - shift), their sums and the P^T rows, a key
// pair at a time, with the tile queue's half k-steps (tq, unless null)
// spread evenly between the key pairs. Unmasked S^T holds raw scores
// (Run::arg scales them); masked S^T holds scaled scores, -inf where
// invisible. Returns the sums.
//
// Everything the loop carries (sums, factors, shifts, the pacing credit) is
// a scalar local, so that it stays in registers: as arrays indexed by group
// and with the credit a member of the queue, GCC kept them in memory (the
// tile intrinsics' pointers may alias anything), and the loop's scalar work
// and store-forwarding chains, not its vector work, set its speed at
// head_dim 32.
template <bool kMasked, class Run, class Queue>
StepSums step_weights(Run& r, const Step& s, int buf, const __m512 f[2], const __m512 shift[2],
                      Queue* tq) {
  alignas(64) static constexpr uint16_t kInterleave[32] = {
      0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  const int64_t nkeys = s.nkeys, key0 = s.key0;
  const int64_t ktiles = (nkeys + 31) / 32 * 2;
  const float* const sbuf = r.w_.s[buf];
  uint16_t* const pbuf = r.w_.p[buf];
  const __m512 f0 = f[0], f1 = f[1], shift0 = shift[0], shift1 = shift[1];
  __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
  const int64_t ticks = ktiles * 8, total = tq ? tq->half_steps() : 0;
  int64_t credit = 0;
  for (int64_t kt = 0; kt < ktiles; ++kt) {
    // S^T tiles (kt, 0) and (kt, 1): rows = keys 16 kt + m, lanes = queries;
    // P^T tiles (kt / 2, 0 / 1), row = the key pair's index within 32 keys.
    const float* st = sbuf + kt * 2 * 256;
    uint16_t* pt = pbuf + (kt / 2) * 2 * 512 + (kt % 2) * 8 * 32;
    for (int m = 0; m < 16; m += 2) {
      const int64_t jl = kt * 16 + m;
      __m512 kf0 = _mm512_setzero_ps(), kf1 = kf0;
      if constexpr (!kMasked) {
        kf0 = r.key_factor(key0 + jl);
        kf1 = r.key_factor(key0 + jl + 1);
      }
      sum0 = pair_weights<kMasked>(r, st + m * 16, kf0, kf1, f0, shift0, jl, nkeys, interleave,
                                   sum0, pt + (m / 2) * 32);
      sum1 = pair_weights<kMasked>(r, st + 256 + m * 16, kf0, kf1, f1, shift1, jl, nkeys,
                                   interleave, sum1, pt + 512 + (m / 2) * 32);
      for (credit += total; credit >= ticks; credit -= ticks) tq->issue();
    }
  }
  return {{sum0, sum1}};
}

template <class Run, class Queue>
void softmax_step(Run& r, const Step& s, int buf, Queue& tq, Lazy lazy) {
  const __m512 neg_inf = _mm512_set1_ps(-__builtin_inff());
  const int64_t g0 = 2 * s.pair;
  __m512 f[2];
  r.factors(g0, f);
  Queue* pending = &tq;
  if (!s.masked) {
    const __m512 shift[2] = {_mm512_load_ps(r.w_.max + g0 * 16),
                             _mm512_load_ps(r.w_.max + (g0 + 1) * 16)};
    if (!_mm512_cmp_ps_mask(_mm512_min_ps(shift[0], shift[1]), neg_inf, _CMP_EQ_OQ)) {
      const StepSums sums = step_weights<false>(r, s, buf, f, shift, &tq);
      // Not "> limit": NaN or +inf sums (overflowed weights) redo the step too.
      const __m512 limit = _mm512_set1_ps(lazy.sum);
      if (!(_mm512_cmp_ps_mask(sums.g[0], limit, _CMP_NLE_UQ) |
            _mm512_cmp_ps_mask(sums.g[1], limit, _CMP_NLE_UQ))) {
        add_sums(r, s, sums);
        return;
      }
      pending = nullptr;  // the tile work was issued in the first attempt
    }
  }
  // Pass 1: the block's max per query. Masked steps store the scaled,
  // biased and masked scores (-inf where invisible) back into S^T.
  const int64_t ktiles = (s.nkeys + 31) / 32 * 2;
  float* const sbuf = r.w_.s[buf];
  __m512 shift[2];
  for (int gi = 0; gi < 2; ++gi) {
    const int64_t g = g0 + gi;
    __m512 bmax;
    if (!s.masked) {
      __m512 m4[4] = {neg_inf, neg_inf, neg_inf, neg_inf};
      for (int64_t kt = 0; kt < s.nkeys / 16; ++kt) {
        const float* t = sbuf + (kt * 2 + gi) * 256;
        for (int m = 0; m < 16; m += 4)
          for (int e = 0; e < 4; ++e)
            m4[e] = _mm512_max_ps(m4[e], r.raw(t + (m + e) * 16, s.key0 + kt * 16 + m + e));
      }
      for (int64_t jl = s.nkeys / 16 * 16; jl < s.nkeys; ++jl)  // keys of a last, partial tile
        m4[0] = _mm512_max_ps(
            m4[0], r.raw(sbuf + ((jl / 16) * 2 + gi) * 256 + (jl % 16) * 16, s.key0 + jl));
      // The group factor is >= 0: the max of the scores is the scaled max.
      bmax = _mm512_mul_ps(_mm512_max_ps(_mm512_max_ps(m4[0], m4[1]), _mm512_max_ps(m4[2], m4[3])),
                           f[gi]);
    } else {
      bmax = masked_scores(r, s, g, sbuf + gi * 256, ktiles, f[gi]);
    }
    shift[gi] = update_max(r.w_.max + g * 16, r.w_.sum + g * 16, r.w_.alpha + g * 16,
                           r.w_.rescale + g, bmax, lazy.log2);
  }
  add_sums(r, s,
           s.masked ? step_weights<true>(r, s, buf, f, shift, pending)
                    : step_weights<false>(r, s, buf, f, shift, pending));
}

// Runs the steps software-pipelined: while the AVX-512 units run the softmax
// of step i, the tile unit runs P.V of step i - 1 and Q.K^T of step i + 1
// (S^T and P^T double-buffered by step parity). Run provides push_qk(step,
// buf), what softmax_step asks, state_, queue_ and w_.vt / w_.p / w_.alpha.
template <class Run>
void run_pipeline(Run& run, const Step* steps, int64_t nsteps, Lazy lazy) {
  if (nsteps == 0) return;
  auto& tq = run.queue_;
  const auto pv = [&run, &tq](const Step& s, int buf) {
    apply_rescale(s, run.state_, run.w_.alpha);
    push_pv(tq, s, run.state_, run.w_.vt, run.w_.p[buf]);
  };
  tq.clear();
  run.push_qk(steps[0], 0);
  tq.finish();
  for (int64_t i = 0; i < nsteps; ++i) {
    tq.clear();
    if (i > 0) pv(steps[i - 1], (i - 1) % 2);
    if (i + 1 < nsteps) run.push_qk(steps[i + 1], (i + 1) % 2);
    softmax_step(run, steps[i], i % 2, tq, lazy);
    tq.finish();
  }
  tq.clear();
  pv(steps[nsteps - 1], (nsteps - 1) % 2);
  tq.finish();
}

// One work item: kRows queries from row0 of (b, h). Run derives from
// WorkItem<Run, ...> and provides pack_queries(rows, groups) (the Q^T tiles
// of the item's queries), push_qk and the score hooks of softmax_step.
template <class Run, class Workspace, class Dims, class Queue>
class WorkItem {
 public:
  WorkItem(const attention_detail::Problem& p, const Workspace& w, const Dims& d, int64_t b,
           int64_t h, int64_t row0, bool reverse)
      : p_(p), w_(w), d_(d), b_(b), h_(h), row0_(row0), reverse_(reverse) {}

  void run() {
    Run& self = static_cast<Run&>(*this);
    const int64_t rows = p_.q_len - row0_ < kRows ? p_.q_len - row0_ : kRows;
    self.pack_queries(rows, 2 * ((rows + kPair - 1) / kPair));
    transpose_bias_parts(p_, b_, h_, row0_, rows, w_.bias_t);
    const int64_t nsteps = plan_steps(p_, b_, row0_, rows, kBlock, reverse_, state_, w_.steps);
    run_pipeline(self, w_.steps, nsteps, {kLazyLog2, kLazySum});
    // out[b, row0 + q, h, :] = O^T[:, q] / sum[q] (zero where nothing was visible).
    store_output(p_, w_.o, w_.sum, d_.dtiles, b_, h_, row0_, rows);
  }

  const attention_detail::Problem& p_;
  const Workspace& w_;
  const Dims& d_;
  const int64_t b_, h_, row0_;
  const bool reverse_;
  const GroupState state_ = {w_.key_end, w_.max, w_.sum, w_.rescale, w_.o, d_.dtiles};
  Queue queue_;
};

// Runs work items [begin, end) (item = (b * H + h) * tiles + tile, tiles of
// `rows` queries, in balanced_tile order): pack(b, h) whenever (b, h)
// changes (K / V^T tiles stay in the workspace), then item(b, h, row0,
// reverse). Odd items walk the keys backwards (plan_steps).
template <class Pack, class Item>
void run_items(const attention_detail::Problem& p, int64_t rows, int64_t begin, int64_t end,
               Pack pack, Item item_run) {
  const int64_t tiles = (p.q_len + rows - 1) / rows;
  configure_full_tiles();
  int64_t packed = -1;  // (b, h) whose K / V^T tiles are in the workspace
  for (int64_t item = begin; item < end; ++item) {
    const int64_t bh = item / tiles;
    const int64_t tile = attention_detail::balanced_tile(item % tiles, tiles);
    const int64_t b = bh / p.heads, h = bh % p.heads;
    if (bh != packed) {
      pack(b, h);
      packed = bh;
    }
    item_run(b, h, tile * rows, item % 2 == 1);
  }
  _tile_release();
}

}  // namespace
}  // namespace flick::cpu::amx
