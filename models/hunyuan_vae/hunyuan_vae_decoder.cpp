#include "models/hunyuan_vae/hunyuan_vae_decoder.h"

#include <string>
#include <utility>

namespace flick::hunyuan_vae {

Expected<Decoder> Decoder::load(const WeightView& v, const HunyuanVaeConfig& cfg, Backend& be,
                                const Numerics& num) {
  Decoder d;
  const std::vector<int64_t> ch(cfg.block_out_channels.rbegin(), cfg.block_out_channels.rend());
  const int64_t levels = static_cast<int64_t>(ch.size()), g = cfg.norm_groups;
  FLICK_ASSIGN_OR_RETURN(d.conv_in_,
                         CausalConv3d::load(v, "conv_in", be, num, cfg.latent_channels, ch[0]));
  FLICK_ASSIGN_OR_RETURN(d.mid_,
                         MidBlock::load(v.sub("mid_block"), be, num, ch[0], g, cfg.mid_attention));
  for (int64_t i = 0; i < levels; ++i) {
    FLICK_ASSIGN_OR_RETURN(Resample rs,
                           decoder_resample(i, levels, cfg.spatial_ratio, cfg.temporal_ratio));
    const size_t k = static_cast<size_t>(i);
    FLICK_ASSIGN_OR_RETURN(UpBlock b, UpBlock::load(v.sub("up_blocks." + std::to_string(i)), be,
                                                    num, i == 0 ? ch[0] : ch[k - 1], ch[k],
                                                    cfg.layers_per_block + 1, g, rs));
    d.up_.push_back(std::move(b));
  }
  if (v.has("up_blocks." + std::to_string(levels) + ".resnets.0.conv1.conv.weight"))
    return invalid_input(v.full_name("up_blocks." + std::to_string(levels)) + ": unexpected");
  FLICK_ASSIGN_OR_RETURN(d.norm_out_, GroupNorm::load(v, "conv_norm_out", ch.back(), g, num));
  FLICK_ASSIGN_OR_RETURN(d.conv_out_,
                         CausalConv3d::load(v, "conv_out", be, num, ch.back(), cfg.out_channels));
  return d;
}

OwnedTensor Decoder::forward(Backend& be, const Tensor& z, const Tap& tap) const {
  OwnedTensor h = conv_in_.forward(be, z);
  tap_if(tap, "conv_in", h.t);
  h = mid_.forward(be, h.t, tap, "mid.");
  tap_if(tap, "mid", h.t);
  for (size_t i = 0; i < up_.size(); ++i) {
    const std::string name = "up" + std::to_string(i);
    h = up_[i].forward(be, h.t, tap, name + ".");
    tap_if(tap, name, h.t);
  }
  return conv_out_.forward(be, norm_out_.forward(be, h.t, /*silu=*/true));
}

}  // namespace flick::hunyuan_vae
