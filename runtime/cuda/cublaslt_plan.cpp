#include "runtime/cuda/cublaslt_plan.h"

#include <string>

namespace flick::cuda {

LtDescs::~LtDescs() {
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (d) cublasLtMatrixLayoutDestroy(d);
  if (op) cublasLtMatmulDescDestroy(op);
}

Expected<std::unique_ptr<LtDescs>> lt_descs(const LtOperand& a, const LtOperand& b,
                                            cudaDataType_t d_type, int64_t m, int64_t n,
                                            int64_t ld_d, int64_t d_batch_stride, int batch,
                                            size_t workspace_bytes, bool bias_epilogue,
                                            bool outer_vec_scales) {
  auto r = std::make_unique<LtDescs>();
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  const char* failed = nullptr;
  auto call = [&](cublasStatus_t s, const char* what) {
    if (st == CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_SUCCESS) st = s, failed = what;
  };
  r->imma = d_type == CUDA_R_32I;
  call(cublasLtMatmulDescCreate(&r->op, r->imma ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F,
                                r->imma ? CUDA_R_32I : CUDA_R_32F),
       "MatmulDescCreate");
  const cublasOperation_t ta = a.trans ? CUBLAS_OP_T : CUBLAS_OP_N,
                          tb = b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (r->op) {
    call(cublasLtMatmulDescSetAttribute(r->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
         "TRANSA");
    call(cublasLtMatmulDescSetAttribute(r->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
         "TRANSB");
    if (bias_epilogue) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType_t bias_type = CUDA_R_32F;
      call(cublasLtMatmulDescSetAttribute(r->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
           "EPILOGUE");
      call(cublasLtMatmulDescSetAttribute(r->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                          sizeof bias_type),
           "BIAS_DATA_TYPE");
    }
    if (outer_vec_scales) {
      const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      call(cublasLtMatmulDescSetAttribute(r->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode,
                                          sizeof mode),
           "A_SCALE_MODE");
      call(cublasLtMatmulDescSetAttribute(r->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode,
                                          sizeof mode),
           "B_SCALE_MODE");
    }
  }
  auto layout = [&](cublasLtMatrixLayout_t* l, cudaDataType_t t, int64_t rows, int64_t cols,
                    int64_t ld, int64_t bs) {
    call(cublasLtMatrixLayoutCreate(l, t, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols),
                                    ld),
         "MatrixLayoutCreate");
    if (batch > 1 && *l) {
      const int32_t count = batch;
      call(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                            sizeof count),
           "BATCH_COUNT");
      call(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &bs,
                                            sizeof bs),
           "STRIDED_BATCH_OFFSET");
    }
  };
  layout(&r->a, a.type, a.rows, a.cols, a.ld, a.batch_stride);
  layout(&r->b, b.type, b.rows, b.cols, b.ld, b.batch_stride);
  layout(&r->d, d_type, m, n, ld_d, d_batch_stride);
  call(cublasLtMatmulPreferenceCreate(&r->pref), "PreferenceCreate");
  const uint64_t wsb = workspace_bytes;
  if (r->pref)
    call(cublasLtMatmulPreferenceSetAttribute(r->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &wsb, sizeof wsb),
         "MAX_WORKSPACE_BYTES");
  if (st != CUBLAS_STATUS_SUCCESS)
    return internal_error(std::string("cuBLASLt ") + failed + ": " + cublasLtGetStatusName(st));
  return r;
}

}  // namespace flick::cuda
