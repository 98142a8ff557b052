// INT8 attention on the AMX tile unit (Sapphire Rapids and later): the
// schedule of attention_amx.cpp (transposed scores, 128-query work items in
// pairs of 16-query groups, 512-key blocks, the Q.K^T / softmax / P.V phases
// of consecutive steps software-pipelined, the lazy running max) with the
// arithmetic of Backend::attention_int8 (attention_int8_kernels.h):
//   S^T = K Q^T   on tdpbssd: A = the smoothed K quantized per key (s8,
//                 quantize_k_avx512), B = Q^T quantized per query (s8,
//                 quantize_q_avx512), exact int32 dots; each score is then float(dot) *
//                 kscale[key] * qscale[query] * scale * log2(e) in AVX-512
//                 (the per-query factor lives in the lanes of a vector, the
//                 per-key one is a broadcast);
//   O^T += V^T P^T on tdpbf16ps with P and V rounded to bf16, as in the
//                 AMX-BF16 kernel and the other INT8 kernels.
// The quantized operands come from the vectorised shared quantizer
// (bit-identical to attention_int8.cpp's and so to the reference's); the
// integer dots are exact, so the scores differ from the reference only by
// fp32 rounding of the two scale products.
//
// Why P.V stays bf16 (bench/RESULTS.md, "INT8 attention"): P as u8 (a fixed
// 1/255 step, which needs the exact running max so that P <= 1) with V
// per-channel s8 on tdpbusd halves the P.V tile products, but
//  - speed: with only the tile side of it in place (tdpbusd over half the
//    k-steps, numerics not built) the DiT self-attention ran about as fast
//    as the AMX-BF16 kernel (0.98x in one run), before the AVX-512 work it needs
//    on top (tile accumulation cannot be rescaled by the softmax's alpha, so
//    each step's int32 O^T must be folded into an fp32 O^T);
//  - error: on DiT-like rows of 5280 keys (a simulation in double, see
//    bench/RESULTS.md) u8 P moves the output by 10-60x what bf16 P does (rms 2.5e-4
//    to 2.7e-3 of max|V| against 2e-5 to 1.2e-4): most of a long row's
//    weights lie below one u8 step.
//
// The Q.K^T k-step covers 64 head_dim values (tdpbssd: 4 bytes per 32-bit
// unit) instead of 32, so Q.K^T takes half the tile products of the BF16
// kernel; the softmax gains one int -> float conversion and one multiply
// per score vector.
//
// Numerics beyond attention_amx.cpp's (bf16 P, 2^x polynomial, lazy max,
// all as there): none; the scores are exact integers scaled in fp32. Against
// the reference (exact max: a row's largest weight is 1, exact in bf16) the
// lazy max lets that weight reach 2^8 and round like the others, so a row
// dominated by one key moves by up to 2^-8 (not 2^-9) of max|V|.
//
// See attention_kernels.h for why this file avoids inline functions of other
// headers: everything here is in an anonymous namespace or intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstring>

#include "runtime/cpu/amx_tiles.h"
#include "runtime/cpu/attention_amx_common.h"
#include "runtime/cpu/attention_int8_kernels.h"

namespace flick::cpu::attention_int8_detail {
namespace {

using namespace amx;  // the shared pieces and sizes (attention_amx_common.h)
using attention_detail::attention_key_end;
using attention_detail::balanced_tile;
using attention_detail::Operand;
using attention_detail::ScratchLayout;

constexpr int64_t kQuadK = 64;  // head_dim per Q.K^T k-step (16 units of 4 s8)
constexpr int64_t kTileBytes = 1024;
constexpr int64_t kAhead = 8;  // rows of V prefetched ahead
// The tile queue of the pipeline: tdpbssd (Q.K^T) and tdpbf16ps (P.V) chunks.
using Queue = amx::TileQueue<kMaxChunks, true>;

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// bf16 bits of f rounded to nearest even (finite f), as round_bf16 in dtype.h.
inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// ---- workspace ----

struct Dims {
  int64_t qchunks;  // ceil(D / 64): k-steps of Q.K^T, s8 tiles of K and Q^T per row block
  int64_t dtiles;   // ceil(D / 16): row tiles of V^T and O^T
  int64_t kv_pad;   // Lk rounded up to kPair (zero keys past Lk)
  int64_t blocks;   // ceil(Lk / kBlock)
  explicit Dims(const Problem& p)
      : qchunks(ceil_div(p.head_dim, kQuadK)),
        dtiles(ceil_div(p.head_dim, 16)),
        kv_pad(round_up(p.kv_len, kPair)),
        blocks(ceil_div(p.kv_len, kBlock)) {}
  int64_t ld() const { return qchunks * kQuadK; }  // s8 row length of quantized Q / K
};

struct Workspace {
  int8_t* k;        // [kv_pad / 16][qchunks] tiles: 16 keys x 64 head_dim (s8)
  float* kscale;    // [kv_pad] (0 past Lk)
  int8_t* kq;       // [Lk][ld] the quantizer's output
  float* mean;      // [D]
  float* krows;     // [Lk][D] quantize_k_avx512's scratch
  uint16_t* vt;     // [kv_pad / 32][dtiles] tiles: 16 head_dim x 32 keys (16 key pairs)
  uint16_t* vrows;  // [kPair][dtiles * 16] bf16 rows of V being packed
  int8_t* qq;       // [kRows][ld] the quantizer's output
  float* qscale;    // [kRows]
  int8_t* qt;       // [kRows / 16][qchunks] tiles: 16 head_dim quads x 16 queries
  float* qs;        // [kRows] qscale * |scale| * log2(e) (0 past Lq)
  float* s[2];      // S^T of a step: [kBlock / 16][2] tiles of 16 keys x 16 queries (s32, then
                    // fp32 where the masked pass stores scaled scores)
  uint16_t* p[2];   // P^T of a step: [kBlock / 32][2] tiles of 16 key pairs x 16 queries
  float* o;         // O^T: [kRows / 16][dtiles] tiles of 16 head_dim x 16 queries
  float* max;       // per group of 16 queries, one vector each, as in attention_amx.cpp
  float* sum;
  float* alpha;
  int32_t* key_end;
  uint8_t* rescale;
  Step* steps;
  float* bias_t;  // a separable bias's parts per group: [kRows / 16][grid_h + grid_w][16]
};

Workspace carve(const Problem& p, void* scratch, size_t* bytes) {
  const Dims d(p);
  const size_t ld = size_t(d.ld());
  ScratchLayout sl(scratch);
  Workspace w;
  w.k = reinterpret_cast<int8_t*>(sl.take(size_t(d.kv_pad) * ld));
  w.kscale = reinterpret_cast<float*>(sl.take(size_t(d.kv_pad) * 4));
  w.kq = reinterpret_cast<int8_t*>(sl.take(size_t(p.kv_len) * ld));
  w.mean = reinterpret_cast<float*>(sl.take(size_t(p.head_dim) * 4));
  w.krows = reinterpret_cast<float*>(sl.take(size_t(p.kv_len * p.head_dim) * 4));
  w.vt = reinterpret_cast<uint16_t*>(sl.take(size_t(d.kv_pad * d.dtiles * 16) * 2));
  w.vrows = reinterpret_cast<uint16_t*>(sl.take(size_t(kPair * d.dtiles * 16) * 2));
  w.qq = reinterpret_cast<int8_t*>(sl.take(kRows * ld));
  w.qscale = reinterpret_cast<float*>(sl.take(kRows * 4));
  w.qt = reinterpret_cast<int8_t*>(sl.take(kRows * ld));
  w.qs = reinterpret_cast<float*>(sl.take(kRows * 4));
  take_step_buffers(sl, w, d.dtiles, d.blocks, p);
  if (bytes != nullptr) *bytes = sl.used;
  return w;
}

size_t scratch_bytes(const Problem& p) {
  size_t bytes = 0;
  carve(p, nullptr, &bytes);
  return bytes;
}

// ---- packing ----

// K of (b, h), smoothed and quantized (quantize_k_avx512), as A tiles: tile (kt, c)
// = keys [16 kt, 16 kt + 16) x head_dim [64 c, 64 c + 64), zero past Lk and D.
void pack_k(const Problem& p, const Dims& d, int64_t b, int64_t h, const Workspace& w) {
  const int64_t ld = d.ld();
  quantize_k_avx512(p, b, h, ld, w.kq, w.kscale, w.mean, w.krows);
  for (int64_t j = p.kv_len; j < d.kv_pad; ++j) w.kscale[j] = 0.f;
  for (int64_t j = 0; j < d.kv_pad; ++j) {
    int8_t* out = w.k + (j / 16) * d.qchunks * kTileBytes + (j % 16) * 64;
    for (int64_t c = 0; c < d.qchunks; ++c)
      _mm512_store_si512(out + c * kTileBytes, j < p.kv_len
                                                   ? _mm512_loadu_si512(w.kq + j * ld + c * 64)
                                                   : _mm512_setzero_si512());
  }
}

// Row j of V (b, h) rounded to bf16 into dst[0, 16 dtiles) (zero past D).
void v_row_bf16(const Problem& p, const Dims& d, int64_t b, int64_t j, int64_t h, uint16_t* dst) {
  const Operand& v = p.v;
  const int64_t D = p.head_dim, n = d.dtiles * 16;
  const char* base =
      static_cast<const char*>(v.data) +
      (b * v.stride[0] + j * v.stride[1] + h * v.stride[2]) * (v.dtype == DType::F32 ? 4 : 2);
  if (v.dtype == DType::BF16 && v.stride[3] == 1) {
    // The rows of one head lie kilobytes apart: fetch the one kAhead on.
    if (j + kAhead < p.kv_len)
      for (int64_t off = 0; off < D * 2; off += 64)
        _mm_prefetch(base + kAhead * v.stride[1] * 2 + off, _MM_HINT_T0);
    const auto* src = reinterpret_cast<const uint16_t*>(base);
    for (int64_t e = 0; e < n; e += 32)
      _mm512_storeu_si512(dst + e, _mm512_maskz_loadu_epi16(first_words(D - e), src + e));
    return;
  }
  for (int64_t e = 0; e < n; ++e) {
    if (e >= D) {
      dst[e] = 0;
      continue;
    }
    const int64_t at = e * v.stride[3];
    switch (v.dtype) {
      case DType::BF16: dst[e] = reinterpret_cast<const uint16_t*>(base)[at]; break;
      case DType::F16:
        dst[e] = f32_to_bf16_bits(_cvtsh_ss(reinterpret_cast<const uint16_t*>(base)[at]));
        break;
      default: dst[e] = f32_to_bf16_bits(reinterpret_cast<const float*>(base)[at]); break;
    }
  }
}

// V of (b, h) rounded to bf16 as A tiles of V^T: tile (ks, dt) row m =
// head_dim 16 dt + m, 32-bit unit u = (V[32 ks + 2u][.], V[32 ks + 2u + 1][.]),
// zero past Lk and D (attention_amx.cpp's layout).
void pack_vt(const Problem& p, const Dims& d, int64_t b, int64_t h, const Workspace& w) {
  const int64_t n = d.dtiles * 16;
  for (int64_t ks = 0; ks < d.kv_pad / kPair; ++ks) {
    for (int64_t r = 0; r < kPair; ++r) {
      const int64_t j = ks * kPair + r;
      if (j < p.kv_len)
        v_row_bf16(p, d, b, j, h, w.vrows + r * n);
      else
        std::memset(w.vrows + r * n, 0, size_t(n) * 2);
    }
    for (int64_t dt = 0; dt < d.dtiles; ++dt) {
      __m512i u[16];
      for (int i = 0; i < 16; ++i) {
        const __m512i lo = _mm512_cvtepu16_epi32(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.vrows + 2 * i * n + 16 * dt)));
        const __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(w.vrows + (2 * i + 1) * n + 16 * dt)));
        u[i] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
      }
      transpose16(u);
      uint16_t* tile = w.vt + (ks * d.dtiles + dt) * kTileElems;
      for (int m = 0; m < 16; ++m) _mm512_store_si512(tile + m * 32, u[m]);
    }
  }
}

// Q rows [row0, row0 + rows) quantized (quantize_q_avx512) as B tiles of Q^T for
// 16 * groups queries: tile (g, c) row k = head_dim quad 64 c + 4k .. + 3,
// column n = query 16 g + n; zero past Lq and D. Negated when the scale is
// negative (s8 negation of [-127, 127] is exact), so that the per-query
// factors qs are >= 0 and the max of the scaled scores is the scaled max.
void pack_qt(const Problem& p, const Dims& d, int64_t b, int64_t h, int64_t row0, int64_t rows,
             int64_t groups, const Workspace& w) {
  const int64_t ld = d.ld();
  quantize_q_avx512(p, b, h, row0, rows, ld, w.qq, w.qscale);
  const bool negate = p.scale < 0;
  const float factor = (negate ? -p.scale : p.scale) * kLog2e;
  for (int64_t l = 0; l < groups * kGroup; ++l) w.qs[l] = l < rows ? w.qscale[l] * factor : 0.f;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t c = 0; c < d.qchunks; ++c) {
      __m512i r[16];
      for (int n = 0; n < 16; ++n) {
        const int64_t l = g * kGroup + n;
        if (l >= rows) {
          r[n] = _mm512_setzero_si512();
          continue;
        }
        const __m512i x = _mm512_loadu_si512(w.qq + l * ld + c * 64);
        r[n] = negate ? _mm512_sub_epi8(_mm512_setzero_si512(), x) : x;
      }
      transpose16(r);
      int8_t* tile = w.qt + (g * d.qchunks + c) * kTileBytes;
      for (int k = 0; k < 16; ++k) _mm512_store_si512(tile + k * 64, r[k]);
    }
}

// ---- one work item ----

class TileRun : public amx::WorkItem<TileRun, Workspace, Dims, Queue> {
 public:
  using WorkItem::WorkItem;

  // Q^T tiles of the item's queries, quantized (amx::WorkItem).
  void pack_queries(int64_t rows, int64_t groups) {
    pack_qt(p_, d_, b_, h_, row0_, rows, groups, w_);
  }

  // The pipeline's phases (amx::run_pipeline).
  // S^T of step s into buffer `buf` (int32): key tiles x the pair's two groups.
  void push_qk(const Step& s, int buf) {
    amx::push_qk(queue_, s, w_.s[buf], reinterpret_cast<const char*>(w_.k),
                 reinterpret_cast<const char*>(w_.qt), d_.qchunks * kTileBytes, d_.qchunks, true);
  }

  // Scores for amx::softmax_step: the int32 dots of S^T times kscale[key]
  // (per key) and qs (per query: qscale * |scale| * log2(e)).
  void factors(int64_t g0, __m512 f[2]) const {
    f[0] = _mm512_load_ps(w_.qs + g0 * kGroup);
    f[1] = _mm512_load_ps(w_.qs + (g0 + 1) * kGroup);
  }
  __m512 key_factor(int64_t j) const { return _mm512_set1_ps(w_.kscale[j]); }
  __m512 raw(const float* t, int64_t j) const {
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(t)), _mm512_set1_ps(w_.kscale[j]));
  }
  __m512 arg(const float* t, __m512 kf, __m512 f, __m512 shift) const {
    return _mm512_fmsub_ps(_mm512_cvtepi32_ps(_mm512_load_si512(t)), _mm512_mul_ps(kf, f), shift);
  }
  __m512 scaled(const float* t, int64_t j, __m512 f) const {
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(t)),
                         _mm512_mul_ps(_mm512_set1_ps(w_.kscale[j]), f));
  }
};

void amx_run(const Problem& p, int64_t begin, int64_t end, void* scratch) {
  const Dims d(p);
  const Workspace w = carve(p, scratch, nullptr);
  amx::run_items(
      p, kRows, begin, end,
      [&](int64_t b, int64_t h) {
        pack_k(p, d, b, h, w);
        pack_vt(p, d, b, h, w);
      },
      [&](int64_t b, int64_t h, int64_t row0, bool reverse) {
        TileRun(p, w, d, b, h, row0, reverse).run();
      });
}

bool amx_accepts(const Problem& p) { return p.head_dim <= kMaxHeadDim; }

}  // namespace

const Kernel kInt8AmxKernel = {"int8_amx", kRows, scratch_bytes, amx_run, amx_accepts};

}  // namespace flick::cpu::attention_int8_detail
