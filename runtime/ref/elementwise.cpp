// Reference activations, broadcast arithmetic, RoPE and softmax: one element
// at a time in double precision over any strides, rounded once at the store.
// Double makes these the oracle: every result is the exact function of the
// stored inputs, correctly rounded up to a rare double-rounding tie.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "runtime/ref/data_iter.h"
#include "runtime/ref/matmul_common.h"
#include "runtime/ref/ops.h"

namespace flick::ref {
namespace {

using detail::broadcast_strides;
using detail::offset_of;
using detail::Strides;

double load(const Tensor& t, int64_t off) { return load_as_f32(t.dtype, t.data, off); }
void store(const Tensor& t, int64_t off, double v) {
  store_from_f32(t.dtype, t.data, off, static_cast<float>(v));
}

void check_float(const Tensor& t, const char* op) {
  FLICK_CHECK(detail::is_float(t.dtype),
              std::string(op) + ": expected an F32/BF16/F16 tensor, got " + t.str());
}

// y[i] = f(in_0[i], ..., in_{N-1}[i]) with each input broadcast to y's shape.
template <size_t N, class F>
void broadcast_map(const char* op, const std::array<const Tensor*, N>& in, Tensor& y, F f) {
  check_float(y, op);
  std::array<Strides, N> strides;
  for (size_t k = 0; k < N; ++k) {
    check_float(*in[k], op);
    strides[k] = broadcast_strides(*in[k], y.shape, op);
  }
  const int64_t n = y.numel();
  for (int64_t i = 0; i < n; ++i) {
    std::array<double, N> v;
    for (size_t k = 0; k < N; ++k) v[k] = load(*in[k], offset_of(i, y.shape, strides[k]));
    store(y, offset_of(i, y.shape, y.strides), f(v));
  }
}

void check_same_shape(const Tensor& x, const Tensor& y, const char* op) {
  FLICK_CHECK(x.shape == y.shape, std::string(op) + ": input " + x.str() + " vs output " + y.str());
}

// Logistic sigmoid without overflow for either sign.
double sigmoid(double v) {
  if (v >= 0) return 1.0 / (1.0 + std::exp(-v));
  const double e = std::exp(v);
  return e / (1.0 + e);
}

}  // namespace

void gelu(const Tensor& x, Tensor& y, bool tanh_approx) {
  check_same_shape(x, y, "gelu");
  if (tanh_approx) {
    // 0.5 x (1 + tanh(u)) = x sigmoid(2u): no cancellation for negative x.
    const double k = std::sqrt(2.0 / M_PI);
    broadcast_map<1>("gelu", {&x}, y, [k](const std::array<double, 1>& v) {
      const double u = k * (v[0] + 0.044715 * v[0] * v[0] * v[0]);
      return v[0] * sigmoid(2.0 * u);
    });
  } else {
    // 0.5 x (1 + erf(x / sqrt 2)) = 0.5 x erfc(-x / sqrt 2).
    broadcast_map<1>("gelu", {&x}, y, [](const std::array<double, 1>& v) {
      return 0.5 * v[0] * std::erfc(-v[0] * M_SQRT1_2);
    });
  }
}

void silu(const Tensor& x, Tensor& y) {
  check_same_shape(x, y, "silu");
  broadcast_map<1>("silu", {&x}, y,
                   [](const std::array<double, 1>& v) { return v[0] * sigmoid(v[0]); });
}

void activation(const Tensor& x, Tensor& y, Activation act) {
  check_same_shape(x, y, "activation");
  const DType out = y.dtype;
  broadcast_map<1>("activation", {&x}, y,
                   [act, out](const std::array<double, 1>& v) { return activate(v[0], act, out); });
}

void modulate(const Tensor& x, const Tensor& shift, const Tensor& scale, Tensor& y) {
  check_same_shape(x, y, "modulate");
  broadcast_map<3>("modulate", {&x, &shift, &scale}, y,
                   [](const std::array<double, 3>& v) { return v[0] * (1.0 + v[2]) + v[1]; });
}

void add(const Tensor& a, const Tensor& b, Tensor& y) {
  broadcast_map<2>("add", {&a, &b}, y, [](const std::array<double, 2>& v) { return v[0] + v[1]; });
}

void mul(const Tensor& a, const Tensor& b, Tensor& y) {
  broadcast_map<2>("mul", {&a, &b}, y, [](const std::array<double, 2>& v) { return v[0] * v[1]; });
}

void mul_add(const Tensor& a, const Tensor& b, const Tensor& c, Tensor& y) {
  broadcast_map<3>("mul_add", {&a, &b, &c}, y,
                   [](const std::array<double, 3>& v) { return v[0] + v[1] * v[2]; });
}

void affine(const Tensor& x, float alpha, float beta, Tensor& y) {
  check_same_shape(x, y, "affine");
  const double a = alpha, b = beta;
  broadcast_map<1>("affine", {&x}, y,
                   [a, b](const std::array<double, 1>& v) { return v[0] * a + b; });
}

void softmax(const Tensor& x, Tensor& y) {
  check_same_shape(x, y, "softmax");
  check_float(x, "softmax");
  check_float(y, "softmax");
  FLICK_CHECK(x.ndim() >= 1, "softmax: needs at least one dim");
  const Shape rows = detail::outer_shape(x.shape);
  const int64_t n = x.dim(-1);
  const int64_t sx = x.stride(-1), sy = y.stride(-1);
  std::vector<double> e(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows.numel(); ++r) {
    const int64_t ox = offset_of(r, rows, x.strides), oy = offset_of(r, rows, y.strides);
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < n; ++i) m = std::max(m, load(x, ox + i * sx));
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      e[static_cast<size_t>(i)] = std::exp(load(x, ox + i * sx) - m);
      sum += e[static_cast<size_t>(i)];
    }
    for (int64_t i = 0; i < n; ++i) store(y, oy + i * sy, e[static_cast<size_t>(i)] / sum);
  }
}

void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) {
  check_same_shape(x, y, "rope");
  check_float(x, "rope");
  check_float(y, "rope");
  FLICK_CHECK(x.ndim() == 4, "rope: x must be [B, L, H, D], got " + x.str());
  const int64_t B = x.dim(0), L = x.dim(1), H = x.dim(2), D = x.dim(3);
  FLICK_CHECK(D % 2 == 0, "rope: odd head dim " + std::to_string(D));
  const Shape cs{L, D / 2};
  FLICK_CHECK(
      cos.dtype == DType::F32 && sin.dtype == DType::F32 && cos.shape == cs && sin.shape == cs,
      "rope: cos/sin must be F32 " + cs.str() + ", got " + cos.str() + ", " + sin.str());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          const double c = *static_cast<const float*>(cos.at({l, i}));
          const double s = *static_cast<const float*>(sin.at({l, i}));
          const int64_t ox = b * x.stride(0) + l * x.stride(1) + h * x.stride(2);
          const int64_t oy = b * y.stride(0) + l * y.stride(1) + h * y.stride(2);
          const double x0 = load(x, ox + 2 * i * x.stride(3));
          const double x1 = load(x, ox + (2 * i + 1) * x.stride(3));
          store(y, oy + 2 * i * y.stride(3), x0 * c - x1 * s);
          store(y, oy + (2 * i + 1) * y.stride(3), x0 * s + x1 * c);
        }
}

}  // namespace flick::ref
