// Per-ISA inner loops of wan_vae_kernels.cpp (which picks one at run time).
#pragma once

#include <cstdint>

#include "models/wan_vae/wan_vae_kernels.h"

namespace flick::wan_vae {

// Whether this CPU runs the avx512:: kernels (AVX-512 F/BW/DQ/VL and BF16).
bool has_avx512_kernels();

// channel_rms_norm over n rows on the calling thread; scale = sqrt(c).
namespace avx512 {
void channel_rms_norm_rows(const void* x, void* y, bool bf16, int64_t n, int64_t c,
                           const float* gamma, float scale, NormRounding rounding, bool silu);
}  // namespace avx512
namespace portable {  // the CPU backend's fp32 kernels (AVX2 or AVX-512) and plain loops
void channel_rms_norm_rows(const void* x, void* y, bool bf16, int64_t n, int64_t c,
                           const float* gamma, float scale, NormRounding rounding, bool silu);
}  // namespace portable

}  // namespace flick::wan_vae
