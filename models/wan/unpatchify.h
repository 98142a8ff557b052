// The DiT head's unpatchify (spec §5.6): tokens [F*h*w, 64] (frame-major,
// token f*h*w + i*w + j) -> latent [16, F, 2h, 2w] with
// out[c, f, 2i+q, 2j+r] = in[f*h*w + i*w + j, q*32 + r*16 + c]
// (patch (1, 2, 2), 16 output channels; batch 1).
#pragma once

#include <cstdint>

#include "runtime/backend.h"

namespace flick::wan {

inline constexpr int kLatentChannels = 16;
inline constexpr int kPatchH = 2, kPatchW = 2;
inline constexpr int kPatchDim = kLatentChannels * kPatchH * kPatchW;  // 64

// A pure permutation: one backend copy of a permuted view. tokens and out
// contiguous, same dtype, F*h*w*64 elements each (any shapes of that size:
// out is typically [1, 16, F, 2h, 2w]).
void unpatchify(Backend& be, const Tensor& tokens, int64_t frames, int64_t h, int64_t w,
                Tensor& out);

}  // namespace flick::wan
