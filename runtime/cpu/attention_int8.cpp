// cpu::attention_int8: the shared quantization of Q and K (see
// attention_int8_kernels.h), the portable kernel, kernel choice at run time
// (AMX where the host has AMX-INT8 and grants the tile state, else AVX-512
// VNNI where the host has AVX-512 BF16 + VNNI, else portable) and the
// parallel loop over (batch, head, query tile) work items.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/cpu/attention_int8_kernels.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/ops.h"
#include "runtime/dtype.h"
#include "runtime/threads.h"

namespace flick::cpu {
namespace attention_int8_detail {
namespace {

using attention_detail::attention_key_end;
using attention_detail::Operand;
using attention_detail::ScratchLayout;

constexpr float kLog2e = 1.44269504088896340736f;

float element(const Operand& t, int64_t b, int64_t l, int64_t h, int64_t e) {
  return load_as_f32(t.dtype, t.data,
                     b * t.stride[0] + l * t.stride[1] + h * t.stride[2] + e * t.stride[3]);
}

// Row (b, l, h) of an operand as fp32: a contiguous BF16 row widened in bulk.
void load_row(const Operand& t, int64_t b, int64_t l, int64_t h, int64_t n, float* dst) {
  const int64_t base = b * t.stride[0] + l * t.stride[1] + h * t.stride[2];
  if (t.dtype == DType::BF16 && t.stride[3] == 1) {
    const uint16_t* src = static_cast<const uint16_t*>(t.data) + base;
    for (int64_t e = 0; e < n; ++e) {
      const uint32_t u = static_cast<uint32_t>(src[e]) << 16;
      std::memcpy(dst + e, &u, 4);
    }
    return;
  }
  for (int64_t e = 0; e < n; ++e) dst[e] = load_as_f32(t.dtype, t.data, base + e * t.stride[3]);
}

// Symmetric per-row INT8: scale = max|x| / 127, q = x * (127 / max|x|) rounded
// to nearest even (an all-zero row: scale 0, q 0). Written out again in
// runtime/ref/attention_int8.cpp; the two must stay the same formula.
float quantize_row(const float* x, int64_t n, int8_t* q) {
  float amax = 0.f;
  for (int64_t e = 0; e < n; ++e) amax = std::max(amax, std::fabs(x[e]));
  if (!(amax > 0.f)) {
    std::fill(q, q + n, int8_t{0});
    return 0.f;
  }
  const float inv = 127.f / amax;
  for (int64_t e = 0; e < n; ++e)
    q[e] = static_cast<int8_t>(std::clamp(std::nearbyint(x[e] * inv), -127.f, 127.f));
  return amax / 127.f;
}

}  // namespace

void quantize_k(const Problem& p, int64_t b, int64_t h, int64_t ldk, int8_t* kq, float* kscale,
                float* mean) {
  const int64_t D = p.head_dim, Lk = p.kv_len;
  std::vector<double> sum(static_cast<size_t>(D), 0.0);
  std::vector<float> x(static_cast<size_t>(D));
  // The mean over keys in double, in key order per dim (the reference's
  // order: one pass over the rows, so the same sums), rounded once to fp32.
  for (int64_t j = 0; j < Lk; ++j) {
    load_row(p.k, b, j, h, D, x.data());
    for (int64_t e = 0; e < D; ++e)
      sum[static_cast<size_t>(e)] += static_cast<double>(x[size_t(e)]);
  }
  for (int64_t e = 0; e < D; ++e)
    mean[e] =
        Lk > 0 ? static_cast<float>(sum[static_cast<size_t>(e)] / static_cast<double>(Lk)) : 0.f;
  for (int64_t j = 0; j < Lk; ++j) {
    load_row(p.k, b, j, h, D, x.data());
    for (int64_t e = 0; e < D; ++e) x[size_t(e)] -= mean[e];
    int8_t* dst = kq + j * ldk;
    kscale[j] = quantize_row(x.data(), D, dst);
    std::fill(dst + D, dst + ldk, int8_t{0});
  }
}

void quantize_q(const Problem& p, int64_t b, int64_t h, int64_t row0, int64_t rows, int64_t ldq,
                int8_t* qq, float* qscale, float* row) {
  const int64_t D = p.head_dim;
  for (int64_t r = 0; r < rows; ++r) {
    load_row(p.q, b, row0 + r, h, D, row);
    int8_t* dst = qq + r * ldq;
    qscale[r] = quantize_row(row, D, dst);
    std::fill(dst + D, dst + ldq, int8_t{0});
  }
}

namespace {

// ---- portable kernel: one query row at a time against all its keys (scores
// of the whole row kept, so no online rescaling), loops written for GCC's
// vectoriser ----

constexpr int64_t kRows = 32;

struct PortableWorkspace {
  int8_t* kq;     // [Lk][D]
  float* kscale;  // [Lk]
  float* mean;    // [D]
  float* v;       // [Lk][D], rounded to bf16
  int8_t* qq;     // [kRows][D]
  float* qscale;  // [kRows]
  float* row;     // [D]
  float* s;       // [Lk]
  float* o;       // [D]
};

PortableWorkspace layout(const Problem& p, void* scratch, size_t* bytes) {
  const size_t D = size_t(p.head_dim), Lk = size_t(p.kv_len);
  ScratchLayout sl(scratch);
  PortableWorkspace w;
  w.kq = reinterpret_cast<int8_t*>(sl.take(Lk * D));
  w.kscale = reinterpret_cast<float*>(sl.take(Lk * 4));
  w.mean = reinterpret_cast<float*>(sl.take(D * 4));
  w.v = reinterpret_cast<float*>(sl.take(Lk * D * 4));
  w.qq = reinterpret_cast<int8_t*>(sl.take(kRows * D));
  w.qscale = reinterpret_cast<float*>(sl.take(kRows * 4));
  w.row = reinterpret_cast<float*>(sl.take(D * 4));
  w.s = reinterpret_cast<float*>(sl.take(Lk * 4));
  w.o = reinterpret_cast<float*>(sl.take(D * 4));
  if (bytes) *bytes = sl.used;
  return w;
}

size_t portable_scratch_bytes(const Problem& p) {
  size_t bytes = 0;
  layout(p, nullptr, &bytes);
  return bytes;
}

int32_t dot_i8(const int8_t* a, const int8_t* b, int64_t n) {
  int32_t acc = 0;
  for (int64_t e = 0; e < n; ++e) acc += int32_t(a[e]) * int32_t(b[e]);
  return acc;
}

void portable_row(const Problem& p, const PortableWorkspace& w, int64_t b, int64_t h, int64_t i,
                  const int8_t* qrow, float qscale) {
  const int64_t D = p.head_dim;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const int64_t key_end = attention_key_end(p, i);
  const float qs = qscale * (p.scale * kLog2e);  // scores in log2 units
  float max = neg_inf;
  const RowBias bias = row_bias(p, b, h, i);
  for (int64_t j = 0; j < key_end; ++j) {
    float s = static_cast<float>(dot_i8(qrow, w.kq + j * D, D)) * w.kscale[j] * qs;
    if (bias) s += kLog2e * bias_at(p, bias, j);
    if (p.key_padding &&
        p.key_padding[b * p.key_padding_stride[0] + j * p.key_padding_stride[1]] == 0)
      s = neg_inf;
    w.s[j] = s;
    max = std::max(max, s);
  }
  std::fill(w.o, w.o + D, 0.f);
  float sum = 0.f;
  if (max != neg_inf) {
    for (int64_t j = 0; j < key_end; ++j) {
      const float e = std::exp2(w.s[j] - max);
      sum += e;
      const float pj = round_bf16(e);  // P.V takes P in bf16, the normaliser the fp32 sum
      const float* vj = w.v + j * D;
      for (int64_t d = 0; d < D; ++d) w.o[d] += pj * vj[d];
    }
  }
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  const int64_t esize = int64_t(dtype_size(p.out_dtype));
  char* dst = static_cast<char*>(p.out) +
              (b * p.out_stride[0] + i * p.out_stride[1] + h * p.out_stride[2]) * esize;
  for (int64_t d = 0; d < D; ++d)
    store_from_f32(p.out_dtype, dst, d * p.out_stride[3], w.o[d] * inv);
}

void portable_run(const Problem& p, int64_t begin, int64_t end, void* scratch) {
  const PortableWorkspace w = layout(p, scratch, nullptr);
  const int64_t D = p.head_dim;
  const int64_t tiles = (p.q_len + kRows - 1) / kRows;
  int64_t packed = -1;
  for (int64_t item = begin; item < end; ++item) {
    const int64_t bh = item / tiles, tile = item % tiles;
    const int64_t b = bh / p.heads, h = bh % p.heads;
    if (bh != packed) {
      quantize_k(p, b, h, D, w.kq, w.kscale, w.mean);
      for (int64_t j = 0; j < p.kv_len; ++j)
        for (int64_t d = 0; d < D; ++d) w.v[j * D + d] = round_bf16(element(p.v, b, j, h, d));
      packed = bh;
    }
    const int64_t row0 = tile * kRows, rows = std::min(kRows, p.q_len - row0);
    quantize_q(p, b, h, row0, rows, D, w.qq, w.qscale, w.row);
    for (int64_t r = 0; r < rows; ++r)
      portable_row(p, w, b, h, row0 + r, w.qq + r * D, w.qscale[r]);
  }
}

bool host_runs(const Kernel& kernel) {
  if (&kernel == &kInt8AmxKernel) return amx_int8_supported();  // also asks for the tile state
  if (&kernel == &kInt8Avx512Kernel) return avx512_vnni_supported();
  return true;
}

void run_kernel(const Kernel& kernel, const Problem& p) {
  attention_detail::run_kernel_items("attention_int8", kernel, p, host_runs(kernel));
}

}  // namespace

const Kernel kInt8PortableKernel = {"int8_portable", kRows, portable_scratch_bytes, portable_run,
                                    nullptr};

bool avx512_vnni_supported() {
  static const bool supported =
      attention_detail::avx512_bf16_supported() && __builtin_cpu_supports("avx512vnni");
  return supported;
}

bool amx_int8_supported() {
  static const bool supported = avx512_vnni_supported() && amx_available();
  return supported;
}

namespace {

// As cpu::attention's AMX rule (attention.cpp, amx_pays_off): under 8
// queries and under 64 keys per (batch, head) the tile kernel's per-item
// setup (packing K, V^T and Q^T, padding both lengths to 32) outweighs the
// work.
bool amx_pays_off(const Problem& p) { return p.q_len >= 8 || p.kv_len >= 64; }

}  // namespace

const Kernel& select_kernel(const Problem& p) {
  if (amx_int8_supported() && attention_detail::kernel_accepts(kInt8AmxKernel, p) &&
      amx_pays_off(p))
    return kInt8AmxKernel;
  if (avx512_vnni_supported() && attention_detail::kernel_accepts(kInt8Avx512Kernel, p))
    return kInt8Avx512Kernel;
  return kInt8PortableKernel;
}

void attention_int8_with(const Kernel& kernel, const Tensor& q, const Tensor& k, const Tensor& v,
                         Tensor& out, const AttentionParams& a) {
  run_kernel(kernel, attention_detail::resolve_problem(q, k, v, out, a));
}

}  // namespace attention_int8_detail

void attention_int8(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                    const AttentionParams& p) {
  const attention_detail::Problem problem = attention_detail::resolve_problem(q, k, v, out, p);
  attention_int8_detail::run_kernel(attention_int8_detail::select_kernel(problem), problem);
}

// Measured (bench/RESULTS.md, "INT8 attention"):
//  - AVX-512 VNNI + BF16 without AMX (Zen 4, one core, `OMP_NUM_THREADS=1
//    flick bench --cpu-clock --filter "self 2640"`): the VNNI kernel takes
//    383-401 ms against the vdpbf16ps kernel's 484-556 ms on the DiT's
//    self-attention, since its Q.K^T keeps the accumulators in registers
//    (attention_int8_avx512.cpp, dpbusd; before, GCC's spills made it 1.5 %
//    slower). So it pays off there.
//  - With AMX the AMX-INT8 kernel only ties with the AMX-BF16 attention
//    kernel (median time ratio 0.975 over 16 same-process pairs on one core,
//    +-20 % run to run on a loaded host): Q.K^T takes half the tile
//    products, but the kernel is bound by its AVX-512 softmax, which gains
//    an int -> float conversion and a scale multiply per score vector, and
//    it quantizes Q and K per call. The DiT keeps the BF16 attention (and
//    its accuracy) there.
//  - On AVX2-only hosts the portable INT8 kernel is no faster than the
//    portable fp32 one.
// The cross-attention's 257 keys stay BF16 everywhere (models/wan/wan_dit.cpp).
bool attention_int8_pays_off() {
  return attention_int8_detail::avx512_vnni_supported() &&
         !attention_int8_detail::amx_int8_supported() && !attention_detail::amx_bf16_supported();
}

}  // namespace flick::cpu
