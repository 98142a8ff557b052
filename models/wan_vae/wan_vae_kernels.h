// The Wan VAE's activation plumbing over channels-last buffers ([T, H, W, C],
// C contiguous) that is neither a convolution nor a norm, written as Backend
// ops: the upsampling conv's phase interleave. The VAE's own numerics run as
// backend ops too: its RMS_norm (+ SiLU) with the reference's rounding points
// is Backend::normalize_l2, its single-head attention softmax
// Backend::softmax_parts.
#pragma once

#include "runtime/backend.h"
#include "runtime/tensor.h"

namespace flick::wan_vae {

// Where the VAE's norms round (backend.h):
//   PerOp: as PyTorch evaluates the reference module in the activation dtype.
//   Once:  fp32 throughout, one rounding at the store (for precisions the
//          reference itself does not run in).
using NormRounding = flick::NormRounding;

// The output frame of a nearest-x2-upsampling 3x3 convolution from its four
// phases (see Upsample): dst [2H, 2W, C] (contiguous), dst[2i + py, 2j + px]
// = src[i + py, j + px, 2 py + px] for src [H + 1, W + 1, 4, C] (contiguous).
// Same dtype. One strided backend copy.
void interleave_upsample_phases(Backend& be, const Tensor& src, Tensor& dst);

}  // namespace flick::wan_vae
