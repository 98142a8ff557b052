// CPU nearest upsampling and resize. Resize is separable: a horizontal pass
// over every input row into an fp32 [H, OW] plane, then a vertical pass of
// FMAs over whole rows; indices and weights are PyTorch's (resample.h).
// Channels-last maps (x and y) take both passes over all channels at once:
// a row of W x C values, the same sums per element in the same order.
#include "runtime/ref/resample.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cpu/conv_onednn.h"
#include "runtime/cpu/eltwise_runs.h"
#include "runtime/cpu/ops.h"
#include "runtime/ref/ops.h"

namespace flick::cpu {
namespace {

template <class T>
void expand_row(const T* src, T* dst, int64_t ow, int64_t factor) {
  if (factor == 1) {
    std::memcpy(dst, src, static_cast<size_t>(ow) * sizeof(T));
  } else if (factor == 2) {
    for (int64_t i = 0; i < ow / 2; ++i) dst[2 * i] = dst[2 * i + 1] = src[i];
  } else {
    for (int64_t i = 0; i < ow; ++i) dst[i] = src[i / factor];
  }
}

// Channels-last x and y (one dtype): each output pixel is a copy of its
// source pixel's C contiguous values, one output row [OW, C] per task.
void upsample_nearest_channels_last(const Tensor& x, Tensor& y,
                                    const std::array<int64_t, kMaxDims>& factor) {
  const int nd = y.ndim();
  const auto es = static_cast<int64_t>(dtype_size(y.dtype));
  const int64_t C = y.dim(1), ow = y.dim(nd - 1), fw = factor[static_cast<size_t>(nd - 1)];
  const int64_t pixel = C * es, row_bytes = ow * pixel;
  // Output rows [N, (OD,) OH], each at y.stride(nd - 2) elements apart.
  int64_t rows = y.dim(0);
  for (int d = 2; d < nd - 1; ++d) rows *= y.dim(d);
  parallel_for(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          int64_t rem = r, ox = 0, oy = 0;
          for (int d = nd - 2; d >= 2; --d) {
            const int64_t idx = rem % y.dim(d);
            rem /= y.dim(d);
            ox += idx / factor[static_cast<size_t>(d)] * x.stride(d);
            oy += idx * y.stride(d);
          }
          ox += rem * x.stride(0);
          oy += rem * y.stride(0);
          const char* src = static_cast<const char*>(x.data) + ox * es;
          char* dst = static_cast<char*>(y.data) + oy * es;
          for (int64_t i = 0; i < ow; ++i)
            std::memcpy(dst + i * pixel, src + i / fw * x.stride(nd - 1) * es,
                        static_cast<size_t>(pixel));
        }
      },
      std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, row_bytes)));
}

}  // namespace

void upsample_nearest(const Tensor& x, Tensor& y) {
  FLICK_CHECK(x.ndim() == y.ndim() && (x.ndim() == 4 || x.ndim() == 5) && x.dim(0) == y.dim(0) &&
                  x.dim(1) == y.dim(1),
              "upsample_nearest: " + x.str() + " -> " + y.str());
  std::array<int64_t, kMaxDims> factor{};
  for (int d = 2; d < x.ndim(); ++d) {
    FLICK_CHECK(x.dim(d) > 0 && y.dim(d) % x.dim(d) == 0,
                "upsample_nearest: " + y.str() + " is not an integer multiple of " + x.str());
    factor[static_cast<size_t>(d)] = y.dim(d) / x.dim(d);
  }
  if (x.dtype == y.dtype && x.dim(1) > 1 && channels_last(x) && channels_last(y)) {
    upsample_nearest_channels_last(x, y, factor);
    return;
  }
  if (x.dtype != y.dtype || x.stride(-1) != 1 || y.stride(-1) != 1) {
    ref::upsample_nearest(x, y);  // converting or strided rows: the oracle's loop
    return;
  }
  // Output rows [N, C, (OD,) OH] each repeat one input row, widened by the W factor.
  const Shape rows = flick::detail::outer_shape(y.shape);
  const int64_t ow = y.dim(-1), fw = factor[static_cast<size_t>(y.ndim() - 1)];
  parallel_for(
      rows.numel(),
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          int64_t rem = r, ox = 0, oy = 0;
          for (int d = rows.ndim - 1; d >= 0; --d) {
            const int64_t idx = rem % rows[d];
            rem /= rows[d];
            const int64_t f = d >= 2 ? factor[static_cast<size_t>(d)] : 1;
            ox += idx / f * x.stride(d);
            oy += idx * y.stride(d);
          }
          const char* src = static_cast<const char*>(x.data) + ox * int64_t(dtype_size(x.dtype));
          char* dst = static_cast<char*>(y.data) + oy * int64_t(dtype_size(y.dtype));
          switch (dtype_size(x.dtype)) {
            case 1:
              expand_row(reinterpret_cast<const uint8_t*>(src), reinterpret_cast<uint8_t*>(dst), ow,
                         fw);
              break;
            case 2:
              expand_row(reinterpret_cast<const uint16_t*>(src), reinterpret_cast<uint16_t*>(dst),
                         ow, fw);
              break;
            default:
              expand_row(reinterpret_cast<const uint32_t*>(src), reinterpret_cast<uint32_t*>(dst),
                         ow, fw);
              break;
          }
        }
      },
      std::max<int64_t>(1, 8192 / ow));
}

namespace {

// resize of channels-last x into channels-last y: plane [H, OW, C] fp32, each
// element the NCHW path's sum (same taps, weights and order).
void resize_channels_last(const Tensor& x, Tensor& y, const resample::Taps& th,
                          const resample::Taps& tw) {
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t OH = th.out, OW = tw.out;
  const EltwiseKernels& k = eltwise_kernels();
  // Every element is written before it is read: no zero fill (18 MB per
  // EfficientSAM3 frame).
  const auto plane = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(H * OW * C));
  for (int64_t n = 0; n < N; ++n) {
    // Horizontal: plane[h, ow, :] = sum_j ww_j x[h, w_j, :].
    parallel_for(H, [&](int64_t begin, int64_t end) {
      for (int64_t h = begin; h < end; ++h) {
        const float* row = detail::read_f32(k, x, n * x.stride(0) + h * x.stride(2), 1, W * C, 0);
        for (int64_t o = 0; o < OW; ++o) {
          float* out = plane.get() + (h * OW + o) * C;
          std::fill(out, out + C, 0.f);
          for (int j = 0; j < tw.count[static_cast<size_t>(o)]; ++j) {
            const float w = tw.w(o, j);
            const float* src = row + tw.tap_index(o, j) * C;
            for (int64_t c = 0; c < C; ++c) out[c] += w * src[c];
          }
        }
      }
    });
    // Vertical: y[oh, :, :] = sum_i wh_i plane[h_i, :, :], whole rows of OW x C.
    const int64_t len = OW * C;
    parallel_for(OH, [&](int64_t begin, int64_t end) {
      for (int64_t oh = begin; oh < end; ++oh) {
        const int64_t oy = n * y.stride(0) + oh * y.stride(2);
        float* out = detail::out_f32(y, oy, 1, len, 1);
        const float zero = 0.f;
        const int cnt = th.count[static_cast<size_t>(oh)];
        for (int i = 0; i < cnt; ++i) {
          const float w = th.w(oh, i);
          k.fma(plane.get() + th.tap_index(oh, i) * len, true, &w, false, i == 0 ? &zero : out,
                i != 0, out, len);
        }
        if (cnt == 0) std::memset(out, 0, static_cast<size_t>(len) * sizeof(float));
        detail::write_f32(k, y, oy, 1, len, out);
      }
    });
  }
}

// y = x resized over the taps of y's rows (th) and columns (tw): the whole
// result (resize) or a window of it (resize_window, whose taps are the
// whole result's, sliced), the same sums either way.
void resize_taps_apply(const Tensor& x, Tensor& y, const resample::Taps2d& taps) {
  const resample::Taps &th = taps.h, &tw = taps.w;
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2);
  if (x.dim(1) > 1 && channels_last(x) && channels_last(y)) {
    resize_channels_last(x, y, th, tw);
    return;
  }
  const int64_t OH = th.out, OW = tw.out;
  // Only the input rows y's rows read (all of them for a whole resize).
  int64_t h0 = H, h1 = 0;
  for (int64_t oh = 0; oh < OH; ++oh)
    for (int i = 0; i < th.count[static_cast<size_t>(oh)]; ++i) {
      h0 = std::min(h0, th.tap_index(oh, i));
      h1 = std::max(h1, th.tap_index(oh, i) + 1);
    }
  const EltwiseKernels& k = eltwise_kernels();
  // Resize runs once per job (preprocessing) or per detection mask (a
  // window), so its plane buffer is allocated here.
  std::vector<float> plane(static_cast<size_t>(H * OW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t bx = n * x.stride(0) + c * x.stride(1);
      const int64_t by = n * y.stride(0) + c * y.stride(1);
      // Horizontal: plane[h, ow] = sum_j ww_j x[h, w_j].
      parallel_for(
          std::max<int64_t>(h1 - h0, 0),
          [&](int64_t begin, int64_t end) {
            for (int64_t h = h0 + begin; h < h0 + end; ++h) {
              const float* row =
                  detail::read_f32(k, x, bx + h * x.stride(2), x.stride(3), x.dim(3), 0);
              float* out = plane.data() + h * OW;
              for (int64_t o = 0; o < OW; ++o) {
                const int cnt = tw.count[static_cast<size_t>(o)];
                float acc = 0.f;
                for (int j = 0; j < cnt; ++j) acc += tw.w(o, j) * row[tw.tap_index(o, j)];
                out[o] = acc;
              }
            }
          },
          std::max<int64_t>(1, 4096 / OW));
      // Vertical: y[oh, :] = sum_i wh_i plane[h_i, :], vectorised over the row.
      parallel_for(
          OH,
          [&](int64_t begin, int64_t end) {
            for (int64_t oh = begin; oh < end; ++oh) {
              const int64_t oy = by + oh * y.stride(2);
              float* out = detail::out_f32(y, oy, y.stride(3), OW, 1);
              const float zero = 0.f;
              const int cnt = th.count[static_cast<size_t>(oh)];
              for (int i = 0; i < cnt; ++i) {
                const float w = th.w(oh, i);
                k.fma(plane.data() + th.tap_index(oh, i) * OW, true, &w, false,
                      i == 0 ? &zero : out, i != 0, out, OW);
              }
              if (cnt == 0) std::memset(out, 0, static_cast<size_t>(OW) * sizeof(float));
              detail::write_f32(k, y, oy, y.stride(3), OW, out);
            }
          },
          std::max<int64_t>(1, 4096 / OW));
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

}  // namespace flick::cpu
