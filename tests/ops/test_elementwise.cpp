// Activations, broadcast arithmetic, softmax and RoPE:
//  - the vector math kernels of every ISA this CPU runs against double;
//  - the reference ops against hand-computed values and torch fixtures;
//  - the CPU ops against the reference over dtypes, widths, broadcasts and
//    strided views.
// Tolerances are in units of u = 2^-24 (half an fp32 ulp at 1) times the
// magnitudes the error analysis of each formula names; a BF16 output must be
// the single rounding of a value within that fp32 band.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "runtime/cpu/eltwise_kernels.h"
#include "runtime/cpu/ops.h"
#include "runtime/ref/ops.h"
#include "tests/ops/elementwise_testing.h"
#include "tests/ops/matmul_test_util.h"

namespace flick {
namespace {

namespace ft = flick::testing;
using ft::kF32Eps;
constexpr double u = kF32Eps;

double sigmoid(double v) {
  return v >= 0 ? 1.0 / (1.0 + std::exp(-v)) : std::exp(v) / (1.0 + std::exp(v));
}
double gelu_erf_exact(double x) { return 0.5 * x * std::erfc(-x * M_SQRT1_2); }
double tanh_arg2(double x) { return 2 * std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x); }
double gelu_tanh_exact(double x) { return x * sigmoid(tanh_arg2(x)); }
double silu_exact(double x) { return x * sigmoid(x); }

// fp32 ulp of e (the spacing of floats at |e|; denormal spacing below).
double ulp32(double e) {
  int ex = 0;
  std::frexp(std::max(std::fabs(e), 0x1p-126), &ex);
  return std::ldexp(1.0, ex - 24);
}

std::vector<const cpu::EltwiseKernels*> all_isas() {
  std::vector<const cpu::EltwiseKernels*> v;
  for (cpu::Isa isa : {cpu::Isa::Avx512, cpu::Isa::Avx2})
    if (const auto* k = cpu::eltwise_kernels_for(isa)) v.push_back(k);
  return v;
}

// Dense inputs over the whole interesting range of the activations.
std::vector<float> dense_inputs() {
  std::vector<float> x;
  for (double v = -110; v <= 100; v += 0.000873) x.push_back(static_cast<float>(v));
  for (float v : {0.f, -0.f, 1e-30f, -1e-30f, 1e-40f, -1e-40f, 0.5f, -0.5f, 0.70710677f})
    x.push_back(v);
  return x;
}

// Largest error of f over x in units of ulp(exact) * (1 + cond(x)), ignoring
// results that overflow fp32; a denormal result may also be off by |x| times
// the smallest denormal (its intermediate exp is denormal).
double worst_error(void (*f)(const float*, float*, int64_t), const std::vector<float>& x,
                   const std::function<double(double)>& exact,
                   const std::function<double(double)>& cond) {
  std::vector<float> y(x.size());
  f(x.data(), y.data(), static_cast<int64_t>(x.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = exact(x[i]);
    if (!(std::fabs(e) <= FLT_MAX)) continue;
    const double scale = ulp32(e) * (1 + cond(x[i])) + std::fabs(x[i]) * 0x1p-149;
    worst = std::max(worst, std::fabs(y[i] - e) / scale);
  }
  return worst;
}

// Measured (AVX-512 and AVX2 alike): exp 0.97, gelu_erf 4.8, gelu_tanh 2.07
// (times 1 + the conditioning |2u| (1 - sigmoid(2u)) of rounding its argument
// u in fp32), silu 3.2 ulp. The bounds leave half an ulp or so of headroom.
TEST(EltwiseKernels, ActivationsAreAccurateToAFewUlp) {
  const std::vector<float> x = dense_inputs();
  const auto none = [](double) { return 0.0; };
  for (const cpu::EltwiseKernels* k : all_isas()) {
    SCOPED_TRACE(k->isa);
    const double e_exp = worst_error(
        k->exp, x, [](double v) { return std::exp(v); }, none);
    const double e_erf = worst_error(k->gelu_erf, x, gelu_erf_exact, none);
    const double e_tanh = worst_error(k->gelu_tanh, x, gelu_tanh_exact, [](double v) {
      const double a = tanh_arg2(v);
      return std::fabs(a) * (1 - sigmoid(a));
    });
    const double e_silu = worst_error(k->silu, x, silu_exact, none);
    std::printf(
        "[ %s ] max error in ulp: exp %.2f, gelu_erf %.2f, gelu_tanh %.2f (x (1+cond)), "
        "silu %.2f\n",
        k->isa, e_exp, e_erf, e_tanh, e_silu);
    EXPECT_LE(e_exp, 1.5);
    EXPECT_LE(e_erf, 5.5);
    EXPECT_LE(e_tanh, 2.5);
    EXPECT_LE(e_silu, 4.0);
  }
}

TEST(EltwiseKernels, SpecialValues) {
  const float inf = INFINITY, nan = NAN;
  const std::vector<float> x = {inf, -inf, nan, 0.f, -0.f, 1e9f, -1e9f};
  for (const cpu::EltwiseKernels* k : all_isas()) {
    SCOPED_TRACE(k->isa);
    std::vector<float> y(x.size());
    k->exp(x.data(), y.data(), 7);
    EXPECT_EQ(y[0], inf);
    EXPECT_EQ(y[1], 0.f);
    EXPECT_TRUE(std::isnan(y[2]));
    EXPECT_EQ(y[3], 1.f);
    EXPECT_EQ(y[5], inf);
    EXPECT_EQ(y[6], 0.f);
    for (auto f : {k->gelu_erf, k->gelu_tanh, k->silu}) {
      f(x.data(), y.data(), 7);
      EXPECT_EQ(y[0], inf);
      EXPECT_TRUE(std::isnan(y[2]));
      EXPECT_EQ(y[3], 0.f);
      EXPECT_EQ(y[5], 1e9f);
      EXPECT_EQ(y[6], -0.f);
    }
  }
}

// Elementwise kernels do the same operations per element on every ISA, so
// their results must agree bit for bit (only the lane count differs).
TEST(EltwiseKernels, IsasAgreeBitForBit) {
  const auto isas = all_isas();
  if (isas.size() < 2) GTEST_SKIP() << "this CPU runs one ISA only";
  const auto& a = *isas[0];
  const auto& b = *isas[1];
  const std::vector<float> x = dense_inputs();
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> ya(x.size()), yb(x.size());
  auto same = [&](const char* what) {
    EXPECT_EQ(0, std::memcmp(ya.data(), yb.data(), x.size() * sizeof(float))) << what;
  };
  for (auto fn : {&cpu::EltwiseKernels::exp, &cpu::EltwiseKernels::gelu_erf,
                  &cpu::EltwiseKernels::gelu_tanh, &cpu::EltwiseKernels::silu}) {
    (a.*fn)(x.data(), ya.data(), n);
    (b.*fn)(x.data(), yb.data(), n);
    same("activation");
  }
  // Conversions, every 16-bit pattern (NaN, inf, denormals included) and back.
  std::vector<uint16_t> bits(65536), back_a(x.size()), back_b(x.size());
  for (int i = 0; i < 65536; ++i) bits[static_cast<size_t>(i)] = static_cast<uint16_t>(i);
  for (DType t : {DType::BF16, DType::F16}) {
    std::vector<float> fa(65536), fb(65536);
    a.to_f32(t, bits.data(), fa.data(), 65536);
    b.to_f32(t, bits.data(), fb.data(), 65536);
    EXPECT_EQ(0, std::memcmp(fa.data(), fb.data(), fa.size() * 4)) << dtype_name(t);
    a.from_f32(x.data(), t, back_a.data(), n);
    b.from_f32(x.data(), t, back_b.data(), n);
    EXPECT_EQ(0, std::memcmp(back_a.data(), back_b.data(), x.size() * 2)) << dtype_name(t);
  }
  const std::vector<float> w(x.size(), 0.75f);
  a.fma(x.data(), true, w.data(), true, x.data(), true, ya.data(), n);
  b.fma(x.data(), true, w.data(), true, x.data(), true, yb.data(), n);
  same("fma");
  a.normalize(x.data(), n, 0.25f, 1.5f, w.data(), x.data(), ya.data());
  b.normalize(x.data(), n, 0.25f, 1.5f, w.data(), x.data(), yb.data());
  same("normalize");
  a.rope(x.data(), w.data(), x.data(), ya.data(), n / 2);
  b.rope(x.data(), w.data(), x.data(), yb.data(), n / 2);
  EXPECT_EQ(0, std::memcmp(ya.data(), yb.data(), static_cast<size_t>(n / 2 * 2) * 4)) << "rope";
}

// The activations answer a vector without denormal arithmetic unless one of
// its lanes needs it (eltwise_kernels.inc): then that vector is evaluated
// exactly. Both ways must give the same bits for every input, so a value's
// result may not depend on its neighbours. Dense inputs (each vector holds
// neighbouring values: mostly one way) against the same inputs shuffled
// (tail values spread into most vectors: mostly the other way), un-shuffled.
TEST(EltwiseKernels, ActivationsDoNotDependOnNeighbouringLanes) {
  std::vector<float> x = dense_inputs();
  for (float v = -15.f; v < -9.f; v += 0.01f) x.push_back(v);  // the bands with tiny results
  const size_t n = x.size();
  std::vector<size_t> perm(n);
  for (size_t i = 0; i < n; ++i) perm[i] = i;
  std::mt19937 rng(7);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<float> xs(n), y(n), ys(n);
  for (size_t i = 0; i < n; ++i) xs[i] = x[perm[i]];
  for (const cpu::EltwiseKernels* k : all_isas())
    for (Activation act :
         {Activation::GeluErf, Activation::GeluTanh, Activation::Silu, Activation::Sigmoid}) {
      k->activation(act, x.data(), DType::F32, y.data(), DType::F32, static_cast<int64_t>(n));
      k->activation(act, xs.data(), DType::F32, ys.data(), DType::F32, static_cast<int64_t>(n));
      size_t differ = 0, first = n;
      for (size_t i = 0; i < n; ++i)
        if (std::memcmp(&ys[i], &y[perm[i]], 4) != 0) {
          ++differ;
          first = std::min(first, perm[i]);
        }
      EXPECT_EQ(differ, 0u) << k->isa << " act " << static_cast<int>(act)
                            << ", first at x = " << (first < n ? x[first] : 0.f);
    }
}

// The typed activation kernel (conversion in registers) must equal convert ->
// fp32 kernel -> convert, bit for bit, for every dtype pair.
TEST(EltwiseKernels, TypedActivationsEqualFp32Path) {
  std::vector<float> x = dense_inputs();
  x.resize(x.size() / 7 * 7 + 5);  // a ragged tail
  const int64_t n = static_cast<int64_t>(x.size());
  const DType types[] = {DType::F32, DType::BF16, DType::F16};
  for (const cpu::EltwiseKernels* k : all_isas())
    for (DType xt : types)
      for (DType yt : types) {
        std::vector<uint8_t> xin(x.size() * 4), got(x.size() * 4), want(x.size() * 4);
        k->from_f32(x.data(), xt, xin.data(), n);
        std::vector<float> xf(x.size()), yf(x.size());
        k->to_f32(xt, xin.data(), xf.data(), n);
        for (auto [act, fn] : {std::pair{Activation::GeluErf, k->gelu_erf},
                               std::pair{Activation::GeluTanh, k->gelu_tanh},
                               std::pair{Activation::Silu, k->silu}}) {
          k->activation(act, xin.data(), xt, got.data(), yt, n);
          fn(xf.data(), yf.data(), n);
          k->from_f32(yf.data(), yt, want.data(), n);
          EXPECT_EQ(0, std::memcmp(got.data(), want.data(), x.size() * dtype_size(yt)))
              << k->isa << " " << dtype_name(xt) << "->" << dtype_name(yt) << " act "
              << static_cast<int>(act);
        }
      }
}

// BF16 and F16 conversions against c10's scalar ones (runtime/dtype.h).
TEST(EltwiseKernels, ConversionsMatchC10) {
  std::vector<float> x = dense_inputs();
  for (uint32_t b : {0x7F800000u, 0xFF800000u, 0x7FC00001u, 0xFFFFFFFFu, 0x00000001u, 0x807FFFFFu,
                     0x3F808000u, 0x3F818000u, 0x477FF000u, 0x477FE000u, 0x387FC000u})
    x.push_back(f32_from_bits(b));
  for (int i = 0; i < 100000; ++i) x.push_back(f32_from_bits(static_cast<uint32_t>(i) * 42949u));
  const int64_t n = static_cast<int64_t>(x.size());
  for (const cpu::EltwiseKernels* k : all_isas()) {
    SCOPED_TRACE(k->isa);
    std::vector<uint16_t> h(x.size());
    k->from_f32(x.data(), DType::BF16, h.data(), n);
    int64_t bad = 0;
    for (size_t i = 0; i < x.size(); ++i) bad += h[i] != f32_to_bf16(x[i]);
    EXPECT_EQ(bad, 0) << "bf16";
    k->from_f32(x.data(), DType::F16, h.data(), n);
    bad = 0;
    for (size_t i = 0; i < x.size(); ++i)
      bad += h[i] != f32_to_f16(x[i]) && !std::isnan(x[i]);  // NaN payloads may differ
    EXPECT_EQ(bad, 0) << "f16";
    std::vector<float> back(x.size());
    for (DType t : {DType::BF16, DType::F16}) {
      std::vector<uint16_t> all(65536);
      for (int i = 0; i < 65536; ++i) all[static_cast<size_t>(i)] = static_cast<uint16_t>(i);
      std::vector<float> f(65536);
      k->to_f32(t, all.data(), f.data(), 65536);
      bad = 0;
      for (int i = 0; i < 65536; ++i) {
        const float e = t == DType::BF16 ? bf16_to_f32(all[static_cast<size_t>(i)])
                                         : f16_to_f32(all[static_cast<size_t>(i)]);
        bad += f32_bits(f[static_cast<size_t>(i)]) != f32_bits(e);
      }
      EXPECT_EQ(bad, 0) << dtype_name(t);
    }
  }
}

TEST(EltwiseKernels, ReductionsAndSoftmax) {
  for (const cpu::EltwiseKernels* k : all_isas()) {
    SCOPED_TRACE(k->isa);
    for (int64_t n : {1, 7, 33, 1537, 5120, 40000}) {
      OwnedTensor t = ft::random_tensor(DType::F32, {n}, 7 + static_cast<uint64_t>(n), 3.0, 0.5);
      const float* x = t.t.ptr<float>();
      double sum = 0, sabs = 0, ssq = 0, mx = -INFINITY, mn = INFINITY;
      for (int64_t i = 0; i < n; ++i) {
        sum += x[i];
        sabs += std::fabs(x[i]);
        ssq += double(x[i]) * x[i];
        mx = std::max(mx, double(x[i]));
        mn = std::min(mn, double(x[i]));
      }
      // Blocks of 1024: <= 16 lane additions + a 4 + log2(lanes) step tree in fp32.
      EXPECT_NEAR(k->sum(x, n), sum, 32 * u * sabs) << n;
      EXPECT_NEAR(k->sum_sq(x, n), ssq, 32 * u * ssq) << n;
      EXPECT_EQ(k->max(x, n), mx);
      EXPECT_EQ(k->min(x, n), mn);
      std::vector<float> y(static_cast<size_t>(n));
      k->softmax(x, y.data(), n);
      double denom = 0;
      for (int64_t j = 0; j < n; ++j) denom += std::exp(x[j] - mx);
      for (int64_t i = 0; i < n; ++i) {
        const double p = std::exp(x[i] - mx) / denom;
        EXPECT_NEAR(y[static_cast<size_t>(i)], p, p * u * (16 + 2 * std::fabs(x[i] - mx)));
      }
    }
    std::vector<float> with_nan = {1.f, NAN, 3.f};
    EXPECT_TRUE(std::isnan(k->max(with_nan.data(), 3)));
    EXPECT_TRUE(std::isnan(k->min(with_nan.data(), 3)));
    std::vector<float> acc = {1.f, NAN, 5.f}, in = {NAN, 2.f, 4.f};
    k->accumulate(acc.data(), in.data(), 3, cpu::ReduceKind::Max);
    EXPECT_TRUE(std::isnan(acc[0]) && std::isnan(acc[1]) && acc[2] == 5.f);
  }
}

// ---------------------------------------------------------------------------
// Reference ops
// ---------------------------------------------------------------------------

OwnedTensor vec(std::initializer_list<double> v, Shape shape, DType dt = DType::F32) {
  OwnedTensor t(dt, shape);
  ft::fill(t.t, std::vector<double>(v));
  return t;
}

TEST(RefEltwise, HandComputedValues) {
  // a [2, 1, 3] (+, *) b [3] broadcast to [2, 2, 3]; c [2, 2, 1].
  OwnedTensor a = vec({1, 2, 3, -4, 5, 6}, {2, 1, 3});
  OwnedTensor b = vec({0.5, -1, 2}, {3});
  OwnedTensor c = vec({1, 2, 3, 4}, {2, 2, 1});
  OwnedTensor y(DType::F32, {2, 2, 3});
  std::vector<double> exp_add, exp_mul, exp_fma;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 3; ++k) {
        const double av = ft::values(a)[i * 3 + k], bv = ft::values(b)[k];
        const double cv = ft::values(c)[i * 2 + j];
        exp_add.push_back(av + bv);
        exp_mul.push_back(av * bv);
        exp_fma.push_back(av + bv * cv);
      }
  const std::vector<double> zero(12, 0.0);
  ref::add(a, b, y);
  ft::expect_close(y, exp_add, zero, "add");
  ref::mul(a, b, y);
  ft::expect_close(y, exp_mul, zero, "mul");
  ref::mul_add(a, b, c, y);
  ft::expect_close(y, exp_fma, zero, "mul_add");
  // modulate: x [1, 2, 3], shift/scale [1, 1, 3].
  OwnedTensor x = vec({1, 2, 3, 4, 5, 6}, {1, 2, 3});
  OwnedTensor shift = vec({0.25, 0, -1}, {1, 1, 3}), scale = vec({1, -0.5, 0}, {1, 1, 3});
  OwnedTensor ym(DType::F32, {1, 2, 3});
  ref::modulate(x, shift, scale, ym);
  ft::expect_close(ym, {2.25, 1, 2, 8.25, 2.5, 5}, std::vector<double>(6, 0.0), "modulate");
  ref::affine(x, -2.f, 0.5f, ym);
  ft::expect_close(ym, {-1.5, -3.5, -5.5, -7.5, -9.5, -11.5}, std::vector<double>(6, 0.0),
                   "affine");
  // Known activation values: Phi(1) = 0.841344746..., silu(1) = sigmoid(1).
  OwnedTensor xs = vec({0, 1, -1, 30, -30}, {5});
  OwnedTensor ya(DType::F32, {5});
  const std::vector<double> tol(5, 1e-7);
  ref::gelu(xs, ya, false);
  ft::expect_close(ya, {0, 0.8413447460685429, -0.15865525393145707, 30, -0.0}, tol, "gelu erf");
  ref::gelu(xs, ya, true);
  ft::expect_close(ya, {0, 0.8411919906082768, -0.15880800939172324, 30, -0.0}, tol, "gelu tanh");
  ref::silu(xs, ya);
  ft::expect_close(ya, {0, 0.7310585786300049, -0.2689414213699951, 30, -2.8072868906520526e-12},
                   tol, "silu");
}

TEST(RefEltwise, SoftmaxAndRopeByHand) {
  OwnedTensor x = vec({0, std::log(2.0), std::log(3.0), 100, 100, 100}, {2, 3});
  OwnedTensor y(DType::F32, {2, 3});
  ref::softmax(x, y);
  const std::vector<double> tol(6, 1e-7);
  ft::expect_close(y, {1 / 6.0, 2 / 6.0, 3 / 6.0, 1 / 3.0, 1 / 3.0, 1 / 3.0}, tol, "softmax");
  // rope on [1, 2, 1, 4]: position 0 rotates by 90 and 0 degrees, position 1 by 180 and 45.
  OwnedTensor q = vec({1, 2, 3, 4, 1, 2, 3, 4}, {1, 2, 1, 4});
  const double r = std::sqrt(0.5);
  OwnedTensor cs = vec({0, 1, -1, r}, {2, 2}), sn = vec({1, 0, 0, r}, {2, 2});
  OwnedTensor out(DType::F32, {1, 2, 1, 4});
  ref::rope(q, cs, sn, out);
  ft::expect_close(out, {-2, 1, 3, 4, -1, -2, 3 * r - 4 * r, 3 * r + 4 * r},
                   std::vector<double>(8, 1e-7), "rope");
}

// The reference against torch (tools/gen_op_fixtures.py). PyTorch computes
// these in fp32: GELU as 0.5 x (1 + erf|tanh), whose 1 + erf|tanh is only
// accurate to a few ulp of 1 (measured: absolute error up to ~5 u |x| beyond
// 8 u |y| for erf; relative error unbounded in the negative tail), softmax
// with exp of the rounded x - max.
TEST(RefEltwise, MatchesTorch) {
  const ft::Fixtures f = ft::load_fixtures("ops/act.safetensors");
  const Tensor& x32 = f.get("act_in.x");
  const std::vector<double> xv = ft::values(x32);
  int checked = 0;
  for (const auto& [name, p] : f.cases) {
    if (p.at("op") == "input") continue;
    SCOPED_TRACE(name);
    const Tensor& y_torch = f.get(name + ".y");
    OwnedTensor x = ft::to_dtype(f.has(name + ".x") ? f.get(name + ".x") : x32, y_torch.dtype);
    OwnedTensor y(DType::F32, x.t.shape);
    std::vector<double> tol;
    const std::vector<double> in = ft::values(x);
    if (p.at("op") == "softmax") {
      ref::softmax(x, y);
      const std::vector<double> yv = ft::values(y);
      const int64_t n = x.t.dim(-1);
      for (size_t i = 0; i < in.size(); ++i) {
        double m = -INFINITY;
        for (int64_t j = 0; j < n; ++j) m = std::max(m, in[i / size_t(n) * size_t(n) + size_t(j)]);
        tol.push_back(yv[i] * u * (16 + 2 * std::fabs(in[i] - m)));
      }
    } else {
      if (p.at("op") == "gelu") {
        ref::gelu(x, y, p.at("approximate") == "tanh");
      } else {
        ref::silu(x, y);
      }
      const std::vector<double> yv = ft::values(y);
      for (size_t i = 0; i < in.size(); ++i)
        tol.push_back(8 * u * std::fabs(yv[i]) +
                      (p.at("op") == "gelu" ? 8 * u * std::fabs(in[i]) : 0));
    }
    // torch's (fp32 or rounded-once bf16) output must lie in the band around ours.
    ft::expect_close(y_torch, ft::values(y), tol, name);
    ++checked;
  }
  EXPECT_EQ(checked, 11);
  (void)xv;
}

// ---------------------------------------------------------------------------
// CPU against the reference
// ---------------------------------------------------------------------------

constexpr int64_t kWidths[] = {1, 7, 33, 1536, 1537, 5120, 8960};

struct DTypes {
  DType in, out;
};
constexpr DTypes kDTypes[] = {{DType::F32, DType::F32},
                              {DType::BF16, DType::BF16},
                              {DType::BF16, DType::F32},
                              {DType::F32, DType::BF16},
                              {DType::F16, DType::F16}};

std::string label(const char* op, DTypes d, const Shape& s) {
  return std::string(op) + " " + std::string(dtype_name(d.in)) + "->" +
         std::string(dtype_name(d.out)) + " " + s.str();
}

// Runs the reference (F32 output: exact values rounded once) and the CPU op
// (output dtype d.out) and checks the CPU result within tol(i).
using Op = std::function<void(Tensor& y)>;
void check_cpu(const Op& ref_op, const Op& cpu_op, const Shape& shape, DType out,
               const std::function<double(size_t, double)>& tol, const std::string& what,
               Tensor* cpu_y = nullptr) {
  OwnedTensor yr(DType::F32, shape);
  ref_op(yr);
  const std::vector<double> e = ft::values(yr);
  OwnedTensor yc(out, shape);
  Tensor& y = cpu_y ? *cpu_y : yc.t;
  cpu_op(y);
  std::vector<double> t(e.size());
  for (size_t i = 0; i < e.size(); ++i) t[i] = tol(i, e[i]);
  ft::expect_close(y, e, t, what);
}

TEST(CpuEltwise, ActivationsMatchRef) {
  for (DTypes d : kDTypes)
    for (int64_t w : kWidths) {
      const Shape s{3, w};
      OwnedTensor x = ft::random_tensor(d.in, s, 11 + static_cast<uint64_t>(w), 3.0);
      const std::vector<double> xv = ft::values(x);
      auto den = [&](size_t i) { return std::fabs(xv[i]) * 0x1p-149; };
      check_cpu([&](Tensor& y) { ref::gelu(x, y, false); },
                [&](Tensor& y) { cpu::gelu(x, y, false); }, s, d.out,
                [&](size_t i, double e) { return 12 * u * std::fabs(e) + den(i); },
                label("gelu erf", d, s));
      check_cpu([&](Tensor& y) { ref::gelu(x, y, true); },
                [&](Tensor& y) { cpu::gelu(x, y, true); }, s, d.out,
                [&](size_t i, double e) {
                  return 8 * u * std::fabs(e) * (1 + std::fabs(tanh_arg2(xv[i]))) + den(i);
                },
                label("gelu tanh", d, s));
      check_cpu([&](Tensor& y) { ref::silu(x, y); }, [&](Tensor& y) { cpu::silu(x, y); }, s, d.out,
                [&](size_t i, double e) { return 10 * u * std::fabs(e) + den(i); },
                label("silu", d, s));
    }
}

// The generic activation op (ReLU after a GroupNorm, sigmoid gates), every
// dtype pair and width, then a transposed view into a padded output.
TEST(CpuEltwise, GenericActivationMatchesRef) {
  for (DTypes d : kDTypes)
    for (int64_t w : kWidths) {
      const Shape s{3, w};
      OwnedTensor x = ft::random_tensor(d.in, s, 21 + static_cast<uint64_t>(w), 3.0);
      const std::vector<double> xv = ft::values(x);
      auto den = [&](size_t i) { return std::fabs(xv[i]) * 0x1p-149; };
      // (GeluErf is left out: ref::activate, the linear epilogues' oracle,
      // evaluates 0.5 x (1 + erf) and loses the far negative tail that
      // ref::gelu's erfc form keeps; the gelu op tests cover the kernels.)
      for (Activation a : {Activation::Relu, Activation::Sigmoid, Activation::Silu}) {
        check_cpu([&](Tensor& y) { ref::activation(x, y, a); },
                  [&](Tensor& y) { cpu::activation(x, y, a); }, s, d.out,
                  [&](size_t i, double e) { return 12 * u * std::fabs(e) + den(i); },
                  label(test::act_name(a), d, s));
      }
    }
  for (DType dt : {DType::F32, DType::BF16}) {
    OwnedTensor x = ft::random_tensor(dt, {4, 6, 37}, 31, 3.0);
    const Tensor xt = x.t.permute({2, 1, 0});
    ft::StridedTensor y = ft::make_padded(dt, xt.shape, 2);
    for (Activation a : {Activation::Relu, Activation::Sigmoid})
      check_cpu([&](Tensor& o) { ref::activation(xt, o, a); },
                [&](Tensor& o) { cpu::activation(xt, o, a); }, xt.shape, dt,
                [&](size_t, double e) { return 12 * u * std::fabs(e); },
                std::string(test::act_name(a)) + " strided", &y.t);
  }
}

struct BroadcastCase {
  Shape y, a, b, c;
};
// [B, L, C] with [B, 1, C] gates, [C] vectors, [1] scalars and Wan's per-frame
// modulation [B, F, 1, C] over [B, F, T, C].
const BroadcastCase kBroadcasts[] = {
    {{2, 5, 1536}, {2, 5, 1536}, {2, 1, 1536}, {2, 5, 1536}},
    {{2, 5, 33}, {2, 5, 33}, {33}, {1}},
    {{3, 7}, {1}, {3, 7}, {3, 1}},
    {{1, 2, 3, 8960}, {1, 2, 3, 8960}, {1, 2, 1, 8960}, {1, 2, 1, 8960}},
    {{4, 1537}, {4, 1537}, {4, 1537}, {4, 1537}},
    {{1}, {1}, {1}, {1}},
};

TEST(CpuEltwise, BroadcastArithmeticMatchesRef) {
  uint64_t seed = 100;
  for (DTypes d : kDTypes)
    for (const BroadcastCase& bc : kBroadcasts) {
      OwnedTensor a = ft::random_tensor(d.in, bc.a, ++seed);
      OwnedTensor b = ft::random_tensor(d.in, bc.b, ++seed, 0.5);
      OwnedTensor c = ft::random_tensor(d.in, bc.c, ++seed, 2.0);
      const auto av = ft::broadcast_values(a, bc.y), bv = ft::broadcast_values(b, bc.y),
                 cv = ft::broadcast_values(c, bc.y);
      // Each is one fp32 rounding (modulate: two) of the exact result.
      check_cpu([&](Tensor& y) { ref::add(a, b, y); }, [&](Tensor& y) { cpu::add(a, b, y); }, bc.y,
                d.out,
                [&](size_t i, double) { return 2 * u * (std::fabs(av[i]) + std::fabs(bv[i])); },
                label("add", d, bc.y));
      check_cpu([&](Tensor& y) { ref::mul(a, b, y); }, [&](Tensor& y) { cpu::mul(a, b, y); }, bc.y,
                d.out, [&](size_t i, double) { return 2 * u * std::fabs(av[i] * bv[i]); },
                label("mul", d, bc.y));
      check_cpu(
          [&](Tensor& y) { ref::mul_add(a, b, c, y); },
          [&](Tensor& y) { cpu::mul_add(a, b, c, y); }, bc.y, d.out,
          [&](size_t i, double) { return 2 * u * (std::fabs(av[i]) + std::fabs(bv[i] * cv[i])); },
          label("mul_add", d, bc.y));
      if (bc.a == bc.y) {
        check_cpu([&](Tensor& y) { ref::modulate(a, b, c, y); },
                  [&](Tensor& y) { cpu::modulate(a, b, c, y); }, bc.y, d.out,
                  [&](size_t i, double) {
                    return 3 * u * (std::fabs(av[i]) * (1 + std::fabs(cv[i])) + std::fabs(bv[i]));
                  },
                  label("modulate", d, bc.y));
        check_cpu([&](Tensor& y) { ref::affine(a, 1.7f, -0.3f, y); },
                  [&](Tensor& y) { cpu::affine(a, 1.7f, -0.3f, y); }, bc.y, d.out,
                  [&](size_t i, double) { return 2 * u * (std::fabs(av[i]) * 1.7 + 0.3); },
                  label("affine", d, bc.y));
      }
    }
}

TEST(CpuEltwise, StridedAndInPlace) {
  // Strided (padded) inputs and output, a transposed operand, and y aliasing a.
  for (DType dt : {DType::F32, DType::BF16}) {
    const Shape s{4, 6, 37};
    ft::StridedTensor a = ft::make_padded(dt, s, 5);
    ft::fill(a.t, ft::values(ft::random_tensor(DType::F32, s, 1)));
    ft::StridedTensor b = ft::make_permuted(dt, s, {2, 0, 1});
    ft::fill(b.t, ft::values(ft::random_tensor(DType::F32, s, 2)));
    ft::StridedTensor y = ft::make_padded(dt, s, 3);
    const auto av = ft::values(a), bv = ft::values(b);
    auto tol = [&](size_t i, double) { return 2 * u * (std::fabs(av[i]) + std::fabs(bv[i])); };
    check_cpu([&](Tensor& o) { ref::add(a, b, o); }, [&](Tensor& o) { cpu::add(a, b, o); }, s, dt,
              tol, "add strided", &y.t);
    check_cpu([&](Tensor& o) { ref::add(a, b, o); }, [&](Tensor& o) { cpu::add(a, b, o); }, s, dt,
              tol, "add in place", &a.t);
    // Activations of a transposed view into a padded output.
    ft::StridedTensor gy = ft::make_padded(dt, {37, 6, 4}, 2);
    const Tensor at = a.t.permute({2, 1, 0});
    const auto atv = ft::values(at);
    check_cpu([&](Tensor& o) { ref::gelu(at, o, true); },
              [&](Tensor& o) { cpu::gelu(at, o, true); }, at.shape, dt,
              [&](size_t i, double e) {
                return 8 * u * std::fabs(e) * (1 + std::fabs(tanh_arg2(atv[i])));
              },
              "gelu strided", &gy.t);
    OwnedTensor g = ft::random_tensor(dt, {5, 9, 64}, 3, 2.0);
    const auto gv = ft::values(g);
    check_cpu([&](Tensor& o) { ref::silu(g, o); }, [&](Tensor& o) { cpu::silu(g, o); }, g.t.shape,
              dt, [&](size_t, double e) { return 10 * u * std::fabs(e); }, "silu in place", &g.t);
    (void)gv;
  }
}

// Zero-element tensors must not reach a work-size division or a kernel.
TEST(CpuEltwise, EmptyTensorsAreNoOps) {
  OwnedTensor x(DType::F32, {0, 7}), y(DType::F32, {0, 7}), w(DType::F32, {7});
  cpu::gelu(x, y, false);
  cpu::add(x, w, y);
  cpu::softmax(x, y);
  cpu::layer_norm(x, w, w, 1e-5f, y);
  cpu::rms_norm(x, w, 1e-5f, y);
  OwnedTensor g(DType::F32, {2, 4, 0}), gy(DType::F32, {2, 4, 0});
  cpu::group_norm(g, 2, Tensor{}, Tensor{}, 1e-5f, gy, Activation::None);
  cpu::copy(x, y);
}

TEST(CpuEltwise, SoftmaxMatchesRef) {
  for (DTypes d : kDTypes)
    for (int64_t w : kWidths) {
      const Shape s{3, w};
      OwnedTensor x = ft::random_tensor(d.in, s, 21 + static_cast<uint64_t>(w), 4.0);
      const auto xv = ft::values(x);
      std::vector<double> mx(3, -INFINITY);
      for (size_t i = 0; i < xv.size(); ++i) mx[i / size_t(w)] = std::max(mx[i / size_t(w)], xv[i]);
      check_cpu([&](Tensor& y) { ref::softmax(x, y); }, [&](Tensor& y) { cpu::softmax(x, y); }, s,
                d.out,
                [&](size_t i, double e) {
                  return e * u * (16 + 2 * std::fabs(xv[i] - mx[i / size_t(w)]));
                },
                label("softmax", d, s));
    }
  // Rows of a strided view, in place.
  ft::StridedTensor x = ft::make_padded(DType::F32, {7, 257}, 9);
  ft::fill(x.t, ft::values(ft::random_tensor(DType::F32, {7, 257}, 5)));
  const auto xv = ft::values(x);
  std::vector<double> mx(7, -INFINITY);
  for (size_t i = 0; i < xv.size(); ++i) mx[i / 257] = std::max(mx[i / 257], xv[i]);
  check_cpu([&](Tensor& y) { ref::softmax(x, y); }, [&](Tensor& y) { cpu::softmax(x, y); },
            {7, 257}, DType::F32,
            [&](size_t i, double e) { return e * u * (16 + 2 * std::fabs(xv[i] - mx[i / 257])); },
            "softmax strided in place", &x.t);
}

TEST(CpuEltwise, RopeMatchesRef) {
  // Wan: [1, L, 12, 128]; the action module's [.., 16, 64]; odd pair counts.
  const Shape shapes[] = {{1, 6, 12, 128}, {2, 3, 16, 64}, {1, 5, 3, 14}, {1, 2, 1, 2}};
  for (DTypes d : kDTypes)
    for (const Shape& s : shapes) {
      const int64_t L = s[1], half = s[3] / 2;
      OwnedTensor x = ft::random_tensor(d.in, s, 31);
      OwnedTensor cs(DType::F32, {L, half}), sn(DType::F32, {L, half});
      for (int64_t l = 0; l < L; ++l)
        for (int64_t i = 0; i < half; ++i) {
          const double ang = (l + 3) * std::pow(10000.0, -2.0 * i / double(s[3]));
          cs.t.ptr<float>()[l * half + i] = static_cast<float>(std::cos(ang));
          sn.t.ptr<float>()[l * half + i] = static_cast<float>(std::sin(ang));
        }
      const auto xv = ft::values(x);
      check_cpu([&](Tensor& y) { ref::rope(x, cs, sn, y); },
                [&](Tensor& y) { cpu::rope(x, cs, sn, y); }, s, d.out,
                [&](size_t i, double) {
                  const size_t p = i & ~size_t{1};
                  return 4 * u * (std::fabs(xv[p]) + std::fabs(xv[p + 1]));
                },
                label("rope", d, s));
    }
  // q as a strided view of a fused [B, L, 3 * H * D] projection, rotated in place.
  OwnedTensor qkv = ft::random_tensor(DType::BF16, {1, 4, 3 * 2 * 8}, 9);
  Tensor q = qkv.t.reshape({1, 4, 6, 8}).slice(2, 0, 2);
  OwnedTensor cs(DType::F32, {4, 4}), sn(DType::F32, {4, 4});
  for (int64_t i = 0; i < 16; ++i) {
    cs.t.ptr<float>()[i] = static_cast<float>(std::cos(0.3 * i));
    sn.t.ptr<float>()[i] = static_cast<float>(std::sin(0.3 * i));
  }
  const auto qv = ft::values(q);
  check_cpu([&](Tensor& y) { ref::rope(q, cs, sn, y); },
            [&](Tensor& y) { cpu::rope(q, cs, sn, y); }, q.shape, DType::BF16,
            [&](size_t i, double) {
              const size_t p = i & ~size_t{1};
              return 4 * u * (std::fabs(qv[p]) + std::fabs(qv[p + 1]));
            },
            "rope strided in place", &q);
}

}  // namespace
}  // namespace flick
