// The CUDA backend on a GPU (ctest -L cuda): every op it implements against
// the scalar reference, through the module load_cuda_backend() finds
// (libflick_cuda.so next to the flick binary; build with -DFLICK_CUDA=ON).
// Without the module, the CUDA runtime or a GPU, every test skips and says
// which. Device memory comes from libcudart, opened here with dlopen so this
// binary builds without the CUDA toolkit.
//
// Tolerances, as tests/cuda_host (same functor bodies) plus the GPU's own:
//  - pointwise F32 2e-5 relative (device expf/erfcf within a few ulp);
//  - row reductions 1e-4 (tree order instead of the CPU's sequential sum);
//  - BF16 outputs one bf16 ulp, or the F32 figure absolute near zero;
//  - GEMMs (linear, matmul, attention, conv): bf16 inputs, fp32
//    accumulation in cuBLASLt/cuDNN's order: 2e-3 relative (linear, K =
//    1536), 1e-2 absolute for attention (P rounded to bf16) and conv (its
//    result rounded to bf16 before the bias). Not yet run on a GPU: the
//    first run should confirm or tighten these figures.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "runtime/backend.h"

namespace flick {
namespace {

// The few libcudart entry points the tests need (cudaError_t is an int).
struct CudaRt {
  int (*malloc)(void**, size_t) = nullptr;
  int (*free)(void*) = nullptr;
  int (*memcpy)(void*, const void*, size_t, int) = nullptr;  // kind 1 H2D, 2 D2H
  int (*sync)() = nullptr;
  bool ok = false;
  CudaRt() {
    void* h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    malloc = reinterpret_cast<decltype(malloc)>(dlsym(h, "cudaMalloc"));
    free = reinterpret_cast<decltype(free)>(dlsym(h, "cudaFree"));
    memcpy = reinterpret_cast<decltype(memcpy)>(dlsym(h, "cudaMemcpy"));
    sync = reinterpret_cast<decltype(sync)>(dlsym(h, "cudaDeviceSynchronize"));
    ok = malloc && free && memcpy && sync;
  }
};
CudaRt& rt() {
  static CudaRt r;
  return r;
}

// A contiguous device copy of a host tensor.
struct DeviceTensor {
  void* p = nullptr;
  Tensor t;
  explicit DeviceTensor(const Tensor& host) {
    EXPECT_EQ(rt().malloc(&p, host.nbytes()), 0);
    EXPECT_EQ(rt().memcpy(p, host.data, host.nbytes(), 1), 0);
    EXPECT_EQ(rt().sync(), 0);  // the backend's stream does not wait for cudaMemcpy's
    t = Tensor::view(p, host.dtype, host.shape, Device::CUDA);
  }
  DeviceTensor(DType dt, Shape s) : DeviceTensor(OwnedTensor(dt, s).t) {}
  DeviceTensor(const DeviceTensor&) = delete;
  ~DeviceTensor() { rt().free(p); }
  OwnedTensor host() const {
    EXPECT_EQ(rt().sync(), 0);
    OwnedTensor h(t.dtype, t.shape);
    EXPECT_EQ(rt().memcpy(h.t.data, p, t.nbytes(), 2), 0);
    return h;
  }
  operator Tensor&() { return t; }
};

OwnedTensor randn(DType dt, Shape s, uint32_t seed, float scale = 1.f, float shift = 0.f) {
  OwnedTensor t(dt, s);
  std::mt19937 g(seed);
  std::normal_distribution<float> n(shift, scale);
  for (int64_t i = 0; i < t.t.numel(); ++i) store_from_f32(dt, t.t.data, i, n(g));
  return t;
}

double worst(const Tensor& a, const Tensor& e, double f32_tol) {
  double w = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double av = load_as_f32(a.dtype, a.data, i), ev = load_as_f32(e.dtype, e.data, i);
    if (std::isnan(av) != std::isnan(ev)) return INFINITY;
    const double f32 = f32_tol * std::max(1.0, std::fabs(ev));
    const double tol =
        a.dtype == DType::BF16 ? std::max(std::ldexp(1.0, -7) * std::fabs(ev), f32) : f32;
    if (!std::isnan(ev)) w = std::max(w, std::fabs(av - ev) / tol);
  }
  return w;
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The module of this build: next to the flick binary (this test binary
    // lives in tests/), unless FLICK_CUDA_MODULE names another.
    if (!std::getenv("FLICK_CUDA_MODULE")) {
      const std::string module =
          std::filesystem::path(FLICK_BINARY).parent_path() / "libflick_cuda.so";
      if (std::filesystem::exists(module)) setenv("FLICK_CUDA_MODULE", module.c_str(), 1);
    }
    auto b = load_cuda_backend();
    if (!b.ok()) GTEST_SKIP() << "no CUDA backend here: " << b.status().message();
    if (!rt().ok) GTEST_SKIP() << "libcudart.so.13 not loadable";
    cuda = std::move(*b);
  }
  std::unique_ptr<Backend> cuda;
  std::unique_ptr<Backend> ref = make_ref_backend();
};

TEST_F(CudaBackendTest, ElementwiseAndNorms) {
  for (DType dt : {DType::F32, DType::BF16}) {
    auto x = randn(dt, {4, 7, 1536}, 1, 2.f, 1.f), w = randn(DType::F32, {1536}, 2),
         b = randn(DType::F32, {1536}, 3);
    DeviceTensor dx(x), dw(w), db(b), dy(dt, x.t.shape);
    OwnedTensor e(dt, x.t.shape);
    cuda->layer_norm(dx, dw, db, 1e-6f, dy);
    ref->layer_norm(x, w, b, 1e-6f, e);
    EXPECT_LE(worst(dy.host(), e, 1e-4), 1.0) << "layer_norm " << dtype_name(dt);
    cuda->rms_norm(dx, dw, 1e-6f, dy);
    ref->rms_norm(x, w, 1e-6f, e);
    EXPECT_LE(worst(dy.host(), e, 1e-4), 1.0) << "rms_norm " << dtype_name(dt);
    cuda->softmax(dx, dy);
    ref->softmax(x, e);
    EXPECT_LE(worst(dy.host(), e, 1e-4), 1.0) << "softmax " << dtype_name(dt);
    cuda->modulate(dx, db, dw, dy);
    ref->modulate(x, b, w, e);
    EXPECT_LE(worst(dy.host(), e, 2e-5), 1.0) << "modulate " << dtype_name(dt);
    cuda->activation(dx, dy, Activation::GeluTanh);
    ref->activation(x, e, Activation::GeluTanh);
    EXPECT_LE(worst(dy.host(), e, 2e-5), 1.0) << "gelu tanh " << dtype_name(dt);
    cuda->mul_add_stepwise(dx, dx, dw, dy);
    ref->mul_add_stepwise(x, x, w, e);
    EXPECT_LE(worst(dy.host(), e, 0.0), 1.0) << "mul_add_stepwise (bit-exact) " << dtype_name(dt);
  }
}

TEST_F(CudaBackendTest, ChainOps) {
  // rope_unfused is pointwise with explicit fp32 roundings: bit-exact. The
  // row-reducing chains (rms_norm_stepwise, normalize_l2, softmax_parts) sum
  // in a tree on the GPU: the row-reduction tolerance.
  for (DType dt : {DType::F32, DType::BF16}) {
    auto x = randn(dt, {2, 40, 6, 64}, 20), cos = randn(DType::F32, {40, 32}, 21),
         sin = randn(DType::F32, {40, 32}, 22), gamma = randn(DType::F32, {64}, 23);
    DeviceTensor dx(x), dcos(cos), dsin(sin), dgamma(gamma), dy(dt, x.t.shape);
    OwnedTensor e(dt, x.t.shape);
    cuda->rope_unfused(dx, dcos, dsin, dy);
    ref->rope_unfused(x, cos, sin, e);
    EXPECT_LE(worst(dy.host(), e, 0.0), 1.0) << "rope_unfused " << dtype_name(dt);
    cuda->rms_norm_stepwise(dx, 1e-6f, dy);
    ref->rms_norm_stepwise(x, 1e-6f, e);
    EXPECT_LE(worst(dy.host(), e, 1e-4), 1.0) << "rms_norm_stepwise " << dtype_name(dt);
    cuda->normalize_l2(dx, dgamma, 8.f, NormRounding::PerOp, Activation::Silu, dy);
    ref->normalize_l2(x, gamma, 8.f, NormRounding::PerOp, Activation::Silu, e);
    EXPECT_LE(worst(dy.host(), e, 1e-4), 1.0) << "normalize_l2 " << dtype_name(dt);
  }
  {
    // rope_3d: the GPU's f64 cos/sin may differ from glibc's in the last
    // ulp: the pointwise tolerance, not equality.
    Rope3dParams p;
    p.grid = {3, 4, 5};
    p.start = {7, 0, 0};
    p.pairs = {22, 21, 21};
    auto x = randn(DType::BF16, {60, 2, 128}, 25);
    DeviceTensor dx(x), dy(DType::BF16, x.t.shape);
    OwnedTensor e(DType::BF16, x.t.shape);
    cuda->rope_3d(dx, p, dy);
    ref->rope_3d(x, p, e);
    EXPECT_LE(worst(dy.host(), e, 2e-5), 1.0) << "rope_3d";
    DeviceTensor dr(DType::F32, {60, 1, 128});
    OwnedTensor er(DType::F32, {60, 1, 128});
    cuda->reduce(dx, 1, ReduceOp::Mean, dr);
    ref->reduce(x, 1, ReduceOp::Mean, er);
    EXPECT_LE(worst(dr.host(), er, 1e-4), 1.0) << "reduce";
  }
  {
    // resize: the reference's taps summed in fp32: the reduction tolerance.
    auto x = randn(DType::F32, {1, 3, 50, 70}, 26);
    DeviceTensor dx(x), dy(DType::F32, {1, 3, 21, 33});
    OwnedTensor e(DType::F32, {1, 3, 21, 33});
    cuda->resize(dx, dy, ResizeMode::Bicubic, false, true);
    ref->resize(x, e, ResizeMode::Bicubic, false, true);
    EXPECT_LE(worst(dy.host(), e, 1e-4), 1.0) << "resize";
  }
  auto s = randn(DType::F32, {8, 300}, 24, 3.f);
  DeviceTensor ds(s), dp(DType::BF16, {8, 300}), dinv(DType::F32, {8});
  OwnedTensor pe(DType::BF16, {8, 300}), ie(DType::F32, {8});
  cuda->softmax_parts(ds, 0.1f, dp, dinv);
  ref->softmax_parts(s, 0.1f, pe, ie);
  EXPECT_LE(worst(dp.host(), pe, 2e-5), 1.0) << "softmax_parts p";
  EXPECT_LE(worst(dinv.host(), ie, 1e-4), 1.0) << "softmax_parts inv_sum";
}

TEST_F(CudaBackendTest, LinearBf16) {
  const int64_t M = 37, K = 1536, N = 320;
  auto x = randn(DType::BF16, {M, K}, 4), w = randn(DType::BF16, {N, K}, 5, 0.03f),
       bias = randn(DType::F32, {N}, 6);
  LinearDesc d;
  d.w = w.t;
  d.bias = bias.t;
  auto pc = cuda->pack_linear(d);
  auto pr = ref->pack_linear(d);
  DeviceTensor dx(x), dy(DType::BF16, {M, N});
  OwnedTensor e(DType::BF16, {M, N});
  for (Activation act : {Activation::None, Activation::GeluTanh, Activation::RoundGeluTanh}) {
    cuda->linear(dx, *pc, dy, act);
    ref->linear(x, *pr, e, act);
    EXPECT_LE(worst(dy.host(), e, 2e-3), 1.0) << "activation " << static_cast<int>(act);
  }
}

// W8A8: the same integers as the reference (quantize_rows_int8 is bit-exact
// with it, the int32 GEMM exact), so only the epilogue's fp32 products and
// the final rounding differ: the pointwise tolerance.
TEST_F(CudaBackendTest, LinearInt8W8A8) {
  const int64_t M = 19, K = 256, N = 72;
  auto x = randn(DType::F32, {M, K}, 13);
  OwnedTensor w(DType::I8, {N, K}), ws(DType::F32, {N});
  std::mt19937 g(14);
  for (int64_t i = 0; i < N * K; ++i)
    w.t.ptr<int8_t>()[i] = static_cast<int8_t>(int(g() % 255) - 127);
  for (int64_t n = 0; n < N; ++n) ws.t.ptr<float>()[n] = 0.002f * static_cast<float>(n + 1);
  auto bias = randn(DType::F32, {N}, 15);
  LinearDesc d;
  d.w = w.t;
  d.w_scale = ws.t;
  d.bias = bias.t;
  d.precision = Precision::INT8;
  auto pc = cuda->pack_linear(d);
  auto pr = ref->pack_linear(d);
  DeviceTensor dx(x), dy(DType::F32, {M, N});
  OwnedTensor e(DType::F32, {M, N});
  cuda->linear(dx, *pc, dy, Activation::Silu);
  ref->linear(x, *pr, e, Activation::Silu);
  EXPECT_LE(worst(dy.host(), e, 2e-5), 1.0);
}

TEST_F(CudaBackendTest, Attention) {
  // BF16 d = 128 takes cuDNN's SDPA; d = 384 (the Wan VAE's) the GEMM +
  // softmax fallback.
  for (int64_t D : {128, 384}) {
    const int64_t B = 1, L = 300, H = D == 128 ? 4 : 1;
    auto q = randn(DType::BF16, {B, L, H, D}, 7, 0.1f),
         k = randn(DType::BF16, {B, L, H, D}, 8, 0.1f), v = randn(DType::BF16, {B, L, H, D}, 9);
    DeviceTensor dq(q), dk(k), dv(v), dout(DType::BF16, q.t.shape);
    OwnedTensor e(DType::BF16, q.t.shape);
    cuda->attention(dq, dk, dv, dout, AttentionParams{});
    ref->attention(q, k, v, e, AttentionParams{});
    EXPECT_LE(worst(dout.host(), e, 1e-2), 1.0) << "D " << D;
  }
}

TEST_F(CudaBackendTest, Conv3d) {
  auto x = randn(DType::BF16, {1, 32, 4, 12, 10}, 10),
       w = randn(DType::BF16, {48, 32, 3, 3, 3}, 11, 0.05f), bias = randn(DType::F32, {48}, 12);
  ConvDesc d;
  d.w = w.t;
  d.bias = bias.t;
  d.spatial_dims = 3;
  d.padding = {1, 1, 1};
  auto pc = cuda->pack_conv(d);
  auto pr = ref->pack_conv(d);
  DeviceTensor dx(x), dy(DType::BF16, {1, 48, 4, 12, 10});
  OwnedTensor e(DType::BF16, {1, 48, 4, 12, 10});
  cuda->conv(dx, *pc, dy, Activation::Silu);
  ref->conv(x, *pr, e, Activation::Silu);
  // One extra bf16 rounding of the conv result before the bias (see
  // CudaBackend::conv): two bf16 ulps, through the absolute floor.
  EXPECT_LE(worst(dy.host(), e, 1e-2), 1.0);
}

}  // namespace
}  // namespace flick
