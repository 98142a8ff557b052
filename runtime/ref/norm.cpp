// Reference normalisations: statistics in double (two passes: mean, then the
// mean of squared deviations), the affine in double, one rounding at the store.
#include <cmath>
#include <string>

#include "runtime/ref/data_iter.h"
#include "runtime/ref/ops.h"

namespace flick::ref {
namespace {

using detail::offset_of;

double load(const Tensor& t, int64_t off) { return load_as_f32(t.dtype, t.data, off); }
void store(const Tensor& t, int64_t off, double v) {
  store_from_f32(t.dtype, t.data, off, static_cast<float>(v));
}

void check_io(const Tensor& x, const Tensor& y, const char* op) {
  FLICK_CHECK(detail::is_float(x.dtype) && detail::is_float(y.dtype),
              std::string(op) + ": float tensors expected, got " + x.str() + " -> " + y.str());
  FLICK_CHECK(x.shape == y.shape, std::string(op) + ": input " + x.str() + " vs output " + y.str());
}

// weight/bias: empty, or a float vector of n elements.
void check_param(const Tensor& p, int64_t n, const char* op, const char* what) {
  if (p.empty()) return;
  FLICK_CHECK(
      detail::is_float(p.dtype) && p.ndim() == 1 && p.dim(0) == n,
      std::string(op) + ": " + what + " must be [" + std::to_string(n) + "], got " + p.str());
}

double param(const Tensor& p, int64_t i, double dflt) {
  return p.empty() ? dflt : load(p, i * p.stride(0));
}

}  // namespace

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y) {
  check_io(x, y, "layer_norm");
  FLICK_CHECK(x.ndim() >= 1, "layer_norm: needs at least one dim");
  const int64_t n = x.dim(-1);
  check_param(weight, n, "layer_norm", "weight");
  check_param(bias, n, "layer_norm", "bias");
  const Shape rows = detail::outer_shape(x.shape);
  const int64_t sx = x.stride(-1), sy = y.stride(-1);
  for (int64_t r = 0; r < rows.numel(); ++r) {
    const int64_t ox = offset_of(r, rows, x.strides), oy = offset_of(r, rows, y.strides);
    double mean = 0;
    for (int64_t i = 0; i < n; ++i) mean += load(x, ox + i * sx);
    mean /= static_cast<double>(n);
    double var = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = load(x, ox + i * sx) - mean;
      var += d * d;
    }
    var /= static_cast<double>(n);
    const double rstd = 1.0 / std::sqrt(var + static_cast<double>(eps));
    for (int64_t i = 0; i < n; ++i) {
      const double v = (load(x, ox + i * sx) - mean) * rstd;
      store(y, oy + i * sy, v * param(weight, i, 1.0) + param(bias, i, 0.0));
    }
  }
}

void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) {
  check_io(x, y, "rms_norm");
  FLICK_CHECK(x.ndim() >= 1, "rms_norm: needs at least one dim");
  const int64_t n = x.dim(-1);
  check_param(weight, n, "rms_norm", "weight");
  const Shape rows = detail::outer_shape(x.shape);
  const int64_t sx = x.stride(-1), sy = y.stride(-1);
  for (int64_t r = 0; r < rows.numel(); ++r) {
    const int64_t ox = offset_of(r, rows, x.strides), oy = offset_of(r, rows, y.strides);
    double ms = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = load(x, ox + i * sx);
      ms += v * v;
    }
    ms /= static_cast<double>(n);
    const double rinv = 1.0 / std::sqrt(ms + static_cast<double>(eps));
    for (int64_t i = 0; i < n; ++i)
      store(y, oy + i * sy, load(x, ox + i * sx) * rinv * param(weight, i, 1.0));
  }
}

void group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias,
                float eps, Tensor& y, Activation act) {
  check_io(x, y, "group_norm");
  FLICK_CHECK(x.ndim() >= 2, "group_norm: x must be [N, C, *], got " + x.str());
  const int64_t N = x.dim(0), C = x.dim(1);
  FLICK_CHECK(groups > 0 && C % groups == 0, "group_norm: " + std::to_string(groups) +
                                                 " groups do not divide C = " + std::to_string(C));
  check_param(weight, C, "group_norm", "weight");
  check_param(bias, C, "group_norm", "bias");
  // Spatial dims flattened: [*] -> S elements per channel.
  Shape spatial;
  spatial.ndim = x.ndim() - 2;
  detail::Strides sxs{}, sys{};
  for (int d = 2; d < x.ndim(); ++d) {
    spatial[d - 2] = x.dim(d);
    sxs[static_cast<size_t>(d - 2)] = x.stride(d);
    sys[static_cast<size_t>(d - 2)] = y.stride(d);
  }
  const int64_t S = spatial.numel(), cpg = C / groups;
  const double count = static_cast<double>(cpg * S);
  for (int64_t b = 0; b < N; ++b)
    for (int64_t g = 0; g < groups; ++g) {
      auto xoff = [&](int64_t c, int64_t s) {
        return b * x.stride(0) + c * x.stride(1) + offset_of(s, spatial, sxs);
      };
      double mean = 0;
      for (int64_t c = g * cpg; c < (g + 1) * cpg; ++c)
        for (int64_t s = 0; s < S; ++s) mean += load(x, xoff(c, s));
      mean /= count;
      double var = 0;
      for (int64_t c = g * cpg; c < (g + 1) * cpg; ++c)
        for (int64_t s = 0; s < S; ++s) {
          const double d = load(x, xoff(c, s)) - mean;
          var += d * d;
        }
      var /= count;
      const double rstd = 1.0 / std::sqrt(var + static_cast<double>(eps));
      for (int64_t c = g * cpg; c < (g + 1) * cpg; ++c) {
        const double w = param(weight, c, 1.0), bb = param(bias, c, 0.0);
        for (int64_t s = 0; s < S; ++s) {
          const int64_t oy = b * y.stride(0) + c * y.stride(1) + offset_of(s, spatial, sys);
          store(y, oy, (load(x, xoff(c, s)) - mean) * rstd * w + bb);
        }
      }
    }
  if (act != Activation::None) activation(y, y, act);  // on the stored (rounded) y
}

}  // namespace flick::ref
