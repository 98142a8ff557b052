// The action module's rotary embedding and its weight-free q/k RMSNorm
// (spec §6). Both run on [.., 64] heads:
// - RoPE: the fp32 [7500, 64] table of get_nd_rotary_pos_embed with dims
//   [8, 28, 28] and theta 256: dims 0-7 rotate by pos * 256^(-2i/8) (each
//   pair's value repeated on both lanes); h = w = 0, so dims 8-63 are the
//   identity (cos 1, sin 0). out = x*cos + rot(x)*sin in fp32, rot(x0, x1) =
//   (-x1, x0), then bf16.
// - RMSNorm: x * rsqrt(mean(x^2) + 1e-6) in bf16 arithmetic (every op
//   rounds to bf16, rsqrt as bf16(1 / bf16(sqrt))), the stored weight ignored as the reference
//   ignores it.
#pragma once

#include <cstdint>
#include <span>

namespace flick::wan {

inline constexpr int kActionHeadDim = 64;
inline constexpr int kActionRopeTimeDims = 8;
inline constexpr float kActionRopeTheta = 256.0f;
inline constexpr int64_t kActionRopePositions = 7500;

// Row `pos` of the fp32 table: cos, sin [64] each.
void action_rope_row(int64_t pos, std::span<float> cos, std::span<float> sin);

// x, out: [tokens, frames, heads, 64] raw bf16 bits (the reference's
// [B*S, T, H, D] layout); frame t sits at absolute latent start_frame + t.
void action_rope_apply_bf16(std::span<const uint16_t> x, int64_t frames, int64_t heads,
                            int64_t start_frame, std::span<uint16_t> out);
// Same with explicit table rows [frames, 64] (e.g. a table read from torch).
void action_rope_apply_bf16(std::span<const uint16_t> x, int64_t frames, int64_t heads,
                            std::span<const float> cos, std::span<const float> sin,
                            std::span<uint16_t> out);

// Weight-free bf16 RMSNorm over the last `dim` values of each row; out may
// alias x.
void action_rms_norm_bf16(std::span<const uint16_t> x, int64_t dim, std::span<uint16_t> out,
                          float eps = 1e-6f);

// The kernels behind it, bit-identical: one row, and 16 consecutive rows
// (AVX-512 F/BW; dim even; out may alias x).
void action_rms_norm_row_scalar(const uint16_t* x, int64_t dim, uint16_t* out, float eps);
void action_rms_norm_rows16_avx512(const uint16_t* x, int64_t dim, uint16_t* out, float eps);

}  // namespace flick::wan
