#include "models/siglip/pil_resample.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace flick::siglip {
namespace {

// Fixed-point fraction bits of the weights: 32 - 8 (pixel) - 2 (headroom).
constexpr int kPrecisionBits = 22;

// Cubic convolution with a = -0.5 (Keys), support 2.
double bicubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x = x * M_PI;
  return std::sin(x) / x;
}

// Truncated sinc, support 3.
double lanczos(double x) {
  if (-3.0 <= x && x < 3.0) return sinc(x) * sinc(x / 3);
  return 0.0;
}

// The weights of one axis: out_size rows of `ksize` fixed-point weights
// starting at source index first[i] and `count[i]` long.
struct Coeffs {
  int64_t ksize = 0;
  std::vector<int64_t> first, count;
  std::vector<int32_t> k;
};

Coeffs precompute(int64_t in_size, int64_t out_size, PilFilter filter) {
  const double filter_support = filter == PilFilter::Bicubic ? 2.0 : 3.0;
  double (*fn)(double) = filter == PilFilter::Bicubic ? bicubic : lanczos;
  // The box is the whole axis: in0 = 0, in1 = in_size (floats in Pillow).
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filterscale = std::max(scale, 1.0);
  const double support = filter_support * filterscale;
  Coeffs c;
  c.ksize = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  c.first.resize(static_cast<size_t>(out_size));
  c.count.resize(static_cast<size_t>(out_size));
  c.k.assign(static_cast<size_t>(out_size * c.ksize), 0);
  std::vector<double> w(static_cast<size_t>(c.ksize));
  for (int64_t xx = 0; xx < out_size; ++xx) {
    const double center = (static_cast<double>(xx) + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    // (int) truncation of the rounded bounds, as the C code.
    auto xmin = static_cast<int64_t>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    auto xmax = static_cast<int64_t>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int64_t x = 0; x < xmax; ++x) {
      const double v = fn((static_cast<double>(x + xmin) - center + 0.5) * ss);
      w[static_cast<size_t>(x)] = v;
      ww += v;
    }
    for (int64_t x = 0; x < xmax; ++x) {
      double v = w[static_cast<size_t>(x)];
      if (ww != 0.0) v /= ww;
      // normalize_coeffs_8bpc: round half away from zero to 22 bits.
      const double scaled = v * (1 << kPrecisionBits);
      c.k[static_cast<size_t>(xx * c.ksize + x)] =
          static_cast<int32_t>(v < 0 ? -0.5 + scaled : 0.5 + scaled);
    }
    c.first[static_cast<size_t>(xx)] = xmin;
    c.count[static_cast<size_t>(xx)] = xmax;
  }
  return c;
}

uint8_t clip8(int64_t v) {
  if (v >= (int64_t{1} << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

}  // namespace

Expected<std::vector<uint8_t>> pil_resize_rgb(std::span<const uint8_t> src, int64_t width,
                                              int64_t height, int64_t out_width, int64_t out_height,
                                              PilFilter filter) {
  if (width < 1 || height < 1 || out_width < 1 || out_height < 1)
    return invalid_input("pil_resize_rgb: sizes must be positive: " + std::to_string(width) + "x" +
                         std::to_string(height) + " -> " + std::to_string(out_width) + "x" +
                         std::to_string(out_height));
  if (static_cast<int64_t>(src.size()) != width * height * 3)
    return invalid_input("pil_resize_rgb: expected " + std::to_string(width * height * 3) +
                         " bytes (RGB " + std::to_string(width) + "x" + std::to_string(height) +
                         "), got " + std::to_string(src.size()));
  if (width == out_width && height == out_height)
    return std::vector<uint8_t>(src.begin(), src.end());

  const bool horizontal = out_width != width, vertical = out_height != height;
  const Coeffs ch = precompute(width, out_width, filter);
  Coeffs cv = precompute(height, out_height, filter);
  // Rows of the source the vertical pass reads.
  const int64_t row_first = cv.first.front();
  const int64_t row_last = cv.first.back() + cv.count.back();
  const int32_t half = 1 << (kPrecisionBits - 1);

  // ---- horizontal pass over rows row_first .. row_last-1 (all rows when
  // there is no vertical pass) ----
  std::vector<uint8_t> tmp;
  const uint8_t* in = src.data();
  int64_t in_w = width, in_rows = height;
  if (horizontal) {
    const int64_t r0 = vertical ? row_first : 0, rows = vertical ? row_last - row_first : height;
    tmp.resize(static_cast<size_t>(rows * out_width * 3));
    for (int64_t y = 0; y < rows; ++y) {
      const uint8_t* row = src.data() + (y + r0) * width * 3;
      uint8_t* out = tmp.data() + y * out_width * 3;
      for (int64_t xx = 0; xx < out_width; ++xx) {
        const int32_t* k = ch.k.data() + xx * ch.ksize;
        const int64_t x0 = ch.first[static_cast<size_t>(xx)], n = ch.count[static_cast<size_t>(xx)];
        for (int c = 0; c < 3; ++c) {
          int64_t ss = half;  // Pillow sums in 32-bit ints; the range fits
          for (int64_t x = 0; x < n; ++x) ss += int64_t{row[(x0 + x) * 3 + c]} * k[x];
          out[xx * 3 + c] = clip8(static_cast<int32_t>(ss));
        }
      }
    }
    if (vertical)
      for (int64_t& f : cv.first) f -= row_first;  // bounds relative to the kept rows
    in = tmp.data();
    in_w = out_width;
    in_rows = rows;
  }
  if (!vertical) return horizontal ? tmp : std::vector<uint8_t>(src.begin(), src.end());

  // ---- vertical pass ----
  (void)in_rows;
  std::vector<uint8_t> out(static_cast<size_t>(out_height * in_w * 3));
  for (int64_t yy = 0; yy < out_height; ++yy) {
    const int32_t* k = cv.k.data() + yy * cv.ksize;
    const int64_t y0 = cv.first[static_cast<size_t>(yy)], n = cv.count[static_cast<size_t>(yy)];
    for (int64_t x = 0; x < in_w * 3; ++x) {
      int64_t ss = half;
      for (int64_t y = 0; y < n; ++y) ss += int64_t{in[(y0 + y) * in_w * 3 + x]} * k[y];
      out[static_cast<size_t>(yy * in_w * 3 + x)] = clip8(static_cast<int32_t>(ss));
    }
  }
  return out;
}

}  // namespace flick::siglip
