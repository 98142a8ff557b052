// Internal interface between runtime/cpu/gemm.cpp (blocking, threads,
// packing; baseline ISA) and the tile kernels of runtime/cpu/gemm_amx.cpp.
#pragma once

#include <cstdint>

#include "runtime/cpu/gemm.h"

namespace flick::cpu::amx {

// Loop blocking of one worker, in 32-column blocks and K steps (see
// gemm_amx.cpp): a B panel of kb_steps x chunk_blocks stays in L2 while the
// row blocks pass over it, each reusing its A panel chunk_blocks times.
struct AmxBlocking {
  int64_t chunk_blocks = 8;
  int64_t kb_steps = 64;
};

// C scratch one worker needs: a 32 x 32 fp32 block per column block of a
// chunk, per row block as well when K is split into several blocks.
inline size_t worker_scratch_bytes(const AmxBlocking& b, int64_t k_steps, int64_t row_blocks) {
  const int64_t blocks = b.chunk_blocks * (b.kb_steps < k_steps ? row_blocks : 1);
  return static_cast<size_t>(blocks) * 32 * 32 * 4;
}

// One thread's share: row blocks [mb0, mb1) x column blocks [nb0, nb1).
struct WorkerArgs {
  AmxType type = AmxType::BF16;
  const void* a = nullptr;  // AmxActivations::data
  const void* b = nullptr;  // AmxWeights::data
  void* c_scratch = nullptr;
  int64_t m = 0, n = 0, k_steps = 0;
  int64_t mb0 = 0, mb1 = 0, nb0 = 0, nb1 = 0;
  AmxBlocking blocking;
  const AmxEpilogue* epilogue = nullptr;
};

void gemm_worker(const WorkerArgs& w);

}  // namespace flick::cpu::amx
