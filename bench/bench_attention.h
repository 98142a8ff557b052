// Attention benchmarks for `flick bench` (bench/bench.h).
#pragma once

#include <vector>

#include "bench/bench.h"

namespace flick::bench {

// Matrix-Game 2.0's attention shapes on the CPU backend, 12 heads x 128:
// self-attention of a 3-latent block (2640 queries) over a 6-latent KV window
// (5280 keys), and cross-attention to the 257 CLIP tokens; BF16 and F32.
// Rate = 4 * B * H * Lq * Lk * D FLOP per call; peak_pct against the BF16 or
// F32 peak. quick: one timed call instead of the best of five.
std::vector<BenchResult> run_attention_benches(const Peaks& peaks, const BenchOptions& options);

}  // namespace flick::bench
