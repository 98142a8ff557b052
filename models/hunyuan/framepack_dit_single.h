// The single-stream block of FramePack's DiT
// (HunyuanVideoSingleTransformerBlock, hunyuan_video_packed.py:534-605,
// attention processor :189-216), over h = [x; c] (image rows first):
//
//   (s, sc, g) = norm.linear(SiLU(temb))                    // [1, 3D]
//   n   = LN(h)(1 + sc) + s
//   mlp = GELU_tanh(proj_mlp(n))                            // [N, mlp]
//   q, k, v = to_q/k/v(n) -> heads; RMSNorm q, k; RoPE on the image rows only
//   A   = SDPA(q, k, v)                                     // no out projection
//   h  += proj_out([A | mlp]) * g                           // Linear D + mlp -> D
//
// The reference concatenates and splits x and c in every block; the blocks
// run here on the concatenated state directly (the same values).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/hunyuan/framepack_dit_common.h"
#include "models/hunyuan/framepack_dit_config.h"

namespace flick::hunyuan {

class DitSingleBlock {
 public:
  // `v` = `single_transformer_blocks.<i>`.
  static Expected<DitSingleBlock> load(const WeightView& v, const FramePackDitConfig& c,
                                       const DitRun& run);
  // h [N, D] in place, its first nx rows the image tokens (cos / sin [nx,
  // head_dim / 2]). Taps `<prefix>x`, `<prefix>ctx`, `<prefix>attn_x`,
  // `<prefix>mlp` (proj_mlp's output before the GELU).
  void forward(Tensor& h, int64_t nx, const Tensor& temb_silu, const Tensor& cos, const Tensor& sin,
               const std::string& prefix, const DitTap& tap) const;

 private:
  FramePackDitConfig cfg_;
  DitRun run_;
  std::vector<OwnedTensor> owned_;
  std::unique_ptr<PackedLinear> mod_, q_, k_, v_, mlp_, out_;
  Tensor norm_q_, norm_k_;
};

}  // namespace flick::hunyuan
