// HunyuanVideoDecoder3D (AKHV:521-625), one untiled pass:
//   h = conv_in(z)                                  // causal 3^3, L -> C_last
//   h = mid_block(h)                                // res, frame-causal attn, res
//   h = up_blocks[i](h)                             // layers+1 resnets, [upsampler]
//   y = conv_out(SiLU(conv_norm_out(h)))            // causal 3^3 -> 3
// z [1, L, T, h, w] (after post_quant_conv) -> [1, 3, 4 (T - 1) + 1, 8 h, 8 w]
// (released ratios). Keys `decoder.*`.
#pragma once

#include <vector>

#include "models/hunyuan_vae/hunyuan_vae_config.h"
#include "models/hunyuan_vae/hunyuan_vae_mid_block.h"
#include "models/hunyuan_vae/hunyuan_vae_sampling.h"

namespace flick::hunyuan_vae {

class Decoder {
 public:
  // v: the "decoder." view.
  static Expected<Decoder> load(const WeightView& v, const HunyuanVaeConfig& cfg, Backend& be,
                                const Numerics& num);
  // Taps "conv_in", "mid.res0", "mid.attn", "mid", "up<i>" (and
  // "up0.res0", "up0.upsample").
  OwnedTensor forward(Backend& be, const Tensor& z, const Tap& tap = {}) const;

 private:
  CausalConv3d conv_in_, conv_out_;
  MidBlock mid_;
  std::vector<UpBlock> up_;
  GroupNorm norm_out_;
};

}  // namespace flick::hunyuan_vae
