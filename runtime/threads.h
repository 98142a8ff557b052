// One thread pool for everything: OpenMP, the runtime Debian's oneDNN is
// built with, so our kernels and oneDNN's share the same threads.
#pragma once

#include <cstdint>
#include <functional>

namespace flick {

int num_threads();
void set_num_threads(int n);  // 0 = all cores of the host

// Runs fn(begin, end) over [0, n) split into contiguous chunks, one per thread
// (fewer if n is small). Runs inline when n < min_per_thread * 2.
void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                  int64_t min_per_thread = 1);

}  // namespace flick
