// Helpers shared by the convolution op tests (test_conv.cpp, test_conv_int8.cpp):
// a case's geometry, its descriptors and shapes, strided element access and
// channels-last views.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace flick::test {

struct ConvCase {
  int sd;                                          // spatial dims
  int64_t n, c, o;                                 // batch, in and out channels
  std::array<int64_t, 3> in, k, stride, pad, dil;  // per spatial dim, first sd used
  int64_t groups = 1;
  std::string name;
};

inline Shape nc_shape(int64_t n, int64_t c, const std::array<int64_t, 3>& sp, int sd) {
  std::vector<int64_t> d{n, c};
  for (int i = 0; i < sd; ++i) d.push_back(sp[static_cast<size_t>(i)]);
  return Shape::from_vector(d);
}

inline std::array<int64_t, 3> out_size(const ConvCase& c) {
  std::array<int64_t, 3> o{1, 1, 1};
  for (size_t i = 0; i < static_cast<size_t>(c.sd); ++i)
    o[i] = (c.in[i] + 2 * c.pad[i] - c.dil[i] * (c.k[i] - 1) - 1) / c.stride[i] + 1;
  return o;
}

inline ConvDesc make_desc(const ConvCase& c, const Tensor& w, const Tensor& bias, Precision p) {
  ConvDesc d;
  d.w = w;
  d.bias = bias;
  d.spatial_dims = c.sd;
  d.stride = c.stride;
  d.padding = c.pad;
  d.dilation = c.dil;
  d.groups = c.groups;
  d.precision = p;
  return d;
}

// The element offset of logical (row-major) index i of t, whatever its strides.
inline int64_t offset(const Tensor& t, int64_t i) {
  int64_t off = 0;
  for (int d = t.ndim() - 1; d >= 0; --d) {
    off += (i % t.dim(d)) * t.stride(d);
    i /= t.dim(d);
  }
  return off;
}

// Element i of t in logical order, as fp32.
inline float flat(const Tensor& t, int64_t i) { return load_as_f32(t.dtype, t.data, offset(t, i)); }

// A channels-last buffer viewed as [N, C, spatial...].
struct ChannelsLast {
  OwnedTensor buf;
  Tensor view;
  ChannelsLast(DType dt, const Shape& nc) {
    std::vector<int64_t> d{nc[0]};
    for (int i = 2; i < nc.ndim; ++i) d.push_back(nc[i]);
    d.push_back(nc[1]);
    buf = OwnedTensor(dt, Shape::from_vector(d));
    view = buf.t;
    view.shape = nc;
    // dims of buf: [N, sp..., C] -> view dims [N, C, sp...]
    view.strides[0] = buf.t.stride(0);
    view.strides[1] = 1;
    for (int i = 2; i < nc.ndim; ++i) view.strides[static_cast<size_t>(i)] = buf.t.stride(i - 1);
  }
};

}  // namespace flick::test
