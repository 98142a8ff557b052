// Seeded noise that reproduces PyTorch's CPU generator bit for bit, so a
// reference run with the same seed sees the same noise:
//   torch.Generator().manual_seed(seed); torch.randn(n, generator=g[, dtype])
// (mt19937; 24-bit float uniforms; Box–Muller in blocks of 16 with the
// cephes-style log/sincos of ATen's AVX2 kernel, the FMA contractions
// included; tensors under 16 elements take torch's scalar double path).
// Verified against torch 2.15 (tests/core/test_random.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <random>

namespace flick {

class TorchGenerator {
 public:
  explicit TorchGenerator(uint64_t seed);

  uint32_t random();    // one mt19937 draw
  uint64_t random64();  // two draws, first in the high half
  // torch.randn(n) into out (float32).
  void randn(float* out, int64_t n);
  // torch.randn(n, dtype=torch.bfloat16): computed in float, rounded.
  void randn_bf16(uint16_t* out, int64_t n);

 private:
  float uniform_float();
  double uniform_double();
  double normal_double();  // at::normal_distribution<double>, with its cache

  std::mt19937 engine_;
  std::optional<double> next_double_normal_;
};

}  // namespace flick
