// CPU layer / RMS / group normalisation. Statistics in fp32 vector lanes with
// double block totals (two passes: mean, then the mean squared deviation, as
// robust as PyTorch's Welford), the normalisation in fp32, one rounding at
// the store.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/cpu/conv_onednn.h"
#include "runtime/cpu/eltwise_runs.h"
#include "runtime/cpu/ops.h"
#include "runtime/ref/ops.h"

namespace flick::cpu {
namespace {

// w / b of a norm over n features as fp32; a bias without a weight gets unit weights.
struct Affine {
  const float* w = nullptr;
  const float* b = nullptr;
};

Affine affine_params(const EltwiseKernels& k, const Tensor& weight, const Tensor& bias, int64_t n) {
  Affine a{detail::param_f32(k, weight, n, detail::kParamSlot),
           detail::param_f32(k, bias, n, detail::kParamSlot + 1)};
  if (!a.w && a.b) {
    float* ones = detail::scratch(detail::kParamSlot + 2, n);
    for (int64_t i = 0; i < n; ++i) ones[i] = 1.f;
    a.w = ones;
  }
  return a;
}

float inv_sqrt(double v, float eps) {
  return static_cast<float>(1.0 / std::sqrt(v + static_cast<double>(eps)));
}

// A norm whose last (normalised) dim is strided but whose rows are unit-stride
// along another dim - a norm over the channels of an [N, C, *] tensor viewed
// as [N, *, C] - runs on [n, 256] blocks vectorised across that dim instead of
// gathering every row. Returns false when x / y have no such dim.
bool channel_norm(const EltwiseKernels& k, const Tensor& x, Tensor& y, const float* w,
                  const float* b, float eps, bool rms) {
  if (x.numel() == 0 || (x.stride(-1) == 1 && y.stride(-1) == 1)) return false;
  const int last = x.ndim() - 1;
  int cdim = -1;
  for (int d = 0; d < last; ++d)
    if (x.dim(d) > 1 && x.stride(d) == 1 && y.stride(d) == 1) cdim = d;
  if (cdim < 0) return false;
  constexpr int64_t kCols = 256;
  const int64_t n = x.dim(-1), cols = x.dim(cdim), blocks = (cols + kCols - 1) / kCols;
  Shape batch = flick::detail::outer_shape(x.shape);
  batch[cdim] = 1;
  const int64_t xs = x.stride(-1), ys = y.stride(-1);
  const int64_t xes = static_cast<int64_t>(dtype_size(x.dtype));
  const int64_t yes = static_cast<int64_t>(dtype_size(y.dtype));
  parallel_for(
      batch.numel() * blocks,
      [&](int64_t begin, int64_t end) {
        double sums[kCols];
        float mean[kCols], scale[kCols];
        for (int64_t item = begin; item < end; ++item) {
          const int64_t c0 = item % blocks * kCols, m = std::min(kCols, cols - c0);
          const int64_t ox = flick::detail::offset_of(item / blocks, batch, x.strides) + c0;
          const int64_t oy = flick::detail::offset_of(item / blocks, batch, y.strides) + c0;
          // The [n, m] block of x as fp32 (in place when x is F32).
          const float* xb = nullptr;
          int64_t ldx = xs;
          if (x.dtype == DType::F32) {
            xb = x.ptr<const float>() + ox;
          } else {
            float* buf = detail::scratch(0, n * m);
            for (int64_t r = 0; r < n; ++r)
              k.to_f32(x.dtype, static_cast<const char*>(x.data) + (ox + r * xs) * xes, buf + r * m,
                       m);
            xb = buf;
            ldx = m;
          }
          float* yb = y.dtype == DType::F32 ? y.ptr<float>() + oy : detail::scratch(1, n * m);
          const int64_t ldy = y.dtype == DType::F32 ? ys : m;
          const double dn = static_cast<double>(n);
          k.col_sums(xb, n, m, ldx, nullptr, rms, sums);
          for (int64_t c = 0; c < m; ++c) mean[c] = rms ? 0.f : static_cast<float>(sums[c] / dn);
          if (!rms) k.col_sums(xb, n, m, ldx, mean, true, sums);
          for (int64_t c = 0; c < m; ++c) scale[c] = inv_sqrt(sums[c] / dn, eps);
          k.col_normalize(xb, n, m, ldx, mean, scale, w, b, yb, ldy);
          if (y.dtype != DType::F32)
            for (int64_t r = 0; r < n; ++r)
              k.from_f32(yb + r * m, y.dtype, static_cast<char*>(y.data) + (oy + r * ys) * yes, m);
        }
      },
      std::max<int64_t>(1, 16384 / (n * kCols)));
  return true;
}

// y[off, off + n) = act(y[off, off + n)) in y's dtype, as the activation op
// on the stored y would (the chunk is still in cache).
void activate_stored(const EltwiseKernels& k, const Tensor& y, int64_t off, int64_t n,
                     Activation act) {
  if (act == Activation::None) return;
  char* p = static_cast<char*>(y.data) + off * static_cast<int64_t>(dtype_size(y.dtype));
  k.activation(act, p, y.dtype, p, y.dtype, n);
}

// group_norm of channels-last x and y (C innermost, each sample's pixels
// dense): each channel's sums over chunks of pixels in double lanes
// (col_sums) are added up per group, then every pixel row gets (x - mean) *
// scale[c] + shift[c] with its group's mean, scale = rstd * w[c] and shift =
// b[c], as the NCHW path's shift_scale: no transposes around the norm.
void group_norm_channels_last(const EltwiseKernels& k, const Tensor& x, int64_t groups,
                              const float* w, const float* b, float eps, Tensor& y, int64_t S,
                              Activation act) {
  const int64_t C = x.dim(1), cpg = C / groups;
  constexpr int64_t kPixels = 64;  // pixels per chunk: a [64, C] fp32 block stays in L1 / L2
  const int64_t chunks = (S + kPixels - 1) / kPixels;
  std::vector<double> part(static_cast<size_t>(chunks * C));
  std::vector<float> mean(static_cast<size_t>(C)), scale(static_cast<size_t>(C)),
      shift(static_cast<size_t>(C));
  const double count = static_cast<double>(cpg * S);
  auto pixels = [&](int64_t ch) { return std::min(kPixels, S - ch * kPixels); };
  // part[ch][c] = sum over the chunk's pixels of x (center null) or (x - mean[c])^2.
  auto chunk_sums = [&](int64_t bx, const float* center) {
    parallel_for(chunks, [&](int64_t begin, int64_t end) {
      for (int64_t ch = begin; ch < end; ++ch) {
        const int64_t n = pixels(ch);
        const float* xr = detail::read_f32(k, x, bx + ch * kPixels * C, 1, n * C, 0);
        k.col_sums(xr, n, C, C, center, center != nullptr, part.data() + ch * C);
      }
    });
  };
  // The group's total of part over chunks and its channels.
  auto group_total = [&](int64_t g) {
    double t = 0;
    for (int64_t ch = 0; ch < chunks; ++ch)
      for (int64_t c = g * cpg; c < (g + 1) * cpg; ++c) t += part[static_cast<size_t>(ch * C + c)];
    return t;
  };
  for (int64_t n = 0; n < x.dim(0); ++n) {
    const int64_t bx = n * x.stride(0), by = n * y.stride(0);
    chunk_sums(bx, nullptr);
    for (int64_t g = 0; g < groups; ++g)
      std::fill_n(mean.begin() + g * cpg, cpg, static_cast<float>(group_total(g) / count));
    chunk_sums(bx, mean.data());
    for (int64_t g = 0; g < groups; ++g) {
      const float rstd = inv_sqrt(group_total(g) / count, eps);
      for (int64_t c = g * cpg; c < (g + 1) * cpg; ++c) {
        scale[static_cast<size_t>(c)] = w ? rstd * w[c] : rstd;
        shift[static_cast<size_t>(c)] = b ? b[c] : 0.f;
      }
    }
    parallel_for(chunks, [&](int64_t begin, int64_t end) {
      const float one = 1.f;
      for (int64_t ch = begin; ch < end; ++ch) {
        const int64_t m = pixels(ch), off = ch * kPixels * C;
        const float* xr = detail::read_f32(k, x, bx + off, 1, m * C, 0);
        float* yr = detail::out_f32(y, by + off, 1, m * C, 1);
        k.col_normalize(xr, m, C, C, mean.data(), scale.data(), nullptr, nullptr, yr, C);
        for (int64_t p = 0; p < m; ++p)
          k.fma(yr + p * C, true, &one, false, shift.data(), true, yr + p * C, C);
        detail::write_f32(k, y, by + off, 1, m * C, yr);
        activate_stored(k, y, by + off, m * C, act);
      }
    });
  }
}

}  // namespace

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y) {
  FLICK_CHECK(x.ndim() >= 1, "layer_norm: needs at least one dim");
  const EltwiseKernels& k = eltwise_kernels();
  const Affine p = affine_params(k, weight, bias, x.dim(-1));
  detail::check_float(x, "layer_norm");
  detail::check_float(y, "layer_norm");
  FLICK_CHECK(x.shape == y.shape, "layer_norm: input " + x.str() + " vs output " + y.str());
  if (channel_norm(k, x, y, p.w, p.b, eps, /*rms=*/false)) return;
  detail::for_each_row("layer_norm", x, y, [&](int64_t, const float* xr, float* yr, int64_t n) {
    const double dn = static_cast<double>(n);
    const float mean = static_cast<float>(k.sum(xr, n) / dn);
    const float rstd = inv_sqrt(k.sum_sq_dev(xr, n, mean) / dn, eps);
    if (p.w) {
      k.normalize(xr, n, mean, rstd, p.w, p.b, yr);
    } else {
      k.shift_scale(xr, n, mean, rstd, 0.f, yr);
    }
  });
}

void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) {
  FLICK_CHECK(x.ndim() >= 1, "rms_norm: needs at least one dim");
  const EltwiseKernels& k = eltwise_kernels();
  const float* w = detail::param_f32(k, weight, x.dim(-1), detail::kParamSlot);
  detail::check_float(x, "rms_norm");
  detail::check_float(y, "rms_norm");
  FLICK_CHECK(x.shape == y.shape, "rms_norm: input " + x.str() + " vs output " + y.str());
  if (channel_norm(k, x, y, w, nullptr, eps, /*rms=*/true)) return;
  detail::for_each_row("rms_norm", x, y, [&](int64_t, const float* xr, float* yr, int64_t n) {
    const float r = inv_sqrt(k.sum_sq(xr, n) / static_cast<double>(n), eps);
    if (w) {
      k.normalize(xr, n, 0.f, r, w, nullptr, yr);
    } else {
      k.shift_scale(xr, n, 0.f, r, 0.f, yr);
    }
  });
}

void group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias,
                float eps, Tensor& y, Activation act) {
  detail::check_float(x, "group_norm");
  detail::check_float(y, "group_norm");
  FLICK_CHECK(x.ndim() >= 2 && x.shape == y.shape,
              "group_norm: x must be [N, C, *] like y, got " + x.str() + " -> " + y.str());
  const int64_t N = x.dim(0), C = x.dim(1);
  FLICK_CHECK(groups > 0 && C % groups == 0, "group_norm: " + std::to_string(groups) +
                                                 " groups do not divide C = " + std::to_string(C));
  // The fast path needs each channel's spatial block contiguous in x and y.
  Shape spatial;
  spatial.ndim = x.ndim() - 2;
  std::array<detail::Strides, 2> st{};
  for (int d = 2; d < x.ndim(); ++d) {
    spatial[d - 2] = x.dim(d);
    st[0][static_cast<size_t>(d - 2)] = x.stride(d);
    st[1][static_cast<size_t>(d - 2)] = y.stride(d);
  }
  const int64_t S = spatial.numel();
  if (x.numel() == 0) return;
  const auto c = detail::collapse(spatial, st);
  const EltwiseKernels& k = eltwise_kernels();
  if (S > 1 && C > 1 && channels_last(x) && channels_last(y)) {
    group_norm_channels_last(k, x, groups, detail::param_f32(k, weight, C, detail::kParamSlot),
                             detail::param_f32(k, bias, C, detail::kParamSlot + 1), eps, y, S, act);
    return;
  }
  if (S > 1 && (c.shape.ndim != 1 || c.strides[0][0] != 1 || c.strides[1][0] != 1)) {
    ref::group_norm(x, groups, weight, bias, eps, y, Activation::None);  // rare layouts
    if (act != Activation::None) activation(y, y, act);
    return;
  }
  const float* w = detail::param_f32(k, weight, C, detail::kParamSlot);
  const float* b = detail::param_f32(k, bias, C, detail::kParamSlot + 1);
  const int64_t cpg = C / groups;
  constexpr int64_t kChunk = 4096;  // bounded scratch for huge spatial blocks
  auto for_chunks = [&](int64_t off, auto fn) {
    for (int64_t s = 0; s < S; s += kChunk) fn(off + s, std::min(kChunk, S - s));
  };
  parallel_for(
      N * groups,
      [&](int64_t begin, int64_t end) {
        for (int64_t ng = begin; ng < end; ++ng) {
          const int64_t n = ng / groups, c0 = ng % groups * cpg;
          double sum = 0;
          for (int64_t ch = c0; ch < c0 + cpg; ++ch)
            for_chunks(n * x.stride(0) + ch * x.stride(1), [&](int64_t off, int64_t m) {
              sum += k.sum(detail::read_f32(k, x, off, 1, m, 0), m);
            });
          const double count = static_cast<double>(cpg * S);
          const float mean = static_cast<float>(sum / count);
          double ssd = 0;
          for (int64_t ch = c0; ch < c0 + cpg; ++ch)
            for_chunks(n * x.stride(0) + ch * x.stride(1), [&](int64_t off, int64_t m) {
              ssd += k.sum_sq_dev(detail::read_f32(k, x, off, 1, m, 0), m, mean);
            });
          const float rstd = inv_sqrt(ssd / count, eps);
          for (int64_t ch = c0; ch < c0 + cpg; ++ch) {
            const float scale = w ? rstd * w[ch] : rstd;
            const float shift = b ? b[ch] : 0.f;
            const int64_t ox = n * x.stride(0) + ch * x.stride(1);
            const int64_t oy = n * y.stride(0) + ch * y.stride(1);
            for (int64_t s = 0; s < S; s += kChunk) {
              const int64_t m = std::min(kChunk, S - s);
              const float* xr = detail::read_f32(k, x, ox + s, 1, m, 0);
              float* yr = detail::out_f32(y, oy + s, 1, m, 1);
              k.shift_scale(xr, m, mean, scale, shift, yr);
              detail::write_f32(k, y, oy + s, 1, m, yr);
              activate_stored(k, y, oy + s, m, act);
            }
          }
        }
      },
      std::max<int64_t>(1, 16384 / (cpg * S)));
}

}  // namespace flick::cpu
