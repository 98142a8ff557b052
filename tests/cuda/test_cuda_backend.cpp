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

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
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
    // rope_3d: the angle table is made on the host with the reference's
    // f64 pow / cos / sin, the complex product in f64 with no FMA on both:
    // bit-exact.
    Rope3dParams p;
    p.grid = {3, 4, 5};
    p.start = {7, 0, 0};
    p.pairs = {22, 21, 21};
    auto x = randn(DType::BF16, {60, 2, 128}, 25);
    DeviceTensor dx(x), dy(DType::BF16, x.t.shape);
    OwnedTensor e(DType::BF16, x.t.shape);
    cuda->rope_3d(dx, p, dy);
    ref->rope_3d(x, p, e);
    const OwnedTensor got = dy.host();
    EXPECT_EQ(std::memcmp(got.t.data, e.t.data, e.t.nbytes()), 0) << "rope_3d";
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

// W8A8 FP8: the oracle is the reference's F32 linear on the dequantised
// operands (x rows quantised to E4M3 on the host with runtime/dtype.h's
// conversion, scale max|x| / 448; the weight times its per-channel scale).
// The E4M3 products are exact, but the tensor cores' FP8 accumulation keeps
// fewer bits than fp32 between cuBLASLt's promotions, so the error scales
// with the sums' magnitude, not each output's: bound 1e-3 of max |y|
// (measured 1.8e-4 on an H200, K = 256), plus one bf16 ulp for a bf16 y.
// Paths: cuBLASLt applying both scale vectors (OUTER_VEC_32F, sm_90) and
// writing y, where it has an algorithm (the first H200 run: not with a bias
// or 37 rows, NOT_SUPPORTED; yes for the benchmark's 2640 rows without
// bias), else the fp32 result and our epilogue. Cases: bias, no activation,
// F32 y; bias, GeluTanh, BF16 y; no bias, 48 rows, F32 y.
class Fp8Case : public CudaBackendTest, public ::testing::WithParamInterface<int64_t> {};
TEST_P(Fp8Case, LinearFp8W8A8) {
  const int64_t M = GetParam(), K = 256, N = 96;
  const bool with_bias = M == 37;
  auto x = randn(DType::BF16, {M, K}, 16, 2.f);
  OwnedTensor w(DType::F8_E4M3, {N, K}), ws(DType::F32, {N});
  std::mt19937 g(17);
  std::normal_distribution<float> n(0.f, 100.f);
  for (int64_t i = 0; i < N * K; ++i) store_from_f32(DType::F8_E4M3, w.t.data, i, n(g));
  for (int64_t i = 0; i < N; ++i) ws.t.ptr<float>()[i] = 1e-3f * static_cast<float>(i + 1);
  auto bias = randn(DType::F32, {N}, 18);
  LinearDesc d;
  d.w = w.t;
  d.w_scale = ws.t;
  if (with_bias) d.bias = bias.t;
  d.precision = Precision::FP8;
  auto pc = cuda->pack_linear(d);
  OwnedTensor xd(DType::F32, {M, K}), wd(DType::F32, {N, K});
  for (int64_t m = 0; m < M; ++m) {
    float amax = 0.f;
    for (int64_t k = 0; k < K; ++k)
      amax = std::max(amax, std::fabs(load_as_f32(DType::BF16, x.t.data, m * K + k)));
    const float s = amax / 448.f;
    for (int64_t k = 0; k < K; ++k)
      xd.t.ptr<float>()[m * K + k] =
          f8e4m3_to_f32(f32_to_f8e4m3(load_as_f32(DType::BF16, x.t.data, m * K + k) / s)) * s;
  }
  for (int64_t i = 0; i < N * K; ++i)
    wd.t.ptr<float>()[i] = load_as_f32(DType::F8_E4M3, w.t.data, i) * ws.t.ptr<float>()[i / K];
  LinearDesc dr;
  dr.w = wd.t;
  if (with_bias) dr.bias = bias.t;
  dr.precision = Precision::F32;
  auto pr = ref->pack_linear(dr);
  DeviceTensor dx(x);
  for (auto [ydt, act] :
       {std::pair{DType::F32, Activation::None}, std::pair{DType::BF16, Activation::GeluTanh}}) {
    if (!with_bias && act != Activation::None) continue;
    DeviceTensor dy(ydt, {M, N});
    OwnedTensor e(DType::F32, {M, N});
    cuda->linear(dx, *pc, dy, act);
    ref->linear(xd, *pr, e, act);
    auto got = dy.host();
    double ymax = 0, worst_ratio = 0;
    for (int64_t i = 0; i < M * N; ++i)
      ymax = std::max(ymax, static_cast<double>(std::fabs(e.t.ptr<float>()[i])));
    for (int64_t i = 0; i < M * N; ++i) {
      const double want = e.t.ptr<float>()[i], have = load_as_f32(ydt, got.t.data, i);
      const double tol = 1e-3 * ymax + (ydt == DType::BF16 ? std::ldexp(std::fabs(want), -8) : 0.0);
      worst_ratio = std::max(worst_ratio, std::fabs(have - want) / tol);
    }
    EXPECT_LE(worst_ratio, 1.0) << dtype_name(ydt) << ", max |y| " << ymax;
    std::printf("fp8 W8A8 into %s: worst error / bound %.3f (max |y| %.1f)\n",
                std::string(dtype_name(ydt)).c_str(), worst_ratio, ymax);
  }
}

INSTANTIATE_TEST_SUITE_P(Rows, Fp8Case, ::testing::Values(int64_t{37}, int64_t{48}));

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

// The ops the tests above leave out, each against the reference.
TEST_F(CudaBackendTest, PointwiseAndMovement) {
  for (DType dt : {DType::F32, DType::BF16}) {
    auto x = randn(dt, {2, 6, 3, 40}, 30, 1.5f), r = randn(dt, {1, 6, 1, 40}, 31);
    auto w = randn(DType::F32, {6}, 32), b = randn(DType::F32, {6}, 33);
    DeviceTensor dx(x), dr(r), dw(w), db(b), dy(dt, x.t.shape);
    OwnedTensor e(dt, x.t.shape);
    cuda->group_norm(dx, 3, dw, db, 1e-5f, dy);
    ref->group_norm(x, 3, w, b, 1e-5f, e);
    EXPECT_LE(worst(dy.host(), e, 1e-4), 1.0) << "group_norm " << dtype_name(dt);
    for (bool t : {false, true}) {
      cuda->gelu(dx, dy, t);
      ref->gelu(x, e, t);
      EXPECT_LE(worst(dy.host(), e, 2e-5), 1.0) << "gelu " << t << " " << dtype_name(dt);
    }
    cuda->silu(dx, dy);
    ref->silu(x, e);
    EXPECT_LE(worst(dy.host(), e, 2e-5), 1.0) << "silu " << dtype_name(dt);
    for (Activation a : {Activation::Relu, Activation::Sigmoid, Activation::GeluErf}) {
      cuda->activation(dx, dy, a);
      ref->activation(x, e, a);
      EXPECT_LE(worst(dy.host(), e, 2e-5), 1.0) << "activation " << static_cast<int>(a);
    }
    cuda->add(dx, dr, dy);  // broadcast over dims 0 and 2
    ref->add(x, r, e);
    EXPECT_LE(worst(dy.host(), e, 0.0), 1.0) << "add " << dtype_name(dt);
    cuda->mul(dx, dr, dy);
    ref->mul(x, r, e);
    EXPECT_LE(worst(dy.host(), e, 0.0), 1.0) << "mul " << dtype_name(dt);
    cuda->mul_add(dx, dr, dx, dy);
    ref->mul_add(x, r, x, e);
    EXPECT_LE(worst(dy.host(), e, 2e-5), 1.0) << "mul_add " << dtype_name(dt);
    cuda->affine(dx, 0.37f, -1.25f, dy);
    ref->affine(x, 0.37f, -1.25f, e);
    EXPECT_LE(worst(dy.host(), e, 2e-5), 1.0) << "affine " << dtype_name(dt);
    // copy: a transposed view into another dtype.
    const DType other = dt == DType::F32 ? DType::BF16 : DType::F32;
    Tensor xt = dx.t, ht = x.t;
    std::swap(xt.shape[1], xt.shape[3]), std::swap(xt.strides[1], xt.strides[3]);
    std::swap(ht.shape[1], ht.shape[3]), std::swap(ht.strides[1], ht.strides[3]);
    DeviceTensor dc(other, xt.shape);
    OwnedTensor ec(other, xt.shape);
    cuda->copy(xt, dc);
    ref->copy(ht, ec);
    EXPECT_LE(worst(dc.host(), ec, 0.0), 1.0) << "copy " << dtype_name(dt);
    // concat along dim 1 and 3.
    for (int dim : {1, 3}) {
      Shape cs = x.t.shape;
      cs[dim] *= 2;
      DeviceTensor dcat(dt, cs);
      OwnedTensor ecat(dt, cs);
      const Tensor dparts[2] = {dx.t, dx.t}, hparts[2] = {x.t, x.t};
      cuda->concat(dparts, dim, dcat);
      ref->concat(hparts, dim, ecat);
      EXPECT_LE(worst(dcat.host(), ecat, 0.0), 1.0) << "concat " << dim;
    }
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
      DeviceTensor dred(DType::F32, {2, 6, 1, 40});
      OwnedTensor ered(DType::F32, {2, 6, 1, 40});
      cuda->reduce(dx, 2, op, dred);
      ref->reduce(x, 2, op, ered);
      EXPECT_LE(worst(dred.host(), ered, 1e-4), 1.0) << "reduce " << static_cast<int>(op);
    }
  }
  {
    // upsample_nearest, 2-d and 3-d (the VAE's temporal and spatial x2).
    auto x2 = randn(DType::BF16, {1, 5, 7, 9}, 34), x3 = randn(DType::BF16, {1, 4, 3, 5, 6}, 35);
    DeviceTensor d2(x2), d3(x3), y2(DType::BF16, {1, 5, 14, 18}),
        y3(DType::BF16, {1, 4, 6, 10, 12});
    OwnedTensor e2(DType::BF16, {1, 5, 14, 18}), e3(DType::BF16, {1, 4, 6, 10, 12});
    cuda->upsample_nearest(d2, y2);
    ref->upsample_nearest(x2, e2);
    EXPECT_LE(worst(y2.host(), e2, 0.0), 1.0) << "upsample_nearest 2-d";
    cuda->upsample_nearest(d3, y3);
    ref->upsample_nearest(x3, e3);
    EXPECT_LE(worst(y3.host(), e3, 0.0), 1.0) << "upsample_nearest 3-d";
  }
  {
    // rope over [B, L, H, D] with an F32 table.
    auto x = randn(DType::BF16, {1, 30, 4, 64}, 36), cos = randn(DType::F32, {30, 32}, 37),
         sin = randn(DType::F32, {30, 32}, 38);
    DeviceTensor dx(x), dc(cos), ds(sin), dy(DType::BF16, x.t.shape);
    OwnedTensor e(DType::BF16, x.t.shape);
    cuda->rope(dx, dc, ds, dy);
    ref->rope(x, cos, sin, e);
    EXPECT_LE(worst(dy.host(), e, 2e-5), 1.0) << "rope";
  }
  {
    // quantize_rows_int8: the integers and scales bit-exact with the
    // reference (W8A8's exactness rests on it); a zero row gets scale 1.
    auto x = randn(DType::BF16, {33, 200}, 39, 4.f);
    for (int j = 0; j < 200; ++j) store_from_f32(DType::BF16, x.t.data, 5 * 200 + j, 0.f);
    DeviceTensor dx(x), dq(DType::I8, {33, 200}), ds(DType::F32, {33});
    OwnedTensor eq(DType::I8, {33, 200}), es(DType::F32, {33});
    cuda->quantize_rows_int8(dx, dq, ds);
    ref->quantize_rows_int8(x, eq, es);
    auto hq = dq.host(), hs = ds.host();
    EXPECT_EQ(std::memcmp(hq.t.data, eq.t.data, eq.t.nbytes()), 0) << "quantize_rows_int8 q";
    EXPECT_EQ(std::memcmp(hs.t.data, es.t.data, es.t.nbytes()), 0) << "quantize_rows_int8 scale";
  }
}

TEST_F(CudaBackendTest, MatmulAndLinearVariants) {
  // Batched matmul with a transposed b (K^T-like strides), F32 and BF16.
  for (DType dt : {DType::F32, DType::BF16}) {
    auto a = randn(dt, {3, 45, 70}, 40), bt = randn(dt, {3, 50, 70}, 41);
    Tensor hb = bt.t;  // [3, 70, 50] view of [3, 50, 70]
    hb.shape = Shape{3, 70, 50};
    hb.strides = {50 * 70, 1, 70};
    DeviceTensor da(a), dbt(bt), dc(dt, {3, 45, 50});
    Tensor db = dbt.t;
    db.shape = hb.shape, db.strides = hb.strides;
    OwnedTensor e(dt, {3, 45, 50});
    cuda->matmul(da, db, dc);
    ref->matmul(a, hb, e);
    // fp32 accumulation in another order over K = 70.
    EXPECT_LE(worst(dc.host(), e, dt == DType::F32 ? 1e-5 : 2e-3), 1.0)
        << "matmul " << dtype_name(dt);
  }
  {
    // Precision::F32 linear: plain fp32 (no TF32) within the summation order.
    auto x = randn(DType::F32, {21, 384}, 42), w = randn(DType::F32, {96, 384}, 43, 0.05f);
    LinearDesc d;
    d.w = w.t;
    d.precision = Precision::F32;
    auto pc = cuda->pack_linear(d);
    auto pr = ref->pack_linear(d);
    DeviceTensor dx(x), dy(DType::F32, {21, 96});
    OwnedTensor e(DType::F32, {21, 96});
    cuda->linear(dx, *pc, dy, Activation::GeluErf);
    ref->linear(x, *pr, e, Activation::GeluErf);
    EXPECT_LE(worst(dy.host(), e, 1e-5), 1.0) << "linear f32";
  }
  {
    // FP8 E4M3 weights at BF16 precision (dequantised at pack time), BF16
    // activations with strided rows (a column slice of a wider buffer).
    OwnedTensor w(DType::F8_E4M3, {64, 256}), ws(DType::F32, {64});
    std::mt19937 g(44);
    std::normal_distribution<float> n(0.f, 1.f);
    for (int64_t i = 0; i < 64 * 256; ++i) store_from_f32(DType::F8_E4M3, w.t.data, i, n(g));
    for (int64_t i = 0; i < 64; ++i) ws.t.ptr<float>()[i] = 0.01f + 0.001f * static_cast<float>(i);
    auto xw = randn(DType::BF16, {17, 512}, 45);
    Tensor hx = xw.t;
    hx.shape = Shape{17, 256};  // the first 256 of each 512-wide row
    LinearDesc d;
    d.w = w.t;
    d.w_scale = ws.t;
    auto pc = cuda->pack_linear(d);
    auto pr = ref->pack_linear(d);
    DeviceTensor dxw(xw), dy(DType::BF16, {17, 64});
    Tensor dx = dxw.t;
    dx.shape = hx.shape;
    OwnedTensor e(DType::BF16, {17, 64});
    cuda->linear(dx, *pc, dy);
    ref->linear(hx, *pr, e);
    EXPECT_LE(worst(dy.host(), e, 2e-3), 1.0) << "linear fp8 weights";
  }
}

TEST_F(CudaBackendTest, AttentionShapesAndMasks) {
  // The DiT's shape in small: 12 heads of 128, fewer queries than keys (the
  // KV window), through cuDNN's SDPA.
  {
    auto q = randn(DType::BF16, {1, 96, 12, 128}, 50, 0.2f),
         k = randn(DType::BF16, {1, 192, 12, 128}, 51, 0.2f),
         v = randn(DType::BF16, {1, 192, 12, 128}, 52);
    DeviceTensor dq(q), dk(k), dv(v), dout(DType::BF16, q.t.shape);
    OwnedTensor e(DType::BF16, q.t.shape);
    AttentionParams p;
    p.scale = 0.05f;
    cuda->attention(dq, dk, dv, dout, p);
    ref->attention(q, k, v, e, p);
    EXPECT_LE(worst(dout.host(), e, 1e-2), 1.0) << "Lq < Lk";
  }
  // Masks take the fallback: block-causal, key padding (a fully masked row
  // gives zeros), an additive bias; F32 too.
  for (DType dt : {DType::BF16, DType::F32}) {
    const int64_t B = 2, Lq = 24, Lk = 40, H = 3, D = 32;
    auto q = randn(dt, {B, Lq, H, D}, 53, 0.3f), k = randn(dt, {B, Lk, H, D}, 54, 0.3f),
         v = randn(dt, {B, Lk, H, D}, 55), bias = randn(DType::F32, {1, H, Lq, Lk}, 56);
    OwnedTensor pad(DType::U8, {B, Lk});
    for (int64_t i = 0; i < B * Lk; ++i) pad.t.ptr<uint8_t>()[i] = (i % 7) != 3;
    DeviceTensor dq(q), dk(k), dv(v), dbias(bias), dpad(pad), dout(dt, q.t.shape);
    OwnedTensor e(dt, q.t.shape);
    AttentionParams hp, dp;
    hp.causal_block = dp.causal_block = 8;
    hp.bias = bias.t, dp.bias = dbias.t;
    hp.key_padding = pad.t, dp.key_padding = dpad.t;
    cuda->attention(dq, dk, dv, dout, dp);
    ref->attention(q, k, v, e, hp);
    EXPECT_LE(worst(dout.host(), e, dt == DType::F32 ? 1e-4 : 1e-2), 1.0)
        << "masked " << dtype_name(dt);
  }
}

TEST_F(CudaBackendTest, Conv2dStridedAndF32Input) {
  // A 2-d conv with stride 2 and asymmetric channels from an F32 input (the
  // CUDA backend rounds inputs to bf16, as Precision::BF16 says).
  auto x = randn(DType::F32, {1, 16, 21, 18}, 60),
       w = randn(DType::BF16, {24, 16, 3, 3}, 61, 0.05f), bias = randn(DType::F32, {24}, 62);
  ConvDesc d;
  d.w = w.t;
  d.bias = bias.t;
  d.spatial_dims = 2;
  d.padding = {1, 1};
  d.stride = {2, 2};
  auto pc = cuda->pack_conv(d);
  auto pr = ref->pack_conv(d);
  OwnedTensor xb(DType::BF16, x.t.shape);
  ref->copy(x, xb);
  DeviceTensor dx(x), dy(DType::F32, {1, 24, 11, 9});
  OwnedTensor e(DType::F32, {1, 24, 11, 9});
  cuda->conv(dx, *pc, dy, Activation::None);
  ref->conv(xb, *pr, e, Activation::None);
  // The bf16 rounding of the conv result before the bias: 2^-8 relative,
  // plus the absolute floor.
  EXPECT_LE(worst(dy.host(), e, 1e-2), 1.0);
}

}  // namespace
}  // namespace flick
