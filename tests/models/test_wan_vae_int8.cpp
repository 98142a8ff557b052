// The Wan VAE decoder with INT8 convolutions (WanVaeDecoder::load with
// conv_precision INT8: the residual blocks' own convs, see
// wan_vae_decoder.cpp) against the BF16 decoder: PSNR of the decoded frames
// (values in [-1, 1], peak-to-peak 2: PSNR = 10 log10(4 / MSE)). The
// encoder with INT8 convolutions (WanVaeEncoder::load, conv_precision INT8)
// against the fp32 latents, its error beside the BF16 encoder's own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/mg2_quality.h"
#include "models/pipelines/matrix_game.h"
#include "models/wan_vae/wan_vae_decoder.h"
#include "models/wan_vae/wan_vae_encoder.h"
#include "models/wan_vae/wan_vae_synthetic.h"
#include "runtime/cpu/onednn_info.h"
#include "runtime/weights/weight_store.h"
#include "tests/models/golden_compare.h"

namespace flick {
namespace {

const std::string kData = std::string(FLICK_TEST_DATA) + "/mg2/";
const std::string kCheckpoint = kData + "weights/Wan2.1_VAE.pth";
// Thresholds: the measured value less a margin. Measured (Zen 4; U8
// activations, every residual block's convs INT8; CPU and reference backends
// alike on the golden decode): golden 31.5 dB, full width 45.6 dB (with S8
// activations and the full-resolution stage BF16: 30.5 / 43.0 dB). Margin
// 1.5 dB: summation-order changes move these by a few 0.1 dB.
constexpr double kGoldenMinDb = 30.0;
constexpr double kFullWidthMinDb = 44.1;
// The INT8 encoder's latents, rel L2 from the fp32 encoder's. Measured (Zen
// 4; CPU and reference backends alike): golden 1.12x the reference bf16
// encoder's own distance (0.0706 against 0.0629), full width 0.0142 (BF16
// 0.0091; S8 activations with the full-resolution blocks BF16: 1.03x,
// 0.0172). The thresholds leave ~15 % for summation order (the int8
// products are exact; the BF16 layers between them are not).
constexpr double kEncoderGoldenMaxRatio = 1.25;
constexpr double kEncoderFullWidthMaxRelL2 = 0.0165;
// The golden job's video (u8 frames) with the INT8 VAE against the BF16
// VAE's. Measured (Zen 4): universal 32.4, gta_drive 32.9, templerun 35.0 dB
// (with the INT8 decoder alone: 34.7, 33.3, 36.8 dB). Margin 1.4 dB.
constexpr double kPipelineMinDb = 31.0;
// Its conditioning latents ("img_cond") against the BF16 encoder's: measured
// 0.093, 0.084, 0.093 (the tiny VAE: compare the encoder golden's 0.07 from
// fp32); bound 0.11.
constexpr double kPipelineCondMaxRelL2 = 0.11;

double psnr(const std::vector<float>& a, const std::vector<float>& b) {
  double se = 0;
  for (size_t i = 0; i < a.size(); ++i) se += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return 10 * std::log10(4.0 / (se / static_cast<double>(a.size())));
}

// The frames of a decode of `latents` split into blocks (the pipeline's
// streaming calls, caches carried over).
std::vector<float> decode(WanVaeDecoder& dec, const Tensor& latents,
                          const std::vector<std::pair<int64_t, int64_t>>& blocks) {
  std::vector<float> out;
  for (const auto& [first, count] : blocks) {
    Expected<Tensor> f = dec.decode(latents.slice(2, first, count));
    EXPECT_TRUE(f.ok()) << f.status().message();
    if (!f.ok()) return out;
    out.insert(out.end(), f->ptr<float>(), f->ptr<float>() + f->numel());
  }
  return out;
}

class WanVaeInt8Golden : public ::testing::TestWithParam<const char*> {};

TEST_P(WanVaeInt8Golden, GoldenLatentsDecodeCloseToBf16) {
  // The golden latents (tests/data/mg2/vae_decoder.safetensors) through the
  // tiny checkpoint, 3 + 1 latents as the pipeline streams them. Its 2-8
  // channel RMS norms amplify every rounding (the BF16 decoder itself is 5-10
  // % rel L2 from the reference here, tests/models/test_wan_vae.cpp), so this
  // is the harsh case; the CPU and reference backends quantize identically,
  // so both must land alike. Measured: see the threshold.
  if (std::string(GetParam()) == "cpu" && !cpu::cpu_supports(Precision::INT8))
    GTEST_SKIP() << "INT8 needs AVX-512 VNNI or AMX";
  std::unique_ptr<Backend> be =
      std::string(GetParam()) == "ref" ? make_ref_backend() : make_cpu_backend();
  Expected<WeightStore> golden = WeightStore::open({kData + "vae_decoder.safetensors"});
  ASSERT_TRUE(golden.ok()) << golden.status().message();
  Expected<WeightStore> store = WeightStore::open({kCheckpoint});
  ASSERT_TRUE(store.ok()) << store.status().message();
  Expected<Tensor> latents = golden->get("input_latents");  // [1, 16, 4, 4, 6]
  ASSERT_TRUE(latents.ok()) << latents.status().message();
  std::vector<float> frames[2];
  for (int i = 0; i < 2; ++i) {
    Expected<WanVaeDecoder> dec = WanVaeDecoder::load(store->root(), *be, Precision::BF16,
                                                      i == 0 ? Precision::BF16 : Precision::INT8);
    ASSERT_TRUE(dec.ok()) << dec.status().message();
    frames[i] = decode(*dec, *latents, {{0, 3}, {3, 1}});
  }
  ASSERT_EQ(frames[0].size(), frames[1].size());
  ASSERT_EQ(frames[0].size(), size_t{13 * 3 * 32 * 48});
  const double db = psnr(frames[1], frames[0]);
  std::printf("  golden video int8 vs bf16 VAE: PSNR %.2f dB\n", db);
  EXPECT_GE(db, kGoldenMinDb);
}

INSTANTIATE_TEST_SUITE_P(Backends, WanVaeInt8Golden, ::testing::Values("ref", "cpu"),
                         [](const auto& info) { return std::string(info.param); });

TEST(WanVaeInt8, FullWidthDecodeCloseToBf16) {
  // The real widths (96-384 channels, synthetic weights), 2 latents at 4x6:
  // 5 frames of 32x48 through every layer kind, the temporal caches
  // included. Measured: see the threshold.
  if (!cpu::cpu_supports(Precision::INT8)) GTEST_SKIP() << "INT8 needs AVX-512 VNNI or AMX";
  Expected<WeightStore> store = wan_vae::make_synthetic_wan_vae(96, 7);
  ASSERT_TRUE(store.ok()) << store.status().message();
  std::unique_ptr<Backend> be = make_cpu_backend();
  uint32_t state = 5;
  OwnedTensor z(DType::F32, Shape{1, 16, 2, 4, 6});
  for (int64_t i = 0; i < z.t.numel(); ++i) {
    state = state * 1664525u + 1013904223u;
    z.t.ptr<float>()[i] = round_bf16((static_cast<float>(state >> 8) * 0x1p-23f - 1.f) * 2.f);
  }
  std::vector<float> frames[2];
  for (int i = 0; i < 2; ++i) {
    Expected<WanVaeDecoder> dec = WanVaeDecoder::load(store->root(), *be, Precision::BF16,
                                                      i == 0 ? Precision::BF16 : Precision::INT8);
    ASSERT_TRUE(dec.ok()) << dec.status().message();
    frames[i] = decode(*dec, z.t, {{0, 1}, {1, 1}});
  }
  ASSERT_EQ(frames[0].size(), size_t{5 * 3 * 32 * 48});
  const double db = psnr(frames[1], frames[0]);
  std::printf("  full-width int8 vs bf16 VAE: PSNR %.2f dB\n", db);
  EXPECT_GE(db, kFullWidthMinDb);
}

TEST(WanVaeInt8, OnlyWithBf16Activations) {
  Expected<WeightStore> store = WeightStore::open({kCheckpoint});
  ASSERT_TRUE(store.ok()) << store.status().message();
  std::unique_ptr<Backend> be = make_ref_backend();
  Expected<WanVaeDecoder> dec =
      WanVaeDecoder::load(store->root(), *be, Precision::F32, Precision::INT8);
  ASSERT_FALSE(dec.ok());
  EXPECT_NE(dec.status().message().find("INT8"), std::string::npos) << dec.status().message();
}

// The latents of `video` through the encoder at `precision` (INT8: BF16
// activations, INT8 convolutions).
std::vector<float> encode(Backend& be, const WeightView& root, Precision precision,
                          const Tensor& video) {
  Expected<WanVaeEncoder> enc =
      precision == Precision::INT8 ? WanVaeEncoder::load(root, be, Precision::BF16, Precision::INT8)
                                   : WanVaeEncoder::load(root, be, precision);
  EXPECT_TRUE(enc.ok()) << enc.status().message();
  if (!enc.ok()) return {};
  Expected<Tensor> z = enc->encode(video);
  EXPECT_TRUE(z.ok()) << z.status().message();
  if (!z.ok()) return {};
  return testing::to_f32(*z);
}

class WanVaeEncoderInt8Golden : public ::testing::TestWithParam<const char*> {};

TEST_P(WanVaeEncoderInt8Golden, LatentsAsCloseToFp32AsTheReferenceBf16) {
  // The golden conditioning video (frame 0, 20 zero frames) through the tiny
  // checkpoint. Oracle: the reference's fp32 latents; the reference's own
  // bf16 encoder lands 6.3 % (rel L2) from them, mostly through the tiny
  // VAE's 2-8 channel RMS norms, which amplify every rounding. INT8
  // convolutions must not take the latents much further than that.
  if (std::string(GetParam()) == "cpu" && !cpu::cpu_supports(Precision::INT8))
    GTEST_SKIP() << "INT8 needs AVX-512 VNNI or AMX";
  std::unique_ptr<Backend> be =
      std::string(GetParam()) == "ref" ? make_ref_backend() : make_cpu_backend();
  Expected<WeightStore> golden = WeightStore::open({kData + "vae_encoder.safetensors"});
  ASSERT_TRUE(golden.ok()) << golden.status().message();
  Expected<WeightStore> store = WeightStore::open({kCheckpoint});
  ASSERT_TRUE(store.ok()) << store.status().message();
  Expected<Tensor> frame0 = golden->get("fp32.input_frame0");  // [1, 3, 1, 32, 48]
  Expected<Tensor> want = golden->get("fp32.latents");
  Expected<Tensor> ref_bf16 = golden->get("ref.latents");
  ASSERT_TRUE(frame0.ok() && want.ok() && ref_bf16.ok());
  OwnedTensor video(DType::F32, Shape{1, 3, 21, 32, 48});
  Tensor first = video.t.slice(2, 0, 1);
  be->copy(*frame0, first);
  const std::vector<float> fp32 = testing::to_f32(*want);
  const double ref_err = testing::rel_l2(testing::to_f32(*ref_bf16), fp32);
  const std::vector<float> bf16 = encode(*be, store->root(), Precision::BF16, video.t);
  const std::vector<float> int8 = encode(*be, store->root(), Precision::INT8, video.t);
  ASSERT_EQ(bf16.size(), fp32.size());
  ASSERT_EQ(int8.size(), fp32.size());
  const double bf16_err = testing::rel_l2(bf16, fp32), int8_err = testing::rel_l2(int8, fp32);
  std::printf("  latents rel L2 vs fp32: reference bf16 %.4f, bf16 %.4f, int8 %.4f\n", ref_err,
              bf16_err, int8_err);
  EXPECT_LE(int8_err, kEncoderGoldenMaxRatio * ref_err);
}

INSTANTIATE_TEST_SUITE_P(Backends, WanVaeEncoderInt8Golden, ::testing::Values("ref", "cpu"),
                         [](const auto& info) { return std::string(info.param); });

TEST(WanVaeEncoderInt8, FullWidthLatentsCloseToFp32) {
  // The real widths (96-384 channels, synthetic weights): an image then 4
  // zero frames at 64x96, every layer kind and the temporal caches. Oracle:
  // the fp32 encoder; the BF16 encoder's distance from it is printed beside.
  if (!cpu::cpu_supports(Precision::INT8)) GTEST_SKIP() << "INT8 needs AVX-512 VNNI or AMX";
  Expected<WeightStore> store = wan_vae::make_synthetic_wan_vae(96, 7);
  ASSERT_TRUE(store.ok()) << store.status().message();
  std::unique_ptr<Backend> be = make_cpu_backend();
  OwnedTensor video(DType::F32, Shape{1, 3, 5, 64, 96});
  std::fill_n(video.t.ptr<float>(), video.t.numel(), 0.f);
  uint32_t state = 9;
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t i = 0; i < 64 * 96; ++i) {
      state = state * 1664525u + 1013904223u;
      video.t.ptr<float>()[c * 5 * 64 * 96 + i] = static_cast<float>(state >> 8) * 0x1p-23f - 1.f;
    }
  const std::vector<float> fp32 = encode(*be, store->root(), Precision::F32, video.t);
  const std::vector<float> bf16 = encode(*be, store->root(), Precision::BF16, video.t);
  const std::vector<float> int8 = encode(*be, store->root(), Precision::INT8, video.t);
  ASSERT_EQ(fp32.size(), size_t{16 * 2 * 8 * 12});
  ASSERT_EQ(bf16.size(), fp32.size());
  ASSERT_EQ(int8.size(), fp32.size());
  const double bf16_err = testing::rel_l2(bf16, fp32), int8_err = testing::rel_l2(int8, fp32);
  std::printf("  full-width latents rel L2 vs fp32: bf16 %.4f, int8 %.4f\n", bf16_err, int8_err);
  EXPECT_LE(int8_err, kEncoderFullWidthMaxRelL2);
}

class WanVaeInt8Pipeline : public ::testing::TestWithParam<Mg2ModeSpec> {};

TEST_P(WanVaeInt8Pipeline, GoldenJobVideoCloseToBf16Vae) {
  // The whole golden job of each mode (tiny models) with vae_precision
  // "int8" - the conditioning encode and the decode - against the same job
  // with the BF16 VAE: PSNR of the u8 frames. The tiny VAE's 2-8 channel RMS
  // norms amplify every rounding (its decoder alone: kGoldenMinDb). The
  // conditioning latents ("img_cond") must differ from the BF16 encoder's
  // (the INT8 encoder ran: the video bound alone would also pass with the
  // decoder INT8 and the encoder BF16) and stay within
  // kPipelineCondMaxRelL2 of them.
  if (!cpu::cpu_supports(Precision::INT8)) GTEST_SKIP() << "INT8 needs AVX-512 VNNI or AMX";
  const Mg2ModeSpec& mode = GetParam();
  std::unique_ptr<Backend> be = make_cpu_backend();
  const std::string golden = std::string(FLICK_TEST_DATA) + "/mg2";
  std::vector<float> cond[2];
  auto tap_cond = [&](int i) {
    return [&cond, i](std::string_view name, const Tensor& t) {
      if (name == "img_cond") cond[i] = testing::to_f32(t);
    };
  };
  auto bf16 = bench::mg2_pipeline_video(golden, golden + "/weights", mode, Precision::BF16, *be,
                                        Precision::BF16, tap_cond(0));
  ASSERT_TRUE(bf16.ok()) << bf16.status().message();
  auto int8 = bench::mg2_pipeline_video(golden, golden + "/weights", mode, Precision::BF16, *be,
                                        Precision::INT8, tap_cond(1));
  ASSERT_TRUE(int8.ok()) << int8.status().message();
  ASSERT_EQ(bf16->size(), int8->size());
  ASSERT_FALSE(cond[0].empty());
  ASSERT_EQ(cond[0].size(), cond[1].size());
  const double db = bench::psnr_u8(*bf16, *int8);
  const double cond_err = testing::rel_l2(cond[1], cond[0]);
  std::printf("  %s: video PSNR, INT8 VAE vs BF16 VAE: %.2f dB; img_cond rel L2 %.4f\n",
              mode.name.data(), db, cond_err);
  EXPECT_GE(db, kPipelineMinDb);
  EXPECT_GT(cond_err, 0.0);
  EXPECT_LE(cond_err, kPipelineCondMaxRelL2);
}

INSTANTIATE_TEST_SUITE_P(Modes, WanVaeInt8Pipeline, ::testing::ValuesIn(mg2_modes()),
                         [](const ::testing::TestParamInfo<Mg2ModeSpec>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace flick
