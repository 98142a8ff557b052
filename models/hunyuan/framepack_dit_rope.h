// The 3-D RoPE of FramePack's DiT (HunyuanVideoRotaryPosEmbed,
// hunyuan_video_packed.py:425-460) and its pooled form for the 2x / 4x clean
// latents (:872-890).
//
// Head dim D = t + y + x axes (16 + 56 + 56). For an axis of size d, pair j
// (j < d/2) turns at w_j = 1 / fp32(pow_f64(theta, fp32(2j) / d)) (errata 4
// of the spec: torch's CPU pow of a Python float by an fp32 tensor is done in
// double, then rounded; powf misses 1 ulp on 9 of 28 entries), angle =
// fp32(w_j * pos), cos/sin in fp32. Positions are meshgrid(frame_indices,
// arange(h), arange(w)) over the patch grid (h = H/2, w = W/2).
//
// Pooled streams [P]: the reference replicate-pads the (T, h, w) grid of cos
// and sin tables to a multiple of the kernel (k, k, k) and average-pools it
// (avg_pool3d): each token's table is the mean of the cos / sin values, not
// the cos of a mean position. The two entries of a pair stay equal, so one
// value per pair is kept.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "runtime/tensor.h"

namespace flick::hunyuan {

struct DitRopeSpec {
  std::array<int64_t, 3> axes{16, 56, 56};  // t, y, x: sum = head dim
  double theta = 256.0;
  int64_t pairs() const { return (axes[0] + axes[1] + axes[2]) / 2; }
};

// Writes the tables of the grid frames x h x w (tokens row-major (t, y, x))
// into cos / sin, F32 [tokens, D/2], pooled by `pool` (1 = not pooled) in
// all three dims after replicate padding: tokens = ceil(T/pool) *
// ceil(h/pool) * ceil(w/pool).
void dit_rope_tables(const DitRopeSpec& spec, std::span<const int64_t> frame_indices, int64_t h,
                     int64_t w, int64_t pool, Tensor& cos, Tensor& sin);

// Tokens of a pooled grid (ceil in each dim).
int64_t dit_rope_tokens(int64_t frames, int64_t h, int64_t w, int64_t pool);

}  // namespace flick::hunyuan
