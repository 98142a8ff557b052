// Matrix-Game 2.0 at full size for `flick bench` (bench/bench.h): one
// universal-mode job of 6 latent frames (21 video frames at 352x640) on
// synthetic weights in the exact released layout, per DiT precision. Rows:
//
//   mg2.<p> dit      one DiT call of block 1: 2640 tokens against the full
//                    6-latent KV window (5280 keys), action module included;
//                    rate over the linear + attention FLOPs; the lower bound
//                    is those FLOPs at this machine's measured peaks
//   mg2.<p> decode   the streaming VAE decoder, per video frame (block 1)
//   mg2.<p> e2e      seconds per video frame in the steady state (block 1:
//                    3 steps + the t = 0 re-run + decode, 12 frames); the
//                    whole job per frame, load time and peak RSS in detail
//   mg2.cond         the conditioning encode alone (VAE encoder, bf16, 21
//                    frames at 352x640, synthetic weights in memory): every
//                    frame vs reusing constant tails, same process; rate =
//                    the speed-up, latents checked bit-identical
//
// Heavy (about 8 GB of synthetic checkpoints, minutes per precision), so it
// runs only when --filter names it: "mg2" (bf16, int8, fp8) or "mg2.int8".
// options.mg2_weights reuses a `flick synth --size full` directory; otherwise
// one is written to $TMPDIR and deleted afterwards.
#pragma once

#include <vector>

#include "bench/bench.h"

namespace flick::bench {

std::vector<BenchResult> run_mg2_benches(const Peaks& peaks, const BenchOptions& options);

}  // namespace flick::bench
