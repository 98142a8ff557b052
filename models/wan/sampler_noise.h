// The noise of a whole sampler run, in the order the golden reference draws
// it (tests/data/mg2/README.md): one CPU generator seeded once; first the
// initial latent noise randn([1, 16, N, h, w]) (channel-major c, f, y, x),
// then one randn([3, 16, h, w]) per block and per re-noise step, frame-major
// (f, c, y, x: the sampler's (b f) c h w layout). All drawn in fp32 and cast
// to the working dtype by the caller (round_bf16 / f32_to_bf16).
//
// The reference itself draws on CUDA (Philox), which no CPU code reproduces;
// this is the seeded CPU scheme flick uses, equal to torch's CPU generator.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/random.h"

namespace flick::wan {

class SamplerNoise {
 public:
  // Draws the initial noise at once, so the re-noise draws follow it.
  SamplerNoise(uint64_t seed, int64_t latents, int64_t h, int64_t w, int64_t block_frames = 3,
               int64_t channels = 16);

  // [channels, latents, h, w] fp32.
  const std::vector<float>& initial() const { return initial_; }
  // The next re-noise draw: [block_frames, channels, h, w] fp32. Call once
  // per block and re-noise step, in sampler order.
  std::vector<float> next_renoise();

 private:
  TorchGenerator gen_;
  int64_t block_numel_;
  std::vector<float> initial_;
};

}  // namespace flick::wan
