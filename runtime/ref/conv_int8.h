// INT8 convolution: the quantization rule the reference and the CPU backend
// share (so both feed bit-identical integers to the convolution), and the
// reference's entry points (runtime/ref/conv.cpp hands Precision::INT8 here).
//
// Weights: symmetric int8 per output channel (ref::prepare_weights, the rule
// of INT8 linear layers). Activations: one scale per tensor and call, from the
// call's own min / max (see ConvInt8Act for the two encodings). The
// accumulator is exact (int32); the output is
//   y = act(float(acc) * (x_scale * w_scale[o]) + bias[o])
// with the combined scale one fp32 product, then one store rounding.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/backend.h"

namespace flick::ref {

// How activations are encoded:
//   S8: symmetric, scale = max|x| / 127, q = clamp(rint(x / scale), -127, 127).
//   U8: asymmetric over [min(x, 0), max(x, 0)], scale = (hi - lo) / 255,
//       zero point zp = rint(-lo / scale), q = clamp(rint(x / scale) + zp,
//       0, 255); the convolution sees q - zp (zero padding is q = zp).
// Every division is a multiply by inv_scale (computed once, fp32), so any
// vector kernel reproduces q exactly.
enum class ConvInt8Act { S8, U8 };

// The encoding INT8 convolutions use (see the measurement in conv_int8.cpp).
ConvInt8Act conv_int8_act();

struct ConvInt8Quant {
  float scale = 1.f;      // x ~ (q - zero_point) * scale
  float inv_scale = 1.f;  // q = rint(x * inv_scale) + zero_point, clamped
  int32_t zero_point = 0;
  int32_t lo = -127, hi = 127;  // clamp bounds of q
};

// The parameters for a tensor whose values span [min, max]. All-zero input:
// scale 1, every q = zero_point.
ConvInt8Quant conv_int8_quant(float min, float max, ConvInt8Act act);

// q of one value (round half to even, then the zero point, then the clamp).
int32_t conv_int8_q(float x, const ConvInt8Quant& p);

// The reference INT8 convolution (direct loops, exact integer sums).
std::unique_ptr<PackedConv> pack_conv_int8(const ConvDesc& d);
// Whether w came from pack_conv_int8.
bool is_conv_int8(const PackedConv& w);
void conv_int8(const Tensor& x, const PackedConv& w, Tensor& y, Activation act);

}  // namespace flick::ref
