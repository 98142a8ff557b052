#include "models/hunyuan_vae/hunyuan_vae_resnet.h"

#include <string>
#include <utility>

namespace flick::hunyuan_vae {

Expected<ResnetBlock> ResnetBlock::load(const WeightView& v, Backend& be, const Numerics& num,
                                        int64_t in, int64_t out, int64_t groups) {
  ResnetBlock r;
  FLICK_ASSIGN_OR_RETURN(r.norm1_, GroupNorm::load(v, "norm1", in, groups, num));
  FLICK_ASSIGN_OR_RETURN(r.conv1_, CausalConv3d::load(v, "conv1", be, num, in, out));
  FLICK_ASSIGN_OR_RETURN(r.norm2_, GroupNorm::load(v, "norm2", out, groups, num));
  FLICK_ASSIGN_OR_RETURN(r.conv2_, CausalConv3d::load(v, "conv2", be, num, out, out));
  if (in != out) {
    FLICK_ASSIGN_OR_RETURN(CausalConv3d s,
                           CausalConv3d::load(v, "conv_shortcut", be, num, in, out));
    r.shortcut_ = std::make_unique<CausalConv3d>(std::move(s));
  } else if (v.has("conv_shortcut.conv.weight")) {
    return invalid_input(v.full_name("conv_shortcut.conv.weight") +
                         ": unexpected (the block keeps its channel count)");
  }
  return r;
}

OwnedTensor ResnetBlock::forward(Backend& be, const Tensor& x) const {
  // Each normalised input is freed once padded, h once normalised: at most
  // x, one padded input and one output are alive besides the block's result.
  OwnedTensor h = conv1_.forward(be, norm1_.forward(be, x, /*silu=*/true));
  OwnedTensor n2 = norm2_.forward(be, h.t, /*silu=*/true);
  h = OwnedTensor();
  OwnedTensor y = conv2_.forward(be, std::move(n2));
  if (shortcut_) {
    const OwnedTensor s = shortcut_->forward(be, x);
    be.add(y.t, s.t, y.t);  // hidden_states + residual (AKHV:186)
  } else {
    be.add(y.t, x, y.t);
  }
  return y;
}

}  // namespace flick::hunyuan_vae
