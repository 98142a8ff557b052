// AVX-512 instance of the elementwise kernels (compiled with the AVX-512 flags).
// GCC 12 reports the deliberately undefined pass-through operands of its own
// AVX-512 intrinsics (_mm512_undefined_*) as uninitialized once they are
// inlined (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

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
