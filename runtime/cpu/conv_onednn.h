// What the oneDNN convolutions of the CPU backend (conv.cpp: f32 / bf16 /
// fp8, conv_int8.cpp: int8) share: tensor dims and strides as oneDNN dims,
// the weight dims in oneDNN's (g)oi(d)hw order, the representative
// channels-last shapes weights are packed for, and the stride / dilation /
// padding vectors of a ConvDesc.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "runtime/backend.h"
#include "runtime/tensor.h"

namespace flick::cpu {

dnnl::memory::dims dims_of(const Tensor& t);
dnnl::memory::dims strides_of(const Tensor& t);

// [N, C, spatial...] dense with C innermost, then W, H, D, N.
bool channels_last(const Tensor& t);

// [O, I/g, k...] or, grouped, [g, O/g, I/g, k...] (oneDNN's goihw order).
dnnl::memory::dims conv_weight_dims(const ConvDesc& d);
// The plain (dense, row-major) format tag of weights with those dims.
dnnl::memory::format_tag plain_weight_tag(const dnnl::memory::dims& weight_dims);

// The channels-last input and output dims weights are packed for: 16
// outputs along H and W, 2 along D, the layout models keep activations in.
// The weight layout depends on channels, kernel, ISA and activation layout;
// a call whose best implementation wants another gets its own copy.
struct ConvPackShapes {
  dnnl::memory::dims x, y;
  dnnl::memory::format_tag channels_last;
};
ConvPackShapes conv_pack_shapes(const ConvDesc& d);

// Strides, dilations (oneDNN counts from 0) and symmetric padding.
struct ConvGeometry {
  dnnl::memory::dims strides, dilation, padding;
};
ConvGeometry conv_geometry(const ConvDesc& d);

}  // namespace flick::cpu
