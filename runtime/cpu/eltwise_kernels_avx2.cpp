// AVX2 + FMA + F16C instance of the elementwise kernels, and the run-time
// choice between it and the AVX-512 instance.
#include "runtime/cpu/eltwise_kernels.h"
#include "runtime/cpu/eltwise_simd_avx2.h"

namespace flick::cpu {
namespace avx2 {
namespace {
#define FLICK_ISA_NAME "avx2"
#include "runtime/cpu/eltwise_kernels.inc"
#undef FLICK_ISA_NAME
}  // namespace

const EltwiseKernels& kernels() { return kKernels; }

}  // namespace avx2

namespace {

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

}  // namespace

const EltwiseKernels* eltwise_kernels_for(Isa isa) {
  if (isa == Isa::Avx2) return &avx2::kernels();
  return cpu_has_avx512() ? &avx512::kernels() : nullptr;
}

const EltwiseKernels& eltwise_kernels() {
  static const EltwiseKernels& k = cpu_has_avx512() ? avx512::kernels() : avx2::kernels();
  return k;
}

}  // namespace flick::cpu
