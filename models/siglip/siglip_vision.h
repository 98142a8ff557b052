// The SigLIP vision tower as FramePack uses it (`image_encoder` of
// lllyasviel/flux_redux_bfl, transformers 4.46.2 SiglipVisionModel,
// so400m-patch14-384; FramePack diffusers_helper/clip_vision.py:9, demo_gradio.py:165-166):
//
//   pixels = (u8 * (1/255 in float64) -> f32 - 0.5) / 0.5          // [1, 3, 384, 384]
//   x      = patch_embedding(pixels) + position_embedding           // [729, W]
//            (conv k = stride = 14, "valid": 27 x 27 patches, the last 6 pixel rows / cols unused)
//   per layer (pre-LN, full self-attention):
//            x += out_proj(attn(q_proj h, k_proj h, v_proj h)),  h = layer_norm1(x)
//            x += fc2(gelu_tanh(fc1 h)),                          h = layer_norm2(x)
//   out    = post_layernorm(x)                                       // last_hidden_state [1, 729,
//   W]
//
// FramePack feeds last_hidden_state to the DiT's image projection; the
// attention-pooling head (`head.*`: probe, attention, layernorm, mlp), present
// in the checkpoint since SiglipVisionConfig has no vision_use_head = false,
// is not run and its tensors are marked known-unused.
//
// Preprocessing (SiglipImageProcessor with FLUX.1-Redux's
// preprocessor_config: resize 384 x 384 PIL BICUBIC, rescale 1/255, normalise
// 0.5 / 0.5): forward_rgb() resizes with Pillow's resampler reproduced bit for
// bit (pil_resample.h; transformers hands the uint8 array to PIL), then
// siglip_preprocess() rescales exactly as transformers (image_transforms.py
// rescale: uint8 -> float64 * scale -> float32; normalize in float32).
// FramePack feeds it the bucket-cropped start frame (demo_gradio.py:165).
//
// Weight names are the checkpoint's (`vision_model.` prefix). The config comes
// from tensor shapes plus config.json's num_attention_heads, hidden_act
// ("gelu_pytorch_tanh" or "gelu") and layer_norm_eps.
//
// Precision BF16 reproduces a bf16 module: every parameter rounded to bf16,
// every activation tensor stored in bf16 (fc1's output rounded before the
// GELU), LayerNorm / attention computed in fp32 inside. F32 keeps fp32. The
// release runs in fp16 (demo_gradio.py:56), which flick does not emulate.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"
#include "runtime/weights/weight_store.h"

namespace flick::siglip {

struct SiglipVisionConfig {
  int64_t width = 0;         // W: 1152
  int64_t layers = 0;        // 27
  int64_t heads = 0;         // 16 (config.json)
  int64_t head_dim = 0;      // 72
  int64_t intermediate = 0;  // 4304
  int64_t patch = 0;         // 14
  int64_t grid = 0;          // patches per side: 27
  int64_t image_size = 0;    // config.json image_size: 384 (>= grid * patch = 378)
  bool gelu_tanh = true;     // hidden_act "gelu_pytorch_tanh"; else exact GELU
  float eps = 1e-6f;         // layer_norm_eps

  int64_t tokens() const { return grid * grid; }  // 729

  // Reads config.json and checks it against the shapes under `vision_model`
  // (the view holding embeddings / encoder / post_layernorm). Errors name the
  // key or the tensor.
  static Expected<SiglipVisionConfig> detect(const WeightView& vision_model,
                                             const std::string& config_path);
};

// `vision_model.` of a SiglipVisionModel file, or the root of one saved without it.
WeightView siglip_vision_model_view(const WeightStore& store);

// SiglipImageProcessor's rescale + normalise of an interleaved RGB uint8
// image [height, width, 3] (already resized) into pixels [1, 3, height,
// width] F32, bit-exact with transformers (see the header comment).
Status siglip_preprocess(const uint8_t* rgb, int64_t height, int64_t width, Tensor& pixels);

class SiglipVision {
 public:
  // Every intermediate as it is produced: "embed", "layer{i}" ([1, T, W]).
  using Tap = std::function<void(std::string_view name, const Tensor& t)>;

  // precision: F32, BF16, or INT8 / FP8 for the layer linears (the rest BF16).
  static Expected<SiglipVision> load(const WeightView& vision_model,
                                     const SiglipVisionConfig& config, Backend& backend,
                                     Precision precision);

  const SiglipVisionConfig& config() const { return cfg_; }
  DType activation_dtype() const { return act_; }

  // pixels: [1, 3, image_size, image_size] F32 or BF16 (siglip_preprocess's
  // output). Returns last_hidden_state [1, T, W] in activation_dtype(), a view
  // into the component's arena valid until the next forward().
  Expected<Tensor> forward(const Tensor& pixels, const Tap& tap = {});
  // The whole processor then forward, on an RGB uint8 image [height, width, 3]
  // of any size (FramePack: the bucket image, e.g. 608 x 640).
  Expected<Tensor> forward_rgb(const uint8_t* rgb, int64_t height, int64_t width,
                               const Tap& tap = {});

 private:
  struct Layer {
    Tensor ln1_w, ln1_b, ln2_w, ln2_b;  // [W], activation dtype
    std::unique_ptr<PackedLinear> qkv, out, fc1, fc2;
  };

  SiglipVision() = default;
  Status load_weights(const WeightView& vision_model);
  void plan();

  SiglipVisionConfig cfg_;
  Backend* backend_ = nullptr;
  Precision precision_ = Precision::F32;
  DType act_ = DType::F32;

  std::vector<OwnedTensor> owned_;
  std::unique_ptr<PackedLinear> patch_embed_;  // conv weight as [W, 3 * p * p], with bias
  Tensor pos_;                                 // [T, W], activation dtype
  Tensor post_w_, post_b_;
  std::vector<Layer> layers_;

  Arena arena_;
  Arena::BufferId rgb_pixels_ = -1, pixels_ = -1, patches_ = -1, x_ = -1, h_ = -1, qkv_ = -1,
                  attn_ = -1, o_ = -1, mlp_ = -1;
};

}  // namespace flick::siglip
