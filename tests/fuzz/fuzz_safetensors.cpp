// libFuzzer: safetensors header validation must return an error or a header
// whose tensors lie inside the input, never crash or read out of bounds.
#include <cstdint>
#include <cstdlib>

#include "runtime/weights/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto h = flick::parse_safetensors(data, size, "fuzz");
  if (!h.ok()) return 0;
  for (const auto& e : h->entries)
    if (e.end < e.begin || h->data_start + e.end > size || e.end - e.begin != e.info.nbytes)
      std::abort();
  return 0;
}
