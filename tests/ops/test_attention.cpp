// attention: the scalar reference against hand-computable cases, then every
// CPU kernel (AVX-512 where the host has it, and the portable fp32 one) against
// the reference over dtypes, head dims, lengths, strided views and masks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/cpu/attention_kernels.h"
#include "runtime/cpu/ops.h"
#include "runtime/ref/ops.h"

namespace flick {
namespace {

using cpu::attention_detail::Kernel;

float get(const Tensor& t, std::initializer_list<int64_t> idx) {
  int64_t off = 0;
  size_t i = 0;
  for (int64_t v : idx) off += v * t.stride(static_cast<int>(i++));
  return load_as_f32(t.dtype, t.data, off);
}

void set(const Tensor& t, std::initializer_list<int64_t> idx, float value) {
  int64_t off = 0;
  size_t i = 0;
  for (int64_t v : idx) off += v * t.stride(static_cast<int>(i++));
  store_from_f32(t.dtype, t.data, off, value);
}

// Fills every element of a (possibly strided) 4-d view with U(-amp, amp),
// rounded to the view's dtype.
void fill_uniform(const Tensor& t, std::mt19937& rng, float amp) {
  std::uniform_real_distribution<float> dist(-amp, amp);
  if (t.is_contiguous()) {
    for (int64_t i = 0; i < t.numel(); ++i) store_from_f32(t.dtype, t.data, i, dist(rng));
    return;
  }
  for (int64_t a = 0; a < t.dim(0); ++a)
    for (int64_t b = 0; b < t.dim(1); ++b)
      for (int64_t c = 0; c < t.dim(2); ++c)
        for (int64_t d = 0; d < t.dim(3); ++d) set(t, {a, b, c, d}, dist(rng));
}

OwnedTensor random4(DType dt, Shape s, std::mt19937& rng, float amp) {
  OwnedTensor t(dt, s);
  fill_uniform(t, rng, amp);
  return t;
}

float max_abs(const Tensor& t) {
  float m = 0;
  for (int64_t a = 0; a < t.dim(0); ++a)
    for (int64_t b = 0; b < t.dim(1); ++b)
      for (int64_t c = 0; c < t.dim(2); ++c)
        for (int64_t d = 0; d < t.dim(3); ++d) m = std::max(m, std::fabs(get(t, {a, b, c, d})));
  return m;
}

// How far a kernel may be from the reference (which is exact up to its final
// rounding), for values V with max |V| = vmax:
//  - fp32 compute (F32 inputs, or the portable kernel): fp32 rounding of the
//    scores, the exp polynomial (~2 ulp) and fp32 sums over thousands of keys.
//    Measured <= 2.5e-7 * vmax at 5280 keys; 5e-6 * vmax leaves 20x headroom.
//  - bf16 products (BF16 inputs on the AVX-512 kernel): the inputs are exact
//    in bf16, but P is rounded to bf16 (<= 2^-9 relative per weight) before
//    P.V, which moves the weighted mean by at most 2^-9 * vmax (measured
//    1.3e-4 * vmax worst, 2.8e-5 rms: the roundings mostly cancel).
//  - BF16 output: the reference and the kernel each round once; values an
//    error apart can round to neighbouring bf16 numbers, one ulp <= 2^-7 |ref|.
struct Tolerance {
  float abs = 0, rel = 0;
};

Tolerance tolerance(const Kernel& kernel, bool bf16_inputs, DType out, float vmax) {
  Tolerance t;
  t.abs = 5e-6f * vmax;
  if (bf16_inputs && std::string(kernel.name) == "avx512") t.abs += std::ldexp(1.f, -9) * vmax;
  if (out == DType::BF16) t.rel = std::ldexp(1.f, -7);
  return t;
}

// Every element of got within tol of want; on failure names the worst one.
void expect_close(const Tensor& got, const Tensor& want, Tolerance tol, const std::string& what) {
  ASSERT_EQ(got.shape, want.shape);
  int64_t bad = 0;
  double worst_excess = -1;
  std::string worst;
  for (int64_t a = 0; a < got.dim(0); ++a)
    for (int64_t b = 0; b < got.dim(1); ++b)
      for (int64_t c = 0; c < got.dim(2); ++c)
        for (int64_t d = 0; d < got.dim(3); ++d) {
          const double g = get(got, {a, b, c, d}), w = get(want, {a, b, c, d});
          const double err = std::fabs(g - w), allowed = tol.abs + tol.rel * std::fabs(w);
          if (err <= allowed) continue;  // NaN fails here too
          ++bad;
          const double excess = std::isnan(err) ? INFINITY : err - allowed;
          if (excess > worst_excess) {
            worst_excess = excess;
            std::ostringstream os;
            os << "[" << a << "," << b << "," << c << "," << d << "] got " << g << " want " << w;
            worst = os.str();
          }
        }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " elements off, worst " << worst << " (abs tol "
                    << tol.abs << ", rel tol " << tol.rel << ")";
}

// The kernels this host can run: the portable one always, AVX-512 where present.
std::vector<const Kernel*> kernels() {
  std::vector<const Kernel*> ks = {&cpu::attention_detail::kPortableKernel};
  if (cpu::attention_detail::avx512_bf16_supported())
    ks.push_back(&cpu::attention_detail::kAvx512Kernel);
  return ks;
}

// Runs every kernel on (q, k, v, params) and compares each with the reference.
void check_against_ref(const Tensor& q, const Tensor& k, const Tensor& v, DType out_dtype,
                       const AttentionParams& params, const std::string& what) {
  const Shape out_shape = q.shape;
  OwnedTensor want(out_dtype, out_shape);
  ref::attention(q, k, v, want, params);
  const bool bf16_in = q.dtype == DType::BF16 && k.dtype == DType::BF16 && v.dtype == DType::BF16;
  const float vmax = max_abs(v);
  for (const Kernel* kernel : kernels()) {
    OwnedTensor got(out_dtype, out_shape);
    cpu::attention_detail::attention_with(*kernel, q, k, v, got, params);
    expect_close(got, want, tolerance(*kernel, bf16_in, out_dtype, vmax),
                 what + " [" + kernel->name + "]");
  }
}

std::string dt(DType t) { return std::string(dtype_name(t)); }

// ---------------------------------------------------------------------------
// The reference on cases computed by hand.

// Identical keys give every visible key the same weight: the output is the
// plain mean of V (over the visible keys).
TEST(AttentionRef, UniformKeysGiveMeanOfValues) {
  std::mt19937 rng(1);
  const int64_t B = 2, Lq = 3, Lk = 5, H = 2, D = 4;
  OwnedTensor q = random4(DType::F32, {B, Lq, H, D}, rng, 2.f);
  OwnedTensor v = random4(DType::F32, {B, Lk, H, D}, rng, 1.f);
  OwnedTensor k(DType::F32, {B, Lk, H, D});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < Lk; ++j)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) set(k, {b, j, h, d}, 0.5f * float(d + h) - 1.f);
  OwnedTensor out(DType::F32, {B, Lq, H, D});
  ref::attention(q, k, v, out, {});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          double mean = 0;
          for (int64_t j = 0; j < Lk; ++j) mean += get(v, {b, j, h, d});
          EXPECT_NEAR(get(out, {b, i, h, d}), mean / Lk, 1e-6);
        }
}

// Block-causal masking with Lq < Lk: query i sits at position i + Lk - Lq and
// sees whole blocks of causal_block keys up to its own block.
TEST(AttentionRef, BlockCausalUniformKeysGiveMeanOfVisibleValues) {
  std::mt19937 rng(2);
  const int64_t Lq = 3, Lk = 5, D = 3;
  OwnedTensor q = random4(DType::F32, {1, Lq, 1, D}, rng, 1.f);
  OwnedTensor k(DType::F32, {1, Lk, 1, D});  // all zero: uniform weights
  OwnedTensor v = random4(DType::F32, {1, Lk, 1, D}, rng, 1.f);
  OwnedTensor out(DType::F32, {1, Lq, 1, D});
  AttentionParams params;
  params.causal_block = 2;
  ref::attention(q, k, v, out, params);
  // Positions 2, 3, 4 are in blocks 1, 1, 2: they see 4, 4 and 5 keys.
  const int64_t visible[Lq] = {4, 4, 5};
  for (int64_t i = 0; i < Lq; ++i)
    for (int64_t d = 0; d < D; ++d) {
      double mean = 0;
      for (int64_t j = 0; j < visible[i]; ++j) mean += get(v, {0, j, 0, d});
      EXPECT_NEAR(get(out, {0, i, 0, d}), mean / double(visible[i]), 1e-6) << "row " << i;
    }
}

// Two keys with scores s0 = scale * q.k0 = 2 and s1 = 0: weights e^2 / (e^2 + 1)
// and 1 / (e^2 + 1). A bias of -1 on key 0 gives e / (e + 1); padding out key 0
// leaves V[1]; padding out both gives zeros.
TEST(AttentionRef, TwoKeysByHand) {
  OwnedTensor q(DType::F32, {1, 1, 1, 2}), k(DType::F32, {1, 2, 1, 2}), v(DType::F32, {1, 2, 1, 2});
  set(q, {0, 0, 0, 0}, 1.f);
  set(k, {0, 0, 0, 0}, 4.f);  // q.k0 = 4, q.k1 = 0
  set(v, {0, 0, 0, 0}, 3.f);
  set(v, {0, 0, 0, 1}, -1.f);
  set(v, {0, 1, 0, 0}, 1.f);
  set(v, {0, 1, 0, 1}, 5.f);
  OwnedTensor out(DType::F32, {1, 1, 1, 2});
  AttentionParams params;
  params.scale = 0.5f;
  ref::attention(q, k, v, out, params);
  const double w0 = std::exp(2.0) / (std::exp(2.0) + 1);
  EXPECT_NEAR(get(out, {0, 0, 0, 0}), w0 * 3 + (1 - w0) * 1, 1e-6);
  EXPECT_NEAR(get(out, {0, 0, 0, 1}), w0 * -1 + (1 - w0) * 5, 1e-6);

  OwnedTensor bias(DType::F32, {1, 1, 1, 2});
  set(bias, {0, 0, 0, 0}, -1.f);
  params.bias = bias;
  ref::attention(q, k, v, out, params);
  const double w1 = std::exp(1.0) / (std::exp(1.0) + 1);
  EXPECT_NEAR(get(out, {0, 0, 0, 0}), w1 * 3 + (1 - w1) * 1, 1e-6);

  OwnedTensor padding(DType::U8, {1, 2});
  padding.t.ptr<uint8_t>()[1] = 1;  // key 0 masked, key 1 kept
  params.key_padding = padding;
  ref::attention(q, k, v, out, params);
  EXPECT_EQ(get(out, {0, 0, 0, 0}), 1.f);
  EXPECT_EQ(get(out, {0, 0, 0, 1}), 5.f);

  padding.t.ptr<uint8_t>()[1] = 0;  // nothing left to attend to
  ref::attention(q, k, v, out, params);
  EXPECT_EQ(get(out, {0, 0, 0, 0}), 0.f);
  EXPECT_EQ(get(out, {0, 0, 0, 1}), 0.f);
}

// ---------------------------------------------------------------------------
// Kernels against the reference.

struct SweepCase {
  int64_t B, Lq, Lk, H, D;
};

class AttentionDtypes : public ::testing::TestWithParam<std::tuple<DType, DType>> {};

// Head dims of the models (32, 64 action module, 80 CLIP, 128 Wan) and odd
// lengths around the tile sizes.
TEST_P(AttentionDtypes, MatchesReferenceOverShapes) {
  const auto [in, out] = GetParam();
  const SweepCase cases[] = {
      {1, 1, 1, 1, 32},    {2, 7, 7, 2, 64},    {1, 33, 33, 3, 80},  {2, 5, 257, 2, 128},
      {1, 50, 7, 2, 128},  {1, 100, 33, 1, 64}, {2, 49, 130, 2, 32}, {1, 3, 6, 4, 64},
      {1, 97, 1, 1, 80},   {1, 1, 257, 1, 128}, {1, 8, 5, 1, 2},     {1, 13, 17, 1, 1},
      {1, 20, 40, 1, 256},
  };
  std::mt19937 rng(3);
  for (const SweepCase& c : cases) {
    OwnedTensor q = random4(in, {c.B, c.Lq, c.H, c.D}, rng, 2.f);
    OwnedTensor k = random4(in, {c.B, c.Lk, c.H, c.D}, rng, 2.f);
    OwnedTensor v = random4(in, {c.B, c.Lk, c.H, c.D}, rng, 1.f);
    check_against_ref(q, k, v, out, {},
                      dt(in) + "->" + dt(out) + " B" + std::to_string(c.B) + " Lq" +
                          std::to_string(c.Lq) + " Lk" + std::to_string(c.Lk) + " H" +
                          std::to_string(c.H) + " D" + std::to_string(c.D));
  }
}

// q, k, v as slices of one fused [B, L, 3, H, D] projection (row stride 3*H*D),
// k/v as a window of a longer KV-cache ring, out into a wider buffer, and a
// permuted layout whose head_dim stride is not 1.
TEST_P(AttentionDtypes, StridedViews) {
  const auto [in, out_dtype] = GetParam();
  std::mt19937 rng(4);
  const int64_t B = 2, L = 37, H = 3, D = 64;
  OwnedTensor qkv = random4(in, {B * L, 3, H, D}, rng, 2.f);
  const Tensor fused = qkv.t.reshape({B, L, 3, H, D});
  const Tensor q = fused.select(2, 0), k = fused.select(2, 1), v = fused.select(2, 2);
  ASSERT_EQ(q.stride(1), 3 * H * D);

  OwnedTensor want(out_dtype, {B, L, H, D});
  ref::attention(q, k, v, want, {});
  const float vmax = max_abs(v);
  const bool bf16_in = in == DType::BF16;
  for (const Kernel* kernel : kernels()) {
    OwnedTensor wide(out_dtype, {B, L, H, 2 * D});
    Tensor got = wide.t.slice(3, D, D);  // row stride 2*D
    cpu::attention_detail::attention_with(*kernel, q, k, v, got, {});
    expect_close(got, want, tolerance(*kernel, bf16_in, out_dtype, vmax),
                 std::string("fused qkv [") + kernel->name + "]");
  }

  // A ring of 64 slots holding 29 keys from slot 20 on.
  OwnedTensor ring_k = random4(in, {B, 64, H, D}, rng, 2.f);
  OwnedTensor ring_v = random4(in, {B, 64, H, D}, rng, 1.f);
  check_against_ref(q, ring_k.t.slice(1, 20, 29), ring_v.t.slice(1, 20, 29), out_dtype, {},
                    "KV ring window");

  // Head dim outermost in memory: [B, L, D, H] viewed as [B, L, H, D].
  OwnedTensor kt = random4(in, {B, L, D, H}, rng, 2.f);
  OwnedTensor vt = random4(in, {B, L, D, H}, rng, 1.f);
  check_against_ref(q, kt.t.permute({0, 1, 3, 2}), vt.t.permute({0, 1, 3, 2}), out_dtype, {},
                    "head_dim stride != 1");
}

INSTANTIATE_TEST_SUITE_P(, AttentionDtypes,
                         ::testing::Combine(::testing::Values(DType::F32, DType::BF16),
                                            ::testing::Values(DType::F32, DType::BF16)),
                         [](const auto& info) {
                           return dt(std::get<0>(info.param)) + "_to_" +
                                  dt(std::get<1>(info.param));
                         });

class AttentionMasks : public ::testing::TestWithParam<DType> {};

TEST_P(AttentionMasks, EachMaskAndTheirCombination) {
  const DType in = GetParam();
  std::mt19937 rng(5);
  const int64_t B = 2, Lq = 45, Lk = 71, H = 3, D = 80;
  OwnedTensor q = random4(in, {B, Lq, H, D}, rng, 2.f);
  OwnedTensor k = random4(in, {B, Lk, H, D}, rng, 2.f);
  OwnedTensor v = random4(in, {B, Lk, H, D}, rng, 1.f);
  const std::string name = dt(in);

  // Bias broadcast over batch, over heads, and full with a transposed layout
  // (key stride != 1).
  OwnedTensor bias_h = random4(DType::F32, {1, H, Lq, Lk}, rng, 3.f);
  OwnedTensor bias_b = random4(DType::F32, {B, 1, Lq, Lk}, rng, 3.f);
  OwnedTensor bias_t = random4(DType::F32, {B, H, Lk, Lq}, rng, 3.f);
  AttentionParams params;
  params.bias = bias_h;
  check_against_ref(q, k, v, in, params, name + " bias [1,H,Lq,Lk]");
  params.bias = bias_b;
  check_against_ref(q, k, v, in, params, name + " bias [B,1,Lq,Lk]");
  params.bias = bias_t.t.permute({0, 1, 3, 2});
  check_against_ref(q, k, v, in, params, name + " bias transposed");

  // Key padding: a ragged valid length per batch and a few holes.
  OwnedTensor padding(DType::U8, {B, Lk});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < Lk; ++j)
      padding.t.ptr<uint8_t>()[b * Lk + j] = (j < Lk - 20 * b && j % 7 != 3) ? 1 : 0;
  AttentionParams pad_only;
  pad_only.key_padding = padding;
  check_against_ref(q, k, v, in, pad_only, name + " key padding");

  // Block-causal (frames of 16 keys, and plain causal) with Lq < Lk.
  for (int64_t cb : {1, 16}) {
    AttentionParams causal;
    causal.causal_block = cb;
    check_against_ref(q, k, v, in, causal, name + " causal_block " + std::to_string(cb));
  }

  // All together, with an explicit scale.
  AttentionParams all;
  all.scale = 0.05f;
  all.bias = bias_t.t.permute({0, 1, 3, 2});
  all.key_padding = padding;
  all.causal_block = 5;
  check_against_ref(q, k, v, in, all, name + " bias + padding + causal + scale");
}

// Rows with no visible key give zeros: a batch whose keys are all padded, rows
// before the first key under causal masking (Lq > Lk), and rows whose bias is
// -inf everywhere.
TEST_P(AttentionMasks, FullyMaskedRowsGiveZeros) {
  const DType in = GetParam();
  std::mt19937 rng(6);
  const int64_t B = 2, Lq = 60, Lk = 40, H = 2, D = 32;
  OwnedTensor q = random4(in, {B, Lq, H, D}, rng, 2.f);
  OwnedTensor k = random4(in, {B, Lk, H, D}, rng, 2.f);
  OwnedTensor v = random4(in, {B, Lk, H, D}, rng, 1.f);

  OwnedTensor padding(DType::U8, {B, Lk});
  for (int64_t j = 0; j < Lk; ++j) padding.t.ptr<uint8_t>()[Lk + j] = 1;  // batch 0 all masked
  OwnedTensor bias(DType::F32, {1, H, Lq, Lk});
  for (int64_t j = 0; j < Lk; ++j)  // row 50 of head 1 sees only -inf
    set(bias, {0, 1, 50, j}, -std::numeric_limits<float>::infinity());
  AttentionParams params;
  params.key_padding = padding;
  params.causal_block = 4;  // rows 0..19 sit at negative positions: nothing visible
  params.bias = bias;

  OwnedTensor want(DType::F32, {B, Lq, H, D});
  ref::attention(q, k, v, want, params);
  for (const Kernel* kernel : kernels()) {
    OwnedTensor got(DType::F32, {B, Lq, H, D});
    set(got, {0, 0, 0, 0}, 7.f);  // must be overwritten
    cpu::attention_detail::attention_with(*kernel, q, k, v, got, params);
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          ASSERT_EQ(get(got, {0, i, h, d}), 0.f) << kernel->name << " padded batch, row " << i;
          if (i < 20) {
            ASSERT_EQ(get(got, {1, i, h, d}), 0.f) << kernel->name << " row " << i;
          }
          if (h == 1 && i == 50) {
            ASSERT_EQ(get(got, {1, i, h, d}), 0.f) << kernel->name;
          }
        }
    expect_close(got, want, tolerance(*kernel, in == DType::BF16, DType::F32, max_abs(v)),
                 std::string("fully masked rows [") + kernel->name + "]");
  }
}

INSTANTIATE_TEST_SUITE_P(, AttentionMasks, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return dt(info.param); });

// Inputs that are not all BF16 (F16, or a mix) take the fp32 path.
TEST(Attention, F16AndMixedInputs) {
  std::mt19937 rng(9);
  const Shape qs{2, 30, 2, 64}, ks{2, 45, 2, 64};
  OwnedTensor q16 = random4(DType::F16, qs, rng, 2.f);
  OwnedTensor k16 = random4(DType::F16, ks, rng, 2.f);
  OwnedTensor v16 = random4(DType::F16, ks, rng, 1.f);
  check_against_ref(q16, k16, v16, DType::F32, {}, "F16 inputs");
  OwnedTensor qb = random4(DType::BF16, qs, rng, 2.f);
  OwnedTensor kf = random4(DType::F32, ks, rng, 2.f);
  OwnedTensor vb = random4(DType::BF16, ks, rng, 1.f);
  check_against_ref(qb, kf, vb, DType::BF16, {}, "BF16 q/v with F32 k");
}

// An empty key set leaves every row fully masked: zeros.
TEST(Attention, NoKeysGiveZeros) {
  std::mt19937 rng(10);
  OwnedTensor q = random4(DType::BF16, {1, 5, 2, 32}, rng, 1.f);
  OwnedTensor k(DType::BF16, {1, 0, 2, 32}), v(DType::BF16, {1, 0, 2, 32});
  for (const Kernel* kernel : kernels()) {
    OwnedTensor out(DType::F32, {1, 5, 2, 32});
    std::fill(out.t.ptr<float>(), out.t.ptr<float>() + out.t.numel(), 1.f);
    cpu::attention_detail::attention_with(*kernel, q, k, v, out, {});
    for (int64_t i = 0; i < out.t.numel(); ++i)
      ASSERT_EQ(out.t.ptr<float>()[i], 0.f) << kernel->name << " element " << i;
  }
}

// The public entry point dispatches to a kernel that matches the reference.
TEST(Attention, PublicEntryPointMatchesReference) {
  std::mt19937 rng(7);
  OwnedTensor q = random4(DType::BF16, {1, 20, 2, 128}, rng, 2.f);
  OwnedTensor k = random4(DType::BF16, {1, 70, 2, 128}, rng, 2.f);
  OwnedTensor v = random4(DType::BF16, {1, 70, 2, 128}, rng, 1.f);
  OwnedTensor want(DType::BF16, {1, 20, 2, 128}), got(DType::BF16, {1, 20, 2, 128});
  ref::attention(q, k, v, want, {});
  cpu::attention(q, k, v, got, {});
  const Kernel& used = cpu::attention_detail::avx512_bf16_supported()
                           ? cpu::attention_detail::kAvx512Kernel
                           : cpu::attention_detail::kPortableKernel;
  expect_close(got, want, tolerance(used, true, DType::BF16, max_abs(v)), "cpu::attention");
}

// Matrix-Game's shapes at full size, checked on sampled query rows (the
// reference costs ~16 M multiply-adds per row): self-attention of a 3-latent
// block (2640 queries) over a 6-latent KV window (5280 keys), and
// cross-attention to the 257 CLIP tokens; 12 heads x 128.
void check_sampled_rows(int64_t Lq, int64_t Lk, DType in) {
  std::mt19937 rng(8);
  const int64_t H = 12, D = 128;
  OwnedTensor q = random4(in, {1, Lq, H, D}, rng, 2.f);
  OwnedTensor k = random4(in, {1, Lk, H, D}, rng, 2.f);
  OwnedTensor v = random4(in, {1, Lk, H, D}, rng, 1.f);
  const float vmax = max_abs(v);
  OwnedTensor got(in, {1, Lq, H, D});
  cpu::attention(q, k, v, got, {});
  const Kernel& used = cpu::attention_detail::avx512_bf16_supported()
                           ? cpu::attention_detail::kAvx512Kernel
                           : cpu::attention_detail::kPortableKernel;
  // First and last rows, tile edges of both kernels, and a few inner rows.
  for (int64_t i : {int64_t(0), int64_t(31), int64_t(32), int64_t(191), int64_t(1337), Lq - 1}) {
    OwnedTensor want(in, {1, 1, H, D});
    ref::attention(q.t.slice(1, i, 1), k, v, want, {});  // no causal mask: rows are independent
    expect_close(
        got.t.slice(1, i, 1), want, tolerance(used, in == DType::BF16, in, vmax),
        "row " + std::to_string(i) + " of " + std::to_string(Lq) + "x" + std::to_string(Lk));
  }
}

TEST(AttentionRealShape, SelfAttentionBf16SampledRows) {
  check_sampled_rows(2640, 5280, DType::BF16);
}
TEST(AttentionRealShape, CrossAttentionBf16SampledRows) {
  check_sampled_rows(2640, 257, DType::BF16);
}
TEST(AttentionRealShape, CrossAttentionF32SampledRows) {
  check_sampled_rows(2640, 257, DType::F32);
}

}  // namespace
}  // namespace flick
