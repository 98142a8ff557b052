#include "models/hunyuan_vae/hunyuan_vae_encoder.h"

#include <string>
#include <utility>

namespace flick::hunyuan_vae {

Expected<Encoder> Encoder::load(const WeightView& v, const HunyuanVaeConfig& cfg, Backend& be,
                                const Numerics& num) {
  Encoder e;
  const std::vector<int64_t>& ch = cfg.block_out_channels;
  const int64_t levels = static_cast<int64_t>(ch.size()), g = cfg.norm_groups;
  FLICK_ASSIGN_OR_RETURN(e.conv_in_,
                         CausalConv3d::load(v, "conv_in", be, num, cfg.in_channels, ch[0]));
  for (int64_t i = 0; i < levels; ++i) {
    FLICK_ASSIGN_OR_RETURN(Resample rs,
                           encoder_resample(i, levels, cfg.spatial_ratio, cfg.temporal_ratio));
    const size_t k = static_cast<size_t>(i);
    FLICK_ASSIGN_OR_RETURN(DownBlock b, DownBlock::load(v.sub("down_blocks." + std::to_string(i)),
                                                        be, num, i == 0 ? ch[0] : ch[k - 1], ch[k],
                                                        cfg.layers_per_block, g, rs));
    e.down_.push_back(std::move(b));
  }
  if (v.has("down_blocks." + std::to_string(levels) + ".resnets.0.conv1.conv.weight"))
    return invalid_input(v.full_name("down_blocks." + std::to_string(levels)) + ": unexpected");
  const int64_t top = ch.back();
  FLICK_ASSIGN_OR_RETURN(e.mid_,
                         MidBlock::load(v.sub("mid_block"), be, num, top, g, cfg.mid_attention));
  FLICK_ASSIGN_OR_RETURN(e.norm_out_, GroupNorm::load(v, "conv_norm_out", top, g, num));
  FLICK_ASSIGN_OR_RETURN(e.conv_out_,
                         CausalConv3d::load(v, "conv_out", be, num, top, 2 * cfg.latent_channels));
  return e;
}

OwnedTensor Encoder::forward(Backend& be, const Tensor& x, const Tap& tap) const {
  OwnedTensor h = conv_in_.forward(be, x);
  tap_if(tap, "conv_in", h.t);
  for (size_t i = 0; i < down_.size(); ++i) {
    const std::string name = "down" + std::to_string(i);
    h = down_[i].forward(be, h.t, tap, name + ".");
    tap_if(tap, name, h.t);
  }
  h = mid_.forward(be, h.t, tap, "mid.");
  tap_if(tap, "mid", h.t);
  h = conv_out_.forward(be, norm_out_.forward(be, h.t, /*silu=*/true));
  tap_if(tap, "conv_out", h.t);
  return h;
}

}  // namespace flick::hunyuan_vae
