#include "models/sam3/sam3_preprocess.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/status.h"

namespace flick {
namespace {

// The int16 taps of one axis: out[i] = sum_k in[xmin[i] + k] * w[i * ksize + k].
struct Taps16 {
  std::vector<int64_t> xmin, xsize;
  std::vector<int16_t> w;  // [out, ksize]
  int64_t ksize = 0;
  unsigned precision = 0;
};

// HelperInterpLinear::aa_filter (UpSampleKernel.cpp): the triangle.
double triangle(double x) {
  x = std::abs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// HelperInterpBase::_compute_index_ranges_weights<double> (antialias, not
// align_corners) + _compute_index_ranges_int16_weights.
Taps16 taps16(int64_t in, int64_t out) {
  // area_pixel_compute_scale<double> with no scale given: in / out.
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double support = scale >= 1.0 ? 1.0 * scale : 1.0;  // interp_size 2 * 0.5
  const int64_t max_size = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;

  Taps16 t;
  t.xmin.resize(static_cast<size_t>(out));
  t.xsize.resize(static_cast<size_t>(out));
  std::vector<double> wd(static_cast<size_t>(out * max_size), 0.0);
  double wt_max = 0.0;
  for (int64_t i = 0; i < out; ++i) {
    const double center = scale * (static_cast<double>(i) + 0.5);
    // Truncating casts, as in the reference (and Pillow).
    const int64_t xmin = std::max(static_cast<int64_t>(center - support + 0.5), int64_t{0});
    int64_t xsize = std::min(static_cast<int64_t>(center + support + 0.5), in) - xmin;
    xsize = std::clamp(xsize, int64_t{0}, max_size);
    double* w = wd.data() + i * max_size;
    double total = 0.0;
    for (int64_t j = 0; j < xsize; ++j) {
      w[j] = triangle((static_cast<double>(j + xmin) - center + 0.5) * invscale);
      total += w[j];
    }
    if (total != 0.0) {
      for (int64_t j = 0; j < xsize; ++j) {
        w[j] /= total;
        wt_max = std::max(wt_max, w[j]);
      }
    }
    t.xmin[static_cast<size_t>(i)] = xmin;
    t.xsize[static_cast<size_t>(i)] = xsize;
  }
  // The most fractional bits (< 22) for which 2 * wt_max still fits in int16.
  unsigned p = 0;
  for (p = 0; p < 22; ++p) {
    const int next = static_cast<int>(0.5 + wt_max * static_cast<double>(1 << (p + 1)));
    if (next >= (1 << 15)) break;
  }
  t.precision = p;
  t.ksize = max_size;
  t.w.resize(wd.size());
  for (size_t k = 0; k < wd.size(); ++k) {
    const double v = wd[k] * static_cast<double>(1 << p);
    t.w[k] = static_cast<int16_t>(v < 0 ? static_cast<int>(-0.5 + v) : static_cast<int>(0.5 + v));
  }
  return t;
}

// One output sample: int32 accumulation from the rounding offset, an
// arithmetic shift, then saturation (the kernels' packs_epi32 + packus_epi16).
inline uint8_t convolve(const uint8_t* in, int64_t step, const int16_t* w, int64_t n,
                        unsigned precision) {
  int32_t acc = int32_t{1} << (precision - 1);
  for (int64_t k = 0; k < n; ++k) acc += static_cast<int32_t>(in[k * step]) * w[k];
  return static_cast<uint8_t>(std::clamp(acc >> precision, 0, 255));
}

// Rows of `src` resampled along x to `width`.
Frame horizontal(const FrameView& src, int width) {
  const Taps16 t = taps16(src.width, width);
  Frame out{width, src.height, std::vector<uint8_t>(size_t(width) * src.height * 3)};
  for (int y = 0; y < src.height; ++y) {
    const uint8_t* row = src.rgb + y * src.stride;
    uint8_t* o = out.rgb.data() + size_t(y) * width * 3;
    for (int x = 0; x < width; ++x) {
      const int16_t* w = t.w.data() + x * t.ksize;
      const uint8_t* in = row + t.xmin[size_t(x)] * 3;
      for (int c = 0; c < 3; ++c)
        o[3 * x + c] = convolve(in + c, 3, w, t.xsize[size_t(x)], t.precision);
    }
  }
  return out;
}

// Columns of `src` resampled along y to `height`.
Frame vertical(const FrameView& src, int height) {
  const Taps16 t = taps16(src.height, height);
  Frame out{src.width, height, std::vector<uint8_t>(size_t(src.width) * height * 3)};
  for (int y = 0; y < height; ++y) {
    const int16_t* w = t.w.data() + y * t.ksize;
    const uint8_t* in = src.rgb + t.xmin[size_t(y)] * src.stride;
    uint8_t* o = out.rgb.data() + size_t(y) * src.width * 3;
    for (int x = 0; x < src.width * 3; ++x)
      o[x] = convolve(in + x, src.stride, w, t.xsize[size_t(y)], t.precision);
  }
  return out;
}

Frame copy_frame(const FrameView& src) {
  Frame out{src.width, src.height, std::vector<uint8_t>(size_t(src.width) * src.height * 3)};
  for (int y = 0; y < src.height; ++y)
    std::memcpy(out.rgb.data() + size_t(y) * src.width * 3, src.rgb + y * src.stride,
                size_t(src.width) * 3);
  return out;
}

}  // namespace

Frame sam3_resize(const FrameView& src, int width, int height) {
  FLICK_CHECK(width >= 1 && height >= 1,
              "sam3_resize to " + std::to_string(width) + "x" + std::to_string(height));
  FLICK_CHECK(src.width >= 1 && src.height >= 1 && src.rgb != nullptr,
              "sam3_resize of an empty frame");
  // upsample_avx_bilinear_bicubic_uint8: equal sizes copy; otherwise the
  // horizontal pass (if the width changes) and then the vertical one (if the
  // height changes), each rounding to uint8.
  if (width == src.width && height == src.height) return copy_frame(src);
  if (width == src.width) return vertical(src, height);
  Frame h = horizontal(src, width);
  if (height == src.height) return h;
  return vertical(h.view(), height);
}

float sam3_normalize(uint8_t v) {
  // ToDtype(float32, scale=True) is image.to(float32).mul_(1.0 / 255): the
  // Python double 1/255 becomes a float scalar for a float tensor. Normalize
  // is sub_(0.5).div_(0.5). Each step rounds to fp32; the casts keep the
  // compiler from fusing them into an FMA.
  const float scale = static_cast<float>(1.0 / 255.0);
  const float x = static_cast<float>(static_cast<double>(v) * static_cast<double>(scale));
  const float centred = static_cast<float>(static_cast<double>(x) - 0.5);
  return centred / 0.5f;
}

void sam3_preprocess(const FrameView& frame, const Tensor& out) {
  FLICK_CHECK(out.device == Device::CPU && out.is_contiguous() && out.ndim() == 4 &&
                  out.dim(0) == 1 && out.dim(1) == 3 && out.dim(2) == out.dim(3) &&
                  (out.dtype == DType::F32 || out.dtype == DType::BF16),
              "sam3_preprocess into " + out.str());
  const int s = static_cast<int>(out.dim(2));
  const Frame r = sam3_resize(frame, s, s);
  std::array<float, 256> lut;
  std::array<uint16_t, 256> lut_bf16;
  for (int v = 0; v < 256; ++v) {
    lut[size_t(v)] = sam3_normalize(static_cast<uint8_t>(v));
    lut_bf16[size_t(v)] = f32_to_bf16(lut[size_t(v)]);
  }
  const int64_t plane = int64_t(s) * s;
  for (int c = 0; c < 3; ++c) {
    const uint8_t* in = r.rgb.data() + c;
    if (out.dtype == DType::F32) {
      float* o = out.ptr<float>() + c * plane;
      for (int64_t i = 0; i < plane; ++i) o[i] = lut[in[3 * i]];
    } else {
      uint16_t* o = out.ptr<uint16_t>() + c * plane;
      for (int64_t i = 0; i < plane; ++i) o[i] = lut_bf16[in[3 * i]];
    }
  }
}

}  // namespace flick
