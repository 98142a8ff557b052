// Helpers shared by the attention tests (tests/ops, tests/cuda_host).
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace flick::test {

// The materialised form of a separable attention bias (AttentionParams::
// bias_y / bias_x, F32 [B|1, H|1, Lq, rows] / [B|1, H|1, Lq, W], broadcast
// dims of size 1): F32 [B, H, Lq, rows * W] with key y * W + x holding
// bias_y[.., y] + bias_x[.., x], the sum rounded to fp32 once. Written out
// here by index, independently of the library's readers of the parts.
inline OwnedTensor materialised_bias(const Tensor& by, const Tensor& bx, int64_t B, int64_t H) {
  const int64_t Lq = by.dim(2), rows = by.dim(3), W = bx.dim(3);
  auto at = [](const Tensor& t, int64_t b, int64_t h, int64_t i, int64_t k) {
    return t.ptr<float>()[(t.dim(0) == 1 ? 0 : b) * t.stride(0) +
                          (t.dim(1) == 1 ? 0 : h) * t.stride(1) + i * t.stride(2) + k];
  };
  OwnedTensor full(DType::F32, {B, H, Lq, rows * W});
  float* f = full.t.ptr<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i)
        for (int64_t j = 0; j < rows * W; ++j)
          f[((b * H + h) * Lq + i) * rows * W + j] =
              at(by, b, h, i, j / W) + at(bx, b, h, i, j % W);
  return full;
}

}  // namespace flick::test
