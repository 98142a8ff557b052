// Peak arithmetic rates of this machine, measured on all threads with
// independent accumulator chains and no memory traffic (bench/peak_avx512.cpp).
#pragma once

#include <cstdint>
#include <functional>

#include "bench/bench.h"

namespace flick::bench {

Peaks measure_peaks(const BenchOptions& options);

// The units measure_peaks measures, one at a time: a short measurement (best
// of `reps` runs of ~50 ms on all threads); 0 where the CPU lacks the unit.
enum class PeakUnit { F32Fma, Bf16Dot, Int8Dot, AmxBf16, AmxInt8 };
double measure_peak(PeakUnit unit, int reps, const BenchOptions& options);

// Best time of `reps` calls of fn after one warm-up call. With
// options.window_peaks, `unit`'s peak is re-measured before every call and the
// best of those returned too: on a host whose throughput changes during a run
// (a shared VM), the case and its peak are then taken in the same window.
struct TimedBest {
  double seconds = 0;
  double window_peak = 0;  // 0 without options.window_peaks
};
TimedBest time_best(const std::function<void()>& fn, int reps, PeakUnit unit,
                    const BenchOptions& options);

// The kernels, one thread each: `iters` loop trips; each returns the
// operations it performed (a FLOP or an integer multiply-add counts 2).
double peak_fma_f32_avx512(int64_t iters);
double peak_dpbf16_avx512(int64_t iters);
double peak_dpbusd_avx512(int64_t iters);
double peak_fma_f32_avx2(int64_t iters);
// AMX tile kernels; callers check amx_available() first.
bool amx_available();  // CPU support and the kernel's permission (arch_prctl)
double peak_amx_bf16(int64_t iters);
double peak_amx_int8(int64_t iters);

}  // namespace flick::bench
