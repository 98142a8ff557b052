#include "bench/bench_attention.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

#include "runtime/cpu/ops.h"
#include "runtime/tensor.h"

namespace flick::bench {
namespace {

struct AttentionCase {
  const char* what;
  DType dtype;
  int64_t q_len, kv_len, heads, head_dim;
};

// Deterministic values in [-2, 2): attention time does not depend on them, as
// long as they are normal numbers and the softmax is not degenerate.
void fill(Tensor& t) {
  uint32_t state = 12345;
  for (int64_t i = 0; i < t.numel(); ++i) {
    state = state * 1664525u + 1013904223u;
    store_from_f32(t.dtype, t.data, i, static_cast<float>(state >> 8) * 0x1p-22f - 2.f);
  }
}

// "attention bf16 self 2640x5280 12x128"
std::string case_name(const AttentionCase& c) {
  return std::string("attention ") + (c.dtype == DType::BF16 ? "bf16 " : "f32 ") + c.what + " " +
         std::to_string(c.q_len) + "x" + std::to_string(c.kv_len) + " " + std::to_string(c.heads) +
         "x" + std::to_string(c.head_dim);
}

BenchResult run_case(const AttentionCase& c, const Peaks& peaks, int repetitions) {
  OwnedTensor q(c.dtype, {1, c.q_len, c.heads, c.head_dim});
  OwnedTensor k(c.dtype, {1, c.kv_len, c.heads, c.head_dim});
  OwnedTensor v(c.dtype, {1, c.kv_len, c.heads, c.head_dim});
  OwnedTensor out(c.dtype, {1, c.q_len, c.heads, c.head_dim});
  fill(q);
  fill(k);
  fill(v);
  cpu::attention(q, k, v, out, {});  // warm-up: pages, per-thread scratch
  double best = 1e30;
  for (int r = 0; r < repetitions; ++r) {
    const auto start = std::chrono::steady_clock::now();
    cpu::attention(q, k, v, out, {});
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count());
  }
  const double flops =
      4.0 * double(c.heads) * double(c.q_len) * double(c.kv_len) * double(c.head_dim);
  const double peak = c.dtype == DType::BF16 ? peaks.bf16_gflops : peaks.f32_gflops;
  BenchResult result;
  result.name = case_name(c);
  result.seconds = best;
  result.rate = flops / best * 1e-9;
  result.unit = "GFLOPS";
  result.peak_pct = peak > 0 ? 100.0 * result.rate / peak : 0.0;
  return result;
}

}  // namespace

std::vector<BenchResult> run_attention_benches(const Peaks& peaks, const BenchOptions& options) {
  const AttentionCase cases[] = {
      {"self", DType::BF16, 2640, 5280, 12, 128},
      {"self", DType::F32, 2640, 5280, 12, 128},
      {"cross", DType::BF16, 2640, 257, 12, 128},
      {"cross", DType::F32, 2640, 257, 12, 128},
  };
  std::vector<BenchResult> results;
  for (const AttentionCase& c : cases) {
    if (case_name(c).find(options.filter) == std::string::npos) continue;  // "" matches all
    results.push_back(run_case(c, peaks, options.quick ? 1 : 5));
  }
  return results;
}

}  // namespace flick::bench
