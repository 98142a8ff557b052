// The fast CPU path: oneDNN for matmul and convolution (weights reordered once
// at pack time), own AVX-512 kernels for the rest, dispatched at run time.
#pragma once

#include "runtime/op_list.h"

namespace flick::cpu {
FLICK_OP_LIST(FLICK_DECLARE_OP)
}  // namespace flick::cpu
