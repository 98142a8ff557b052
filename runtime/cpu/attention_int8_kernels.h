// Internal to the CPU INT8 attention op (runtime/cpu/attention_int8*.cpp and
// its tests). The problem is attention's (attention_kernels.h): same argument
// checks, masks and work items; what differs is the arithmetic, fixed by
// Backend::attention_int8 (runtime/backend.h):
//   K smoothed by its fp32 mean over keys (per batch, head, dim), then Q and
//   the smoothed K quantized per row (token) to symmetric INT8, S = the exact
//   integer dot times both row scales, fp32 online softmax, P rounded to bf16
//   for a P.V product over V rounded to bf16 with fp32 accumulation.
// The quantization is the plain functions below (compiled without AVX-512),
// shared by every kernel (the AVX-512 and AMX ones through their vectorised
// twins, bit-identical), so all kernels see the same INT8 operands as the
// reference op, bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/cpu/attention_kernels.h"

namespace flick::cpu::attention_int8_detail {

using attention_detail::bias_at;
using attention_detail::Kernel;
using attention_detail::Problem;
using attention_detail::row_bias;
using attention_detail::RowBias;

// Smoothed, quantized K of (b, h): kq [Lk][ldk] int8 (zero past head_dim),
// kscale[Lk]; mean[head_dim] is scratch.
void quantize_k(const Problem& p, int64_t b, int64_t h, int64_t ldk, int8_t* kq, float* kscale,
                float* mean);
// Quantized Q rows [row0, row0 + rows) of (b, h): qq [rows][ldq] int8 (zero past
// head_dim), qscale[rows]. row: fp32 scratch of head_dim.
void quantize_q(const Problem& p, int64_t b, int64_t h, int64_t row0, int64_t rows, int64_t ldq,
                int8_t* qq, float* qscale, float* row);

// quantize_k / quantize_q on AVX-512 (F/BW/VL/DQ), bit-identical to them, for
// head_dim <= 512 (the kernels that use them accept no more): the same fp32
// and double operations per element, lane by lane. The AVX-512 and AMX kernels
// quantize with these.
// rows: scratch of Lk * head_dim floats.
void quantize_k_avx512(const Problem& p, int64_t b, int64_t h, int64_t ldk, int8_t* kq,
                       float* kscale, float* mean, float* rows);
void quantize_q_avx512(const Problem& p, int64_t b, int64_t h, int64_t row0, int64_t rows,
                       int64_t ldq, int8_t* qq, float* qscale);

// AVX-512 VNNI kernel: S on vpdpbusd (Q as u8 = q + 128, compensated by
// 128 * sum_d K[j, d]), P.V on vdpbf16ps. Needs AVX-512 F/BW/VL/DQ/BF16/VNNI.
extern const Kernel kInt8Avx512Kernel;
// AMX kernel (attention_int8_amx.cpp): S^T = K Q^T on tdpbssd over the same
// s8 operands, P.V on tdpbf16ps, the softmax in AVX-512. Needs
// amx_int8_supported().
extern const Kernel kInt8AmxKernel;
// Portable kernel (baseline ISA, GCC-vectorised loops): the same arithmetic.
extern const Kernel kInt8PortableKernel;

bool avx512_vnni_supported();
// True when the host runs kInt8AmxKernel: avx512_vnni_supported(), AMX-TILE,
// AMX-INT8 and AMX-BF16, and Linux granted this process the tile data state
// (cpu::amx_available()).
bool amx_int8_supported();
const Kernel& select_kernel(const Problem& p);
// cpu::attention_int8 with a chosen kernel (tests and benchmarks).
void attention_int8_with(const Kernel& kernel, const Tensor& q, const Tensor& k, const Tensor& v,
                         Tensor& out, const AttentionParams& p);

}  // namespace flick::cpu::attention_int8_detail
