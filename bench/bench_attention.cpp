#include "bench/bench_attention.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "bench/peak.h"
#include "runtime/cpu/attention_int8_kernels.h"
#include "runtime/cpu/attention_kernels.h"
#include "runtime/cpu/ops.h"
#include "runtime/tensor.h"

namespace flick::bench {
namespace {

using cpu::attention_detail::Kernel;

struct AttentionCase {
  const char* what;
  DType dtype;
  int64_t batch, q_len, kv_len, heads, head_dim;
  const Kernel* kernel;
  bool int8 = false;  // cpu::attention_int8's kernels (BF16 inputs)
  // cpu::attention itself, which drops padded keys first; kernel: the one it
  // picks for the dtype on this host, whose peak rates the row.
  bool entry = false;
  int64_t valid_keys = 0;  // > 0: a key padding mask keeps only the first valid_keys
  // An additive f32 bias: [B, H, Lq, Lk] (kFull), or separable over a
  // square grid of keys (kGrid: bias_y / bias_x [B, H, Lq, sqrt(Lk)]).
  enum class Bias { kNone, kFull, kGrid } bias = Bias::kNone;
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

// "attention bf16 self 2640x5280 12x128 amx" (batch prefixed when > 1).
std::string case_name(const AttentionCase& c) {
  std::string shape = std::to_string(c.q_len) + "x" + std::to_string(c.kv_len) + " " +
                      std::to_string(c.heads) + "x" + std::to_string(c.head_dim);
  if (c.batch > 1) shape = std::to_string(c.batch) + "x" + shape;
  const char* kind = c.int8 ? "int8 " : c.dtype == DType::BF16 ? "bf16 " : "f32 ";
  return std::string("attention ") + kind + c.what + " " + shape + " " +
         (c.entry ? "cpu::attention" : c.kernel->name);
}

// Empty where the case's kernel does not take the problem (the narrow-head
// kernel takes no key padding).
std::optional<BenchResult> run_case(const AttentionCase& c, const Peaks& peaks,
                                    const BenchOptions& options) {
  const Shape qs{c.batch, c.q_len, c.heads, c.head_dim};
  const Shape ks{c.batch, c.kv_len, c.heads, c.head_dim};
  OwnedTensor q(c.dtype, qs), k(c.dtype, ks), v(c.dtype, ks), out(c.dtype, qs);
  fill(q);
  fill(k);
  fill(v);
  OwnedTensor valid(DType::U8, Shape{c.batch, c.kv_len});
  AttentionParams params;
  if (c.valid_keys > 0) {
    for (int64_t i = 0; i < valid.t.numel(); ++i)
      valid.t.ptr<uint8_t>()[i] = i % c.kv_len < c.valid_keys ? 1 : 0;
    params.key_padding = valid;
  }
  using Bias = AttentionCase::Bias;
  int64_t side = 1;
  while (side * side < c.kv_len) ++side;
  const Shape part{c.batch, c.heads, c.q_len, side};
  OwnedTensor bias(DType::F32,
                   c.bias == Bias::kFull ? Shape{c.batch, c.heads, c.q_len, c.kv_len} : Shape{1});
  OwnedTensor bias_y(DType::F32, c.bias == Bias::kGrid ? part : Shape{1}),
      bias_x(DType::F32, c.bias == Bias::kGrid ? part : Shape{1});
  if (c.bias == Bias::kFull) {
    fill(bias);
    params.bias = bias;
  } else if (c.bias == Bias::kGrid) {
    fill(bias_y);
    fill(bias_x);
    params.bias_y = bias_y;
    params.bias_x = bias_x;
  }
  namespace ad = cpu::attention_detail;
  Tensor o = out;
  const ad::Problem problem = ad::resolve_problem(q, k, v, o, params);
  if (!c.entry && !ad::kernel_accepts(*c.kernel, problem)) return std::nullopt;
  auto call = [&] {
    if (c.entry)
      cpu::attention(q, k, v, out, params);
    else if (c.int8)
      cpu::attention_int8_detail::attention_int8_with(*c.kernel, q, k, v, out, params);
    else
      cpu::attention_detail::attention_with(*c.kernel, q, k, v, out, params);
  };
  call();  // warm-up: pages, per-thread scratch
  const std::string kernel = c.kernel->name;
  const bool tiles = kernel == "amx" || kernel == "int8_amx";
  const PeakUnit unit = tiles                    ? PeakUnit::AmxBf16
                        : c.dtype == DType::BF16 ? PeakUnit::Bf16Dot
                                                 : PeakUnit::F32Fma;
  // The best of several runs of at least ~0.3 s in all (one in quick mode);
  // with --window-peaks the unit's peak is re-measured before each.
  const double flops = 4.0 * double(c.batch) * double(c.heads) * double(c.q_len) *
                       double(c.kv_len) * double(c.head_dim);
  double best = 1e30, spent = 0, window_peak = 0;
  for (int r = 0; r < (options.quick ? 1 : 50) && (r < 3 || spent < 0.3); ++r) {
    if (options.window_peaks) window_peak = std::max(window_peak, measure_peak(unit, 1, options));
    const double start = bench_now(options);
    call();
    const double took = bench_now(options) - start;
    best = std::min(best, took);
    spent += took;
  }
  const double start_peak = unit == PeakUnit::AmxBf16   ? peaks.amx_bf16_gflops
                            : unit == PeakUnit::Bf16Dot ? peaks.bf16_gflops
                                                        : peaks.f32_gflops;
  const double peak = window_peak > 0 ? window_peak : start_peak;
  BenchResult result;
  result.name = case_name(c);
  result.seconds = best;
  result.rate = flops / best * 1e-9;
  result.unit = "GFLOPS";
  result.peak_pct = peak > 0 ? 100.0 * result.rate / peak : 0.0;
  char detail[96];
  if (tiles) {  // int8_amx: half its tile work is tdpbssd, half tdpbf16ps: rated like bf16
    std::snprintf(detail, sizeof detail, "of AMX bf16 peak (%.0f%% of vdpbf16ps)",
                  peaks.bf16_gflops > 0 ? 100.0 * result.rate / peaks.bf16_gflops : 0.0);
  } else if (c.int8) {  // half the work is vpdpbusd, half vdpbf16ps: rated like bf16
    std::snprintf(detail, sizeof detail, "of vdpbf16ps peak (dense-equivalent)");
  } else {
    std::snprintf(detail, sizeof detail, "of %s peak",
                  c.dtype == DType::BF16 ? "vdpbf16ps" : "FMA");
  }
  result.detail = detail;
  if (window_peak > 0) {
    std::snprintf(detail, sizeof detail, "; peak in its window %.0f (start of run: %.0f%%)",
                  window_peak, start_peak > 0 ? 100.0 * result.rate / start_peak : 0.0);
    result.detail += detail;
  }
  if (c.entry)
    result.detail += ", the visible keys only (padded ones dropped first; rate dense-equivalent)";
  else if (c.int8 ? &cpu::attention_int8_detail::select_kernel(problem) == c.kernel
                  : ad::visible_keys(problem).empty() && &ad::select_kernel(problem) == c.kernel)
    result.detail += c.int8 ? ", cpu::attention_int8's choice" : ", cpu::attention's choice";
  return result;
}

}  // namespace

std::vector<BenchResult> run_attention_benches(const Peaks& peaks, const BenchOptions& options) {
  namespace ad = cpu::attention_detail;
  // The SIMD kernels this host runs (the portable one where it has none):
  // each BF16 shape runs on every one of them, F32 on the AVX-512 one.
  std::vector<const Kernel*> bf16_kernels;
  if (ad::amx_bf16_supported()) bf16_kernels.push_back(&ad::kAmxKernel);
  if (ad::avx512_bf16_supported()) bf16_kernels.push_back(&ad::kAvx512Kernel);
  if (bf16_kernels.empty()) bf16_kernels.push_back(&ad::kPortableKernel);
  const Kernel* f32_kernel =
      ad::avx512_bf16_supported() ? &ad::kAvx512Kernel : &ad::kPortableKernel;
  // INT8 Q.K^T: the AMX-INT8 and the VNNI kernel where the host runs them
  // (the portable one where it runs neither).
  namespace a8 = cpu::attention_int8_detail;
  std::vector<const Kernel*> int8_kernels;
  if (a8::amx_int8_supported()) int8_kernels.push_back(&a8::kInt8AmxKernel);
  if (a8::avx512_vnni_supported()) int8_kernels.push_back(&a8::kInt8Avx512Kernel);
  if (int8_kernels.empty()) int8_kernels.push_back(&a8::kInt8PortableKernel);

  struct Shape5 {
    const char* what;
    int64_t batch, q_len, kv_len, heads, head_dim;
    bool f32;                // also time F32 inputs
    int64_t valid_keys = 0;  // > 0: only the first valid_keys keys are unmasked
    AttentionCase::Bias bias = AttentionCase::Bias::kNone;
  };
  const Shape5 shapes[] = {
      {"self", 1, 2640, 5280, 12, 128, true},   // Matrix-Game DiT, 3-latent block, 6-latent window
      {"cross", 1, 2640, 257, 12, 128, true},   // DiT cross-attention to the CLIP tokens
      {"keyboard", 1, 2640, 6, 16, 64, false},  // action module, all tokens over the frames
      {"mouse", 880, 3, 6, 16, 64, false},      // action module, per token over frames
      {"clip", 1, 257, 257, 16, 80, false},     // CLIP ViT-H/14 vision tower
      // EfficientSAM3 at 1008^2 (72^2 image tokens, 8 heads of 32): the fusion
      // encoder's self- and text cross-attention, the DETR decoder's 201
      // queries over the image.
      {"sam3 self", 1, 5184, 5184, 8, 32, true},
      {"sam3 text", 1, 5184, 78, 8, 32, true},
      // ... as the pipeline runs it: a short prompt ("dog": SOT, the word,
      // EOT and the geometry CLS) leaves 74 of the 78 keys padding.
      {"sam3 text 4 valid", 1, 5184, 78, 8, 32, true, 4},
      {"sam3 queries", 1, 201, 5184, 8, 32, true},
      // The geometry encoder's CLS token over the image (3 layers a frame).
      {"sam3 geometry", 1, 1, 5184, 8, 32, true},
      // ... as the pipeline runs it: with the boxRPB bias (separable over the
      // 72^2 grid), and with that bias materialised.
      {"sam3 queries rpb", 1, 201, 5184, 8, 32, true, 0, AttentionCase::Bias::kGrid},
      {"sam3 queries bias", 1, 201, 5184, 8, 32, true, 0, AttentionCase::Bias::kFull},
  };
  std::vector<AttentionCase> cases;
  for (const Shape5& s : shapes) {
    const size_t first = cases.size();
    for (const Kernel* k : bf16_kernels)
      cases.push_back({s.what, DType::BF16, s.batch, s.q_len, s.kv_len, s.heads, s.head_dim, k});
    if (ad::avx512_bf16_supported() && s.kv_len <= ad::kShortKeys)
      cases.push_back({s.what, DType::BF16, s.batch, s.q_len, s.kv_len, s.heads, s.head_dim,
                       &ad::kAvx512ShortKernel});
    // Narrow heads: the transposed kernel beside the general one, both dtypes.
    const bool narrow = ad::avx512_bf16_supported() && s.head_dim <= 32;
    if (narrow)
      cases.push_back({s.what, DType::BF16, s.batch, s.q_len, s.kv_len, s.heads, s.head_dim,
                       &ad::kAvx512NarrowKernel});
    // INT8 Q.K^T for the shapes that also time F32 (what precision int8 runs).
    if (s.f32)
      for (const Kernel* k8 : int8_kernels)
        cases.push_back(
            {s.what, DType::BF16, s.batch, s.q_len, s.kv_len, s.heads, s.head_dim, k8, true});
    if (s.f32)
      cases.push_back(
          {s.what, DType::F32, s.batch, s.q_len, s.kv_len, s.heads, s.head_dim, f32_kernel});
    if (s.f32 && narrow)
      cases.push_back({s.what, DType::F32, s.batch, s.q_len, s.kv_len, s.heads, s.head_dim,
                       &ad::kAvx512NarrowKernel});
    // Key padding: also the public entry point, which drops padded keys
    // before the dtype's kernel sees them.
    if (s.valid_keys > 0) {
      cases.push_back({s.what, DType::BF16, s.batch, s.q_len, s.kv_len, s.heads, s.head_dim,
                       bf16_kernels.front(), false, true});
      if (s.f32)
        cases.push_back({s.what, DType::F32, s.batch, s.q_len, s.kv_len, s.heads, s.head_dim,
                         f32_kernel, false, true});
    }
    for (size_t i = first; i < cases.size(); ++i) {
      cases[i].valid_keys = s.valid_keys;
      cases[i].bias = s.bias;
    }
  }
  std::vector<BenchResult> results;
  for (const AttentionCase& c : cases) {
    if (case_name(c).find(options.filter) == std::string::npos) continue;  // "" matches all
    if (std::optional<BenchResult> r = run_case(c, peaks, options)) results.push_back(*r);
  }
  return results;
}

}  // namespace flick::bench
