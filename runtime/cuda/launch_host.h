// The CPU instantiation of the three launchers of runtime/cuda/functors.h:
// plain loops, rows reduced in order. tests/cuda_host runs every functor
// through it against runtime/ref, so the kernel bodies the GPU runs are tested
// on machines without one (only the GPU launchers, launch_cuda.cuh, are not).
#pragma once

#include <cstdint>

#include "runtime/cuda/functors.h"

namespace flick::cuda {

struct HostLauncher {
  // Elementwise / index-map: f(i) for i in [0, n).
  template <class F>
  void for_each(int64_t n, const F& f) const {
    for (int64_t i = 0; i < n; ++i) f(i);
  }
  // Row-reduce: per row, combine the partials, finalize, apply.
  template <class R>
  void rows(const R& r) const {
    const int64_t n = r.len();
    for (int64_t row = 0; row < r.rows(); ++row) {
      typename R::Acc acc = r.init();
      for (int64_t i = 0; i < n; ++i) acc = r.combine(acc, r.partial(row, i));
      const Stats2 s = r.finalize(acc);
      for (int64_t i = 0; i < n; ++i) r.apply(row, i, s);
    }
  }
};

}  // namespace flick::cuda
