// Synthetic EfficientSAM3 checkpoints in the released layout
// (efficient_sam3_repvit-m0_9_mobileclip_s1.pth: {"model": state_dict}, the
// 2028 keys of tests/data/sam3/keys_*.txt.gz in their order), with
// deterministic values that the reference side reproduces in a few lines of
// Python (tools/sam3_image_goldens.py synth_state_dict):
//
//   tensor i of the layout (0-based, the released file's order):
//     torch.randn(shape, generator=torch.Generator().manual_seed(seed + i)) * std + offset
//   in fp32 (the product and the sum each rounded to fp32), with (offset, std)
//   from the tensor's name and shape (sam3_synth_scale):
//     BatchNorm running_var   1 + 0.1 g      (positive: |g| < 6 for torch.randn)
//     BatchNorm running_mean  0.1 g
//     BatchNorm weight        0.5 + 0.1 g    (keeps the 26 residual RepViT blocks from
//                                             doubling the variance each)
//     other 1-d weights       1 + 0.1 g      (LayerNorm, GroupNorm)
//     biases                  0.02 g         (".bias", "in_proj_bias")
//     reference_points        g              (boxes spread over the image)
//     text embeddings         0.02 g         (token and position tables, as CLIP inits them)
//     other tensors           g / sqrt(fan_in)   fan_in = prod(shape[1:]) (1 for 1-d)
//     num_batches_tracked     0 (I64)
//   The tensors the image path does not use (the SAM3 ViT trunk, sam2_convs,
//   the tracker: 751 in the released layout) are all zero, written as holes
//   (sparse: no disk, no time), at the released shapes whatever the size.
//
// Sizes: kFull is the released model (RepViT-M0.9, MobileCLIP-S1 with the
// 77-token context, the 256-wide SAM3 head, 200 queries); kTiny keeps the
// architecture and the tokenizer's vocabulary (49408) with small widths (for
// fast end-to-end tests and demos; it loads with the image model's defaults).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "models/sam3/sam3_layout.h"
#include "runtime/status.h"

namespace flick {

enum class Sam3SynthSize {
  kTiny,  // RepViT 16..64 channels (7 blocks, 2 with SE), head 64; text 64 wide, 2 layers
          // (1 head), context 77; SAM3 head d 32, ffn 64, 1 geometry / 2 encoder / 2
          // decoder layers, 20 queries
  kFull,  // the released shapes (2028 keys)
};

struct Sam3SynthDims {
  RepVitConfig trunk;
  MobileClipTextConfig text;
  Sam3HeadConfig head;
};
Sam3SynthDims sam3_synth_dims(Sam3SynthSize size);

// The released file's tensors, names as in the file minus the "model." root
// ("detector.…", "tracker.…"): the image model's (sam3_image_layout) first,
// then, if `with_unused`, the SAM3 ViT trunk, sam2_convs and the tracker.
Sam3Layout sam3_released_layout(const Sam3SynthDims& dims, bool with_unused = true);

// (offset, std) of a tensor's synthetic values; std 0 = all zero.
struct Sam3SynthScale {
  double offset = 0;
  double std = 0;
};
Sam3SynthScale sam3_synth_scale(std::string_view name, const std::vector<int64_t>& shape);

// The fp32 values of tensor `index` of a layout (numel(t.shape) floats into
// out); F32 tensors only (the unused and I64 ones are zero).
void sam3_synth_values(uint64_t seed, size_t index, const Sam3LayoutTensor& t, float* out);

struct Sam3SynthOptions {
  Sam3SynthSize size = Sam3SynthSize::kFull;
  uint64_t seed = 0;
  bool with_unused = true;  // the 751 zero tensors the image path skips
};

// Writes the checkpoint as torch.save does: a .pth zip (a path ending in
// .safetensors is an error) of {"model": state_dict}, the released file's
// layout, so the reference's own loader (model_builder._load_checkpoint)
// reads it too; flick names its tensors "model.<name>".
// Streams tensor by tensor; atomic (temporary file, rename). Errors name the
// file.
Status write_sam3_synth(const std::string& path, const Sam3SynthOptions& options);

}  // namespace flick
