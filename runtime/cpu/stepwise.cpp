// The CPU backend's stepwise ops (backend.h: rope_3d, rope_unfused,
// rms_norm_stepwise, mul_add_stepwise): the BF16 layouts the Wan DiT and its
// action module run, threaded, on the row kernels of stepwise_kernels.h
// (AVX-512 where the CPU has it, the bit-identical scalar ones otherwise).
// Any other dtype or layout runs the reference op (correct, slow; no model
// sends one). Built with -ffp-contract=off: the kernels round each product
// and sum separately, as the reference modules do.
#include <cmath>
#include <string>
#include <vector>

#include "runtime/cpu/ops.h"
#include "runtime/cpu/stepwise_kernels.h"
#include "runtime/dtype.h"
#include "runtime/ref/data_iter.h"
#include "runtime/ref/ops.h"
#include "runtime/status.h"
#include "runtime/threads.h"

namespace flick::cpu {
namespace stepwise {

bool has_stepwise_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return yes;
}

void rotate_pairs_bf16_scalar(const uint16_t* x, const double* c, const double* s, int pairs,
                              int64_t rows, uint16_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* xr = x + r * 2 * pairs;
    uint16_t* yr = out + r * 2 * pairs;
    for (int p = 0; p < pairs; ++p) {
      const double a = bf16_to_f32(xr[2 * p]);
      const double b = bf16_to_f32(xr[2 * p + 1]);
      const double ac = a * c[p], bd = b * s[p];
      const double ad = a * s[p], bc = b * c[p];
      yr[2 * p] = f32_to_bf16(static_cast<float>(ac - bd));
      yr[2 * p + 1] = f32_to_bf16(static_cast<float>(bc + ad));
    }
  }
}

void mul_add_row_bf16_scalar(const uint16_t* a, const uint16_t* b, const uint16_t* c, uint16_t* out,
                             int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float t = round_bf16(bf16_to_f32(b[i]) * bf16_to_f32(c[i]));
    out[i] = f32_to_bf16(bf16_to_f32(a[i]) + t);
  }
}

void rms_norm_row_bf16_scalar(const uint16_t* x, int64_t dim, uint16_t* out, float eps) {
  // As ref::rms_norm_stepwise in bf16: rounded squares summed in fp32 in
  // order, the mean, + eps, the root and its reciprocal each rounded.
  float sum = 0.0f;
  for (int64_t d = 0; d < dim; ++d) {
    const float v = bf16_to_f32(x[d]);
    sum += round_bf16(v * v);
  }
  const float mean = round_bf16(sum / static_cast<float>(dim));
  const float inv = round_bf16(1.0f / round_bf16(std::sqrt(round_bf16(mean + eps))));
  for (int64_t d = 0; d < dim; ++d) out[d] = f32_to_bf16(bf16_to_f32(x[d]) * inv);
}

}  // namespace stepwise

namespace {

using namespace stepwise;

bool is_bf16_contiguous(const Tensor& t) { return t.dtype == DType::BF16 && t.is_contiguous(); }

uint16_t* bits(const Tensor& t) { return static_cast<uint16_t*>(t.data); }

// cos / sin [n, pairs] of the pairs of `axis` at positions first ..
// first + n - 1 (the other pairs' entries left 0): ref::rope_3d's f64 angle
// pos * inv_freq and its cos / sin.
void axis_tables(const Rope3dParams& p, int axis, std::vector<double>& cos,
                 std::vector<double>& sin) {
  const int pairs = p.pairs[0] + p.pairs[1] + p.pairs[2];
  const int lo = axis == 0 ? 0 : axis == 1 ? p.pairs[0] : p.pairs[0] + p.pairs[1];
  const int n_axis = p.pairs[static_cast<size_t>(axis)];
  const int64_t n = p.grid[static_cast<size_t>(axis)], first = p.start[static_cast<size_t>(axis)];
  cos.assign(static_cast<size_t>(n * pairs), 0.0);
  sin.assign(cos.size(), 0.0);
  for (int j = 0; j < n_axis; ++j) {
    const double inv_freq = 1.0 / std::pow(p.theta, static_cast<double>(2 * j) / (2 * n_axis));
    for (int64_t i = 0; i < n; ++i) {
      const double a = static_cast<double>(first + i) * inv_freq;
      cos[static_cast<size_t>(i * pairs + lo + j)] = std::cos(a);
      sin[static_cast<size_t>(i * pairs + lo + j)] = std::sin(a);
    }
  }
}

}  // namespace

void rope_3d(const Tensor& x, const Rope3dParams& p, Tensor& y) {
  const int pairs = p.pairs[0] + p.pairs[1] + p.pairs[2];
  const int64_t gh = p.grid[1], gw = p.grid[2], tokens = p.grid[0] * gh * gw;
  FLICK_CHECK(x.shape == y.shape && x.ndim() == 3 && x.dim(0) == tokens && x.dim(2) == 2 * pairs,
              "rope_3d: x " + x.str() + " y " + y.str() + " for a grid of " +
                  std::to_string(tokens) + " tokens and " + std::to_string(pairs) + " pairs");
  if (!is_bf16_contiguous(x) || !is_bf16_contiguous(y)) return ref::rope_3d(x, p, y);
  // A token's angles depend on one axis position per pair block, so the
  // cos/sin of every token come from three small per-axis tables.
  std::vector<double> ct, st, ch, sh, cw, sw;
  axis_tables(p, 0, ct, st);
  axis_tables(p, 1, ch, sh);
  axis_tables(p, 2, cw, sw);
  const int hb = p.pairs[0], wb = p.pairs[0] + p.pairs[1];
  const int64_t heads = x.dim(1);
  const auto rotate = has_stepwise_avx512() ? rotate_pairs_bf16_avx512 : rotate_pairs_bf16_scalar;
  parallel_for(
      tokens,
      [&](int64_t begin, int64_t end) {
        std::vector<double> c(static_cast<size_t>(pairs)), s(c.size());
        for (int64_t tok = begin; tok < end; ++tok) {
          const int64_t f = tok / (gh * gw), i = tok / gw % gh, j = tok % gw;
          for (int q = 0; q < pairs; ++q) {
            const size_t at = static_cast<size_t>(q < hb   ? f * pairs + q
                                                  : q < wb ? i * pairs + q
                                                           : j * pairs + q);
            const std::vector<double>& cs = q < hb ? ct : q < wb ? ch : cw;
            const std::vector<double>& ss = q < hb ? st : q < wb ? sh : sw;
            c[static_cast<size_t>(q)] = cs[at];
            s[static_cast<size_t>(q)] = ss[at];
          }
          const int64_t base = tok * heads * 2 * pairs;
          rotate(bits(x) + base, c.data(), s.data(), pairs, heads, bits(y) + base);
        }
      },
      /*min_per_thread=*/64);
}

void rope_unfused(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) {
  FLICK_CHECK(x.ndim() == 4 && x.shape == y.shape && x.dim(3) % 2 == 0,
              "rope_unfused: x and y must be [B, L, H, D], got " + x.str() + " -> " + y.str());
  const int64_t L = x.dim(1), H = x.dim(2), D = x.dim(3);
  const Shape cs{L, D / 2};
  FLICK_CHECK(
      cos.dtype == DType::F32 && sin.dtype == DType::F32 && cos.shape == cs && sin.shape == cs,
      "rope_unfused: cos/sin must be F32 " + cs.str() + ", got " + cos.str() + ", " + sin.str());
  if (!is_bf16_contiguous(x) || !is_bf16_contiguous(y) || !cos.is_contiguous() ||
      !sin.is_contiguous())
    return ref::rope_unfused(x, cos, sin, y);
  // One row per (b, l, h), turned by row l of the tables.
  const int64_t rows = x.numel() / D;
  const uint16_t* xb = bits(x);
  uint16_t* yb = bits(y);
  parallel_for(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const float* c = cos.ptr<float>() + r / H % L * (D / 2);
          const float* s = sin.ptr<float>() + r / H % L * (D / 2);
          const uint16_t* xr = xb + r * D;
          uint16_t* yr = yb + r * D;
          for (int64_t i = 0; i < D / 2; ++i) {
            const float x0 = bf16_to_f32(xr[2 * i]), x1 = bf16_to_f32(xr[2 * i + 1]);
            // x * cos + rotate(x) * sin: three separately rounded fp32 ops.
            const float p0 = x0 * c[i], q0 = x1 * s[i], p1 = x1 * c[i], q1 = x0 * s[i];
            yr[2 * i] = f32_to_bf16(p0 - q0);
            yr[2 * i + 1] = f32_to_bf16(p1 + q1);
          }
        }
      },
      /*min_per_thread=*/256);
}

void rms_norm_stepwise(const Tensor& x, float eps, Tensor& y) {
  FLICK_CHECK(x.shape == y.shape && x.dtype == y.dtype && x.ndim() >= 1,
              "rms_norm_stepwise: x " + x.str() + " y " + y.str());
  if (!is_bf16_contiguous(x) || !is_bf16_contiguous(y)) return ref::rms_norm_stepwise(x, eps, y);
  const int64_t dim = x.dim(-1), rows = x.numel() / dim;
  const uint16_t* xb = bits(x);
  uint16_t* yb = bits(y);
  const bool wide = has_stepwise_avx512() && dim % 2 == 0;
  parallel_for(
      rows,
      [&](int64_t begin, int64_t end) {
        int64_t r = begin;
        if (wide)
          for (; r + 16 <= end; r += 16)
            rms_norm_rows16_bf16_avx512(xb + r * dim, dim, yb + r * dim, eps);
        for (; r < end; ++r) rms_norm_row_bf16_scalar(xb + r * dim, dim, yb + r * dim, eps);
      },
      /*min_per_thread=*/256);
}

void mul_add_stepwise(const Tensor& a, const Tensor& b, const Tensor& c, Tensor& y) {
  const int64_t d = y.ndim() > 0 ? y.dim(-1) : 0;
  // The fast layout: all BF16, every operand's last dim y's and unit-stride
  // (other dims may broadcast: the DiT's per-frame [F, 1, D] tables).
  auto rows_fit = [&](const Tensor& t) {
    return t.dtype == DType::BF16 && t.ndim() >= 1 && t.dim(-1) == d && t.stride(-1) == 1;
  };
  if (y.ndim() < 1 || !rows_fit(a) || !rows_fit(b) || !rows_fit(c) || !rows_fit(y))
    return ref::mul_add_stepwise(a, b, c, y);
  using flick::detail::broadcast_strides;
  using flick::detail::offset_of;
  const auto sa = broadcast_strides(a, y.shape, "mul_add_stepwise");
  const auto sb = broadcast_strides(b, y.shape, "mul_add_stepwise");
  const auto sc = broadcast_strides(c, y.shape, "mul_add_stepwise");
  const Shape outer = flick::detail::outer_shape(y.shape);
  const auto row = has_stepwise_avx512() ? mul_add_row_bf16_avx512 : mul_add_row_bf16_scalar;
  parallel_for(
      outer.numel(),
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r)
          row(bits(a) + offset_of(r, outer, sa), bits(b) + offset_of(r, outer, sb),
              bits(c) + offset_of(r, outer, sc), bits(y) + offset_of(r, outer, y.strides), d);
      },
      /*min_per_thread=*/16);
}

}  // namespace flick::cpu
