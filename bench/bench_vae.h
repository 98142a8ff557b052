// Wan VAE benchmarks for `flick bench` (bench/bench.h).
#pragma once

#include <vector>

#include "bench/bench.h"

namespace flick::bench {

// The full-size Wan2.1 VAE of Matrix-Game 2.0 (dim 96: 96/192/384 channels,
// z 16) on deterministic synthetic weights in the real checkpoint layout
// (models/wan_vae/wan_vae_synthetic.h), BF16, CPU backend, 352x640 video /
// 44x80 latents:
//   - streaming decode: the first latent of a video (1 frame) and a
//     steady-state 3-latent block (12 frames), as the pipeline calls it;
//   - encode of the conditioning video (1 + 4(N-1) frames): the first chunk
//     (1 frame) and a steady chunk (4 frames), timed per chunk.
// Rows report seconds per video frame (per chunk for the encoder), the
// convolution + attention FLOPs executed (counted at the backend), the rate,
// its share of the AMX bf16 peak and the ratio to the peak-derived lower
// bound FLOPs / peak, plus where the time went (convolutions, attention,
// other backend ops, the model's own kernels).
std::vector<BenchResult> run_vae_benches(const Peaks& peaks, const BenchOptions& options);

}  // namespace flick::bench
