// HunyuanVideoResnetBlockCausal3D (AKHV:144-187):
//   h = conv1(SiLU(norm1(x)));  h = conv2(SiLU(norm2(h)))   // 3^3 causal convs
//   y = h + (conv_shortcut(x) if I != O else x)            // 1^3 causal conv
// (dropout is the identity at inference). Keys under the block's prefix:
// norm1.{weight,bias} [I], conv1.conv.* [O, I, 3, 3, 3], norm2.* [O],
// conv2.conv.* [O, O, 3, 3, 3], conv_shortcut.conv.* [O, I, 1, 1, 1].
#pragma once

#include <memory>

#include "models/hunyuan_vae/hunyuan_vae_conv.h"
#include "models/hunyuan_vae/hunyuan_vae_norm.h"

namespace flick::hunyuan_vae {

class ResnetBlock {
 public:
  // v: the block's view ("...resnets.<i>."); in / out: expected channels.
  static Expected<ResnetBlock> load(const WeightView& v, Backend& be, const Numerics& num,
                                    int64_t in, int64_t out, int64_t groups);
  int64_t in_channels() const { return conv1_.in_channels(); }
  int64_t out_channels() const { return conv1_.out_channels(); }
  // x: [1, I, T, H, W] contiguous -> [1, O, T, H, W].
  OwnedTensor forward(Backend& be, const Tensor& x) const;

 private:
  GroupNorm norm1_, norm2_;
  CausalConv3d conv1_, conv2_;
  std::unique_ptr<CausalConv3d> shortcut_;
};

}  // namespace flick::hunyuan_vae
