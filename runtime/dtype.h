// Element types and scalar conversions that match PyTorch (c10, torch 2.15 on
// x86-64) bit for bit: round to nearest even, NaN and overflow handled as c10
// does for each format. tests/core/test_dtype.cpp proves it against torch's
// own results for every code of every format and a large set of fp32 inputs,
// and against an exact round-to-nearest-even oracle for all 2^32 fp32 inputs.
// The F16 and FP8 encoders round through fp32 arithmetic on subnormal values,
// so (as in c10) they need the default MXCSR: no flush-to-zero, no DAZ.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace flick {

enum class DType : uint8_t { F32, BF16, F16, F8_E4M3, F8_E5M2, I8, U8, I32 };

inline constexpr DType kAllDTypes[] = {DType::F32,     DType::BF16, DType::F16, DType::F8_E4M3,
                                       DType::F8_E5M2, DType::I8,   DType::U8,  DType::I32};

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::BF16: case DType::F16: return 2;
    case DType::F8_E4M3: case DType::F8_E5M2: case DType::I8: case DType::U8: return 1;
  }
  return 0;
}

// Names as safetensors spells them ("F32", "BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);
constexpr bool dtype_is_float(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16 || t == DType::F8_E4M3 ||
         t == DType::F8_E5M2;
}

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float f32_from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// ---- BF16 (c10::BFloat16 round_to_nearest_even) ----
// Every NaN becomes 0x7FC0, as c10's scalar conversion does. (torch's AVX-512
// vectorized cast of a contiguous tensor writes 0xFFFF instead, and
// vcvtneps2bf16 keeps sign and payload: only the NaN bits differ.)
inline uint16_t f32_to_bf16(float f) {
  if (std::isnan(f)) return 0x7FC0;
  uint32_t u = f32_bits(f);
  uint32_t rounding_bias = ((u >> 16) & 1u) + 0x7FFFu;
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}
inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }
// Round an fp32 value to the nearest bf16 and back: the rounding point PyTorch
// applies after every op on a bf16 tensor.
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// ---- F16 (c10 fp16_ieee_from_fp32_value / fp16_ieee_to_fp32_value) ----
// On x86-64 c10 converts with F16C (vcvtps2ph / vcvtph2ps), which keeps a
// NaN's sign and the top 10 payload bits and sets the quiet bit; the portable
// formulation below does the same so results equal torch's bit for bit.
inline uint16_t f32_to_f16(float f) {
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = f32_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = f32_from_bits((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = f32_bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  const uint32_t nan_bits = 0x7E00u | ((w >> 13) & 0x03FFu);
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? nan_bits : nonsign));
}
inline float f16_to_f32(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = 0xE0u << 23;
  const float exp_scale = 0x1.0p-112f;
  const float normalized = f32_from_bits((two_w >> 4) + exp_offset) * exp_scale;
  const uint32_t magic_mask = 126u << 23;
  const float magic_bias = 0.5f;
  const float denormalized = f32_from_bits((two_w >> 17) | magic_mask) - magic_bias;
  const uint32_t denormalized_cutoff = 1u << 27;
  const uint32_t result =
      sign | (two_w < denormalized_cutoff ? f32_bits(denormalized) : f32_bits(normalized));
  return f32_from_bits(result);
}

// ---- F8 E4M3 "fn" (no inf; 0x7F/0xFF NaN; max 448). c10 fp8e4m3fn_from_fp32_value
// as of torch 2.15 (older releases returned NaN on overflow): finite overflow
// and +-inf saturate to +-448 (0x7E/0xFE), NaN stays NaN (0x7F with the
// input's sign). Decoding a NaN gives sign | 0x7FF00000, the bits c10's
// branch-free decoder produces.
inline uint8_t f32_to_f8e4m3(float f) {
  const uint32_t fp8_max = 1087u << 20;
  const uint32_t denorm_mask = 141u << 23;
  uint32_t f_bits = f32_bits(f);
  const uint32_t sign = f_bits & 0x80000000u;
  f_bits ^= sign;
  uint8_t result;
  if (f_bits >= fp8_max) {
    result = f_bits > 0x7F800000u ? 0x7F : 0x7E;
  } else if (f_bits < (121u << 23)) {
    f_bits = f32_bits(f32_from_bits(f_bits) + f32_from_bits(denorm_mask));
    result = static_cast<uint8_t>(f_bits - denorm_mask);
  } else {
    const uint32_t mant_odd = (f_bits >> 20) & 1u;
    f_bits += (static_cast<uint32_t>(7 - 127) << 23) + 0x7FFFFu;
    f_bits += mant_odd;
    result = static_cast<uint8_t>(f_bits >> 20);
    if (result == 0x7F) result = 0x7E;  // rounding (464, 480) up carries into NaN
  }
  return static_cast<uint8_t>(result | (sign >> 24));
}
inline float f8e4m3_to_f32(uint8_t v) {
  const uint32_t sign = (v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xFu;
  const uint32_t mant = v & 0x7u;
  if (exp == 0xF && mant == 0x7) return f32_from_bits(sign | 0x7FF00000u);
  float mag;
  if (exp == 0) {
    mag = static_cast<float>(mant) * 0x1p-9f;  // subnormal: mant * 2^-6 / 8, exact
  } else {
    mag = f32_from_bits(((exp + 120u) << 23) | (mant << 20));
  }
  return f32_from_bits(f32_bits(mag) | sign);
}

// ---- F8 E5M2 (IEEE-like: inf and NaN). c10 fp8e5m2_from_fp32_value:
// overflow becomes inf, NaN stays NaN (0x7F with sign).
inline uint8_t f32_to_f8e5m2(float f) {
  const uint32_t fp32_inf = 255u << 23;
  const uint32_t fp8_max = 143u << 23;
  const uint32_t denorm_mask = 134u << 23;
  uint32_t f_bits = f32_bits(f);
  const uint32_t sign = f_bits & 0x80000000u;
  f_bits ^= sign;
  uint8_t result;
  if (f_bits >= fp8_max) {
    result = f_bits > fp32_inf ? 0x7F : 0x7C;
  } else if (f_bits < (113u << 23)) {
    f_bits = f32_bits(f32_from_bits(f_bits) + f32_from_bits(denorm_mask));
    result = static_cast<uint8_t>(f_bits - denorm_mask);
  } else {
    const uint32_t mant_odd = (f_bits >> 21) & 1u;
    f_bits += (static_cast<uint32_t>(15 - 127) << 23) + 0xFFFFFu;
    f_bits += mant_odd;
    result = static_cast<uint8_t>(f_bits >> 21);
  }
  return static_cast<uint8_t>(result | (sign >> 24));
}
inline float f8e5m2_to_f32(uint8_t v) { return f16_to_f32(static_cast<uint16_t>(v) << 8); }

// Read element i of a buffer of type t as fp32 (integers convert exactly
// where representable).
float load_as_f32(DType t, const void* data, int64_t i);
// Store v as element i of a buffer of type t with PyTorch's conversion rules
// (floats: the functions above; integers: truncation toward zero after
// saturation is NOT applied, as in torch's .to(int) it is undefined for
// out-of-range values, so callers clamp first).
void store_from_f32(DType t, void* data, int64_t i, float v);
// Convert n contiguous elements.
void convert(DType src_t, const void* src, DType dst_t, void* dst, int64_t n);

}  // namespace flick
