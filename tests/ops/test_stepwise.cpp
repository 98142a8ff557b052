// The ops that reproduce a PyTorch op chain's rounding (backend.h: rope_3d,
// rope_unfused, rms_norm_stepwise, mul_add_stepwise, normalize_l2,
// softmax_parts): the CPU op against the reference op, and the CPU row
// kernels (AVX-512 and portable) against each other.
//
// Tolerances: rope_3d, rope_unfused, rms_norm_stepwise and mul_add_stepwise
// do the same fp32 / f64 operations in the same order on both backends (no
// FMA on either: both build with -ffp-contract=off), so they are compared bit
// for bit. normalize_l2 and softmax_parts are not: the CPU sums |x|^2 and the
// exps in a different order and evaluates exp / SiLU with ~1-ulp polynomials
// (the reference in double), which moves a bf16 rounding only where a value
// lies within a few fp32 ulps of a rounding tie; see each test.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "runtime/cpu/normalize_l2_kernels.h"
#include "runtime/cpu/ops.h"
#include "runtime/cpu/stepwise_kernels.h"
#include "runtime/dtype.h"
#include "runtime/ref/ops.h"
#include "tests/ops/elementwise_testing.h"

namespace flick {
namespace {

namespace ft = flick::testing;

// Random bf16 bits over the whole range (normals of every scale, denormals,
// zeros, infinities, NaNs) from a fixed LCG.
std::vector<uint16_t> random_bits(size_t n, uint32_t seed) {
  std::vector<uint16_t> v(n);
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = static_cast<uint16_t>(seed >> 16);
  }
  return v;
}

// The same, finite and of moderate scale (2^-31 .. 2^32).
OwnedTensor finite_bf16(Shape shape, uint32_t seed) {
  OwnedTensor o(DType::BF16, shape);
  std::vector<uint16_t> v = random_bits(static_cast<size_t>(o.t.numel()), seed);
  for (auto& x : v) x = static_cast<uint16_t>((x & 0x8000) | (0x3000 + (x & 0x1FFF)));
  std::memcpy(o.t.data, v.data(), v.size() * 2);
  return o;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data, b.data, a.nbytes()) == 0;
}

bool avx512() { return cpu::stepwise::has_stepwise_avx512(); }

// ---- row kernels: AVX-512 against scalar, bit for bit ----

TEST(StepwiseKernels, Rope3dAvx512MatchesScalar) {
  if (!avx512()) GTEST_SKIP() << "no AVX-512 on this CPU: only the scalar kernel runs";
  for (int pairs : {64, 16, 13}) {  // full size, the tiny goldens' head, a tail
    SCOPED_TRACE(pairs);
    const int64_t rows = 37;
    const std::vector<uint16_t> x = random_bits(static_cast<size_t>(rows * 2 * pairs), pairs);
    std::vector<double> c(static_cast<size_t>(pairs)), s(c.size());
    for (int p = 0; p < pairs; ++p) c[p] = std::cos(0.7 * p + 0.1), s[p] = std::sin(0.7 * p + 0.1);
    std::vector<uint16_t> want(x.size()), got(x.size());
    cpu::stepwise::rotate_pairs_bf16_scalar(x.data(), c.data(), s.data(), pairs, rows, want.data());
    cpu::stepwise::rotate_pairs_bf16_avx512(x.data(), c.data(), s.data(), pairs, rows, got.data());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 2), 0);
  }
}

TEST(StepwiseKernels, MulAddRowAvx512MatchesScalar) {
  if (!avx512()) GTEST_SKIP() << "no AVX-512 on this CPU: only the scalar kernel runs";
  for (int64_t n : {1, 15, 16, 77, 1536}) {  // tails, one vector, the DiT's width
    const std::vector<uint16_t> a = random_bits(n, 4), b = random_bits(n, 5), c = random_bits(n, 6);
    std::vector<uint16_t> one(n), two(n);
    cpu::stepwise::mul_add_row_bf16_avx512(a.data(), b.data(), c.data(), one.data(), n);
    cpu::stepwise::mul_add_row_bf16_scalar(a.data(), b.data(), c.data(), two.data(), n);
    EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * 2), 0) << n;
  }
}

// 16 rows per pass, one per lane, against the scalar row: random rows at
// several scales (squares that round, overflow to inf, or vanish in the sum),
// zero rows, NaN / inf elements, dims 64 (the action module's), 2 and 130.
TEST(StepwiseKernels, RmsNormRows16Avx512MatchesScalar) {
  if (!avx512()) GTEST_SKIP() << "no AVX-512 on this CPU: only the scalar kernel runs";
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t dim : {int64_t(64), int64_t(2), int64_t(130)})
    for (int trial = 0; trial < 8; ++trial) {
      const float scale = std::ldexp(1.f, 40 * (trial % 4) - 60);  // 2^-60 .. 2^60
      std::vector<uint16_t> x(static_cast<size_t>(16 * dim));
      for (uint16_t& e : x) e = f32_to_bf16(normal(rng) * scale);
      if (trial == 5) std::fill(x.begin(), x.begin() + dim, uint16_t{0});  // a zero row
      if (trial == 6) x[3] = 0x7FC0;                                       // NaN
      if (trial == 7) x[static_cast<size_t>(dim + 1)] = 0x7F80;            // +inf
      std::vector<uint16_t> want(x.size()), got(x.size());
      for (int64_t r = 0; r < 16; ++r)
        cpu::stepwise::rms_norm_row_bf16_scalar(x.data() + r * dim, dim, want.data() + r * dim,
                                                1e-6f);
      cpu::stepwise::rms_norm_rows16_bf16_avx512(x.data(), dim, got.data(), 1e-6f);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 2), 0)
          << "dim " << dim << " trial " << trial;
    }
}

// ---- ops: CPU against the reference ----

TEST(Rope3dOp, CpuMatchesReferenceBitForBit) {
  // Wan's split of head dims 128 (22/21/21) and 32 (6/5/5), and an uneven
  // one with vector tails; late frames (large angles), in place.
  struct Case {
    std::array<int64_t, 3> grid, start;
    std::array<int, 3> pairs;
    int64_t heads;
  };
  for (const Case& c :
       {Case{{2, 3, 4}, {500, 0, 0}, {22, 21, 21}, 3}, Case{{3, 2, 3}, {0, 0, 0}, {6, 5, 5}, 2},
        Case{{1, 5, 7}, {17, 2, 3}, {9, 3, 1}, 5}}) {
    Rope3dParams p;
    p.grid = c.grid;
    p.start = c.start;
    p.pairs = c.pairs;
    const int64_t tokens = c.grid[0] * c.grid[1] * c.grid[2];
    const int64_t d = 2 * (c.pairs[0] + c.pairs[1] + c.pairs[2]);
    SCOPED_TRACE("tokens " + std::to_string(tokens) + " head dim " + std::to_string(d));
    const OwnedTensor x = finite_bf16({tokens, c.heads, d}, static_cast<uint32_t>(d));
    OwnedTensor want(DType::BF16, x.t.shape), got(DType::BF16, x.t.shape);
    ref::rope_3d(x.t, p, want.t);
    cpu::rope_3d(x.t, p, got.t);
    EXPECT_TRUE(same_bytes(got.t, want.t));
    OwnedTensor inplace = ft::to_dtype(x.t, DType::BF16);
    cpu::rope_3d(inplace.t, p, inplace.t);
    EXPECT_TRUE(same_bytes(inplace.t, want.t));
  }
}

TEST(Rope3dOp, ReferenceIsTheComplex128Product) {
  // One token, one pair per axis: angle pos * theta^0 = pos for every axis,
  // so pair a turns by its axis position (start + coordinate).
  Rope3dParams p;
  p.grid = {1, 2, 3};
  p.start = {7, 0, 0};
  p.pairs = {1, 1, 1};
  OwnedTensor x(DType::F32, {6, 1, 6}), y(DType::F32, {6, 1, 6});
  for (int64_t i = 0; i < x.t.numel(); ++i) x.t.ptr<float>()[i] = 0.25f * static_cast<float>(i + 1);
  ref::rope_3d(x.t, p, y.t);
  const int64_t tok = 5;  // f 0, i 1, j 2
  const double pos[3] = {7, 1, 2};
  for (int a = 0; a < 3; ++a) {
    const double re = x.t.ptr<float>()[tok * 6 + 2 * a], im = x.t.ptr<float>()[tok * 6 + 2 * a + 1];
    EXPECT_EQ(y.t.ptr<float>()[tok * 6 + 2 * a],
              static_cast<float>(re * std::cos(pos[a]) - im * std::sin(pos[a])));
    EXPECT_EQ(y.t.ptr<float>()[tok * 6 + 2 * a + 1],
              static_cast<float>(im * std::cos(pos[a]) + re * std::sin(pos[a])));
  }
}

TEST(RopeUnfusedOp, CpuMatchesReferenceBitForBitAndRoundsEachOp) {
  const int64_t b = 5, l = 3, h = 2, d = 64;
  const OwnedTensor x = finite_bf16({b, l, h, d}, 11);
  OwnedTensor cos(DType::F32, {l, d / 2}), sin(DType::F32, {l, d / 2});
  for (int64_t i = 0; i < l * d / 2; ++i) {
    cos.t.ptr<float>()[i] = static_cast<float>(std::cos(0.37 * static_cast<double>(i)));
    sin.t.ptr<float>()[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
  }
  OwnedTensor want(DType::BF16, x.t.shape), got(DType::BF16, x.t.shape);
  ref::rope_unfused(x.t, cos.t, sin.t, want.t);
  cpu::rope_unfused(x.t, cos.t, sin.t, got.t);
  EXPECT_TRUE(same_bytes(got.t, want.t));
  OwnedTensor inplace = ft::to_dtype(x.t, DType::BF16);
  cpu::rope_unfused(inplace.t, cos.t, sin.t, inplace.t);
  EXPECT_TRUE(same_bytes(inplace.t, want.t));
  // The definition: fp32 products, an fp32 sum, then bf16.
  const auto* xb = static_cast<const uint16_t*>(x.t.data);
  const auto* yb = static_cast<const uint16_t*>(want.t.data);
  int64_t bad = 0;
  for (int64_t r = 0; r < b * l * h; ++r) {
    const int64_t li = r / h % l;
    for (int64_t i = 0; i < d / 2; ++i) {
      const float c = cos.t.ptr<float>()[li * d / 2 + i], s = sin.t.ptr<float>()[li * d / 2 + i];
      const float x0 = bf16_to_f32(xb[r * d + 2 * i]), x1 = bf16_to_f32(xb[r * d + 2 * i + 1]);
      const float p0 = x0 * c, q0 = x1 * s, p1 = x1 * c, q1 = x0 * s;
      bad += yb[r * d + 2 * i] != f32_to_bf16(p0 - q0);
      bad += yb[r * d + 2 * i + 1] != f32_to_bf16(p1 + q1);
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(RmsNormStepwiseOp, CpuMatchesReferenceBitForBit) {
  // Row counts off multiples of 16 (the AVX-512 kernel's pass) and dims 64,
  // 2 and 130 (odd pairs: the scalar path); in place as the action module runs it.
  for (int64_t dim : {int64_t(64), int64_t(2), int64_t(130)})
    for (int64_t rows : {int64_t(1), int64_t(15), int64_t(16), int64_t(300), int64_t(1000)}) {
      SCOPED_TRACE(std::to_string(rows) + " rows of " + std::to_string(dim));
      const OwnedTensor x = ft::random_tensor(DType::BF16, {rows, dim}, 3 * rows + dim, 3.0);
      OwnedTensor want(DType::BF16, x.t.shape), got(DType::BF16, x.t.shape);
      ref::rms_norm_stepwise(x.t, 1e-6f, want.t);
      cpu::rms_norm_stepwise(x.t, 1e-6f, got.t);
      EXPECT_TRUE(same_bytes(got.t, want.t));
      OwnedTensor inplace = ft::to_dtype(x.t, DType::BF16);
      cpu::rms_norm_stepwise(inplace.t, 1e-6f, inplace.t);
      EXPECT_TRUE(same_bytes(inplace.t, want.t));
    }
  // The rounding points, on one row: x = (3, 4): squares 9, 16 (exact), mean
  // 12.5, + eps rounds to 12.5 in bf16, sqrt 3.5355 -> bf16 3.53125, 1 / that
  // 0.283186 -> bf16 0.283203125; y = bf16(3 * 0.283203125), bf16(4 * ...).
  OwnedTensor x(DType::BF16, {1, 2}), y(DType::BF16, {1, 2});
  ft::fill(x.t, {3.0, 4.0});
  ref::rms_norm_stepwise(x.t, 1e-6f, y.t);
  const std::vector<double> v = ft::values(y.t);
  EXPECT_EQ(v[0], round_bf16(3.f * 0.283203125f));
  EXPECT_EQ(v[1], round_bf16(4.f * 0.283203125f));
}

TEST(MulAddStepwiseOp, CpuMatchesReferenceAndSeparateOpsBitForBit) {
  // The DiT's calls: per-frame [F, 1, D] rows from a strided [F, 6, D]
  // table, per-token rows, in place on a and on b; D with a vector tail.
  const int64_t f = 3, t = 29, d = 200;
  const OwnedTensor p = finite_bf16({f, t, d}, 1), table = finite_bf16({f, 6, d}, 2),
                    x = finite_bf16({f, t, d}, 3);
  const Tensor q = table.t.slice(1, 1, 1), r = table.t.slice(1, 4, 1);  // [F, 1, D]
  for (bool per_token : {false, true}) {
    SCOPED_TRACE(per_token);
    const Tensor a = per_token ? x.t : r;
    OwnedTensor want(DType::BF16, {f, t, d}), got(DType::BF16, {f, t, d}),
        sep(DType::BF16, {f, t, d});
    ref::mul_add_stepwise(a, p.t, q, want.t);
    cpu::mul_add_stepwise(a, p.t, q, got.t);
    EXPECT_TRUE(same_bytes(got.t, want.t));
    ref::mul(p.t, q, sep.t);  // PyTorch's two ops, each rounded
    ref::add(a, sep.t, sep.t);
    EXPECT_TRUE(same_bytes(sep.t, want.t));
    OwnedTensor on_b = ft::to_dtype(p.t, DType::BF16);
    cpu::mul_add_stepwise(a, on_b.t, q, on_b.t);
    EXPECT_TRUE(same_bytes(on_b.t, want.t));
    if (per_token) {
      OwnedTensor on_a = ft::to_dtype(x.t, DType::BF16);
      cpu::mul_add_stepwise(on_a.t, p.t, q, on_a.t);
      EXPECT_TRUE(same_bytes(on_a.t, want.t));
    }
  }
}

// ---- normalize_l2 ----

// Row r of the test input: values of magnitude ~2^(r % 5 - 2) (the norm's
// range), one all-zero row (the eps clamp), exact bf16 values.
std::vector<float> norm_input(int64_t rows, int64_t c) {
  std::vector<float> x(static_cast<size_t>(rows * c));
  uint32_t state = 99;
  for (int64_t r = 0; r < rows; ++r) {
    const float mag = std::ldexp(1.f, static_cast<int>(r % 5) - 2);
    for (int64_t j = 0; j < c; ++j) {
      state = state * 1664525u + 1013904223u;
      const float u = static_cast<float>(state >> 8) * 0x1p-23f - 1.f;
      x[static_cast<size_t>(r * c + j)] = r == 3 ? 0.f : round_bf16(u * 3.f * mag);
    }
  }
  return x;
}

float silu_ref(float v) { return v / (1.f + std::exp(-v)); }

// The reference module's arithmetic, one op at a time in fp32, each result
// rounded to the activation dtype (PerOp), or evaluated in double (Once).
double norm_oracle(const float* xr, int64_t c, int64_t j, const float* gamma, bool bf16,
                   bool per_op, bool silu) {
  double ss = 0;
  for (int64_t i = 0; i < c; ++i) ss += static_cast<double>(xr[i]) * xr[i];
  const float scale = static_cast<float>(std::sqrt(static_cast<double>(c)));
  if (!per_op) {
    const double n = std::max(std::sqrt(ss), 1e-12);
    const double q = xr[j] / n * scale * gamma[j];
    return silu ? q / (1 + std::exp(-q)) : q;
  }
  auto rd = [&](float v) { return bf16 ? round_bf16(v) : v; };
  const float n = std::max(rd(static_cast<float>(std::sqrt(ss))), 1e-12f);
  float q = rd(rd(rd(xr[j] / n) * scale) * gamma[j]);
  return silu ? rd(silu_ref(q)) : q;
}

using NormRowsFn = void (*)(const void*, void*, bool, int64_t, int64_t, const float*, float,
                            NormRounding, bool);
using NormFn =
    std::function<void(const Tensor&, const Tensor&, float, NormRounding, Activation, Tensor&)>;

// Every implementation this CPU runs: the two row loops of the CPU op, the
// whole CPU op and the reference op.
std::vector<std::pair<std::string, NormFn>> norm_implementations() {
  auto rows_fn = [](NormRowsFn fn) -> NormFn {
    return [fn](const Tensor& x, const Tensor& gamma, float scale, NormRounding r, Activation act,
                Tensor& y) {
      const int64_t c = x.dim(-1);
      fn(x.data, y.data, x.dtype == DType::BF16, x.numel() / c, c, gamma.ptr<float>(), scale, r,
         act == Activation::Silu);
    };
  };
  std::vector<std::pair<std::string, NormFn>> v{
      {"portable", rows_fn(cpu::l2norm::portable::normalize_rows)},
      {"cpu op", cpu::normalize_l2},
      {"ref op", ref::normalize_l2}};
  if (cpu::l2norm::has_avx512_kernels())
    v.emplace_back("avx512", rows_fn(cpu::l2norm::avx512::normalize_rows));
  return v;
}

TEST(NormalizeL2Op, EveryImplementationMatchesTheScalarDefinition) {
  // Tolerances: PerOp reproduces every rounding, so outputs are the oracle's
  // up to the last fp32 bits of |x| and exp (a summation order, a ~1 ulp
  // polynomial) - which moves a bf16 rounding only when it lands within an
  // fp32 ulp or two of a tie: at most 1 bf16 ulp, in well under 1 % of the
  // elements; F32 results within 4 fp32 ulp. Once: the double-precision
  // value rounded once to bf16, i.e. within 2^-8 of it.
  for (const auto& [name, fn] : norm_implementations()) {
    for (int64_t c : {2, 8, 24, 96, 384}) {
      const int64_t rows = 37;
      const std::vector<float> x32 = norm_input(rows, c);
      OwnedTensor gamma(DType::F32, {c});
      for (int64_t j = 0; j < c; ++j) gamma.t.ptr<float>()[j] = 1.f + 0.01f * (j % 7) - 0.03f;
      for (bool bf16 : {false, true}) {
        for (bool per_op : {true, false}) {
          if (!bf16 && !per_op) continue;  // F32 computes with PerOp only
          for (bool silu : {true, false}) {
            const std::string what = name + " c=" + std::to_string(c) + (bf16 ? " bf16" : " f32") +
                                     (per_op ? " per-op" : " once") + (silu ? " silu" : "");
            const DType dt = bf16 ? DType::BF16 : DType::F32;
            OwnedTensor x(dt, {rows, c}), y(dt, {rows, c});
            ft::fill(x.t, std::vector<double>(x32.begin(), x32.end()));
            const float scale = static_cast<float>(std::sqrt(static_cast<double>(c)));
            fn(x.t, gamma.t, scale, per_op ? NormRounding::PerOp : NormRounding::Once,
               silu ? Activation::Silu : Activation::None, y.t);
            const std::vector<double> got = ft::values(y.t);
            int off_by_one = 0;
            for (int64_t i = 0; i < rows * c; ++i) {
              const int64_t row = i / c, j = i % c;
              const double want =
                  norm_oracle(x32.data() + row * c, c, j, gamma.t.ptr<float>(), bf16, per_op, silu);
              const double g = got[static_cast<size_t>(i)];
              const double ulp =
                  bf16 ? std::ldexp(std::abs(want), -7) : std::ldexp(std::abs(want), -21);
              if (per_op && bf16) {
                if (g != want) {
                  ++off_by_one;
                  ASSERT_LE(std::abs(g - want), ulp + 1e-30) << what << " at " << i;
                }
              } else {
                const double tol = per_op ? ulp : std::ldexp(std::abs(want), -8);
                ASSERT_LE(std::abs(g - want), tol + 1e-30)
                    << what << " at " << i << ": " << g << " vs " << want;
              }
            }
            EXPECT_LE(off_by_one, rows * c / 100 + 1) << what;
          }
        }
      }
    }
  }
}

TEST(NormalizeL2Op, CpuOpSplitsRowsAndAliases) {
  // The threaded op over many rows, in place: the same values as one call
  // of the row loop it picks.
  const int64_t rows = 5000, c = 96;
  const std::vector<float> x = norm_input(rows, c);
  std::vector<float> gamma(c, 1.1f), want(x.size()), y = x;
  const NormRowsFn fn = cpu::l2norm::has_avx512_kernels() ? cpu::l2norm::avx512::normalize_rows
                                                          : cpu::l2norm::portable::normalize_rows;
  const float scale = static_cast<float>(std::sqrt(96.0));
  fn(x.data(), want.data(), false, rows, c, gamma.data(), scale, NormRounding::PerOp, true);
  Tensor yt = Tensor::view(y.data(), DType::F32, {rows, c});
  cpu::normalize_l2(yt, Tensor::view(gamma.data(), DType::F32, {c}), scale, NormRounding::PerOp,
                    Activation::Silu, yt);
  EXPECT_EQ(y, want);
}

// ---- softmax_parts ----

TEST(SoftmaxPartsOp, CpuMatchesReferenceAndNormalisesToSoftmax) {
  // CPU: exp by a ~1-ulp polynomial, the sum in double lanes; reference:
  // exp and sum in double. p agrees within 4 fp32 ulp before its rounding
  // (an F32 p; a BF16 p is that value rounded once: within a bf16 ulp), 1 /
  // sum within 4 fp32 ulp. p * inv_sum is softmax(x * scale).
  const int64_t rows = 33, cols = 3520;  // the VAE's 44 x 80 attention at one row block
  const OwnedTensor x = ft::random_tensor(DType::F32, {1, rows, cols}, 5, 4.0);
  const float scale = 1.f / std::sqrt(384.f);
  for (DType pt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(pt));
    OwnedTensor pr(pt, x.t.shape), pc(pt, x.t.shape), ir(DType::F32, {rows}),
        ic(DType::F32, {rows});
    ref::softmax_parts(x.t, scale, pr.t, ir.t);
    cpu::softmax_parts(x.t, scale, pc.t, ic.t);
    const std::vector<double> want = ft::values(pr.t), got = ft::values(pc.t);
    std::vector<double> tol(want.size());
    for (size_t i = 0; i < want.size(); ++i)
      tol[i] = std::abs(want[i]) * (pt == DType::BF16 ? ft::kBf16Ulp : 8 * ft::kF32Eps);
    EXPECT_EQ(ft::expect_close(pc.t, want, tol, "p"), 0);
    for (int64_t r = 0; r < rows; ++r)
      EXPECT_NEAR(ic.t.ptr<float>()[r], ir.t.ptr<float>()[r],
                  8 * ft::kF32Eps * ir.t.ptr<float>()[r]);
    // Row 0 against softmax in double.
    double m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, double(x.t.ptr<float>()[j] * scale));
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(double(x.t.ptr<float>()[j] * scale) - m);
    for (int64_t j = 0; j < cols; j += 97) {
      const double soft = std::exp(double(x.t.ptr<float>()[j] * scale) - m) / sum;
      EXPECT_NEAR(got[static_cast<size_t>(j)] * ic.t.ptr<float>()[0], soft, 1e-2 * soft + 1e-12);
    }
  }
  // In place: p is x (F32).
  OwnedTensor xi = ft::to_dtype(x.t, DType::F32), pr(DType::F32, x.t.shape), ii(DType::F32, {rows}),
              ic(DType::F32, {rows});
  cpu::softmax_parts(x.t, scale, pr.t, ic.t);
  cpu::softmax_parts(xi.t, scale, xi.t, ii.t);
  EXPECT_TRUE(same_bytes(xi.t, pr.t));
  EXPECT_TRUE(same_bytes(ii.t, ic.t));
}

}  // namespace
}  // namespace flick
