// The configuration of FramePack's packed HunyuanVideo DiT
// (HunyuanVideoTransformer3DModelPacked, hunyuan_video_packed.py:728-750) and
// its checkpoint layout. Sizes come from tensor shapes; the three fields no
// shape carries (num_attention_heads, rope_axes_dim, rope_theta) come from
// the checkpoint folder's config.json, which is checked against the shapes.
// The released lllyasviel/FramePackI2V_HY: D = 3072 (24 heads x 128), 20
// double + 40 single blocks, 2 refiner layers, rope (16, 56, 56) base 256.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/status.h"
#include "runtime/weights/weight_store.h"

namespace flick::hunyuan {

struct FramePackDitConfig {
  int64_t dim = 0;                               // inner dim D = heads * head_dim: 3072
  int64_t heads = 0;                             // 24 (config.json)
  int64_t head_dim = 0;                          // 128
  int64_t layers = 0;                            // double-stream blocks: 20
  int64_t single_layers = 0;                     // single-stream blocks: 40
  int64_t refiner_layers = 0;                    // token refiner blocks: 2
  int64_t mlp_dim = 0;                           // D * mlp_ratio: 12288
  int64_t refiner_mlp_dim = 0;                   // D * 4 (the refiner's own default ratio): 12288
  int64_t in_channels = 0;                       // 16
  int64_t out_channels = 0;                      // 16
  int64_t text_dim = 0;                          // LLaMA hidden: 4096
  int64_t pooled_dim = 0;                        // CLIP-L pooled: 768
  int64_t image_dim = 0;                         // SigLIP hidden: 1152
  std::array<int64_t, 3> rope_axes{16, 56, 56};  // t, y, x (config.json)
  double rope_theta = 256.0;                     // config.json
  static constexpr int64_t kFreqDim = 256;       // Timesteps(num_channels=256)
  static constexpr int64_t kPatch = 2, kPatchT = 1;
  static constexpr float kEps = 1e-6f;  // every LayerNorm / RMSNorm of the model

  // Shapes under `model` (the checkpoint root: x_embedder.proj.weight, ...)
  // plus config.json at `config_path` ("" = none: the released model's
  // heads / rope, as for a single-file checkpoint). Errors name the tensor or the key.
  static Expected<FramePackDitConfig> detect(const WeightView& model,
                                             const std::string& config_path);
};

// One checkpoint tensor the model reads: its diffusers state-dict name and shape.
struct DitTensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// Every tensor the model reads, for a config (the state-dict order of the
// reference class). The loader reads exactly these (a test checks both ways).
std::vector<DitTensorSpec> framepack_dit_layout(const FramePackDitConfig& c);

// Checks that `model` holds every tensor of the layout with its shape and
// nothing else; the error lists every missing, mis-shaped and unexpected
// tensor by name (not only the first).
Status check_framepack_dit_layout(const WeightView& model, const FramePackDitConfig& c);

// The checkpoint files of a diffusers model folder: the sharded index
// (diffusion_pytorch_model.safetensors.index.json) or the single
// diffusion_pytorch_model.safetensors; an error says what is missing.
Expected<std::string> framepack_dit_weights_path(const std::string& folder);

}  // namespace flick::hunyuan
