// The open-clip ViT-H/14 visual tower of XLM-RoBERTa-CLIP as Matrix-Game 2.0
// uses it (wanx_vae_src/clip.py, CLIPModel.encode_video): the image encoder
// whose hidden state conditions the DiT's cross attention.
//
//   pixels = normalize(bicubic(image, S x S) * 0.5 + 0.5)      // [1, 3, S, S]
//   x      = [cls; patch_embed(pixels)] + pos                  // [1, T, W]
//   x      = pre_norm(x)
//   x      = block_i(x) for i in 0 .. layers-2                 // use_31_block
//   block:   x += proj(attn(to_qkv(norm1 x)));  x += mlp.2(gelu(mlp.0(norm2 x)))
//
// The output is the hidden state after block N-1 of N: no last block, no
// post_norm, no head (those tensors are in the checkpoint and are skipped).
// Weight names are the checkpoint's (`visual.` prefix of the
// models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth state dict); the
// config is read from tensor shapes, except the head size, which no shape
// carries (80 for ViT-H/14: 16 heads of width 1280).
//
// Precision BF16 reproduces the reference's bf16 autocast: every parameter is
// rounded to bf16, activations are stored in bf16, LayerNorm runs in fp32.
// Precision F32 keeps everything fp32.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"
#include "runtime/weights/weight_store.h"

namespace flick {

struct ClipVisionConfig {
  int64_t width = 0;       // W: 1280
  int64_t layers = 0;      // blocks in the checkpoint: 32 (31 are run)
  int64_t heads = 0;       // 16
  int64_t head_dim = 0;    // 80
  int64_t mlp_dim = 0;     // 5120
  int64_t patch = 0;       // 14
  int64_t grid = 0;        // patches per side: 16
  int64_t image_size = 0;  // grid * patch: 224
  float eps = 1e-5f;       // every LayerNorm

  int64_t tokens() const { return grid * grid + 1; }  // CLS + patches: 257
  int64_t used_layers() const { return layers - 1; }

  // Reads the shapes under `visual` (a view with the "visual." prefix);
  // errors name the tensor.
  static Expected<ClipVisionConfig> detect(const WeightView& visual, int64_t head_dim = 80);
};

// The CLIP normalisation constants (open_clip's OPENAI_DATASET_MEAN / STD).
inline constexpr float kClipMean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
inline constexpr float kClipStd[3] = {0.26862954f, 0.26130258f, 0.27577711f};

class ClipVision {
 public:
  // Called with every intermediate as it is produced (tests, debugging):
  // "pixels", "patch_embed", "embed_plus_pos", "pre_norm", "block{i}.attn_out",
  // "block{i}.mlp_hidden", "block{i}". Views are valid during the call only.
  using Tap = std::function<void(std::string_view name, const Tensor& t)>;

  // Checks and prepares every weight under `visual` for `backend` and plans
  // the activation buffers. precision: F32; BF16; INT8 or FP8 (the block
  // linears quantized as the backend's pack_linear does, all else BF16; the
  // caller checks the backend runs that precision). The store must outlive
  // the component when borrows_store().
  static Expected<ClipVision> load(const WeightView& visual, Backend& backend, Precision precision,
                                   int64_t head_dim = 80);

  const ClipVisionConfig& config() const { return cfg_; }
  // F32 for F32, else BF16.
  DType activation_dtype() const { return act_; }
  // Whether any parameter is a view into the WeightStore it was loaded from
  // (a parameter already stored in the activation dtype). When not, the
  // store may be closed after load: linear weights are packed copies.
  bool borrows_store() const { return borrows_store_; }

  // image: [1, 3, H, W] in [-1, 1], F32 or BF16, any H, W (the reference
  // passes it in the run's dtype). Returns [1, T, W] in activation_dtype(),
  // a view into the component's arena, valid until the next forward().
  Expected<Tensor> forward(const Tensor& image, const Tap& tap = {});
  // The tower alone on preprocessed pixels [1, 3, S, S] (F32 or BF16),
  // e.g. to run on the reference's own preprocessing.
  Expected<Tensor> forward_pixels(const Tensor& pixels, const Tap& tap = {});

 private:
  struct Block {
    Tensor norm1_w, norm1_b, norm2_w, norm2_b;
    std::unique_ptr<PackedLinear> qkv, proj, fc1, fc2;
  };

  ClipVision() = default;
  Status load_weights(const WeightView& visual);
  void plan();
  // Patch embedding and blocks on the arena's pixels buffer.
  Expected<Tensor> encode(const Tap& tap);

  ClipVisionConfig cfg_;
  Backend* backend_ = nullptr;
  Precision precision_ = Precision::F32;
  DType act_ = DType::F32;
  bool borrows_store_ = false;

  // Parameters in activation dtype (owned copies when rounded to bf16).
  std::vector<OwnedTensor> owned_;
  Tensor cls_;  // [1, W]
  Tensor pos_;  // [T, W]
  Tensor pre_norm_w_, pre_norm_b_;
  Tensor mean_, std_inv_;                      // [3, 1, 1] F32
  std::unique_ptr<PackedLinear> patch_embed_;  // conv weight as [W, 3 * p * p]
  std::vector<Block> blocks_;

  Arena arena_;
  Arena::BufferId pixels_ = -1, patches_ = -1, x_ = -1, h_ = -1, qkv_ = -1, attn_ = -1, o_ = -1,
                  mlp_ = -1;
};

}  // namespace flick
