// EfficientSAM3 (RepViT-M0.9 + MobileCLIP-S1, the released student) at full
// size for `flick bench` (bench/bench.h): one 1280x720 frame, 1008^2 model
// input, synthetic weights in the released layout, per precision. Rows:
//
//   sam3.<p> image    encode_image: preprocessing, trunk, head, neck (once per
//                     frame, shared by every prompt)
//   sam3.<p> prompt   detect for one prompt whose text encoding is cached:
//                     geometry CLS, fusion encoder, decoder, scoring, seg
//                     head, post-processing at the frame's size
//   sam3.<p> frame    image + one prompt: the "per frame and prompt"
//                     (target: bf16 <= 2.0 s, int8 <= 1.2 s)
//   sam3.<p> text     the first detect of a new prompt minus a cached one:
//                     tokenizer + MobileCLIP text encoder
//
// The PyTorch peer is bench/sam3_torch_peer.py (same frame size, same
// prompts), which runs this and prints the ratios. Opt-in (a full-size
// synthetic checkpoint is written, about 0.4 GB): runs only when --filter
// names it ("sam3", "sam3.bf16"). options.sam3_weights reuses a checkpoint.
#pragma once

#include <vector>

#include "bench/bench.h"

namespace flick::bench {

std::vector<BenchResult> run_sam3_benches(const Peaks& peaks, const BenchOptions& options);

}  // namespace flick::bench
