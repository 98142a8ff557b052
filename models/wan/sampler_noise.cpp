#include "models/wan/sampler_noise.h"

#include "runtime/status.h"

namespace flick::wan {

SamplerNoise::SamplerNoise(uint64_t seed, int64_t latents, int64_t h, int64_t w,
                           int64_t block_frames, int64_t channels)
    : gen_(seed), block_numel_(block_frames * channels * h * w) {
  FLICK_CHECK(latents > 0 && h > 0 && w > 0 && block_frames > 0 && channels > 0);
  initial_.resize(static_cast<size_t>(channels * latents * h * w));
  gen_.randn(initial_.data(), static_cast<int64_t>(initial_.size()));
}

std::vector<float> SamplerNoise::next_renoise() {
  std::vector<float> out(static_cast<size_t>(block_numel_));
  gen_.randn(out.data(), block_numel_);
  return out;
}

}  // namespace flick::wan
