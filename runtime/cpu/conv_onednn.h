// What the oneDNN convolutions of the CPU backend (conv.cpp: f32 / bf16 /
// fp8, conv_int8.cpp: int8) share: tensor dims and strides as oneDNN dims,
// the weight dims in oneDNN's (g)oi(d)hw order, the representative
// channels-last shapes weights are packed for, and the stride / dilation /
// padding vectors of a ConvDesc.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>

#include "runtime/backend.h"
#include "runtime/cpu/onednn_util.h"
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

// The primitive a call runs on the weights packed at load (layout `packed`):
// `best` itself when it takes that layout, else the same implementation
// built for it (`for_packed(packed)`, empty when oneDNN has none); empty
// when the call's best implementation needs its own copy of the weights.
template <class ForPacked>
std::optional<dnnl::convolution_forward::primitive_desc> pd_on_packed_weights(
    const dnnl::convolution_forward::primitive_desc& best, const dnnl::memory::desc& packed,
    ForPacked&& for_packed) {
  if (best.weights_desc() == packed) return best;
  std::optional<dnnl::convolution_forward::primitive_desc> fixed = for_packed(packed);
  if (fixed && std::string(fixed->impl_info_str()) == best.impl_info_str()) return fixed;
  return std::nullopt;
}

// The output side of a planned call: the primitive writes y in place when
// its dst layout is y's, else into a CallBuffers staging buffer that is
// reordered into y after it ran.
class ConvDst {
 public:
  ConvDst() = default;
  // pd_dst: the primitive's dst; y: the caller's output as laid out.
  ConvDst(const dnnl::memory::desc& pd_dst, const dnnl::memory::desc& y);
  // The primitive's DNNL_ARG_DST.
  const dnnl::memory& arg() const { return dst_; }
  // Before the primitive runs: points its dst at y or at the staging buffer.
  void bind(CallBuffers& buf, void* y);
  // After it ran: the staged output into y (nothing when direct).
  void finish(dnnl::stream& s);

 private:
  dnnl::memory dst_, y_mem_;
  bool direct_ = false;
  size_t staging_bytes_ = 0;
  void* staging_ = nullptr;
  std::optional<ReorderChain> to_y_;
};

}  // namespace flick::cpu
