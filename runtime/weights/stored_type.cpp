#include "runtime/weights/stored_type.h"

#include "runtime/status.h"

namespace flick {
namespace {

// Every dtype the safetensors format defines (safetensors/src/tensor.rs).
constexpr StoredType kStoredTypes[] = {
    {"F32", 32, DType::F32},
    {"BF16", 16, DType::BF16},
    {"F16", 16, DType::F16},
    {"F8_E4M3", 8, DType::F8_E4M3},
    {"F8_E5M2", 8, DType::F8_E5M2},
    {"I8", 8, DType::I8},
    {"U8", 8, DType::U8},
    {"I32", 32, DType::I32},
    {"BOOL", 8, std::nullopt},
    {"I16", 16, std::nullopt},
    {"U16", 16, std::nullopt},
    {"U32", 32, std::nullopt},
    {"I64", 64, std::nullopt},
    {"U64", 64, std::nullopt},
    {"F64", 64, std::nullopt},
    {"C64", 64, std::nullopt},
    {"F8_E4M3FNUZ", 8, std::nullopt},
    {"F8_E5M2FNUZ", 8, std::nullopt},
    {"F8_E8M0", 8, std::nullopt},
    {"F6_E2M3", 6, std::nullopt},
    {"F6_E3M2", 6, std::nullopt},
    {"F4", 4, std::nullopt},
};

}  // namespace

const StoredType* stored_type_by_name(std::string_view name) {
  for (const StoredType& t : kStoredTypes)
    if (t.name == name) return &t;
  return nullptr;
}

const StoredType& stored_type_of(DType t) {
  for (const StoredType& s : kStoredTypes)
    if (s.dtype == t) return s;
  FLICK_CHECK(false, "DType without a stored type");
  return kStoredTypes[0];
}

std::optional<uint64_t> checked_numel(const int64_t* dims, size_t ndim) {
  uint64_t n = 1;
  for (size_t i = 0; i < ndim; ++i) {
    if (dims[i] < 0) return std::nullopt;
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(dims[i]), &n)) return std::nullopt;
  }
  // Byte offsets and strides are int64 downstream.
  if (n > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  return n;
}

bool fills_whole_bytes(const StoredType& t, uint64_t numel) {
  return (numel % 8) * static_cast<uint64_t>(t.bits) % 8 == 0;
}

std::optional<uint64_t> checked_nbytes(const StoredType& t, uint64_t numel) {
  FLICK_CHECK(fills_whole_bytes(t, numel), "partial byte");
  if (t.bits % 8 == 0) {
    uint64_t bytes;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(t.bits / 8), &bytes))
      return std::nullopt;
    return bytes;
  }
  // Sub-byte: numel * bits / 8 without overflowing the intermediate.
  uint64_t bytes;
  if (__builtin_mul_overflow(numel / 8, static_cast<uint64_t>(t.bits), &bytes)) return std::nullopt;
  return bytes + (numel % 8) * static_cast<uint64_t>(t.bits) / 8;
}

}  // namespace flick
