#include "models/wan/rope3d.h"

#include <cmath>

#include "runtime/dtype.h"
#include "runtime/status.h"
#include "runtime/threads.h"

namespace flick::wan {

RopeSplit rope_split(int head_dim) {
  FLICK_CHECK(head_dim > 0 && head_dim % 2 == 0);
  const int c = head_dim / 2;
  return {c - 2 * (c / 3), c / 3, c / 3};
}

Rope3d::Rope3d(int head_dim, double theta) : head_dim_(head_dim), split_(rope_split(head_dim)) {
  // rope_params(1024, d): 1 / theta^(arange(0, d, 2) / d), f64, per axis.
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

void Rope3d::axis_tables(int axis, int64_t first, int64_t n, std::vector<double>& cos,
                         std::vector<double>& sin) const {
  const int pairs = split_.pairs();
  const int bounds[4] = {0, split_.t, split_.t + split_.h, pairs};
  FLICK_CHECK(first >= 0 && first + n <= kRopeMaxPositions);
  cos.assign(static_cast<size_t>(n * pairs), 0.0);
  sin.assign(cos.size(), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int p = bounds[axis]; p < bounds[axis + 1]; ++p) {
      // token_angles' product: the same f64 angle, the same cos / sin.
      const double a = static_cast<double>(first + i) * inv_freq_[static_cast<size_t>(p)];
      cos[static_cast<size_t>(i * pairs + p)] = std::cos(a);
      sin[static_cast<size_t>(i * pairs + p)] = std::sin(a);
    }
}

void Rope3d::apply_bf16(std::span<const uint16_t> x, int64_t frames, int64_t h, int64_t w,
                        int64_t heads, int64_t start_frame, std::span<uint16_t> out) const {
  const int64_t tokens = frames * h * w;
  FLICK_CHECK(x.size() == static_cast<size_t>(tokens * heads * head_dim_) &&
              out.size() == x.size());
  // A token's angles depend on one axis position per pair block, so the
  // cos/sin of every token come from three small per-axis tables.
  const int pairs = split_.pairs();
  std::vector<double> ct, st, ch, sh, cw, sw;
  axis_tables(0, start_frame, frames, ct, st);
  axis_tables(1, 0, h, ch, sh);
  axis_tables(2, 0, w, cw, sw);
  const int hb = split_.t, wb = split_.t + split_.h;
  parallel_for(
      tokens,
      [&](int64_t begin, int64_t end) {
        std::vector<double> c(static_cast<size_t>(pairs)), s(c.size());
        for (int64_t tok = begin; tok < end; ++tok) {
          const int64_t f = tok / (h * w), i = tok / w % h, j = tok % w;
          for (int p = 0; p < pairs; ++p) {
            const size_t at = static_cast<size_t>(p < hb   ? f * pairs + p
                                                  : p < wb ? i * pairs + p
                                                           : j * pairs + p);
            const std::vector<double>& cs = p < hb ? ct : p < wb ? ch : cw;
            const std::vector<double>& ss = p < hb ? st : p < wb ? sh : sw;
            c[static_cast<size_t>(p)] = cs[at];
            s[static_cast<size_t>(p)] = ss[at];
          }
          const size_t base = static_cast<size_t>(tok * heads * head_dim_);
          rotate_pairs_bf16(x.data() + base, c.data(), s.data(), pairs, heads, out.data() + base);
        }
      },
      /*min_per_thread=*/64);
}

void rotate_pairs_bf16_scalar(const uint16_t* x, const double* c, const double* s, int pairs,
                              int64_t rows, uint16_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* xr = x + r * 2 * pairs;
    uint16_t* yr = out + r * 2 * pairs;
    for (int p = 0; p < pairs; ++p) {
      const double a = bf16_to_f32(xr[2 * p]);
      const double b = bf16_to_f32(xr[2 * p + 1]);
      const double ac = a * c[p], bd = b * s[p];
      const double ad = a * s[p], bc = b * c[p];
      yr[2 * p] = f32_to_bf16(static_cast<float>(ac - bd));
      yr[2 * p + 1] = f32_to_bf16(static_cast<float>(bc + ad));
    }
  }
}

void rotate_pairs_bf16(const uint16_t* x, const double* c, const double* s, int pairs, int64_t rows,
                       uint16_t* out) {
  static const bool avx512 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (avx512) {
    rotate_pairs_bf16_avx512(x, c, s, pairs, rows, out);
  } else {
    rotate_pairs_bf16_scalar(x, c, s, pairs, rows, out);
  }
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
