// Per-ISA inner loops of wan_vae_kernels.cpp (which picks one at run time).
#pragma once

#include <cstdint>

#include "models/wan_vae/wan_vae_kernels.h"

namespace flick::wan_vae {

namespace avx512 {
// channel_rms_norm over n rows (no threading); needs AVX-512 F/BW/DQ/VL.
void channel_rms_norm_rows(const void* x, void* y, bool bf16, int64_t n, int64_t c,
                           const float* gamma, float scale, NormRounding rounding, bool silu);
}  // namespace avx512

}  // namespace flick::wan_vae
