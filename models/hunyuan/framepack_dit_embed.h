// Conditioning embedders of FramePack's DiT (hunyuan_video_packed.py:219-259):
//
//   CombinedTimestepGuidanceTextProjEmbeddings (`time_text_embed`):
//     temb = MLP_t(sinus(t)) + MLP_g(sinus(g)) + Proj(pooled CLIP-L)
//   CombinedTimestepTextProjEmbeddings (`context_embedder.time_text_embed`):
//     temb = MLP_t(sinus(t)) + Proj(pooled LLaMA)
//
// MLP = TimestepEmbedding (linear_1 256 -> D, SiLU, linear_2), Proj =
// PixArtAlphaTextProjection (linear_1 P -> D, SiLU, linear_2). sinus is
// diffusers' Timesteps(256, flip_sin_to_cos) in fp32, cast to the
// activation dtype (`.to(dtype=pooled_projection.dtype)`); every sum is a
// separate (rounded) op.
#pragma once

#include <memory>
#include <optional>

#include "models/hunyuan/framepack_dit_common.h"

namespace flick::hunyuan {

class DitTimeTextEmbed {
 public:
  // `v` holds timestep_embedder / [guidance_embedder] / text_embedder.
  static Expected<DitTimeTextEmbed> load(const WeightView& v, int64_t dim, int64_t pooled_dim,
                                         bool guidance, const DitRun& run);
  // pooled: [1, pooled_dim] in the activation dtype; out: [1, dim].
  // guidance must be given iff the embedder has one.
  void forward(float t, std::optional<float> guidance, const Tensor& pooled, Tensor& out) const;

 private:
  // linear_2(SiLU(linear_1(in))) of the MLP at index i.
  void mlp(int i, const Tensor& in, Tensor& out) const;

  DitRun run_;
  int64_t dim_ = 0;
  bool guidance_ = false;
  // timestep, guidance, text: linear_1 and linear_2 each.
  std::unique_ptr<PackedLinear> l1_[3], l2_[3];
};

}  // namespace flick::hunyuan
