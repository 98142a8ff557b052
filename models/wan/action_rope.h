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
// Both run as backend ops (rope_unfused, rms_norm_stepwise).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/backend.h"

namespace flick::wan {

inline constexpr int kActionHeadDim = 64;
inline constexpr int kActionRopeTimeDims = 8;
inline constexpr float kActionRopeTheta = 256.0f;
inline constexpr int64_t kActionRopePositions = 7500;

// Row `pos` of the fp32 table: cos, sin [64] each.
void action_rope_row(int64_t pos, std::span<float> cos, std::span<float> sin);

// The backend rope op's tables for frames start_frame .. start_frame +
// frames - 1: cos, sin [frames, 32] (one value per pair: the table's two
// lanes of a pair are equal).
void action_rope_pair_tables(int64_t frames, int64_t start_frame, std::vector<float>& cos,
                             std::vector<float>& sin);

// The bf16 module's RoPE and RMSNorm on the given backend (rope_unfused and
// rms_norm_stepwise, the reference's rounding), over raw bf16 bits:
// x, out [tokens, frames, heads, 64] (the reference's [B*S, T, H, D]
// layout), frame t at absolute latent start_frame + t; rows of `dim` for the
// norm. out may alias x.
void action_rope_apply_bf16(Backend& be, std::span<const uint16_t> x, int64_t frames, int64_t heads,
                            int64_t start_frame, std::span<uint16_t> out);
void action_rms_norm_bf16(Backend& be, std::span<const uint16_t> x, int64_t dim,
                          std::span<uint16_t> out, float eps = 1e-6f);

}  // namespace flick::wan
