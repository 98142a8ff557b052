// The DiT head's unpatchify (spec §5.6): tokens [F*h*w, 64] (frame-major,
// token f*h*w + i*w + j) -> latent [16, F, 2h, 2w] with
// out[c, f, 2i+q, 2j+r] = in[f*h*w + i*w + j, q*32 + r*16 + c]
// (patch (1, 2, 2), 16 output channels; batch 1).
#pragma once

#include <cstdint>
#include <span>

namespace flick::wan {

inline constexpr int kLatentChannels = 16;
inline constexpr int kPatchH = 2, kPatchW = 2;
inline constexpr int kPatchDim = kLatentChannels * kPatchH * kPatchW;  // 64

// Pure permutation; T is the element type (bf16 bits or float).
template <typename T>
void unpatchify(std::span<const T> tokens, int64_t frames, int64_t h, int64_t w, std::span<T> out);

extern template void unpatchify<uint16_t>(std::span<const uint16_t>, int64_t, int64_t, int64_t,
                                          std::span<uint16_t>);
extern template void unpatchify<float>(std::span<const float>, int64_t, int64_t, int64_t,
                                       std::span<float>);

}  // namespace flick::wan
