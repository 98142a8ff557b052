// The Wan VAE's own elementwise kernels over channels-last activations
// ([T, H, W, C] buffers, C contiguous): the RMS_norm(+SiLU) with the rounding
// points of the reference, the upsampling conv's phase interleave, frame
// copies. Everything else (convolutions, attention, adds) goes through the
// Backend.
//
// These kernels are model numerics rather than backend ops: the rounding
// chain of `F.normalize(x) * sqrt(C) * gamma` in bf16 is the reference's, not
// a general normalisation. Their inner loops run on the CPU backend's
// vectorised fp32 kernels (runtime/cpu/eltwise_kernels.h), whatever backend
// runs the convolutions.
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace flick::wan_vae {

// Where the norm rounds.
//   PerOp: after every op, to the activation dtype, as PyTorch evaluates the
//          reference module in that dtype: n = |x| (accumulated in fp32,
//          rounded), q = x / max(n, 1e-12), q * sqrt(C), q * gamma, SiLU.
//          In F32 this is torch's fp32 arithmetic.
//   Once:  fp32 throughout, one rounding at the store (the most accurate
//          form; for precisions the reference itself does not run in).
enum class NormRounding { PerOp, Once };

// y[r, :] = [silu](x[r, :] / max(|x[r, :]|, 1e-12) * sqrt(c) * gamma) for
// `rows` rows of c channels; x and y contiguous [rows, c] of dtype `dt` (F32
// or BF16), y may alias x. gamma: c fp32 values.
void channel_rms_norm(const void* x, void* y, DType dt, int64_t rows, int64_t c, const float* gamma,
                      NormRounding rounding, bool silu);

// The softmax of single-head attention as PyTorch's CPU flash attention
// evaluates a block of keys: s = s * scale, p = exp(s - max(s)) stored in the
// activation dtype (what the P @ V product reads), sums[r] = the sum of the
// unrounded fp32 exps. s: [rows, cols] F32, overwritten; p: [rows, cols] of
// p_dtype (F32: may be s).
void attention_probs(float* s, void* p, DType p_dtype, int64_t rows, int64_t cols, float scale,
                     float* sums);
// y[r, :] = o[r, :] * (1 / sums[r]) rounded to y_dtype: o [rows, c] F32, y
// [rows, c] contiguous.
void attention_normalize(const float* o, const float* sums, void* y, DType y_dtype, int64_t rows,
                         int64_t c);

// The output frame of a nearest-x2-upsampling 3x3 convolution from its four
// phases (see Upsample): dst [2H, 2W, C] (contiguous), dst[2i + py, 2j + px]
// = src[i + py, j + px, 2 py + px] for src [H + 1, W + 1, 4, C] (contiguous).
// Same dtype.
void interleave_upsample_phases(const Tensor& src, Tensor& dst);

// n bytes from src to dst (non-overlapping), split over the threads.
void copy_bytes(void* dst, const void* src, size_t n);

}  // namespace flick::wan_vae
