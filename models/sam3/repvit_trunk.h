// The EfficientSAM3 student image encoder: a RepViT trunk
// (sam3/backbones/repvit.py) and the ImageStudentEncoder head
// (model_builder.py), producing the 1024 x 72 x 72 map the SAM3 neck takes.
//
//   stem:   conv3x3 s2 + BN, GELU, conv3x3 s2 + BN              // [1, c0, S/4, S/4]
//   block (stride 1): t = BN(dw3x3_BN(x) + dw1x1(x) + x)        // RepVGGDW
//                     t = t * sigmoid(fc2(relu(fc1(mean_hw t)))) (SE blocks only)
//                     y = t + conv1x1_BN(gelu(conv1x1_BN(t)))    // channel mixer, 2c hidden
//   block (stride 2): t = conv1x1_BN(SE?(dw3x3_BN s2(x)))       // c -> c', no residual
//                     y = t + conv1x1_BN(gelu(conv1x1_BN(t)))
//   head:   conv1x1 (no bias) + BN, GELU, conv3x3 + bias          // [1, 1024, h, w]
//           bilinear (align_corners=False) to embed_size           // [1, 1024, 72, 72]
//
// Every BatchNorm (eval statistics, eps 1e-5) is folded into the conv before
// it at load, and RepVGGDW's three branches into one dw3x3 with bias, as the
// reference's fuse() methods do (computed here in double, then rounded once).
// The config (sam3_layout.h RepVitConfig) is detected from shapes.
//
// Precision F32 keeps everything fp32; BF16 rounds the folded weights to
// bf16 and stores activations in bf16 (accumulation in fp32).
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "models/sam3/sam3_layout.h"
#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"
#include "runtime/weights/weight_store.h"

namespace flick {

class RepVitTrunk {
 public:
  // Called with "stem", "block{i}", "head" (before the resize) and "output".
  using Tap = std::function<void(std::string_view name, const Tensor& t)>;

  // `model` is the ImageStudentEncoder's prefix
  // ("...vision_backbone.trunk.model."); image_size the square input (1008);
  // embed_size the output grid, which no shape carries (72 in the builder).
  static Expected<RepVitTrunk> load(const WeightView& model, Backend& backend, Precision precision,
                                    int64_t image_size, int64_t embed_size = 72);

  const RepVitConfig& config() const { return cfg_; }
  DType activation_dtype() const { return act_; }
  int64_t image_size() const { return image_size_; }

  // pixels: [1, 3, S, S] F32 or BF16 (normalised). Returns
  // [1, embed_dim, embed_size, embed_size] in activation_dtype(), a view into
  // the component's arena valid until the next forward().
  Expected<Tensor> forward(const Tensor& pixels, const Tap& tap = {});

 private:
  struct Se {
    std::unique_ptr<PackedLinear> fc1, fc2;  // [rd, c] + ReLU, [c, rd] + sigmoid
  };
  struct Block {
    RepVitBlockConfig cfg;
    int64_t h_in = 0, h_out = 0;        // spatial side before / after
    std::unique_ptr<PackedConv> token;  // folded dw3x3 (stride 1 or 2)
    std::unique_ptr<Se> se;
    std::unique_ptr<PackedConv> down;  // stride 2: folded 1x1 c -> c'
    std::unique_ptr<PackedConv> mix1, mix2;
  };

  RepVitTrunk() = default;
  Status load_weights(const WeightView& model);
  void plan();
  // [1, c, h, h] channels-last over the start of a flat arena buffer
  // (strides h*h*c, 1, h*c, c): the layout oneDNN's convolutions read and
  // write without reorders.
  Tensor view_cl(Arena::BufferId id, int64_t c, int64_t h) const;

  RepVitConfig cfg_;
  Backend* backend_ = nullptr;
  Precision precision_ = Precision::F32;
  DType act_ = DType::F32;
  int64_t image_size_ = 0;
  int64_t stem_h1_ = 0, stem_h2_ = 0, out_h_ = 0;

  std::vector<OwnedTensor> owned_;  // folded weights
  std::unique_ptr<PackedConv> stem1_, stem2_, head1_, head2_;
  std::vector<Block> blocks_;

  Arena arena_;
  Arena::BufferId a_ = -1, b_ = -1, hidden_ = -1, mean_ = -1, se_ = -1, gate_ = -1, head_ = -1,
                  head2_buf_ = -1, out_ = -1;
};

}  // namespace flick
