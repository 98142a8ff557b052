// The scalar reference of every op: plain loops in fp32 (fp64 where that is
// what makes it an oracle), any strides. Slow by design; never on a hot path.
#pragma once

#include "runtime/op_list.h"

namespace flick::ref {
FLICK_OP_LIST(FLICK_DECLARE_OP)

// concat's checks and walk over the parts of y, each part written by
// copy_part: the CPU backend passes its fast copy.
void concat_with(std::span<const Tensor> xs, int dim, Tensor& y,
                 void (*copy_part)(const Tensor& x, Tensor& y));
}  // namespace flick::ref
