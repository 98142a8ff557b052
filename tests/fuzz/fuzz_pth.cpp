// libFuzzer: a whole .pth archive (zip layer, CRCs, pickle, storage checks,
// strided copies) read from memory; every tensor that opens must load.
#include <cstdint>
#include <cstdlib>

#include "runtime/weights/pth.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = flick::PthFile::open_memory(std::vector<uint8_t>(data, data + size), "fuzz.pth");
  if (!f.ok()) return 0;
  for (size_t i = 0; i < (*f)->tensors().size(); ++i) {
    auto d = (*f)->data(i);
    (void)d;  // CRC errors are legitimate; crashes are not
  }
  return 0;
}
