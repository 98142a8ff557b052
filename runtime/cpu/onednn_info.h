// Which oneDNN implementation a packed layer ran, for benchmarks and logs.
#pragma once

#include <string>

#include "runtime/backend.h"

namespace flick::cpu {

// The implementation of the most recent call ("brg:avx512_core_amx_int8",
// "brgconv:avx512_core_bf16", ...); the pack-time choice before any call.
std::string linear_impl(const PackedLinear& w);
std::string conv_impl(const PackedConv& w);

// Whether this CPU runs a precision's linear layers: F32, BF16 and FP8
// everywhere (BF16 emulated exactly in f32 below AVX-512), INT8 from AVX-512
// VNNI on. Loaders check this and report a clear error before packing.
bool cpu_supports(Precision p);

}  // namespace flick::cpu
