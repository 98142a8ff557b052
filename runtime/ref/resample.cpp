// Reference nearest upsampling and torch.nn.functional.interpolate. Source
// indices and weights come from resize_taps(), which reproduces PyTorch's
// float index arithmetic; the weighted sum is taken in double and rounded
// once, so an F32 result is within rounding of PyTorch's and a BF16 result is
// the fp32-opmath result rounded once (as on CUDA).
#include "runtime/ref/resample.h"

#include <cmath>
#include <cstring>
#include <string>

#include "runtime/ref/data_iter.h"
#include "runtime/ref/ops.h"

namespace flick::resample {
namespace {

// area_pixel_compute_scale<float>: a float division of the sizes (0 for a
// single aligned output pixel).
float area_scale(int64_t in, int64_t out, bool align_corners) {
  if (align_corners)
    return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.f;
  return static_cast<float>(in) / static_cast<float>(out);
}

// area_pixel_compute_source_index<float>: the half-pixel form is evaluated in
// double (float scale times `dst + 0.5`, a double) and rounded to float.
float area_source_index(float scale, int64_t dst, bool align_corners, bool cubic) {
  if (align_corners) return scale * static_cast<float>(dst);
  const float src =
      static_cast<float>(static_cast<double>(scale) * (static_cast<double>(dst) + 0.5) - 0.5);
  return (!cubic && src < 0.f) ? 0.f : src;
}

// guard_index_and_lambda: floor clamped to the last pixel, fraction in [0, 1].
void guard_index_and_lambda(float real, int64_t in, int64_t& index, float& lambda) {
  index = std::min(static_cast<int64_t>(std::floor(real)), in - 1);
  lambda = std::min(std::max(real - static_cast<float>(index), 0.f), 1.f);
}

// The cubic convolution kernels, rounded as PyTorch's x86-64 build rounds
// them: its compiler fuses some of the multiply-adds into FMAs, differently
// where they are inlined into the antialiased filter. Found by matching every
// weight F.interpolate applies to one-hot inputs (torch 2.x, x86-64), written
// out with explicit std::fma and contraction off so the weights match bit for bit.
[[gnu::optimize("fp-contract=off")]] float cubic1(float x, float a) {  // |x| <= 1
  return (std::fma(a + 2.f, x, -(a + 3.f)) * x) * x + 1.f;
}
[[gnu::optimize("fp-contract=off")]] float cubic2(float x, float a) {  // 1 < |x| < 2
  return std::fma(std::fma(a, x, -5.f * a), x, 8.f * a) * x - 4.f * a;
}
[[gnu::optimize("fp-contract=off")]] float cubic1_aa(float x, float a) {
  return std::fma(std::fma(a + 2.f, x, -(a + 3.f)) * x, x, 1.f);
}
[[gnu::optimize("fp-contract=off")]] float cubic2_aa(float x, float a) {
  return std::fma(std::fma(std::fma(a, x, -5.f * a), x, 8.f * a), x, -4.f * a);
}

// Pillow's triangle and cubic (a = -0.5) filters of the antialiased path.
float aa_filter(ResizeMode mode, float x) {
  if (x < 0.f) x = -x;
  if (mode == ResizeMode::Bilinear) return x < 1.f ? 1.f - x : 0.f;
  constexpr float a = -0.5f;
  if (x < 1.f) return cubic1_aa(x, a);
  if (x < 2.f) return cubic2_aa(x, a);
  return 0.f;
}

Taps identity_taps(int64_t n) {
  Taps t;
  t.in = t.out = n;
  t.width = 1;
  for (int64_t i = 0; i < n; ++i) {
    t.first.push_back(i);
    t.count.push_back(1);
    t.weight.push_back(1.f);
  }
  return t;
}

// _compute_weights_aa (float): the filter stretched by the downscale factor,
// centred on the output pixel's footprint, normalised over in-image pixels.
Taps antialias_taps(ResizeMode mode, int64_t in, int64_t out, float scale) {
  Taps t;
  t.in = in;
  t.out = out;
  const int interp = mode == ResizeMode::Bilinear ? 2 : 4;
  const float support =
      static_cast<float>(scale >= 1.f ? (interp * 0.5) * static_cast<double>(scale) : interp * 0.5);
  t.width = static_cast<int>(std::ceil(support)) * 2 + 1;
  const float invscale = scale >= 1.f ? static_cast<float>(1.0 / static_cast<double>(scale)) : 1.f;
  t.weight.assign(static_cast<size_t>(out * t.width), 0.f);
  for (int64_t i = 0; i < out; ++i) {
    const float center =
        static_cast<float>(static_cast<double>(scale) * (static_cast<double>(i) + 0.5));
    const int64_t xmin = std::max<int64_t>(static_cast<int64_t>((center - support) + 0.5), 0);
    const int64_t xend = std::min<int64_t>(static_cast<int64_t>((center + support) + 0.5), in);
    const int64_t xsize = std::clamp<int64_t>(xend - xmin, 0, t.width);
    float* w = &t.weight[static_cast<size_t>(i * t.width)];
    float total = 0.f;
    for (int64_t j = 0; j < xsize; ++j) {
      const double arg = (static_cast<double>(static_cast<float>(j + xmin) - center) + 0.5) *
                         static_cast<double>(invscale);
      w[j] = aa_filter(mode, static_cast<float>(arg));
      total += w[j];
    }
    if (total != 0.f)
      for (int64_t j = 0; j < xsize; ++j) w[j] /= total;
    t.first.push_back(xmin);
    t.count.push_back(static_cast<int>(xsize));
  }
  return t;
}

}  // namespace

int64_t nearest_source_index(int64_t dst, int64_t in, int64_t out) {
  if (out == in) return dst;
  if (out == 2 * in) return dst >> 1;
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  return std::min(static_cast<int64_t>(std::floor(static_cast<float>(dst) * scale)), in - 1);
}

Taps resize_taps(ResizeMode mode, int64_t in, int64_t out, bool align_corners, bool antialias) {
  FLICK_CHECK(in > 0 && out > 0, "resize: empty dim");
  if (mode == ResizeMode::Nearest) {
    Taps t = identity_taps(out);
    t.in = in;
    for (int64_t i = 0; i < out; ++i)
      t.first[static_cast<size_t>(i)] = nearest_source_index(i, in, out);
    return t;
  }
  const float scale = area_scale(in, out, align_corners);
  if (antialias) return in == out ? identity_taps(in) : antialias_taps(mode, in, out, scale);
  Taps t;
  t.in = in;
  t.out = out;
  if (mode == ResizeMode::Bilinear) {
    // compute_source_index_and_lambda. The second tap of the last pixel is
    // clamped onto the first: PyTorch reads that pixel twice, w0 x + w1 x.
    t.width = 2;
    for (int64_t i = 0; i < out; ++i) {
      int64_t i0 = i;
      float l1 = 0.f;
      if (out != in)
        guard_index_and_lambda(area_source_index(scale, i, align_corners, false), in, i0, l1);
      t.first.push_back(i0);
      t.count.push_back(2);
      t.weight.push_back(1.f - l1);
      t.weight.push_back(l1);
    }
    return t;
  }
  // Bicubic: taps idx-1 .. idx+2 around floor(src), weights from the fraction.
  t.width = 4;
  constexpr float A = -0.75f;
  for (int64_t i = 0; i < out; ++i) {
    int64_t idx;
    float lambda;
    guard_index_and_lambda(area_source_index(scale, i, align_corners, true), in, idx, lambda);
    const float x2 = static_cast<float>(1.0 - static_cast<double>(lambda));
    t.first.push_back(idx - 1);
    t.count.push_back(4);
    t.weight.push_back(cubic2(static_cast<float>(static_cast<double>(lambda) + 1.0), A));
    t.weight.push_back(cubic1(lambda, A));
    t.weight.push_back(cubic1(x2, A));
    t.weight.push_back(cubic2(static_cast<float>(static_cast<double>(x2) + 1.0), A));
  }
  return t;
}

void check_resize(const Tensor& x, const Tensor& y, ResizeMode mode, bool align_corners,
                  bool antialias) {
  FLICK_CHECK(x.ndim() == 4 && y.ndim() == 4 && x.dim(0) == y.dim(0) && x.dim(1) == y.dim(1) &&
                  x.numel() > 0 && y.numel() > 0,
              "resize: expected [N, C, H, W] -> [N, C, OH, OW], got " + x.str() + " -> " + y.str());
  FLICK_CHECK(detail::is_float(x.dtype) && detail::is_float(y.dtype),
              "resize: float tensors expected, got " + x.str() + " -> " + y.str());
  FLICK_CHECK(mode != ResizeMode::Nearest || (!align_corners && !antialias),
              "resize: align_corners and antialias apply to bilinear and bicubic only");
}

namespace {

// Outputs [first, first + n) of t: the taps of a window of the resized dim,
// each output's taps and weights unchanged.
Taps window_taps(const Taps& t, int64_t first, int64_t n) {
  FLICK_CHECK(first >= 0 && n >= 0 && first + n <= t.out,
              "resize: window [" + std::to_string(first) + ", " + std::to_string(first + n) +
                  ") outside " + std::to_string(t.out) + " outputs");
  Taps w;
  w.in = t.in;
  w.out = n;
  w.width = t.width;
  const auto at = [](int64_t i) { return static_cast<size_t>(i); };
  w.first.assign(t.first.begin() + at(first), t.first.begin() + at(first + n));
  w.count.assign(t.count.begin() + at(first), t.count.begin() + at(first + n));
  w.weight.assign(t.weight.begin() + at(first * t.width),
                  t.weight.begin() + at((first + n) * t.width));
  return w;
}

}  // namespace

Taps2d resize_taps_2d(const Tensor& x, const Tensor& y, const ResizeWindow* window, ResizeMode mode,
                      bool align_corners, bool antialias) {
  check_resize(x, y, mode, align_corners, antialias);
  if (window == nullptr)
    return {resize_taps(mode, x.dim(2), y.dim(2), align_corners, antialias),
            resize_taps(mode, x.dim(3), y.dim(3), align_corners, antialias)};
  const ResizeWindow& at = *window;
  FLICK_CHECK(
      at.y0 >= 0 && at.x0 >= 0 && at.y0 + y.dim(2) <= at.out_h && at.x0 + y.dim(3) <= at.out_w,
      "resize_window: " + y.str() + " at row " + std::to_string(at.y0) + ", column " +
          std::to_string(at.x0) + " does not fit in " + std::to_string(at.out_h) + " x " +
          std::to_string(at.out_w));
  return {
      window_taps(resize_taps(mode, x.dim(2), at.out_h, align_corners, antialias), at.y0, y.dim(2)),
      window_taps(resize_taps(mode, x.dim(3), at.out_w, align_corners, antialias), at.x0,
                  y.dim(3))};
}

}  // namespace flick::resample

namespace flick::ref {
namespace {

double load(const Tensor& t, int64_t off) { return load_as_f32(t.dtype, t.data, off); }

}  // namespace

void upsample_nearest(const Tensor& x, Tensor& y) {
  FLICK_CHECK(x.ndim() == y.ndim() && (x.ndim() == 4 || x.ndim() == 5) && x.dim(0) == y.dim(0) &&
                  x.dim(1) == y.dim(1),
              "upsample_nearest: " + x.str() + " -> " + y.str());
  FLICK_CHECK(x.dtype == y.dtype || (detail::is_float(x.dtype) && detail::is_float(y.dtype)),
              "upsample_nearest: " + x.str() + " -> " + y.str());
  std::array<int64_t, kMaxDims> factor{};
  factor.fill(1);
  for (int d = 2; d < x.ndim(); ++d) {
    FLICK_CHECK(x.dim(d) > 0 && y.dim(d) % x.dim(d) == 0,
                "upsample_nearest: " + y.str() + " is not an integer multiple of " + x.str());
    factor[static_cast<size_t>(d)] = y.dim(d) / x.dim(d);
  }
  const int64_t es = static_cast<int64_t>(dtype_size(x.dtype));
  for (int64_t i = 0; i < y.numel(); ++i) {
    int64_t rem = i, ox = 0, oy = 0;
    for (int d = y.ndim() - 1; d >= 0; --d) {
      const int64_t idx = rem % y.dim(d);
      rem /= y.dim(d);
      ox += idx / factor[static_cast<size_t>(d)] * x.stride(d);
      oy += idx * y.stride(d);
    }
    if (x.dtype == y.dtype) {
      std::memcpy(static_cast<char*>(y.data) + oy * es, static_cast<const char*>(x.data) + ox * es,
                  static_cast<size_t>(es));
    } else {
      store_from_f32(y.dtype, y.data, oy, load(x, ox));
    }
  }
}

namespace {

// y = the separable sum of x over the taps of y's rows and columns, in double.
void resize_taps_apply(const Tensor& x, Tensor& y, const resample::Taps2d& taps) {
  const resample::Taps &th = taps.h, &tw = taps.w;
  for (int64_t n = 0; n < x.dim(0); ++n)
    for (int64_t c = 0; c < x.dim(1); ++c) {
      const int64_t bx = n * x.stride(0) + c * x.stride(1);
      const int64_t by = n * y.stride(0) + c * y.stride(1);
      for (int64_t oh = 0; oh < th.out; ++oh)
        for (int64_t ow = 0; ow < tw.out; ++ow) {
          double acc = 0;
          for (int i = 0; i < th.count[static_cast<size_t>(oh)]; ++i) {
            const int64_t h = th.tap_index(oh, i);
            double row = 0;
            for (int j = 0; j < tw.count[static_cast<size_t>(ow)]; ++j)
              row += static_cast<double>(tw.w(ow, j)) *
                     load(x, bx + h * x.stride(2) + tw.tap_index(ow, j) * x.stride(3));
            acc += static_cast<double>(th.w(oh, i)) * row;
          }
          store_from_f32(y.dtype, y.data, by + oh * y.stride(2) + ow * y.stride(3),
                         static_cast<float>(acc));
        }
    }
}

}  // namespace

void resize(const Tensor& x, Tensor& y, ResizeMode mode, bool align_corners, bool antialias) {
  resize_taps_apply(x, y, resample::resize_taps_2d(x, y, nullptr, mode, align_corners, antialias));
}

void resize_window(const Tensor& x, Tensor& y, const ResizeWindow& window, ResizeMode mode,
                   bool align_corners, bool antialias) {
  resize_taps_apply(x, y, resample::resize_taps_2d(x, y, &window, mode, align_corners, antialias));
}

}  // namespace flick::ref
