// Hand-written AMX GEMM for linear layers (BF16 and INT8), used on CPUs with
// AMX tiles (Sapphire Rapids and later) instead of oneDNN 2.6, which reaches
// only 13-34 % of the AMX peak at the DiT shapes (bench/RESULTS.md).
//
//   y[m, n] = act((acc[m, n] * col_scale[n]) * row_scale[m] + bias[n])
//   acc = sum_k a[m, k] * w[n, k]: bf16 x bf16 in fp32 (TDPBF16PS), or
//         s8 x s8 exactly in s32 (TDPBSSD)
//
// Both operands are packed into the tile layout: weights once at pack time,
// activations per call (converted to bf16, or quantized per row to s8, on
// the way). K and N are zero-padded to whole tiles, M to whole 32-row blocks;
// padding contributes exact zeros and is never stored.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/backend.h"
#include "runtime/ref/matmul_common.h"
#include "runtime/tensor.h"

namespace flick::cpu {

// True when this CPU has AMX-TILE, AMX-BF16 and AMX-INT8, AVX-512 (the
// epilogue and packing kernels) and the kernel granted this process the tile
// state (arch_prctl ARCH_REQ_XCOMP_PERM). Checked once, thread-safe.
bool amx_available();

// Whether cpu::linear runs BF16, FP8 and INT8 layers on this GEMM: AMX is
// available and oneDNN's ISA is not capped below AMX (ONEDNN_MAX_CPU_ISA,
// which the tests use to reach the oneDNN paths of other CPUs).
bool linear_uses_amx();

// Whether oneDNN's ISA is not capped below AMX: flick's own AMX kernels
// (the GEMM, the attention's) run only then, so ONEDNN_MAX_CPU_ISA=
// AVX512_CORE_BF16 makes the whole process behave as on a CPU without AMX.
bool amx_not_capped();

// F32 packs weights in the same tile layout for the AVX-512 FMA kernel only
// (vnni_gemm): AMX has no f32 product.
enum class AmxType { BF16, S8, F32 };

// Bytes of one tile row (64), of one element, and the K elements one tile
// step covers (64 bytes of a row).
inline constexpr int64_t kAmxRowBytes = 64;
inline int64_t amx_elem_bytes(AmxType t) {
  return t == AmxType::F32 ? 4 : t == AmxType::BF16 ? 2 : 1;
}
inline int64_t amx_k_step(AmxType t) { return kAmxRowBytes / amx_elem_bytes(t); }
inline int64_t amx_round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// Weights [N, K] in B-tile layout: per 32-column block, per K step, two 1 KB
// tiles (columns 0-15, 16-31) of 16 rows; row r of a tile holds, for each of
// its 16 columns, the 2 (bf16) or 4 (s8) consecutive k of step row r (the
// VNNI order TDPBF16PS / TDPBSSD read), or the one f32 k of row r (F32: a
// tile row is the 16-column vector an FMA reads). Block order [n / 32][k
// step][half].
struct AmxWeights {
  AmxType type = AmxType::BF16;
  int64_t n = 0, k = 0;          // logical
  int64_t n_pad = 0, k_pad = 0;  // multiples of 32 and of amx_k_step
  // n_pad * k_pad elements, read-only: a buffer of amx_pack_weights or a
  // mapped plan cache entry (amx_adopt_weights), kept alive by `storage`.
  const void* data = nullptr;
  std::shared_ptr<const void> storage;

  size_t bytes() const { return static_cast<size_t>(n_pad * k_pad * amx_elem_bytes(type)); }
};

// w: [N, K] row-major, BF16 for AmxType::BF16, I8 for S8, F32 for F32.
AmxWeights amx_pack_weights(const Tensor& w, AmxType type);

// The F32 or BF16 weights of w back as fp32 [N, K] row-major (exact).
std::vector<float> amx_unpack_f32(const AmxWeights& w);

// Weights packed earlier (amx_pack_weights' bytes for an [n, k] weight of
// `type`, from the plan cache) used in place: `data` must hold bytes() bytes
// and stay valid as long as `storage` lives. No copy.
AmxWeights amx_adopt_weights(AmxType type, int64_t n, int64_t k, const void* data,
                             std::shared_ptr<const void> storage);

// Activations in A-tile layout: per 32-row block, per K step, two 1 KB tiles
// (rows 0-15, 16-31) of 64-byte rows. m_pad = M rounded up to 32.
struct AmxActivations {
  AmxType type = AmxType::BF16;
  int64_t m = 0, m_pad = 0, k_pad = 0;
  void* data = nullptr;  // m_pad * k_pad elements (bf16 or s8), caller-owned
};
inline size_t amx_activation_bytes(AmxType type, int64_t m, int64_t k) {
  return static_cast<size_t>(amx_round_up(m, 32) * amx_round_up(k, amx_k_step(type)) *
                             amx_elem_bytes(type));
}

// Per-thread working memory of flick's GEMMs (AMX: staging rows while
// packing, C accumulators while multiplying; VNNI: the partial sums of a
// split K): grown on the first call, so a plan's later calls with the same
// shapes allocate nothing.
class AmxScratch {
 public:
  // `slots` buffers of at least `bytes` each, 4 KB aligned apart.
  void prepare(int64_t slots, size_t bytes);
  void* slot(int64_t i) const {
    return static_cast<char*>(buffer_.data()) + static_cast<size_t>(i) * stride_;
  }

 private:
  HostBuffer buffer_;
  size_t stride_ = 0;
};

// Per calling thread: the packed activations, row scales and per-worker
// scratch of the AMX GEMM. Shared by every layer and 1x1 conv the thread
// runs (one call at a time), sized by the largest; grows on first use only.
struct AmxCallBuffers {
  HostBuffer a, row_scales;
  AmxScratch scratch;
  void* reserve(HostBuffer& b, size_t bytes) {
    if (b.size() < bytes) b = HostBuffer(bytes);
    return b.data();
  }
};
AmxCallBuffers& amx_call_buffers();

// Both write every byte of the m_pad x k_pad buffer (padding as zeros).
// x (F32 or BF16 rows) -> bf16 tiles, rounded as ref::round_bf16 does.
void amx_pack_bf16(const ref::RowsView& x, const AmxActivations& out, AmxScratch& scratch);
// x -> s8 tiles quantized per row by ref::quantize_row_int8's rule
// (bit-exact); writes scales[m] for each row.
void amx_pack_s8(const ref::RowsView& x, const AmxActivations& out, float* scales,
                 AmxScratch& scratch);

// Activations already quantized to bytes (out.m rows of k bytes, `ld`
// bytes apart) -> s8 tiles, each byte XOR `flip` on the way (0x80 turns a
// u8 code q into the s8 q - 128; 0 copies s8 codes as they are).
void amx_pack_bytes(const uint8_t* rows, int64_t ld, int64_t k, uint8_t flip,
                    const AmxActivations& out, AmxScratch& scratch);

// What happens to the accumulator before the store (null pointers skip a
// step): acc * col_scale[n], * row_scale[m], + bias[n], act, stored to y as
// F32 or BF16 (round to nearest even). Each step rounds once in fp32, in this
// order, as runtime/ref does.
struct AmxEpilogue {
  const float* col_scale = nullptr;
  const float* row_scale = nullptr;
  const float* bias = nullptr;
  Activation act = Activation::None;
  ref::RowsView y;  // [M, N], F32 or BF16
};

// y = epilogue(a . w^T), multi-threaded on the flick thread pool.
void amx_gemm(const AmxActivations& a, const AmxWeights& w, const AmxEpilogue& e,
              AmxScratch& scratch);

// The A-tile buffer (buf.a) for m rows against w: type, sizes and data set.
AmxActivations amx_activations_for(const AmxWeights& w, int64_t m, AmxCallBuffers& buf);

// ---- the GEMMs on AVX-512 ----
// INT8 on AVX-512 VNNI (vpdpbusd) and BF16 on AVX-512 BF16 (vdpbf16ps),
// where there is no AMX, and F32 on AVX-512 FMA everywhere: they read the
// same packed weights as the AMX kernels (AmxWeights: a 64-byte tile row is
// exactly the weight operand of each instruction) and run the same epilogue,
// so INT8 outputs are bit-identical to amx_gemm's.

// True when this CPU has AVX-512 F / BW / VL / DQ and VNNI.
bool vnni_available();
// vnni_available() and AVX-512 BF16 (vdpbf16ps): Zen 4 / 5, Cooper Lake.
bool avx512_bf16_available();

// Whether cpu::linear runs INT8 layers on vnni_gemm: no AMX GEMM
// (linear_uses_amx() is false: no AMX, or oneDNN capped below it), and
// vnni_available() with oneDNN's ISA not capped below AVX-512 VNNI
// (ONEDNN_MAX_CPU_ISA=AVX512_CORE or lower leaves no INT8 linear, as on a
// CPU without VNNI).
bool linear_uses_vnni();
// Whether cpu::linear runs BF16 and FP8 layers on vnni_gemm: no AMX GEMM,
// avx512_bf16_available() and oneDNN not capped below AVX512_CORE_BF16 (a
// cap below it puts them on oneDNN, as a CPU without AVX-512 BF16 does).
bool linear_uses_avx512_bf16();

// Whether cpu::linear runs F32 layers on vnni_gemm's FMA kernel: AVX-512
// (F, BW, VL, DQ) and oneDNN's ISA not capped below AVX512_CORE (a cap puts
// them on oneDNN's matmul, as a CPU with AVX2 only does).
bool linear_uses_avx512_f32();

// vpdpbusd multiplies u8 by s8: activations go in as u8 = q + kVnniOffset.
inline constexpr int kVnniOffset = 128;

// comp[n] = kVnniOffset * sum_k w[n, k] for the w.n_pad columns of S8
// weights: what the offset adds to each column's dot product.
void vnni_compensation(const AmxWeights& w, int32_t* comp);

// y = epilogue(a . w^T), multi-threaded on the flick pool; scratch holds the
// partial sums when K is split. a: m rows, lda_bytes apart, of
//  - S8 weights: u8 = q + kVnniOffset, with comp from vnni_compensation:
//    exact s32 sums;
//  - BF16 weights: bf16, comp null: fp32 sums;
//  - F32 weights: f32, comp null: fp32 sums (one FMA per product).
// Each row holds w.k_pad elements; those past w.k meet zero weights (S8: any
// value; BF16 / F32: they must be finite, zeros in practice).
void vnni_gemm(const void* a, int64_t lda_bytes, int64_t m, const AmxWeights& w,
               const int32_t* comp, const AmxEpilogue& e, AmxScratch& scratch);

// vnni_gemm of float rows x (F32 or BF16) against BF16 or F32 weights: the
// rows are read in place when they are of the weights' type and K fills
// whole steps, else converted into buf.a as dense rows of k_pad, zero-padded
// (to bf16 rounded as ref::round_bf16; to f32 exactly).
void vnni_gemm_float_rows(const ref::RowsView& x, const AmxWeights& w, const AmxEpilogue& e,
                          AmxCallBuffers& buf);

}  // namespace flick::cpu
