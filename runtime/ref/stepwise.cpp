// Reference of the ops that evaluate a PyTorch op chain with the chain's own
// rounding points (rope_3d, rope_unfused, rms_norm_stepwise,
// mul_add_stepwise, normalize_l2, softmax_parts): one element at a time, each
// intermediate rounded exactly where the reference module rounds it. Built
// with -ffp-contract=off (runtime/CMakeLists.txt): a fused multiply-add would
// skip a rounding the reference does.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/ref/data_iter.h"
#include "runtime/ref/ops.h"

namespace flick::ref {
namespace {

using detail::broadcast_strides;
using detail::offset_of;
using detail::Strides;

float load(const Tensor& t, int64_t off) { return load_as_f32(t.dtype, t.data, off); }
void store(const Tensor& t, int64_t off, float v) { store_from_f32(t.dtype, t.data, off, v); }

// v rounded to dtype t (F32: v itself), as a PyTorch op on a tensor of t
// rounds its result.
float round_to(DType t, float v) {
  if (t == DType::F32) return v;
  uint32_t buf = 0;
  store_from_f32(t, &buf, 0, v);
  return load_as_f32(t, &buf, 0);
}

void check_float(const Tensor& t, const char* op) {
  FLICK_CHECK(t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::F16,
              std::string(op) + ": expected an F32/BF16/F16 tensor, got " + t.str());
}

// Offset of element i of the last dim of row `row` (row-major over the other dims).
int64_t row_offset(const Tensor& t, int64_t row) {
  return offset_of(row, detail::outer_shape(t.shape), t.strides);
}

double silu(double v) { return v / (1.0 + std::exp(-v)); }

}  // namespace

void rope_3d(const Tensor& x, const Rope3dParams& p, Tensor& y) {
  check_float(x, "rope_3d");
  check_float(y, "rope_3d");
  const int pairs = p.pairs[0] + p.pairs[1] + p.pairs[2];
  const int64_t tokens = p.grid[0] * p.grid[1] * p.grid[2];
  FLICK_CHECK(x.shape == y.shape && x.ndim() == 3 && x.dim(0) == tokens && x.dim(2) == 2 * pairs,
              "rope_3d: x " + x.str() + " y " + y.str() + " for a grid of " +
                  std::to_string(tokens) + " tokens and " + std::to_string(pairs) + " pairs");
  for (int64_t tok = 0; tok < tokens; ++tok) {
    const int64_t coord[3] = {tok / (p.grid[1] * p.grid[2]), tok / p.grid[2] % p.grid[1],
                              tok % p.grid[2]};
    for (int64_t h = 0; h < x.dim(1); ++h) {
      const int64_t ox = tok * x.stride(0) + h * x.stride(1);
      const int64_t oy = tok * y.stride(0) + h * y.stride(1);
      int pair = 0;
      for (int axis = 0; axis < 3; ++axis) {
        const int n = p.pairs[static_cast<size_t>(axis)];
        const double pos = static_cast<double>(p.start[static_cast<size_t>(axis)] + coord[axis]);
        for (int j = 0; j < n; ++j, ++pair) {
          // rope_params: 1 / theta^(arange(0, d, 2) / d) with d = 2n, in f64.
          const double inv_freq = 1.0 / std::pow(p.theta, static_cast<double>(2 * j) / (2 * n));
          const double c = std::cos(pos * inv_freq), s = std::sin(pos * inv_freq);
          const double a = load(x, ox + 2 * pair * x.stride(2));
          const double b = load(x, ox + (2 * pair + 1) * x.stride(2));
          // complex128 (a + bi)(c + si), rounded to fp32 and then to y's dtype.
          const double re = a * c - b * s, im = b * c + a * s;
          store(y, oy + 2 * pair * y.stride(2), static_cast<float>(re));
          store(y, oy + (2 * pair + 1) * y.stride(2), static_cast<float>(im));
        }
      }
    }
  }
}

void rope_unfused(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) {
  check_float(x, "rope_unfused");
  check_float(y, "rope_unfused");
  FLICK_CHECK(x.ndim() == 4 && x.shape == y.shape && x.dim(3) % 2 == 0,
              "rope_unfused: x and y must be [B, L, H, D], got " + x.str() + " -> " + y.str());
  const int64_t B = x.dim(0), L = x.dim(1), H = x.dim(2), D = x.dim(3);
  const Shape cs{L, D / 2};
  FLICK_CHECK(
      cos.dtype == DType::F32 && sin.dtype == DType::F32 && cos.shape == cs && sin.shape == cs,
      "rope_unfused: cos/sin must be F32 " + cs.str() + ", got " + cos.str() + ", " + sin.str());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          const float c = *static_cast<const float*>(cos.at({l, i}));
          const float s = *static_cast<const float*>(sin.at({l, i}));
          const int64_t ox = b * x.stride(0) + l * x.stride(1) + h * x.stride(2);
          const int64_t oy = b * y.stride(0) + l * y.stride(1) + h * y.stride(2);
          const float x0 = load(x, ox + 2 * i * x.stride(3));
          const float x1 = load(x, ox + (2 * i + 1) * x.stride(3));
          // x * cos + rotate(x) * sin, rotate(x0, x1) = (-x1, x0): fp32 ops.
          const float p0 = x0 * c, q0 = x1 * s, p1 = x1 * c, q1 = x0 * s;
          store(y, oy + 2 * i * y.stride(3), p0 - q0);
          store(y, oy + (2 * i + 1) * y.stride(3), p1 + q1);
        }
}

void rms_norm_stepwise(const Tensor& x, float eps, Tensor& y) {
  check_float(x, "rms_norm_stepwise");
  FLICK_CHECK(x.shape == y.shape && x.dtype == y.dtype && x.ndim() >= 1,
              "rms_norm_stepwise: x " + x.str() + " y " + y.str());
  const DType t = y.dtype;
  const int64_t dim = x.dim(-1), rows = x.numel() / dim;
  std::vector<float> v(static_cast<size_t>(dim));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t ox = row_offset(x, r), oy = row_offset(y, r);
    for (int64_t d = 0; d < dim; ++d) v[static_cast<size_t>(d)] = load(x, ox + d * x.stride(-1));
    // x.pow(2) rounds each square; mean accumulates in fp32 (in order) and
    // rounds once; + eps rounds; rsqrt on a bf16 tensor is 1 / sqrt with the
    // root rounded first (c10::BFloat16 arithmetic); the product rounds.
    float sum = 0.f;
    for (float e : v) sum += round_to(t, e * e);
    const float mean = round_to(t, sum / static_cast<float>(dim));
    const float inv = round_to(t, 1.f / round_to(t, std::sqrt(round_to(t, mean + eps))));
    for (int64_t d = 0; d < dim; ++d)
      store(y, oy + d * y.stride(-1), v[static_cast<size_t>(d)] * inv);
  }
}

void mul_add_stepwise(const Tensor& a, const Tensor& b, const Tensor& c, Tensor& y) {
  for (const Tensor* t : {&a, &b, &c, static_cast<const Tensor*>(&y)})
    check_float(*t, "mul_add_stepwise");
  const Strides sa = broadcast_strides(a, y.shape, "mul_add_stepwise");
  const Strides sb = broadcast_strides(b, y.shape, "mul_add_stepwise");
  const Strides sc = broadcast_strides(c, y.shape, "mul_add_stepwise");
  const int64_t n = y.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float prod =
        round_to(y.dtype, load(b, offset_of(i, y.shape, sb)) * load(c, offset_of(i, y.shape, sc)));
    store(y, offset_of(i, y.shape, y.strides), load(a, offset_of(i, y.shape, sa)) + prod);
  }
}

void normalize_l2(const Tensor& x, const Tensor& gamma, float scale, NormRounding rounding,
                  Activation act, Tensor& y) {
  FLICK_CHECK((x.dtype == DType::F32 || x.dtype == DType::BF16) && x.shape == y.shape &&
                  x.dtype == y.dtype && x.ndim() >= 1,
              "normalize_l2: x " + x.str() + " y " + y.str());
  FLICK_CHECK(act == Activation::None || act == Activation::Silu,
              "normalize_l2: activation None or Silu");
  const int64_t c = x.dim(-1), rows = x.numel() / c;
  FLICK_CHECK(gamma.dtype == DType::F32 && gamma.shape == Shape{c},
              "normalize_l2: gamma must be F32 [" + std::to_string(c) + "], got " + gamma.str());
  const DType t = y.dtype;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t ox = row_offset(x, r), oy = row_offset(y, r);
    // |x| accumulated in double, rounded to fp32 (torch reduces in fp32 and,
    // for bf16, rounds the norm to bf16 before dividing).
    double sq = 0;
    for (int64_t j = 0; j < c; ++j) {
      const double v = load(x, ox + j * x.stride(-1));
      sq += v * v;
    }
    float norm = static_cast<float>(std::sqrt(sq));
    if (rounding == NormRounding::PerOp) norm = round_to(t, norm);
    norm = std::max(norm, 1e-12f);
    for (int64_t j = 0; j < c; ++j) {
      const float v = load(x, ox + j * x.stride(-1));
      const float g = *static_cast<const float*>(gamma.at({j}));
      double q;
      if (rounding == NormRounding::PerOp) {
        // x / |x|, * scale, * gamma, each a tensor op rounded to t.
        q = round_to(t, round_to(t, round_to(t, v / norm) * scale) * g);
        if (act == Activation::Silu) q = silu(q);
      } else {
        q = static_cast<double>(v) / norm * scale * g;
        if (act == Activation::Silu) q = silu(q);
      }
      store(y, oy + j * y.stride(-1), static_cast<float>(q));
    }
  }
}

void softmax_parts(const Tensor& x, float scale, Tensor& p, Tensor& inv_sum) {
  FLICK_CHECK(x.dtype == DType::F32 && x.ndim() >= 1 && x.shape == p.shape &&
                  (p.dtype == DType::F32 || p.dtype == DType::BF16),
              "softmax_parts: x " + x.str() + " p " + p.str());
  const Shape rows_shape = detail::outer_shape(x.shape);
  FLICK_CHECK(inv_sum.dtype == DType::F32 && inv_sum.is_contiguous() &&
                  inv_sum.numel() == rows_shape.numel(),
              "softmax_parts: inv_sum " + inv_sum.str() + " for rows " + rows_shape.str());
  const int64_t n = x.dim(-1), rows = rows_shape.numel();
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t ox = row_offset(x, r), op = row_offset(p, r);
    float m = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      v[static_cast<size_t>(j)] = load(x, ox + j * x.stride(-1)) * scale;  // fp32, as s * scale
      m = std::max(m, v[static_cast<size_t>(j)]);
    }
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double e = std::exp(static_cast<double>(v[static_cast<size_t>(j)] - m));
      sum += e;
      store(p, op + j * p.stride(-1), static_cast<float>(e));
    }
    inv_sum.ptr<float>()[r] = 1.f / static_cast<float>(sum);
  }
}

}  // namespace flick::ref
