#include "models/wan_vae/wan_vae_kernels.h"

#include "runtime/status.h"

namespace flick::wan_vae {

void interleave_upsample_phases(Backend& be, const Tensor& src, Tensor& dst) {
  FLICK_CHECK(src.ndim() == 4 && dst.ndim() == 3 && src.dtype == dst.dtype && src.is_contiguous() &&
                  dst.is_contiguous() && src.dim(2) == 4 && dst.dim(0) == 2 * (src.dim(0) - 1) &&
                  dst.dim(1) == 2 * (src.dim(1) - 1) && dst.dim(2) == src.dim(3),
              "interleave_upsample_phases: src " + src.str() + ", dst " + dst.str());
  const int64_t h = src.dim(0) - 1, w = src.dim(1) - 1, c = src.dim(3);
  // dst as [H, 2 (py), W, 2 (px), C]; its source element src[i + py, j + px,
  // 2 py + px, :] sits at i s0 + j s1 + py (s0 + 2C) + px (s1 + C): a view.
  const int64_t s0 = src.stride(0), s1 = src.stride(1);
  Tensor from = Tensor::view(src.data, src.dtype, Shape{h, 2, w, 2, c});
  from.strides = {s0, s0 + 2 * c, s1, s1 + c, 1, 0};
  Tensor to = dst.reshape({h, 2, w, 2, c});
  be.copy(from, to);
}

}  // namespace flick::wan_vae
