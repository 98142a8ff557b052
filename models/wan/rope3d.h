// The DiT's 3-D rotary embedding (spec §5, `rope_params` + `causal_rope_apply`):
// head_dim/2 complex pairs (x[2p], x[2p+1]) split into temporal, height and
// width blocks; angles, cos/sin and the complex product in f64, one bf16
// rounding at the end. Tokens are frame-major: f*h*w + i*w + j.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/backend.h"

namespace flick::wan {

// Complex pairs per axis for a head dim, as the reference splits its table:
// c = head_dim/2 -> {c - 2(c/3), c/3, c/3} (128 -> 22/21/21, 32 -> 6/5/5).
struct RopeSplit {
  int t, h, w;
  int pairs() const { return t + h + w; }
};
RopeSplit rope_split(int head_dim);

// The reference table has 1024 positions per axis.
inline constexpr int64_t kRopeMaxPositions = 1024;

class Rope3d {
 public:
  explicit Rope3d(int head_dim, double theta = 10000.0);

  int head_dim() const { return head_dim_; }
  const RopeSplit& split() const { return split_; }
  // Row `pos` of the reference's complex128 table (CausalWanModel.freqs):
  // cos/sin of pos * w_p for every pair p, each axis block with its own
  // w_j = 1 / theta^(2j / d_axis). [pairs] each.
  void table_row(int64_t pos, std::span<double> cos, std::span<double> sin) const;

  // The backend's rope_3d parameters for a frames x h x w grid whose latent
  // frames start at absolute index start_frame.
  Rope3dParams params(int64_t frames, int64_t h, int64_t w, int64_t start_frame) const;
  // The exact path: x, out [frames*h*w, heads, head_dim] (BF16 in the DiT),
  // out may alias x. Each output is bf16(float(re)) with re = a*c - b*d,
  // im = a*d + b*c in f64 (torch's complex128 multiply: two products, one
  // add, no FMA): the backend's rope_3d.
  void apply(Backend& be, const Tensor& x, int64_t frames, int64_t h, int64_t w,
             int64_t start_frame, Tensor& out) const;

  // Per-token tables for the backend's `rope` op (F32 cos/sin [tokens,
  // head_dim/2], the f64 values rounded to fp32). The op
  // multiplies in fp32, so its result can differ from apply by one bf16
  // ulp where the f64 product lies within fp32 rounding of a bf16 rounding
  // boundary; apply is the bit-exact reference.
  void token_tables_f32(int64_t frames, int64_t h, int64_t w, int64_t start_frame,
                        std::vector<float>& cos, std::vector<float>& sin) const;

 private:
  // Angles of all pairs for a token at (f, i, j).
  void token_angles(int64_t f, int64_t i, int64_t j, std::span<double> angle) const;

  int head_dim_;
  RopeSplit split_;
  double theta_;
  std::vector<double> inv_freq_;  // [pairs]
};

}  // namespace flick::wan
