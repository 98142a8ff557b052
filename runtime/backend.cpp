#include "runtime/backend.h"

namespace flick {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::F32: return "f32";
    case Precision::BF16: return "bf16";
    case Precision::INT8: return "int8";
    case Precision::FP8: return "fp8";
  }
  return "?";
}

}  // namespace flick
