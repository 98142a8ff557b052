// AVX-512 instance of the elementwise kernels (compiled with the AVX-512 flags).
// GCC 12 reports its own _mm512_undefined_ps() pass-through operands as
// maybe-uninitialized once the intrinsics are inlined (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "runtime/cpu/eltwise_kernels.h"
#include "runtime/cpu/eltwise_simd_avx512.h"

namespace flick::cpu::avx512 {
namespace {
#define FLICK_ISA_NAME "avx512"
#include "runtime/cpu/eltwise_kernels.inc"
#undef FLICK_ISA_NAME
}  // namespace

const EltwiseKernels& kernels() { return kKernels; }

}  // namespace flick::cpu::avx512
