#include "models/wan/action_rope.h"

#include <cmath>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/status.h"

namespace flick::wan {

void action_rope_row(int64_t pos, std::span<float> cos, std::span<float> sin) {
  FLICK_CHECK(cos.size() == kActionHeadDim && sin.size() == kActionHeadDim);
  FLICK_CHECK(pos >= 0 && pos < kActionRopePositions);
  // Positions come from an fp32 linspace(0, 7500, 7501) with step exactly 1,
  // frequencies 1 / 256^(2i/8) = 1, 1/4, 1/16, 1/64: every angle is exact.
  constexpr int pairs = kActionRopeTimeDims / 2;
  for (int i = 0; i < pairs; ++i) {
    const float freq =
        1.0f / std::pow(kActionRopeTheta, static_cast<float>(2 * i) / kActionRopeTimeDims);
    const float angle = static_cast<float>(pos) * freq;
    cos[2 * i] = cos[2 * i + 1] = std::cos(angle);
    sin[2 * i] = sin[2 * i + 1] = std::sin(angle);
  }
  for (int d = kActionRopeTimeDims; d < kActionHeadDim; ++d) cos[d] = 1.0f, sin[d] = 0.0f;
}

void action_rope_pair_tables(int64_t frames, int64_t start_frame, std::vector<float>& cos,
                             std::vector<float>& sin) {
  cos.assign(static_cast<size_t>(frames * kActionHeadDim / 2), 0.f);
  sin.assign(cos.size(), 0.f);
  std::vector<float> rc(kActionHeadDim), rs(kActionHeadDim);
  for (int64_t t = 0; t < frames; ++t) {
    action_rope_row(start_frame + t, rc, rs);
    for (int64_t i = 0; i < kActionHeadDim / 2; ++i) {
      cos[static_cast<size_t>(t * kActionHeadDim / 2 + i)] = rc[static_cast<size_t>(2 * i)];
      sin[static_cast<size_t>(t * kActionHeadDim / 2 + i)] = rs[static_cast<size_t>(2 * i)];
    }
  }
}

void action_rope_apply_bf16(Backend& be, std::span<const uint16_t> x, int64_t frames, int64_t heads,
                            int64_t start_frame, std::span<uint16_t> out) {
  const int64_t row = frames * heads * kActionHeadDim;
  FLICK_CHECK(frames > 0 && heads > 0 && x.size() % row == 0 && out.size() == x.size());
  const Shape shape{static_cast<int64_t>(x.size()) / row, frames, heads, kActionHeadDim};
  std::vector<float> cos, sin;
  action_rope_pair_tables(frames, start_frame, cos, sin);
  const Tensor xt = Tensor::view(const_cast<uint16_t*>(x.data()), DType::BF16, shape);
  Tensor yt = Tensor::view(out.data(), DType::BF16, shape);
  be.rope_unfused(xt, Tensor::view(cos.data(), DType::F32, Shape{frames, kActionHeadDim / 2}),
                  Tensor::view(sin.data(), DType::F32, Shape{frames, kActionHeadDim / 2}), yt);
}

void action_rms_norm_bf16(Backend& be, std::span<const uint16_t> x, int64_t dim,
                          std::span<uint16_t> out, float eps) {
  FLICK_CHECK(dim > 0 && x.size() % dim == 0 && out.size() == x.size());
  const Shape shape{static_cast<int64_t>(x.size()) / dim, dim};
  const Tensor xt = Tensor::view(const_cast<uint16_t*>(x.data()), DType::BF16, shape);
  Tensor yt = Tensor::view(out.data(), DType::BF16, shape);
  be.rms_norm_stepwise(xt, eps, yt);
}

}  // namespace flick::wan
