// CPU layer / RMS / group normalisation. Statistics in fp32 vector lanes with
// double block totals (two passes: mean, then the mean squared deviation, as
// robust as PyTorch's Welford), the normalisation in fp32, one rounding at
// the store.
#include <cmath>
#include <string>

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

}  // namespace

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y) {
  FLICK_CHECK(x.ndim() >= 1, "layer_norm: needs at least one dim");
  const EltwiseKernels& k = eltwise_kernels();
  const Affine p = affine_params(k, weight, bias, x.dim(-1));
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
                float eps, Tensor& y) {
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
  const auto c = detail::collapse(spatial, st);
  if (S > 1 && (c.shape.ndim != 1 || c.strides[0][0] != 1 || c.strides[1][0] != 1)) {
    ref::group_norm(x, groups, weight, bias, eps, y);  // rare layouts: the strided oracle
    return;
  }
  const EltwiseKernels& k = eltwise_kernels();
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
            }
          }
        }
      },
      std::max<int64_t>(1, 16384 / (cpg * S)));
}

}  // namespace flick::cpu
