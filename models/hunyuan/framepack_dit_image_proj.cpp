#include "models/hunyuan/framepack_dit_image_proj.h"

namespace flick::hunyuan {

Expected<DitImageProjection> DitImageProjection::load(const WeightView& v, int64_t dim,
                                                      int64_t image_dim, const DitRun& run) {
  DitImageProjection m;
  m.run_ = run;
  m.dim_ = dim;
  FLICK_ASSIGN_OR_RETURN(m.up_, load_dit_linear(v, "up", 3 * dim, image_dim, run, run.kept()));
  FLICK_ASSIGN_OR_RETURN(m.down_, load_dit_linear(v, "down", dim, 3 * dim, run, run.kept()));
  return m;
}

void DitImageProjection::forward(const Tensor& x, Tensor& out) const {
  OwnedTensor h(run_.act(), {x.dim(0), 3 * dim_});  // [n, 3D]
  dit_linear_act(run_, x, *up_, h.t, Activation::Silu);
  run_.be->linear(h.t, *down_, out, Activation::None);
}

}  // namespace flick::hunyuan
