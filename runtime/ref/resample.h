// Source indices and weights of torch.nn.functional.interpolate, shared by the
// reference and the CPU resize: both must select exactly the pixels PyTorch
// selects, so they share the one place that reproduces its index arithmetic.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/backend.h"

namespace flick::resample {

// The taps of one resized dim: output i reads input pixels
// tap_index(i, j) for j < count[i], weighted by weight[i * width + j].
struct Taps {
  int64_t in = 0, out = 0;
  int width = 0;               // weights stored per output (>= every count)
  std::vector<int64_t> first;  // [out] first input pixel; bicubic: may be < 0
  std::vector<int> count;      // [out]
  std::vector<float> weight;   // [out, width], zero past count

  // Indices outside the image are clamped (PyTorch's border replication).
  int64_t tap_index(int64_t i, int j) const {
    return std::clamp<int64_t>(first[static_cast<size_t>(i)] + j, 0, in - 1);
  }
  float w(int64_t i, int j) const { return weight[static_cast<size_t>(i * width + j)]; }
};

// PyTorch's (legacy) "nearest": floor(dst * (float)in / out), clamped; exact
// shortcuts for equal size and 2x.
int64_t nearest_source_index(int64_t dst, int64_t in, int64_t out);

// Taps of one dim for interpolate(mode, align_corners, antialias) from `in` to
// `out` pixels, computed in float as PyTorch's CPU kernels compute them:
//  - nearest: one tap, nearest_source_index;
//  - bilinear: two taps (compute_source_index_and_lambda);
//  - bicubic: four taps, A = -0.75, indices clamped into the image;
//  - antialias (bilinear or bicubic): PIL-style separable filter (triangle, or
//    cubic with a = -0.5) of support (taps / 2) * max(scale, 1), normalised.
//    A dim of unchanged size is the identity (PyTorch skips it).
Taps resize_taps(ResizeMode mode, int64_t in, int64_t out, bool align_corners, bool antialias);

// FLICK_CHECKs the arguments of Backend::resize.
void check_resize(const Tensor& x, const Tensor& y, ResizeMode mode, bool align_corners,
                  bool antialias);

// The taps of y's rows (h) and columns (w) for Backend::resize (window null:
// y is the whole result) or Backend::resize_window (y is the window of the
// out_h x out_w result: the whole result's taps, sliced), after
// FLICK_CHECKing the arguments. Every backend's resize and resize_window
// apply these, so a window holds the sums of the whole result.
struct Taps2d {
  Taps h, w;
};
Taps2d resize_taps_2d(const Tensor& x, const Tensor& y, const ResizeWindow* window, ResizeMode mode,
                      bool align_corners, bool antialias);

}  // namespace flick::resample
