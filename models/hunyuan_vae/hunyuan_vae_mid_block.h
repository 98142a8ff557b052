// HunyuanVideoMidBlock3D (AKHV:190-284): resnets.0, then per layer (one in
// the released model) attentions.i and resnets.i+1.
//
// The attention is diffusers' Attention(_from_deprecated_attn_block=True)
// with AttnProcessor2_0 over the T*H*W positions in (t, h, w) order: one head
// of dim C (scale 1/sqrt(C)), GroupNorm(groups, C) before q/k/v (statistics
// over all positions), biased to_q / to_k / to_v / to_out.0 linears, residual
// add. [P] The mask of prepare_causal_attention_mask (AKHV:36-46) is
// frame-causal: a query in frame i sees every key of frames <= i (block
// causal with block H*W), so a frame's attention ignores later frames while
// its GroupNorm statistics do not.
// Keys: attentions.0.group_norm.{weight,bias} [C], to_{q,k,v}.{weight [C, C],
// bias [C]}, to_out.0.{weight, bias}.
#pragma once

#include <memory>
#include <vector>

#include "models/hunyuan_vae/hunyuan_vae_resnet.h"

namespace flick::hunyuan_vae {

class MidAttention {
 public:
  static Expected<MidAttention> load(const WeightView& v, Backend& be, const Numerics& num,
                                     int64_t c, int64_t groups);
  // x: [1, C, T, H, W] contiguous -> x + attention, same shape.
  OwnedTensor forward(Backend& be, const Tensor& x) const;

 private:
  int64_t c_ = 0;
  GroupNorm norm_;
  std::unique_ptr<PackedLinear> qkv_, out_;  // q, k, v as one [3C, C] linear
  DType act_ = DType::F32;
};

class MidBlock {
 public:
  // v: the "mid_block." view; c: its channel count.
  static Expected<MidBlock> load(const WeightView& v, Backend& be, const Numerics& num, int64_t c,
                                 int64_t groups, bool attention);
  // Taps "<prefix>res0" (after resnets.0) and "<prefix>attn" (after
  // attentions.0, as [1, T*H*W, C], the reference's layout there).
  OwnedTensor forward(Backend& be, const Tensor& x, const Tap& tap = {},
                      std::string_view prefix = "") const;

 private:
  std::vector<ResnetBlock> resnets_;
  std::vector<MidAttention> attentions_;  // empty without attention
};

}  // namespace flick::hunyuan_vae
