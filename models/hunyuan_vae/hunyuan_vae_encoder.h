// HunyuanVideoEncoder3D (AKHV:413-518), one untiled pass:
//   h = conv_in(x)                                  // causal 3^3, 3 -> C0
//   h = down_blocks[i](h)                           // resnets, [downsampler]
//   h = mid_block(h)                                // res, frame-causal attn, res
//   h = conv_out(SiLU(conv_norm_out(h)))            // causal 3^3 -> 2 latent
// x [1, 3, T, H, W] -> [1, 2 L, (T - 1) / 4 + 1, H / 8, W / 8] (released
// ratios). Keys `encoder.*`.
#pragma once

#include <vector>

#include "models/hunyuan_vae/hunyuan_vae_config.h"
#include "models/hunyuan_vae/hunyuan_vae_mid_block.h"
#include "models/hunyuan_vae/hunyuan_vae_sampling.h"

namespace flick::hunyuan_vae {

class Encoder {
 public:
  // v: the "encoder." view.
  static Expected<Encoder> load(const WeightView& v, const HunyuanVaeConfig& cfg, Backend& be,
                                const Numerics& num);
  // Taps "conv_in", "down<i>" (and "down0.res0"), "mid.res0", "mid.attn",
  // "mid", "conv_out".
  OwnedTensor forward(Backend& be, const Tensor& x, const Tap& tap = {}) const;

 private:
  CausalConv3d conv_in_, conv_out_;
  std::vector<DownBlock> down_;
  MidBlock mid_;
  GroupNorm norm_out_;
};

}  // namespace flick::hunyuan_vae
