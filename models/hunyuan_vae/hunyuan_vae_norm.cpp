#include "models/hunyuan_vae/hunyuan_vae_norm.h"

#include <string>

namespace flick::hunyuan_vae {

Expected<GroupNorm> GroupNorm::load(const WeightView& v, std::string_view prefix, int64_t channels,
                                    int64_t groups, const Numerics& num) {
  if (groups <= 0 || channels % groups != 0)
    return invalid_input(v.full_name(std::string(prefix)) + ": " + std::to_string(groups) +
                         " groups (norm_num_groups) do not divide " + std::to_string(channels) +
                         " channels");
  GroupNorm n;
  const std::string p(prefix);
  FLICK_ASSIGN_OR_RETURN(n.weight_, load_f32(v, p + ".weight", Shape{channels}));
  FLICK_ASSIGN_OR_RETURN(n.bias_, load_f32(v, p + ".bias", Shape{channels}));
  n.groups_ = groups;
  n.act_ = num.act;
  return n;
}

OwnedTensor GroupNorm::forward(Backend& be, const Tensor& x, bool silu) const {
  FLICK_CHECK(x.ndim() >= 3 && x.dim(1) == channels(),
              "GroupNorm: x " + x.str() + ", expected " + std::to_string(channels()) + " channels");
  OwnedTensor y(act_, x.shape);
  be.group_norm(x, groups_, weight_.t, bias_.t, kNormEps, y.t,
                silu ? Activation::Silu : Activation::None);
  return y;
}

}  // namespace flick::hunyuan_vae
