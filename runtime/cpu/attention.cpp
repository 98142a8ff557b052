// cpu::attention: argument checks, kernel choice at run time (AVX-512 BF16
// when the host has it, else the portable blocked fp32 kernel below), and the
// parallel loop over (batch, head, query tile) work items.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/cpu/attention_kernels.h"
#include "runtime/cpu/ops.h"
#include "runtime/threads.h"

namespace flick::cpu {
namespace attention_detail {
namespace {

// ---- portable kernel: the same flash-style walk in plain fp32 loops that the
// compiler vectorises for AVX2 ----

constexpr int64_t kRows = 32;  // queries per tile
constexpr int64_t kCols = 64;  // keys per block

size_t align64(size_t n) { return (n + 63) / 64 * 64; }

struct PortableWorkspace {
  float* kt;  // [D][Lk]: K transposed, so the Q.K^T inner loop runs over keys
  float* v;   // [Lk][D]
  float* q;   // [kRows][D]
  float* s;   // [kRows][kCols], scores then weights
  float* o;   // [kRows][D]
  float* row_max;
  float* row_sum;
};

size_t portable_scratch_bytes(const Problem& p) {
  const size_t d = size_t(p.head_dim), lk = size_t(p.kv_len);
  return align64(d * lk * 4) * 2 + align64(kRows * d * 4) * 2 + align64(kRows * kCols * 4) +
         align64(kRows * 4) * 2;
}

PortableWorkspace carve_portable(const Problem& p, void* scratch) {
  const size_t d = size_t(p.head_dim), lk = size_t(p.kv_len);
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
  return w;
}

// Row (b, l, h) of an operand read as fp32 into dst[D].
void load_row(const Operand& t, int64_t b, int64_t l, int64_t h, int64_t n, float* dst) {
  const int64_t base = b * t.stride[0] + l * t.stride[1] + h * t.stride[2];
  for (int64_t e = 0; e < n; ++e) dst[e] = load_as_f32(t.dtype, t.data, base + e * t.stride[3]);
}

void portable_tile(const Problem& p, const PortableWorkspace& w, int64_t b, int64_t h,
                   int64_t row0) {
  const int64_t D = p.head_dim, Lk = p.kv_len;
  const int64_t rows = std::min(kRows, p.q_len - row0);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  int64_t tile_key_end = 0;
  for (int64_t r = 0; r < rows; ++r) {
    load_row(p.q, b, row0 + r, h, D, w.q + r * D);
    tile_key_end = std::max(tile_key_end, attention_key_end(p, row0 + r));
    w.row_max[r] = neg_inf;
    w.row_sum[r] = 0.f;
  }
  std::fill(w.o, w.o + rows * D, 0.f);

  for (int64_t key0 = 0; key0 < tile_key_end; key0 += kCols) {
    const int64_t n = std::min(kCols, tile_key_end - key0);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = row0 + r;
      float* s = w.s + r * kCols;
      // S row = Q[r] . K^T over the block.
      std::fill(s, s + n, 0.f);
      for (int64_t e = 0; e < D; ++e) {
        const float qe = w.q[r * D + e];
        const float* kt = w.kt + e * Lk + key0;
        for (int64_t j = 0; j < n; ++j) s[j] += qe * kt[j];
      }
      // Scale, mask, and the online-softmax update.
      const int64_t visible = attention_key_end(p, i) - key0;
      float block_max = neg_inf;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t key = key0 + j;
        float x = s[j] * p.scale;
        if (p.bias)
          x += p.bias[b * p.bias_stride[0] + h * p.bias_stride[1] + i * p.bias_stride[2] +
                      key * p.bias_stride[3]];
        const bool masked =
            j >= visible ||
            (p.key_padding &&
             p.key_padding[b * p.key_padding_stride[0] + key * p.key_padding_stride[1]] == 0);
        s[j] = masked ? neg_inf : x;
        block_max = std::max(block_max, s[j]);
      }
      const float new_max = std::max(w.row_max[r], block_max);
      const float shift = new_max == neg_inf ? 0.f : new_max;
      const float alpha = std::exp(w.row_max[r] - shift);
      float sum = 0.f;
      for (int64_t j = 0; j < n; ++j) {
        s[j] = std::exp(s[j] - shift);  // exp(-inf) = 0 for masked keys
        sum += s[j];
      }
      w.row_sum[r] = w.row_sum[r] * alpha + sum;
      w.row_max[r] = new_max;
      // O row = O * alpha + P V.
      float* o = w.o + r * D;
      for (int64_t e = 0; e < D; ++e) o[e] *= alpha;
      for (int64_t j = 0; j < n; ++j) {
        const float pj = s[j];
        if (pj == 0.f) continue;
        const float* vj = w.v + (key0 + j) * D;
        for (int64_t e = 0; e < D; ++e) o[e] += pj * vj[e];
      }
    }
  }

  const int64_t esize = int64_t(dtype_size(p.out_dtype));
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = w.row_sum[r] > 0.f ? 1.f / w.row_sum[r] : 0.f;
    char* dst = static_cast<char*>(p.out) +
                (b * p.out_stride[0] + (row0 + r) * p.out_stride[1] + h * p.out_stride[2]) * esize;
    for (int64_t e = 0; e < D; ++e)
      store_from_f32(p.out_dtype, dst, e * p.out_stride[3], w.o[r * D + e] * inv);
  }
}

void portable_run(const Problem& p, int64_t begin, int64_t end, void* scratch) {
  const PortableWorkspace w = carve_portable(p, scratch);
  const int64_t tiles = (p.q_len + kRows - 1) / kRows;
  int64_t packed = -1;
  for (int64_t item = begin; item < end; ++item) {
    const int64_t bh = item / tiles, tile = item % tiles;
    const int64_t b = bh / p.heads, h = bh % p.heads;
    if (bh != packed) {
      for (int64_t j = 0; j < p.kv_len; ++j) {
        const int64_t base = b * p.k.stride[0] + j * p.k.stride[1] + h * p.k.stride[2];
        for (int64_t e = 0; e < p.head_dim; ++e)
          w.kt[e * p.kv_len + j] = load_as_f32(p.k.dtype, p.k.data, base + e * p.k.stride[3]);
        load_row(p.v, b, j, h, p.head_dim, w.v + j * p.head_dim);
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

Problem make_problem(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
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

// Per-thread scratch, grown to the largest problem this thread has run and
// then reused: the steady state does not allocate.
HostBuffer& thread_scratch(size_t bytes) {
  thread_local HostBuffer buffer;
  if (buffer.size() < bytes) buffer = HostBuffer(bytes);
  return buffer;
}

}  // namespace

const Kernel kPortableKernel = {"portable", kRows, portable_scratch_bytes, portable_run};

bool avx512_bf16_supported() {
  static const bool supported =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bf16");
  return supported;
}

void attention_with(const Kernel& kernel, const Tensor& q, const Tensor& k, const Tensor& v,
                    Tensor& out, const AttentionParams& a) {
  const Problem p = make_problem(q, k, v, out, a);
  const int64_t tiles = (p.q_len + kernel.tile_rows - 1) / kernel.tile_rows;
  const int64_t items = p.batch * p.heads * tiles;
  const size_t bytes = kernel.scratch_bytes(p);
  parallel_for(items, [&](int64_t begin, int64_t end) {
    kernel.run(p, begin, end, thread_scratch(bytes).data());
  });
}

}  // namespace attention_detail

void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
               const AttentionParams& p) {
  using namespace attention_detail;
  attention_with(avx512_bf16_supported() ? kAvx512Kernel : kPortableKernel, q, k, v, out, p);
}

}  // namespace flick::cpu
