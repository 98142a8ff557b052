// attention_int8: the reference (quantize as the contract says, then exact
// math) against hand-computable cases and against exact attention (the
// quantization error, with a stated bound), then every CPU kernel the host
// runs (AMX, AVX-512 VNNI, portable) against the reference over dtypes, head dims,
// lengths, strided views and masks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/cpu/attention_int8_kernels.h"
#include "runtime/cpu/ops.h"
#include "runtime/dtype.h"
#include "runtime/ref/ops.h"
#include "tests/ops/attention_test_util.h"

namespace flick {
namespace {

namespace ad = cpu::attention_int8_detail;
using ad::Kernel;

int64_t offset(const Tensor& t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * t.stride(0) + b * t.stride(1) + c * t.stride(2) + d * t.stride(3);
}

template <class F>
void for_each4(const Tensor& t, F f) {
  for (int64_t a = 0; a < t.dim(0); ++a)
    for (int64_t b = 0; b < t.dim(1); ++b)
      for (int64_t c = 0; c < t.dim(2); ++c)
        for (int64_t d = 0; d < t.dim(3); ++d) f(a, b, c, d);
}

// U(-amp, amp) + shift in every element, rounded to the view's dtype.
void fill(const Tensor& t, std::mt19937& rng, float amp, float shift = 0.f) {
  std::uniform_real_distribution<float> dist(-amp, amp);
  for_each4(t, [&](int64_t a, int64_t b, int64_t c, int64_t d) {
    store_from_f32(t.dtype, t.data, offset(t, a, b, c, d), dist(rng) + shift);
  });
}

OwnedTensor random4(DType dt, Shape s, std::mt19937& rng, float amp, float shift = 0.f) {
  OwnedTensor t(dt, s);
  fill(t, rng, amp, shift);
  return t;
}

float max_abs(const Tensor& t) {
  float m = 0;
  for_each4(t, [&](int64_t a, int64_t b, int64_t c, int64_t d) {
    m = std::max(m, std::fabs(load_as_f32(t.dtype, t.data, offset(t, a, b, c, d))));
  });
  return m;
}

struct Compare {
  double max_err = 0, cosine = 0;
  int64_t bad = 0;
  std::string worst;
};

// Elementwise |got - want| <= abs_tol + rel_tol |want|, plus the cosine of the two.
Compare compare(const Tensor& got, const Tensor& want, double abs_tol, double rel_tol) {
  Compare r;
  double dot = 0, gg = 0, ww = 0, worst_excess = -1;
  for_each4(want, [&](int64_t a, int64_t b, int64_t c, int64_t d) {
    const double g = load_as_f32(got.dtype, got.data, offset(got, a, b, c, d));
    const double w = load_as_f32(want.dtype, want.data, offset(want, a, b, c, d));
    dot += g * w;
    gg += g * g;
    ww += w * w;
    const double err = std::fabs(g - w);
    r.max_err = std::max(r.max_err, err);
    const double excess = err - (abs_tol + rel_tol * std::fabs(w));
    if (!(excess <= 0)) {
      ++r.bad;
      if (std::isnan(excess) || excess > worst_excess) {
        worst_excess = std::isnan(excess) ? INFINITY : excess;
        std::ostringstream os;
        os << "[" << a << "," << b << "," << c << "," << d << "] got " << g << " want " << w;
        r.worst = os.str();
      }
    }
  });
  r.cosine = gg > 0 && ww > 0 ? dot / std::sqrt(gg * ww) : (gg == ww ? 1.0 : 0.0);
  return r;
}

std::vector<const Kernel*> kernels() {
  std::vector<const Kernel*> ks = {&ad::kInt8PortableKernel};
  if (ad::avx512_vnni_supported()) ks.push_back(&ad::kInt8Avx512Kernel);
  if (ad::amx_int8_supported()) ks.push_back(&ad::kInt8AmxKernel);
  return ks;
}

// Kernel vs reference: the same INT8 operands (one quantizer, bit-identical),
// so what is left is the kernels' P rounded to bf16 (<= 2^-9 vmax per output,
// as in bf16 attention), fp32 scores and sums instead of double and the
// polynomial 2^x (~1e-5 vmax in all), and for BF16 outputs one rounding each
// side (one bf16 ulp, 2^-7 |ref|).
// The AMX kernel keeps a lazy running max (attention_amx.cpp's): a row's
// largest weight is not exactly 1 (exact in bf16) but up to 2^8, rounded like
// the others, and bf16 rounds with a relative error of up to 2^-8 (8-bit
// significand), so a row dominated by one key moves by up to 2^-8 vmax
// (seen: 1.44 * 2^-9 vmax on a row of an earlier LongKeysAcrossBlocks data
// set dominated by one key of weight 2^6.06; the exact-max kernels 0.26 *
// 2^-9 on the same inputs).
void check_kernels(const Tensor& q, const Tensor& k, const Tensor& v, DType out_dtype,
                   const AttentionParams& params, const std::string& what) {
  OwnedTensor want(out_dtype, q.shape);
  ref::attention_int8(q, k, v, want, params);
  const double vmax = max_abs(v);
  const double rel_tol = out_dtype == DType::BF16 ? std::ldexp(1.0, -7) : 0.0;
  for (const Kernel* kernel : kernels()) {
    const int p_bits = kernel == &ad::kInt8AmxKernel ? 8 : 9;
    const double abs_tol = (std::ldexp(1.0, -p_bits) + 1e-5) * vmax;
    OwnedTensor got(out_dtype, q.shape);
    ad::attention_int8_with(*kernel, q, k, v, got, params);
    const Compare c = compare(got, want, abs_tol, rel_tol);
    EXPECT_EQ(c.bad, 0) << what << " [" << kernel->name << "]: bad " << c.bad << " max "
                        << c.max_err << " worst " << c.worst << " (abs tol " << abs_tol << ")";
  }
}

// ---- the reference ----

// Identical keys: the smoothed K is zero, so every score is 0 and the output
// is the mean of V (rounded to bf16), over the visible keys.
TEST(AttentionInt8Ref, IdenticalKeysGiveMeanOfValues) {
  std::mt19937 rng(1);
  const int64_t Lq = 5, Lk = 7, D = 16;
  OwnedTensor q = random4(DType::F32, {1, Lq, 1, D}, rng, 2.f);
  OwnedTensor k(DType::F32, {1, Lk, 1, D}), v = random4(DType::F32, {1, Lk, 1, D}, rng, 1.f);
  for (int64_t j = 0; j < Lk; ++j)
    for (int64_t d = 0; d < D; ++d) k.t.ptr<float>()[j * D + d] = 0.25f * float(d) - 1.f;
  OwnedTensor out(DType::F32, {1, Lq, 1, D});
  AttentionParams p;
  p.causal_block = 3;  // query i sees keys [0, 3 * (floor((i + 2) / 3) + 1)) clamped to 7
  ref::attention_int8(q, k, v, out, p);
  for (int64_t i = 0; i < Lq; ++i) {
    const int64_t visible = std::min<int64_t>(Lk, 3 * ((i + Lk - Lq) / 3 + 1));
    for (int64_t d = 0; d < D; ++d) {
      double mean = 0;
      for (int64_t j = 0; j < visible; ++j) mean += round_bf16(v.t.ptr<float>()[j * D + d]);
      EXPECT_NEAR(out.t.ptr<float>()[i * D + d], mean / double(visible), 1e-6) << i << "," << d;
    }
  }
}

// Two keys by hand: after smoothing K = +-(k0 - k1) / 2, both rows quantize to
// +-127 with one scale, so the weights are exactly those of exact attention
// on quantized Q.
TEST(AttentionInt8Ref, TwoKeysByHand) {
  OwnedTensor q(DType::F32, {1, 1, 1, 2}), k(DType::F32, {1, 2, 1, 2}), v(DType::F32, {1, 2, 1, 2});
  q.t.ptr<float>()[0] = 1.f, q.t.ptr<float>()[1] = 0.5f;  // quantizes to (127, 64) * (1 / 127)
  const float kk[4] = {3.f, 1.f, 1.f, 1.f};               // smoothed: (1, 0), (-1, 0)
  const float vv[4] = {3.f, -1.f, 1.f, 5.f};
  std::copy(kk, kk + 4, k.t.ptr<float>());
  std::copy(vv, vv + 4, v.t.ptr<float>());
  OwnedTensor out(DType::F32, {1, 1, 1, 2});
  AttentionParams p;
  p.scale = 0.5f;
  ref::attention_int8(q, k, v, out, p);
  // s0 - s1 = 2 * (127 * 127) * (1 / 127) * (1 / 127) * 0.5 = 1
  const double w0 = 1.0 / (1.0 + std::exp(-1.0));
  EXPECT_NEAR(out.t.ptr<float>()[0], w0 * 3 + (1 - w0) * 1, 1e-6);
  EXPECT_NEAR(out.t.ptr<float>()[1], w0 * -1 + (1 - w0) * 5, 1e-6);
}

// Against exact attention: the quantization error. Q and the smoothed K are
// off by at most half a step (max|row| / 254) per element. With unit-scale
// inputs (scores of a few units, as after the DiT's RMSNorm) the measured
// error is 0.10-0.13 % of vmax at worst, cosine 0.999986; the bounds (0.3 %,
// 0.9999) keep a margin of 2.3x and 7x in (1 - cosine). The large common key
// offset (8x the spread) is the case smoothing exists for: with the mean
// subtraction removed the same run measures 0.45-0.50 % and cosine 0.99977,
// failing both bounds.
TEST(AttentionInt8Ref, CloseToExactAttention) {
  std::mt19937 rng(7);
  for (const float k_shift : {0.f, 8.f}) {
    for (const int64_t D : {64, 128}) {
      const int64_t Lq = 48, Lk = 300, H = 2;
      OwnedTensor q = random4(DType::F32, {1, Lq, H, D}, rng, 1.7f);
      OwnedTensor k = random4(DType::F32, {1, Lk, H, D}, rng, 1.7f, k_shift);
      OwnedTensor v = random4(DType::BF16, {1, Lk, H, D}, rng, 1.f);
      OwnedTensor exact(DType::F32, q.t.shape), got(DType::F32, q.t.shape);
      ref::attention(q, k, v, exact, {});
      ref::attention_int8(q, k, v, got, {});
      const Compare c = compare(got, exact, 0.003 * max_abs(v), 0.0);
      EXPECT_EQ(c.bad, 0) << "D " << D << " shift " << k_shift << ": worst " << c.worst;
      EXPECT_GT(c.cosine, 0.9999) << "D " << D << " shift " << k_shift;
    }
  }
}

// ---- the kernels against the reference ----

struct Case {
  int64_t B, Lq, Lk, H, D;
};

class AttentionInt8Kernels : public ::testing::TestWithParam<DType> {};

TEST_P(AttentionInt8Kernels, MatchReferenceOverShapes) {
  const DType in = GetParam();
  std::mt19937 rng(11);
  const Case cases[] = {{1, 1, 1, 1, 64},     {1, 13, 17, 2, 40}, {2, 200, 100, 2, 64},
                        {1, 37, 257, 3, 128}, {1, 5, 70, 1, 36},  {1, 250, 64, 1, 8},
                        {1, 21, 45, 2, 30},   {1, 9, 33, 1, 6}};
  for (const Case& c : cases) {
    OwnedTensor q = random4(in, {c.B, c.Lq, c.H, c.D}, rng, 2.f);
    OwnedTensor k = random4(in, {c.B, c.Lk, c.H, c.D}, rng, 2.f, 0.5f);
    OwnedTensor v = random4(in, {c.B, c.Lk, c.H, c.D}, rng, 1.f);
    for (DType out : {DType::F32, DType::BF16}) {
      std::ostringstream what;
      what << dtype_name(in) << "->" << dtype_name(out) << " B" << c.B << " Lq" << c.Lq << " Lk"
           << c.Lk << " H" << c.H << " D" << c.D;
      check_kernels(q, k, v, out, {}, what.str());
    }
  }
}

// q, k, v as views of one [B, L, 3, H, D] buffer (the DiT's fused qkv), out
// strided too.
TEST_P(AttentionInt8Kernels, StridedViews) {
  const DType in = GetParam();
  std::mt19937 rng(12);
  const int64_t L = 150, H = 3, D = 64;
  OwnedTensor qkv(in, {1, L, 3, H, D});
  for (int64_t i = 0; i < qkv.t.numel(); ++i)
    store_from_f32(in, qkv.t.data, i, std::uniform_real_distribution<float>(-2, 2)(rng));
  const Tensor q = qkv.t.select(2, 0), k = qkv.t.select(2, 1), v = qkv.t.select(2, 2);
  OwnedTensor out_buf(DType::F32, {1, L, H, 2 * D});
  Tensor out = out_buf.t.slice(3, D, D);
  OwnedTensor want(DType::F32, {1, L, H, D});
  ref::attention_int8(q, k, v, want, {});
  for (const Kernel* kernel : kernels()) {
    const int p_bits = kernel == &ad::kInt8AmxKernel ? 8 : 9;  // as check_kernels
    const double abs_tol = (std::ldexp(1.0, -p_bits) + 1e-5) * max_abs(v);
    ad::attention_int8_with(*kernel, q, k, v, out, {});
    const Compare c = compare(out, want, abs_tol, 0.0);
    EXPECT_EQ(c.bad, 0) << kernel->name << ": worst " << c.worst;
  }
}

TEST_P(AttentionInt8Kernels, MasksAndTheirCombination) {
  const DType in = GetParam();
  std::mt19937 rng(13);
  const int64_t B = 2, Lq = 90, Lk = 130, H = 2, D = 64;
  OwnedTensor q = random4(in, {B, Lq, H, D}, rng, 2.f), k = random4(in, {B, Lk, H, D}, rng, 2.f),
              v = random4(in, {B, Lk, H, D}, rng, 1.f);
  OwnedTensor bias(DType::F32, {1, H, Lq, Lk});
  for (int64_t i = 0; i < bias.t.numel(); ++i)
    bias.t.ptr<float>()[i] = std::uniform_real_distribution<float>(-3, 3)(rng);
  OwnedTensor pad(DType::U8, {B, Lk});
  for (int64_t i = 0; i < pad.t.numel(); ++i) pad.t.ptr<uint8_t>()[i] = (i * 7 + 3) % 5 != 0;
  for (int mask = 1; mask < 8; ++mask) {
    AttentionParams p;
    if (mask & 1) p.bias = bias;
    if (mask & 2) p.key_padding = pad;
    if (mask & 4) p.causal_block = 20;
    check_kernels(q, k, v, DType::F32, p, "mask " + std::to_string(mask));
  }
  // Every key of batch 1 padded: its rows are zero.
  for (int64_t j = 0; j < Lk; ++j) pad.t.ptr<uint8_t>()[Lk + j] = 0;
  AttentionParams p;
  p.key_padding = pad;
  check_kernels(q, k, v, DType::F32, p, "batch 1 fully padded");
}

// A separable bias (bias_y / bias_x) is its materialised sum: each kernel
// gives the same bits as with bias = bias_y + bias_x rounded to fp32, and
// the reference with the parts agrees with the kernels. A grid of 3 rows of
// 72 keys (rows end inside 16-key vectors), over several 512-key blocks with
// 13 x 72 keys, with key padding.
TEST_P(AttentionInt8Kernels, SeparableBiasIsItsSum) {
  const DType in = GetParam();
  std::mt19937 rng(23);
  const int64_t B = 2, Lq = 40, H = 2, D = 32, W = 72;
  for (const int64_t rows : {int64_t(3), int64_t(13)}) {
    const int64_t Lk = rows * W;
    OwnedTensor q = random4(in, {B, Lq, H, D}, rng, 2.f), k = random4(in, {B, Lk, H, D}, rng, 2.f),
                v = random4(in, {B, Lk, H, D}, rng, 1.f);
    OwnedTensor by = random4(DType::F32, {B, H, Lq, rows}, rng, 3.f);
    OwnedTensor bx = random4(DType::F32, {1, H, Lq, W}, rng, 3.f);
    const OwnedTensor full = test::materialised_bias(by.t, bx.t, B, H);
    OwnedTensor pad(DType::U8, {B, Lk});
    for (int64_t i = 0; i < pad.t.numel(); ++i) pad.t.ptr<uint8_t>()[i] = (i * 7 + 3) % 5 != 0;
    AttentionParams sep, sum;
    sep.bias_y = by;
    sep.bias_x = bx;
    sum.bias = full;
    sep.key_padding = sum.key_padding = pad;
    const std::string name = std::to_string(rows) + "x" + std::to_string(W) + " keys";
    check_kernels(q, k, v, DType::F32, sep, name);
    for (const Kernel* kernel : kernels()) {
      OwnedTensor a(DType::F32, q.t.shape), b(DType::F32, q.t.shape);
      ad::attention_int8_with(*kernel, q, k, v, a, sep);
      ad::attention_int8_with(*kernel, q, k, v, b, sum);
      EXPECT_EQ(std::memcmp(a.t.data, b.t.data, a.t.nbytes()), 0)
          << name << " [" << kernel->name << "]: differs from the materialised bias";
    }
  }
}

// Key sequences of several 512-key blocks (the AMX kernel's block) with
// tails in both lengths (260 queries: work items of 128, 128 and 4; 1100
// keys: blocks of 512, 512 and 76) and head dims that do and do not fill a
// 64-byte s8 k-step. In the "rising" variant the keys from 600 on share a
// strong component with every query, so their scores exceed the first
// block's by far more than the kernels' lazy-max margin (2^8): the running
// max is raised and O rescaled (forward walks) or the late block comes first
// (reverse walks). Also a negative scale (the AMX kernel negates Q instead).
TEST_P(AttentionInt8Kernels, LongKeysAcrossBlocks) {
  // The portable kernel has no key blocks (whole rows; covered above), and
  // under the AVX2-only emulation (tests/CMakeLists.txt) this would take minutes.
  if (!ad::avx512_vnni_supported()) GTEST_SKIP() << "no blocked INT8 kernel on this host";
  const DType in = GetParam();
  std::mt19937 rng(15);
  const Case cases[] = {{1, 260, 1100, 1, 128}, {1, 70, 600, 1, 64}, {2, 40, 530, 1, 80}};
  for (const Case& c : cases) {
    for (const bool rising : {false, true}) {
      OwnedTensor q = random4(in, {c.B, c.Lq, c.H, c.D}, rng, 2.f);
      OwnedTensor k = random4(in, {c.B, c.Lk, c.H, c.D}, rng, 2.f, 0.5f);
      OwnedTensor v = random4(in, {c.B, c.Lk, c.H, c.D}, rng, 1.f);
      if (rising) {
        // A common direction u (+-1 per dim): q += 2u, k[j >= 600] += 2u.
        for_each4(q.t, [&](int64_t a, int64_t b, int64_t h, int64_t d) {
          const int64_t at = offset(q.t, a, b, h, d);
          const float u = (d * 7 + h) % 3 == 0 ? -1.f : 1.f;
          store_from_f32(in, q.t.data, at, load_as_f32(in, q.t.data, at) + 2.f * u);
        });
        for_each4(k.t, [&](int64_t a, int64_t j, int64_t h, int64_t d) {
          if (j < 600) return;
          const int64_t at = offset(k.t, a, j, h, d);
          const float u = (d * 7 + h) % 3 == 0 ? -1.f : 1.f;
          store_from_f32(in, k.t.data, at, load_as_f32(in, k.t.data, at) + 2.f * u);
        });
      }
      for (const float scale : {0.f, -0.06f}) {
        AttentionParams p;
        p.scale = scale;
        std::ostringstream what;
        what << dtype_name(in) << " B" << c.B << " Lq" << c.Lq << " Lk" << c.Lk << " H" << c.H
             << " D" << c.D << (rising ? " rising" : "") << " scale " << scale;
        check_kernels(q, k, v, scale == 0.f ? DType::F32 : DType::BF16, p, what.str());
      }
    }
  }
}

// Masks over several blocks: block-causal boundaries inside and across the
// 512-key blocks (Lq < Lk: the queries see a prefix plus their block), key
// padding runs that cover a whole block, a bias, and their combination.
TEST_P(AttentionInt8Kernels, MasksAcrossBlocks) {
  if (!ad::avx512_vnni_supported()) GTEST_SKIP() << "no blocked INT8 kernel on this host";
  const DType in = GetParam();
  std::mt19937 rng(16);
  const int64_t B = 2, Lq = 140, Lk = 1200, H = 1, D = 128;
  OwnedTensor q = random4(in, {B, Lq, H, D}, rng, 2.f), k = random4(in, {B, Lk, H, D}, rng, 2.f),
              v = random4(in, {B, Lk, H, D}, rng, 1.f);
  OwnedTensor bias(DType::F32, {B, 1, Lq, Lk});
  for (int64_t i = 0; i < bias.t.numel(); ++i)
    bias.t.ptr<float>()[i] = std::uniform_real_distribution<float>(-3, 3)(rng);
  OwnedTensor pad(DType::U8, {B, Lk});
  for (int64_t j = 0; j < Lk; ++j) {
    pad.t.ptr<uint8_t>()[j] = (j * 7 + 3) % 5 != 0;
    pad.t.ptr<uint8_t>()[Lk + j] = j < 512 || j >= 1100;  // batch 1: keys 512-1099 padded
  }
  for (int mask = 1; mask < 8; ++mask) {
    AttentionParams p;
    if (mask & 1) p.bias = bias;
    if (mask & 2) p.key_padding = pad;
    if (mask & 4) p.causal_block = 150;  // query i sees keys < 150 * (floor((i + 1060) / 150) + 1)
    check_kernels(q, k, v, DType::F32, p, "mask " + std::to_string(mask));
  }
}

INSTANTIATE_TEST_SUITE_P(, AttentionInt8Kernels, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The vectorised quantizer the AVX-512 and AMX kernels use is the shared one
// bit for bit (INT8 rows and their zero padding, scales, K means) over
// dtypes, head dims with and without a vector tail, strided views, one key,
// and rows that quantize to zero (identical keys; an all-zero query).
TEST(AttentionInt8, VectorisedQuantizerBitIdentical) {
  if (!cpu::attention_detail::avx512_bf16_supported()) GTEST_SKIP() << "no AVX-512 on this host";
  std::mt19937 rng(18);
  for (const DType in : {DType::F32, DType::BF16, DType::F16}) {
    for (const int64_t D : {6, 40, 64, 80, 128}) {
      for (const int64_t Lk : {1, 37, 300}) {
        const int64_t L = std::max<int64_t>(Lk, 20), H = 2, ld = (D + 63) / 64 * 64;
        // q, k, v as views of one [1, L, 3, H, D] buffer: element strides > 1.
        OwnedTensor qkv(in, {1, L, 3, H, D});
        for (int64_t i = 0; i < qkv.t.numel(); ++i)
          store_from_f32(
              in, qkv.t.data, i,
              std::uniform_real_distribution<float>(-3, 3)(rng) + (i % 7 == 0 ? 5.f : 0));
        const Tensor q = qkv.t.select(2, 0).slice(1, 0, 20), k = qkv.t.select(2, 1).slice(1, 0, Lk),
                     v = qkv.t.select(2, 2).slice(1, 0, Lk);
        for (int64_t d = 0; d < D; ++d) {  // query 3 all zero; head 1: identical keys
          store_from_f32(in, q.data, offset(q, 0, 3, 0, d), 0.f);
          for (int64_t j = 0; j < Lk; ++j)
            store_from_f32(in, k.data, offset(k, 0, j, 1, d), 0.5f * float(d));
        }
        OwnedTensor out(DType::F32, q.shape);
        Tensor o = out;
        const auto p = cpu::attention_detail::resolve_problem(q, k, v, o, {});
        const std::string what =
            std::string(dtype_name(in)) + " D" + std::to_string(D) + " Lk" + std::to_string(Lk);
        for (int64_t h = 0; h < H; ++h) {
          std::vector<int8_t> kq0(size_t(Lk * ld), 1), kq1(size_t(Lk * ld), 2);
          const size_t nk = static_cast<size_t>(Lk), nd = static_cast<size_t>(D);
          std::vector<float> ks0(nk), ks1(nk), m0(nd), m1(nd);
          ad::quantize_k(p, 0, h, ld, kq0.data(), ks0.data(), m0.data());
          std::vector<float> scratch(nk * nd);
          ad::quantize_k_avx512(p, 0, h, ld, kq1.data(), ks1.data(), m1.data(), scratch.data());
          EXPECT_EQ(kq0, kq1) << what << " h" << h;
          EXPECT_EQ(std::memcmp(ks0.data(), ks1.data(), ks0.size() * 4), 0) << what << " h" << h;
          EXPECT_EQ(std::memcmp(m0.data(), m1.data(), m0.size() * 4), 0) << what << " h" << h;
          if (h == 1) {  // the case the zero branch exists for
            EXPECT_EQ(ks0[0], 0.f) << what;
          }
          const int64_t rows = 20;
          std::vector<int8_t> qq0(size_t(rows * ld), 1), qq1(size_t(rows * ld), 2);
          std::vector<float> qs0(rows), qs1(rows), row(nd);
          ad::quantize_q(p, 0, h, 0, rows, ld, qq0.data(), qs0.data(), row.data());
          ad::quantize_q_avx512(p, 0, h, 0, rows, ld, qq1.data(), qs1.data());
          EXPECT_EQ(qq0, qq1) << what << " h" << h;
          EXPECT_EQ(std::memcmp(qs0.data(), qs1.data(), qs0.size() * 4), 0) << what << " h" << h;
        }
      }
    }
  }
}

// The op as the host runs it (cpu::attention_int8: AMX-INT8 on AMX hosts)
// against exact attention on the DiT's head dim with keys over several
// blocks: the quantization error bound of CloseToExactAttention (0.3 % of
// max|V|, cosine 0.9999) holds for the kernels too, their own rounding
// (bf16 P: <= 2^-8 of max|V| with the AMX kernel's lazy max) being 3.8x
// below it.
TEST(AttentionInt8, HostKernelCloseToExactAttention) {
  // The portable kernel is the reference's arithmetic row by row (checked
  // against it above); this one is for the blocked kernels (and takes
  // minutes under the AVX2-only emulation).
  if (!ad::avx512_vnni_supported()) GTEST_SKIP() << "no blocked INT8 kernel on this host";
  std::mt19937 rng(17);
  for (const int64_t D : {64, 128}) {
    const int64_t Lq = 64, Lk = 1100, H = 2;
    OwnedTensor q = random4(DType::BF16, {1, Lq, H, D}, rng, 1.7f);
    OwnedTensor k = random4(DType::BF16, {1, Lk, H, D}, rng, 1.7f, 8.f);
    OwnedTensor v = random4(DType::BF16, {1, Lk, H, D}, rng, 1.f);
    OwnedTensor exact(DType::F32, q.t.shape), got(DType::F32, q.t.shape);
    ref::attention(q, k, v, exact, {});
    cpu::attention_int8(q, k, v, got, {});
    const Compare c = compare(got, exact, 0.003 * max_abs(v), 0.0);
    EXPECT_EQ(c.bad, 0) << "D " << D << ": worst " << c.worst;
    EXPECT_GT(c.cosine, 0.9999) << "D " << D;
  }
}

// The public op runs the AMX kernel exactly when the host has AMX-INT8 (and
// the tile state), else the VNNI kernel exactly when it has AVX-512 BF16 +
// VNNI, and gives that kernel's result.
TEST(AttentionInt8, PublicEntryPointSelectsByIsa) {
  std::mt19937 rng(14);
  OwnedTensor q = random4(DType::BF16, {1, 64, 2, 128}, rng, 2.f),
              k = random4(DType::BF16, {1, 96, 2, 128}, rng, 2.f),
              v = random4(DType::BF16, {1, 96, 2, 128}, rng, 1.f);
  OwnedTensor got(DType::BF16, q.t.shape), direct(DType::BF16, q.t.shape);
  Tensor g = got;
  const Kernel& used = ad::select_kernel(cpu::attention_detail::resolve_problem(q, k, v, g, {}));
  EXPECT_EQ(&used == &ad::kInt8AmxKernel, ad::amx_int8_supported());
  EXPECT_EQ(&used == &ad::kInt8Avx512Kernel,
            ad::avx512_vnni_supported() && !ad::amx_int8_supported());
  cpu::attention_int8(q, k, v, got, {});
  ad::attention_int8_with(used, q, k, v, direct, {});
  EXPECT_EQ(std::memcmp(got.t.data, direct.t.data, size_t(got.t.numel()) * 2), 0);
}

}  // namespace
}  // namespace flick
