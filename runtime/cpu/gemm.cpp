// The AMX GEMM's CPU detection, packing, blocking and threads (baseline
// ISA; the tile kernels are in gemm_amx.cpp). See gemm.h.
#include "runtime/cpu/gemm.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "runtime/cpu/eltwise_kernels.h"
#include "runtime/cpu/gemm_amx.h"
#include "runtime/cpu/gemm_vnni.h"
#include "runtime/cpu/quantize.h"
#include "runtime/threads.h"

namespace flick::cpu {
namespace {

bool cpuid7_edx(int bit) {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (d >> bit) & 1u;
}

// Writes the 16 rows [g * 16, g * 16 + 16) of a packed activation matrix,
// every K step's tile in turn (sequential stores): row r from rows[r], which
// holds `bytes` valid bytes, or zeros for rows[r] == nullptr and past
// `bytes` (the K padding).
void write_tile_rows(const AmxActivations& a, int64_t g, const char* const* rows, int64_t bytes) {
  const int64_t steps = a.k_pad / amx_k_step(a.type);
  char* tile = static_cast<char*>(a.data) + (g / 2) * steps * 2048 + (g % 2) * 1024;
  for (int64_t s = 0; s < steps; ++s, tile += 2048) {
    const int64_t off = s * kAmxRowBytes, valid = std::min<int64_t>(kAmxRowBytes, bytes - off);
    for (int r = 0; r < 16; ++r) {
      char* dst = tile + r * kAmxRowBytes;
      if (rows[r] != nullptr && valid == kAmxRowBytes) {
        std::memcpy(dst, rows[r] + off, kAmxRowBytes);  // inlined: constant size
      } else {
        const int64_t n = rows[r] != nullptr ? valid : 0;
        std::memcpy(dst, rows[r] + off, static_cast<size_t>(n));
        std::memset(dst + n, 0, static_cast<size_t>(kAmxRowBytes - n));
      }
    }
  }
}

// Packs x into a in groups of 16 rows spread over the thread pool:
// stage(slot, m, staging_row) prepares row m (returns where its bytes are,
// the staging row or x itself), then the group is written tile by tile.
template <class Stage>
void pack_groups(const AmxActivations& a, int64_t row_bytes, AmxScratch& scratch,
                 size_t staging_row_bytes, Stage stage) {
  const int64_t groups = a.m_pad / 16;
  const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(num_threads(), groups));
  scratch.prepare(tasks, std::max<size_t>(1, 16 * staging_row_bytes));
  parallel_for(tasks, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      char* staging = static_cast<char*>(scratch.slot(t));
      for (int64_t g = groups * t / tasks; g < groups * (t + 1) / tasks; ++g) {
        const char* rows[16];
        for (int r = 0; r < 16; ++r) {
          const int64_t m = g * 16 + r;
          rows[r] = m < a.m ? stage(m, staging + r * staging_row_bytes) : nullptr;
        }
        write_tile_rows(a, g, rows, row_bytes);
      }
    }
  });
}

// The blocking of one worker with `cols` column blocks (gemm_amx.cpp): the
// B panel (kb steps x chunk x 2 KB) within 1 MB of the 2 MB L2, K blocks of
// equal size.
amx::AmxBlocking blocking_for(int64_t k_steps, int64_t cols) {
  amx::AmxBlocking b;
  b.chunk_blocks = std::min<int64_t>(8, cols);
  const int64_t max_kb = 512 / b.chunk_blocks;
  const int64_t nkb = (k_steps + max_kb - 1) / max_kb;
  b.kb_steps = (k_steps + nkb - 1) / nkb;
  return b;
}

}  // namespace

bool amx_available() {
  static const bool ok = [] {
    // CPUID.(7,0):EDX bit 22 AMX-BF16, 24 AMX-TILE, 25 AMX-INT8; the packing
    // and epilogue kernels are AVX-512 (F, BW, VL, DQ).
    if (!cpuid7_edx(22) || !cpuid7_edx(24) || !cpuid7_edx(25)) return false;
    if (eltwise_kernels_for(Isa::Avx512) == nullptr) return false;
    // Linux enables the 8 KB tile state per process on request.
    constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

AmxCallBuffers& amx_call_buffers() {
  thread_local AmxCallBuffers buffers;
  return buffers;
}

void AmxScratch::prepare(int64_t slots, size_t bytes) {
  const size_t stride = (bytes + 4095) / 4096 * 4096;
  const size_t need = stride * static_cast<size_t>(slots);
  if (need > buffer_.size()) buffer_ = HostBuffer(need);
  stride_ = stride;
}

AmxWeights amx_pack_weights(const Tensor& w, AmxType type) {
  FLICK_CHECK(w.ndim() == 2 && w.is_contiguous(),
              "AMX weights must be contiguous [N, K]: " + w.str());
  const DType want = type == AmxType::F32    ? DType::F32
                     : type == AmxType::BF16 ? DType::BF16
                                             : DType::I8;
  FLICK_CHECK(w.dtype == want, "AMX weights dtype: " + w.str());
  AmxWeights out;
  out.type = type;
  out.n = w.dim(0);
  out.k = w.dim(1);
  const int64_t step = amx_k_step(type);
  out.n_pad = amx_round_up(out.n, 32);
  out.k_pad = amx_round_up(out.k, step);
  const int64_t esz = amx_elem_bytes(type);
  const int64_t group = 4 / esz;  // k per 4-byte tile element (VNNI pair / quad, one f32)
  // Zero-filled: the padding past N and K stays zero.
  auto buffer = std::make_shared<HostBuffer>(out.bytes());
  auto* dst = static_cast<char*>(buffer->data());
  out.data = dst;
  out.storage = std::shared_ptr<const void>(buffer, dst);
  const auto* src = static_cast<const char*>(w.data);
  const int64_t steps = out.k_pad / step;
  parallel_for(out.n_pad / 32, [&](int64_t nb0, int64_t nb1) {
    for (int64_t nb = nb0; nb < nb1; ++nb)
      for (int64_t s = 0; s < steps; ++s)
        for (int64_t half = 0; half < 2; ++half) {
          char* tile = dst + ((nb * steps + s) * 2 + half) * 1024;
          // Tile row r, column j: the 4 bytes of k = s * step + r * group ..
          // + group - 1 of output channel n (zeros past N and K).
          for (int64_t j = 0; j < 16; ++j) {
            const int64_t n = nb * 32 + half * 16 + j;
            if (n >= out.n) break;
            for (int64_t r = 0; r < 16; ++r) {
              const int64_t k = s * step + r * group;
              if (k >= out.k) break;
              std::memcpy(tile + r * 64 + j * 4, src + (n * out.k + k) * esz,
                          static_cast<size_t>(std::min(group, out.k - k) * esz));
            }
          }
        }
  });
  return out;
}

std::vector<float> amx_unpack_f32(const AmxWeights& w) {
  FLICK_CHECK(w.type == AmxType::F32 || w.type == AmxType::BF16,
              "amx_unpack_f32: F32 or BF16 weights only");
  const int64_t esz = amx_elem_bytes(w.type), group = 4 / esz, step = amx_k_step(w.type);
  const int64_t steps = w.k_pad / step;
  const auto* src = static_cast<const char*>(w.data);
  std::vector<float> out(static_cast<size_t>(w.n * w.k));
  for (int64_t n = 0; n < w.n; ++n)
    for (int64_t k = 0; k < w.k; ++k) {
      // amx_pack_weights' placement of (n, k).
      const int64_t s = k / step, r = (k % step) / group;
      const char* e = src + ((n / 32 * steps + s) * 2 + (n % 32) / 16) * 1024 + r * 64 +
                      (n % 16) * 4 + (k % group) * esz;
      float v;
      if (w.type == AmxType::F32) {
        std::memcpy(&v, e, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, e, 2);
        v = bf16_to_f32(h);
      }
      out[static_cast<size_t>(n * w.k + k)] = v;
    }
  return out;
}

AmxWeights amx_adopt_weights(AmxType type, int64_t n, int64_t k, const void* data,
                             std::shared_ptr<const void> storage) {
  FLICK_CHECK(n > 0 && k > 0 && data != nullptr, "amx_adopt_weights: empty weights");
  AmxWeights out;
  out.type = type;
  out.n = n;
  out.k = k;
  out.n_pad = amx_round_up(n, 32);
  out.k_pad = amx_round_up(k, amx_k_step(type));
  out.data = data;
  out.storage = std::move(storage);
  return out;
}

void amx_pack_bf16(const ref::RowsView& x, const AmxActivations& out, AmxScratch& scratch) {
  FLICK_CHECK(out.type == AmxType::BF16 && x.rows == out.m && x.cols <= out.k_pad,
              "amx_pack_bf16: shapes");
  FLICK_CHECK(x.dtype == DType::F32 || x.dtype == DType::BF16,
              "amx_pack_bf16: x must be F32 or BF16");
  const int64_t bytes = x.cols * 2;
  if (x.dtype == DType::BF16) {
    pack_groups(out, bytes, scratch, 0,
                [&](int64_t m, char*) { return static_cast<const char*>(x.row(m)); });
    return;
  }
  const EltwiseKernels& ek = eltwise_kernels();
  pack_groups(out, bytes, scratch, static_cast<size_t>(bytes), [&](int64_t m, char* row) {
    ek.from_f32(static_cast<const float*>(x.row(m)), DType::BF16, row, x.cols);
    return static_cast<const char*>(row);
  });
}

void amx_pack_s8(const ref::RowsView& x, const AmxActivations& out, float* scales,
                 AmxScratch& scratch) {
  FLICK_CHECK(out.type == AmxType::S8 && x.rows == out.m && x.cols <= out.k_pad,
              "amx_pack_s8: shapes");
  pack_groups(out, x.cols, scratch, static_cast<size_t>(x.cols), [&](int64_t m, char* row) {
    scales[m] = quantize_row(x.row(m), x.dtype, x.cols, reinterpret_cast<uint8_t*>(row), 0);
    return static_cast<const char*>(row);
  });
}

void amx_pack_bytes(const uint8_t* rows, int64_t ld, int64_t k, uint8_t flip,
                    const AmxActivations& out, AmxScratch& scratch) {
  FLICK_CHECK(out.type == AmxType::S8 && k <= out.k_pad && k <= ld, "amx_pack_bytes: shapes");
  const auto* src = reinterpret_cast<const char*>(rows);
  if (flip == 0) {
    pack_groups(out, k, scratch, 0, [&](int64_t m, char*) { return src + m * ld; });
    return;
  }
  pack_groups(out, k, scratch, static_cast<size_t>(k), [&](int64_t m, char* row) {
    const char* r = src + m * ld;
    for (int64_t i = 0; i < k; ++i) row[i] = static_cast<char>(r[i] ^ flip);  // vectorized
    return static_cast<const char*>(row);
  });
}

void amx_gemm(const AmxActivations& a, const AmxWeights& w, const AmxEpilogue& e,
              AmxScratch& scratch) {
  FLICK_CHECK(amx_available(), "amx_gemm needs AMX (check amx_available() first)");
  FLICK_CHECK(w.type != AmxType::F32, "amx_gemm: F32 weights run on vnni_gemm");
  FLICK_CHECK(a.type == w.type && a.k_pad == w.k_pad && e.y.rows == a.m && e.y.cols == w.n,
              "amx_gemm: operand shapes");
  if (a.m == 0) return;
  const int64_t k_steps = w.k_pad / amx_k_step(w.type);
  const int64_t row_blocks = a.m_pad / 32, col_blocks = w.n_pad / 32;
  // Threads split the rows (each reads all of B, its own rows of A) when
  // there are at least two row blocks per thread, else the columns.
  const int64_t threads = num_threads();
  int64_t tm = 1, tn = 1;
  if (row_blocks >= 2 * threads) {
    tm = threads;
  } else {
    tn = std::min(threads, col_blocks);
  }
  const int64_t tasks = tm * tn;
  const amx::AmxBlocking blocking = blocking_for(k_steps, (col_blocks + tn - 1) / tn);
  scratch.prepare(tasks, amx::worker_scratch_bytes(blocking, k_steps, (row_blocks + tm - 1) / tm));
  parallel_for(tasks, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      amx::WorkerArgs args;
      args.type = w.type;
      args.a = a.data;
      args.b = w.data;
      args.c_scratch = scratch.slot(t);
      args.m = a.m;
      args.n = w.n;
      args.k_steps = k_steps;
      const int64_t im = t / tn, in = t % tn;
      args.mb0 = row_blocks * im / tm;
      args.mb1 = row_blocks * (im + 1) / tm;
      args.nb0 = col_blocks * in / tn;
      args.nb1 = col_blocks * (in + 1) / tn;
      args.blocking = blocking;
      args.epilogue = &e;
      if (args.mb0 < args.mb1 && args.nb0 < args.nb1) amx::gemm_worker(args);
    }
  });
}

AmxActivations amx_activations_for(const AmxWeights& w, int64_t m, AmxCallBuffers& buf) {
  AmxActivations a;
  a.type = w.type;
  a.m = m;
  a.m_pad = amx_round_up(m, 32);
  a.k_pad = w.k_pad;
  a.data = buf.reserve(buf.a, amx_activation_bytes(a.type, m, w.k));
  return a;
}

bool vnni_available() {
  // The epilogue is the elementwise ops' AVX-512 code (F, BW, VL, DQ).
  static const bool yes =
      eltwise_kernels_for(Isa::Avx512) != nullptr && __builtin_cpu_supports("avx512vnni");
  return yes;
}

bool avx512_bf16_available() {
  static const bool yes = vnni_available() && __builtin_cpu_supports("avx512bf16");
  return yes;
}

void vnni_compensation(const AmxWeights& w, int32_t* comp) {
  FLICK_CHECK(vnni_available() && w.type == AmxType::S8, "vnni_compensation: S8 weights on VNNI");
  vnni::compensation(w, comp);
}

void vnni_gemm(const void* a, int64_t lda_bytes, int64_t m, const AmxWeights& w,
               const int32_t* comp, const AmxEpilogue& e, AmxScratch& scratch) {
  const bool s8 = w.type == AmxType::S8;
  const bool isa = s8                       ? vnni_available()
                   : w.type == AmxType::F32 ? eltwise_kernels_for(Isa::Avx512) != nullptr
                                            : avx512_bf16_available();
  FLICK_CHECK(isa,
              "vnni_gemm needs AVX-512 VNNI (S8), BF16 (BF16) or F (F32) (check "
              "vnni_available() / avx512_bf16_available() / linear_uses_avx512_f32() first)");
  FLICK_CHECK(lda_bytes >= w.k_pad * amx_elem_bytes(w.type) && e.y.rows == m && e.y.cols == w.n &&
                  (comp != nullptr) == s8,
              "vnni_gemm: operand shapes");
  if (m == 0) return;
  const int64_t groups = (w.n_pad / 32 + 1) / 2;
  // Threads split the 64-column groups (each reads all of A, its own
  // weights) when there are at least two per thread, else the rows.
  const int64_t threads = num_threads();
  const bool split_cols = groups >= 2 * threads;
  const int64_t tiles = (m + 5) / 6;  // of 6 rows
  const int64_t tasks = split_cols ? threads : std::min(threads, tiles);
  // Blocking (measured on a Zen 4, bench/RESULTS.md): K blocks of up to 32
  // steps (2048 k of S8, 1024 of BF16, 512 of F32), so a group's weights (128 KB) stay in
  // L2 beside the row block's A panel (~384 KB); at K = 8960 S8 unblocked
  // panels (573 KB + 376 KB) thrashed L2 (71 % of peak against 85-88 % at
  // K = 1536).
  const int64_t steps = w.k_pad / amx_k_step(w.type);
  const int64_t steps_per_block = (steps + (steps + 31) / 32 - 1) / ((steps + 31) / 32);
  const int64_t rows_per_block =
      std::max<int64_t>(6, (int64_t{384} << 10) / (steps_per_block * 64) / 6 * 6);
  // The partial sums of a split K: rows_per_block x the task's columns.
  const int64_t max_groups = split_cols ? (groups + tasks - 1) / tasks : groups;
  const bool split_k = steps_per_block < steps;
  scratch.prepare(tasks, split_k ? static_cast<size_t>(rows_per_block * max_groups * 64) * 4 : 0);
  parallel_for(tasks, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      vnni::WorkerArgs args;
      args.a = static_cast<const char*>(a);
      args.lda = lda_bytes;
      args.w = &w;
      args.comp = comp;
      args.epilogue = &e;
      args.rows_per_block = rows_per_block;
      args.steps_per_block = steps_per_block;
      args.partial = split_k ? static_cast<int32_t*>(scratch.slot(t)) : nullptr;
      if (split_cols) {
        args.m0 = 0;
        args.m1 = m;
        args.g0 = groups * t / tasks;
        args.g1 = groups * (t + 1) / tasks;
      } else {
        args.m0 = std::min(m, 6 * (tiles * t / tasks));
        args.m1 = std::min(m, 6 * (tiles * (t + 1) / tasks));
        args.g0 = 0;
        args.g1 = groups;
      }
      if (args.m0 < args.m1 && args.g0 < args.g1) vnni::gemm_worker(args);
    }
  });
}

void vnni_gemm_float_rows(const ref::RowsView& x, const AmxWeights& w, const AmxEpilogue& e,
                          AmxCallBuffers& buf) {
  FLICK_CHECK((w.type == AmxType::F32 || w.type == AmxType::BF16) && x.cols == w.k &&
                  (x.dtype == DType::F32 || x.dtype == DType::BF16),
              "vnni_gemm_float_rows: operands");
  const DType t = w.type == AmxType::F32 ? DType::F32 : DType::BF16;
  const int64_t k = w.k, kp = w.k_pad, es = amx_elem_bytes(w.type);
  if (x.dtype == t && k == kp) {
    vnni_gemm(x.data, x.ld * es, x.rows, w, nullptr, e, buf.scratch);
    return;
  }
  auto* a = static_cast<char*>(buf.reserve(buf.a, static_cast<size_t>(x.rows * kp * es)));
  const EltwiseKernels& ek = eltwise_kernels();
  parallel_for(
      x.rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t m = begin; m < end; ++m) {
          char* row = a + m * kp * es;
          if (x.dtype == t) {
            std::memcpy(row, x.row(m), static_cast<size_t>(k * es));
          } else if (t == DType::BF16) {  // x is F32
            ek.from_f32(static_cast<const float*>(x.row(m)), DType::BF16, row, k);
          } else {  // x is BF16
            ek.to_f32(x.dtype, x.row(m), reinterpret_cast<float*>(row), k);
          }
          std::memset(row + k * es, 0, static_cast<size_t>((kp - k) * es));
        }
      },
      std::max<int64_t>(1, 8192 / k));
  vnni_gemm(a, kp * es, x.rows, w, nullptr, e, buf.scratch);
}

}  // namespace flick::cpu
