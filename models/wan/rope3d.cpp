#include "models/wan/rope3d.h"

#include <cmath>
#include <string>

#include "runtime/dtype.h"
#include "runtime/status.h"

namespace flick::wan {

RopeSplit rope_split(int head_dim) {
  FLICK_CHECK(head_dim > 0 && head_dim % 2 == 0);
  const int c = head_dim / 2;
  return {c - 2 * (c / 3), c / 3, c / 3};
}

Rope3d::Rope3d(int head_dim, double theta)
    : head_dim_(head_dim), split_(rope_split(head_dim)), theta_(theta) {
  // rope_params(1024, d): 1 / theta^(arange(0, d, 2) / d), f64, per axis
  // (the backend's rope_3d computes the same).
  for (int pairs : {split_.t, split_.h, split_.w}) {
    const int d = 2 * pairs;
    for (int j = 0; j < pairs; ++j) {
      inv_freq_.push_back(1.0 / std::pow(theta, static_cast<double>(2 * j) / d));
    }
  }
}

void Rope3d::table_row(int64_t pos, std::span<double> cos, std::span<double> sin) const {
  const size_t n = inv_freq_.size();
  FLICK_CHECK(cos.size() == n && sin.size() == n && pos >= 0 && pos < kRopeMaxPositions);
  for (size_t p = 0; p < n; ++p) {
    const double a = static_cast<double>(pos) * inv_freq_[p];
    cos[p] = std::cos(a);
    sin[p] = std::sin(a);
  }
}

void Rope3d::token_angles(int64_t f, int64_t i, int64_t j, std::span<double> angle) const {
  const int64_t pos[3] = {f, i, j};
  const int bounds[4] = {0, split_.t, split_.t + split_.h, split_.pairs()};
  for (int axis = 0; axis < 3; ++axis) {
    FLICK_CHECK(pos[axis] >= 0 && pos[axis] < kRopeMaxPositions);
    for (int p = bounds[axis]; p < bounds[axis + 1]; ++p) {
      angle[p] = static_cast<double>(pos[axis]) * inv_freq_[p];
    }
  }
}

Rope3dParams Rope3d::params(int64_t frames, int64_t h, int64_t w, int64_t start_frame) const {
  FLICK_CHECK(
      start_frame >= 0 && start_frame + frames <= kRopeMaxPositions && h <= kRopeMaxPositions &&
          w <= kRopeMaxPositions,
      "Rope3d: positions beyond the reference's table of " + std::to_string(kRopeMaxPositions));
  Rope3dParams p;
  p.grid = {frames, h, w};
  p.start = {start_frame, 0, 0};
  p.pairs = {split_.t, split_.h, split_.w};
  p.theta = theta_;
  return p;
}

void Rope3d::apply(Backend& be, const Tensor& x, int64_t frames, int64_t h, int64_t w,
                   int64_t start_frame, Tensor& out) const {
  be.rope_3d(x, params(frames, h, w, start_frame), out);
}

void Rope3d::token_tables_f32(int64_t frames, int64_t h, int64_t w, int64_t start_frame,
                              std::vector<float>& cos, std::vector<float>& sin) const {
  const int pairs = split_.pairs();
  const int64_t tokens = frames * h * w;
  cos.assign(static_cast<size_t>(tokens * pairs), 0.0f);
  sin.assign(cos.size(), 0.0f);
  std::vector<double> angle(pairs);
  int64_t tok = 0;
  for (int64_t f = 0; f < frames; ++f) {
    for (int64_t i = 0; i < h; ++i) {
      for (int64_t j = 0; j < w; ++j, ++tok) {
        token_angles(start_frame + f, i, j, angle);
        for (int p = 0; p < pairs; ++p) {
          const size_t o = static_cast<size_t>(tok * pairs + p);
          cos[o] = static_cast<float>(std::cos(angle[p]));
          sin[o] = static_cast<float>(std::sin(angle[p]));
        }
      }
    }
  }
}

}  // namespace flick::wan
