// attention: the scalar reference against hand-computable cases, then every
// CPU kernel (AMX and AVX-512 where the host has them, and the portable fp32
// one) against the reference over dtypes, head dims, lengths, strided views
// and masks.
#include <cpuid.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <xmmintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/cpu/attention_kernels.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/ops.h"
#include "runtime/dtype.h"
#include "runtime/ref/ops.h"
#include "runtime/threads.h"
#include "tests/ops/attention_test_util.h"

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
//  - fp32 compute (F32 inputs): fp32 rounding of the
//    scores, the exp polynomial (~2 ulp) and fp32 sums over thousands of keys.
//    Measured <= 2.5e-7 * vmax at 5280 keys; 5e-6 * vmax leaves 20x headroom.
//  - BF16 inputs (every kernel, the portable one too): the inputs are exact
//    in bf16, but P is rounded to bf16 (<= 2^-9 relative per weight) before
//    P.V, which moves the weighted mean by at most 2^-9 * vmax (measured
//    1.3e-4 * vmax worst, 2.8e-5 rms: the roundings mostly cancel).
//  - AMX and the AVX-512 kernels with BF16 inputs: the same bf16 rounding of
//    P, plus their degree-4 exp2 polynomial for P (relative error 2.7e-6 per
//    weight, so <= 5.4e-6 * vmax on the weighted mean); 6e-6 * vmax more. Measured worst: 1.6e-4 *
//    vmax at 5280 keys, 9.9e-4 * vmax at 257 keys (fewer keys, larger weights; the vdpbf16ps
//    kernel: 1.2e-4 and 4.7e-4).
//  - BF16 output: the reference and the kernel each round once; values an
//    error apart can round to neighbouring bf16 numbers, one ulp <= 2^-7 |ref|.
struct Tolerance {
  float abs = 0, rel = 0;
};

Tolerance tolerance(const Kernel& kernel, bool bf16_inputs, DType out, float vmax) {
  Tolerance t;
  t.abs = 5e-6f * vmax;
  const std::string name = kernel.name;
  if (bf16_inputs) t.abs += std::ldexp(1.f, -9) * vmax;          // every kernel rounds P for BF16
  if (bf16_inputs && name != "portable") t.abs += 6e-6f * vmax;  // degree-4 exp2 of P
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

// The kernels this host can run: the portable one always, AVX-512 and AMX
// where present.
std::vector<const Kernel*> kernels() {
  std::vector<const Kernel*> ks = {&cpu::attention_detail::kPortableKernel};
  if (cpu::attention_detail::avx512_bf16_supported()) {
    ks.push_back(&cpu::attention_detail::kAvx512Kernel);
    ks.push_back(&cpu::attention_detail::kAvx512ShortKernel);
    ks.push_back(&cpu::attention_detail::kAvx512NarrowKernel);
  }
  if (cpu::attention_detail::amx_bf16_supported()) ks.push_back(&cpu::attention_detail::kAmxKernel);
  return ks;
}

// Whether `kernel` takes this problem (AMX: BF16 inputs only).
bool accepts(const Kernel& kernel, const Tensor& q, const Tensor& k, const Tensor& v,
             const Tensor& out, const AttentionParams& params) {
  Tensor o = out;
  return cpu::attention_detail::kernel_accepts(
      kernel, cpu::attention_detail::resolve_problem(q, k, v, o, params));
}

// The kernel cpu::attention runs for these arguments.
const Kernel& selected(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const AttentionParams& params) {
  Tensor o = out;
  return cpu::attention_detail::select_kernel(
      cpu::attention_detail::resolve_problem(q, k, v, o, params));
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
    if (!accepts(*kernel, q, k, v, want, params)) continue;
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
    if (!accepts(*kernel, q, k, v, want, {})) continue;
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

// A separable bias (bias_y / bias_x: EfficientSAM3's boxRPB) is its
// materialised sum: every kernel that takes it gives the same bits as with
// bias = bias_y + bias_x rounded to fp32 (which the tests above hold to the
// reference), and the reference with the parts agrees with the kernels.
// Grids whose rows of 72 or 24 keys end inside a 16-key vector and one of
// 16; the y part broadcast over the batch, the x part over the heads; with
// and without key padding.
TEST_P(AttentionMasks, SeparableBiasIsItsSum) {
  const DType in = GetParam();
  std::mt19937 rng(21);
  const int64_t B = 2, Lq = 45, H = 3, D = 32;
  struct Grid {
    int64_t rows, w;
  };
  for (const Grid g : {Grid{3, 72}, Grid{4, 16}, Grid{11, 24}}) {
    const int64_t Lk = g.rows * g.w;
    OwnedTensor q = random4(in, {B, Lq, H, D}, rng, 2.f);
    OwnedTensor k = random4(in, {B, Lk, H, D}, rng, 2.f);
    OwnedTensor v = random4(in, {B, Lk, H, D}, rng, 1.f);
    OwnedTensor by = random4(DType::F32, {1, H, Lq, g.rows}, rng, 3.f);
    OwnedTensor bx = random4(DType::F32, {B, 1, Lq, g.w}, rng, 3.f);
    const OwnedTensor full = test::materialised_bias(by.t, bx.t, B, H);
    OwnedTensor padding(DType::U8, {B, Lk});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < Lk; ++j)
        padding.t.ptr<uint8_t>()[b * Lk + j] = (j < Lk - 9 * b && j % 5 != 2) ? 1 : 0;
    for (const bool padded : {false, true}) {
      const std::string name = dt(in) + " grid " + std::to_string(g.rows) + "x" +
                               std::to_string(g.w) + (padded ? " + key padding" : "");
      AttentionParams sep, sum;
      sep.bias_y = by;
      sep.bias_x = bx;
      sum.bias = full;
      if (padded) sep.key_padding = sum.key_padding = padding;
      check_against_ref(q, k, v, DType::F32, sep, name);
      int taken = 0;
      for (const Kernel* kernel : kernels()) {
        if (!accepts(*kernel, q, k, v, q, sep)) continue;
        ++taken;
        OwnedTensor a(DType::F32, q.t.shape), b(DType::F32, q.t.shape);
        cpu::attention_detail::attention_with(*kernel, q, k, v, a, sep);
        cpu::attention_detail::attention_with(*kernel, q, k, v, b, sum);
        EXPECT_EQ(std::memcmp(a.t.data, b.t.data, a.t.nbytes()), 0)
            << name << " [" << kernel->name << "]: differs from the materialised bias";
      }
      EXPECT_GE(taken, 1) << name;
    }
  }
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
    if (!accepts(*kernel, q, k, v, want, params)) continue;
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
    if (!accepts(*kernel, q, k, v, out, {})) continue;
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
  const Kernel& used = selected(q, k, v, got, {});
  expect_close(got, want, tolerance(used, true, DType::BF16, max_abs(v)), "cpu::attention");
}

// The public entry point runs a key-padded problem (no bias, no causal mask)
// on each batch's visible keys only: the padded K and V rows are never read
// (NaN there changes nothing), the output matches the reference on clean
// inputs, and so it does where every key is visible (the padding dropped).
// A batch with no visible key keeps the kernels' masking: zeros.
// EfficientSAM3's text cross-attention: 5184 queries, 4 of 78 keys visible.
TEST(Attention, PublicEntryPointReadsOnlyVisibleKeys) {
  std::mt19937 rng(8);
  const int64_t B = 3, Lk = 78, H = 8, D = 32;
  for (DType in : {DType::F32, DType::BF16})
    for (int64_t Lq : {5, 300}) {
      // k and v as slices of one fused [B, Lk, 2, H, D] projection.
      OwnedTensor kv = random4(in, {B * Lk, 2, H, D}, rng, 2.f);
      const Tensor fused = kv.t.reshape({B, Lk, 2, H, D});
      const Tensor k = fused.select(2, 0), v = fused.select(2, 1);
      OwnedTensor q = random4(in, {B, Lq, H, D}, rng, 2.f);
      OwnedTensor padding(DType::U8, {B, Lk});
      uint8_t* pad = padding.t.ptr<uint8_t>();
      for (int64_t j = 0; j < Lk; ++j) {
        pad[j] = j < 4;                // batch 0: a one-word prompt's 4 tokens
        pad[Lk + j] = 1;               // batch 1: every key
        pad[2 * Lk + j] = j % 3 != 1;  // batch 2: holes
      }
      AttentionParams params;
      params.key_padding = padding;
      OwnedTensor want(DType::F32, {B, Lq, H, D});
      ref::attention(q, k, v, want, params);
      // NaN in every padded key and value row.
      OwnedTensor dirty(in, {B * Lk, 2, H, D});
      std::memcpy(dirty.t.data, kv.t.data, kv.t.nbytes());
      const Tensor dfused = dirty.t.reshape({B, Lk, 2, H, D});
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < Lk; ++j)
          if (pad[b * Lk + j] == 0)
            for (int64_t t = 0; t < 2; ++t)
              for (int64_t h = 0; h < H; ++h)
                for (int64_t e = 0; e < D; ++e)
                  set(dfused, {b, j, t, h, e}, std::numeric_limits<float>::quiet_NaN());
      OwnedTensor got(DType::F32, {B, Lq, H, D});
      cpu::attention(q, dfused.select(2, 0), dfused.select(2, 1), got, params);
      const std::string what = dt(in) + " Lq " + std::to_string(Lq);
      // The loosest bound of the kernels that may run.
      const Tolerance tol = tolerance(cpu::attention_detail::kAvx512Kernel, in == DType::BF16,
                                      DType::F32, max_abs(v));
      expect_close(got, want, tol, what + ", padded rows NaN");

      for (int64_t j = 0; j < Lk; ++j) pad[j] = pad[2 * Lk + j] = 1;
      ref::attention(q, k, v, want, params);
      cpu::attention(q, k, v, got, params);
      expect_close(got, want, tol, what + ", every key visible");

      for (int64_t j = 0; j < Lk; ++j) pad[Lk + j] = 0;  // batch 1: none visible
      ref::attention(q, k, v, want, params);
      cpu::attention(q, k, v, got, params);
      expect_close(got, want, tol, what + ", a batch with no visible key");
      for (int64_t i = 0; i < Lq * H * D; ++i)
        ASSERT_EQ(got.t.ptr<float>()[Lq * H * D + i], 0.f) << what;
    }
}

// Every kernel runs with MXCSR's flush-to-zero and denormals-are-zero set
// (the softmax's 2^x of masked keys underflows, an Intel core's slow path
// otherwise), and must hand each thread back its floating-point mode: after
// a masked call on every thread of the pool, MXCSR is what it was and a
// product that underflows still gives a denormal.
TEST(Attention, LeavesEveryThreadsFloatingPointModeAlone) {
  constexpr unsigned kFtzDaz = (1u << 15) | (1u << 6);
  // The mode: everything but the six sticky exception flags, which any
  // arithmetic (this test's own) may set.
  auto mode = [] { return _mm_getcsr() & ~0x3fu; };
  std::mt19937 rng(11);
  OwnedTensor q = random4(DType::BF16, {1, 200, 4, 32}, rng, 2.f);
  OwnedTensor k = random4(DType::BF16, {1, 78, 4, 32}, rng, 2.f);
  OwnedTensor v = random4(DType::BF16, {1, 78, 4, 32}, rng, 1.f);
  OwnedTensor padding(DType::U8, {1, 78});
  for (int64_t j = 0; j < 4; ++j) padding.t.ptr<uint8_t>()[j] = 1;  // 74 keys masked
  AttentionParams params;
  params.key_padding = padding;
  OwnedTensor want(DType::BF16, {1, 200, 4, 32});
  ref::attention(q, k, v, want, params);
  const int threads = std::max(2, num_threads());
  std::vector<unsigned> before(threads), after(threads);
  auto read_modes = [&](std::vector<unsigned>& csr) {
    parallel_for(
        threads,
        [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) csr[i] = mode();
        },
        1);
  };
  read_modes(before);
  for (const Kernel* kernel : kernels()) {
    OwnedTensor got(DType::BF16, {1, 200, 4, 32});
    if (!accepts(*kernel, q, k, v, got, params)) continue;
    const unsigned caller = mode();
    ASSERT_EQ(caller & kFtzDaz, 0u) << "the test expects the default mode";
    cpu::attention_detail::attention_with(*kernel, q, k, v, got, params);
    expect_close(got, want, tolerance(*kernel, true, DType::BF16, max_abs(v)), kernel->name);
    EXPECT_EQ(mode(), caller) << kernel->name;
    read_modes(after);
    EXPECT_EQ(after, before) << kernel->name;
    volatile float tiny = 0x1p-120f;
    EXPECT_EQ(tiny * 0x1p-10f, 0x1p-130f) << kernel->name << ": denormal results flushed";
  }
}

// Full-size model shapes, checked on sampled query rows of the first and last
// batch (the reference costs Lk * D * 2 multiply-adds per row and head).
struct ModelShape {
  int64_t B, Lq, Lk, H, D;
};

void check_sampled_rows(ModelShape m, DType in) {
  std::mt19937 rng(8);
  OwnedTensor q = random4(in, {m.B, m.Lq, m.H, m.D}, rng, 2.f);
  OwnedTensor k = random4(in, {m.B, m.Lk, m.H, m.D}, rng, 2.f);
  OwnedTensor v = random4(in, {m.B, m.Lk, m.H, m.D}, rng, 1.f);
  const float vmax = max_abs(v);
  OwnedTensor got(in, {m.B, m.Lq, m.H, m.D});
  cpu::attention(q, k, v, got, {});
  const Kernel& used = selected(q, k, v, got, {});
  // BF16 inputs run on AMX wherever the host has it, but for tiny problems;
  // the rest on the short-key kernel up to 16 keys, else the general one.
  const bool tiny = m.Lq < 8 && m.Lk < 64;
  if (cpu::attention_detail::avx512_bf16_supported()) {
    // (ONEDNN_MAX_CPU_ISA below AMX turns it off, as on a CPU without AMX.)
    const bool amx = in == DType::BF16 && cpu::attention_detail::amx_bf16_supported() &&
                     cpu::amx_not_capped() && !tiny;
    const bool short_keys = m.Lk <= cpu::attention_detail::kShortKeys;
    const bool narrow = m.D <= 32 && m.Lq >= (in == DType::BF16 ? 256 : 192) && m.Lk >= 256;
    EXPECT_STREQ(used.name, amx          ? "amx"
                            : short_keys ? "avx512_short"
                            : narrow     ? "avx512_narrow"
                                         : "avx512");
  }
  const std::string shape = std::to_string(m.B) + "x" + std::to_string(m.Lq) + "x" +
                            std::to_string(m.Lk) + "x" + std::to_string(m.H) + "x" +
                            std::to_string(m.D) + " [" + used.name + "]";
  // First and last rows, tile edges of the kernels, and a few inner rows.
  const int64_t rows[] = {0, 31, 32, 127, 128, 191, 1337, 2559, 2560, m.Lq - 1};
  for (int64_t b : {int64_t(0), m.B - 1})
    for (int64_t i : rows) {
      if (i >= m.Lq) continue;
      OwnedTensor want(in, {1, 1, m.H, m.D});
      const Tensor kb = k.t.slice(0, b, 1), vb = v.t.slice(0, b, 1);
      // No mask: rows are independent.
      ref::attention(q.t.slice(0, b, 1).slice(1, i, 1), kb, vb, want, {});
      expect_close(got.t.slice(0, b, 1).slice(1, i, 1), want,
                   tolerance(used, in == DType::BF16, in, vmax),
                   "batch " + std::to_string(b) + " row " + std::to_string(i) + " of " + shape);
    }
}

// Matrix-Game 2.0: self-attention of a 3-latent block (2640 queries) over a
// 6-latent KV window (5280 keys) and cross-attention to the 257 CLIP tokens,
// 12 heads x 128; its action module's keyboard (all tokens over a few frames)
// and mouse (per-token over frames) attentions, 16 heads x 64; CLIP ViT-H,
// 16 heads x 80.
TEST(AttentionRealShape, SelfAttentionBf16SampledRows) {
  check_sampled_rows({1, 2640, 5280, 12, 128}, DType::BF16);
}
TEST(AttentionRealShape, CrossAttentionBf16SampledRows) {
  check_sampled_rows({1, 2640, 257, 12, 128}, DType::BF16);
}
TEST(AttentionRealShape, CrossAttentionF32SampledRows) {
  check_sampled_rows({1, 2640, 257, 12, 128}, DType::F32);
}
TEST(AttentionRealShape, ActionKeyboardBf16SampledRows) {
  check_sampled_rows({1, 2640, 6, 16, 64}, DType::BF16);
}
TEST(AttentionRealShape, ActionMouseBf16SampledRows) {
  check_sampled_rows({880, 3, 6, 16, 64}, DType::BF16);
}
TEST(AttentionRealShape, ClipVisionBf16SampledRows) {
  check_sampled_rows({1, 257, 257, 16, 80}, DType::BF16);
}
// EfficientSAM3 at 1008^2: the fusion encoder's self-attention over the 72^2
// image tokens, 8 heads x 32 (the narrow-head kernel without AMX).
TEST(AttentionRealShape, Sam3SelfAttentionBf16SampledRows) {
  check_sampled_rows({1, 5184, 5184, 8, 32}, DType::BF16);
}
TEST(AttentionRealShape, Sam3SelfAttentionF32SampledRows) {
  check_sampled_rows({1, 5184, 5184, 8, 32}, DType::F32);
}

// ---------------------------------------------------------------------------
// The AMX kernel: taken whenever the host has AMX, and exact to the bound above
// at shapes that cross its tiles (128 queries, pairs of 16), key blocks (128)
// and tile edges (16 / 32), with every mask. On a host without AMX these
// cases still run the other kernels.

// CPUID.(7,0):EDX bits 22 (AMX-BF16) and 24 (AMX-TILE) with AVX-512 BF16,
// and a Linux that supports the tile data state (ARCH_GET_XCOMP_SUPP bit 18),
// read here independently of the kernel's own probe.
bool host_has_amx_bf16() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  if (!(d >> 22 & 1u) || !(d >> 24 & 1u)) return false;
  if (!__builtin_cpu_supports("avx512bf16")) return false;
  constexpr int kArchGetXcompSupp = 0x1021;
  uint64_t features = 0;
  return syscall(SYS_arch_prctl, kArchGetXcompSupp, &features) == 0 && (features >> 18 & 1u);
}

// Whether this process was granted the tile data state (ARCH_GET_XCOMP_PERM).
bool tile_data_permitted() {
  constexpr int kArchGetXcompPerm = 0x1022;
  uint64_t features = 0;
  return syscall(SYS_arch_prctl, kArchGetXcompPerm, &features) == 0 && (features >> 18 & 1u);
}

TEST(AttentionAmx, TakenExactlyWhenTheHostHasAmx) {
  const bool amx = cpu::attention_detail::amx_bf16_supported();
  EXPECT_EQ(amx, host_has_amx_bf16()) << "CPUID + Linux say AMX-BF16: " << host_has_amx_bf16();
  if (amx) {
    EXPECT_TRUE(tile_data_permitted()) << "probe passed but no tile data permission";
  }
  std::mt19937 rng(11);
  OwnedTensor qb = random4(DType::BF16, {1, 40, 2, 64}, rng, 1.f);
  OwnedTensor kb = random4(DType::BF16, {1, 50, 2, 64}, rng, 1.f);
  OwnedTensor qf = random4(DType::F32, {1, 40, 2, 64}, rng, 1.f);
  OwnedTensor out(DType::F32, {1, 40, 2, 64});
  // Selected unless ONEDNN_MAX_CPU_ISA caps the process below AMX.
  EXPECT_EQ(std::string(selected(qb, kb, kb, out, {}).name) == "amx", amx && cpu::amx_not_capped());
  EXPECT_STRNE(selected(qf, kb, kb, out, {}).name, "amx");  // F32 / mixed inputs never
  const std::vector<const Kernel*> ks = kernels();
  EXPECT_EQ(std::count(ks.begin(), ks.end(), &cpu::attention_detail::kAmxKernel), amx ? 1 : 0);
}

std::string shape_name(const SweepCase& c) {
  std::ostringstream os;
  os << "B" << c.B << " Lq" << c.Lq << " Lk" << c.Lk << " H" << c.H << " D" << c.D;
  return os.str();
}

// With BF16 inputs every kernel rounds P to bf16 before P.V and keeps the fp32
// normaliser (what PyTorch's bf16 attention does), so a CPU without AVX-512
// gives the same numbers as one with it. Oracle: the attention in double with
// P = bf16(exp(s - max)) and the unrounded sum. 64 keys are one key block for
// every kernel, so each takes its weights against the row's true max too
// (weights rounded relative to another running max would carry other,
// uncorrelated rounding errors). Then a kernel differs from the oracle only by
// its own error (fp32 order, its exp polynomial, a rare P within an ulp of a
// tie rounded the other way), while a kernel that skipped the rounding sits as
// far from it as the exact reference does.
TEST(Attention, EveryKernelRoundsPToBf16ForBf16Inputs) {
  const int64_t B = 1, Lq = 40, Lk = 64, H = 2, D = 64;
  const float scale = 0.125f;
  std::mt19937 rng(33);
  OwnedTensor q = random4(DType::BF16, {B, Lq, H, D}, rng, 1.f);
  OwnedTensor k = random4(DType::BF16, {B, Lk, H, D}, rng, 1.f);
  OwnedTensor v = random4(DType::BF16, {B, Lk, H, D}, rng, 1.f);
  OwnedTensor oracle(DType::F32, {B, Lq, H, D});
  for (int64_t i = 0; i < Lq; ++i)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> s(Lk);
      for (int64_t j = 0; j < Lk; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += double(get(q, {0, i, h, d})) * get(k, {0, j, h, d});
        s[j] = scale * dot;
      }
      const double max = *std::max_element(s.begin(), s.end());
      double sum = 0;
      std::vector<double> pr(Lk);
      for (int64_t j = 0; j < Lk; ++j) {
        const double e = std::exp(s[j] - max);
        sum += e;
        pr[j] = round_bf16(static_cast<float>(e));
      }
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < Lk; ++j) acc += pr[j] * get(v, {0, j, h, d});
        set(oracle, {0, i, h, d}, static_cast<float>(acc / sum));
      }
    }
  auto rms_from_oracle = [&](const Tensor& t) {
    double e2 = 0;
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const double e = double(get(t, {0, i, h, d})) - get(oracle, {0, i, h, d});
          e2 += e * e;
        }
    return std::sqrt(e2 / double(Lq * H * D));
  };
  AttentionParams params;
  params.scale = scale;
  OwnedTensor exact(DType::F32, {B, Lq, H, D});
  ref::attention(q, k, v, exact, params);
  const double unrounded = rms_from_oracle(exact);
  ASSERT_GT(unrounded, 1e-5) << "P's rounding must be visible at this shape";
  for (const Kernel* kernel : kernels()) {
    OwnedTensor got(DType::F32, {B, Lq, H, D});
    if (!accepts(*kernel, q, k, v, got, params)) continue;  // the short-key kernel
    cpu::attention_detail::attention_with(*kernel, q, k, v, got, params);
    const double rms = rms_from_oracle(got);
    EXPECT_LT(rms, 0.2 * unrounded) << kernel->name << ": rms " << rms << " from the oracle, "
                                    << unrounded << " for the unrounded reference";
    std::printf("[ %s ] rms from the P-rounded oracle %.3g (unrounded reference %.3g)\n",
                kernel->name, rms, unrounded);
  }
}

// The short-key kernel computes what the general AVX-512 kernel computes for
// one key block, in the same order: identical bits, every mask, strided and
// packed Q (bf16 rows in place; f32, odd head dims and odd strides packed),
// row counts around its 6-row groups and 48-row items.
TEST(AttentionShortKeys, BitIdenticalToGeneralAvx512Kernel) {
  namespace ad = cpu::attention_detail;
  if (!ad::avx512_bf16_supported()) GTEST_SKIP() << "no AVX-512 BF16 on this host";
  const SweepCase cases[] = {{40, 3, 6, 16, 64}, {1, 97, 6, 3, 64}, {2, 1, 1, 2, 128},
                             {1, 50, 16, 2, 80}, {3, 13, 9, 1, 33}, {1, 6, 2, 1, 256}};
  std::mt19937 rng(21);
  for (const SweepCase& c : cases)
    for (DType in : {DType::BF16, DType::F32})
      for (DType out : {DType::BF16, DType::F32})
        for (int mask = 0; mask < 3; ++mask) {
          // q as a slice of a wider [B, Lq, H, D + 2] buffer when D is even:
          // row and head strides even, so bf16 Q is read in place.
          OwnedTensor qw = random4(in, {c.B, c.Lq, c.H, c.D + 2}, rng, 2.f);
          const Tensor q = qw.t.slice(3, c.D % 2 == 0 ? 2 : 1, c.D);
          OwnedTensor k = random4(in, {c.B, c.Lk, c.H, c.D}, rng, 2.f);
          OwnedTensor v = random4(in, {c.B, c.Lk, c.H, c.D}, rng, 1.f);
          AttentionParams params;
          OwnedTensor bias, padding;
          if (mask == 1) {  // block-causal over the keys
            params.causal_block = 2;
          } else if (mask == 2) {  // additive bias and key padding
            bias = random4(DType::F32, {1, c.H, c.Lq, c.Lk}, rng, 1.f);
            padding = OwnedTensor(DType::U8, {c.B, c.Lk});
            for (int64_t i = 0; i < c.B * c.Lk; ++i) padding.t.ptr<uint8_t>()[i] = i % 3 != 1;
            params.bias = bias;
            params.key_padding = padding;
          }
          OwnedTensor general(out, q.shape), fast(out, q.shape);
          ad::attention_with(ad::kAvx512Kernel, q, k, v, general, params);
          ad::attention_with(ad::kAvx512ShortKernel, q, k, v, fast, params);
          const std::string what =
              shape_name(c) + " " + dt(in) + "->" + dt(out) + " mask " + std::to_string(mask);
          ASSERT_EQ(std::memcmp(general.t.data, fast.t.data, general.t.nbytes()), 0) << what;
          // And within the kernels' bound of the reference.
          OwnedTensor want(out, q.shape);
          ref::attention(q, k, v, want, params);
          expect_close(fast, want,
                       tolerance(ad::kAvx512ShortKernel, in == DType::BF16, out, max_abs(v)), what);
        }
}

// Lengths off every multiple of 16, 32 and 128, several query tiles and key
// blocks, head dims 64 / 80 / 128, BF16 and F32 outputs, no mask.
TEST(AttentionAmx, OddShapesMatchReference) {
  const SweepCase cases[] = {
      {1, 129, 259, 2, 64}, {2, 45, 300, 1, 80},  {1, 300, 133, 2, 128}, {1, 17, 1000, 1, 128},
      {1, 255, 31, 1, 80},  {1, 161, 129, 1, 64}, {3, 33, 97, 2, 128},   {1, 1, 1, 1, 64},
  };
  std::mt19937 rng(12);
  for (const SweepCase& c : cases)
    for (DType out : {DType::F32, DType::BF16}) {
      OwnedTensor q = random4(DType::BF16, {c.B, c.Lq, c.H, c.D}, rng, 2.f);
      OwnedTensor k = random4(DType::BF16, {c.B, c.Lk, c.H, c.D}, rng, 2.f);
      OwnedTensor v = random4(DType::BF16, {c.B, c.Lk, c.H, c.D}, rng, 1.f);
      check_against_ref(q, k, v, out, {}, shape_name(c) + " -> " + dt(out));
    }
}

// Every mask kind, alone and together, where it crosses query tiles and key
// blocks: bias (full, broadcast, transposed), key padding (holes and a ragged
// end per batch, one block entirely padded), block-causal with Lq < Lk and
// Lq > Lk, and a negative scale.
TEST(AttentionAmx, MasksAcrossTilesAndBlocks) {
  std::mt19937 rng(13);
  for (const SweepCase& c : {SweepCase{2, 150, 1100, 2, 80}, SweepCase{1, 300, 140, 2, 128},
                             SweepCase{2, 70, 270, 1, 64}}) {
    OwnedTensor q = random4(DType::BF16, {c.B, c.Lq, c.H, c.D}, rng, 2.f);
    OwnedTensor k = random4(DType::BF16, {c.B, c.Lk, c.H, c.D}, rng, 2.f);
    OwnedTensor v = random4(DType::BF16, {c.B, c.Lk, c.H, c.D}, rng, 1.f);
    const std::string name = shape_name(c);

    OwnedTensor bias = random4(DType::F32, {c.B, c.H, c.Lq, c.Lk}, rng, 3.f);
    OwnedTensor bias_h = random4(DType::F32, {1, c.H, c.Lq, c.Lk}, rng, 3.f);
    OwnedTensor bias_t = random4(DType::F32, {c.B, c.H, c.Lk, c.Lq}, rng, 3.f);
    for (auto [b, what] : {std::pair<Tensor, const char*>{bias, "bias"},
                           {bias_h, "bias [1,H,Lq,Lk]"},
                           {bias_t.t.permute({0, 1, 3, 2}), "bias transposed"}}) {
      AttentionParams params;
      params.bias = b;
      check_against_ref(q, k, v, DType::F32, params, name + " " + what);
    }

    OwnedTensor padding(DType::U8, {c.B, c.Lk});
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t j = 0; j < c.Lk; ++j) {
        // Batch 0: whole key tiles [128, 256) padded, and [512, 1024): the AMX
        // kernel's second 512-key block, with visible keys on both sides.
        const bool hole =
            j % 11 == 5 || (b == 0 && ((j >= 128 && j < 256) || (j >= 512 && j < 1024)));
        padding.t.ptr<uint8_t>()[b * c.Lk + j] = (j < c.Lk - 37 * b && !hole) ? 1 : 0;
      }
    AttentionParams pad;
    pad.key_padding = padding;
    check_against_ref(q, k, v, DType::BF16, pad, name + " key padding");

    for (int64_t cb : {1, 16, 100}) {
      AttentionParams causal;
      causal.causal_block = cb;
      check_against_ref(q, k, v, DType::F32, causal, name + " causal_block " + std::to_string(cb));
    }

    AttentionParams all;
    all.scale = -0.07f;
    all.bias = bias_t.t.permute({0, 1, 3, 2});
    all.key_padding = padding;
    all.causal_block = 40;
    check_against_ref(q, k, v, DType::F32, all, name + " everything, scale -0.07");
  }
}

// Scores that rise along the keys raise the running max block after block
// (the AMX kernel then rescales O and the sum). Slope 1 rises 0.18 in log2
// units per key: 34 past the first 512-key block's max in the second, whose
// one-pass weights then overflow their sum bound and are redone against a
// raised max. Slope 0.3 rises ~10 past it: weights above the lazy threshold
// of 2^8 whose sum stays within the bound, kept without raising. Falling
// scores never raise it. The key index wraps at 700, so the third block
// falls back below the max; centred on 350, so that scores stay within
// +-63 in log2 units (fp32 kernels' rounding of larger scores would exceed
// their tolerance). Here: Lq queries sharing a direction against 1400 keys
// whose component along it follows those slopes, so the running max of
// every row moves up and down across any kernel's key blocks.
void check_rising_and_falling_scores(std::mt19937& rng, int64_t Lq, int64_t D,
                                     const std::string& what) {
  const int64_t B = 1, Lk = 1400, H = 2;
  OwnedTensor v = random4(DType::BF16, {B, Lk, H, D}, rng, 1.f);
  OwnedTensor q = random4(DType::BF16, {B, Lq, H, D}, rng, 0.5f);
  for (int64_t i = 0; i < Lq; ++i)
    for (int64_t h = 0; h < H; ++h) set(q, {0, i, h, 0}, 4.f);  // a common direction
  for (float slope : {0.3f, -0.3f, 1.f}) {
    OwnedTensor k = random4(DType::BF16, {B, Lk, H, D}, rng, 0.5f);
    for (int64_t j = 0; j < Lk; ++j)
      for (int64_t h = 0; h < H; ++h) set(k, {0, j, h, 0}, slope * float(j % 700 - 350) * 0.25f);
    check_against_ref(q, k, v, DType::F32, {}, what + ", key slope " + std::to_string(slope));
  }
}

TEST(AttentionAmx, RisingAndFallingScores) {
  std::mt19937 rng(14);
  // 40 queries: two pairs of 16-query groups, whose steps alternate; 20: one
  // pair, so that consecutive steps rescale the same rows.
  for (int64_t Lq : {40, 20})
    check_rising_and_falling_scores(rng, Lq, 64, "Lq " + std::to_string(Lq));
}

// ---------------------------------------------------------------------------
// The narrow-head kernel (head_dim <= 32, lanes over queries): taken for
// problems without key padding or causal masking (with or without a bias),
// and exact to the bound at shapes that cross its query tiles (64, and last
// tiles of 1-4 vectors), key blocks (64, odd tails that pair a key with
// nothing) and odd head dims, with the running max rising and falling across
// blocks.

TEST(AttentionNarrow, TakesUnmaskedNarrowProblemsOnly) {
  const Kernel& narrow = cpu::attention_detail::kAvx512NarrowKernel;
  std::mt19937 rng(21);
  OwnedTensor q = random4(DType::BF16, {1, 70, 2, 32}, rng, 1.f);
  OwnedTensor k = random4(DType::BF16, {1, 90, 2, 32}, rng, 1.f);
  OwnedTensor out(DType::BF16, {1, 70, 2, 32});
  EXPECT_TRUE(accepts(narrow, q, k, k, out, {}));
  AttentionParams causal;
  causal.causal_block = 8;
  EXPECT_FALSE(accepts(narrow, q, k, k, out, causal));
  OwnedTensor padding(DType::U8, {1, 90});
  AttentionParams padded;
  padded.key_padding = padding;
  EXPECT_FALSE(accepts(narrow, q, k, k, out, padded));
  OwnedTensor bias = random4(DType::F32, {1, 2, 70, 90}, rng, 1.f);
  AttentionParams biased;
  biased.bias = bias;
  EXPECT_TRUE(accepts(narrow, q, k, k, out, biased));
  OwnedTensor q64 = random4(DType::BF16, {1, 70, 2, 64}, rng, 1.f);
  OwnedTensor k64 = random4(DType::BF16, {1, 90, 2, 64}, rng, 1.f);
  OwnedTensor out64(DType::BF16, {1, 70, 2, 64});
  EXPECT_FALSE(accepts(narrow, q64, k64, k64, out64, {}));
}

TEST(AttentionNarrow, OddShapesMatchReference) {
  // Last query tiles of 1, 1, 4, 4, 1, 1, 3 and 2 vectors.
  const SweepCase cases[] = {{2, 130, 200, 3, 32}, {1, 65, 63, 2, 31}, {1, 64, 129, 1, 17},
                             {1, 127, 65, 2, 8},   {3, 1, 1, 1, 32},   {1, 200, 1000, 2, 32},
                             {1, 100, 70, 2, 32},  {2, 90, 33, 1, 20}};
  std::mt19937 rng(22);
  for (DType in : {DType::F32, DType::BF16})
    for (const SweepCase& c : cases) {
      OwnedTensor q = random4(in, {c.B, c.Lq, c.H, c.D}, rng, 2.f);
      OwnedTensor k = random4(in, {c.B, c.Lk, c.H, c.D}, rng, 2.f);
      OwnedTensor v = random4(in, {c.B, c.Lk, c.H, c.D}, rng, 1.f);
      for (DType out : {DType::F32, DType::BF16})
        check_against_ref(q, k, v, out, {},
                          dt(in) + "->" + dt(out) + " B" + std::to_string(c.B) + " Lq" +
                              std::to_string(c.Lq) + " Lk" + std::to_string(c.Lk) + " H" +
                              std::to_string(c.H) + " D" + std::to_string(c.D));
    }
}

// A negative scale turns the largest raw score into the smallest weight:
// every kernel that accepts it must still subtract the max of the scaled
// scores (scores of +-8 after scaling: 2^8 overflows nothing, but a max taken
// on the wrong side leaves weights of up to 2^16 against a sum of ~2^-8).
TEST(AttentionNarrow, NegativeScaleMatchesReference) {
  std::mt19937 rng(24);
  for (DType in : {DType::F32, DType::BF16}) {
    OwnedTensor q = random4(in, {1, 130, 2, 32}, rng, 2.f);
    OwnedTensor k = random4(in, {1, 200, 2, 32}, rng, 2.f);
    OwnedTensor v = random4(in, {1, 200, 2, 32}, rng, 1.f);
    AttentionParams params;
    params.scale = -0.9f;
    check_against_ref(q, k, v, DType::F32, params, dt(in) + " scale -0.9");
  }
}

// Biases on the narrow kernel, against the reference: a full one broadcast
// over the batch (with -inf keys, and one query row that sees only -inf:
// zeros), a full one with keys strided (transposed layout), and
// EfficientSAM3's separable boxRPB on its 201 decoder queries (a last tile of
// one vector) over a 72-wide grid; V contiguous (packed by transposes) and
// with head_dim strided (packed element by element).
TEST(AttentionNarrow, BiasesMatchReference) {
  const Kernel& narrow = cpu::attention_detail::kAvx512NarrowKernel;
  if (!cpu::attention_detail::avx512_bf16_supported()) GTEST_SKIP() << "no AVX-512 BF16";
  std::mt19937 rng(25);
  const float inf = std::numeric_limits<float>::infinity();
  for (DType in : {DType::F32, DType::BF16}) {
    const int64_t B = 2, Lq = 201, H = 2, D = 32, gh = 3, gw = 72, Lk = gh * gw;
    OwnedTensor q = random4(in, {B, Lq, H, D}, rng, 2.f);
    OwnedTensor k = random4(in, {B, Lk, H, D}, rng, 2.f);
    OwnedTensor v = random4(in, {B, Lk, H, D}, rng, 1.f);
    OwnedTensor vt = random4(in, {B, Lk, D, H}, rng, 1.f);
    const Tensor v_strided = vt.t.permute({0, 1, 3, 2});
    const float vmax = std::max(max_abs(v), max_abs(vt));

    OwnedTensor full = random4(DType::F32, {1, H, Lq, Lk}, rng, 3.f);
    for (int64_t j = 0; j < Lk; ++j) {
      if (j % 7 == 3) set(full, {0, 0, 5, j}, -inf);
      set(full, {0, 1, 130, j}, -inf);  // row 130 of head 1 sees nothing
    }
    OwnedTensor full_t = random4(DType::F32, {B, H, Lk, Lq}, rng, 3.f);
    OwnedTensor by = random4(DType::F32, {1, H, Lq, gh}, rng, 3.f);
    OwnedTensor bx = random4(DType::F32, {B, 1, Lq, gw}, rng, 3.f);
    AttentionParams a, b, c;
    a.bias = full;
    b.bias = full_t.t.permute({0, 1, 3, 2});
    c.bias_y = by;
    c.bias_x = bx;
    struct Case {
      const AttentionParams& params;
      const char* name;
    };
    for (const Case& cs :
         {Case{a, "bias with -inf"}, Case{b, "bias transposed"}, Case{c, "separable bias"}})
      for (const Tensor& vv : {v.t, v_strided}) {
        const std::string what = dt(in) + " " + cs.name + (vv.stride(3) == 1 ? "" : ", V strided");
        OwnedTensor want(DType::F32, {B, Lq, H, D}), got(DType::F32, {B, Lq, H, D});
        ref::attention(q, k, vv, want, cs.params);
        ASSERT_TRUE(accepts(narrow, q, k, vv, got, cs.params)) << what;
        cpu::attention_detail::attention_with(narrow, q, k, vv, got, cs.params);
        expect_close(got, want, tolerance(narrow, in == DType::BF16, DType::F32, vmax), what);
        if (&cs.params != &a) continue;
        for (int64_t bb = 0; bb < B; ++bb) {
          for (int64_t e = 0; e < D; ++e) {
            ASSERT_EQ(got.t.ptr<float>()[((bb * Lq + 130) * H + 1) * D + e], 0.f) << what;
          }
        }
      }
  }
}

TEST(AttentionNarrow, RisingAndFallingScores) {
  std::mt19937 rng(23);
  check_rising_and_falling_scores(rng, 80, 32, "80 queries, head_dim 32");
}

}  // namespace
}  // namespace flick
