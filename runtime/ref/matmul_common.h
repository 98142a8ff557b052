// Pieces the reference and the CPU backend share for linear and conv layers,
// so both see bit-identical weights and the same quantization rule: the CPU
// backend only reorders what prepare_weights() produced.
#pragma once

#include <cstdint>

#include "runtime/backend.h"

namespace flick::ref {

// A [..., C] tensor as `rows` rows of `cols` contiguous elements, row i at
// data + i * ld elements. Leading dims must collapse into one uniform stride.
struct RowsView {
  void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;

  void* row(int64_t i) const {
    return static_cast<char*>(data) + i * ld * static_cast<int64_t>(dtype_size(dtype));
  }
};
RowsView as_rows(const Tensor& t);

// The activation quantization rule of Backend::quantize_rows_int8 for one row
// of fp32 values: scale = max|x| / 127, q = clamp(rint(x / scale), -127, 127)
// with round-half-even; a row whose scale is 0 gets scale 1 and q = 0.
// Returns the scale.
float quantize_row_int8(const float* x, int64_t n, int8_t* q);

// Symmetric per-row E4M3 quantization of fp32 weights: scale = max|x| / 448,
// q = e4m3(x / scale) (round to nearest even, |x / scale| <= 448 by
// construction, clamped anyway). Returns the scale (1 for a zero row).
float quantize_row_e4m3(const float* x, int64_t n, uint8_t* q);

// A layer's weight converted once to what its precision computes with.
// Layout [N, K] row-major: N output channels, K = everything else (in_features
// for linear; I/groups * kernel volume for conv, in PyTorch order).
//   F32:  w F32 (I8 / F8 inputs dequantized: w * scale).
//   BF16: w BF16, the dequantized weight rounded once to bf16.
//   FP8:  w BF16 holding the E4M3/E5M2 values exactly (bf16 represents every
//         fp8 value) and scale [N], applied to the fp32 accumulator.
//   INT8: w I8 and scale [N] applied to the i32 accumulator. Float (or FP8)
//         weights are quantized per output channel with quantize_row_int8;
//         I8 weights are taken as they are.
// bias: F32 [N] or empty.
struct PreparedWeights {
  Precision precision = Precision::F32;
  OwnedTensor w;      // [N, K]
  OwnedTensor scale;  // F32 [N]; empty for F32 and BF16
  OwnedTensor bias;   // F32 [N]; empty without bias

  int64_t n() const { return w.t.dim(0); }
  int64_t k() const { return w.t.dim(1); }
  bool has_scale() const { return !scale.t.empty(); }
  bool has_bias() const { return !bias.t.empty(); }
};

// w: [N, ...] contiguous in F32, BF16, F16, I8, F8_E4M3 or F8_E5M2; I8 and F8
// need w_scale F32 [N] or [1]. Unsupported combinations are programmer errors
// (model loaders validate checkpoint dtypes before packing).
PreparedWeights prepare_weights(const Tensor& w, const Tensor& w_scale, const Tensor& bias,
                                Precision precision);

// The fused epilogue activation, evaluated in double; `out` is the output
// dtype (RoundGeluTanh rounds v to it first).
double activate(double v, Activation act, DType out);

}  // namespace flick::ref
