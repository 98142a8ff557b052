// libFuzzer: the restricted unpickler must refuse or accept, never crash.
#include <cstdint>
#include <cstdlib>

#include "runtime/weights/pickle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = flick::unpickle_state_dict(data, size);
  if (!r.ok()) return 0;
  for (const auto& t : r->tensors)
    if (t.shape.size() != t.strides.size() || t.offset < 0 || !t.type) std::abort();
  return 0;
}
