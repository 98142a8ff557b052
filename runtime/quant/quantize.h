// Weight quantizers for quantized checkpoints (flick convert) and the error
// metrics that judge them.
//
// A weight is [N, ...] with N output channels (nn.Linear [N, K]; a conv
// weight [O, I, k...] is quantized as [O, I*k...]). Input F32, BF16 or F16.
//   INT8 per channel:  scale[n] = amax(|w[n, :]|) / 127,
//                      q = clamp(round_half_even(w / scale[n]), -127, 127)   (I8)
//   FP8 per tensor:    scale[0] = amax(|w|) / 448,
//   FP8 per channel:   scale[n] = amax(|w[n, :]|) / 448,
//                      q = e4m3(clamp(w / scale, -448, 448))                 (F8_E4M3)
//   dequantized = float(q) * scale.
// All of it in fp32 with PyTorch's operations (true division, torch.round,
// c10's e4m3 conversion), so results equal the torch reference in
// tools/gen_quant_fixtures.py bit for bit. A scale that would be 0 (an
// all-zero row or tensor) is 1. Scales are F32 [N] or [1]: the
// `<name>.weight_scale` of architecture.md.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "runtime/status.h"
#include "runtime/tensor.h"

namespace flick {

enum class QuantScheme { kInt8PerChannel, kFp8PerTensor, kFp8PerChannel };

std::string_view quant_scheme_name(QuantScheme s);  // "int8", "fp8-tensor", "fp8-channel"
DType quant_dtype(QuantScheme s);                   // I8 or F8_E4M3

struct QuantizedWeight {
  OwnedTensor q;      // same shape as the input, I8 or F8_E4M3
  OwnedTensor scale;  // F32 [N] (per channel) or [1] (per tensor)
};

// w: a contiguous weight of rank >= 2 in F32, BF16 or F16. name: the tensor's
// name for error messages (non-finite values, wrong dtype or rank).
Expected<QuantizedWeight> quantize_weight(const Tensor& w, QuantScheme scheme,
                                          std::string_view name);

// out = float(q) * scale, q contiguous I8 or F8_E4M3 of rank >= 2, scale F32
// [N] or [1], out F32 (or BF16: rounded once) with q's numel.
void dequantize_weight(const Tensor& q, const Tensor& scale, const Tensor& out);

// How far an approximation is from a reference (accumulated in fp64):
//   cosine        = <w, d> / (|w| |d|)    (1 when both are zero)
//   max_rel_error = max|w - d| / max|w|  (0 when both are zero)
//   snr_db        = 10 log10(sum w^2 / sum (w - d)^2)  (+inf when exact)
struct QuantError {
  double cosine = 1.0;
  double max_rel_error = 0.0;
  double snr_db = 0.0;
  double max_abs_error = 0.0;
  double max_abs = 0.0;  // max|w|
};

// reference and approx: any float dtypes, same numel, contiguous.
QuantError quant_error(const Tensor& reference, const Tensor& approx);
// The error of a quantized weight against its original, dequantizing one row
// at a time (no full fp32 copy of a large weight).
QuantError quant_error(const Tensor& original, const QuantizedWeight& qw);

}  // namespace flick
