#include "models/wan/action_rope.h"

#include <cmath>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/status.h"
#include "runtime/threads.h"

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

void action_rope_apply_bf16(std::span<const uint16_t> x, int64_t frames, int64_t heads,
                            std::span<const float> cos, std::span<const float> sin,
                            std::span<uint16_t> out) {
  const int64_t row = frames * heads * kActionHeadDim;
  FLICK_CHECK(frames > 0 && heads > 0 && x.size() % row == 0 && out.size() == x.size());
  FLICK_CHECK(cos.size() == static_cast<size_t>(frames * kActionHeadDim) &&
              sin.size() == cos.size());
  // One row per (token, frame, head), rotated by its frame's cos / sin.
  const int64_t rows = static_cast<int64_t>(x.size()) / kActionHeadDim;
  parallel_for(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const int64_t t = r / heads % frames;
          const float* c = cos.data() + t * kActionHeadDim;
          const float* s = sin.data() + t * kActionHeadDim;
          const size_t base = static_cast<size_t>(r * kActionHeadDim);
          for (int d = 0; d < kActionHeadDim; d += 2) {
            const float x0 = bf16_to_f32(x[base + d]);
            const float x1 = bf16_to_f32(x[base + d + 1]);
            // x*cos + rotate_half(x)*sin: three separately rounded tensor ops.
            const float a0 = x0 * c[d], b0 = -x1 * s[d];
            const float a1 = x1 * c[d + 1], b1 = x0 * s[d + 1];
            out[base + d] = f32_to_bf16(a0 + b0);
            out[base + d + 1] = f32_to_bf16(a1 + b1);
          }
        }
      },
      /*min_per_thread=*/256);
}

void action_rope_apply_bf16(std::span<const uint16_t> x, int64_t frames, int64_t heads,
                            int64_t start_frame, std::span<uint16_t> out) {
  std::vector<float> cos(static_cast<size_t>(frames * kActionHeadDim));
  std::vector<float> sin(cos.size());
  for (int64_t t = 0; t < frames; ++t) {
    action_rope_row(start_frame + t,
                    std::span<float>(cos).subspan(t * kActionHeadDim, kActionHeadDim),
                    std::span<float>(sin).subspan(t * kActionHeadDim, kActionHeadDim));
  }
  action_rope_apply_bf16(x, frames, heads, cos, sin, out);
}

void action_rms_norm_row_scalar(const uint16_t* x, int64_t dim, uint16_t* out, float eps) {
  // x.pow(2) rounds each square to bf16; mean accumulates in fp32 and rounds
  // once; + eps rounds; torch's bf16 rsqrt is 1 / sqrt with the square root
  // itself rounded to bf16 first (c10::BFloat16 arithmetic), which differs
  // from bf16(1/sqrt(x)) in the last bit now and then.
  float sum = 0.0f;
  for (int64_t d = 0; d < dim; ++d) {
    const float v = bf16_to_f32(x[d]);
    sum += round_bf16(v * v);
  }
  const float mean = round_bf16(sum / static_cast<float>(dim));
  const float inv = round_bf16(1.0f / round_bf16(std::sqrt(round_bf16(mean + eps))));
  for (int64_t d = 0; d < dim; ++d) out[d] = f32_to_bf16(bf16_to_f32(x[d]) * inv);
}

void action_rms_norm_bf16(std::span<const uint16_t> x, int64_t dim, std::span<uint16_t> out,
                          float eps) {
  FLICK_CHECK(dim > 0 && x.size() % dim == 0 && out.size() == x.size());
  const int64_t rows = static_cast<int64_t>(x.size()) / dim;
  // 16 rows per AVX-512 pass (one per lane: the sum of a row of 64 is a
  // chain of dependent adds, which one row at a time waits on).
  static const bool avx512 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  const bool wide = avx512 && dim % 2 == 0;
  parallel_for(
      rows,
      [&](int64_t begin, int64_t end) {
        int64_t r = begin;
        if (wide)
          for (; r + 16 <= end; r += 16)
            action_rms_norm_rows16_avx512(x.data() + r * dim, dim, out.data() + r * dim, eps);
        for (; r < end; ++r)
          action_rms_norm_row_scalar(x.data() + r * dim, dim, out.data() + r * dim, eps);
      },
      /*min_per_thread=*/256);
}

}  // namespace flick::wan
