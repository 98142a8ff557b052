// FramePack's SigLIP vision tower (models/siglip/siglip_vision) against a tiny
// transformers 4.46.2 SiglipVisionModel (tools/framepack_text_goldens.py: 384
// px, patch 14 -> 27 x 27 tokens with the last 6 pixel rows / cols unused, 2
// layers, width 32, 2 heads, gelu_pytorch_tanh, fp16 weights with the
// attention-pooling head, as image_encoder ships), fed by
// SiglipImageProcessor with FLUX.1-Redux's settings. fp32 and bf16, ref and
// CPU backends; Pillow's resampler (the processor's BICUBIC resize).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/siglip/pil_resample.h"
#include "models/siglip/siglip_vision.h"
#include "runtime/weights/weight_store.h"
#include "tests/models/golden_compare.h"

namespace flick::siglip {
namespace {

const std::string kData = std::string(FLICK_TEST_DATA) + "/framepack_text/";
const std::string kWeights = kData + "image_encoder/";

using testing::rel_l2;
using testing::to_f32;

// The goldens' test image (tools/framepack_text_goldens.py test_image), RGB [h, w, 3].
std::vector<uint8_t> test_image(int w = 384, int h = 384) {
  std::vector<uint8_t> img(static_cast<size_t>(w * h * 3));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        img[(y * w + x) * 3 + c] =
            static_cast<uint8_t>((x * 7 + y * 13 + c * 29 + (x * y) % 37) % 256);
  return img;
}

std::string fnv1a(const std::vector<uint8_t>& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

nlohmann::json manifest() {
  std::ifstream f(kData + "manifest.json");
  return nlohmann::json::parse(f);
}

// Pillow's Image.resize, both filters, downscale / upscale / one axis / both,
// and FramePack's bucket-to-384 BICUBIC: the output bytes' FNV-1a hash.
TEST(PilResample, BitExactWithPillow) {
  const nlohmann::json cases = manifest()["pil_resize_fnv1a64"];
  ASSERT_EQ(cases.size(), 8u);
  for (auto it = cases.begin(); it != cases.end(); ++it) {
    const std::string name = it.key();
    int w, h, ow, oh;
    char filter[16];
    if (name.rfind("bucket_", 0) == 0) {
      w = 640, h = 608, ow = oh = 384;
      std::snprintf(filter, sizeof filter, "bicubic");
    } else {
      ASSERT_EQ(std::sscanf(name.c_str(), "%15[a-z]_%dx%d_to_%dx%d", filter, &w, &h, &ow, &oh), 5)
          << name;
    }
    const PilFilter f = std::string(filter) == "bicubic" ? PilFilter::Bicubic : PilFilter::Lanczos;
    Expected<std::vector<uint8_t>> out = pil_resize_rgb(test_image(w, h), w, h, ow, oh, f);
    ASSERT_TRUE(out.ok()) << out.status().message();
    ASSERT_EQ(out->size(), static_cast<size_t>(ow * oh * 3)) << name;
    EXPECT_EQ(fnv1a(*out), it.value().get<std::string>()) << name;
  }
  // Same size: a copy; bad sizes: named errors.
  const std::vector<uint8_t> img = test_image(5, 4);
  EXPECT_EQ(*pil_resize_rgb(img, 5, 4, 5, 4, PilFilter::Lanczos), img);
  EXPECT_FALSE(pil_resize_rgb(img, 5, 5, 3, 3, PilFilter::Bicubic).ok());
  EXPECT_FALSE(pil_resize_rgb(img, 5, 4, 0, 3, PilFilter::Bicubic).ok());
}

// Every uint8 value through the processor's rescale + normalise, bit for bit.
TEST(SiglipPreprocess, BitExactWithSiglipImageProcessor) {
  Expected<WeightStore> golden = WeightStore::open({kData + "goldens.safetensors"});
  ASSERT_TRUE(golden.ok()) << golden.status().message();
  const Tensor lut = *golden->get("siglip.lut");  // [256]
  std::vector<uint8_t> ramp(256 * 3);
  for (int i = 0; i < 256; ++i) ramp[i * 3] = ramp[i * 3 + 1] = ramp[i * 3 + 2] = uint8_t(i);
  OwnedTensor px(DType::F32, Shape{1, 3, 16, 16});
  ASSERT_TRUE(siglip_preprocess(ramp.data(), 16, 16, px.t).ok());
  int mismatches = 0;
  for (int i = 0; i < 256; ++i)
    for (int c = 0; c < 3; ++c)
      mismatches += std::memcmp(&px.t.ptr<float>()[c * 256 + i], &lut.ptr<float>()[i], 4) != 0;
  EXPECT_EQ(mismatches, 0);
  // The model's input: every 48th row of the reference's pixel_values, bit for bit.
  const std::vector<uint8_t> img = test_image();
  OwnedTensor pixels(DType::F32, Shape{1, 3, 384, 384});
  ASSERT_TRUE(siglip_preprocess(img.data(), 384, 384, pixels.t).ok());
  const Tensor rows = *golden->get("siglip.pixel_rows");  // [3, 8, 384]
  ASSERT_EQ(rows.shape, Shape({3, 8, 384}));
  for (int c = 0; c < 3; ++c)
    for (int r = 0; r < 8; ++r)
      mismatches += std::memcmp(pixels.t.ptr<float>() + (c * 384 + r * 48) * 384,
                                rows.ptr<float>() + (c * 8 + r) * 384, 384 * 4) != 0;
  EXPECT_EQ(mismatches, 0);
  OwnedTensor wrong(DType::F32, Shape{1, 3, 16, 15});
  EXPECT_FALSE(siglip_preprocess(ramp.data(), 16, 16, wrong.t).ok());
}

struct Case {
  const char* backend;
  Precision precision;
};

class SiglipGolden : public ::testing::TestWithParam<Case> {};

// Tolerances (relative L2 per tensor; 2 layers):
//  fp32: the reference's arithmetic up to the summation order of the patch
//        GEMM (588 products), attention (729 keys) and LayerNorm: 1e-5.
//  bf16: tensors rounded where the reference's are, summation orders differ,
//        and a 1-ulp (2^-9) flip propagates: bound 2e-2, and closer to the
//        reference's bf16 run than the reference's own fp32 run is.
TEST_P(SiglipGolden, MatchesTransformersLastHiddenState) {
  const Case c = GetParam();
  const bool bf16 = c.precision == Precision::BF16;
  const std::string tag = bf16 ? "siglip.bf16." : "siglip.fp32.";
  const double bound = bf16 ? 2e-2 : 1e-5;
  Expected<WeightStore> store = WeightStore::open({kWeights + "model.safetensors"});
  ASSERT_TRUE(store.ok()) << store.status().message();
  Expected<WeightStore> golden = WeightStore::open({kData + "goldens.safetensors"});
  ASSERT_TRUE(golden.ok()) << golden.status().message();
  const WeightView vm = siglip_vision_model_view(*store);
  Expected<SiglipVisionConfig> cfg = SiglipVisionConfig::detect(vm, kWeights + "config.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->width, 32);
  EXPECT_EQ(cfg->layers, 2);
  EXPECT_EQ(cfg->heads, 2);
  EXPECT_EQ(cfg->intermediate, 48);
  EXPECT_EQ(cfg->patch, 14);
  EXPECT_EQ(cfg->grid, 27);
  EXPECT_EQ(cfg->image_size, 384);
  EXPECT_TRUE(cfg->gelu_tanh);
  EXPECT_EQ(cfg->eps, 1e-6f);

  std::unique_ptr<Backend> backend =
      std::string(c.backend) == "ref" ? make_ref_backend() : make_cpu_backend();
  Expected<SiglipVision> model = SiglipVision::load(vm, *cfg, *backend, c.precision);
  ASSERT_TRUE(model.ok()) << model.status().message();
  // Everything is read or a known extra (the pooling head).
  EXPECT_TRUE(store->root().check_all_used().ok()) << store->root().check_all_used().message();

  const std::vector<uint8_t> img = test_image();
  std::map<std::string, std::vector<float>> taps;
  Expected<Tensor> out = model->forward_rgb(
      img.data(), 384, 384,
      [&](std::string_view name, const Tensor& t) { taps[std::string(name)] = to_f32(t); });
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->shape, Shape({1, 729, 32}));
  EXPECT_EQ(out->dtype, bf16 ? DType::BF16 : DType::F32);
  const double e0 = rel_l2(taps["layer0"], to_f32(*golden->get(tag + "layer0")));
  const std::vector<float> got = to_f32(*out);
  const double e = rel_l2(got, to_f32(*golden->get(tag + "last_hidden")));
  const double ref_gap = rel_l2(to_f32(*golden->get("siglip.bf16.last_hidden")),
                                to_f32(*golden->get("siglip.fp32.last_hidden")));
  std::printf("  layer0 rel_l2 %.3g, last_hidden rel_l2 %.3g  (reference bf16 vs fp32: %.3g)\n", e0,
              e, ref_gap);
  EXPECT_LE(e0, bound);
  EXPECT_LE(e, bound);
  if (bf16) {
    EXPECT_LT(e, ref_gap);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, SiglipGolden,
                         ::testing::Values(Case{"ref", Precision::F32}, Case{"cpu", Precision::F32},
                                           Case{"ref", Precision::BF16},
                                           Case{"cpu", Precision::BF16}),
                         [](const auto& info) {
                           return std::string(info.param.backend) + "_" +
                                  precision_name(info.param.precision);
                         });

// The ignored border really is ignored: changing the last 6 rows / columns
// of pixels does not change the output; changing pixel (377, 377) does.
TEST(SiglipVision, ValidConvIgnoresTheLastSixRowsAndColumns) {
  Expected<WeightStore> store = WeightStore::open({kWeights + "model.safetensors"});
  ASSERT_TRUE(store.ok());
  const WeightView vm = siglip_vision_model_view(*store);
  Expected<SiglipVisionConfig> cfg = SiglipVisionConfig::detect(vm, kWeights + "config.json");
  ASSERT_TRUE(cfg.ok());
  std::unique_ptr<Backend> backend = make_cpu_backend();
  Expected<SiglipVision> model = SiglipVision::load(vm, *cfg, *backend, Precision::F32);
  ASSERT_TRUE(model.ok());
  std::vector<uint8_t> img = test_image();
  const std::vector<float> base = to_f32(*model->forward_rgb(img.data(), 384, 384));
  for (int y = 0; y < 384; ++y)
    for (int x = 378; x < 384; ++x)
      img[(y * 384 + x) * 3] ^= 0x5a, img[(x * 384 + y) * 3 + 1] ^= 0x33;
  EXPECT_EQ(to_f32(*model->forward_rgb(img.data(), 384, 384)), base);
  img[(377 * 384 + 377) * 3] ^= 0x80;
  EXPECT_NE(to_f32(*model->forward_rgb(img.data(), 384, 384)), base);
}

// FramePack's actual input: the bucket image (608 x 640) through the whole
// processor (PIL BICUBIC to 384 included) and the tower, fp32 (1e-5 as above).
TEST(SiglipVision, BucketImageThroughTheWholeProcessor) {
  Expected<WeightStore> store = WeightStore::open({kWeights + "model.safetensors"});
  ASSERT_TRUE(store.ok());
  Expected<WeightStore> golden = WeightStore::open({kData + "goldens.safetensors"});
  ASSERT_TRUE(golden.ok());
  const WeightView vm = siglip_vision_model_view(*store);
  Expected<SiglipVisionConfig> cfg = SiglipVisionConfig::detect(vm, kWeights + "config.json");
  ASSERT_TRUE(cfg.ok());
  for (const char* be : {"ref", "cpu"}) {
    std::unique_ptr<Backend> backend =
        std::string(be) == "ref" ? make_ref_backend() : make_cpu_backend();
    Expected<SiglipVision> model = SiglipVision::load(vm, *cfg, *backend, Precision::F32);
    ASSERT_TRUE(model.ok());
    const std::vector<uint8_t> img = test_image(640, 608);
    Expected<Tensor> out = model->forward_rgb(img.data(), 608, 640);
    ASSERT_TRUE(out.ok()) << out.status().message();
    const double e = rel_l2(to_f32(*out), to_f32(*golden->get("siglip.fp32.bucket_last_hidden")));
    std::printf("  %s: bucket 608x640 last_hidden rel_l2 %.3g\n", be, e);
    EXPECT_LE(e, 1e-5) << be;
  }
}

TEST(SiglipVision, ConfigMismatchesAndMissingTensorsAreNamed) {
  Expected<WeightStore> store = WeightStore::open({kWeights + "model.safetensors"});
  ASSERT_TRUE(store.ok());
  const WeightView vm = siglip_vision_model_view(*store);
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("flick_siglip_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ifstream in(kWeights + "config.json");
  const nlohmann::json base = nlohmann::json::parse(in);
  auto detect_with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = base;
    edit(j);
    std::ofstream(dir / "config.json") << j.dump();
    return SiglipVisionConfig::detect(vm, (dir / "config.json").string());
  };
  auto expect_error = [](const Expected<SiglipVisionConfig>& e, const std::string& needle) {
    ASSERT_FALSE(e.ok()) << needle;
    EXPECT_NE(e.status().message().find(needle), std::string::npos) << e.status().message();
  };
  expect_error(detect_with([](auto& j) { j["image_size"] = 224; }), "position_embedding.weight");
  expect_error(detect_with([](auto& j) { j["num_hidden_layers"] = 27; }), "num_hidden_layers");
  expect_error(detect_with([](auto& j) { j["num_attention_heads"] = 5; }), "num_attention_heads");
  expect_error(detect_with([](auto& j) { j["hidden_act"] = "quick_gelu"; }), "hidden_act");
  fs::remove_all(dir);

  // A config for more layers than the file has: the loader names the tensor.
  Expected<SiglipVisionConfig> cfg = SiglipVisionConfig::detect(vm, kWeights + "config.json");
  ASSERT_TRUE(cfg.ok());
  SiglipVisionConfig more = *cfg;
  more.layers = 3;
  std::unique_ptr<Backend> backend = make_ref_backend();
  Expected<SiglipVision> m = SiglipVision::load(vm, more, *backend, Precision::F32);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("vision_model.encoder.layers.2.layer_norm1.weight"),
            std::string::npos)
      << m.status().message();
}

// The full-size so400m-patch14-384 layout (transformers' SiglipVisionModel on
// the meta device) is the tiny file's key set with 27 layers.
TEST(SiglipVision, FullSizeLayoutMatchesTheTinyFilesKeys) {
  std::ifstream f(kData + "layout.json");
  const nlohmann::json full = nlohmann::json::parse(f)["siglip_so400m"];
  Expected<WeightStore> store = WeightStore::open({kWeights + "model.safetensors"});
  ASSERT_TRUE(store.ok());
  std::vector<std::string> tiny;
  for (const std::string& key : store->names()) {
    const size_t at = key.find(".layers.");
    if (at == std::string::npos) {
      tiny.push_back(key);
    } else if (key.compare(at + 8, 2, "0.") == 0) {  // layer 0's keys, for every layer
      for (int i = 0; i < 27; ++i)
        tiny.push_back(key.substr(0, at + 8) + std::to_string(i) + key.substr(at + 9));
    }
  }
  std::vector<std::string> keys;
  for (auto it = full.begin(); it != full.end(); ++it) keys.push_back(it.key());
  std::sort(keys.begin(), keys.end());
  std::sort(tiny.begin(), tiny.end());
  EXPECT_EQ(keys, tiny);
  EXPECT_EQ(full["vision_model.embeddings.patch_embedding.weight"],
            nlohmann::json({1152, 3, 14, 14}));
  EXPECT_EQ(full["vision_model.embeddings.position_embedding.weight"], nlohmann::json({729, 1152}));
  EXPECT_EQ(full["vision_model.encoder.layers.26.mlp.fc1.weight"], nlohmann::json({4304, 1152}));
  EXPECT_TRUE(full.contains("vision_model.head.probe"));  // present, skipped by the loader
}

}  // namespace
}  // namespace flick::siglip
