#include "runtime/cuda/cudnn_graph.h"

#include <utility>

namespace flick::cuda {

std::string cudnn_error(cudnnStatus_t s, const char* what) {
  char msg[512] = {};
  cudnnGetLastErrorString(msg, sizeof msg);
  return std::string(what) + ": " + cudnnGetErrorString(s) +
         (msg[0] ? std::string(" (") + msg + ")" : "");
}

CudnnDesc::CudnnDesc(cudnnBackendDescriptorType_t type) {
  status_ = cudnnBackendCreateDescriptor(type, &d_);
  if (status_ != CUDNN_STATUS_SUCCESS) d_ = nullptr;
}
CudnnDesc& CudnnDesc::operator=(CudnnDesc&& o) noexcept {
  std::swap(d_, o.d_);
  std::swap(status_, o.status_);
  return *this;
}
CudnnDesc::~CudnnDesc() {
  if (d_) cudnnBackendDestroyDescriptor(d_);
}
CudnnDesc& CudnnDesc::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                          int64_t n, const void* values) {
  if (status_ == CUDNN_STATUS_SUCCESS && d_)
    status_ = cudnnBackendSetAttribute(d_, name, type, n, values);
  return *this;
}
cudnnStatus_t CudnnDesc::finalize() {
  if (status_ == CUDNN_STATUS_SUCCESS && d_) status_ = cudnnBackendFinalize(d_);
  return d_ ? status_ : CUDNN_STATUS_ALLOC_FAILED;
}

namespace {

CudnnDesc tensor(int64_t uid, cudnnDataType_t dt, const std::vector<int64_t>& dims,
                 const std::vector<int64_t>& strides, bool by_value = false) {
  CudnnDesc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t align = 16;
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()),
           dims.data())
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()),
           strides.data())
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  if (by_value) {
    const bool v = true;
    t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &v);
  }
  t.finalize();
  return t;
}

Expected<CudnnGraph> finish(CudnnGraph g, CudnnDesc op, cudnnHandle_t handle, const char* what) {
  for (const CudnnDesc& p : g.parts)
    if (!p.ok()) return internal_error(cudnn_error(p.status(), what));
  if (op.finalize() != CUDNN_STATUS_SUCCESS) return internal_error(cudnn_error(op.status(), what));
  g.graph = CudnnDesc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  cudnnBackendDescriptor_t o = op.get();
  g.graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o);
  if (handle) g.graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  g.parts.push_back(std::move(op));
  if (g.graph.finalize() != CUDNN_STATUS_SUCCESS)
    return internal_error(cudnn_error(g.graph.status(), what));
  return g;
}

}  // namespace

std::array<int64_t, 4> bshd_strides(int64_t h, int64_t s, int64_t d) {
  (void)s;
  return {s * h * d, d, h * d, 1};
}

Expected<CudnnGraph> sdpa_graph(const SdpaShape& s, cudnnHandle_t handle) {
  CudnnGraph g;
  auto v4 = [](const std::array<int64_t, 4>& a) {
    return std::vector<int64_t>(a.begin(), a.end());
  };
  g.parts.push_back(tensor(kSdpaQ, s.dtype, {s.b, s.h, s.s_q, s.d}, v4(s.q_stride)));
  g.parts.push_back(tensor(kSdpaK, s.dtype, {s.b, s.h, s.s_kv, s.d}, v4(s.kv_stride)));
  g.parts.push_back(tensor(kSdpaV, s.dtype, {s.b, s.h, s.s_kv, s.d}, v4(s.kv_stride)));
  g.parts.push_back(tensor(kSdpaO, s.dtype, {s.b, s.h, s.s_q, s.d}, v4(s.o_stride)));
  g.parts.push_back(tensor(kSdpaScale, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, true));
  CudnnDesc op(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
  const cudnnBackendAttributeName_t names[] = {
      CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC,
      CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC,
      CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC};
  for (size_t i = 0; i < 5; ++i) {
    cudnnBackendDescriptor_t t = g.parts[i].get();
    op.set(names[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
  }
  return finish(std::move(g), std::move(op), handle, "cuDNN SDPA graph");
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

std::vector<int64_t> channels_last_strides(const std::vector<int64_t>& dims) {
  // Storage order n, *spatial, c.
  std::vector<int64_t> s(dims.size());
  int64_t acc = 1;
  s[1] = acc;
  acc *= dims[1];
  for (size_t i = dims.size(); i-- > 2;) {
    s[i] = acc;
    acc *= dims[i];
  }
  s[0] = acc;
  return s;
}

Expected<CudnnGraph> conv_graph(const ConvShape& s, cudnnHandle_t handle) {
  CudnnGraph g;
  g.parts.push_back(tensor(kConvX, s.dtype, s.x_dims, s.x_strides));
  g.parts.push_back(tensor(kConvW, s.dtype, s.w_dims, s.w_strides));
  g.parts.push_back(tensor(kConvY, s.dtype, s.y_dims, s.y_strides));
  CudnnDesc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const int64_t nd = s.spatial_dims;
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nd)
      .set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode)
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, nd, s.pre_pad.data())
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, nd, s.post_pad.data())
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, nd, s.dilation.data())
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, nd, s.stride.data());
  conv.finalize();
  CudnnDesc op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  const float alpha = 1.f, beta = 0.f;
  cudnnBackendDescriptor_t x = g.parts[0].get(), w = g.parts[1].get(), y = g.parts[2].get(),
                           c = conv.get();
  op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
  g.parts.push_back(std::move(conv));
  return finish(std::move(g), std::move(op), handle, "cuDNN conv graph");
}

Expected<CudnnDesc> device_prop_from_json(const std::string& json) {
  CudnnDesc p(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  p.set(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
        static_cast<int64_t>(json.size()), json.data());
  if (p.finalize() != CUDNN_STATUS_SUCCESS)
    return internal_error(cudnn_error(p.status(), "cuDNN device properties from JSON"));
  return p;
}

Expected<std::vector<CudnnDesc>> engine_configs(const CudnnGraph& g, const CudnnDesc* device_prop) {
  CudnnDesc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  cudnnBackendDescriptor_t graph = g.graph.get();
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (device_prop) {
    cudnnBackendDescriptor_t p = device_prop->get();
    heur.set(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p);
  }
  if (heur.finalize() != CUDNN_STATUS_SUCCESS)
    return internal_error(cudnn_error(heur.status(), "cuDNN heuristics"));
  int64_t count = 0;
  cudnnStatus_t st = cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
  if (st != CUDNN_STATUS_SUCCESS) return internal_error(cudnn_error(st, "cuDNN heuristics count"));
  std::vector<CudnnDesc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(cfgs.back().get());
  }
  if (count > 0) {
    int64_t got = 0;
    st = cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data());
    if (st != CUDNN_STATUS_SUCCESS) return internal_error(cudnn_error(st, "cuDNN heuristics"));
    cfgs.resize(static_cast<size_t>(got));
  }
  return cfgs;
}

}  // namespace flick::cuda
