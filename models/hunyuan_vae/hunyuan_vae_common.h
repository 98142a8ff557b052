// What the components of the HunyuanVideo VAE (diffusers 0.33.1
// AutoencoderKLHunyuanVideo, "AKHV:<line>" below) share: the numerics of a
// run, the tap callback and weight loading.
//
// Activations are plain contiguous NCDHW tensors [1, C, T, H, W] (batch 1):
// the layout GroupNorm's statistics (over C/G channels x T x H x W) and the
// backend's convolutions read without a reorder of their own. Every layer
// returns a freshly allocated output and drops its intermediates, so a pass
// holds at most the block input, one padded copy and two block-sized
// intermediates.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "runtime/backend.h"
#include "runtime/dtype.h"
#include "runtime/status.h"
#include "runtime/tensor.h"
#include "runtime/weights/weight_store.h"

namespace flick::hunyuan_vae {

// How a component's Precision maps onto arithmetic.
//   F32:  fp32 activations and convolutions (parity with the reference's
//         fp32 run).
//   BF16: bf16 activations (each op's output rounded once, as a torch bf16
//         run rounds every op's output), bf16 weights, convolution and
//         attention accumulators fp32, GroupNorm statistics fp32. FramePack
//         runs the VAE in fp16; the backend has no fp16 activations, bf16 is
//         what it convolves fastest.
struct Numerics {
  DType act = DType::F32;
  Precision conv = Precision::F32;
  static Numerics of(Precision p) {
    return p == Precision::BF16 ? Numerics{DType::BF16, Precision::BF16} : Numerics{};
  }
};

// Called with named intermediates (views valid during the call only).
using Tap = std::function<void(std::string_view name, const Tensor& t)>;

inline void tap_if(const Tap& tap, std::string_view name, const Tensor& t) {
  if (tap) tap(name, t);
}

// A weight, bias or norm parameter of any float dtype as fp32 values,
// checked against `shape`.
Expected<OwnedTensor> load_f32(const WeightView& v, std::string_view name, const Shape& shape);

// Frames [start, start + len) of a [1, C, T, H, W] tensor (a strided view).
inline Tensor frames(const Tensor& x, int64_t start, int64_t len) { return x.slice(2, start, len); }

// x in dtype `dt` as a contiguous tensor (a copy, even when it already is).
OwnedTensor contiguous_copy(Backend& be, const Tensor& x, DType dt);

}  // namespace flick::hunyuan_vae
