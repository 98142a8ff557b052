#include "runtime/dtype.h"

#include <cmath>

namespace flick {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::F8_E5M2: return "F8_E5M2";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
    case DType::I32: return "I32";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (DType t : kAllDTypes)
    if (dtype_name(t) == name) return t;
  return std::nullopt;
}

float load_as_f32(DType t, const void* data, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(data)[i];
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::F8_E4M3: return f8e4m3_to_f32(static_cast<const uint8_t*>(data)[i]);
    case DType::F8_E5M2: return f8e5m2_to_f32(static_cast<const uint8_t*>(data)[i]);
    case DType::I8: return static_cast<const int8_t*>(data)[i];
    case DType::U8: return static_cast<const uint8_t*>(data)[i];
    case DType::I32: return static_cast<float>(static_cast<const int32_t*>(data)[i]);
  }
  return 0.f;
}

void store_from_f32(DType t, void* data, int64_t i, float v) {
  switch (t) {
    case DType::F32: static_cast<float*>(data)[i] = v; return;
    case DType::BF16: static_cast<uint16_t*>(data)[i] = f32_to_bf16(v); return;
    case DType::F16: static_cast<uint16_t*>(data)[i] = f32_to_f16(v); return;
    case DType::F8_E4M3: static_cast<uint8_t*>(data)[i] = f32_to_f8e4m3(v); return;
    case DType::F8_E5M2: static_cast<uint8_t*>(data)[i] = f32_to_f8e5m2(v); return;
    case DType::I8: static_cast<int8_t*>(data)[i] = static_cast<int8_t>(std::trunc(v)); return;
    case DType::U8: static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(std::trunc(v)); return;
    case DType::I32: static_cast<int32_t*>(data)[i] = static_cast<int32_t>(std::trunc(v)); return;
  }
}

void convert(DType src_t, const void* src, DType dst_t, void* dst, int64_t n) {
  if (src_t == dst_t) {
    std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(src_t));
    return;
  }
  for (int64_t i = 0; i < n; ++i) store_from_f32(dst_t, dst, i, load_as_f32(src_t, src, i));
}

}  // namespace flick
