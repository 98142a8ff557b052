#include "bench/peak.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "runtime/threads.h"

namespace flick::bench {
namespace {

// Best rate over `reps` timed runs of `kernel` on all threads at once: all
// threads' operations over the wall time, or, with the CPU clock, the sum of
// each thread's operations over its own CPU time.
double rate_on_all_threads(double (*kernel)(int64_t), int64_t iters, int reps,
                           const BenchOptions& options) {
  const int nt = num_threads();
  double best = 0;
  for (int r = 0; r <= reps; ++r) {  // run 0 warms up clocks and pages
    std::vector<double> ops(static_cast<size_t>(nt)), secs(static_cast<size_t>(nt));
    const double wall_start = bench_now(BenchOptions{});
    parallel_for(nt, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const double start = bench_now(options);
        ops[static_cast<size_t>(t)] = kernel(iters);
        secs[static_cast<size_t>(t)] = bench_now(options) - start;
      }
    });
    const double wall = bench_now(BenchOptions{}) - wall_start;
    double rate = 0;
    for (size_t t = 0; t < ops.size(); ++t)
      rate += options.cpu_clock ? ops[t] / secs[t] : ops[t] / wall;
    if (r > 0) best = std::max(best, rate * 1e-9);
  }
  return best;
}

bool cpuid7_edx(unsigned bit) {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (d >> bit) & 1u;
}

// FMA loop for CPUs without AVX-512 (the binary needs AVX2).
double fma_f32_avx2(int64_t iters) {
  __m256 acc[12];
  for (auto& a : acc) a = _mm256_set1_ps(0.001f);
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.0001f);
  for (int64_t it = 0; it < iters; ++it) {
    for (auto& x : acc) x = _mm256_fmadd_ps(x, a, b);
  }
  alignas(32) static thread_local float out[8];
  for (auto& x : acc) _mm256_store_ps(out, x);
  asm volatile("" : : "r"(out) : "memory");
  return double(iters) * 12 * 8 * 2;
}

}  // namespace

double bench_now(const BenchOptions& options) {
  timespec ts;
  clock_gettime(options.cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double peak_fma_f32_avx2(int64_t iters) { return fma_f32_avx2(iters); }

bool amx_available() {
  static const bool ok = [] {
    // CPUID.7.0:EDX bit 24 AMX-TILE, 22 AMX-BF16, 25 AMX-INT8.
    if (!cpuid7_edx(24) || !cpuid7_edx(22) || !cpuid7_edx(25)) return false;
    constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

double measure_peak(PeakUnit unit, int reps, const BenchOptions& options) {
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  switch (unit) {
    case PeakUnit::F32Fma:
      return avx512 ? rate_on_all_threads(peak_fma_f32_avx512, 2'000'000, reps, options)
                    : rate_on_all_threads(peak_fma_f32_avx2, 2'000'000, reps, options);
    case PeakUnit::Bf16Dot:
      return avx512 && __builtin_cpu_supports("avx512bf16")
                 ? rate_on_all_threads(peak_dpbf16_avx512, 1'000'000, reps, options)
                 : 0.0;
    case PeakUnit::Int8Dot:
      return avx512 && __builtin_cpu_supports("avx512vnni")
                 ? rate_on_all_threads(peak_dpbusd_avx512, 1'000'000, reps, options)
                 : 0.0;
    case PeakUnit::AmxBf16:
      return avx512 && amx_available() ? rate_on_all_threads(peak_amx_bf16, 200'000, reps, options)
                                       : 0.0;
    case PeakUnit::AmxInt8:
      return avx512 && amx_available() ? rate_on_all_threads(peak_amx_int8, 200'000, reps, options)
                                       : 0.0;
  }
  return 0.0;
}

Peaks measure_peaks(const BenchOptions& options) {
  // ~50 ms per run at the rates of a modern core; best of 3 (5 in full runs).
  const int reps = options.quick ? 3 : 5;
  Peaks p;
  p.f32_gflops = measure_peak(PeakUnit::F32Fma, reps, options);
  p.bf16_gflops = measure_peak(PeakUnit::Bf16Dot, reps, options);
  p.int8_gops = measure_peak(PeakUnit::Int8Dot, reps, options);
  p.amx_bf16_gflops = measure_peak(PeakUnit::AmxBf16, reps, options);
  p.amx_int8_gops = measure_peak(PeakUnit::AmxInt8, reps, options);
  return p;
}

TimedBest time_best(const std::function<void()>& fn, int reps, PeakUnit unit,
                    const BenchOptions& options) {
  fn();  // warm-up: primitives, pages, per-thread scratch
  TimedBest best{1e30, 0.0};
  for (int r = 0; r < reps; ++r) {
    if (options.window_peaks)
      best.window_peak = std::max(best.window_peak, measure_peak(unit, 1, options));
    const double start = bench_now(options);
    fn();
    best.seconds = std::min(best.seconds, bench_now(options) - start);
  }
  return best;
}

}  // namespace flick::bench
