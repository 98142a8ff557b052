// INT8 convolution (Precision::INT8: s8 weights per output channel, u8 / s8
// activations with one dynamic scale per call, runtime/ref/conv_int8.h) of
// the CPU backend (oneDNN) against the reference INT8 conv, and both against
// the F32 conv within the quantization bound. 2-d and 3-d, the Wan VAE's
// layer kinds (causal 3x3x3 over [2 cached frames, x], 1x1x1, the 3x1x1
// stride-2 time conv, the upsampler's 2x2 phase conv, 3x3 stride 2) plus
// groups, dilation, batch 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/cpu/gemm.h"
#include "runtime/cpu/onednn_info.h"
#include "runtime/cpu/ops.h"
#include "runtime/ref/conv_int8.h"
#include "runtime/ref/matmul_common.h"
#include "runtime/ref/ops.h"
#include "tests/ops/conv_test_util.h"
#include "tests/ops/matmul_test_util.h"

namespace flick {
namespace {

using test::act_name;
using test::BoundCheck;
using test::ChannelsLast;
using test::flat;
using test::make_desc;
using test::nc_shape;
using test::offset;
using test::out_size;
using Case = test::ConvCase;

std::vector<Case> cases() {
  return {
      // CausalConv3d: 2 cached frames + 2 new ones, spatial padding 1.
      {3, 1, 96, 96, {4, 6, 7}, {3, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}, 1, "causal 3x3x3"},
      {3, 1, 32, 48, {2, 5, 4}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1, "1x1x1 shortcut"},
      {3, 1, 24, 48, {3, 3, 4}, {3, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1, "time conv"},
      {3, 1, 24, 24, {5, 3, 4}, {3, 1, 1}, {2, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1, "time conv s2"},
      {3, 1, 32, 64, {1, 5, 6}, {1, 2, 2}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}, 1, "up phases 2x2"},
      {3, 1, 32, 32, {1, 9, 11}, {1, 3, 3}, {1, 2, 2}, {0, 0, 0}, {1, 1, 1}, 1, "3x3 s2 down"},
      {2, 2, 24, 40, {7, 6, 1}, {3, 3, 1}, {1, 1, 1}, {1, 1, 0}, {1, 1, 1}, 1, "2-d 3x3"},
      {2, 1, 32, 64, {5, 5, 1}, {3, 3, 1}, {1, 1, 1}, {1, 1, 0}, {1, 1, 1}, 4, "groups 4"},
      {2, 1, 16, 8, {9, 9, 1}, {3, 3, 1}, {1, 1, 1}, {2, 2, 0}, {2, 2, 1}, 1, "dilated"},
      // EfficientSAM3's neck 1x1s.
      {2, 2, 128, 70, {5, 6, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1, "2-d 1x1"},
  };
}

// x as the Wan decoder feeds its convs: SiLU of N(0, 1.5) (min -0.28,
// asymmetric), or plain N(0, 1).
void fill_x(const Tensor& x, uint32_t seed, bool silu) {
  test::fill_normal(x, seed, silu ? 1.5f : 1.f);
  if (!silu) return;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t off = offset(x, i);
    const float v = load_as_f32(x.dtype, x.data, off);
    store_from_f32(x.dtype, x.data, off, v / (1.f + std::exp(-v)));
  }
}

// F32 [shape] of f(i) for element i of t (logical order).
template <typename F>
OwnedTensor map_f32(const Tensor& t, F f) {
  OwnedTensor out(DType::F32, t.shape);
  for (int64_t i = 0; i < t.numel(); ++i) out.t.ptr<float>()[i] = f(flat(t, i), i);
  return out;
}

OwnedTensor ref_conv_f32(const Case& c, const Tensor& x, const Tensor& w, const Shape& ys) {
  OwnedTensor y(DType::F32, ys);
  auto pc = ref::pack_conv(make_desc(c, w, Tensor{}, Precision::F32));
  ref::conv(x, *pc, y.t, Activation::None);
  return y;
}

struct ConvSetup {
  OwnedTensor x_plain, w, b;
  std::unique_ptr<ChannelsLast> x_cl;
  Tensor x;
  Shape xs, ys, ws;
};

ConvSetup make(const Case& c, DType xt, bool channels_last, bool silu, uint32_t seed) {
  ConvSetup s;
  s.xs = nc_shape(c.n, c.c, c.in, c.sd);
  s.ys = nc_shape(c.n, c.o, out_size(c), c.sd);
  std::vector<int64_t> wd{c.o, c.c / c.groups};
  int64_t fan_in = c.c / c.groups;
  for (int i = 0; i < c.sd; ++i) {
    wd.push_back(c.k[static_cast<size_t>(i)]);
    fan_in *= c.k[static_cast<size_t>(i)];
  }
  s.ws = Shape::from_vector(wd);
  if (channels_last) {
    s.x_cl = std::make_unique<ChannelsLast>(xt, s.xs);
    s.x = s.x_cl->view;
  } else {
    s.x_plain = OwnedTensor(xt, s.xs);
    s.x = s.x_plain.t;
  }
  fill_x(s.x, seed, silu);
  s.w = test::random_tensor(DType::F32, s.ws, seed + 1, 1.f / std::sqrt(float(fan_in)));
  s.b = test::random_tensor(DType::F32, {c.o}, seed + 2, 0.5f);
  return s;
}

// CPU INT8 conv against the reference INT8 conv. Both quantize x by the same
// rule from the same min / max (bit-identical q) and sum exact integers, so
// only the fp32 epilogue differs: acc * scale (+ bias, maybe as one FMA; the
// CPU's acc includes the zero point's zp * wsum, taken out in its bias),
// the activation (oneDNN's polynomials: test::act_rel_error, derivative
// <= 1.13) and the store rounding (one output ulp). Bound per element:
// 6 fp32 ulps of (|acc * scale| + |bias|) + the activation's error + one
// output ulp of |ref| (test::acc_rel_error(INT8)). A single differing q
// code moves an output by ~1e-2 of its magnitude: far outside this bound.
void check_vs_ref_int8(const Case& c, DType xt, DType yt, bool bias, Activation act,
                       bool channels_last, bool silu, uint32_t seed) {
  ConvSetup s = make(c, xt, channels_last, silu, seed);
  const ConvDesc d = make_desc(c, s.w.t, bias ? s.b.t : Tensor{}, Precision::INT8);
  auto rc = ref::pack_conv(d);
  auto cc = cpu::pack_conv(d);
  ChannelsLast y_cl(yt, s.ys);
  OwnedTensor y_plain(yt, s.ys), yr(yt, s.ys);
  Tensor y = channels_last ? y_cl.view : y_plain.t;
  ref::conv(s.x, *rc, yr.t, act);
  cpu::conv(s.x, *cc, y, act);

  // |acc * scale| from the dequantized operands: the rule applied here.
  float mn = flat(s.x, 0), mx = mn;
  for (int64_t i = 0; i < s.x.numel(); ++i) {
    mn = std::min(mn, flat(s.x, i));
    mx = std::max(mx, flat(s.x, i));
  }
  const ref::ConvInt8Quant q = ref::conv_int8_quant(mn, mx, ref::conv_int8_act());
  const OwnedTensor xdq = map_f32(s.x, [&](float v, int64_t) {
    return std::fabs(static_cast<float>(ref::conv_int8_q(v, q) - q.zero_point) * q.scale);
  });
  const ref::PreparedWeights pw = ref::prepare_weights(s.w.t, Tensor{}, Tensor{}, Precision::INT8);
  const int64_t k = pw.k();
  const OwnedTensor wdq = map_f32(s.w.t, [&](float, int64_t i) {
    return std::fabs(pw.w.t.ptr<int8_t>()[i] * pw.scale.t.ptr<float>()[i / k]);
  });
  const OwnedTensor mag = ref_conv_f32(c, xdq.t, wdq.t, s.ys);
  const double acc_e = test::acc_rel_error(Precision::INT8, k) * 1.13 + test::act_rel_error(act);
  const double out_e = test::out_rel_error(yt) + (yt == DType::F32 ? std::ldexp(1.0, -23) : 0);
  const int64_t per_channel = yr.t.numel() / (c.n * c.o);
  BoundCheck bc;
  for (int64_t i = 0; i < yr.t.numel(); ++i) {
    const int64_t o = i / per_channel % c.o;
    const double ref = flat(yr.t, i);
    const double m = mag.t.ptr<float>()[i] + (bias ? std::fabs(s.b.t.ptr<float>()[o]) : 0.0);
    bc.add(flat(y, i), ref, acc_e * m + out_e * std::fabs(ref) + 1e-30,
           "element " + std::to_string(i));
  }
  EXPECT_LE(bc.worst, 1.0) << c.name << " x " << dtype_name(xt) << " y " << dtype_name(yt)
                           << (bias ? " bias " : " ") << act_name(act)
                           << (channels_last ? " channels-last" : "") << (silu ? " silu-x" : "")
                           << " (" << cpu::conv_impl(*cc) << ") worst at " << bc.where;
}

TEST(ConvInt8, CpuMatchesTheReferenceInt8Conv) {
  if (!cpu::cpu_supports(Precision::INT8)) GTEST_SKIP() << "INT8 needs AVX-512 VNNI or AMX";
  uint32_t seed = 1;
  for (const Case& c : cases())
    for (bool cl : {true, false})
      for (bool silu : {true, false})
        check_vs_ref_int8(c, DType::BF16, DType::BF16, true, Activation::None, cl, silu, seed++);
}

// The Wan VAE's 384-channel causal 3x3x3 at its 160-pixel rows (the 88x160
// stage, cut to 2 rows): oneDNN 2.6.3's brgconv:avx512_core_vnni got this
// shape wrong (relative error ~6, an AMD Zen 4), so conv_int8.cpp never uses
// a brgemm int8 conv without AMX. Under ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI
// an AMX host checks the same rule.
TEST(ConvInt8, WideCausalConv) {
  if (!cpu::cpu_supports(Precision::INT8)) GTEST_SKIP() << "INT8 needs AVX-512 VNNI or AMX";
  const Case c{3, 1, 384, 384, {3, 2, 160}, {3, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}, 1, "wide"};
  check_vs_ref_int8(c, DType::BF16, DType::BF16, true, Activation::None, true, true, 77);
}

TEST(ConvInt8, DtypesBiasActivations) {
  if (!cpu::cpu_supports(Precision::INT8)) GTEST_SKIP() << "INT8 needs AVX-512 VNNI or AMX";
  const Case c = cases()[6];  // 2-d 3x3, batch 2
  uint32_t seed = 100;
  for (DType xt : {DType::F32, DType::BF16})
    for (DType yt : {DType::F32, DType::BF16})
      for (bool bias : {false, true})
        for (Activation act : test::kAllActivations)
          check_vs_ref_int8(c, xt, yt, bias, act, false, true, seed++);
}

// 1x1 convs into a channels-last y run on flick's AMX GEMM where the host
// has AMX (oneDNN elsewhere), the zero point taken out of the integer sums:
// the same bound against the reference, every dtype / bias / activation,
// rows and channels that fill no whole tile (60 pixels, 70 and 33 outputs,
// C = 100 pads K).
TEST(ConvInt8, OneByOneConvsOnTheGemm) {
  if (!cpu::cpu_supports(Precision::INT8)) GTEST_SKIP() << "INT8 needs AVX-512 VNNI or AMX";
  const Case cases_1x1[] = {
      {2, 2, 128, 70, {5, 6, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1, "1x1 C128"},
      {2, 1, 100, 33, {7, 3, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1, "1x1 C100"},
      {3, 1, 64, 48, {2, 5, 4}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1, "1x1x1 C64"},
  };
  uint32_t seed = 500;
  for (const Case& c : cases_1x1) {
    for (DType xt : {DType::F32, DType::BF16})
      for (DType yt : {DType::F32, DType::BF16})
        for (bool bias : {false, true})
          for (Activation act : test::kAllActivations) {
            const uint32_t sd = seed++;
            check_vs_ref_int8(c, xt, yt, bias, act, true, (sd & 1) != 0, sd);
          }
    ConvSetup s = make(c, DType::BF16, true, true, seed++);
    auto cc = cpu::pack_conv(make_desc(c, s.w.t, s.b.t, Precision::INT8));
    ChannelsLast y(DType::BF16, s.ys);
    cpu::conv(s.x, *cc, y.view, Activation::None);
    EXPECT_EQ(cpu::conv_impl(*cc).rfind("flick:", 0) == 0, cpu::linear_uses_amx())
        << c.name << ": " << cpu::conv_impl(*cc);
  }
}

// The INT8 conv (reference and CPU) against the exact F32 conv of the
// unquantized operands. With x ~ (q - zp) * xs and w ~ wq * ws[o]:
//   |y8 - y| <= sum |xdq - x| |wdq| + sum |x| |wdq - w|
//           <= xs * sum_taps |wdq| + ws[o] / 2 * sum_taps |x|
// (a weight is off by at most half its step; an activation too, except at
// the ends of the range, where the rounded zero point can push q one code
// past 255 and the clamp costs up to a whole step: xs is used), plus the
// fp32 / output rounding of check_vs_ref_int8. The bound adds every
// error's magnitude while the errors themselves are signed and independent
// (their sum grows as sqrt(K) rather than K: 3-4 % of the bound measured at
// K = 2592): the error actually seen must reach 1 % of it somewhere, or the
// bound says nothing.
TEST(ConvInt8, WithinTheQuantizationBoundOfTheF32Conv) {
  if (!cpu::cpu_supports(Precision::INT8)) GTEST_SKIP() << "INT8 needs AVX-512 VNNI or AMX";
  uint32_t seed = 300;
  for (const Case& c : cases()) {
    for (bool silu : {true, false}) {
      ConvSetup s = make(c, DType::F32, true, silu, seed++);
      const ConvDesc d = make_desc(c, s.w.t, s.b.t, Precision::INT8);
      auto rc = ref::pack_conv(d);
      auto cc = cpu::pack_conv(d);
      OwnedTensor yr(DType::F32, s.ys), yc(DType::F32, s.ys);
      ref::conv(s.x, *rc, yr.t, Activation::None);
      cpu::conv(s.x, *cc, yc.t, Activation::None);
      OwnedTensor y32(DType::F32, s.ys);
      auto fc = ref::pack_conv(make_desc(c, s.w.t, s.b.t, Precision::F32));
      ref::conv(s.x, *fc, y32.t, Activation::None);

      float mn = flat(s.x, 0), mx = mn;
      for (int64_t i = 0; i < s.x.numel(); ++i) {
        mn = std::min(mn, flat(s.x, i));
        mx = std::max(mx, flat(s.x, i));
      }
      const ref::ConvInt8Quant q = ref::conv_int8_quant(mn, mx, ref::conv_int8_act());
      const ref::PreparedWeights pw =
          ref::prepare_weights(s.w.t, Tensor{}, Tensor{}, Precision::INT8);
      const int64_t k = pw.k();
      const OwnedTensor wdq = map_f32(s.w.t, [&](float, int64_t i) {
        return std::fabs(pw.w.t.ptr<int8_t>()[i] * pw.scale.t.ptr<float>()[i / k]);
      });
      const OwnedTensor step = map_f32(s.x, [&](float, int64_t) { return q.scale; });
      const OwnedTensor xa = map_f32(s.x, [](float v, int64_t) { return std::fabs(v); });
      const OwnedTensor half_ws =
          map_f32(s.w.t, [&](float, int64_t i) { return 0.5f * pw.scale.t.ptr<float>()[i / k]; });
      const OwnedTensor e1 = ref_conv_f32(c, step.t, wdq.t, s.ys);
      const OwnedTensor e2 = ref_conv_f32(c, xa.t, half_ws.t, s.ys);
      const OwnedTensor mag = ref_conv_f32(c, xa.t, wdq.t, s.ys);
      const int64_t per_channel = s.ys.numel() / (c.n * c.o);
      for (int which = 0; which < 2; ++which) {
        const OwnedTensor& y8 = which == 0 ? yr : yc;
        BoundCheck bc;
        for (int64_t i = 0; i < s.ys.numel(); ++i) {
          const int64_t o = i / per_channel % c.o;
          const double m = mag.t.ptr<float>()[i] + std::fabs(s.b.t.ptr<float>()[o]);
          const double bound =
              e1.t.ptr<float>()[i] + e2.t.ptr<float>()[i] + (k + 8) * std::ldexp(1.0, -24) * m;
          const double got = y8.t.ptr<float>()[i], want = y32.t.ptr<float>()[i];
          bc.add(got, want, bound, "element " + std::to_string(i));
        }
        EXPECT_LE(bc.worst, 1.0) << c.name << (which ? " cpu" : " ref") << " worst at " << bc.where;
        EXPECT_GT(bc.worst, 0.01) << c.name << ": the bound is loose by > 100x";
      }
    }
  }
}

TEST(ConvInt8, QuantizationRule) {
  // U8: the range always covers 0, and 0 is exactly the zero point (zero
  // padding, causal zero frames and a SiLU's 0 are exact).
  const ref::ConvInt8Quant u = ref::conv_int8_quant(-0.28f, 5.f, ref::ConvInt8Act::U8);
  EXPECT_EQ(ref::conv_int8_q(0.f, u), u.zero_point);
  EXPECT_EQ(ref::conv_int8_q(-0.28f, u), 0);
  EXPECT_EQ(ref::conv_int8_q(5.f, u), 255);
  EXPECT_NEAR(u.scale, 5.28f / 255, 1e-7);
  EXPECT_EQ(u.zero_point, 14);  // rint(0.28 / (5.28 / 255)) = rint(13.52)
  const ref::ConvInt8Quant pos = ref::conv_int8_quant(0.5f, 2.f, ref::ConvInt8Act::U8);
  EXPECT_EQ(pos.zero_point, 0);
  EXPECT_EQ(ref::conv_int8_q(2.f, pos), 255);
  // S8: symmetric over max |x|.
  const ref::ConvInt8Quant s = ref::conv_int8_quant(-0.28f, 5.f, ref::ConvInt8Act::S8);
  EXPECT_EQ(s.zero_point, 0);
  EXPECT_EQ(ref::conv_int8_q(-5.f, s), -127);
  EXPECT_EQ(ref::conv_int8_q(-0.28f, s), -7);  // rint(-7.11)
  // All zeros: scale 1, q = zero point.
  for (ref::ConvInt8Act a : {ref::ConvInt8Act::U8, ref::ConvInt8Act::S8}) {
    const ref::ConvInt8Quant z = ref::conv_int8_quant(0.f, 0.f, a);
    EXPECT_EQ(z.scale, 1.f);
    EXPECT_EQ(ref::conv_int8_q(0.f, z), z.zero_point);
  }
}

// One packed INT8 conv on several input sizes and with the causal cache's
// zero frames (an all-zero x gives y = bias exactly).
TEST(ConvInt8, SeveralInputSizesAndAllZeroInput) {
  if (!cpu::cpu_supports(Precision::INT8)) GTEST_SKIP() << "INT8 needs AVX-512 VNNI or AMX";
  const Case base = cases()[0];
  OwnedTensor w = test::random_tensor(DType::F32, {96, 96, 3, 3, 3}, 401, 0.02f);
  OwnedTensor b = test::random_tensor(DType::F32, {96}, 402);
  const ConvDesc d = make_desc(base, w.t, b.t, Precision::INT8);
  auto rc = ref::pack_conv(d);
  auto cc = cpu::pack_conv(d);
  for (int64_t h : {4, 6, 4, 0}) {
    const bool zero = h == 0;
    if (zero) h = 5;
    ChannelsLast x(DType::BF16, {1, 96, 3, h, 5}), y1(DType::BF16, {1, 96, 1, h, 5}),
        y2(DType::BF16, {1, 96, 1, h, 5});
    OwnedTensor yr(DType::BF16, {1, 96, 1, h, 5});
    if (zero) {
      std::memset(x.buf.t.data, 0, x.buf.t.nbytes());
    } else {
      fill_x(x.view, 403 + static_cast<uint32_t>(h), true);
    }
    cpu::conv(x.view, *cc, y1.view, Activation::None);
    cpu::conv(x.view, *cc, y2.view, Activation::None);
    ref::conv(x.view, *rc, yr.t, Activation::None);
    ASSERT_EQ(std::memcmp(y1.buf.t.data, y2.buf.t.data, y1.buf.t.nbytes()), 0);
    for (int64_t i = 0; i < yr.t.numel(); ++i) {
      const float r = flat(yr.t, i);
      if (zero) {
        ASSERT_EQ(r, round_bf16(b.t.ptr<float>()[i / (h * 5)])) << i;
      }
      ASSERT_NEAR(flat(y1.view, i), r, std::ldexp(std::fabs(r), -7) + 1e-6)
          << "H=" << h << " " << i;
    }
  }
  std::printf("[ conv int8 ] %s\n", cpu::conv_impl(*cc).c_str());
}

}  // namespace
}  // namespace flick
