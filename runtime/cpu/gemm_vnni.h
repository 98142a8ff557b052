// Internal interface between runtime/cpu/gemm.cpp (threads; baseline ISA)
// and the AVX-512 VNNI kernels of runtime/cpu/gemm_vnni_avx512.cpp.
#pragma once

#include <cstdint>

#include "runtime/cpu/gemm.h"

namespace flick::cpu::vnni {

// One thread's share of vnni_gemm: rows [m0, m1) x column groups [g0, g1)
// (a group is two 32-column blocks of the packed weights: 64 columns).
struct WorkerArgs {
  const char* a = nullptr;  // u8 rows (q + 128) or bf16 rows, row stride lda bytes
  int64_t lda = 0;
  const AmxWeights* w = nullptr;
  const int32_t* comp = nullptr;  // S8: [n_pad] 128 * sum_k w[n, k]
  const AmxEpilogue* epilogue = nullptr;
  int64_t m0 = 0, m1 = 0, g0 = 0, g1 = 0;
  int64_t rows_per_block = 6;    // rows whose A panel is reused over the groups
  int64_t steps_per_block = 32;  // K steps (64 bytes of a row) per K block
  // s32 (S8) or fp32 (BF16) partial sums between K blocks when K is split: rows_per_block x
  // (g1 - g0) * 64, 64-byte aligned, the thread's own.
  int32_t* partial = nullptr;
};

void gemm_worker(const WorkerArgs& w);
void compensation(const AmxWeights& w, int32_t* comp);

}  // namespace flick::cpu::vnni
