// CPU copy (any strided view, with dtype conversion), concat and reductions.
#include <algorithm>
#include <cstring>
#include <string>

#include "runtime/cpu/eltwise_runs.h"
#include "runtime/cpu/ops.h"
#include "runtime/ref/ops.h"

namespace flick::cpu {
namespace {

using detail::Strides;

char* byte_ptr(const Tensor& t, int64_t off) {
  return static_cast<char*>(t.data) + off * static_cast<int64_t>(dtype_size(t.dtype));
}

template <class T>
void strided_move(const Tensor& x, int64_t ox, int64_t sx, const Tensor& y, int64_t oy, int64_t sy,
                  int64_t n) {
  const T* src = reinterpret_cast<const T*>(byte_ptr(x, ox));
  T* dst = reinterpret_cast<T*>(byte_ptr(y, oy));
  for (int64_t i = 0; i < n; ++i) dst[i * sy] = src[i * sx];
}

// An [na, nb] tile (na, nb <= kTile) of same-size elements,
// dst[a * da + b * db] = src[a * sa + b * sb], staged through a local buffer:
// read along a (x's unit-stride dim), written along b (y's inner dim), so
// both sides stream whole cache lines whatever the strides alias to.
constexpr int64_t kTile = 32;
template <class T>
void move_tile(const Tensor& x, int64_t ox, int64_t sa, int64_t sb, const Tensor& y, int64_t oy,
               int64_t da, int64_t db, int64_t na, int64_t nb) {
  const T* src = reinterpret_cast<const T*>(byte_ptr(x, ox));
  T* dst = reinterpret_cast<T*>(byte_ptr(y, oy));
  T buf[kTile][kTile];
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t a = 0; a < na; ++a) buf[b][a] = src[a * sa + b * sb];
  for (int64_t a = 0; a < na; ++a)
    for (int64_t b = 0; b < nb; ++b) dst[a * da + b * db] = buf[b][a];
}

// n elements from x (offset ox, stride sx) to y, converting dtype.
void copy_run(const EltwiseKernels& k, const Tensor& x, int64_t ox, int64_t sx, const Tensor& y,
              int64_t oy, int64_t sy, int64_t n) {
  if (x.dtype == y.dtype) {
    if (sx == 1 && sy == 1) {
      std::memmove(byte_ptr(y, oy), byte_ptr(x, ox), static_cast<size_t>(n) * dtype_size(x.dtype));
      return;
    }
    switch (dtype_size(x.dtype)) {
      case 1: strided_move<uint8_t>(x, ox, sx, y, oy, sy, n); return;
      case 2: strided_move<uint16_t>(x, ox, sx, y, oy, sy, n); return;
      default: strided_move<uint32_t>(x, ox, sx, y, oy, sy, n); return;
    }
  }
  if (flick::detail::is_float(x.dtype) && flick::detail::is_float(y.dtype)) {
    const float* v = detail::read_f32(k, x, ox, sx, n, 0);
    float* out = detail::out_f32(y, oy, sy, n, 1);
    if (out != v) std::memcpy(out, v, static_cast<size_t>(n) * sizeof(float));
    detail::write_f32(k, y, oy, sy, n, out);
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    store_from_f32(y.dtype, y.data, oy + i * sy, load_as_f32(x.dtype, x.data, ox + i * sx));
}

}  // namespace

void copy(const Tensor& x, Tensor& y) {
  FLICK_CHECK(x.shape == y.shape, "copy: " + x.str() + " -> " + y.str());
  if (y.numel() == 0) return;
  const auto c = detail::collapse<2>(y.shape, {y.strides, x.strides});
  const int last = c.shape.ndim - 1;
  const auto& sy = c.strides[0];
  const auto& sx = c.strides[1];
  const EltwiseKernels& k = eltwise_kernels();
  // A transposed layout (x's unit-stride dim is not y's inner dim) is copied
  // in square tiles, so reads and writes both stay within a few cache lines.
  int tdim = -1;
  for (int d = 0; d < last; ++d)
    if (sx[static_cast<size_t>(d)] == 1 && sx[static_cast<size_t>(last)] != 1) tdim = d;
  Shape outer = c.shape;
  const int64_t inner = c.shape[last];
  if (tdim < 0) {
    outer.ndim = last;
    const int64_t runs = (inner + detail::kRun - 1) / detail::kRun;
    parallel_for(
        outer.numel() * runs,
        [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const int64_t row = r / runs, start = r % runs * detail::kRun;
            const int64_t n = std::min(detail::kRun, inner - start);
            copy_run(k, x, flick::detail::offset_of(row, outer, sx) + start * sx[last], sx[last], y,
                     flick::detail::offset_of(row, outer, sy) + start * sy[last], sy[last], n);
          }
        },
        std::max<int64_t>(1, 16384 / std::min(inner, detail::kRun)));
    return;
  }
  const int64_t na = c.shape[tdim];
  outer[tdim] = 1;  // the tile loops walk tdim and the inner dim
  outer.ndim = last;
  const int64_t ta = (na + kTile - 1) / kTile, tb = (inner + kTile - 1) / kTile;
  parallel_for(
      outer.numel() * ta * tb,
      [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const int64_t row = t / (ta * tb), a0 = t / tb % ta * kTile, b0 = t % tb * kTile;
          const int64_t ox = flick::detail::offset_of(row, outer, sx);
          const int64_t oy = flick::detail::offset_of(row, outer, sy);
          const int64_t nb = std::min(kTile, inner - b0), nt = std::min(kTile, na - a0);
          const int64_t xa = sx[static_cast<size_t>(tdim)], ya = sy[static_cast<size_t>(tdim)];
          const int64_t xo = ox + a0 * xa + b0 * sx[last], yo = oy + a0 * ya + b0 * sy[last];
          if (x.dtype == y.dtype) {
            switch (dtype_size(x.dtype)) {
              case 1: move_tile<uint8_t>(x, xo, xa, sx[last], y, yo, ya, sy[last], nt, nb); break;
              case 2: move_tile<uint16_t>(x, xo, xa, sx[last], y, yo, ya, sy[last], nt, nb); break;
              default: move_tile<uint32_t>(x, xo, xa, sx[last], y, yo, ya, sy[last], nt, nb);
            }
            continue;
          }
          for (int64_t a = 0; a < nt; ++a)
            copy_run(k, x, xo + a * xa, sx[last], y, yo + a * ya, sy[last], nb);
        }
      },
      16384 / (kTile * kTile));
}

void concat(std::span<const Tensor> xs, int dim, Tensor& y) { ref::concat_with(xs, dim, y, copy); }

void reduce(const Tensor& x, int dim, ReduceOp op, Tensor& y) {
  if (dim < 0) dim += x.ndim();
  FLICK_CHECK(dim >= 0 && dim < x.ndim(), "reduce: dim out of range for " + x.str());
  detail::check_float(x, "reduce");
  detail::check_float(y, "reduce");
  Shape expect = x.shape;
  expect[dim] = 1;
  FLICK_CHECK(y.shape == expect, "reduce: " + x.str() + " over dim " + std::to_string(dim) +
                                     " must give " + expect.str() + ", got " + y.str());
  const int64_t n = x.dim(dim);
  if (!x.is_contiguous() || !y.is_contiguous() || n == 0) {
    ref::reduce(x, dim, op, y);  // strided layouts: the oracle's loop
    return;
  }
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= x.dim(d);
  for (int d = dim + 1; d < x.ndim(); ++d) inner *= x.dim(d);
  const EltwiseKernels& k = eltwise_kernels();
  const ReduceKind kind = op == ReduceOp::Max   ? ReduceKind::Max
                          : op == ReduceOp::Min ? ReduceKind::Min
                                                : ReduceKind::Sum;
  const double div = op == ReduceOp::Mean ? static_cast<double>(n) : 1.0;
  if (inner == 1) {  // rows of n contiguous elements
    parallel_for(
        outer,
        [&](int64_t begin, int64_t end) {
          for (int64_t o = begin; o < end; ++o) {
            const float* row = detail::read_f32(k, x, o * n, 1, n, 0);
            const double v = kind == ReduceKind::Max   ? k.max(row, n)
                             : kind == ReduceKind::Min ? k.min(row, n)
                                                       : k.sum(row, n) / div;
            store_from_f32(y.dtype, y.data, o, static_cast<float>(v));
          }
        },
        std::max<int64_t>(1, 16384 / n));
    return;
  }
  // y[o, i] = reduce_j x[o, j, i]: whole rows of i accumulated in fp32,
  // flushed into a second fp32 total every kFlush rows to bound the error.
  constexpr int64_t kFlush = 64;
  const int64_t runs = (inner + detail::kRun - 1) / detail::kRun;
  parallel_for(
      outer * runs,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const int64_t o = r / runs, i0 = r % runs * detail::kRun;
          const int64_t m = std::min(detail::kRun, inner - i0);
          float* total = detail::scratch(2, m);
          float* part = detail::scratch(3, m);
          for (int64_t j0 = 0; j0 < n; j0 += kFlush) {
            const float* first = detail::read_f32(k, x, (o * n + j0) * inner + i0, 1, m, 0);
            std::memcpy(part, first, static_cast<size_t>(m) * sizeof(float));
            for (int64_t j = j0 + 1; j < std::min(n, j0 + kFlush); ++j)
              k.accumulate(part, detail::read_f32(k, x, (o * n + j) * inner + i0, 1, m, 0), m,
                           kind);
            if (j0 == 0) {
              std::memcpy(total, part, static_cast<size_t>(m) * sizeof(float));
            } else {
              k.accumulate(total, part, m, kind);
            }
          }
          if (div != 1.0) {
            const float inv = static_cast<float>(1.0 / div), zero = 0.f;
            k.fma(total, true, &inv, false, &zero, false, total, m);
          }
          float* out = detail::out_f32(y, o * inner + i0, 1, m, 1);
          std::memcpy(out, total, static_cast<size_t>(m) * sizeof(float));
          detail::write_f32(k, y, o * inner + i0, 1, m, out);
        }
      },
      std::max<int64_t>(1, 16384 / (n * std::min(inner, detail::kRun))));
}

}  // namespace flick::cpu
