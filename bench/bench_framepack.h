// FramePack's packed HunyuanVideo DiT at full width for `flick bench`
// (bench/bench.h): one transformer call as the sampler makes it per step
// (distilled guidance: one call per step), at the 640 bucket with the fewest
// tokens, latent window 9 and the clean latents 1x / 2x / 4x of a section of
// the original variant (framepack_sections: 2 / 2 / 16 frames), 729 SigLIP
// tokens and 20 valid LLaMA tokens. The released 20 + 40 blocks (25.7 GB in
// BF16) do not fit a 24 GB machine beside a PyTorch peer, so the checkpoint is
// full width with fewer blocks (`flick synth --model framepack --size full
// --dit-layers 2,4`), and the per-block times give the full model's call by
// extrapolation. Rows, per precision p (bf16, int8):
//
//   framepack.<p> load            open + pack the checkpoint
//   framepack.<p> call            one DiT call (best of the repetitions)
//   framepack.<p> double block    mean of the double-stream blocks of that call
//   framepack.<p> single block    mean of the single-stream blocks
//   framepack.<p> outside blocks  the call minus its blocks (packing, RoPE,
//                                 embedders, refiner, image projection, head)
//   framepack.<p> 20+40 call      EXTRAPOLATED: outside + 20 double + 40 single
//
// Opt-in (runs only when --filter names it: "framepack", "framepack.int8").
// options.framepack_weights: a folder holding transformer/ (or the transformer
// folder itself); empty = a 2 + 4 block random checkpoint is written to
// $TMPDIR and removed. If the folder holds bench_inputs.safetensors (written
// by bench/framepack_torch_peer.py), its tensors are the call's inputs, so
// PyTorch and flick run the same tokens; FLICK_FRAMEPACK_BENCH_OUT=DIR writes
// each precision's output there (flick_<p>.safetensors) for the peer's
// cosine check. Block times come from the model's taps (the end of each
// block); taps cost one [N, D] copy per double block (< 0.1 % of a block).
#pragma once

#include <vector>

#include "bench/bench.h"

namespace flick::bench {

std::vector<BenchResult> run_framepack_benches(const Peaks& peaks, const BenchOptions& options);

}  // namespace flick::bench
