// The LLaMA token refiner of FramePack's DiT (`context_embedder`,
// HunyuanVideoTokenRefiner, hunyuan_video_packed.py:262-422):
//
//   pooled = masked mean of the LLaMA states (fp32 sum, then the activation dtype)
//   temb   = MLP_t(sinus(t)) + Proj(pooled)                 (framepack_dit_embed.h)
//   h      = proj_in(text)                                  // [n, D]
//   per block: g_msa, g_mlp = norm_out.linear(SiLU(temb))   // [1, 2D]
//              h += Attn(norm1(h)) * g_msa                  // affine LN, eps 1e-6, biased
//              q/k/v/out, no qk norm h += ff(norm2(h)) * g_mlp                    // Linear -> SiLU
//              -> Linear
//
// The reference runs the 512 padded tokens with the mask valid(i) & valid(j)
// (column 0 forced true) and the DiT later keeps the first n_valid rows
// (B = 1 crop, :924-937). A valid row attends to valid keys only, so running
// the n_valid unpadded tokens without a mask gives those rows exactly; this
// component takes the unpadded sequence.
#pragma once

#include <memory>
#include <vector>

#include "models/hunyuan/framepack_dit_common.h"
#include "models/hunyuan/framepack_dit_config.h"
#include "models/hunyuan/framepack_dit_embed.h"

namespace flick::hunyuan {

class DitTokenRefiner {
 public:
  // `v` = the `context_embedder` view.
  static Expected<DitTokenRefiner> load(const WeightView& v, const FramePackDitConfig& c,
                                        const DitRun& run);
  // text: [n, text_dim] (n >= 1 valid tokens) in the activation dtype, t the
  // (already rounded) timestep; out: [n, D]. Taps "refiner_temb",
  // "refiner_proj_in", "refined".
  void forward(const Tensor& text, float t, Tensor& out, const DitTap& tap = {}) const;

 private:
  struct Block {
    Tensor norm1_w, norm1_b, norm2_w, norm2_b;
    std::unique_ptr<PackedLinear> q, k, v, o, ff1, ff2, gates;
  };

  FramePackDitConfig cfg_;
  DitRun run_;
  std::vector<OwnedTensor> owned_;
  DitTimeTextEmbed temb_;
  std::unique_ptr<PackedLinear> proj_in_;
  std::vector<Block> blocks_;
};

}  // namespace flick::hunyuan
