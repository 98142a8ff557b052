// Index arithmetic over strided views, shared by the reference ops and the
// CPU ops' strided fallbacks: PyTorch broadcasting and multi-index walking.
#pragma once

#include <array>
#include <cstdint>

#include "runtime/tensor.h"

namespace flick::detail {

using Strides = std::array<int64_t, kMaxDims>;

// Strides of x read as an operand of shape `out` under PyTorch broadcasting
// (dims aligned at the end; a dim of size 1 or a missing dim repeats): 0 where
// x repeats. Aborts if x does not broadcast to `out`.
inline Strides broadcast_strides(const Tensor& x, const Shape& out, const char* op) {
  FLICK_CHECK(x.ndim() <= out.ndim,
              std::string(op) + ": " + x.str() + " has more dims than the output " + out.str());
  Strides s{};
  const int lead = out.ndim - x.ndim();
  for (int d = 0; d < out.ndim; ++d) {
    const int xd = d - lead;
    if (xd < 0) continue;
    if (x.dim(xd) == out[d]) {
      s[static_cast<size_t>(d)] = out[d] == 1 ? 0 : x.stride(xd);
    } else {
      FLICK_CHECK(x.dim(xd) == 1,
                  std::string(op) + ": " + x.str() + " does not broadcast to " + out.str());
    }
  }
  return s;
}

// Offset (in elements) of the element with row-major linear index i of
// `shape` in a view with `strides`.
inline int64_t offset_of(int64_t i, const Shape& shape, const Strides& strides) {
  int64_t off = 0;
  for (int d = shape.ndim - 1; d >= 0; --d) {
    const int64_t n = shape[d];
    off += (i % n) * strides[static_cast<size_t>(d)];
    i /= n;
  }
  return off;
}

// The shape of x with the last dim removed: the "rows" a last-dim op walks.
inline Shape outer_shape(const Shape& s) {
  Shape o = s;
  o.ndim = s.ndim - 1;
  return o;
}

inline bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

}  // namespace flick::detail
