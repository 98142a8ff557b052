// The CUDA backend's kernel bodies (runtime/cuda/functors.h, assembled into
// ops by runtime/cuda/functor_ops.h) run through the CPU launcher against the
// scalar reference backend. This is the part of the GPU code a machine without
// a GPU can test: a GPU run differs only in the launcher (the order of a row
// reduction's tree, hence the tolerances below, not bit equality).
//
// Tolerances: the functors compute in fp32, the reference in double.
//  - F32 outputs: |a - e| <= 2e-5 * max(1, |e|) for pointwise ops (expf /
//    erfcf are accurate to a few ulp), 1e-4 for row reductions of up to a few
//    thousand elements (fp32 accumulation, relative error ~ n * 2^-24 worst
//    case, far less on average).
//  - BF16 outputs: one bf16 ulp of |e| (2^-7 relative): both sides round once
//    from values an fp32 error apart, which can straddle a rounding boundary;
//    near zero the F32 tolerance as an absolute floor (values produced by
//    cancellation, e.g. (x - mean) * rstd + b, carry an absolute fp32 error).
//  - Integer outputs (quantize) and pure data movement: exact, except that an
//    int8 code may differ by one where x / scale lies within fp32 error of a
//    half-integer (counted and bounded below).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cuda/functor_ops.h"
#include "runtime/cuda/launch_host.h"
#include "tests/ops/attention_test_util.h"

namespace flick {
namespace {

using cuda::HostLauncher;
namespace cops = cuda::ops;

OwnedTensor randn(DType dt, Shape s, uint32_t seed, float scale = 1.f, float shift = 0.f) {
  OwnedTensor t(dt, s);
  std::mt19937 g(seed);
  std::normal_distribution<float> n(shift, scale);
  for (int64_t i = 0; i < t.t.numel(); ++i) store_from_f32(dt, t.t.data, i, n(g));
  return t;
}

std::vector<double> values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t off = 0, r = i;
    for (int d = t.ndim() - 1; d >= 0; --d) {
      off += r % t.dim(d) * t.stride(d);
      r /= t.dim(d);
    }
    v[static_cast<size_t>(i)] = load_as_f32(t.dtype, t.data, off);
  }
  return v;
}

// Max violation ratio |a - e| / tol(e) over the elements (<= 1 passes).
double worst(const Tensor& actual, const Tensor& expected, double f32_tol) {
  const auto a = values(actual), e = values(expected);
  double w = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    // BF16: a bf16 ulp of |e| (relative), or the fp32 tolerance (absolute)
    // near zero, where a result of cancellation rounds to a tiny value.
    const double f32 = f32_tol * std::max(1.0, std::fabs(e[i]));
    const double tol =
        actual.dtype == DType::BF16 ? std::max(std::ldexp(1.0, -7) * std::fabs(e[i]), f32) : f32;
    const double err = std::fabs(a[i] - e[i]);
    if (std::isnan(e[i]) != std::isnan(a[i])) return INFINITY;
    if (!std::isnan(e[i])) w = std::max(w, err / tol);
  }
  return w;
}

constexpr double kPointwise = 2e-5;
constexpr double kReduce = 1e-4;

class Functors : public ::testing::TestWithParam<DType> {
 protected:
  std::unique_ptr<Backend> ref = make_ref_backend();
  HostLauncher host;
  DType dt() const { return GetParam(); }
};

// The functors' E4M3 rounding (the CUDA W8A8 FP8 activations) is
// runtime/dtype.h's, bit for bit: specials, the saturation edge, subnormals,
// every E4M3 value and its midpoints, and random bit patterns.
TEST(FunctorsFp8, ToE4m3MatchesDtypeConversion) {
  std::vector<float> v{0.f,      -0.f,      448.f, 464.f,   479.99f,  480.f,      1e9f,
                       INFINITY, -INFINITY, NAN,   0x1p-9f, 0x1p-10f, 0x1.8p-10f, 0x1p-6f};
  for (int b = 0; b < 256; ++b) {
    const float f = f8e4m3_to_f32(static_cast<uint8_t>(b));
    v.push_back(f);
    v.push_back(std::nextafter(f, INFINITY));
    v.push_back(f * 1.0625f);  // a midpoint for normals
  }
  std::mt19937 g(3);
  for (int i = 0; i < 20000; ++i) {
    const uint32_t u = g();
    float f;
    std::memcpy(&f, &u, 4);
    v.push_back(f);
  }
  for (float f : v) ASSERT_EQ(cuda::to_e4m3(f), f32_to_f8e4m3(f)) << f;
}

// The divider the launchers' index arithmetic rests on: every quotient
// equal to the hardware division's, for divisors 1..4099 (powers of two,
// their neighbours, the models' dims) and dividends up to 2^31 - 1.
TEST(FastDiv, MatchesDivision) {
  std::mt19937 g(1);
  std::vector<uint32_t> ns{0, 1, 2, 3, 1535, 1536, 1537, 0x7FFFFFFEu, 0x7FFFFFFFu};
  for (int k = 0; k < 300; ++k) ns.push_back(g() & 0x7FFFFFFFu);
  std::vector<uint32_t> ds{8960, 5280, 2640, 65536, 0x40000000u, 0x7FFFFFFFu};
  for (uint32_t d = 1; d < 4100; ++d) ds.push_back(d);
  for (uint32_t d : ds) {
    const cuda::FastDiv f(d);
    for (uint32_t n : ns) ASSERT_EQ(f.div(n), n / d) << n << " / " << d;
  }
}

TEST_P(Functors, Activations) {
  auto x = randn(dt(), {3, 5, 67}, 1, 3.f);
  for (Activation act :
       {Activation::None, Activation::GeluErf, Activation::GeluTanh, Activation::Silu,
        Activation::RoundGeluTanh, Activation::Relu, Activation::Sigmoid}) {
    OwnedTensor y(dt(), x.t.shape), e(dt(), x.t.shape);
    cops::activation(host, x, y, act);
    ref->activation(x, e, act);
    EXPECT_LE(worst(y, e, kPointwise), 1.0) << "activation " << static_cast<int>(act);
  }
  OwnedTensor y(dt(), x.t.shape), e(dt(), x.t.shape);
  cops::gelu(host, x, y, true);
  ref->gelu(x, e, true);
  EXPECT_LE(worst(y, e, kPointwise), 1.0) << "gelu tanh";
  cops::silu(host, x, y);
  ref->silu(x, e);
  EXPECT_LE(worst(y, e, kPointwise), 1.0) << "silu";
}

TEST_P(Functors, BroadcastArithmetic) {
  auto a = randn(dt(), {2, 7, 33}, 2), b = randn(DType::F32, {7, 1}, 3),
       c = randn(DType::BF16, {33}, 4);
  OwnedTensor y(dt(), {2, 7, 33}), e(dt(), {2, 7, 33});
  cops::add(host, a, b, y);
  ref->add(a, b, e);
  EXPECT_LE(worst(y, e, kPointwise), 1.0) << "add";
  cops::mul(host, a, c, y);
  ref->mul(a, c, e);
  EXPECT_LE(worst(y, e, kPointwise), 1.0) << "mul";
  cops::mul_add(host, a, b, c, y);
  ref->mul_add(a, b, c, e);
  EXPECT_LE(worst(y, e, kPointwise), 1.0) << "mul_add";
  cops::modulate(host, a, b, c, y);
  ref->modulate(a, b, c, e);
  EXPECT_LE(worst(y, e, kPointwise), 1.0) << "modulate";
  cops::affine(host, a, 0.37f, -1.25f, y);
  ref->affine(a, 0.37f, -1.25f, e);
  EXPECT_LE(worst(y, e, kPointwise), 1.0) << "affine";
}

TEST_P(Functors, MulAddStepwiseIsBitExact) {
  // The stepwise op is defined by its roundings: equality, not a tolerance.
  auto a = randn(dt(), {4, 9, 40}, 5), b = randn(dt(), {4, 9, 40}, 6), c = randn(dt(), {40}, 7);
  OwnedTensor y(dt(), a.t.shape), e(dt(), a.t.shape);
  cops::mul_add_stepwise(host, a, b, c, y);
  ref->mul_add_stepwise(a, b, c, e);
  EXPECT_EQ(values(y), values(e));
}

TEST_P(Functors, CopyTransposeConcat) {
  auto x = randn(DType::F32, {3, 4, 5}, 8);
  Tensor xt = x.t.permute({2, 0, 1});
  OwnedTensor y(dt(), xt.shape), e(dt(), xt.shape);
  cops::copy(host, xt, y);
  ref->copy(xt, e);
  EXPECT_EQ(values(y), values(e));
  auto p = randn(dt(), {3, 2, 5}, 9);
  const Tensor parts[2] = {x.t, p.t};
  OwnedTensor cy(dt(), {3, 6, 5}), ce(dt(), {3, 6, 5});
  cops::concat(host, std::span<const Tensor>(parts, 2), 1, cy);
  ref->concat(std::span<const Tensor>(parts, 2), 1, ce);
  EXPECT_EQ(values(cy), values(ce));
}

TEST_P(Functors, Norms) {
  // Rows of 1536 (the Wan DiT's width), shifted so a naive sum-of-squares
  // variance would lose digits.
  auto x = randn(dt(), {2, 3, 1536}, 10, 2.f, 5.f);
  auto w = randn(DType::F32, {1536}, 11), b = randn(DType::BF16, {1536}, 12);
  OwnedTensor y(dt(), x.t.shape), e(dt(), x.t.shape);
  cops::layer_norm(host, x, w, b, 1e-6f, y);
  ref->layer_norm(x, w, b, 1e-6f, e);
  EXPECT_LE(worst(y, e, kReduce), 1.0) << "layer_norm";
  cops::layer_norm(host, x, Tensor{}, Tensor{}, 1e-5f, y);
  ref->layer_norm(x, Tensor{}, Tensor{}, 1e-5f, e);
  EXPECT_LE(worst(y, e, kReduce), 1.0) << "layer_norm, no affine";
  cops::rms_norm(host, x, w, 1e-6f, y);
  ref->rms_norm(x, w, 1e-6f, e);
  EXPECT_LE(worst(y, e, kReduce), 1.0) << "rms_norm";
  // Per-head RMS norm over a strided [.., H, D] view.
  Tensor heads = x.t.reshape({2, 3, 12, 128}).slice(2, 1, 6);
  OwnedTensor hy(dt(), heads.shape), he(dt(), heads.shape);
  cops::rms_norm(host, heads, Tensor{}, 1e-6f, hy);
  ref->rms_norm(heads, Tensor{}, 1e-6f, he);
  EXPECT_LE(worst(hy, he, kReduce), 1.0) << "per-head rms_norm";
}

TEST_P(Functors, GroupNorm) {
  // The VAE's GroupNorm: 32 groups over [N, C, D, H, W].
  auto x = randn(dt(), {2, 64, 3, 5, 6}, 13, 1.5f, -2.f);
  auto w = randn(DType::F32, {64}, 14), b = randn(DType::F32, {64}, 15);
  OwnedTensor y(dt(), x.t.shape), e(dt(), x.t.shape);
  cops::group_norm(host, x, 32, w, b, 1e-6f, y);
  ref->group_norm(x, 32, w, b, 1e-6f, e);
  EXPECT_LE(worst(y, e, kReduce), 1.0);
}

TEST_P(Functors, Softmax) {
  auto x = randn(dt(), {4, 3, 333}, 16, 4.f);
  OwnedTensor y(dt(), x.t.shape), e(dt(), x.t.shape);
  cops::softmax(host, x, y);
  ref->softmax(x, e);
  EXPECT_LE(worst(y, e, kReduce), 1.0);
  // A row with -inf entries (a masked score row).
  store_from_f32(dt(), x.t.data, 0, -INFINITY);
  store_from_f32(dt(), x.t.data, 5, -INFINITY);
  cops::softmax(host, x, y);
  ref->softmax(x, e);
  EXPECT_LE(worst(y, e, kReduce), 1.0) << "with -inf";
}

TEST_P(Functors, Rope) {
  auto x = randn(dt(), {2, 6, 3, 16}, 17);
  auto cos = randn(DType::F32, {6, 8}, 18), sin = randn(DType::F32, {6, 8}, 19);
  OwnedTensor y(dt(), x.t.shape), e(dt(), x.t.shape);
  cops::rope(host, x, cos, sin, y);
  ref->rope(x, cos, sin, e);
  EXPECT_LE(worst(y, e, kPointwise), 1.0);
}

TEST_P(Functors, UpsampleNearest) {
  auto x = randn(dt(), {1, 3, 2, 3, 4}, 20);
  OwnedTensor y(dt(), {1, 3, 4, 6, 4}), e(dt(), {1, 3, 4, 6, 4});
  cops::upsample_nearest(host, x, y);
  ref->upsample_nearest(x, e);
  EXPECT_EQ(values(y), values(e));
}

TEST_P(Functors, QuantizeRowsInt8) {
  auto x = randn(dt(), {9, 200}, 21, 2.f);
  for (int64_t i = 0; i < 200; ++i) store_from_f32(dt(), x.t.data, 3 * 200 + i, 0.f);  // a zero row
  OwnedTensor q(DType::I8, {9, 200}), qe(DType::I8, {9, 200});
  OwnedTensor s(DType::F32, {9}), se(DType::F32, {9});
  cops::quantize_rows(host, x, q, s);
  ref->quantize_rows_int8(x, qe, se);
  // Same fp32 operations in the same order as the reference: bit-exact.
  EXPECT_EQ(values(s), values(se));
  EXPECT_EQ(values(q), values(qe));
  EXPECT_EQ(s.t.ptr<float>()[3], 1.f);
}

// The FP8 rows of the CUDA W8A8 FP8 linear, against the rule written out
// with runtime/dtype.h's conversion: scale max|x| / 448, q = e4m3(x / scale).
TEST_P(Functors, QuantizeRowsFp8) {
  auto x = randn(dt(), {9, 200}, 22, 3.f);
  for (int64_t i = 0; i < 200; ++i) store_from_f32(dt(), x.t.data, 5 * 200 + i, 0.f);
  OwnedTensor q(DType::F8_E4M3, {9, 200}), s(DType::F32, {9});
  cops::quantize_rows(host, x, q, s);
  for (int64_t m = 0; m < 9; ++m) {
    float amax = 0.f;
    for (int64_t k = 0; k < 200; ++k)
      amax = std::max(amax, std::fabs(load_as_f32(dt(), x.t.data, m * 200 + k)));
    const float sc = amax / 448.f;
    ASSERT_EQ(s.t.ptr<float>()[m], m == 5 ? 1.f : sc) << m;
    for (int64_t k = 0; k < 200; ++k) {
      const uint8_t want =
          m == 5 ? 0 : f32_to_f8e4m3(load_as_f32(dt(), x.t.data, m * 200 + k) / sc);
      ASSERT_EQ(static_cast<const uint8_t*>(q.t.data)[m * 200 + k], want) << m << ", " << k;
    }
  }
}

TEST_P(Functors, RopeUnfusedIsBitExact) {
  // Defined by its fp32 roundings: equality with the reference.
  auto x = randn(dt(), {2, 5, 3, 16}, 50);
  auto cos = randn(DType::F32, {5, 8}, 51), sin = randn(DType::F32, {5, 8}, 52);
  OwnedTensor y(dt(), x.t.shape), e(dt(), x.t.shape);
  cops::rope_unfused(host, x, cos, sin, y);
  ref->rope_unfused(x, cos, sin, e);
  EXPECT_EQ(values(y), values(e));
}

TEST_P(Functors, RmsNormStepwiseIsBitExactOnTheCpuLauncher) {
  // The CPU launcher sums in the reference's order: equality. (A GPU block's
  // tree sum is not: tests/cuda compares it with a tolerance.)
  auto x = randn(dt(), {3, 4, 384}, 53, 1.5f);
  OwnedTensor y(dt(), x.t.shape), e(dt(), x.t.shape);
  cops::rms_norm_stepwise(host, x, 1e-6f, y);
  ref->rms_norm_stepwise(x, 1e-6f, e);
  EXPECT_EQ(values(y), values(e));
}

TEST_P(Functors, NormalizeL2) {
  // fp32 sum of squares vs the reference's double: the row reduction
  // tolerance; PerOp rounds several times in y's dtype, so BF16 may land a
  // bf16 ulp off (the BF16 band).
  auto x = randn(dt(), {2, 6, 96}, 54, 3.f);
  auto gamma = randn(DType::F32, {96}, 55);
  for (NormRounding r : {NormRounding::PerOp, NormRounding::Once})
    for (Activation act : {Activation::None, Activation::Silu}) {
      OwnedTensor y(dt(), x.t.shape), e(dt(), x.t.shape);
      cops::normalize_l2(host, x, gamma, 9.8f, r, act, y);
      ref->normalize_l2(x, gamma, 9.8f, r, act, e);
      EXPECT_LE(worst(y, e, kReduce), 1.0) << static_cast<int>(r) << " " << static_cast<int>(act);
    }
}

TEST_P(Functors, SoftmaxParts) {
  auto x = randn(DType::F32, {3, 5, 77}, 56, 4.f);
  OwnedTensor p(dt(), x.t.shape), pe(dt(), x.t.shape), s(DType::F32, {3, 5}),
      se(DType::F32, {3, 5});
  cops::softmax_parts(host, x, 0.125f, p, s);
  ref->softmax_parts(x, 0.125f, pe, se);
  EXPECT_LE(worst(p, pe, kPointwise), 1.0) << "p";
  EXPECT_LE(worst(s, se, kReduce), 1.0) << "inv_sum";
}

TEST_P(Functors, Rope3dIsBitExact) {
  // f64 angles and product rounded once: equality with the reference.
  Rope3dParams p;
  p.grid = {2, 3, 4};
  p.start = {5, 0, 1};
  p.pairs = {4, 2, 2};
  auto x = randn(dt(), {24, 3, 16}, 60);
  OwnedTensor y(dt(), x.t.shape), e(dt(), x.t.shape);
  cops::rope_3d(host, x, p, y, cuda::ops::HostRopeTable{});
  ref->rope_3d(x, p, e);
  EXPECT_EQ(values(y), values(e));
}

TEST_P(Functors, Reduce) {
  // fp32 sums of up to 9 terms vs double: the row-reduction tolerance.
  auto x = randn(dt(), {3, 9, 5}, 61);
  for (int dim : {0, 1, -1})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min}) {
      Shape s = x.t.shape;
      s[dim < 0 ? dim + 3 : dim] = 1;
      OwnedTensor y(dt(), s), e(dt(), s);
      cops::reduce(host, x, dim, op, y);
      ref->reduce(x, dim, op, e);
      EXPECT_LE(worst(y, e, kReduce), 1.0) << dim << " " << static_cast<int>(op);
    }
}

TEST_P(Functors, Resize) {
  // The reference's taps, summed in fp32 instead of double: pointwise-sum
  // tolerance of the row reductions.
  auto x = randn(dt(), {2, 3, 17, 23}, 70);
  struct Case {
    ResizeMode mode;
    bool align, aa;
    int64_t h, w;
  };
  for (const Case& c : {Case{ResizeMode::Bilinear, false, false, 34, 40},
                        Case{ResizeMode::Bilinear, true, false, 9, 50},
                        Case{ResizeMode::Bicubic, false, false, 30, 11},
                        Case{ResizeMode::Bicubic, false, true, 8, 9},
                        Case{ResizeMode::Bilinear, false, true, 5, 23},
                        Case{ResizeMode::Nearest, false, false, 40, 7}}) {
    OwnedTensor y(dt(), {2, 3, c.h, c.w}), e(dt(), {2, 3, c.h, c.w});
    cops::resize(host, x, y, c.mode, c.align, c.aa, cuda::ops::host_taps);
    ref->resize(x, e, c.mode, c.align, c.aa);
    EXPECT_LE(worst(y, e, kReduce), 1.0)
        << static_cast<int>(c.mode) << " " << c.align << c.aa << " " << c.h << "x" << c.w;
    // A window of the result (rows [1, h - 1), columns [w / 2, w)) holds
    // the same bits as the whole one there.
    const int64_t wh = c.h - 2, ww = c.w - c.w / 2;
    OwnedTensor win(dt(), {2, 3, wh, ww});
    cops::resize_window(host, x, win, ResizeWindow{c.h, c.w, 1, c.w / 2}, c.mode, c.align, c.aa,
                        cuda::ops::host_taps);
    int64_t bad = 0;
    for (int64_t p = 0; p < 6; ++p)
      for (int64_t i = 0; i < wh; ++i)
        for (int64_t j = 0; j < ww; ++j)
          bad += load_as_f32(dt(), win.t.data, (p * wh + i) * ww + j) !=
                 load_as_f32(dt(), y.t.data, (p * c.h + 1 + i) * c.w + c.w / 2 + j);
    EXPECT_EQ(bad, 0) << "window of " << static_cast<int>(c.mode) << " " << c.h << "x" << c.w;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Functors, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Replicate padding has no reference op (cuDNN pads with zeros only, the
// HunyuanVideo VAE replicates): checked against F.pad's definition, each
// output reads the input at its position clamped into range.
TEST(FunctorsIndexMap, PadReplicateNdhwc) {
  const int64_t N = 2, D = 3, H = 4, W = 5, C = 3;
  auto x = randn(DType::F32, {N, D, H, W, C}, 22);
  cuda::PadReplicateNdhwc f{};
  f.x = cops::operand(x);
  f.N = N, f.D = D, f.H = H, f.W = W, f.C = C;
  f.pre[0] = 2, f.pre[1] = 1, f.pre[2] = 1;  // the causal conv's (k - 1, k / 2, k / 2)
  f.post[0] = 0, f.post[1] = 1, f.post[2] = 1;
  OwnedTensor y(DType::F32, {N, D + 2, H + 2, W + 2, C});
  f.y = cops::operand(y);
  ASSERT_EQ(f.size(), y.t.numel());
  HostLauncher{}.for_each(f.size(), f);
  auto cl = [](int64_t v, int64_t n) { return std::min(std::max<int64_t>(v, 0), n - 1); };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D + 2; ++d)
      for (int64_t h = 0; h < H + 2; ++h)
        for (int64_t w = 0; w < W + 2; ++w)
          for (int64_t c = 0; c < C; ++c)
            ASSERT_EQ(
                *static_cast<float*>(y.t.at({n, d, h, w, c})),
                *static_cast<float*>(x.t.at({n, cl(d - 2, D), cl(h - 1, H), cl(w - 1, W), c})))
                << n << " " << d << " " << h << " " << w << " " << c;
}

// Weight-only dequantisation (FP8 / INT8 weights to BF16 for the BF16 GEMM)
// against runtime/dtype.h's decoders: exact, one rounding of w * scale.
TEST(FunctorsIndexMap, DequantWeight) {
  const int64_t N = 5, K = 7;
  std::vector<uint8_t> w8(N * K);
  std::vector<int8_t> wi(N * K);
  for (int64_t i = 0; i < N * K; ++i) {
    w8[static_cast<size_t>(i)] = static_cast<uint8_t>(i * 37 % 255);  // every class of code
    wi[static_cast<size_t>(i)] = static_cast<int8_t>(i * 29 % 255 - 127);
  }
  const float scale[N] = {0.5f, 0.01f, 3.f, 1.f, 0.125f};
  std::vector<uint16_t> out(N * K);
  for (bool fp8 : {true, false}) {
    cuda::DequantWeight f{fp8 ? static_cast<const void*>(w8.data()) : wi.data(),
                          fp8 ? DType::F8_E4M3 : DType::I8,
                          scale,
                          N,
                          K,
                          out.data()};
    HostLauncher{}.for_each(N * K, f);
    for (int64_t i = 0; i < N * K; ++i) {
      const float v = fp8 ? f8e4m3_to_f32(w8[static_cast<size_t>(i)])
                          : static_cast<float>(wi[static_cast<size_t>(i)]);
      const uint16_t e = f32_to_bf16(v * scale[i / K]);
      ASSERT_EQ(out[static_cast<size_t>(i)], e) << (fp8 ? "fp8 " : "int8 ") << i;
    }
  }
}

// The W8A8 epilogue y = acc * sw[n] * sx[t] + b[n] against the reference
// int8 linear (which dequantises the same integers), through an exact int32
// accumulation done here.
TEST(FunctorsIndexMap, ScaleEpilogueMatchesReferenceInt8Linear) {
  const int64_t T = 6, K = 48, N = 10;
  auto x = randn(DType::F32, {T, K}, 23);
  std::vector<int8_t> wq(N * K);
  std::vector<float> sw(N);
  std::mt19937 g(24);
  for (auto& v : wq) v = static_cast<int8_t>(static_cast<int>(g() % 255) - 127);
  for (int64_t n = 0; n < N; ++n) sw[static_cast<size_t>(n)] = 0.01f * static_cast<float>(n + 1);
  auto bias = randn(DType::F32, {N}, 25);
  auto ref = make_ref_backend();
  LinearDesc d;
  d.w = Tensor::view(wq.data(), DType::I8, {N, K});
  d.w_scale = Tensor::view(sw.data(), DType::F32, {N});
  d.bias = bias.t;
  d.precision = Precision::INT8;
  auto packed = ref->pack_linear(d);
  OwnedTensor e(DType::F32, {T, N});
  ref->linear(x, *packed, e, Activation::GeluTanh);
  // Our path: quantize rows (functor), int32 GEMM (cuBLASLt IMMA on the GPU;
  // a loop here), the epilogue functor.
  OwnedTensor xq(DType::I8, {T, K}), sx(DType::F32, {T});
  cops::quantize_rows(HostLauncher{}, x, xq, sx);
  std::vector<int32_t> acc(T * N);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      int32_t s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += xq.t.ptr<int8_t>()[t * K + k] * wq[static_cast<size_t>(n * K + k)];
      acc[static_cast<size_t>(t * N + n)] = s;
    }
  OwnedTensor y(DType::F32, {T, N});
  cuda::ScaleEpilogue f{};
  f.acc = acc.data();
  f.acc_i32 = true;
  f.sw = sw.data();
  f.sx = sx.t.ptr<float>();
  f.bias = cops::param(bias, N, "test", "bias");
  f.y = cops::operand(y);
  f.act = cuda::Act::GeluTanh;
  f.T = T, f.N = N;
  HostLauncher{}.for_each(T * N, f);
  EXPECT_LE(worst(y, e, kPointwise), 1.0);
}

// The linear epilogue over an fp32 GEMM result (a loop here, cuBLASLt on
// the GPU) against the reference linear, for every activation: tolerances as
// the pointwise ops (the fp32 sum order of K = 64 terms is within them).
TEST_P(Functors, LinearEpilogue) {
  const int64_t M = 5, K = 64, N = 24;
  auto x = randn(dt(), {M, K}, 30), w = randn(DType::BF16, {N, K}, 31, 0.2f),
       bias = randn(DType::F32, {N}, 32);
  auto ref = make_ref_backend();
  LinearDesc d;
  d.w = w.t;
  d.bias = bias.t;
  d.precision = Precision::BF16;
  auto packed = ref->pack_linear(d);
  std::vector<float> acc(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        // BF16 precision: the activations enter the GEMM rounded to bf16 (as
        // the CUDA linear converts an F32 x before cuBLASLt, and the reference).
        s += round_bf16(load_as_f32(dt(), x.t.data, m * K + k)) *
             load_as_f32(DType::BF16, w.t.data, n * K + k);
      acc[static_cast<size_t>(m * N + n)] = static_cast<float>(s);
    }
  for (Activation act : {Activation::None, Activation::GeluErf, Activation::GeluTanh,
                         Activation::Silu, Activation::RoundGeluTanh, Activation::Relu}) {
    OwnedTensor y(dt(), {M, N}), e(dt(), {M, N});
    cops::bias_act(host, acc.data(), DType::F32, bias, -1, act, y);
    ref->linear(x, *packed, e, act);
    EXPECT_LE(worst(y, e, kPointwise), 1.0) << "activation " << static_cast<int>(act);
  }
}

// The GEMM + softmax attention fallback (the reference matmul standing in
// for cuBLASLt) against the reference attention, with every mask kind, a
// head dim over cuDNN's 256 and out aliasing q. Tolerance kReduce: fp32
// scores and softmax vs the reference's double.
TEST_P(Functors, AttentionFallback) {
  const int64_t B = 2, Lq = 7, Lk = 11, H = 3, D = 384;
  auto q = randn(dt(), {B, Lq, H, D}, 40, 0.08f), k = randn(dt(), {B, Lk, H, D}, 41, 0.08f),
       v = randn(dt(), {B, Lk, H, D}, 42);
  auto bias = randn(DType::F32, {1, H, Lq, Lk}, 43);
  OwnedTensor kp(DType::U8, {B, Lk});
  for (int64_t j = 0; j < Lk; ++j) {
    kp.t.ptr<uint8_t>()[j] = j % 4 != 1;
    kp.t.ptr<uint8_t>()[Lk + j] = j < 3;  // row b = 1: only the first 3 keys
  }
  std::vector<float> s(static_cast<size_t>(H * Lq * Lk));
  std::vector<float> pbuf(static_cast<size_t>(H * Lq * Lk));
  auto mm = [&](const Tensor& a, const Tensor& b, Tensor& c) { ref->matmul(a, b, c); };
  for (int mode = 0; mode < 4; ++mode) {
    AttentionParams p;
    if (mode == 1) p.bias = bias.t;
    if (mode == 2) p.key_padding = kp.t;
    if (mode == 3) {
      p.causal_block = 2;
      p.key_padding = kp.t;
      p.scale = 0.3f;
    }
    OwnedTensor y(dt(), q.t.shape), e(dt(), q.t.shape);
    cops::attention_fallback(host, mm, q, k, v, y, p, s.data(), pbuf.data());
    ref->attention(q, k, v, e, p);
    // BF16: P is stored in v's dtype (the PV GEMM's input type), one more
    // rounding than the reference: up to 2^-9 relative per weight, summed
    // over Lk = 11 values of v ~ N(0, 1): an absolute 1e-2 floor (measured
    // worst 4e-3).
    EXPECT_LE(worst(y, e, dt() == DType::BF16 ? 1e-2 : kReduce), 1.0) << "mode " << mode;
  }
  // In place: out = q.
  OwnedTensor qq(dt(), q.t.shape), e(dt(), q.t.shape);
  ref->copy(q, qq);
  cops::attention_fallback(host, mm, qq, k, v, qq, AttentionParams{}, s.data(), pbuf.data());
  ref->attention(q, k, v, e, AttentionParams{});
  EXPECT_LE(worst(qq, e, dt() == DType::BF16 ? 1e-2 : kReduce), 1.0) << "aliased";
}

// The fallback with a separable bias (bias_y / bias_x, a grid of 3 rows of
// 24 keys: rows end inside any 16-key group) gives the same bits as with
// the materialised bias_y + bias_x, and agrees with the reference.
TEST_P(Functors, AttentionFallbackSeparableBias) {
  const int64_t B = 2, Lq = 7, H = 3, D = 64, W = 24, Lk = 3 * W;
  auto q = randn(dt(), {B, Lq, H, D}, 50, 0.08f), k = randn(dt(), {B, Lk, H, D}, 51, 0.08f),
       v = randn(dt(), {B, Lk, H, D}, 52);
  auto by = randn(DType::F32, {B, 1, Lq, Lk / W}, 53), bx = randn(DType::F32, {1, H, Lq, W}, 54);
  const OwnedTensor full = test::materialised_bias(by.t, bx.t, B, H);
  std::vector<float> s(static_cast<size_t>(H * Lq * Lk)), pbuf(static_cast<size_t>(H * Lq * Lk));
  auto mm = [&](const Tensor& a, const Tensor& b, Tensor& c) { ref->matmul(a, b, c); };
  AttentionParams sep, sum;
  sep.bias_y = by.t;
  sep.bias_x = bx.t;
  sum.bias = full.t;
  OwnedTensor y(dt(), q.t.shape), y_sum(dt(), q.t.shape), e(dt(), q.t.shape);
  cops::attention_fallback(host, mm, q, k, v, y, sep, s.data(), pbuf.data());
  cops::attention_fallback(host, mm, q, k, v, y_sum, sum, s.data(), pbuf.data());
  EXPECT_EQ(std::memcmp(y.t.data, y_sum.t.data, y.t.nbytes()), 0);
  ref->attention(q, k, v, e, sep);
  EXPECT_LE(worst(y, e, dt() == DType::BF16 ? 1e-2 : kReduce), 1.0);
}

}  // namespace
}  // namespace flick
