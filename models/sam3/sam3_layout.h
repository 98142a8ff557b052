// Checkpoint layouts of EfficientSAM3 (SimonZeng7108/efficientsam3, the
// builder `build_efficientsam3_image_model`): the hyper-parameters each part
// is detected with, and the tensors each part holds, in the reference
// modules' state-dict order (equal to tests/data/sam3/*.txt.gz, the tables
// tools/sam3_goldens.py writes from the reference classes).
//
// A released file (efficient_sam3_repvit-m0_9_mobileclip_s1.pth, 2028 keys)
// is {"model": state_dict} with the parts under:
//   detector.backbone.vision_backbone.trunk.model.   RepViT trunk + student head
//   detector.backbone.vision_backbone.convs.         SAM3 dual neck (4 levels)
//   detector.backbone.language_backbone.             MobileCLIP text encoder
//   detector.{geometry_encoder, transformer, segmentation_head, dot_prod_scoring}.
// and, unused by the image path: the original SAM3 ViT trunk beside the
// student one (detector.backbone.vision_backbone.trunk.{patch_embed, pos_embed,
// ln_pre, blocks}), the SAM2 neck (...vision_backbone.sam2_convs.) and the
// tracker (tracker.).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"
#include "runtime/weights/weight_store.h"

namespace flick {

// One tensor of a layout. dtype is the stored type's name ("F32", "I64").
struct Sam3LayoutTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
};
using Sam3Layout = std::vector<Sam3LayoutTensor>;

// ---- RepViT trunk (sam3/backbones/repvit.py) + ImageStudentEncoder head ----

struct RepVitBlockConfig {
  int64_t in = 0;   // input channels
  int64_t out = 0;  // output channels (!= in only for stride 2)
  int stride = 1;   // 1: RepVGGDW token mixer (residual); 2: dw3x3 s2 + 1x1
  int64_t se = 0;   // SqueezeExcite reduced channels (0: no SE)
};

struct RepVitConfig {
  std::string name;  // "m0_9", "m1_1", "m2_3" when the shapes match one, else "custom"
  int64_t stem = 0;  // channels after the stem (the first block's input)
  std::vector<RepVitBlockConfig> blocks;
  int64_t embed_dim = 0;    // the head's output channels: 1024
  int64_t embed_size = 72;  // the head's output grid (bilinear resize to it)

  int64_t out_channels() const { return blocks.empty() ? stem : blocks.back().out; }

  // A released variant by name ("m0_9" / "m0.9", "m1_1", "m2_3") as the
  // reference's repvit_m*() builders define it, with the 1024-channel head.
  static Expected<RepVitConfig> named(std::string_view name);
  // Reads the shapes under `model` (the ImageStudentEncoder:
  // "backbone.model.features.*" and "head.*"). Errors name the tensor.
  static Expected<RepVitConfig> detect(const WeightView& model);
  // The tensors under `prefix` (the ImageStudentEncoder's).
  Sam3Layout layout(const std::string& prefix) const;
};

// ---- MobileCLIP text encoder (sam3/backbones/mobile_clip.py) + projector ----

struct MobileClipTextConfig {
  std::string name;            // "s0" (RepMixer + transformer + RepMixer, "mct") or "s1" ("base")
  int64_t vocab = 0;           // 49408
  int64_t dim = 0;             // 512
  int64_t context = 0;         // rows of the position table: 77 in the released file
  int64_t layers = 0;          // transformer layers (not counting S0's two RepMixer blocks)
  int64_t heads = 0;           // 8 for width 512, 12 for 768 (_create_student_text_encoder)
  int64_t ffn = 0;             // 2048
  int64_t out_dim = 0;         // projector output: 256
  bool repmixer_ends = false;  // S0: transformer.0 and transformer.N+1 are RepMixerBlocks
  int64_t repmixer_kernel = 11;

  static Expected<MobileClipTextConfig> named(std::string_view name);  // "s0", "s1"
  // Reads the shapes under `text` (the TextStudentEncoder: "encoder.*",
  // "projector.*"). Errors name the tensor.
  static Expected<MobileClipTextConfig> detect(const WeightView& text);
  Sam3Layout layout(const std::string& prefix) const;
};

// ---- the SAM3 head shared by every student: neck, geometry encoder,
// fusion encoder, decoder, segmentation head, scoring ----

struct Sam3HeadConfig {
  int64_t d_model = 256;
  int64_t ffn = 2048;
  int64_t trunk_dim = 1024;  // neck input channels
  int64_t encoder_layers = 6;
  int64_t decoder_layers = 6;
  int64_t geometry_layers = 3;
  int64_t queries = 200;

  // Reads d_model, ffn, layer and query counts from the shapes under `detector`.
  static Expected<Sam3HeadConfig> detect(const WeightView& detector);
  // Tensors under `prefix` ("detector."), neck first, in state-dict order
  // around the trunk and text encoder (see sam3_image_layout).
  Sam3Layout neck_layout(const std::string& prefix) const;
  Sam3Layout head_layout(const std::string& prefix) const;  // geometry .. scoring
};

// The image model's state dict under `prefix` ("detector." in the released
// file): trunk, neck, text, head, in the reference's order (1277 tensors for
// RepViT-M0.9 + MobileCLIP-S1).
Sam3Layout sam3_image_layout(const RepVitConfig& trunk, const MobileClipTextConfig& text,
                             const Sam3HeadConfig& head, const std::string& prefix = "detector.");

}  // namespace flick
