// conv (2-d / 3-d) of the CPU backend (oneDNN) against the scalar reference,
// on the layer kinds of the Wan VAE and the DiT patch embedding. Bound: as
// for linear (tests/ops/matmul_test_util.h), with sum |x * w| over each
// output's receptive field computed by the reference conv on |x| and |w|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "runtime/cpu/gemm.h"
#include "runtime/cpu/onednn_info.h"
#include "runtime/cpu/ops.h"
#include "runtime/ref/ops.h"
#include "tests/ops/conv_test_util.h"
#include "tests/ops/matmul_test_util.h"

namespace flick {
namespace {

using test::act_name;
using test::BoundCheck;
using test::ChannelsLast;
using test::ConvCase;
using test::flat;
using test::get;
using test::make_desc;
using test::nc_shape;
using test::out_size;
using test::random_tensor;

// Elementwise |t| as F32 (same shape, contiguous).
OwnedTensor abs_f32(const Tensor& t) {
  OwnedTensor a(DType::F32, t.shape);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) a.t.ptr<float>()[i] = std::fabs(flat(t, i));
  return a;
}

// y (fast) against yr (reference) for conv c of x with float weight w.
void expect_conv_close(const ConvCase& c, const Tensor& x, const Tensor& w, const Tensor& bias,
                       Precision p, Activation act, const Tensor& yr, const Tensor& y,
                       const std::string& label) {
  // Magnitudes: the reference conv of |x| with |w| (F32, exact in double).
  OwnedTensor xa = abs_f32(x), wa = abs_f32(w), mag(DType::F32, yr.shape);
  auto mc = ref::pack_conv(make_desc(c, wa.t, Tensor{}, Precision::F32));
  ref::conv(xa, *mc, mag, Activation::None);
  const int64_t fan_in = w.numel() / w.dim(0);
  const double acc_e = test::acc_rel_error(p, fan_in) * 1.13 + test::act_rel_error(act);
  const double out_e = test::out_rel_error(y.dtype);
  const double headroom = p == Precision::F32 ? 1.0 : 1.1;  // bf16 / fp8 rounding of operands
  BoundCheck bc;
  const int64_t per_channel = yr.numel() / (yr.dim(0) * yr.dim(1));
  for (int64_t i = 0; i < yr.numel(); ++i) {
    const int64_t o = i / per_channel % yr.dim(1);
    const double ref = flat(yr, i);
    const double m = flat(mag, i) * headroom + (bias.empty() ? 0.0 : std::fabs(get(bias, {o})));
    bc.add(flat(y, i), ref, acc_e * m + out_e * std::fabs(ref) + 1e-30,
           "element " + std::to_string(i));
  }
  EXPECT_LE(bc.worst, 1.0) << label << " worst at " << bc.where;
}

void check_conv(const ConvCase& c, Precision p, DType xt, DType yt, bool bias, Activation act,
                bool channels_last, uint32_t seed) {
  const Shape xs = nc_shape(c.n, c.c, c.in, c.sd);
  const Shape ys = nc_shape(c.n, c.o, out_size(c), c.sd);
  std::vector<int64_t> wd{c.o, c.c / c.groups};
  for (int i = 0; i < c.sd; ++i) wd.push_back(c.k[static_cast<size_t>(i)]);
  const Shape ws = Shape::from_vector(wd);
  int64_t fan_in = c.c / c.groups;
  for (int i = 0; i < c.sd; ++i) fan_in *= c.k[static_cast<size_t>(i)];

  OwnedTensor x_plain = random_tensor(xt, xs, seed);
  ChannelsLast x_cl(xt, xs), y_cl(yt, ys);
  if (channels_last) test::fill_normal(x_cl.view, seed);
  const Tensor x = channels_last ? x_cl.view : x_plain.t;
  OwnedTensor w = random_tensor(DType::F32, ws, seed + 1, 1.f / std::sqrt(float(fan_in)));
  OwnedTensor b = bias ? random_tensor(DType::F32, {c.o}, seed + 2, 0.5f) : OwnedTensor();
  const ConvDesc d = make_desc(c, w.t, b.t, p);
  auto rc = ref::pack_conv(d);
  auto cc = cpu::pack_conv(d);
  EXPECT_EQ(cc->desc().w.shape, ws);
  OwnedTensor yr(yt, ys), y_plain(yt, ys);
  Tensor y = channels_last ? y_cl.view : y_plain.t;
  ref::conv(x, *rc, yr, act);
  cpu::conv(x, *cc, y, act);

  expect_conv_close(c, x, w.t, b.t, p, act, yr, y,
                    c.name + " " + precision_name(p) + " x " + std::string(dtype_name(xt)) + " y " +
                        std::string(dtype_name(yt)) + (bias ? " bias " : " ") + act_name(act) +
                        (channels_last ? " channels-last" : ""));
}

// The layer kinds of the Wan VAE (CausalConv3d 3x3x3 with the temporal
// padding done by the caller, 1x1x1 shortcuts, the temporal 3x1x1 and
// stride-2 resampling convs, 2-d 3x3 convs inside Resample) plus grouped,
// depthwise, dilated and patch-embedding-like (stride = kernel) convs.
std::vector<ConvCase> cases() {
  return {
      {3, 1, 96, 96, {3, 6, 7}, {3, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}, 1, "3x3x3 96ch"},
      {3, 1, 32, 48, {2, 5, 4}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1, "1x1x1"},
      {3, 1, 24, 48, {5, 3, 4}, {3, 1, 1}, {2, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1, "time conv s2"},
      {3, 2, 16, 16, {4, 9, 8}, {1, 2, 2}, {1, 2, 2}, {0, 0, 0}, {1, 1, 1}, 1, "patch 1x2x2"},
      {2, 1, 32, 32, {9, 11, 1}, {3, 3, 1}, {2, 2, 1}, {0, 0, 0}, {1, 1, 1}, 1, "3x3 s2 down"},
      {2, 2, 24, 40, {7, 6, 1}, {3, 3, 1}, {1, 1, 1}, {1, 1, 0}, {1, 1, 1}, 1, "3x3"},
      {2, 1, 32, 64, {5, 5, 1}, {3, 3, 1}, {1, 1, 1}, {1, 1, 0}, {1, 1, 1}, 4, "groups 4"},
      {2, 1, 32, 32, {6, 7, 1}, {3, 3, 1}, {1, 1, 1}, {1, 1, 0}, {1, 1, 1}, 32, "depthwise"},
      {2, 1, 16, 8, {9, 9, 1}, {3, 3, 1}, {1, 1, 1}, {2, 2, 0}, {2, 2, 1}, 1, "dilated"},
      {2, 1, 3, 16, {8, 8, 1}, {7, 7, 1}, {1, 1, 1}, {3, 3, 0}, {1, 1, 1}, 1, "7x7 from rgb"},
      {2, 2, 40, 70, {5, 6, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1, "1x1"},
  };
}

TEST(Conv, LayerKindsAllPrecisions) {
  uint32_t seed = 1;
  for (const ConvCase& raw : cases()) {
    const ConvCase c = raw;
    for (Precision p : {Precision::F32, Precision::BF16, Precision::FP8})
      check_conv(c, p, DType::BF16, DType::BF16, true, Activation::None, false, seed++);
  }
}

TEST(Conv, DtypesBiasActivations) {
  const ConvCase c = cases()[5];  // 2-d 3x3, batch 2
  uint32_t seed = 100;
  for (Precision p : {Precision::F32, Precision::BF16, Precision::FP8})
    for (DType xt : {DType::F32, DType::BF16})
      for (DType yt : {DType::F32, DType::BF16})
        for (bool bias : {false, true})
          for (Activation act : test::kAllActivations)
            check_conv(c, p, xt, yt, bias, act, false, seed++);
}

// Channels-last views are convolved in place (no reorders), 2-d and 3-d.
TEST(Conv, ChannelsLastViews) {
  uint32_t seed = 200;
  for (int idx : {0, 1, 2, 5, 6, 10}) {
    const ConvCase c = cases()[static_cast<size_t>(idx)];
    for (Precision p : {Precision::F32, Precision::BF16})
      for (DType t : {DType::F32, DType::BF16})
        check_conv(c, p, t, t, true, Activation::Silu, true, seed++);
  }
}

// F32 1x1 convolutions on channels-last x and y are a GEMM on flick's
// AVX-512 FMA kernel (runtime/cpu/conv.cpp, on_f32_gemm): against the
// reference across the kernel's boundaries (K on and off its 16-wide step,
// N off its 64-column groups, pixels off its 6-row tiles and split across
// threads), every dtype pair and activation; NCHW calls and 3x3 layers stay
// on oneDNN.
TEST(Conv, F32OneByOneOnTheGemm) {
  struct Shape1 {
    int64_t n, c, o, h, w;
  };
  uint32_t seed = 500;
  const Shape1 shapes[] = {
      {1, 16, 24, 5, 7}, {2, 40, 70, 6, 5}, {1, 256, 96, 13, 11}, {1, 600, 33, 4, 4}};
  for (const Shape1& sh : shapes) {
    const ConvCase c{2,
                     sh.n,
                     sh.c,
                     sh.o,
                     {sh.h, sh.w, 1},
                     {1, 1, 1},
                     {1, 1, 1},
                     {0, 0, 0},
                     {1, 1, 1},
                     1,
                     "1x1 " + std::to_string(sh.c) + "->" + std::to_string(sh.o)};
    for (DType xt : {DType::F32, DType::BF16})
      for (DType yt : {DType::F32, DType::BF16}) {
        const Activation act = test::kAllActivations[seed % std::size(test::kAllActivations)];
        check_conv(c, Precision::F32, xt, yt, (seed % 2) == 0, act, true, seed);
        ++seed;
      }
  }
  OwnedTensor w = random_tensor(DType::F32, {24, 32, 1, 1}, 510, 0.1f);
  auto cc = cpu::pack_conv(
      make_desc({2, 1, 32, 24, {5, 6, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1, "1x1"},
                w.t, Tensor{}, Precision::F32));
  ChannelsLast x(DType::F32, {1, 32, 5, 6}), y(DType::F32, {1, 24, 5, 6});
  test::fill_normal(x.view, 511);
  cpu::conv(x.view, *cc, y.view, Activation::None);
  const std::string gemm = cpu::conv_impl(*cc);
  OwnedTensor xp = random_tensor(DType::F32, {1, 32, 5, 6}, 512), yp(DType::F32, {1, 24, 5, 6});
  cpu::conv(xp.t, *cc, yp.t, Activation::None);
  const std::string plain = cpu::conv_impl(*cc);
  if (cpu::linear_uses_avx512_f32()) {
    EXPECT_EQ(gemm, "flick:avx512_f32 (1x1 as GEMM)");
  } else {
    EXPECT_EQ(gemm.rfind("flick:", 0), std::string::npos) << gemm;
  }
  EXPECT_EQ(plain.rfind("flick:", 0), std::string::npos) << "NCHW: " << plain;
  std::printf("[ conv     ] F32 1x1 channels-last: %s, NCHW: %s\n", gemm.c_str(), plain.c_str());
}

// prefers_channels_last(): false only for F32 layers on oneDNN's Winograd
// kernels (3x3 stride 1), whose blocked layout plain NCHW reaches faster;
// true otherwise, BF16 layers on the same kernels included (they convert to
// f32 on the way, as slow from either layout).
TEST(Conv, PrefersChannelsLastUnlessWinograd) {
  auto conv = [](int64_t k, int64_t stride, Precision p) {
    OwnedTensor w = random_tensor(DType::F32, {16, 16, k, k}, 520, 0.1f);
    ConvDesc d;
    d.w = w.t;
    d.padding = {k / 2, k / 2, 0};
    d.stride = {stride, stride, 1};
    d.precision = p;
    return cpu::pack_conv(d);
  };
  EXPECT_FALSE(conv(3, 1, Precision::F32)->prefers_channels_last());
  EXPECT_TRUE(conv(3, 2, Precision::F32)->prefers_channels_last());
  EXPECT_TRUE(conv(1, 1, Precision::F32)->prefers_channels_last());
  EXPECT_TRUE(conv(3, 1, Precision::BF16)->prefers_channels_last());
  EXPECT_TRUE(conv(1, 1, Precision::BF16)->prefers_channels_last());
  if (cpu::cpu_supports(Precision::INT8)) {
    EXPECT_TRUE(conv(3, 1, Precision::INT8)->prefers_channels_last());
  }
}

// The same packed conv on several input sizes (one plan each), twice each.
TEST(Conv, SeveralInputSizesOnOnePackedConv) {
  const ConvCase base = cases()[0];
  OwnedTensor w = random_tensor(DType::F32, {96, 96, 3, 3, 3}, 301, 0.02f);
  OwnedTensor b = random_tensor(DType::F32, {96}, 302);
  const ConvDesc d = make_desc(base, w.t, b.t, Precision::BF16);
  auto rc = ref::pack_conv(d);
  auto cc = cpu::pack_conv(d);
  for (int64_t h : {4, 6, 4, 9}) {
    const Shape xs{1, 96, 3, h, 5};
    const Shape ys{1, 96, 1, h, 5};
    OwnedTensor x = random_tensor(DType::BF16, xs, 303 + static_cast<uint32_t>(h));
    OwnedTensor y1(DType::BF16, ys), y2(DType::BF16, ys), yr(DType::BF16, ys);
    cpu::conv(x, *cc, y1, Activation::None);
    cpu::conv(x, *cc, y2, Activation::None);
    ref::conv(x, *rc, yr, Activation::None);
    ASSERT_EQ(std::memcmp(y1.t.data, y2.t.data, y1.t.nbytes()), 0);
    expect_conv_close(base, x, w, b, Precision::BF16, Activation::None, yr, y1,
                      "H=" + std::to_string(h));
  }
}

// Output frames of >= 2^15 pixels (the Wan VAE decoder's 176x320 and
// 352x640) run on oneDNN's direct AMX kernel where the host has AMX, smaller
// ones on brgconv (runtime/cpu/conv.cpp, prefer_direct_amx): both against
// the reference, and the kernel each plan took.
TEST(Conv, LargeFramesOnTheDirectAmxKernel) {
  // 1x3x3 (one frame): the reference conv of a 2^15-pixel frame stays quick.
  const ConvCase big{3,         1,         16,        32, {1, 128, 256},  {1, 3, 3},
                     {1, 1, 1}, {0, 1, 1}, {1, 1, 1}, 1,  "128x256 frame"};
  const ConvCase small{3,         1,         16,        32, {1, 16, 24},  {1, 3, 3},
                       {1, 1, 1}, {0, 1, 1}, {1, 1, 1}, 1,  "16x24 frame"};
  check_conv(big, Precision::BF16, DType::BF16, DType::BF16, true, Activation::None, true, 400);
  check_conv(small, Precision::BF16, DType::BF16, DType::BF16, true, Activation::None, true, 401);

  OwnedTensor w = random_tensor(DType::F32, {32, 16, 1, 3, 3}, 402, 0.05f);
  auto cc = cpu::pack_conv(make_desc(big, w.t, Tensor{}, Precision::BF16));
  std::string impls[2];
  for (int i = 0; i < 2; ++i) {
    const ConvCase& c = i == 0 ? big : small;
    ChannelsLast x(DType::BF16, nc_shape(1, 16, c.in, 3)),
        y(DType::BF16, nc_shape(1, 32, out_size(c), 3));
    test::fill_normal(x.view, 403);
    cpu::conv(x.view, *cc, y.view, Activation::None);
    impls[i] = cpu::conv_impl(*cc);
  }
  if (cpu::amx_available()) {
    EXPECT_EQ(impls[0], "jit:avx512_core_amx_bf16");
    EXPECT_EQ(impls[1], "brgconv:avx512_core_amx_bf16");
  }
  std::printf("[ conv     ] 128x256 frame: %s, 16x24 frame: %s\n", impls[0].c_str(),
              impls[1].c_str());
}

}  // namespace
}  // namespace flick
