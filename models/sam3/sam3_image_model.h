// The EfficientSAM3 image model with a text prompt, composed from the
// components of models/sam3 (spec ../shared/research/sam3-and-style.md Part A):
//
//   frame   RGB8 [H, W] -> resize 1008 x 1008 (torchvision v2, antialias) ->
//           (v/255 - 0.5)/0.5                                   // [1, 3, S, S]
//   image   = RepViT trunk + head -> SAM3 neck (scalp 1), geometry CLS,
//             the fusion encoder's first self-attention        // once per frame
//   prompt  = CLIP BPE tokens -> MobileCLIP text -> projector   // cached per prompt
//   per prompt: the rest of the fusion encoder, DETR decoder, dot scoring,
//           seg head -> post-processing at the frame's size
//
// One frame at a time: encode_image() keeps the image side in the model's
// arena, then detect() runs the prompt-dependent part for each prompt against
// it. Text encodings are cached per prompt string for the model's lifetime.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "io/frame.h"
#include "models/sam3/postprocess.h"
#include "models/sam3/sam3_checkpoint.h"
#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace flick {

struct Sam3Options {
  // The checkpoint (.pth as released, or .safetensors with the same keys).
  std::string weights;
  // bpe_simple_vocab_16e6.txt.gz; empty: the first found of a copy beside
  // the weights, the one flick installs (share/flick/sam3), the source
  // tree's (models/sam3/data); the error names the paths tried.
  std::string vocab;
  // F32, BF16 or INT8 (W8A8 linears in the DETR decoder, INT8 convolutions
  // in the neck, bf16 elsewhere: Sam3ImageModel::load; needs AVX-512 VNNI
  // or AMX on the CPU).
  Precision precision = Precision::F32;
  // The square input side: 1008 for the released models; tests use less
  // (a multiple of 14, checked at load: the image grid is S / 14).
  int64_t image_size = 1008;
};

class Sam3ImageModel {
 public:
  // Called with named intermediates (golden tests, `flick run --dump`):
  // "pixels", "trunk", "neck.level{i}", per prompt "tokens", "text",
  // "prompt", "memory", "decoder.hs{l}", "decoder.ref{l}",
  // "decoder.presence{l}", "logits" (every layer's, [L, Q]), "scores"
  // (sigmoid(logit) * sigmoid(presence) of the last layer, [Q]), "boxes"
  // (cxcywh in [0, 1], [Q, 4]), "mask_logits" ([1, Q, 4g, 4g]). Views are
  // valid during the call only.
  using Tap = std::function<void(std::string_view name, const Tensor& t)>;

  // Loads and checks the checkpoint (errors name the file and tensor),
  // folds BatchNorm/RepVGG branches, and plans every buffer for `backend`
  // (which must outlive the model).
  static Expected<std::unique_ptr<Sam3ImageModel>> load(const Sam3Options& options,
                                                        Backend& backend);
  ~Sam3ImageModel();

  const Sam3Options& options() const;
  const Sam3Checkpoint& checkpoint() const;
  // "bf16 trunk, bf16 text, bf16 head" for status files.
  std::string precision_summary() const;

  // Runs the image side of one frame (any size >= 1 x 1).
  Status encode_image(const FrameView& frame, const Tap& tap = {});
  // The prompt-dependent part against the last encode_image() frame:
  // detections with prob > threshold (0 keeps every query), boxes in the
  // frame's pixels and masks at the frame's size (binary; the probabilities
  // too with Sam3MaskOutput::kProbabilities). Errors on an empty prompt or
  // before any encode_image().
  // Mask logits are computed for the kept queries only (none kept: the mask
  // head is skipped), unless `masks` asks for every query's, as the reference
  // computes them; a tap sees every query's ("mask_logits").
  Expected<Sam3Detections> detect(std::string_view prompt, float threshold, const Tap& tap = {},
                                  Sam3MaskOutput output = Sam3MaskOutput::kBinary,
                                  Sam3Masks masks = Sam3Masks::kKept);

 private:
  struct Impl;
  explicit Sam3ImageModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flick
