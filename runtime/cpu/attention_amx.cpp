// Flash attention on the AMX tile unit (Sapphire Rapids and later) for BF16
// q, k, v: both products on tiles (tdpbf16ps, fp32 accumulation), the online
// softmax in AVX-512, P rounded to bf16 for the P.V product as FlashAttention
// does.
//
// Layout: the kernel works on transposed scores. Per work item (batch, head,
// kRows queries) and per block of kBlock keys it computes
//   S^T = K Q^T     C tile [16 keys][16 queries]: A = K rows (as stored), B = Q^T
//   O^T += V^T P^T  C tile [16 d][16 queries]:    A = V^T, B = P^T
// so that each 16-lane vector of S^T holds one key for 16 queries. The softmax
// then reduces over keys with vertical max / add (no horizontal reductions),
// and each query's running max, sum and rescale factor live in the lanes of
// one vector. K and V^T are repacked into 1 KB tiles once per (batch, head) a
// thread visits and reused by every query tile; Q^T once per query tile.
//
// Queries are handled in pairs of 16-query groups (32 queries: 2 B tiles),
// so each tile step is a 2 x 2 block of C tiles. A step of the schedule is
// (key block, query pair): Q.K^T, softmax, P.V. The three phases of
// consecutive steps are independent, so the kernel software-pipelines them:
// while the AVX-512 units run the softmax of step i, the tile unit runs P.V
// of step i - 1 and Q.K^T of step i + 1, two tile products at a time between
// pieces of the softmax (the core overlaps the two as long as both are in its
// out-of-order window; batching the tile work instead was ~10 % slower).
// Consecutive work items walk the key blocks in opposite directions, so that
// each starts on the K / V^T blocks its predecessor left in L2.
//
// Where the time goes (2640 x 5280 x 12 x 128 on one thread, thread CPU
// clock, by removing parts): the tile work alone takes ~70 % of the time, the
// softmax alone ~28 %, packing and the output ~7 %, and the two main parts
// hardly overlap (in a lab loop on this host, AVX-512 work interleaved with
// tdpbf16ps still adds ~3/4 of its own time). A 2 x 2 block needs one 1 KB
// tile load per tdpbf16ps; each S^T tile is stored after D / 32 products and
// each O^T tile reloaded and stored every kBlock / 32. The tile side runs at
// ~35-40 TSC cycles per tdpbf16ps, against ~18 for an L1-resident lab loop of
// the same 2 x 2 traffic and ~15 at the measured peak; other tile schedules
// (Q^T or P^T resident in tiles, 1 x 2 blocks with double-buffered A / B) were
// no faster in that lab loop. So the softmax is kept lean instead: one pass
// over S^T for all but a query's first block (the lazy max is checked on the
// step's weight sum), 2^x as vreduceps + a polynomial + vscalefps, 512-key
// blocks (a quarter of the O^T round trips and per-step overhead of 128-key
// ones: ~4 % faster than 128 or 256 in interleaved runs, ~10 % at 257 keys,
// one step per query pair instead of a 256-key and a 1-key one), the tile
// queue paced once per 4 score vectors. Software prefetch of the next K / V^T
// tiles (slower), non-temporal tile loads and 64 / 256-query items did not
// help; 64-key blocks were ~15 % slower.
//
// Numerics (beyond fp32 accumulation order), for values V with max |V| = vmax:
//  - P is rounded to bf16 (relative error <= 2^-9 per weight) while the
//    normaliser sums the fp32 P: each output is off by at most 2^-9 * vmax;
//  - 2^x is a degree-4 polynomial of the fraction (relative error 2.7e-6),
//    which moves the weights by at most that relative amount: <= 5.4e-6 * vmax;
//  - the running max is only raised when a block's max exceeds it by more
//    than kLazyLog2 (then O and the sum are rescaled); blocks taken in one
//    pass against the old max are redone with the raised max only when their
//    weight sum exceeds kBlock * 2^kLazyLog2. So weights reach 2^kLazyLog2 =
//    256 (2^17 in a one-pass block) before normalisation, sums ~2^21 at 5280
//    keys: well inside fp32 and bf16 range, and bf16's relative rounding does
//    not depend on the magnitude.
//
// See attention_kernels.h for why this file avoids inline functions of other
// headers: everything here is in an anonymous namespace or intrinsics.
// GCC 12 reports the intrinsics' deliberately undefined pass-through operand
// (_mm512_undefined_ps) as maybe-uninitialized once they are inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "runtime/cpu/amx_tiles.h"
#include "runtime/cpu/attention_amx_common.h"
#include "runtime/cpu/attention_kernels.h"

namespace flick::cpu::attention_detail {
namespace {

using namespace amx;  // the shared pieces and sizes (attention_amx_common.h)

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// The tile queue of the pipeline: tdpbf16ps chunks only.
using Queue = amx::TileQueue<kMaxChunks>;

inline const uint16_t* row_ptr(const Operand& t, int64_t b, int64_t l, int64_t h) {
  return static_cast<const uint16_t*>(t.data) + b * t.stride[0] + l * t.stride[1] + h * t.stride[2];
}

// bf16 elements [e0, e0 + 32) of a row (zero past n), as a vector of 32 words.
inline __m512i load_words32(const uint16_t* row, int64_t stride, int64_t e0, int64_t n) {
  if (stride == 1) return _mm512_maskz_loadu_epi16(first_words(n - e0), row + e0);
  alignas(64) uint16_t tmp[32] = {};
  for (int64_t e = e0; e < min64(e0 + 32, n); ++e) tmp[e - e0] = row[e * stride];
  return _mm512_load_si512(tmp);
}

// bf16 elements [e0, e0 + 16) of a row (zero past n), zero-extended to 32 bits.
inline __m512i load_words16(const uint16_t* row, int64_t stride, int64_t e0, int64_t n) {
  if (stride == 1)
    return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(first_lanes(n - e0), row + e0));
  alignas(32) uint16_t tmp[16] = {};
  for (int64_t e = e0; e < min64(e0 + 16, n); ++e) tmp[e - e0] = row[e * stride];
  return _mm512_cvtepu16_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(tmp)));
}

// ---- workspace ----

struct Dims {
  int64_t dchunks;  // ceil(D / 32): k-steps of Q.K^T, tiles of K and Q^T per row block
  int64_t dtiles;   // ceil(D / 16): row tiles of V^T and O^T
  int64_t kv_pad;   // Lk rounded up to kPair (zero keys past Lk)
  int64_t blocks;   // ceil(Lk / kBlock)
  explicit Dims(const Problem& p)
      : dchunks(ceil_div(p.head_dim, 32)),
        dtiles(ceil_div(p.head_dim, 16)),
        kv_pad(round_up(p.kv_len, kPair)),
        blocks(ceil_div(p.kv_len, kBlock)) {}
};

struct Workspace {
  uint16_t* k;     // [kv_pad / 16][dchunks] tiles: 16 keys x 32 head_dim
  uint16_t* vt;    // [kv_pad / 32][dtiles] tiles: 16 head_dim x 32 keys (16 key pairs)
  uint16_t* qt;    // [kRows / 16][dchunks] tiles: 16 head_dim pairs x 16 queries
  float* s[2];     // S^T of a step: [kBlock / 16][2] tiles of 16 keys x 16 queries
  uint16_t* p[2];  // P^T of a step: [kBlock / 32][2] tiles of 16 key pairs x 16 queries
  float* o;        // O^T: [kRows / 16][dtiles] tiles of 16 head_dim x 16 queries
  // Per group of 16 queries, one vector each:
  float* max;        // running max (log2 units) the weights are relative to
  float* sum;        // running sum of the weights
  float* alpha;      // factor O^T and the sum must be rescaled by before the next P.V
  int32_t* key_end;  // visible keys [0, key_end) of each query
  uint8_t* rescale;  // whether alpha differs from 1 in some lane
  Step* steps;
  float* bias_t;  // a separable bias's parts per group: [kRows / 16][grid_h + grid_w][16]
};

// The workspace in `scratch`; with scratch null, only its size in *bytes.
Workspace carve(const Problem& p, void* scratch, size_t* bytes) {
  const Dims d(p);
  ScratchLayout sl(scratch);
  Workspace w;
  w.k = reinterpret_cast<uint16_t*>(sl.take(size_t(d.kv_pad * d.dchunks * 32) * 2));
  w.vt = reinterpret_cast<uint16_t*>(sl.take(size_t(d.kv_pad * d.dtiles * 16) * 2));
  w.qt = reinterpret_cast<uint16_t*>(sl.take(size_t(kRows * d.dchunks * 32) * 2));
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

// K of (b, h) as A tiles: tile (kt, c) = keys [16 kt, 16 kt + 16) x head_dim
// [32 c, 32 c + 32), zero past Lk and D.
void pack_k(const Problem& p, const Dims& d, int64_t b, int64_t h, uint16_t* dst) {
  for (int64_t j = 0; j < d.kv_pad; ++j) {
    uint16_t* out = dst + (j / 16) * d.dchunks * kTileElems + (j % 16) * 32;
    if (j >= p.kv_len) {
      for (int64_t c = 0; c < d.dchunks; ++c)
        _mm512_store_si512(out + c * kTileElems, _mm512_setzero_si512());
      continue;
    }
    const uint16_t* row = row_ptr(p.k, b, j, h);
    for (int64_t c = 0; c < d.dchunks; ++c)
      _mm512_store_si512(out + c * kTileElems,
                         load_words32(row, p.k.stride[3], 32 * c, p.head_dim));
  }
}

// V of (b, h) as A tiles of V^T: tile (ks, dt) row m = head_dim 16 dt + m,
// 32-bit unit u = (V[32 ks + 2u][.], V[32 ks + 2u + 1][.]) (the key pair a
// B row of P^T holds), zero past Lk and D.
void pack_vt(const Problem& p, const Dims& d, int64_t b, int64_t h, uint16_t* dst) {
  for (int64_t ks = 0; ks < d.kv_pad / kPair; ++ks) {
    const uint16_t* rows[kPair];
    for (int64_t r = 0; r < kPair; ++r) {
      const int64_t j = ks * kPair + r;
      rows[r] = j < p.kv_len ? row_ptr(p.v, b, j, h) : nullptr;
    }
    for (int64_t dt = 0; dt < d.dtiles; ++dt) {
      __m512i u[16];  // u[pair][m]: the units of 16 head_dim values
      for (int i = 0; i < 16; ++i) {
        const __m512i lo = rows[2 * i]
                               ? load_words16(rows[2 * i], p.v.stride[3], 16 * dt, p.head_dim)
                               : _mm512_setzero_si512();
        const __m512i hi = rows[2 * i + 1]
                               ? load_words16(rows[2 * i + 1], p.v.stride[3], 16 * dt, p.head_dim)
                               : _mm512_setzero_si512();
        u[i] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
      }
      transpose16(u);
      uint16_t* tile = dst + (ks * d.dtiles + dt) * kTileElems;
      for (int m = 0; m < 16; ++m) _mm512_store_si512(tile + m * 32, u[m]);
    }
  }
}

// Q rows [row0, row0 + 16 * groups) as B tiles of Q^T: tile (g, c) row k =
// head_dim pair (32 c + 2k, 32 c + 2k + 1), column n = query row0 + 16 g + n;
// zero past Lq and D. Negated when the scale is negative, so that the kernel
// only sees positive scales (bf16 negation is exact).
void pack_qt(const Problem& p, const Dims& d, int64_t b, int64_t h, int64_t row0, int64_t groups,
             uint16_t* dst) {
  const __m512i sign = _mm512_set1_epi16(p.scale < 0 ? int16_t(0x8000) : 0);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t c = 0; c < d.dchunks; ++c) {
      __m512i r[16];
      for (int n = 0; n < 16; ++n) {
        const int64_t i = row0 + g * kGroup + n;
        r[n] =
            i < p.q_len
                ? _mm512_xor_si512(
                      load_words32(row_ptr(p.q, b, i, h), p.q.stride[3], 32 * c, p.head_dim), sign)
                : _mm512_setzero_si512();
      }
      transpose16(r);
      uint16_t* tile = dst + (g * d.dchunks + c) * kTileElems;
      for (int k = 0; k < 16; ++k) _mm512_store_si512(tile + k * 32, r[k]);
    }
}

// ---- one work item ----

class TileRun : public amx::WorkItem<TileRun, Workspace, Dims, Queue> {
 public:
  using WorkItem::WorkItem;

  // Q^T tiles of the item's queries (amx::WorkItem).
  void pack_queries(int64_t, int64_t groups) { pack_qt(p_, d_, b_, h_, row0_, groups, w_.qt); }

  // The pipeline's phases (amx::run_pipeline).
  // S^T of step s into buffer `buf`: key tiles x the pair's two groups.
  void push_qk(const Step& s, int buf) {
    amx::push_qk(queue_, s, w_.s[buf], reinterpret_cast<const char*>(w_.k),
                 reinterpret_cast<const char*>(w_.qt), d_.dchunks * kTileElems * 2, d_.dchunks,
                 false);
  }

  // Scores for amx::softmax_step: the raw S^T (bf16 dots) times
  // |scale| * log2(e) (the per-key factor is unused).
  void factors(int64_t, __m512 f[2]) const {
    f[0] = f[1] = _mm512_set1_ps((p_.scale < 0 ? -p_.scale : p_.scale) * kLog2e);
  }
  __m512 key_factor(int64_t) const { return _mm512_setzero_ps(); }
  __m512 raw(const float* t, int64_t) const { return _mm512_load_ps(t); }
  __m512 arg(const float* t, __m512, __m512 f, __m512 shift) const {
    return _mm512_fmsub_ps(_mm512_load_ps(t), f, shift);
  }
  __m512 scaled(const float* t, int64_t, __m512 f) const {
    return _mm512_mul_ps(_mm512_load_ps(t), f);
  }
};

void amx_run(const Problem& p, int64_t begin, int64_t end, void* scratch) {
  const Dims d(p);
  const Workspace w = carve(p, scratch, nullptr);
  amx::run_items(
      p, kRows, begin, end,
      [&](int64_t b, int64_t h) {
        pack_k(p, d, b, h, w.k);
        pack_vt(p, d, b, h, w.vt);
      },
      [&](int64_t b, int64_t h, int64_t row0, bool reverse) {
        TileRun(p, w, d, b, h, row0, reverse).run();
      });
}

bool amx_accepts(const Problem& p) { return p.bf16_inputs && p.head_dim <= kMaxHeadDim; }

}  // namespace

const Kernel kAmxKernel = {"amx", kRows, scratch_bytes, amx_run, amx_accepts};

}  // namespace flick::cpu::attention_detail
