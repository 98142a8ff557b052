#include "models/hunyuan_vae/hunyuan_vae_tiling.h"

#include <algorithm>

namespace flick::hunyuan_vae {

void blend(Backend& be, const Tensor& a, Tensor& b, int dim, int64_t extent) {
  const int64_t e = std::min({a.dim(dim), b.dim(dim), extent});
  if (e <= 0) return;
  Shape s = b.shape;
  s[dim] = 1;
  OwnedTensor tmp(b.dtype, s);
  for (int64_t k = 0; k < e; ++k) {
    const double w = static_cast<double>(k) / static_cast<double>(e);
    Tensor bs = b.slice(dim, k, 1);
    be.affine(a.slice(dim, a.dim(dim) - e + k, 1), static_cast<float>(1.0 - w), 0.f, tmp.t);
    be.affine(bs, static_cast<float>(w), 0.f, bs);
    be.add(tmp.t, bs, bs);
  }
}

}  // namespace flick::hunyuan_vae
