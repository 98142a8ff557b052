// The SigLIP-to-context projection of FramePack's DiT (ClipVisionProjection,
// hunyuan_video_packed.py:683-691): down(SiLU(up(x))), up: image_dim -> 3D,
// down: 3D -> D. FramePack feeds SigLIP so400m's last_hidden_state
// [1, 729, 1152]; the projected tokens go in front of the text tokens.
#pragma once

#include <memory>

#include "models/hunyuan/framepack_dit_common.h"

namespace flick::hunyuan {

class DitImageProjection {
 public:
  // `v` = the `image_projection` view.
  static Expected<DitImageProjection> load(const WeightView& v, int64_t dim, int64_t image_dim,
                                           const DitRun& run);
  // x: [n, image_dim] in the activation dtype; out: [n, dim].
  void forward(const Tensor& x, Tensor& out) const;

 private:
  DitRun run_;
  int64_t dim_ = 0;
  std::unique_ptr<PackedLinear> up_, down_;
};

}  // namespace flick::hunyuan
