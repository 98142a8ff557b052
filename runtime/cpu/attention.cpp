// cpu::attention: argument checks, kernel choice at run time (AMX for BF16
// inputs where the host has it, AVX-512 BF16 where it has that, else the
// portable blocked fp32 kernel below), and the parallel loop over (batch,
// head, query tile) work items.
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <xmmintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/cpu/attention_kernels.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/ops.h"
#include "runtime/dtype.h"
#include "runtime/ref/ops.h"
#include "runtime/threads.h"

namespace flick::cpu {
namespace attention_detail {
namespace {

// ---- portable kernel: the same flash-style walk in plain fp32 loops (P rounded
// to bf16 for BF16 inputs, like the other kernels), written
// so that GCC vectorises them for AVX2 (inner loops over keys or over head_dim,
// four query rows per pass so each K/V element loaded serves four rows) ----

constexpr int64_t kRows = 32;  // queries per tile (a multiple of kRowBlock)
constexpr int64_t kCols = 64;  // keys per block
constexpr int64_t kRowBlock = 4;
constexpr float kLog2e = 1.44269504088896340736f;

size_t align64(size_t n) { return (n + 63) / 64 * 64; }

// Padded sizes: keys and head_dim rounded up to kLanes (zeros in the padding),
// so the register tiles below never need a tail.
constexpr int64_t kLanes = 16;
int64_t padded(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

struct PortableWorkspace {
  float* kt;  // [D][padded(Lk)]: K transposed, so the Q.K^T inner loop runs over keys
  float* v;   // [Lk][padded(D)]
  float* q;   // [kRows][D], rows past the tile zero
  float* o;   // [kRows][padded(D)]
  float* s;   // [kRows][kCols], scores then weights
  float* row_max;
  float* row_sum;
  float* alpha;
};

size_t portable_scratch_bytes(const Problem& p) {
  const size_t d = size_t(padded(p.head_dim)), lk = size_t(padded(p.kv_len));
  return align64(d * lk * 4) * 2 + align64(kRows * d * 4) * 2 + align64(kRows * kCols * 4) +
         align64(kRows * 4) * 3;
}

PortableWorkspace carve_portable(const Problem& p, void* scratch) {
  const size_t d = size_t(padded(p.head_dim)), lk = size_t(padded(p.kv_len));
  char* at = static_cast<char*>(scratch);
  auto take = [&at](size_t bytes) {
    float* r = reinterpret_cast<float*>(at);
    at += align64(bytes);
    return r;
  };
  PortableWorkspace w;
  w.kt = take(d * lk * 4);
  w.v = take(d * lk * 4);
  w.q = take(kRows * d * 4);
  w.o = take(kRows * d * 4);
  w.s = take(kRows * kCols * 4);
  w.row_max = take(kRows * 4);
  w.row_sum = take(kRows * 4);
  w.alpha = take(kRows * 4);
  return w;
}

// Row (b, l, h) of an operand read as fp32 into dst[n].
void load_row(const Operand& t, int64_t b, int64_t l, int64_t h, int64_t n, float* dst) {
  const int64_t base = b * t.stride[0] + l * t.stride[1] + h * t.stride[2];
  for (int64_t e = 0; e < n; ++e) dst[e] = load_as_f32(t.dtype, t.data, base + e * t.stride[3]);
}

// 2^x for x <= 0, branch-free so that loops over it vectorise: Cephes exp2f's
// degree-6 polynomial on [-0.5, 0.5] times 2^round(x); x <= -127 gives 0.
inline float exp2_nonpositive(float x) {
  x = x < -127.f ? -127.f : x;
  const float n = std::floor(x + 0.5f);
  const float f = x - n;
  float p = 1.535336188319500e-4f;
  p = p * f + 1.339887440266574e-3f;
  p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f;
  p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f;
  p = p * f + 1.f;
  const int32_t biased = static_cast<int32_t>(n) + 127;  // 0 encodes +0
  return p * std::bit_cast<float>(static_cast<uint32_t>(biased) << 23);
}

// 8 floats as a GCC vector: ISA-neutral source that the baseline flags turn
// into AVX2 registers, so the tiles below stay in registers.
using F8 = float __attribute__((vector_size(32)));
F8 load8(const float* x) {
  F8 v;
  std::memcpy(&v, x, sizeof v);
  return v;
}
void store8(float* x, F8 v) { std::memcpy(x, &v, sizeof v); }

// S rows [r, r + 4) = Q K^T over keys [key0, key0 + n), in register tiles of
// 4 rows x 16 keys accumulated over the whole head_dim.
void portable_scores(const Problem& p, const PortableWorkspace& w, int64_t r, int64_t key0,
                     int64_t n) {
  const int64_t D = p.head_dim, ldk = padded(p.kv_len);
  const float* q = w.q + r * D;
  for (int64_t j0 = 0; j0 < n; j0 += kLanes) {
    F8 acc[kRowBlock][2] = {};
    const float* kt = w.kt + key0 + j0;
    for (int64_t e = 0; e < D; ++e) {
      const F8 k0 = load8(kt + e * ldk), k1 = load8(kt + e * ldk + 8);
      for (int rr = 0; rr < kRowBlock; ++rr) {
        const float qe = q[rr * D + e];
        acc[rr][0] += qe * k0;
        acc[rr][1] += qe * k1;
      }
    }
    for (int rr = 0; rr < kRowBlock; ++rr) {
      store8(w.s + (r + rr) * kCols + j0, acc[rr][0]);
      store8(w.s + (r + rr) * kCols + j0 + 8, acc[rr][1]);
    }
  }
}

// Max and sum of x[0, n) in 8 independent lanes, so that GCC vectorises them
// (a single running value would force strict left-to-right order).
float max_of(const float* x, int64_t n) {
  float lane[8];
  std::fill(lane, lane + 8, -std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) lane[l] = std::max(lane[l], x[j + l]);
  for (; j < n; ++j) lane[0] = std::max(lane[0], x[j]);
  return *std::max_element(lane, lane + 8);
}

float sum_of(const float* x, int64_t n) {
  float lane[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) lane[l] += x[j + l];
  for (; j < n; ++j) lane[0] += x[j];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// Scale, mask and online-softmax update of row r over keys [key0, key0 + n):
// S row becomes P, alpha[r] the factor O's row must be rescaled by.
void portable_softmax_row(const Problem& p, const PortableWorkspace& w, int64_t b, int64_t h,
                          int64_t row0, int64_t r, int64_t key0, int64_t n) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const int64_t i = row0 + r;
  const int64_t visible = attention_key_end(p, i) - key0;
  float* s = w.s + r * kCols;
  const float score_scale = p.scale * kLog2e;  // scores in log2 units
  for (int64_t j = 0; j < n; ++j) s[j] *= score_scale;
  if (const RowBias bias = row_bias(p, b, h, i))
    for (int64_t j = 0; j < n; ++j) s[j] += kLog2e * bias_at(p, bias, key0 + j);
  for (int64_t j = std::max<int64_t>(visible, 0); j < n; ++j) s[j] = neg_inf;
  if (p.key_padding) {
    const uint8_t* pad = p.key_padding + b * p.key_padding_stride[0];
    for (int64_t j = 0; j < n; ++j)
      if (pad[(key0 + j) * p.key_padding_stride[1]] == 0) s[j] = neg_inf;
  }
  const float new_max = std::max(w.row_max[r], max_of(s, n));
  const float shift = new_max == neg_inf ? 0.f : new_max;  // keeps 2^(-inf - shift) = 0
  for (int64_t j = 0; j < n; ++j) s[j] = exp2_nonpositive(s[j] - shift);
  w.alpha[r] = exp2_nonpositive(w.row_max[r] - shift);
  w.row_sum[r] = w.row_sum[r] * w.alpha[r] + sum_of(s, n);
  w.row_max[r] = new_max;
  // BF16 inputs: P goes into P.V rounded to bf16 while the normaliser keeps the
  // fp32 sum, as in the AVX-512 and AMX kernels and PyTorch's bf16 attention,
  // so a CPU without AVX-512 gives the same numbers up to fp32 order.
  if (p.bf16_inputs)
    for (int64_t j = 0; j < n; ++j) s[j] = round_bf16(s[j]);
}

// O rows [r, r + 4) = O * alpha + P V over keys [key0, key0 + n), in register
// tiles of 4 rows x 16 head_dim lanes accumulated over the keys.
void portable_accumulate(const Problem& p, const PortableWorkspace& w, int64_t r, int64_t key0,
                         int64_t n) {
  const int64_t ldv = padded(p.head_dim);
  const float* s = w.s + r * kCols;
  for (int64_t e0 = 0; e0 < ldv; e0 += kLanes) {
    F8 acc[kRowBlock][2];
    for (int rr = 0; rr < kRowBlock; ++rr) {
      const float* o = w.o + (r + rr) * ldv + e0;
      acc[rr][0] = load8(o) * w.alpha[r + rr];
      acc[rr][1] = load8(o + 8) * w.alpha[r + rr];
    }
    const float* v = w.v + key0 * ldv + e0;
    for (int64_t j = 0; j < n; ++j) {
      const F8 v0 = load8(v + j * ldv), v1 = load8(v + j * ldv + 8);
      for (int rr = 0; rr < kRowBlock; ++rr) {
        const float pj = s[rr * kCols + j];
        acc[rr][0] += pj * v0;
        acc[rr][1] += pj * v1;
      }
    }
    for (int rr = 0; rr < kRowBlock; ++rr) {
      store8(w.o + (r + rr) * ldv + e0, acc[rr][0]);
      store8(w.o + (r + rr) * ldv + e0 + 8, acc[rr][1]);
    }
  }
}

void portable_tile(const Problem& p, const PortableWorkspace& w, int64_t b, int64_t h,
                   int64_t row0) {
  const int64_t D = p.head_dim;
  const int64_t rows = std::min(kRows, p.q_len - row0);
  const int64_t padded_rows = (rows + kRowBlock - 1) / kRowBlock * kRowBlock;
  int64_t tile_key_end = 0;
  for (int64_t r = 0; r < padded_rows; ++r) {
    w.row_max[r] = -std::numeric_limits<float>::infinity();
    w.row_sum[r] = 0.f;
    w.alpha[r] = 1.f;
    if (r < rows) {
      load_row(p.q, b, row0 + r, h, D, w.q + r * D);
      tile_key_end = std::max(tile_key_end, attention_key_end(p, row0 + r));
    } else {
      std::fill(w.q + r * D, w.q + (r + 1) * D, 0.f);
    }
  }
  std::fill(w.o, w.o + padded_rows * padded(D), 0.f);

  for (int64_t key0 = 0; key0 < tile_key_end; key0 += kCols) {
    const int64_t n = std::min(kCols, tile_key_end - key0);
    for (int64_t r = 0; r < padded_rows; r += kRowBlock) {
      portable_scores(p, w, r, key0, n);
      for (int64_t rr = r; rr < std::min(r + kRowBlock, rows); ++rr)
        portable_softmax_row(p, w, b, h, row0, rr, key0, n);
      for (int64_t rr = rows; rr < r + kRowBlock; ++rr)  // padding rows: P = 0
        std::fill(w.s + rr * kCols, w.s + rr * kCols + n, 0.f);
      portable_accumulate(p, w, r, key0, n);
    }
  }

  const int64_t esize = int64_t(dtype_size(p.out_dtype));
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = w.row_sum[r] > 0.f ? 1.f / w.row_sum[r] : 0.f;
    char* dst = static_cast<char*>(p.out) +
                (b * p.out_stride[0] + (row0 + r) * p.out_stride[1] + h * p.out_stride[2]) * esize;
    for (int64_t e = 0; e < D; ++e)
      store_from_f32(p.out_dtype, dst, e * p.out_stride[3], w.o[r * padded(D) + e] * inv);
  }
}

void portable_run(const Problem& p, int64_t begin, int64_t end, void* scratch) {
  const PortableWorkspace w = carve_portable(p, scratch);
  const int64_t tiles = (p.q_len + kRows - 1) / kRows;
  int64_t packed = -1;  // (b, h) whose K/V are in the workspace
  for (int64_t item = begin; item < end; ++item) {
    const int64_t bh = item / tiles, tile = item % tiles;
    const int64_t b = bh / p.heads, h = bh % p.heads;
    if (bh != packed) {
      const int64_t D = p.head_dim, ldk = padded(p.kv_len), ldv = padded(D);
      std::fill(w.kt, w.kt + D * ldk, 0.f);
      std::fill(w.v, w.v + p.kv_len * ldv, 0.f);
      for (int64_t j = 0; j < p.kv_len; ++j) {
        const int64_t base = b * p.k.stride[0] + j * p.k.stride[1] + h * p.k.stride[2];
        for (int64_t e = 0; e < D; ++e)
          w.kt[e * ldk + j] = load_as_f32(p.k.dtype, p.k.data, base + e * p.k.stride[3]);
        load_row(p.v, b, j, h, D, w.v + j * ldv);
      }
      packed = bh;
    }
    portable_tile(p, w, b, h, tile * kRows);
  }
}

Operand operand(const Tensor& t) {
  Operand o;
  o.data = t.data;
  o.dtype = t.dtype;
  for (int i = 0; i < 4; ++i) o.stride[i] = t.stride(i);
  return o;
}

bool is_input_dtype(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

}  // namespace

Problem resolve_problem(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                        const AttentionParams& a) {
  FLICK_CHECK(q.ndim() == 4 && k.ndim() == 4 && v.ndim() == 4 && out.ndim() == 4,
              "attention: q, k, v, out must be [B, L, H, D]");
  Problem p;
  p.batch = q.dim(0);
  p.q_len = q.dim(1);
  p.heads = q.dim(2);
  p.head_dim = q.dim(3);
  p.kv_len = k.dim(1);
  FLICK_CHECK(k.shape == Shape({p.batch, p.kv_len, p.heads, p.head_dim}) && v.shape == k.shape,
              "attention: k/v " + k.shape.str() + "/" + v.shape.str() + " vs q " + q.shape.str());
  FLICK_CHECK(out.shape == q.shape, "attention: out " + out.shape.str() + " vs q " + q.shape.str());
  FLICK_CHECK(is_input_dtype(q.dtype) && is_input_dtype(k.dtype) && is_input_dtype(v.dtype),
              "attention: q, k, v must be F32, BF16 or F16");
  FLICK_CHECK(out.dtype == DType::F32 || out.dtype == DType::BF16,
              "attention: out must be F32 or BF16");
  FLICK_CHECK(q.device == Device::CPU && k.device == Device::CPU && v.device == Device::CPU &&
                  out.device == Device::CPU,
              "attention: cpu backend given a non-CPU tensor");
  p.scale = a.scale != 0.f ? a.scale : 1.f / std::sqrt(static_cast<float>(p.head_dim));
  p.q = operand(q);
  p.k = operand(k);
  p.v = operand(v);
  p.out = out.data;
  p.out_dtype = out.dtype;
  for (int i = 0; i < 4; ++i) p.out_stride[i] = out.stride(i);
  if (!a.bias.empty()) {
    const Tensor& bias = a.bias;
    FLICK_CHECK(bias.dtype == DType::F32 && bias.ndim() == 4 &&
                    (bias.dim(0) == 1 || bias.dim(0) == p.batch) &&
                    (bias.dim(1) == 1 || bias.dim(1) == p.heads) && bias.dim(2) == p.q_len &&
                    bias.dim(3) == p.kv_len,
                "attention: bias must be F32 [B|1, H|1, Lq, Lk], got " + bias.str());
    p.bias = bias.ptr<float>();
    for (int i = 0; i < 4; ++i) p.bias_stride[i] = bias.dim(i) == 1 ? 0 : bias.stride(i);
  }
  if (const int64_t w =
          ref::check_separable_bias("attention", a, p.batch, p.heads, p.q_len, p.kv_len)) {
    const Tensor &by = a.bias_y, &bx = a.bias_x;
    p.bias_y = by.ptr<float>();
    p.bias_x = bx.ptr<float>();
    for (int i = 0; i < 3; ++i) {
      p.bias_y_stride[i] = by.dim(i) == 1 ? 0 : by.stride(i);
      p.bias_x_stride[i] = bx.dim(i) == 1 ? 0 : bx.stride(i);
    }
    p.grid_w = w;
    p.grid_h = p.kv_len / w;
  }
  if (!a.key_padding.empty()) {
    const Tensor& kp = a.key_padding;
    FLICK_CHECK(kp.dtype == DType::U8 && kp.shape == Shape({p.batch, p.kv_len}),
                "attention: key_padding must be U8 [B, Lk], got " + kp.str());
    p.key_padding = kp.ptr<uint8_t>();
    p.key_padding_stride[0] = kp.stride(0);
    p.key_padding_stride[1] = kp.stride(1);
  }
  FLICK_CHECK(a.causal_block >= 0, "attention: negative causal_block");
  p.causal_block = a.causal_block;
  p.bf16_inputs = q.dtype == DType::BF16 && k.dtype == DType::BF16 && v.dtype == DType::BF16;
  return p;
}

namespace {

// Per-thread scratch, grown to the largest problem this thread has run and
// then reused: the steady state does not allocate.
HostBuffer& thread_scratch(size_t bytes) {
  thread_local HostBuffer buffer;
  if (buffer.size() < bytes) buffer = HostBuffer(bytes);
  return buffer;
}

bool host_runs(const Kernel& kernel) {
  if (&kernel == &kAmxKernel) return amx_bf16_supported();  // also asks for the tile state
  if (&kernel == &kAvx512Kernel || &kernel == &kAvx512ShortKernel ||
      &kernel == &kAvx512NarrowKernel)
    return avx512_bf16_supported();
  return true;
}

void run_kernel(const Kernel& kernel, const Problem& p) {
  run_kernel_items("attention", kernel, p, host_runs(kernel));
}

// MXCSR's flush-to-zero and denormals-are-zero for as long as a kernel runs
// on a thread. Keys masked out (-inf) and scores more than 126 (log2 units)
// below a row's max make the softmax's 2^x underflow, and an Intel core
// finishes each vector whose result underflows in a microcode assist unless
// FTZ is set: on an Emerald Rapids vscalefps went from 1.4 to 98 ns a vector,
// and the fusion encoder's text cross-attention (74 of 78 keys padding) from
// 2.0 to 16.6 ms on AMX. The weights flushed are below 2^-126 while a row's
// largest is >= 1, so no output moves by a representable amount; bf16 dot
// products (vdpbf16ps, tdpbf16ps) flush denormals whatever MXCSR says.
class FlushDenormals {
 public:
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtz | kDaz); }
  ~FlushDenormals() { _mm_setcsr(saved_); }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  static constexpr unsigned kFtz = 1u << 15, kDaz = 1u << 6;
  unsigned saved_;
};

}  // namespace

void run_kernel_items(const char* op, const Kernel& kernel, const Problem& p, bool host_runs) {
  FLICK_CHECK(host_runs, std::string(op) + ": this CPU cannot run kernel " + kernel.name);
  FLICK_CHECK(kernel_accepts(kernel, p),
              std::string(op) + ": kernel " + kernel.name + " does not take this problem");
  const int64_t tiles = (p.q_len + kernel.tile_rows - 1) / kernel.tile_rows;
  const int64_t items = p.batch * p.heads * tiles;
  const size_t bytes = kernel.scratch_bytes(p);
  parallel_for(items, [&](int64_t begin, int64_t end) {
    const FlushDenormals ftz;
    kernel.run(p, begin, end, thread_scratch(bytes).data());
  });
}

const Kernel kPortableKernel = {"portable", kRows, portable_scratch_bytes, portable_run, nullptr};

bool avx512_bf16_supported() {
  static const bool supported =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bf16");
  return supported;
}

bool amx_bf16_supported() {
  static const bool supported = [] {
    unsigned a, b, c, d;
    if (!avx512_bf16_supported() || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    constexpr unsigned kAmxBf16 = 1u << 22, kAmxTile = 1u << 24;  // CPUID.(7,0):EDX
    if ((d & kAmxBf16) == 0 || (d & kAmxTile) == 0) return false;
    // Linux hands out the 8 KB tile state only on request (per process, once).
    constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return supported;
}

namespace {

// AMX for every BF16 problem it takes, except tiny ones: with under 8
// queries and under 64 keys per (batch, head) its per-item setup (packing K,
// V^T and Q^T into tiles, padding both lengths to 32) costs more than the
// vdpbf16ps kernels' whole work. Measured on Sapphire Rapids, 2 threads, on a
// shared machine: Matrix-Game's mouse attention (880 x 16 heads of 3 queries
// x 6 keys) 39 ms on AMX, 36 ms on the general AVX-512 kernel, 20 ms on the
// short-key one; its keyboard attention (2640 queries x 6 keys x 16 heads)
// 2.6 ms on AMX, 4.9 ms short-key, 6.5 ms general.
bool amx_pays_off(const Problem& p) { return p.q_len >= 8 || p.kv_len >= 64; }

// The narrow-head kernel wins on long sequences both ways; its per-tile costs
// (64-query tiles, Q^T packed and O^T transposed back per tile, K and V^T
// packed per head) lose where either is short. One core of a Zen 4 (thread
// CPU time, `flick bench --filter "sam3"`), general -> narrow: EfficientSAM3's
// 5184 x 5184 self-attention bf16 199 -> 168 ms, f32 329 -> 300 ms; its 201
// queries x 5184 keys bf16 8.4 -> 10.5 ms; 5184 queries x 78 text tokens
// f32 7.4 -> 8.9 ms (bf16 4.3 -> 3.9). Since its last query tile runs on
// the vectors it fills and V^T is packed by transposes, it also wins in f32
// at the decoder's 201 queries x 5184 keys (Emerald Rapids, 2 threads, five
// alternated runs: plain 6.1-11.1 -> 4.7-10.2 ms, with the boxRPB bias
// 6.9-12.2 -> 5.9-9.1 ms); in bf16 (vdpbf16ps, the Zen path) it was level
// with the general kernel there, which Zen 4 measured faster before, so bf16
// keeps the 256-query bound. A full bias it transposes per key block element
// by element (no model gives it one): those stay on the general kernel.
bool narrow_pays_off(const Problem& p) {
  const int64_t min_queries = p.bf16_inputs ? 256 : 192;
  return p.q_len >= min_queries && p.kv_len >= 256 && p.bias == nullptr;
}

}  // namespace

const Kernel& select_kernel(const Problem& p) {
  if (!avx512_bf16_supported()) return kPortableKernel;
  // ONEDNN_MAX_CPU_ISA below AMX turns flick's AMX kernels off too (gemm.h).
  if (amx_bf16_supported() && amx_not_capped() && kernel_accepts(kAmxKernel, p) && amx_pays_off(p))
    return kAmxKernel;
  if (kernel_accepts(kAvx512ShortKernel, p)) return kAvx512ShortKernel;
  if (kernel_accepts(kAvx512NarrowKernel, p) && narrow_pays_off(p)) return kAvx512NarrowKernel;
  return kAvx512Kernel;
}

void attention_with(const Kernel& kernel, const Tensor& q, const Tensor& k, const Tensor& v,
                    Tensor& out, const AttentionParams& a) {
  run_kernel(kernel, resolve_problem(q, k, v, out, a));
}

namespace {

// Rows `keys` of batch b of a K or V operand, copied to dst as [n, H, D].
Operand gather_keys(const Operand& src, int64_t b, const std::vector<int64_t>& keys, int64_t heads,
                    int64_t dim, char* dst) {
  const int64_t es = static_cast<int64_t>(dtype_size(src.dtype));
  const auto* base = static_cast<const char*>(src.data);
  for (size_t r = 0; r < keys.size(); ++r)
    for (int64_t h = 0; h < heads; ++h) {
      const char* row =
          base + (b * src.stride[0] + keys[r] * src.stride[1] + h * src.stride[2]) * es;
      char* to = dst + (static_cast<int64_t>(r) * heads + h) * dim * es;
      if (src.stride[3] == 1)
        std::memcpy(to, row, static_cast<size_t>(dim * es));
      else
        for (int64_t e = 0; e < dim; ++e)
          std::memcpy(to + e * es, row + e * src.stride[3] * es, static_cast<size_t>(es));
    }
  Operand o;
  o.data = dst;
  o.dtype = src.dtype;
  const int64_t n = static_cast<int64_t>(keys.size());
  o.stride[0] = n * heads * dim;
  o.stride[1] = heads * dim;
  o.stride[2] = dim;
  o.stride[3] = 1;
  return o;
}

}  // namespace

std::vector<std::vector<int64_t>> visible_keys(const Problem& p) {
  if (p.key_padding == nullptr || p.bias != nullptr || p.bias_y != nullptr || p.causal_block > 0)
    return {};
  std::vector<std::vector<int64_t>> visible(static_cast<size_t>(p.batch));
  for (int64_t b = 0; b < p.batch; ++b) {
    auto& keys = visible[static_cast<size_t>(b)];
    for (int64_t j = 0; j < p.kv_len; ++j)
      if (p.key_padding[b * p.key_padding_stride[0] + j * p.key_padding_stride[1]] != 0)
        keys.push_back(j);
    if (keys.empty()) return {};
  }
  return visible;
}

namespace {

// Keys that the key padding hides from every query of a batch take no part
// in its softmax, yet a kernel scores them all and weighs them by 2^-inf.
// Run without them (visible_keys): each batch on a copy of its visible K and
// V rows (no padding left, so any kernel may take it), or with the padding
// dropped where every key is visible. EfficientSAM3's text cross-attentions
// see 4 of 78 prompt tokens for a one-word prompt. Only the summation order
// moves (the same visible keys, the same products). Problems with a bias or
// a causal mask (both indexed by key position) and batches with no visible
// key (zeros, as the kernels write them) keep the kernels' own masking.
bool run_visible_keys(const Problem& p) {
  const std::vector<std::vector<int64_t>> visible = visible_keys(p);
  if (visible.empty()) return false;
  bool every_key = true;
  for (const auto& keys : visible)
    every_key = every_key && static_cast<int64_t>(keys.size()) == p.kv_len;
  if (every_key) {
    Problem all = p;
    all.key_padding = nullptr;
    run_kernel(select_kernel(all), all);
    return true;
  }
  thread_local HostBuffer copies;  // grown once, like thread_scratch
  const size_t ke = dtype_size(p.k.dtype), ve = dtype_size(p.v.dtype);
  const size_t row = static_cast<size_t>(p.heads * p.head_dim);
  const size_t k_bytes = (static_cast<size_t>(p.kv_len) * row * ke + 63) / 64 * 64;
  const size_t bytes = k_bytes + static_cast<size_t>(p.kv_len) * row * ve;
  if (copies.size() < bytes) copies = HostBuffer(bytes);
  auto* buf = static_cast<char*>(copies.data());
  for (int64_t b = 0; b < p.batch; ++b) {
    const auto& keys = visible[static_cast<size_t>(b)];
    Problem one = p;
    one.batch = 1;
    one.kv_len = static_cast<int64_t>(keys.size());
    one.key_padding = nullptr;
    one.q.data = static_cast<const char*>(p.q.data) +
                 b * p.q.stride[0] * static_cast<int64_t>(dtype_size(p.q.dtype));
    one.out = static_cast<char*>(p.out) +
              b * p.out_stride[0] * static_cast<int64_t>(dtype_size(p.out_dtype));
    one.k = gather_keys(p.k, b, keys, p.heads, p.head_dim, buf);
    one.v = gather_keys(p.v, b, keys, p.heads, p.head_dim, buf + k_bytes);
    run_kernel(select_kernel(one), one);
  }
  return true;
}

}  // namespace

}  // namespace attention_detail

void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
               const AttentionParams& p) {
  using namespace attention_detail;
  const Problem problem = resolve_problem(q, k, v, out, p);
  if (!run_visible_keys(problem)) run_kernel(select_kernel(problem), problem);
}

}  // namespace flick::cpu
