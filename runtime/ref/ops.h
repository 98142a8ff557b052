// The scalar reference of every op: plain loops in fp32 (fp64 where that is
// what makes it an oracle), any strides. Slow by design; never on a hot path.
#pragma once

#include "runtime/op_list.h"

namespace flick::ref {
FLICK_OP_LIST(FLICK_DECLARE_OP)
}  // namespace flick::ref
