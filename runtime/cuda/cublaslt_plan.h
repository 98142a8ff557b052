// The cuBLASLt descriptors of one GEMM (column-major D = op(A) op(B)),
// built without a handle: the CUDA backend runs them (cuda_backend.cu) and
// the deviceless probe (cudnn_probe.cpp) builds them for the models' shapes,
// so CI catches a rejected attribute or layout (cuBLASLt checks those
// without a GPU; heuristics and the GEMM itself need one).
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <memory>

#include "runtime/status.h"

namespace flick::cuda {

// One operand as stored: rows x cols column-major with leading dimension
// ld, batch stride, and whether the GEMM reads it transposed.
struct LtOperand {
  const void* p;
  cudaDataType_t type;
  bool trans;
  int64_t rows, cols, ld, batch_stride;
};

struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  bool imma = false;  // int8 x int8 -> int32: alpha/beta are int32
  LtDescs() = default;
  LtDescs(const LtDescs&) = delete;
  LtDescs& operator=(const LtDescs&) = delete;
  ~LtDescs();
};

// D (m x n, ld_d) of d_type: CUDA_R_32I selects IMMA (compute and scale
// 32I), anything else fp32 compute and scale. batch > 1: strided batches.
// bias_epilogue: D = op(A) op(B) + bias[row] in fp32 before D's one rounding,
// bias an fp32 vector of m whose pointer each call sets
// (CUBLASLT_MATMUL_DESC_BIAS_POINTER). outer_vec_scales (FP8 on sm_90): the
// product's (i, j) element times a_scale[i] * b_scale[j], fp32 vectors of m
// and n (A_SCALE_MODE / B_SCALE_MODE OUTER_VEC_32F; pointers set per call).
Expected<std::unique_ptr<LtDescs>> lt_descs(const LtOperand& a, const LtOperand& b,
                                            cudaDataType_t d_type, int64_t m, int64_t n,
                                            int64_t ld_d, int64_t d_batch_stride, int batch,
                                            size_t workspace_bytes, bool bias_epilogue = false,
                                            bool outer_vec_scales = false);

}  // namespace flick::cuda
