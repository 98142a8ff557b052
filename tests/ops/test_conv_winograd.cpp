// F32 3x3 stride-1 2-d convolutions run on oneDNN's Winograd kernels
// (F(4x4, 3x3) or F(2x2, 3x3), its choice) where the host has them (runtime/cpu/conv.cpp,
// kWinogradMinPixels): against the scalar reference (products accumulated in double).
//
// Bound: max |err| <= 1e-5 * max |ref|, mean <= 1e-6 * max |ref|. The
// Winograd transforms multiply by 1, 2, 4, 8 and their inverses, so the
// result carries a few more fp32 roundings than a direct sum: measured on
// 256 -> 256 channels (2304 terms) 2.3-2.8e-6 max and 2.4-2.9e-7 mean
// relative to max |ref|, against 1.5-2.4e-6 / 1.4-2.6e-7 for the direct
// kernel. A wrong weight or tile transform shows up as errors of order 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>

#include "runtime/cpu/onednn_info.h"
#include "runtime/cpu/ops.h"
#include "runtime/ref/ops.h"
#include "tests/ops/matmul_test_util.h"

namespace flick {
namespace {

// oneDNN's Winograd kernel is AVX-512 only (ONEDNN_MAX_CPU_ISA may cap it).
bool onednn_has_avx512() {
  const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
  return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & avx512) == avx512;
}

struct Errors {
  double max_rel = 0, mean_rel = 0;
};

// |y - ref| relative to max |ref|, both contiguous F32.
Errors errors(const Tensor& y, const Tensor& ref) {
  double max_ref = 0, max_err = 0, sum_err = 0;
  const float* a = y.ptr<float>();
  const float* b = ref.ptr<float>();
  for (int64_t i = 0; i < ref.numel(); ++i) {
    max_ref = std::max(max_ref, std::fabs(double(b[i])));
    const double e = std::fabs(double(a[i]) - double(b[i]));
    max_err = std::max(max_err, e);
    sum_err += e;
  }
  return {max_err / max_ref, sum_err / double(ref.numel()) / max_ref};
}

ConvDesc conv3x3(const Tensor& w, const Tensor& b, Precision p) {
  ConvDesc d;
  d.w = w;
  d.bias = b;
  d.padding = {1, 1, 0};
  d.precision = p;
  return d;
}

// 64 -> 48 channels (576-term sums) on a 40x36 frame (odd tile count along
// W: 36 = 9 tiles of 4), plain NCHW in and out, bias and ReLU fused.
TEST(ConvWinograd, F32ThreeByThreeAgainstReference) {
  const int64_t c = 64, o = 48, h = 40, w = 36;
  OwnedTensor x = test::random_tensor(DType::F32, {1, c, h, w}, 11);
  OwnedTensor wt = test::random_tensor(DType::F32, {o, c, 3, 3}, 12, 1.f / 24.f);
  OwnedTensor b = test::random_tensor(DType::F32, {o}, 13, 0.5f);
  auto rc = ref::pack_conv(conv3x3(wt, b, Precision::F32));
  auto cc = cpu::pack_conv(conv3x3(wt, b, Precision::F32));
  for (Activation act : {Activation::None, Activation::Relu}) {
    OwnedTensor y(DType::F32, {1, o, h, w}), yr(DType::F32, {1, o, h, w});
    ref::conv(x, *rc, yr, act);
    cpu::conv(x, *cc, y, act);
    const Errors e = errors(y, yr);
    const std::string impl = cpu::conv_impl(*cc);
    EXPECT_LE(e.max_rel, 1e-5) << impl;
    EXPECT_LE(e.mean_rel, 1e-6) << impl;
    if (onednn_has_avx512()) {
      // jit_wino_4x3 (EfficientSAM3's 256 / 1024 channels) or, for these
      // channel counts, jit_fp32_wino_2x3.
      EXPECT_NE(impl.find("wino"), std::string::npos) << impl;
    }
    std::printf("[ conv     ] 3x3 f32 %s, %s: max %.2e mean %.2e\n", test::act_name(act),
                impl.c_str(), e.max_rel, e.mean_rel);
  }
}

// Whether BF16 3x3 convolutions should take the f32 Winograd kernel here:
// AVX-512 BF16 without AMX (runtime/cpu/conv.cpp, bf16_on_winograd).
bool bf16_winograd_host() {
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  const auto isa = dnnl::get_effective_cpu_isa();
  return (static_cast<unsigned>(isa) & bf16) == bf16 && isa < dnnl::cpu_isa::avx512_core_amx;
}

// Small frames (under 32^2 outputs) keep the direct kernels, F32 and BF16.
TEST(ConvWinograd, SmallFramesStayDirect) {
  OwnedTensor wt = test::random_tensor(DType::F32, {32, 32, 3, 3}, 21, 1.f / 17.f);
  for (Precision p : {Precision::F32, Precision::BF16}) {
    const int64_t side = 24;
    auto cc = cpu::pack_conv(conv3x3(wt, Tensor{}, p));
    auto rc = ref::pack_conv(conv3x3(wt, Tensor{}, p));
    const DType dt = p == Precision::F32 ? DType::F32 : DType::BF16;
    OwnedTensor x = test::random_tensor(dt, {1, 32, side, side}, 22);
    OwnedTensor y(DType::F32, {1, 32, side, side}), yr(DType::F32, {1, 32, side, side});
    cpu::conv(x, *cc, y, Activation::None);
    ref::conv(x, *rc, yr, Activation::None);
    EXPECT_EQ(cpu::conv_impl(*cc).find("wino"), std::string::npos) << cpu::conv_impl(*cc);
    // Direct f32 / bf16 products with fp32 sums of 288 terms.
    EXPECT_LE(errors(y, yr).max_rel, 1e-5);
  }
}

// BF16: on AVX-512 BF16 hosts without AMX, Winograd in f32 on the bf16
// operands; elsewhere the direct bf16 kernel. Either way the reference's bf16
// convolution (bf16-rounded weights and inputs, products summed in double),
// to the f32 bound above: bf16 inputs are exact in f32, so only the sums'
// roundings differ. F32 inputs are rounded to bf16 first (the precision's
// contract): a kernel that skipped that would differ by ~1e-3. Channels-last
// input and output as EfficientSAM3's neck feeds them, bias and ReLU fused
// (oneDNN's Winograd takes no GELU post-op: such a layer runs direct).
TEST(ConvWinograd, Bf16ThreeByThreeAgainstReference) {
  const int64_t c = 64, o = 48, h = 40, w = 36;
  OwnedTensor wt = test::random_tensor(DType::F32, {o, c, 3, 3}, 31, 1.f / 24.f);
  OwnedTensor b = test::random_tensor(DType::F32, {o}, 32, 0.5f);
  auto rc = ref::pack_conv(conv3x3(wt, b, Precision::BF16));
  auto cc = cpu::pack_conv(conv3x3(wt, b, Precision::BF16));
  for (DType dt : {DType::BF16, DType::F32}) {
    OwnedTensor xs = test::random_tensor(dt, {1, h, w, c}, 33);  // NHWC
    const Tensor x = xs.t.permute({0, 3, 1, 2});                 // [1, c, h, w] view
    OwnedTensor ys(DType::F32, {1, h, w, o}), yr(DType::F32, {1, o, h, w});
    Tensor y = ys.t.permute({0, 3, 1, 2});
    cpu::conv(x, *cc, y, Activation::Relu);
    ref::conv(x, *rc, yr, Activation::Relu);
    OwnedTensor y_nchw(DType::F32, {1, o, h, w});
    ref::copy(y, y_nchw.t);
    const Errors e = errors(y_nchw, yr);
    const std::string impl = cpu::conv_impl(*cc);
    EXPECT_LE(e.max_rel, 1e-5) << impl;
    EXPECT_LE(e.mean_rel, 1e-6) << impl;
    EXPECT_EQ(impl.find("wino") != std::string::npos, bf16_winograd_host()) << impl;
    std::printf("[ conv     ] 3x3 bf16 (%s in), %s: max %.2e mean %.2e\n",
                dt == DType::BF16 ? "bf16" : "f32", impl.c_str(), e.max_rel, e.mean_rel);
  }
  // The same packed conv on a frame under 32^2: the bf16 direct kernel.
  OwnedTensor xs = test::random_tensor(DType::BF16, {1, c, 20, 20}, 36);
  OwnedTensor ys(DType::F32, {1, o, 20, 20}), yr(DType::F32, {1, o, 20, 20});
  cpu::conv(xs, *cc, ys, Activation::None);
  ref::conv(xs, *rc, yr, Activation::None);
  EXPECT_EQ(cpu::conv_impl(*cc).find("wino"), std::string::npos) << cpu::conv_impl(*cc);
  EXPECT_LE(errors(ys, yr).max_rel, 1e-5);
  // Wide layers stay direct (their f32 Winograd weights would take 8x the
  // bf16 bytes): 640 -> 512 channels.
  OwnedTensor wide = test::random_tensor(DType::F32, {512, 640, 3, 3}, 34, 1.f / 80.f);
  auto cw = cpu::pack_conv(conv3x3(wide, Tensor{}, Precision::BF16));
  OwnedTensor xw = test::random_tensor(DType::BF16, {1, 640, 32, 32}, 35);
  OwnedTensor yw(DType::BF16, {1, 512, 32, 32});
  cpu::conv(xw, *cw, yw, Activation::None);
  EXPECT_EQ(cpu::conv_impl(*cw).find("wino"), std::string::npos) << cpu::conv_impl(*cw);
}

}  // namespace
}  // namespace flick
