#include "models/hunyuan/framepack_dit_rope.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace flick::hunyuan {
namespace {

// w_j of one axis of size d (get_frequency, :429-433): 1.0 / (theta ** (arange(0, d, 2) / d)).
std::vector<float> axis_frequencies(int64_t d, double theta) {
  std::vector<float> w(static_cast<size_t>(d / 2));
  for (int64_t j = 0; j < d / 2; ++j) {
    const float e = static_cast<float>(2 * j) / static_cast<float>(d);
    w[static_cast<size_t>(j)] = 1.0f / static_cast<float>(std::pow(theta, static_cast<double>(e)));
  }
  return w;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int64_t dit_rope_tokens(int64_t frames, int64_t h, int64_t w, int64_t pool) {
  return ceil_div(frames, pool) * ceil_div(h, pool) * ceil_div(w, pool);
}

void dit_rope_tables(const DitRopeSpec& spec, std::span<const int64_t> frame_indices, int64_t h,
                     int64_t w, int64_t pool, Tensor& cos, Tensor& sin) {
  const auto frames = static_cast<int64_t>(frame_indices.size());
  const int64_t pairs = spec.pairs();
  const int64_t tokens = dit_rope_tokens(frames, h, w, pool);
  FLICK_CHECK(pool >= 1 && frames > 0 && h > 0 && w > 0, "rope: empty grid");
  const Shape want{tokens, pairs};
  FLICK_CHECK(cos.dtype == DType::F32 && sin.dtype == DType::F32 && cos.shape == want &&
                  sin.shape == want && cos.is_contiguous() && sin.is_contiguous(),
              "rope: cos/sin must be contiguous F32 " + want.str() + ", got " + cos.str());

  // Per axis, per position along it: the cos / sin of each of its pairs.
  // Axis a of pair p: t for p < axes[0]/2, then y, then x.
  struct Axis {
    std::vector<float> w;
    int64_t first_pair = 0;
  };
  std::array<Axis, 3> axes;
  int64_t first = 0;
  for (size_t a = 0; a < 3; ++a) {
    axes[a].w = axis_frequencies(spec.axes[a], spec.theta);
    axes[a].first_pair = first;
    first += spec.axes[a] / 2;
  }
  // Unpooled tables of one grid cell, written into c / s [pairs].
  auto cell = [&](int64_t t, int64_t y, int64_t x, float* c, float* s) {
    const std::array<float, 3> pos{static_cast<float>(frame_indices[static_cast<size_t>(t)]),
                                   static_cast<float>(y), static_cast<float>(x)};
    for (size_t a = 0; a < 3; ++a)
      for (size_t j = 0; j < axes[a].w.size(); ++j) {
        const float angle = axes[a].w[j] * pos[a];  // torch.outer in fp32
        c[axes[a].first_pair + static_cast<int64_t>(j)] = std::cos(angle);
        s[axes[a].first_pair + static_cast<int64_t>(j)] = std::sin(angle);
      }
  };

  float* co = cos.ptr<float>();
  float* so = sin.ptr<float>();
  if (pool == 1) {
    int64_t i = 0;
    for (int64_t t = 0; t < frames; ++t)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x, ++i) cell(t, y, x, co + i * pairs, so + i * pairs);
    return;
  }
  // pad_for_3d_conv (replicate: an index past the end reads the last one),
  // then avg_pool3d: a sum in fp32 over (kt, ky, kx) in that order, / k^3.
  std::vector<float> c(static_cast<size_t>(pairs)), s(static_cast<size_t>(pairs));
  std::vector<float> cs(static_cast<size_t>(pairs)), ss(static_cast<size_t>(pairs));
  const float count = static_cast<float>(pool * pool * pool);
  int64_t i = 0;
  for (int64_t t0 = 0; t0 < frames; t0 += pool)
    for (int64_t y0 = 0; y0 < h; y0 += pool)
      for (int64_t x0 = 0; x0 < w; x0 += pool, ++i) {
        std::fill(cs.begin(), cs.end(), 0.f);
        std::fill(ss.begin(), ss.end(), 0.f);
        for (int64_t dt = 0; dt < pool; ++dt)
          for (int64_t dy = 0; dy < pool; ++dy)
            for (int64_t dx = 0; dx < pool; ++dx) {
              cell(std::min(t0 + dt, frames - 1), std::min(y0 + dy, h - 1),
                   std::min(x0 + dx, w - 1), c.data(), s.data());
              for (int64_t p = 0; p < pairs; ++p) {
                cs[static_cast<size_t>(p)] += c[static_cast<size_t>(p)];
                ss[static_cast<size_t>(p)] += s[static_cast<size_t>(p)];
              }
            }
        for (int64_t p = 0; p < pairs; ++p) {
          co[i * pairs + p] = cs[static_cast<size_t>(p)] / count;
          so[i * pairs + p] = ss[static_cast<size_t>(p)] / count;
        }
      }
}

}  // namespace flick::hunyuan
