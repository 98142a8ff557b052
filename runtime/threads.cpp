#include "runtime/threads.h"

#include <omp.h>

#include <algorithm>
#include <thread>

namespace flick {

int num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  omp_set_num_threads(n);
}

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                  int64_t min_per_thread) {
  if (n <= 0) return;
  const int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(1, min_per_thread));
  const int nt = static_cast<int>(std::min<int64_t>(num_threads(), max_chunks));
  if (nt <= 1 || omp_in_parallel()) {
    fn(0, n);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    const int64_t t = omp_get_thread_num();
    const int64_t begin = n * t / nt;
    const int64_t end = n * (t + 1) / nt;
    if (begin < end) fn(begin, end);
  }
}

}  // namespace flick
