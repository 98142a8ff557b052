// nn.GroupNorm(groups, C, eps 1e-6, affine) over a whole [1, C, T, H, W]
// activation [P]: a group's statistics span its C/G channels and every
// T x H x W position, so the VAE is not causal in its statistics (a frame's
// output depends on later frames; decoding in chunks changes the result).
// Optionally followed by SiLU (nonlinearity of the resnet blocks and the
// conv_norm_out + conv_act heads). Keys `<prefix>.weight`, `<prefix>.bias` [C].
#pragma once

#include <cstdint>
#include <string_view>

#include "models/hunyuan_vae/hunyuan_vae_common.h"

namespace flick::hunyuan_vae {

inline constexpr float kNormEps = 1e-6f;  // every GroupNorm of the model (AKHV:151, :489, :609)

class GroupNorm {
 public:
  static Expected<GroupNorm> load(const WeightView& v, std::string_view prefix, int64_t channels,
                                  int64_t groups, const Numerics& num);
  int64_t channels() const { return weight_.t.numel(); }
  // x: [1, C, *] contiguous -> a new tensor of that shape in the activation
  // dtype (normalised, affine, then SiLU when asked; each op rounds to the
  // activation dtype as torch's).
  OwnedTensor forward(Backend& be, const Tensor& x, bool silu) const;

 private:
  OwnedTensor weight_, bias_;  // [C] F32
  int64_t groups_ = 1;
  DType act_ = DType::F32;
};

}  // namespace flick::hunyuan_vae
