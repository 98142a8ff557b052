// Reference data movement (copy, concat) and reductions, element by element.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "runtime/ref/data_iter.h"
#include "runtime/ref/ops.h"

namespace flick::ref {

void copy(const Tensor& x, Tensor& y) {
  FLICK_CHECK(x.shape == y.shape, "copy: " + x.str() + " -> " + y.str());
  const int64_t n = y.numel();
  const int64_t es = static_cast<int64_t>(dtype_size(x.dtype));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t ox = detail::offset_of(i, x.shape, x.strides);
    const int64_t oy = detail::offset_of(i, y.shape, y.strides);
    if (x.dtype == y.dtype) {
      std::memcpy(static_cast<char*>(y.data) + oy * es, static_cast<const char*>(x.data) + ox * es,
                  static_cast<size_t>(es));
    } else {
      store_from_f32(y.dtype, y.data, oy, load_as_f32(x.dtype, x.data, ox));
    }
  }
}

void concat_with(std::span<const Tensor> xs, int dim, Tensor& y,
                 void (*copy_part)(const Tensor& x, Tensor& y)) {
  FLICK_CHECK(!xs.empty(), "concat: no inputs");
  if (dim < 0) dim += y.ndim();
  FLICK_CHECK(dim >= 0 && dim < y.ndim(), "concat: dim out of range for " + y.str());
  int64_t offset = 0;
  for (const Tensor& x : xs) {
    FLICK_CHECK(x.ndim() == y.ndim(), "concat: " + x.str() + " into " + y.str());
    for (int d = 0; d < y.ndim(); ++d)
      FLICK_CHECK(d == dim || x.dim(d) == y.dim(d), "concat: " + x.str() + " into " + y.str());
    FLICK_CHECK(offset + x.dim(dim) <= y.dim(dim), "concat: inputs overflow " + y.str());
    Tensor part = y.slice(dim, offset, x.dim(dim));
    copy_part(x, part);
    offset += x.dim(dim);
  }
  FLICK_CHECK(offset == y.dim(dim), "concat: inputs do not fill " + y.str());
}

void concat(std::span<const Tensor> xs, int dim, Tensor& y) { concat_with(xs, dim, y, copy); }

void reduce(const Tensor& x, int dim, ReduceOp op, Tensor& y) {
  if (dim < 0) dim += x.ndim();
  FLICK_CHECK(dim >= 0 && dim < x.ndim(), "reduce: dim out of range for " + x.str());
  FLICK_CHECK(detail::is_float(x.dtype) && detail::is_float(y.dtype),
              "reduce: float tensors expected, got " + x.str() + " -> " + y.str());
  Shape expect = x.shape;
  expect[dim] = 1;
  FLICK_CHECK(y.shape == expect, "reduce: " + x.str() + " over dim " + std::to_string(dim) +
                                     " must give " + expect.str() + ", got " + y.str());
  const int64_t n = x.dim(dim);
  FLICK_CHECK(n > 0 || op == ReduceOp::Sum, "reduce: max/min/mean of an empty dim");
  const int64_t sd = x.stride(dim);
  for (int64_t i = 0; i < y.numel(); ++i) {
    const int64_t ox = detail::offset_of(i, y.shape, x.strides);  // dim has index 0
    double acc = op == ReduceOp::Max   ? -std::numeric_limits<double>::infinity()
                 : op == ReduceOp::Min ? std::numeric_limits<double>::infinity()
                                       : 0.0;
    bool nan = false;
    for (int64_t k = 0; k < n; ++k) {
      const double v = load_as_f32(x.dtype, x.data, ox + k * sd);
      nan |= std::isnan(v);
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Mean: acc += v; break;
        case ReduceOp::Max: acc = std::max(acc, v); break;
        case ReduceOp::Min: acc = std::min(acc, v); break;
      }
    }
    if (op == ReduceOp::Mean) acc /= static_cast<double>(n);
    if (nan) acc = std::numeric_limits<double>::quiet_NaN();  // torch propagates NaN
    store_from_f32(y.dtype, y.data, detail::offset_of(i, y.shape, y.strides),
                   static_cast<float>(acc));
  }
}

}  // namespace flick::ref
