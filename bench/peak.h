// Peak arithmetic rates of this machine, measured on all threads with
// independent accumulator chains and no memory traffic (bench/peak_avx512.cpp).
#pragma once

#include <cstdint>

#include "bench/bench.h"

namespace flick::bench {

Peaks measure_peaks(const BenchOptions& options);

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
