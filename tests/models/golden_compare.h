// Comparing a component's tensors with goldens dumped from the reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/backend.h"
#include "runtime/tensor.h"

namespace flick::testing {

// Any view (taps may be strided: modulation slices, cache windows) as fp32.
inline std::vector<float> to_f32(const Tensor& t) {
  OwnedTensor c(DType::F32, t.shape);
  make_ref_backend()->copy(t, c.t);
  return std::vector<float>(c.t.ptr<float>(), c.t.ptr<float>() + t.numel());
}

// ||got - want|| / ||want||.
inline double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace flick::testing
