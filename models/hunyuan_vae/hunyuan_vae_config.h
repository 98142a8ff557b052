// The architecture of an AutoencoderKLHunyuanVideo checkpoint
// (diffusers 0.33.1, AKHV:656-730): read from the tensor shapes where they
// carry it, from the vae/config.json otherwise, and the two cross-checked.
//
//   from shapes       in/out channels, latent_channels, block_out_channels,
//                     layers_per_block, mid_block_add_attention
//   from config.json  norm_num_groups, scaling_factor, spatial_ and
//                     temporal_compression_ratio, act_fn (must be silu),
//                     block types (must be HunyuanVideo{Down,Up}Block3D)
// Released (hunyuanvideo-community/HunyuanVideo vae/): 3 -> 16 latents,
// blocks (128, 256, 512, 512), 2 layers per block, 32 groups, 0.476986,
// 8x / 4x.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/status.h"
#include "runtime/weights/weight_store.h"

namespace flick {

struct HunyuanVaeConfig {
  int64_t in_channels = 3;
  int64_t out_channels = 3;
  int64_t latent_channels = 16;
  std::vector<int64_t> block_out_channels;  // (128, 256, 512, 512)
  int64_t layers_per_block = 2;
  int64_t norm_groups = 32;
  float scaling_factor = 0.476986f;
  int64_t spatial_ratio = 8;
  int64_t temporal_ratio = 4;
  bool mid_attention = true;
  bool has_encoder = true, has_decoder = true;

  // root: the view holding encoder.*, decoder.*, quant_conv.*,
  // post_quant_conv.* (a checkpoint with only one half loads that half).
  static Expected<HunyuanVaeConfig> detect(const WeightView& root, const std::string& config_path);
};

}  // namespace flick
