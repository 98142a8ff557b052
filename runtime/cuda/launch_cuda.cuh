// The GPU launchers of runtime/cuda/functors.h (nvcc only). This and the
// launches / memory / library calls of cuda_backend.cu are the only CUDA code
// the CPU test suite never runs: keep it small. The CPU twin is
// launch_host.h (tests/cuda_host).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/cuda/functors.h"
#include "runtime/status.h"

namespace flick::cuda {

template <class F>
__global__ void for_each_kernel(int64_t n, F f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    f(i);
}

// a combined with lane (lane ^ m)'s a for m = 16 .. 1: every lane ends with
// the warp's total. Acc is a POD of 32-bit words (floats, counts).
template <class R, class Acc>
__device__ Acc warp_combine(const R& r, Acc a) {
  static_assert(sizeof(Acc) % 4 == 0, "row accumulators are made of 32-bit words");
  constexpr int kWords = sizeof(Acc) / 4;
  for (int m = 16; m > 0; m >>= 1) {
    uint32_t w[kWords];
    memcpy(w, &a, sizeof a);
    for (int k = 0; k < kWords; ++k) w[k] = __shfl_xor_sync(0xffffffffu, w[k], m);
    Acc o;
    memcpy(&o, w, sizeof o);
    a = r.combine(a, o);
  }
  return a;
}

// One block per row (grid-stride over rows): every thread combines a strided
// share of the row, warp shuffles then one shared slot per warp combine the
// threads, warp 0 finalizes, then all threads apply. Rows up to any length;
// combine must be associative (the functors' reductions are: sums, max,
// Chan's mean/var, online softmax) and init its identity, so only the
// summation order differs from the CPU loop.
template <class R, int kThreads>
__global__ void rows_kernel(R r) {
  using Acc = typename R::Acc;
  constexpr int kWarps = kThreads / 32;
  __shared__ Acc part[kWarps];
  __shared__ Stats2 stats;
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int64_t n = r.len();
  for (int64_t row = blockIdx.x; row < r.rows(); row += gridDim.x) {
    Acc acc = r.init();
    for (int64_t i = threadIdx.x; i < n; i += kThreads) acc = r.combine(acc, r.partial(row, i));
    acc = warp_combine(r, acc);
    if (lane == 0) part[warp] = acc;
    __syncthreads();
    if (warp == 0) {
      Acc a = lane < kWarps ? part[lane] : r.init();
      a = warp_combine(r, a);
      if (lane == 0) stats = r.finalize(a);
    }
    __syncthreads();
    const Stats2 st = stats;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) r.apply(row, i, st);
    __syncthreads();  // stats and part are reused by the next row
  }
}

inline void cuda_check(cudaError_t e, const char* what) {
  FLICK_CHECK(e == cudaSuccess, std::string(what) + ": " + cudaGetErrorString(e));
}

struct CudaLauncher {
  cudaStream_t stream = nullptr;
  int sm_count = 108;

  template <class F>
  void for_each(int64_t n, const F& f) const {
    if (n == 0) return;
    constexpr int kBlock = 256;
    const int64_t want = (n + kBlock - 1) / kBlock;
    const int blocks = static_cast<int>(want < sm_count * 32LL ? want : sm_count * 32LL);
    for_each_kernel<F><<<blocks, kBlock, 0, stream>>>(n, f);
    cuda_check(cudaGetLastError(), "for_each launch");
  }
  template <class R>
  void rows(const R& r) const {
    const int64_t rows = r.rows();
    if (rows == 0) return;
    constexpr int kThreads = 256;
    const int blocks = static_cast<int>(rows < sm_count * 64LL ? rows : sm_count * 64LL);
    rows_kernel<R, kThreads><<<blocks, kThreads, 0, stream>>>(r);
    cuda_check(cudaGetLastError(), "rows launch");
  }
};

}  // namespace flick::cuda
