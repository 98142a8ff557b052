// The weight-free half of the DiT's time embedding (spec §5.2):
// sinusoidal_embedding_1d(freq_dim, t) = [cos(t w_j), sin(t w_j)],
// w_j = 10000^(-j / (freq_dim/2)), all in f64, then cast to bf16.
#pragma once

#include <cstdint>
#include <span>

namespace flick::wan {

inline constexpr int kFreqDim = 256;

// out: [freq_dim] f64.
void time_sinusoid_f64(float t, int freq_dim, std::span<double> out);
// out: [times, freq_dim] raw bf16 bits, one row per timestep.
void time_sinusoid_bf16(std::span<const float> times, int freq_dim, std::span<uint16_t> out);

}  // namespace flick::wan
