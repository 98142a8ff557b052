// cuDNN 9 backend-API graphs of the CUDA backend: SDPA (the unified
// OPERATION_SDPA_FWD op, cuDNN >= 9.13) and N-d convolution forward. Plain
// host code (g++): the graphs are built and asked for engine configs without
// a GPU too, against a device-property JSON (the deviceless probe of
// shared/research/cuda-backend.md, section 0.1), so CI checks that every graph
// the models build has an engine on sm_80 / sm_89 / sm_90.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace flick::cuda {

// One backend descriptor, destroyed with its owner.
class CudnnDesc {
 public:
  CudnnDesc() = default;
  explicit CudnnDesc(cudnnBackendDescriptorType_t type);
  CudnnDesc(CudnnDesc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  CudnnDesc& operator=(CudnnDesc&& o) noexcept;
  CudnnDesc(const CudnnDesc&) = delete;
  CudnnDesc& operator=(const CudnnDesc&) = delete;
  ~CudnnDesc();
  cudnnBackendDescriptor_t get() const { return d_; }
  bool ok() const { return d_ != nullptr && status_ == CUDNN_STATUS_SUCCESS; }
  cudnnStatus_t status() const { return status_; }
  // Records the first failing call (the builders check once, at the end).
  CudnnDesc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n,
                 const void* values);
  cudnnStatus_t finalize();

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
  cudnnStatus_t status_ = CUDNN_STATUS_SUCCESS;
};

// A finalized operation graph together with the descriptors it references.
struct CudnnGraph {
  std::vector<CudnnDesc> parts;
  CudnnDesc graph;
};

// Attention over BSHD tensors [B, S, H, D] (the Backend's layout, any head
// stride): out = softmax(q k^T * scale) v, no mask (the unified op of 9.19
// has none). Tensor uids: 1 q, 2 k, 3 v, 4 out, 5 scale (by value).
struct SdpaShape {
  int64_t b = 1, h = 1, s_q = 1, s_kv = 1, d = 64;
  // Strides in elements of q/out and k/v as [B, H, S, D].
  std::array<int64_t, 4> q_stride{}, kv_stride{}, o_stride{};
  cudnnDataType_t dtype = CUDNN_DATA_BFLOAT16;
};
// Contiguous BSHD strides for a shape.
std::array<int64_t, 4> bshd_strides(int64_t h, int64_t s, int64_t d);
enum : int64_t { kSdpaQ = 1, kSdpaK, kSdpaV, kSdpaO, kSdpaScale };
Expected<CudnnGraph> sdpa_graph(const SdpaShape& s, cudnnHandle_t handle);

// Convolution forward, spatial_dims 2 or 3, tensors {n, c, *spatial} with
// the given strides (NCDHW or channels-last), weights {k, c/groups, *kernel}.
// Uids: 1 x, 2 w, 3 y.
struct ConvShape {
  int spatial_dims = 3;
  std::vector<int64_t> x_dims, x_strides, w_dims, w_strides, y_dims, y_strides;
  std::vector<int64_t> pre_pad, post_pad, stride, dilation;
  cudnnDataType_t dtype = CUDNN_DATA_BFLOAT16;
};
enum : int64_t { kConvX = 1, kConvW, kConvY };
Expected<CudnnGraph> conv_graph(const ConvShape& s, cudnnHandle_t handle);

// Row-major (channels-last) strides of dims given in {n, c, *spatial} order.
std::vector<int64_t> channels_last_strides(const std::vector<int64_t>& dims);
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims);

// A device-property descriptor from cuDNN's JSON form (for heuristics
// without a GPU); the Expected holds cuDNN's error otherwise.
Expected<CudnnDesc> device_prop_from_json(const std::string& json);
// Engine configs heuristics mode A offers for the graph (on the handle's
// device, or on `device_prop` when given).
Expected<std::vector<CudnnDesc>> engine_configs(const CudnnGraph& g, const CudnnDesc* device_prop);

std::string cudnn_error(cudnnStatus_t s, const char* what);

}  // namespace flick::cuda
