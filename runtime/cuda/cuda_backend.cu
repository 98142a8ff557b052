// The CUDA backend: libflick_cuda.so, loaded by load_cuda_backend().
//  - linear / matmul: cuBLASLt (TN: D^T = W X^T, fp32 accumulation);
//    Precision::INT8 as W8A8 (per-row activation quantisation, IMMA int32
//    GEMM, our scale epilogue); Precision::FP8 with E4M3 weights (K, N
//    multiples of 16) as W8A8 FP8 (E4M3 rows, FP8 GEMM into fp32, the same
//    epilogue); other FP8 / I8 weights dequantised to BF16 once at pack time
//    (weight-only, as the CPU backend runs FP8). Without an activation (or
//    RoundGeluTanh, or an F32 output) cuBLASLt writes y through its bias
//    epilogue; otherwise bias and activation in our epilogue functor (exact
//    Backend semantics, with no dependence on cuBLASLt's GELU formula).
//  - attention: cuDNN's unified SDPA op (BF16, head dim <= 256, d % 8 == 0,
//    no mask), else the GEMM + masked-softmax fallback of functor_ops.h.
//  - conv: cuDNN's backend graph API (conv forward), bias + activation in
//    the epilogue functor.
//  - every other op: the functors of functors.h behind CudaLauncher.
// Ops take Device::CUDA tensors. Work is queued on the backend's stream;
// an op returns without waiting (the caller synchronises on readback).
// The functor bodies are tested on the CPU (tests/cuda_host), the launches
// and library calls by tests/cuda on a GPU (first run on an H200 in session
// 12: bench/RESULTS.md "CUDA backend on an H200").
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cuda/cublaslt_plan.h"
#include "runtime/cuda/cudnn_graph.h"
#include "runtime/cuda/device_arena.h"
#include "runtime/cuda/functor_ops.h"
#include "runtime/cuda/gemm_map.h"
#include "runtime/cuda/launch_cuda.cuh"
#include "runtime/log.h"

namespace flick::cuda {
namespace {

void lt_check(cublasStatus_t s, const char* what) {
  FLICK_CHECK(s == CUBLAS_STATUS_SUCCESS,
              std::string("cuBLASLt ") + what + ": status " + std::to_string(static_cast<int>(s)));
}
void dnn_check(cudnnStatus_t s, const char* what) {
  FLICK_CHECK(s == CUDNN_STATUS_SUCCESS, cudnn_error(s, what));
}

void check_device(const Tensor& t, const char* op) {
  FLICK_CHECK(t.empty() || t.device == Device::CUDA,
              std::string(op) + ": the CUDA backend takes device tensors, got " + t.str());
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    case DType::F8_E4M3: return CUDA_R_8F_E4M3;
    default: FLICK_CHECK(false, "cuBLASLt: unsupported dtype " + std::string(dtype_name(t)));
  }
  return CUDA_R_32F;
}

// Upload a host tensor (any dtype) as a contiguous device buffer of `to`.
DeviceBlock upload(const Tensor& t, DType to) {
  FLICK_CHECK(t.device == Device::CPU, "upload: " + t.str() + " is not in host memory");
  const int64_t n = t.numel();
  std::vector<char> host(static_cast<size_t>(n) * dtype_size(to));
  if (t.is_contiguous()) {
    convert(t.dtype, t.data, to, host.data(), n);
  } else {
    for (int64_t i = 0; i < n; ++i) {
      int64_t off = 0, r = i;
      for (int d = t.ndim() - 1; d >= 0; --d) {
        off += r % t.dim(d) * t.stride(d);
        r /= t.dim(d);
      }
      store_from_f32(to, host.data(), i, load_as_f32(t.dtype, t.data, off));
    }
  }
  DeviceBlock b(host.size());
  cuda_check(cudaMemcpy(b.get(), host.data(), host.size(), cudaMemcpyHostToDevice), "upload");
  // A pageable copy may still be in flight when cudaMemcpy returns, and the
  // backend's stream does not wait for the legacy stream: finish it (load
  // time only).
  cuda_check(cudaDeviceSynchronize(), "upload");
  return b;
}

class CudaLinear : public PackedLinear {
 public:
  int64_t n = 0, k = 0;
  Precision prec = Precision::BF16;
  DType wdt = DType::BF16;  // of w on the device: BF16, or F32 for Precision::F32
  DeviceBlock w, bias;      // w [N, K]; bias F32 [N] or empty
  Tensor bias_view;
  // Precision::INT8 with I8 weights: W8A8 as the reference (activations
  // quantised per row, int32 accumulation through IMMA), w int8 and w_scale
  // F32 [N] (a per-tensor scale expanded).
  bool w8a8 = false;
  // Precision::FP8 with E4M3 weights (K and N multiples of 16, cuBLASLt's
  // FP8 alignment): W8A8 FP8, activations quantised per row to E4M3
  // (scale amax / 448), an FP8 GEMM with unit scales into fp32, the same
  // per-channel x per-row epilogue as INT8 (cuda-backend.md: exact, the
  // scales factor out of the sum).
  bool w8a8_fp8 = false;
  DeviceBlock w_scale;
  int64_t in_features() const override { return k; }
  int64_t out_features() const override { return n; }
  Precision precision() const override { return prec; }
};

class CudaConv : public PackedConv {
 public:
  ConvDesc d;  // host tensors dropped: w/bias views point at device memory
  DeviceBlock w, bias;
  const ConvDesc& desc() const override { return d; }
};

class CudaBackend final : public Backend {
 public:
  CudaBackend() = default;
  Status init() {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
      return unavailable(std::string("no CUDA driver or device: ") + cudaGetErrorString(e));
    if (count == 0) return unavailable("no CUDA device");
    cudaDeviceProp prop{};
    cuda_check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    if (prop.major < 8)
      return unavailable(std::string(prop.name) + " is sm_" +
                         std::to_string(prop.major * 10 + prop.minor) +
                         "; the CUDA backend needs sm_80 or newer (BF16 tensor cores)");
    launch_.sm_count = prop.multiProcessorCount;
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    launch_.stream = stream_;
    if (cublasLtCreate(&lt_) != CUBLAS_STATUS_SUCCESS) return unavailable("cublasLtCreate failed");
    if (cudnnCreate(&dnn_) != CUDNN_STATUS_SUCCESS) return unavailable("cudnnCreate failed");
    dnn_check(cudnnSetStream(dnn_, stream_), "cudnnSetStream");
    workspace_ = DeviceBlock(kWorkspace);  // cuBLASLt's: 32 MiB, NVIDIA's Hopper figure
    return ok_status();
  }
  ~CudaBackend() override {
    if (stream_) cudaStreamSynchronize(stream_);
    sdpa_plans_.clear();
    conv_plans_.clear();
    lt_plans_.clear();
    if (dnn_) cudnnDestroy(dnn_);
    if (lt_) cublasLtDestroy(lt_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  const char* name() const override { return "cuda"; }

  // ---- matmul family ----
  std::unique_ptr<PackedLinear> pack_linear(const LinearDesc& d) override {
    FLICK_CHECK(d.w.ndim() == 2, "pack_linear: w must be [N, K], got " + d.w.str());
    auto p = std::make_unique<CudaLinear>();
    p->n = d.w.dim(0), p->k = d.w.dim(1), p->prec = d.precision;
    // W8A8: int8 through IMMA (CUBLASLT_ORDER_COL, TN: K a multiple of 4), or
    // FP8 where K and N are multiples of 16 (cuBLASLt's FP8 alignment).
    const bool int8 = d.w.dtype == DType::I8 && d.precision == Precision::INT8;
    const bool fp8 = d.w.dtype == DType::F8_E4M3 && d.precision == Precision::FP8 &&
                     p->k % 16 == 0 && p->n % 16 == 0;
    if (int8 || fp8) {
      FLICK_CHECK(d.w_scale.dtype == DType::F32 && d.w_scale.ndim() == 1 &&
                      (d.w_scale.dim(0) == p->n || d.w_scale.dim(0) == 1),
                  "pack_linear: w_scale must be F32 [N] or [1], got " + d.w_scale.str());
      FLICK_CHECK(p->k % 4 == 0, "pack_linear: INT8 on the CUDA backend needs K % 4 == 0, got " +
                                     std::to_string(p->k));
      p->w8a8 = int8;
      p->w8a8_fp8 = fp8;
      p->wdt = d.w.dtype;
      p->w = upload(d.w, d.w.dtype);
      std::vector<float> sc(static_cast<size_t>(p->n));  // a per-tensor scale expanded
      for (int64_t i = 0; i < p->n; ++i)
        sc[static_cast<size_t>(i)] = load_as_f32(
            DType::F32, d.w_scale.data, d.w_scale.dim(0) == 1 ? 0 : i * d.w_scale.stride(0));
      p->w_scale = upload(Tensor::view(sc.data(), DType::F32, {p->n}), DType::F32);
    } else if (d.w.dtype == DType::I8 || d.w.dtype == DType::F8_E4M3) {
      // Weight-only: dequantise once into BF16 (FP8 weights at another
      // precision or with unaligned K / N; I8 weights outside INT8).
      FLICK_CHECK(d.w_scale.dtype == DType::F32 && d.w_scale.ndim() == 1 &&
                      (d.w_scale.dim(0) == p->n || d.w_scale.dim(0) == 1),
                  "pack_linear: w_scale must be F32 [N] or [1], got " + d.w_scale.str());
      DeviceBlock raw = upload(d.w, d.w.dtype), sc = upload(d.w_scale, DType::F32);
      p->w = DeviceBlock(static_cast<size_t>(p->n * p->k) * 2);
      launch_.for_each(p->n * p->k,
                       DequantWeight{raw.get(), d.w.dtype, static_cast<const float*>(sc.get()),
                                     d.w_scale.dim(0), p->k, static_cast<uint16_t*>(p->w.get())});
      cuda_check(cudaStreamSynchronize(stream_), "dequantise weight");  // raw, sc freed next
      p->wdt = DType::BF16;
    } else {
      p->wdt = d.precision == Precision::F32 ? DType::F32 : DType::BF16;
      p->w = upload(d.w, p->wdt);
    }
    if (!d.bias.empty()) {
      p->bias = upload(d.bias, DType::F32);
      p->bias_view = Tensor::view(p->bias.get(), DType::F32, {p->n}, Device::CUDA);
    }
    return p;
  }

  void linear(const Tensor& x, const PackedLinear& pw, Tensor& y, Activation act) override {
    check_device(x, "linear");
    check_device(y, "linear");
    const auto& w = static_cast<const CudaLinear&>(pw);
    FLICK_CHECK(x.dim(-1) == w.k && y.dim(-1) == w.n && x.stride(-1) == 1 && y.stride(-1) == 1,
                "linear: x " + x.str() + ", y " + y.str() + " for a [" + std::to_string(w.n) +
                    ", " + std::to_string(w.k) + "] weight (unit last strides)");
    const int64_t M = x.numel() / w.k;
    const int64_t ldx = rows_stride(x, "linear x"), ldy = rows_stride(y, "linear y");
    if (w.w8a8 || w.w8a8_fp8) {
      linear_w8a8(x, w, y, act, M, ldy);
      return;
    }
    // x in the weight's type (cuBLASLt takes A and B of one type).
    const void* xp = x.data;
    int64_t ld = ldx;
    if (x.dtype != w.wdt) {
      void* cx = input_scratch_.get(static_cast<size_t>(M * w.k) * dtype_size(w.wdt));
      Tensor dst = Tensor::view(cx, w.wdt, x.shape, Device::CUDA);
      ops::copy(launch_, x, dst);
      xp = cx, ld = w.k;
    }
    if (linear_direct(xp, ld, w, y, M, ldy, act)) return;
    // D^T = W X^T into an fp32 result, then bias + activation into y.
    float* acc = static_cast<float*>(acc_scratch_.get(static_cast<size_t>(M * w.n) * 4));
    gemm(linear_call(xp, w.wdt, M, w.k, ld, w.w.get(), w.wdt, w.n, acc, DType::F32));
    ops::bias_act(launch_, acc, DType::F32, w.bias_view, -1, act, y);
  }

  // y = act(x W^T + bias) written by cuBLASLt itself (x in w's type, rows
  // ldx apart): the bias added in fp32 before y's one rounding (its bias
  // epilogue), as the reference rounds, and with a_scale / b_scale (FP8)
  // the per-channel and per-row scales applied to the product; an
  // activation then runs in place. Exact where the activation's input is
  // that rounded value: no activation, RoundGeluTanh (rounds its input to
  // y's dtype first: the FFN's PyTorch Linear + GELU), or an F32 y. False
  // where it is not, or cuBLASLt has no algorithm: the caller's epilogue
  // runs instead.
  bool linear_direct(const void* x, int64_t ldx, const CudaLinear& w, Tensor& y, int64_t M,
                     int64_t ldy, Activation act, const float* a_scale = nullptr,
                     const float* b_scale = nullptr) {
    const bool exact =
        act == Activation::None || act == Activation::RoundGeluTanh || y.dtype == DType::F32;
    if (!exact || ldy < w.n) return false;
    GemmCall g = linear_call(x, w.wdt, M, w.k, ldx, w.w.get(), w.wdt, w.n, y.data, y.dtype);
    g.ld_d = ldy;
    const float* bias = w.bias.get() ? static_cast<const float*>(w.bias.get()) : nullptr;
    if (!gemm(g, bias, a_scale, b_scale)) return false;
    if (act != Activation::None) ops::activation(launch_, y, y, act);
    return true;
  }

  // W8A8: q, sx = quantize_rows(x); acc = q W^T in int32 (IMMA, TN);
  // y = act(acc * sw[n] * sx[m] + bias[n]) (ScaleEpilogue): the reference's
  // INT8 linear, with exact integer accumulation. FP8: the same with E4M3
  // rows and an fp32 accumulator.
  void linear_w8a8(const Tensor& x, const CudaLinear& w, Tensor& y, Activation act, int64_t M,
                   int64_t ldy) {
    auto* xq = static_cast<int8_t*>(input_scratch_.get(static_cast<size_t>(M * w.k + 256 + M * 4)));
    auto* sx = reinterpret_cast<float*>(xq + (M * w.k + 255) / 256 * 256);
    Tensor x2 = Tensor::view(nullptr, x.dtype, {M, w.k}, Device::CUDA);
    x2.data = x.data;
    x2.strides[0] = x.ndim() >= 2 ? x.stride(-2) : w.k;
    const DType qt = w.w8a8_fp8 ? DType::F8_E4M3 : DType::I8;
    Tensor q = Tensor::view(xq, qt, {M, w.k}, Device::CUDA);
    Tensor sxt = Tensor::view(sx, DType::F32, {M}, Device::CUDA);
    ops::quantize_rows(launch_, x2, q, sxt);
    // FP8 on sm_90: cuBLASLt applies both scale vectors too.
    if (w.w8a8_fp8 &&
        linear_direct(xq, w.k, w, y, M, ldy, act, static_cast<const float*>(w.w_scale.get()), sx))
      return;
    void* acc = acc_scratch_.get(static_cast<size_t>(M * w.n) * 4);
    // int32 (IMMA) or fp32 (FP8) accumulators.
    gemm(linear_call(xq, qt, M, w.k, w.k, w.w.get(), qt, w.n, acc,
                     w.w8a8_fp8 ? DType::F32 : DType::I32));
    ScaleEpilogue f{};
    f.acc = acc;
    f.acc_i32 = !w.w8a8_fp8;
    f.sw = static_cast<const float*>(w.w_scale.get());
    f.sx = sx;
    f.bias = ops::param(w.bias_view, w.n, "linear", "bias");
    f.y.data = y.data;
    f.y.dtype = y.dtype;
    f.y.s[0] = ldy;
    f.y.s[1] = 1;
    f.act = ops::act_of(act);
    f.T = M, f.N = w.n;
    if (M * w.n < (int64_t{1} << 31)) f.n_div = FastDiv(static_cast<uint32_t>(w.n));
    ops::check_float(y, "linear");
    launch_.for_each(M * w.n, f);
  }

  void mlp_relu(const Tensor& x, const PackedLinear& l1, const PackedLinear& l2, Tensor& hidden,
                Tensor& y) override {
    linear(x, l1, hidden, Activation::Relu);
    linear(hidden, l2, y, Activation::None);
  }
  void matmul(const Tensor& a, const Tensor& b, Tensor& c) override {
    check_device(a, "matmul");
    check_device(b, "matmul");
    check_device(c, "matmul");
    gemm(matmul_call(a, b, c));  // the mapping tests/cuda_host checks
  }

  std::unique_ptr<PackedConv> pack_conv(const ConvDesc& d) override {
    FLICK_CHECK(d.groups == 1, "pack_conv: the CUDA backend has no grouped convolution yet");
    FLICK_CHECK(d.w.dtype != DType::I8 && d.w.dtype != DType::F8_E4M3,
                "pack_conv: the CUDA backend has no quantised convolution yet");
    // Every conv runs in BF16 (cuDNN's fast engines), Precision::F32 too.
    auto p = std::make_unique<CudaConv>();
    p->d = d;
    // Weights channels-last ({k, c, *kernel} with c innermost): the layout
    // the fast cuDNN engines take (cuda-backend.md section 3).
    const int nd = d.w.ndim();
    std::vector<int> order{0};
    for (int i = 2; i < nd; ++i) order.push_back(i);
    order.push_back(1);
    Tensor perm = d.w;
    for (int i = 0; i < nd; ++i) {
      perm.shape[i] = d.w.dim(order[static_cast<size_t>(i)]);
      perm.strides[static_cast<size_t>(i)] = d.w.stride(order[static_cast<size_t>(i)]);
    }
    p->w = upload(perm, DType::BF16);
    p->d.w = Tensor{};
    p->d.w.shape = d.w.shape;  // for the graph: dims of the original layout
    p->d.w.dtype = DType::BF16;
    p->d.w.device = Device::CUDA;
    p->d.w.data = p->w.get();
    if (!d.bias.empty()) {
      p->bias = upload(d.bias, DType::F32);
      p->d.bias = Tensor::view(p->bias.get(), DType::F32, {d.w.dim(0)}, Device::CUDA);
    }
    return p;
  }

  void conv(const Tensor& x, const PackedConv& pc, Tensor& y, Activation act) override {
    check_device(x, "conv");
    check_device(y, "conv");
    const auto& c = static_cast<const CudaConv&>(pc);
    const ConvDesc& d = c.d;
    const int nd = d.spatial_dims;
    FLICK_CHECK(x.ndim() == nd + 2 && y.ndim() == nd + 2 && x.dim(1) == d.w.dim(1) &&
                    y.dim(1) == d.w.dim(0),
                "conv: x " + x.str() + ", y " + y.str() + ", w " + d.w.shape.str());
    // BF16 input (F32 converted), contiguous NC(D)HW; BF16 result, then
    // bias + activation into y. (One bf16 rounding before the bias; the
    // reference rounds once. Within one bf16 ulp.)
    const Tensor xb = as_bf16_contiguous(x, conv_in_scratch_);
    void* yb = conv_out_scratch_.get(static_cast<size_t>(y.numel()) * 2);
    ConvShape s;
    s.spatial_dims = nd;
    s.x_dims = x.shape.to_vector();
    s.x_strides = contiguous_strides(s.x_dims);
    s.w_dims = d.w.shape.to_vector();
    s.w_strides = channels_last_strides(s.w_dims);
    s.y_dims = y.shape.to_vector();
    s.y_strides = contiguous_strides(s.y_dims);
    for (int i = 0; i < nd; ++i) {
      s.pre_pad.push_back(d.padding[static_cast<size_t>(i)]);
      s.post_pad.push_back(d.padding[static_cast<size_t>(i)]);
      s.stride.push_back(d.stride[static_cast<size_t>(i)]);
      s.dilation.push_back(d.dilation[static_cast<size_t>(i)]);
    }
    Plan& plan = conv_plan(s);
    void* ptrs[3] = {const_cast<void*>(xb.data), d.w.data, yb};
    const int64_t uids[3] = {kConvX, kConvW, kConvY};
    execute(plan, 3, uids, ptrs);
    // y = act(conv + bias), reading the bf16 result.
    ops::bias_act(launch_, yb, DType::BF16, d.bias, 1, act, y);
  }

  void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                 const AttentionParams& p) override {
    check_device(q, "attention");
    check_device(k, "attention");
    check_device(v, "attention");
    check_device(out, "attention");
    const int64_t D = q.dim(3);
    const bool plain =
        p.bias.empty() && p.bias_y.empty() && p.key_padding.empty() && p.causal_block == 0;
    const bool bf16 = q.dtype == DType::BF16 && k.dtype == DType::BF16 && v.dtype == DType::BF16 &&
                      out.dtype == DType::BF16;
    const bool aliased = out.data == q.data;
    if (plain && bf16 && !aliased && D <= 256 && D % 8 == 0 && q.stride(3) == 1 &&
        k.stride(3) == 1 && v.stride(3) == 1 && out.stride(3) == 1 && k.strides == v.strides) {
      sdpa(q, k, v, out, p);
      return;
    }
    const int64_t H = q.dim(2), Lq = q.dim(1), Lk = k.dim(1);
    void* s = attn_s_scratch_.get(static_cast<size_t>(H * Lq * Lk) * 4);
    void* pm = attn_p_scratch_.get(static_cast<size_t>(H * Lq * Lk) * dtype_size(v.dtype));
    auto mm = [this](const Tensor& a, const Tensor& b, Tensor& c) { matmul(a, b, c); };
    ops::attention_fallback(launch_, mm, q, k, v, out, p, s, pm);
  }

  // The SageAttention-style INT8 path has no CUDA kernel yet; models take it
  // only where attention_int8_pays_off() says so, which it never does here.
  void attention_int8(const Tensor&, const Tensor&, const Tensor&, Tensor&,
                      const AttentionParams&) override {
    FLICK_CHECK(false,
                "attention_int8: not implemented on the CUDA backend "
                "(attention_int8_pays_off() is false; call attention)");
  }
  bool attention_int8_pays_off() override { return false; }

  // ---- the functor ops ----
  void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps,
                  Tensor& y) override {
    ops::layer_norm(launch_, x, w, b, eps, y);
  }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y) override {
    ops::rms_norm(launch_, x, w, eps, y);
  }
  void group_norm(const Tensor& x, int64_t groups, const Tensor& w, const Tensor& b, float eps,
                  Tensor& y, Activation act) override {
    ops::group_norm(launch_, x, groups, w, b, eps, y);
    if (act != Activation::None) activation(y, y, act);
  }
  void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) override {
    ops::rope(launch_, x, cos, sin, y);
  }
  void gelu(const Tensor& x, Tensor& y, bool tanh_approx) override {
    ops::gelu(launch_, x, y, tanh_approx);
  }
  void silu(const Tensor& x, Tensor& y) override { ops::silu(launch_, x, y); }
  void activation(const Tensor& x, Tensor& y, Activation act) override {
    ops::activation(launch_, x, y, act);
  }
  void modulate(const Tensor& x, const Tensor& shift, const Tensor& scale, Tensor& y) override {
    ops::modulate(launch_, x, shift, scale, y);
  }
  void add(const Tensor& a, const Tensor& b, Tensor& y) override { ops::add(launch_, a, b, y); }
  void mul(const Tensor& a, const Tensor& b, Tensor& y) override { ops::mul(launch_, a, b, y); }
  void mul_add(const Tensor& a, const Tensor& b, const Tensor& c, Tensor& y) override {
    ops::mul_add(launch_, a, b, c, y);
  }
  void affine(const Tensor& x, float alpha, float beta, Tensor& y) override {
    ops::affine(launch_, x, alpha, beta, y);
  }
  void softmax(const Tensor& x, Tensor& y) override { ops::softmax(launch_, x, y); }
  void upsample_nearest(const Tensor& x, Tensor& y) override {
    ops::upsample_nearest(launch_, x, y);
  }
  // The taps (PyTorch's index arithmetic, host code) copied into a device
  // scratch on the stream: a pageable async copy is staged before it
  // returns, so the host vectors may go.
  auto taps_stage() {
    return [this](const resample::Taps& t, int dim) {
      const size_t nf = t.first.size() * 8, nc = t.count.size() * 4, nw = t.weight.size() * 4;
      const size_t oc = (nf + 255) / 256 * 256, ow = oc + (nc + 255) / 256 * 256;
      char* p = static_cast<char*>(taps_scratch_[dim].get(ow + nw));
      cuda_check(cudaMemcpyAsync(p, t.first.data(), nf, cudaMemcpyHostToDevice, stream_), "taps");
      cuda_check(cudaMemcpyAsync(p + oc, t.count.data(), nc, cudaMemcpyHostToDevice, stream_),
                 "taps");
      cuda_check(cudaMemcpyAsync(p + ow, t.weight.data(), nw, cudaMemcpyHostToDevice, stream_),
                 "taps");
      return ResizeTaps{reinterpret_cast<const int64_t*>(p), reinterpret_cast<const int*>(p + oc),
                        reinterpret_cast<const float*>(p + ow), t.width, t.in};
    };
  }
  void resize(const Tensor& x, Tensor& y, ResizeMode mode, bool align_corners,
              bool antialias) override {
    ops::resize(launch_, x, y, mode, align_corners, antialias, taps_stage());
  }
  void resize_window(const Tensor& x, Tensor& y, const ResizeWindow& window, ResizeMode mode,
                     bool align_corners, bool antialias) override {
    ops::resize_window(launch_, x, y, window, mode, align_corners, antialias, taps_stage());
  }
  void copy(const Tensor& x, Tensor& y) override { ops::copy(launch_, x, y); }
  void concat(std::span<const Tensor> xs, int dim, Tensor& y) override {
    ops::concat(launch_, xs, dim, y);
  }
  void reduce(const Tensor& x, int dim, ReduceOp op, Tensor& y) override {
    ops::reduce(launch_, x, dim, op, y);
  }
  void quantize_rows_int8(const Tensor& x, Tensor& q, Tensor& scale) override {
    ops::quantize_rows(launch_, x, q, scale);
  }
  void rope_3d(const Tensor& x, const Rope3dParams& p, Tensor& y) override {
    // The angle table, uploaded once per grid / start / pairs / theta (a DiT
    // call's q and k share one; a pipeline sees one per start frame). Kept
    // for the next calls; the cache starts over past 256 tables.
    std::vector<int64_t> key{p.grid[0],  p.grid[1],  p.grid[2],  p.start[0], p.start[1],
                             p.start[2], p.pairs[0], p.pairs[1], p.pairs[2], 0};
    std::memcpy(&key.back(), &p.theta, sizeof p.theta);
    auto stage = [&](const Rope3dParams& params) {
      auto it = rope_tables_.find(key);
      if (it == rope_tables_.end()) {
        const std::vector<double> t = ops::rope_3d_table(params);
        if (rope_tables_.size() >= 256) {
          cuda_check(cudaStreamSynchronize(stream_), "rope_3d tables");
          rope_tables_.clear();
        }
        DeviceBlock b(t.size() * sizeof(double));
        cuda_check(cudaMemcpy(b.get(), t.data(), t.size() * sizeof(double), cudaMemcpyHostToDevice),
                   "rope_3d table");
        it = rope_tables_.emplace(key, std::move(b)).first;
      }
      return static_cast<const double*>(it->second.get());
    };
    ops::rope_3d(launch_, x, p, y, stage);
  }
  void rope_unfused(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) override {
    ops::rope_unfused(launch_, x, cos, sin, y);
  }
  void rms_norm_stepwise(const Tensor& x, float eps, Tensor& y) override {
    ops::rms_norm_stepwise(launch_, x, eps, y);
  }
  void mul_add_stepwise(const Tensor& a, const Tensor& b, const Tensor& c, Tensor& y) override {
    ops::mul_add_stepwise(launch_, a, b, c, y);
  }
  void normalize_l2(const Tensor& x, const Tensor& gamma, float scale, NormRounding rounding,
                    Activation act, Tensor& y) override {
    ops::normalize_l2(launch_, x, gamma, scale, rounding, act, y);
  }
  void softmax_parts(const Tensor& x, float scale, Tensor& p, Tensor& inv_sum) override {
    ops::softmax_parts(launch_, x, scale, p, inv_sum);
  }

 private:
  static constexpr size_t kWorkspace = 32u << 20;

  // A cuDNN execution plan with its graph and workspace size, cached by shape.
  struct Plan {
    CudnnGraph graph;
    CudnnDesc plan;
    int64_t workspace = 0;
  };

  // One cuBLASLt call from a gemm_map.h mapping; an I32 result selects IMMA.
  // The descriptors and the heuristic's algorithm are made once per shape
  // (the first call of each GEMM, i.e. a pipeline's warm-up step). Optional
  // parts, each false where cuBLASLt has no algorithm with it (the caller
  // then runs its own epilogue; without them that is an error): bias, an
  // fp32 vector of m added by cuBLASLt's bias epilogue; a_scale / b_scale
  // (both or neither), OUTER_VEC_32F scales of A's rows and B's columns (FP8).
  bool gemm(const GemmCall& g, const float* bias = nullptr, const float* a_scale = nullptr,
            const float* b_scale = nullptr) {
    const bool with_bias = bias != nullptr, outer = a_scale != nullptr;
    auto lt = [](const GemmOperand& o) {
      return LtOperand{o.p,           o.dtype == DType::I8 ? CUDA_R_8I : cuda_type(o.dtype),
                       o.trans,       o.rows,
                       o.cols,        o.ld,
                       o.batch_stride};
    };
    const LtOperand a = lt(g.a), b = lt(g.b);
    const cudaDataType_t d_type = g.d_dtype == DType::I32 ? CUDA_R_32I : cuda_type(g.d_dtype);
    const std::vector<int64_t> key{a.type,         a.trans,          a.rows,  a.cols,    a.ld,
                                   a.batch_stride, b.type,           b.trans, b.rows,    b.cols,
                                   b.ld,           b.batch_stride,   d_type,  g.m,       g.n,
                                   g.ld_d,         g.d_batch_stride, g.batch, with_bias, outer};
    auto it = lt_plans_.find(key);
    if (it == lt_plans_.end()) {
      auto descs = lt_descs(a, b, d_type, g.m, g.n, g.ld_d, g.d_batch_stride, g.batch, kWorkspace,
                            with_bias, outer);
      FLICK_CHECK(descs.ok(), descs.status().message());
      LtPlan plan;
      plan.descs = std::move(*descs);
      it = lt_plans_.emplace(key, std::move(plan)).first;
    }
    LtPlan& plan = it->second;
    const LtDescs& l = *plan.descs;
    // This call's pointers (the heuristic needs the scales' too).
    auto set_pointer = [&](cublasLtMatmulDescAttributes_t attr, const float* p, const char* what) {
      lt_check(cublasLtMatmulDescSetAttribute(l.op, attr, &p, sizeof p), what);
    };
    if (with_bias) set_pointer(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, "BIAS_POINTER");
    if (outer) {
      set_pointer(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale, "A_SCALE_POINTER");
      set_pointer(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale, "B_SCALE_POINTER");
    }
    const bool optional = with_bias || outer;
    if (!plan.asked) {
      cublasLtMatmulHeuristicResult_t res{};
      int found = 0;
      const cublasStatus_t st =
          cublasLtMatmulAlgoGetHeuristic(lt_, l.op, l.a, l.b, l.d, l.d, l.pref, 1, &res, &found);
      if (!optional) lt_check(st, "AlgoGetHeuristic");
      plan.asked = true;
      plan.found = st == CUBLAS_STATUS_SUCCESS && found > 0;
      plan.algo = res.algo;
      if (!plan.found)
        log_warning(std::string("cuda: no cuBLASLt algorithm with the ") +
                    (outer ? "FP8 outer-vector scales" : "bias epilogue") + " for m " +
                    std::to_string(g.m) + ", n " + std::to_string(g.n) + " (" +
                    cublasLtGetStatusName(st) + "); our epilogue runs instead");
    }
    if (!plan.found) {
      FLICK_CHECK(optional, "cuBLASLt: no algorithm for this GEMM (m " + std::to_string(g.m) +
                                ", n " + std::to_string(g.n) + ")");
      return false;
    }
    const float alpha_f = 1.f, beta_f = 0.f;
    const int32_t alpha_i = 1, beta_i = 0;
    const void* alpha = l.imma ? static_cast<const void*>(&alpha_i) : &alpha_f;
    const void* beta = l.imma ? static_cast<const void*>(&beta_i) : &beta_f;
    lt_check(cublasLtMatmul(lt_, l.op, alpha, a.p, l.a, b.p, l.b, beta, g.d, l.d, g.d, l.d,
                            &plan.algo, workspace_.get(), kWorkspace, stream_),
             "Matmul");
    return true;
  }

  static int64_t rows_stride(const Tensor& t, const char* what) {
    // [.., K] with the leading dims collapsible into rows of one stride.
    for (int d = 0; d + 2 < t.ndim(); ++d)
      FLICK_CHECK(
          t.stride(d) == t.stride(d + 1) * t.dim(d + 1),
          std::string(what) + ": leading dims of " + t.str() + " do not collapse into rows");
    return t.ndim() >= 2 ? t.stride(-2) : t.dim(-1);
  }

  Tensor as_bf16_contiguous(const Tensor& x, DeviceScratch& scratch) {
    if (x.dtype == DType::BF16 && x.is_contiguous()) return x;
    void* p = scratch.get(static_cast<size_t>(x.numel()) * 2);
    Tensor t = Tensor::view(p, DType::BF16, x.shape, Device::CUDA);
    ops::copy(launch_, x, t);
    return t;
  }

  Plan make_plan(CudnnGraph g, const char* what) {
    auto cfgs = engine_configs(g, nullptr);
    FLICK_CHECK(cfgs.ok(), cfgs.status().message());
    for (CudnnDesc& cfg : *cfgs) {
      CudnnDesc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      cudnnBackendDescriptor_t c = cfg.get();
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &dnn_)
          .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
      if (plan.finalize() != CUDNN_STATUS_SUCCESS) continue;  // next engine
      int64_t ws = 0, got = 0;
      dnn_check(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                         CUDNN_TYPE_INT64, 1, &got, &ws),
                "plan workspace size");
      return Plan{std::move(g), std::move(plan), ws};
    }
    FLICK_CHECK(false, std::string(what) + ": no cuDNN engine config finalizes on this GPU");
    std::abort();
  }

  void execute(Plan& plan, int n, const int64_t* uids, void* const* ptrs) {
    void* ws =
        plan.workspace > 0 ? dnn_workspace_.get(static_cast<size_t>(plan.workspace)) : nullptr;
    CudnnDesc vp(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    vp.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids)
        .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs)
        .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    dnn_check(vp.finalize(), "variant pack");
    dnn_check(cudnnBackendExecute(dnn_, plan.plan.get(), vp.get()), "cudnnBackendExecute");
  }

  Plan& conv_plan(const ConvShape& s) {
    auto key = std::make_tuple(s.x_dims, s.w_dims, s.y_dims, s.pre_pad, s.stride, s.dilation);
    auto it = conv_plans_.find(key);
    if (it != conv_plans_.end()) return it->second;
    auto g = conv_graph(s, dnn_);
    FLICK_CHECK(g.ok(), g.status().message());
    return conv_plans_.emplace(key, make_plan(std::move(*g), "conv")).first->second;
  }

  void sdpa(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
            const AttentionParams& p) {
    SdpaShape s;
    s.b = q.dim(0), s.h = q.dim(2), s.s_q = q.dim(1), s.s_kv = k.dim(1), s.d = q.dim(3);
    // [B, H, S, D] strides of the [B, S, H, D] views.
    s.q_stride = {q.stride(0), q.stride(2), q.stride(1), 1};
    s.kv_stride = {k.stride(0), k.stride(2), k.stride(1), 1};
    s.o_stride = {out.stride(0), out.stride(2), out.stride(1), 1};
    auto key = std::make_tuple(std::vector<int64_t>{s.b, s.h, s.s_q, s.s_kv, s.d},
                               std::vector<int64_t>(s.q_stride.begin(), s.q_stride.end()),
                               std::vector<int64_t>(s.kv_stride.begin(), s.kv_stride.end()),
                               std::vector<int64_t>(s.o_stride.begin(), s.o_stride.end()));
    auto it = sdpa_plans_.find(key);
    if (it == sdpa_plans_.end()) {
      auto g = sdpa_graph(s, dnn_);
      FLICK_CHECK(g.ok(), g.status().message());
      it = sdpa_plans_.emplace(key, make_plan(std::move(*g), "attention")).first;
    }
    float scale = p.scale != 0.f ? p.scale : 1.f / std::sqrt(static_cast<float>(s.d));
    void* ptrs[5] = {q.data, k.data, v.data, out.data, &scale};  // scale: by value
    const int64_t uids[5] = {kSdpaQ, kSdpaK, kSdpaV, kSdpaO, kSdpaScale};
    execute(it->second, 5, uids, ptrs);
  }

  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  cudnnHandle_t dnn_ = nullptr;
  CudaLauncher launch_;
  DeviceBlock workspace_;
  DeviceScratch input_scratch_, acc_scratch_, conv_in_scratch_, conv_out_scratch_, attn_s_scratch_,
      attn_p_scratch_, dnn_workspace_, taps_scratch_[2];
  std::map<std::vector<int64_t>, DeviceBlock> rope_tables_;
  // A GEMM shape's descriptors and the heuristic's answer (gemm()).
  struct LtPlan {
    std::unique_ptr<LtDescs> descs;
    bool asked = false, found = false;
    cublasLtMatmulAlgo_t algo{};
  };
  std::map<std::vector<int64_t>, LtPlan> lt_plans_;
  using ConvKey = std::tuple<std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>,
                             std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>>;
  std::map<ConvKey, Plan> conv_plans_;
  using SdpaKey = std::tuple<std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>,
                             std::vector<int64_t>>;
  std::map<SdpaKey, Plan> sdpa_plans_;
};

}  // namespace
}  // namespace flick::cuda

extern "C" __attribute__((visibility("default"))) int flick_cuda_backend_create(
    int abi, flick::Backend** out, char* err, size_t err_len) {
  auto fail = [&](const std::string& m) {
    std::snprintf(err, err_len, "%s", m.c_str());
    return 1;
  };
  if (abi != flick::kBackendModuleAbi)
    return fail("the CUDA module was built for another flick (ABI " +
                std::to_string(flick::kBackendModuleAbi) + ", flick " + std::to_string(abi) + ")");
  auto b = std::make_unique<flick::cuda::CudaBackend>();
  const flick::Status s = b->init();
  if (!s.ok()) return fail(s.message());
  *out = b.release();
  return 0;
}
