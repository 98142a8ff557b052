// Element types as checkpoints name them. flick computes in DType; the other
// types a checkpoint may hold (I64 position ids, F64 buffers, BOOL masks, ...)
// are parsed, validated and listed, but a request for them as a Tensor is
// refused with the tensor's name.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "runtime/dtype.h"

namespace flick {

struct StoredType {
  std::string_view name;       // safetensors spelling: "F32", "I64", "F8_E4M3", "F4"
  int bits;                    // 4, 6, 8, 16, 32, 64 (sub-byte types pack)
  std::optional<DType> dtype;  // the flick dtype, if flick computes in it
};

// nullptr for a name no known format uses.
const StoredType* stored_type_by_name(std::string_view name);
const StoredType& stored_type_of(DType t);

// Overflow-checked element count of a shape: nullopt if a dim is negative or
// the product leaves int64 (offsets and strides are int64 downstream).
std::optional<uint64_t> checked_numel(const int64_t* dims, size_t ndim);
// Whether numel elements of t fill whole bytes (sub-byte types pack).
bool fills_whole_bytes(const StoredType& t, uint64_t numel);
// Byte size of numel elements; nullopt on overflow. Requires fills_whole_bytes.
std::optional<uint64_t> checked_nbytes(const StoredType& t, uint64_t numel);

}  // namespace flick
