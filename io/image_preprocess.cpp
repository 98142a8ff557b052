// Exactness notes. Pillow computes the filter taps in double precision and
// is built without FMA; flick_io is compiled with -ffp-contract=off
// (io/CMakeLists.txt) so that a * b + c below rounds twice, as there. The
// same expressions are kept in the same evaluation order. Everything after
// the taps is integer arithmetic, so its order is free.
#include "io/image_preprocess.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "io/image.h"
#include "runtime/file_util.h"
#include "runtime/log.h"
#include "runtime/threads.h"

namespace flick {
namespace {

// --- filters (Pillow Resample.c) --------------------------------------------------

double box_filter(double x) { return x > -0.5 && x <= 0.5 ? 1.0 : 0.0; }

double bilinear_filter(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

double hamming_filter(double x) {
  x = std::fabs(x);
  if (x == 0.0) return 1.0;
  if (x >= 1.0) return 0.0;
  x = x * M_PI;
  // The float constants are Pillow's (0.54f, 0.46f), widened to double.
  return std::sin(x) / x * (0.54f + 0.46f * std::cos(x));
}

double bicubic_filter(double x) {
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

double lanczos_filter(double x) {
  if (-3.0 <= x && x < 3.0) return sinc(x) * sinc(x / 3);
  return 0.0;
}

struct FilterSpec {
  double (*fn)(double);
  double support;
};

FilterSpec filter_spec(PilFilter f) {
  switch (f) {
    case PilFilter::kBox: return {box_filter, 0.5};
    case PilFilter::kBilinear: return {bilinear_filter, 1.0};
    case PilFilter::kHamming: return {hamming_filter, 1.0};
    case PilFilter::kBicubic: return {bicubic_filter, 2.0};
    case PilFilter::kLanczos: return {lanczos_filter, 3.0};
  }
  FLICK_CHECK(false, "unknown PilFilter");
  return {};
}

// --- taps ------------------------------------------------------------------------

// 8-bit results, 2 bits of headroom for filters with negative lobes.
constexpr int kPrecisionBits = 32 - 8 - 2;

// One axis of a resize: output i reads inputs [first[i], first[i] + count[i])
// with weights coef[i * ksize + k], in kPrecisionBits fixed point.
struct AxisTaps {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> coef;
};

AxisTaps axis_taps(int in_size, int out_size, const FilterSpec& filter) {
  // Pillow's box is (0, in_size) as floats, so scale = in_size / out_size.
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = filter.support * filterscale;
  const double inv_filterscale = 1.0 / filterscale;
  AxisTaps t;
  t.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.resize(out_size);
  t.count.resize(out_size);
  t.coef.assign(size_t(out_size) * t.ksize, 0);
  std::vector<double> w(t.ksize);
  for (int i = 0; i < out_size; ++i) {
    const double center = (i + 0.5) * scale;
    // Truncation, not floor: equal here, since negatives are clamped to 0.
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in_size);
    const int n = hi - lo;
    double sum = 0.0;
    for (int k = 0; k < n; ++k) {
      w[k] = filter.fn((k + lo - center + 0.5) * inv_filterscale);
      sum += w[k];
    }
    int32_t* c = &t.coef[size_t(i) * t.ksize];
    for (int k = 0; k < n; ++k) {
      const double v = sum != 0.0 ? w[k] / sum : w[k];
      // Round half away from zero.
      c[k] = static_cast<int32_t>(v < 0 ? -0.5 + v * (1 << kPrecisionBits)
                                        : 0.5 + v * (1 << kPrecisionBits));
    }
    t.first[i] = lo;
    t.count[i] = n;
  }
  return t;
}

// Pillow's clip8: the accumulator's integer part, clamped to 0..255.
inline uint8_t clip8(int32_t acc) {
  return static_cast<uint8_t>(std::clamp(acc >> kPrecisionBits, 0, 255));
}

constexpr int32_t kHalf = 1 << (kPrecisionBits - 1);

// Rows [row0, row0 + out->height) of src, filtered along x into out.
void resample_horizontal(const FrameView& src, int row0, const AxisTaps& t, Frame* out) {
  const int out_w = out->width;
  parallel_for(
      out->height,
      [&](int64_t y0, int64_t y1) {
        for (int64_t y = y0; y < y1; ++y) {
          const uint8_t* in = src.rgb + (row0 + y) * src.stride;
          uint8_t* dst = out->rgb.data() + size_t(y) * 3 * out_w;
          for (int x = 0; x < out_w; ++x, dst += 3) {
            const int32_t* c = &t.coef[size_t(x) * t.ksize];
            const uint8_t* p = in + 3 * t.first[x];
            int32_t r = kHalf, g = kHalf, b = kHalf;
            for (int k = 0; k < t.count[x]; ++k, p += 3) {
              r += p[0] * c[k];
              g += p[1] * c[k];
              b += p[2] * c[k];
            }
            dst[0] = clip8(r);
            dst[1] = clip8(g);
            dst[2] = clip8(b);
          }
        }
      },
      8);
}

// src filtered along y into out; output row i reads src rows
// t.first[i] - row0 + k (src holds source rows from row0 on).
void resample_vertical(const FrameView& src, int row0, const AxisTaps& t, Frame* out) {
  const int n = 3 * out->width;
  parallel_for(
      out->height,
      [&](int64_t y0, int64_t y1) {
        std::vector<int32_t> acc(n);
        for (int64_t y = y0; y < y1; ++y) {
          std::fill(acc.begin(), acc.end(), kHalf);
          const int32_t* c = &t.coef[size_t(y) * t.ksize];
          for (int k = 0; k < t.count[y]; ++k) {
            const uint8_t* in = src.rgb + int64_t(t.first[y] - row0 + k) * src.stride;
            const int32_t ck = c[k];
            for (int i = 0; i < n; ++i) acc[i] += in[i] * ck;
          }
          uint8_t* dst = out->rgb.data() + size_t(y) * n;
          for (int i = 0; i < n; ++i) dst[i] = clip8(acc[i]);
        }
      },
      8);
}

Frame blank_frame(int width, int height) {
  Frame f;
  f.width = width;
  f.height = height;
  f.rgb.resize(size_t(3) * width * height);
  return f;
}

// Round half to even of n / 2 (Python's round() of a float that is an
// integer or a half-integer).
int64_t half_round_even(int64_t n) {
  if (n % 2 == 0) return n / 2;
  const int64_t down = (n - 1) / 2;  // n >= 0 here
  return down % 2 == 0 ? down : down + 1;
}

}  // namespace

Expected<Frame> load_image_rgb(const std::string& path) {
  FLICK_ASSIGN_OR_RETURN(std::vector<uint8_t> data, read_file(path));
  return decode_image_rgb(data, path);
}

Expected<Frame> decode_image_rgb(const std::vector<uint8_t>& data, const std::string& path) {
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  Expected<Frame> frame = invalid_input(path + ": not a PNG or JPEG file");
  if (data.size() >= 8 && std::memcmp(data.data(), kPng, 8) == 0) {
    frame = decode_png(data.data(), data.size(), path);
  } else if (data.size() >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) {
    frame = decode_jpeg(data.data(), data.size(), path);
  }
  if (!frame.ok()) return frame.status();
  std::string problem;
  const int orientation = image_orientation(data.data(), data.size(), &problem);
  if (!problem.empty()) {
    log_warning(path + ": ignoring unreadable orientation metadata (" + problem + ")");
  }
  if (orientation == kOrientationNone) return frame;
  return apply_orientation(frame->view(), orientation);
}

CropBox center_crop_box(int width, int height, int aspect_w, int aspect_h) {
  FLICK_CHECK(width > 0 && height > 0 && aspect_w > 0 && aspect_h > 0);
  // Python floats and ints as in _resizecrop: h / w > th / tw, then
  // int(new_w * th / tw) with an exact integer product, true division.
  int64_t new_w, new_h;
  if (static_cast<double>(height) / width > static_cast<double>(aspect_h) / aspect_w) {
    new_w = width;
    new_h = static_cast<int64_t>(static_cast<double>(new_w * aspect_h) / aspect_w);
  } else {
    new_h = height;
    new_w = static_cast<int64_t>(static_cast<double>(new_h * aspect_w) / aspect_h);
  }
  // Box ((w - nw) / 2, (h - nh) / 2, (w + nw) / 2, (h + nh) / 2): halves of
  // integers, which Image.crop rounds half to even.
  CropBox box;
  box.x0 = static_cast<int>(half_round_even(width - new_w));
  box.y0 = static_cast<int>(half_round_even(height - new_h));
  box.x1 = static_cast<int>(half_round_even(width + new_w));
  box.y1 = static_cast<int>(half_round_even(height + new_h));
  return box;
}

Frame crop(const FrameView& src, const CropBox& box) {
  FLICK_CHECK(box.x0 >= 0 && box.y0 >= 0 && box.x0 <= box.x1 && box.y0 <= box.y1 &&
              box.x1 <= src.width && box.y1 <= src.height);
  Frame out = blank_frame(box.width(), box.height());
  const size_t row_bytes = size_t(3) * out.width;
  for (int y = 0; y < out.height; ++y) {
    std::memcpy(out.rgb.data() + y * row_bytes,
                src.rgb + int64_t(box.y0 + y) * src.stride + 3 * box.x0, row_bytes);
  }
  return out;
}

Expected<Frame> center_crop_to_aspect(const FrameView& src, int aspect_w, int aspect_h) {
  const CropBox box = center_crop_box(src.width, src.height, aspect_w, aspect_h);
  if (box.width() <= 0 || box.height() <= 0) {
    return invalid_input("a " + std::to_string(src.width) + "x" + std::to_string(src.height) +
                         " image is too narrow to crop to aspect " + std::to_string(aspect_w) +
                         ":" + std::to_string(aspect_h));
  }
  return crop(src, box);
}

Frame pil_resize(const FrameView& src, int width, int height, PilFilter filter) {
  FLICK_CHECK(width > 0 && height > 0,
              "resize to " + std::to_string(width) + "x" + std::to_string(height));
  FLICK_CHECK(src.width > 0 && src.height > 0 && src.stride >= 3 * src.width);
  const FilterSpec spec = filter_spec(filter);
  const bool need_x = width != src.width;
  const bool need_y = height != src.height;
  if (!need_x && !need_y) return crop(src, {0, 0, src.width, src.height});

  if (!need_y) {
    Frame out = blank_frame(width, height);
    resample_horizontal(src, 0, axis_taps(src.width, width, spec), &out);
    return out;
  }
  const AxisTaps ty = axis_taps(src.height, height, spec);
  if (!need_x) {
    Frame out = blank_frame(width, height);
    resample_vertical(src, 0, ty, &out);
    return out;
  }
  // Pillow 13 runs the vertical pass first when the height shrinks by more
  // than twice as many pixels as the width (integer sizes); Pillow <= 12
  // always went horizontal first. The order changes rounding, not just speed.
  const bool vertical_first =
      height < src.height && int64_t{src.height} - height > 2 * (int64_t{src.width} - width);
  const AxisTaps tx = axis_taps(src.width, width, spec);
  Frame out = blank_frame(width, height);
  if (vertical_first) {
    Frame tmp = blank_frame(src.width, height);
    resample_vertical(src, 0, ty, &tmp);
    resample_horizontal(tmp.view(), 0, tx, &out);
  } else {
    // Only the source rows the vertical pass reads are filtered.
    const int row0 = ty.first.front();
    const int row1 = ty.first.back() + ty.count.back();
    Frame tmp = blank_frame(width, row1 - row0);
    resample_horizontal(src, row0, tx, &tmp);
    resample_vertical(tmp.view(), row0, ty, &out);
  }
  return out;
}

void to_normalized_chw(const FrameView& src, const std::array<float, 3>& mean,
                       const std::array<float, 3>& std, const Tensor& out) {
  FLICK_CHECK(out.device == Device::CPU && out.is_contiguous() &&
                  (out.dtype == DType::F32 || out.dtype == DType::BF16),
              out.str());
  FLICK_CHECK(out.shape == Shape({3, src.height, src.width}),
              out.shape.str() + " for a " + std::to_string(src.width) + "x" +
                  std::to_string(src.height) + " frame");
  // Every uint8 has one result per channel: v.to(float32).div(255), then
  // .sub(mean).div(std), all fp32 as torch computes them.
  std::array<std::array<float, 256>, 3> lut;
  std::array<std::array<uint16_t, 256>, 3> lut_bf16;
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      lut[c][v] = (static_cast<float>(v) / 255.0f - mean[c]) / std[c];
      lut_bf16[c][v] = f32_to_bf16(lut[c][v]);
    }
  }
  const int64_t plane = int64_t(src.width) * src.height;
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < src.height; ++y) {
      const uint8_t* in = src.rgb + y * src.stride + c;
      const int64_t at = c * plane + int64_t(y) * src.width;
      if (out.dtype == DType::F32) {
        float* o = out.ptr<float>() + at;
        for (int x = 0; x < src.width; ++x) o[x] = lut[c][in[3 * x]];
      } else {
        uint16_t* o = out.ptr<uint16_t>() + at;
        for (int x = 0; x < src.width; ++x) o[x] = lut_bf16[c][in[3 * x]];
      }
    }
  }
}

}  // namespace flick
