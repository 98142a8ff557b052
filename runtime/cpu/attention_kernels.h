// Internal to the CPU attention op (runtime/cpu/attention*.cpp and its tests).
//
// cpu::attention resolves its Tensor arguments into a Problem (raw pointers
// and element strides), picks a kernel and runs the work items of that kernel
// -- one per (batch, head, query tile) -- over the thread pool. A kernel owns
// its numerics; the driver owns threads and per-thread scratch.
//
// The AVX-512 kernel lives in attention_avx512.cpp and the AMX one in
// attention_amx.cpp, translation units built with AVX-512 (+AMX) flags. To keep AVX-512 code from
// leaking into code that runs on AVX2-only hosts through the linker's choice among identical inline
// definitions, those files call no inline function of another header and
// expose only the plain functions below; shared helpers here are `static`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/backend.h"

namespace flick::cpu::attention_detail {

// A 4-d [B, L, H, D] operand: base pointer and element strides.
struct Operand {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t stride[4] = {0, 0, 0, 0};
};

struct Problem {
  int64_t batch = 0, q_len = 0, kv_len = 0, heads = 0, head_dim = 0;
  float scale = 0;  // resolved: never 0
  Operand q, k, v;
  // out: [B, Lq, H, D], F32 or BF16.
  void* out = nullptr;
  DType out_dtype = DType::F32;
  int64_t out_stride[4] = {0, 0, 0, 0};
  // Optional additive F32 bias [B|1, H|1, Lq, Lk]; broadcast dims have stride 0.
  const float* bias = nullptr;
  int64_t bias_stride[4] = {0, 0, 0, 0};
  // Optional separable bias (AttentionParams::bias_y / bias_x): key j =
  // y * grid_w + x of query i gets bias_y[b, h, i, y] + bias_x[b, h, i, x];
  // strides of b, h, i (0 where broadcast), the last dims contiguous.
  const float* bias_y = nullptr;
  const float* bias_x = nullptr;
  int64_t bias_y_stride[3] = {0, 0, 0}, bias_x_stride[3] = {0, 0, 0};
  int64_t grid_w = 0, grid_h = 0;
  // Optional U8 key padding [B, Lk]; 0 = masked.
  const uint8_t* key_padding = nullptr;
  int64_t key_padding_stride[2] = {0, 0};
  int64_t causal_block = 0;
  // Inputs all BF16: the kernel may use bf16 products (vdpbf16ps). Otherwise
  // it computes in fp32 throughout.
  bool bf16_inputs = false;
};

// 64-byte aligned pieces of a kernel's per-thread scratch, taken one after
// another; with scratch null only counted (used: the kernel's scratch_bytes).
// In an anonymous namespace, as the helpers here are static: each kernel file
// gets its own copy.
namespace {
// The bias terms of one query row: the full bias row (keys strided by
// bias_stride[3]) or the row's separable parts y (grid_h) and x (grid_w);
// all null without a bias.
struct RowBias {
  const float* full = nullptr;
  const float* y = nullptr;
  const float* x = nullptr;
  explicit operator bool() const { return full != nullptr || y != nullptr; }
};
inline RowBias row_bias(const Problem& p, int64_t b, int64_t h, int64_t i) {
  RowBias r;
  if (p.bias) r.full = p.bias + b * p.bias_stride[0] + h * p.bias_stride[1] + i * p.bias_stride[2];
  if (p.bias_y) {
    r.y = p.bias_y + b * p.bias_y_stride[0] + h * p.bias_y_stride[1] + i * p.bias_y_stride[2];
    r.x = p.bias_x + b * p.bias_x_stride[0] + h * p.bias_x_stride[1] + i * p.bias_x_stride[2];
  }
  return r;
}
// The bias of key j (a row with a bias).
inline float bias_at(const Problem& p, const RowBias& r, int64_t j) {
  if (r.full) return r.full[j * p.bias_stride[3]];
  const int64_t y = j / p.grid_w;
  return r.y[y] + r.x[j - y * p.grid_w];
}

struct ScratchLayout {
  explicit ScratchLayout(void* scratch) : at(static_cast<char*>(scratch)) {}
  char* take(size_t n) {
    char* ptr = at == nullptr ? nullptr : at + used;
    used += (n + 63) / 64 * 64;
    return ptr;
  }
  char* at;
  size_t used = 0;
};

// The row state that ends an AVX-512 kernel's workspace W, for r rows:
// row_max [r], row_sum [r][16], alpha [r], key_end [r].
template <class W>
void take_row_state(ScratchLayout& sl, W& w, size_t r) {
  w.row_max = reinterpret_cast<float*>(sl.take(r * 4));
  w.row_sum = reinterpret_cast<float*>(sl.take(r * 64));
  w.alpha = reinterpret_cast<float*>(sl.take(r * 4));
  w.key_end = reinterpret_cast<int64_t*>(sl.take(r * 8));
}
}  // namespace

// Keys [0, end) that query row i may see: Lk, or less under block-causal
// masking, where key j is visible iff floor(j / cb) <= floor((i + Lk - Lq) / cb).
static inline int64_t attention_key_end(const Problem& p, int64_t i) {
  const int64_t cb = p.causal_block;
  if (cb <= 0) return p.kv_len;
  const int64_t pos = i + p.kv_len - p.q_len;
  const int64_t block = pos >= 0 ? pos / cb : -((-pos + cb - 1) / cb);
  const int64_t end = (block + 1) * cb;
  return end < 0 ? 0 : (end > p.kv_len ? p.kv_len : end);
}

// The query tile of work item n of one (batch, head) with `tiles` tiles:
// first and last tiles alternate, so that contiguous ranges of items carry
// similar block-causal work.
static inline int64_t balanced_tile(int64_t n, int64_t tiles) {
  return n % 2 == 0 ? n / 2 : tiles - 1 - n / 2;
}

// A kernel processes work items [begin, end) of the B * H * ceil(Lq /
// tile_rows) items, item = (b * H + h) * tiles + tile, with a per-thread
// scratch of scratch_bytes(p) bytes (64-byte aligned).
struct Kernel {
  const char* name;
  int64_t tile_rows;
  size_t (*scratch_bytes)(const Problem& p);
  void (*run)(const Problem& p, int64_t begin, int64_t end, void* scratch);
  // Problems the kernel computes; null: all of them.
  bool (*accepts)(const Problem& p);
};

// Flash-style AMX-BF16 kernel (Sapphire Rapids and later) for BF16 q/k/v:
// both products on the tile unit, the online softmax in AVX-512.
extern const Kernel kAmxKernel;
// Flash-style AVX-512 kernel: bf16 inputs through vdpbf16ps (P rounded to
// bf16 for the P.V product), anything else through fp32 FMA.
extern const Kernel kAvx512Kernel;
// kAvx512Kernel's arithmetic for short key sequences (Lk <= kShortKeys, one
// key vector) without its per-tile setup; bit-identical to it there.
inline constexpr int64_t kShortKeys = 16;
extern const Kernel kAvx512ShortKernel;
// Flash-style AVX-512 kernel for narrow heads (head_dim <= 32) without bias,
// padding or causal mask, computed transposed (lanes over queries): the
// general kernel's numerics, its products on fuller register tiles
// (attention_narrow_avx512.cpp).
extern const Kernel kAvx512NarrowKernel;
// Blocked fp32 kernel for hosts without AVX-512 BF16 (compiled for AVX2).
extern const Kernel kPortableKernel;

// True when the host runs kAvx512Kernel (AVX-512 F/BW/VL/DQ + BF16).
bool avx512_bf16_supported();
// True when the host runs kAmxKernel: AVX-512 BF16, CPUID AMX-TILE and
// AMX-BF16, and Linux granted this process the tile data state
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), asked once).
bool amx_bf16_supported();

// The checked, resolved problem of cpu::attention's arguments.
Problem resolve_problem(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                        const AttentionParams& p);
static inline bool kernel_accepts(const Kernel& kernel, const Problem& p) {
  return kernel.accepts == nullptr || kernel.accepts(p);
}
// Runs `kernel` over every (batch, head, query tile) work item of p on the
// thread pool, each thread with its scratch, after checking that the host
// runs it (`host_runs`) and that it takes p; `op` names the op in errors.
void run_kernel_items(const char* op, const Kernel& kernel, const Problem& p, bool host_runs);
// The kernel cpu::attention runs for p on this host: AMX where the host has
// it, the kernel accepts p and p is not tiny (under 8 queries and under 64
// keys), else the short-key AVX-512 one for Lk <= kShortKeys, else the
// narrow-head one where it accepts p and both lengths are >= 256, else the
// general AVX-512 one; without AVX-512 BF16 the portable one.
const Kernel& select_kernel(const Problem& p);
// Each batch's visible keys where cpu::attention runs p on those alone
// rather than on select_kernel(p) with its key padding: a key padding, no
// bias or causal mask, and every batch seeing some key. Empty otherwise.
std::vector<std::vector<int64_t>> visible_keys(const Problem& p);

// cpu::attention with a chosen kernel, which must accept the problem (tests
// and benchmarks run every path).
void attention_with(const Kernel& kernel, const Tensor& q, const Tensor& k, const Tensor& v,
                    Tensor& out, const AttentionParams& p);

}  // namespace flick::cpu::attention_detail
