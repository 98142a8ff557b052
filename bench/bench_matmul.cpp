#include "bench/bench_matmul.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>

#include "bench/peak.h"
#include "runtime/cpu/onednn_info.h"
#include "runtime/cpu/ops.h"
#include "runtime/tensor.h"

namespace flick::bench {
namespace {

// Deterministic values in [-scale, scale): GEMM time does not depend on them
// as long as they are normal numbers.
void fill(const Tensor& t, float scale, uint32_t seed) {
  uint32_t state = seed;
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    store_from_f32(t.dtype, t.data, i, (static_cast<float>(state >> 8) * 0x1p-23f - 1.f) * scale);
  }
}

int reps(const BenchOptions& options) { return options.quick ? 2 : 5; }

// Best time of 5 calls (2 with --quick) after a warm-up call, for cases
// without a peak to compare with.
double best_seconds(const std::function<void()>& fn, const BenchOptions& options) {
  BenchOptions plain = options;
  plain.window_peaks = false;
  return time_best(fn, reps(options), PeakUnit::F32Fma, plain).seconds;
}

// The unit an implementation runs on, and its name for the table.
PeakUnit matching_unit(Precision prec, const std::string& impl) {
  const bool amx = impl.find("amx") != std::string::npos;
  switch (prec) {
    case Precision::F32: return PeakUnit::F32Fma;
    case Precision::BF16:
    case Precision::FP8: return amx ? PeakUnit::AmxBf16 : PeakUnit::Bf16Dot;
    case Precision::INT8: return amx ? PeakUnit::AmxInt8 : PeakUnit::Int8Dot;
  }
  return PeakUnit::F32Fma;
}

const char* unit_name(PeakUnit u) {
  switch (u) {
    case PeakUnit::F32Fma: return "FMA";
    case PeakUnit::Bf16Dot: return "vdpbf16ps";
    case PeakUnit::Int8Dot: return "vpdpbusd";
    case PeakUnit::AmxBf16: return "AMX bf16";
    case PeakUnit::AmxInt8: return "AMX int8";
  }
  return "";
}

double start_peak(const Peaks& p, PeakUnit u) {
  switch (u) {
    case PeakUnit::F32Fma: return p.f32_gflops;
    case PeakUnit::Bf16Dot: return p.bf16_gflops;
    case PeakUnit::Int8Dot: return p.int8_gops;
    case PeakUnit::AmxBf16: return p.amx_bf16_gflops;
    case PeakUnit::AmxInt8: return p.amx_int8_gops;
  }
  return 0;
}

// Times fn for a case of `prec` running on `impl`: the best time and, with
// --window-peaks, the best peak of its unit in the same window.
TimedBest time_case(const std::function<void()>& fn, Precision prec, const std::string& impl,
                    const BenchOptions& options) {
  return time_best(fn, reps(options), matching_unit(prec, impl), options);
}

BenchResult rate_result(std::string name, const TimedBest& t, double ops, const Peaks& peaks,
                        Precision prec, const std::string& impl, const std::string& note) {
  BenchResult r;
  r.name = std::move(name);
  r.seconds = t.seconds;
  r.rate = ops / t.seconds * 1e-9;
  r.unit = prec == Precision::INT8 ? "GOPS" : "GFLOPS";
  const PeakUnit unit = matching_unit(prec, impl);
  const double peak = t.window_peak > 0 ? t.window_peak : start_peak(peaks, unit);
  r.peak_pct = peak > 0 ? 100.0 * r.rate / peak : 0.0;
  r.detail = impl + " vs " + unit_name(unit) + " peak";
  if (t.window_peak > 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " in its window (%.0f; start of run: %.0f%%)", t.window_peak,
                  start_peak(peaks, unit) > 0 ? 100.0 * r.rate / start_peak(peaks, unit) : 0.0);
    r.detail += buf;
  }
  // On AMX machines also say how this compares with the AVX-512 dot-product
  // peak measured at the start (the unit the design's targets were set against).
  const double avx = prec == Precision::INT8 ? peaks.int8_gops : peaks.bf16_gflops;
  if (impl.find("amx") != std::string::npos && avx > 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "; %.0f%% of %s peak", 100.0 * r.rate / avx,
                  prec == Precision::INT8 ? "vpdpbusd" : "vdpbf16ps");
    r.detail += buf;
  }
  if (!note.empty()) r.detail += "; " + note;
  return r;
}

struct LinearShape {
  int64_t m, k, n;
  Activation act = Activation::None;  // the epilogue's
};

std::string dims(const LinearShape& s) {
  std::string d = std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n);
  if (s.act == Activation::GeluErf) d += " gelu";
  return d;
}

BenchResult bench_linear(Precision prec, const LinearShape& s, const Peaks& peaks,
                         const BenchOptions& options) {
  // Activations as a model feeds them: BF16, F32 for F32 layers.
  const DType io = prec == Precision::F32 ? DType::F32 : DType::BF16;
  OwnedTensor x(io, {s.m, s.k}), y(io, {s.m, s.n});
  OwnedTensor w(DType::F32, {s.n, s.k}), b(DType::F32, {s.n});
  fill(x, 2.f, 1);
  fill(w, 0.05f, 2);
  fill(b, 0.1f, 3);
  auto packed = cpu::pack_linear({w.t, Tensor{}, b.t, prec});
  const std::string impl = cpu::linear_impl(*packed);
  const TimedBest t = time_case([&] { cpu::linear(x, *packed, y, s.act); }, prec, impl, options);
  return rate_result(std::string("linear ") + precision_name(prec) + " " + dims(s), t,
                     2.0 * double(s.m) * double(s.k) * double(s.n), peaks, prec, impl, "");
}

BenchResult bench_quantize(const LinearShape& s, const BenchOptions& options) {
  OwnedTensor x(DType::BF16, {s.m, s.k}), q(DType::I8, {s.m, s.k}), scale(DType::F32, {s.m});
  fill(x, 2.f, 4);
  const double t = best_seconds([&] { cpu::quantize_rows_int8(x, q, scale); }, options);
  BenchResult r;
  r.name = "quantize_rows_int8 bf16 " + std::to_string(s.m) + "x" + std::to_string(s.k);
  r.seconds = t;
  r.rate = double(s.m) * double(s.k) * 3.0 / t * 1e-9;  // read 2 B, write 1 B per element
  r.unit = "GB/s";
  r.detail = "per-token int8 before each INT8 GEMM";
  return r;
}

// One elementwise activation over 1 Mi fp32 values spread uniformly over
// [-range, range]: `range` 4 stays clear of the tails where e^{-x^2/2} or
// e^-|x| underflow to denormals, 32 reaches them. The row's detail gives the
// ratio to the first range's time in the same run (the activations avoid
// denormals outside narrow bands, eltwise_kernels.inc).
std::vector<BenchResult> bench_activation(Activation act, const char* name,
                                          const BenchOptions& options) {
  constexpr int64_t kN = int64_t{1} << 20;
  OwnedTensor x(DType::F32, {kN}), y(DType::F32, {kN});
  std::vector<BenchResult> rows;
  double first = 0;
  for (float range : {4.f, 32.f}) {
    float* p = x.t.ptr<float>();
    for (int64_t i = 0; i < kN; ++i)  // a fixed scramble of [-range, range]
      p[i] = range * (2.f * static_cast<float>((i * 2654435761u) % kN) / float(kN) - 1.f);
    const double t = best_seconds([&] { cpu::activation(x.t, y.t, act); }, options);
    if (first == 0) first = t;
    BenchResult r;
    char buf[96];
    std::snprintf(buf, sizeof buf, "activation %s f32 1Mi |x|<=%g", name, double(range));
    r.name = buf;
    r.seconds = t;
    r.rate = double(kN) / t * 1e-6;
    r.unit = "Melem/s";
    std::snprintf(buf, sizeof buf, "%.2fx the |x|<=4 time", t / first);
    r.detail = buf;
    rows.push_back(r);
  }
  return rows;
}

struct ConvShape {
  int64_t c, h, w;
};

std::string conv_name(Precision prec, const ConvShape& s, bool channels_last) {
  return std::string("conv3d ") + precision_name(prec) + " 3x3x3 " + std::to_string(s.c) + "ch " +
         std::to_string(s.h) + "x" + std::to_string(s.w) +
         (channels_last ? " channels-last" : " ncdhw");
}

BenchResult bench_conv3d(Precision prec, const ConvShape& s, bool channels_last, const Peaks& peaks,
                         const BenchOptions& options) {
  const DType dt = prec == Precision::F32 ? DType::F32 : DType::BF16;
  // [N, C, D, H, W] views; channels-last buffers are [N, D, H, W, C].
  OwnedTensor xbuf(dt, {1, s.c, 3, s.h, s.w}), ybuf(dt, {1, s.c, 1, s.h, s.w});
  Tensor x = xbuf.t, y = ybuf.t;
  if (channels_last) {
    x = Tensor::view(xbuf.t.data, dt, {1, 3, s.h, s.w, s.c}).permute({0, 4, 1, 2, 3});
    y = Tensor::view(ybuf.t.data, dt, {1, 1, s.h, s.w, s.c}).permute({0, 4, 1, 2, 3});
  }
  fill(xbuf, 1.f, 5);
  OwnedTensor w(DType::F32, {s.c, s.c, 3, 3, 3}), b(DType::F32, {s.c});
  fill(w, 0.02f, 6);
  fill(b, 0.1f, 7);
  ConvDesc d;
  d.w = w;
  d.bias = b;
  d.spatial_dims = 3;
  d.padding = {0, 1, 1};
  d.precision = prec;
  auto packed = cpu::pack_conv(d);
  const std::string impl = cpu::conv_impl(*packed);
  const TimedBest t =
      time_case([&] { cpu::conv(x, *packed, y, Activation::None); }, prec, impl, options);
  const double ops = 2.0 * double(s.c) * double(s.c) * 27.0 * double(s.h) * double(s.w);
  const std::string name = conv_name(prec, s, channels_last);
  return rate_result(name, t, ops, peaks, prec, impl,
                     channels_last ? "in place" : "incl. reorders to/from blocked");
}

bool selected(const std::string& name, const BenchOptions& o) {
  return name.find(o.filter) != std::string::npos;
}

}  // namespace

std::vector<BenchResult> run_matmul_benches(const Peaks& peaks, const BenchOptions& options) {
  // Matrix-Game's DiT (2640 tokens, 1536 wide) and EfficientSAM3's fusion
  // encoder / pixel decoder (5184 = 72^2 tokens, 256 wide, FFN 2048), and
  // the GEMM of its neck's first 2x2 stride-2 transposed conv (1024 -> 4 x 512);
  // the f32 fusion FFN's 256-row chunks and a decoder linear over 201 queries;
  // the decoder's boxRPB MLP (2 -> 256 -> 8) on one chunk of 1024 of its
  // 200 x 72 rows; the RepViT trunk's 1x1 FFN expansion at 63^2 (stage 3,
  // 16 blocks) with its GELU and without.
  const LinearShape shapes[] = {{2640, 1536, 1536}, {2640, 1536, 8960},
                                {2640, 8960, 1536}, {5184, 256, 256},
                                {5184, 256, 2048},  {5184, 2048, 256},
                                {5184, 1024, 2048}, {256, 256, 2048},
                                {256, 2048, 256},   {201, 256, 256},
                                {1024, 2, 256},     {1024, 256, 8},
                                {3969, 192, 384},   {3969, 192, 384, Activation::GeluErf}};
  std::vector<BenchResult> results;
  for (Precision prec : {Precision::INT8, Precision::BF16, Precision::FP8, Precision::F32}) {
    for (const LinearShape& s : shapes) {
      if (!selected(std::string("linear ") + precision_name(prec) + " " + dims(s), options))
        continue;
      results.push_back(bench_linear(prec, s, peaks, options));
    }
  }
  const std::pair<Activation, const char*> acts[] = {{Activation::GeluErf, "gelu_erf"},
                                                     {Activation::GeluTanh, "gelu_tanh"},
                                                     {Activation::Silu, "silu"}};
  for (const auto& [act, name] : acts)
    if (selected(std::string("activation ") + name, options)) {
      auto rows = bench_activation(act, name, options);
      results.insert(results.end(), rows.begin(), rows.end());
    }
  for (const LinearShape& s : {LinearShape{2640, 1536, 0}, LinearShape{2640, 8960, 0}}) {
    if (selected("quantize_rows_int8 bf16 " + std::to_string(s.m) + "x" + std::to_string(s.k),
                 options))
      results.push_back(bench_quantize(s, options));
  }
  return results;
}

std::vector<BenchResult> run_conv_benches(const Peaks& peaks, const BenchOptions& options) {
  struct Case {
    Precision prec;
    ConvShape shape;
    bool channels_last;
    bool quick;  // also run with --quick
  };
  const Case cases[] = {
      {Precision::BF16, {384, 44, 80}, false, true},
      {Precision::BF16, {384, 44, 80}, true, true},
      {Precision::F32, {384, 44, 80}, false, true},
      {Precision::BF16, {192, 176, 320}, false, true},
      {Precision::BF16, {192, 176, 320}, true, true},
      {Precision::BF16, {96, 352, 640}, false, false},
      {Precision::BF16, {96, 352, 640}, true, false},
  };
  std::vector<BenchResult> results;
  for (const Case& c : cases) {
    if (options.quick && !c.quick) continue;
    const std::string name = conv_name(c.prec, c.shape, c.channels_last);
    if (!selected(name, options)) continue;
    results.push_back(bench_conv3d(c.prec, c.shape, c.channels_last, peaks, options));
  }
  return results;
}

}  // namespace flick::bench
