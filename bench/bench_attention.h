// Attention benchmarks for `flick bench` (bench/bench.h).
#pragma once

#include <vector>

#include "bench/bench.h"

namespace flick::bench {

// The model attention shapes on the CPU backend: Matrix-Game 2.0's DiT
// self-attention of a 3-latent block (2640 queries) over a 6-latent KV window
// (5280 keys) and cross-attention to the 257 CLIP tokens (12 heads x 128), its
// action module's keyboard and mouse attentions (16 x 64), and CLIP ViT-H
// (257 tokens, 16 x 80). BF16 on every kernel the host runs (AMX, AVX-512
// vdpbf16ps), F32 for the DiT shapes. Rate = 4 * B * H * Lq * Lk * D FLOP per
// call; peak_pct against the matching peak (AMX bf16, vdpbf16ps or FMA).
// Timing: best of at least three calls and ~0.3 s; quick: one call.
std::vector<BenchResult> run_attention_benches(const Peaks& peaks, const BenchOptions& options);

}  // namespace flick::bench
