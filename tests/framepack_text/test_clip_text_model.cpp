// FramePack's CLIP-L text model (models/clip/clip_text_model) against a tiny
// transformers 4.46.2 CLIPTextModel (tools/framepack_text_goldens.py: 3
// layers, width 32, 2 heads, quick_gelu, legacy eos_token_id 2, fp16 weights
// with their config.json, as text_encoder_2 ships), run on the fixture CLIP
// vocabulary end to end: prompt -> ClipTokenizer (77, padded / truncated) ->
// model -> pooler_output. fp32 and bf16, ref and CPU backends.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/clip/clip_text_model.h"
#include "models/clip/clip_tokenizer.h"
#include "runtime/weights/weight_store.h"
#include "tests/models/golden_compare.h"

namespace flick::clip {
namespace {

const std::string kData = std::string(FLICK_TEST_DATA) + "/framepack_text/";
const std::string kWeights = kData + "text_encoder_2/";

using testing::rel_l2;
using testing::to_f32;

nlohmann::json manifest() {
  std::ifstream f(kData + "manifest.json");
  return nlohmann::json::parse(f);
}

std::vector<float> row(const std::vector<float>& all, int64_t index, int64_t size) {
  return {all.begin() + index * size, all.begin() + (index + 1) * size};
}

TEST(ClipTextPooling, FirstEosByEitherRule) {
  // Legacy eos_token_id 2: argmax of the ids, the first of equal maxima.
  const std::vector<int32_t> ids{49406, 320, 1125, 49407, 49407, 49407};
  EXPECT_EQ(clip_pooled_index(ids, 2), 3);
  EXPECT_EQ(clip_pooled_index(ids, 49407), 3);
  // A later, larger id moves the legacy pick; the id search does not move.
  const std::vector<int32_t> odd{49406, 320, 49407, 49410, 49407};
  EXPECT_EQ(clip_pooled_index(odd, 2), 3);
  EXPECT_EQ(clip_pooled_index(odd, 49407), 2);
  // No EOS: argmax of all-false is 0.
  EXPECT_EQ(clip_pooled_index(std::vector<int32_t>{5, 6, 7}, 49407), 0);
}

struct Case {
  const char* backend;
  Precision precision;
};

class ClipTextGolden : public ::testing::TestWithParam<Case> {};

// Tolerances (relative L2 per tensor; 3 layers):
//  fp32: the reference's arithmetic up to the summation order of GEMMs,
//        attention and LayerNorm statistics (a few fp32 ulps per op): 1e-5.
//  bf16: every tensor rounded where the reference's is, but GEMM and
//        attention summation orders differ and a 1-ulp (2^-9) flip in a
//        stored bf16 value propagates: bound 2e-2, and every compared tensor
//        must also be closer to the reference's bf16 run than the
//        reference's own fp32 run is (printed beside).
TEST_P(ClipTextGolden, TokenizerAndModelMatchTransformersPooledOutput) {
  const Case c = GetParam();
  const bool bf16 = c.precision == Precision::BF16;
  const std::string tag = bf16 ? "clip.bf16." : "clip.fp32.";
  const double bound = bf16 ? 2e-2 : 1e-5;
  Expected<WeightStore> store = WeightStore::open({kWeights + "model.safetensors"});
  ASSERT_TRUE(store.ok()) << store.status().message();
  Expected<WeightStore> golden = WeightStore::open({kData + "goldens.safetensors"});
  ASSERT_TRUE(golden.ok()) << golden.status().message();
  const WeightView tm = clip_text_model_view(*store);
  Expected<ClipTextConfig> cfg = ClipTextConfig::detect(tm, kWeights + "config.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->vocab, 3514);
  EXPECT_EQ(cfg->width, 32);
  EXPECT_EQ(cfg->positions, 77);
  EXPECT_EQ(cfg->layers, 3);
  EXPECT_EQ(cfg->heads, 2);
  EXPECT_EQ(cfg->intermediate, 64);
  EXPECT_TRUE(cfg->quick_gelu);
  EXPECT_EQ(cfg->eos_token_id, 2);

  std::unique_ptr<Backend> backend =
      std::string(c.backend) == "ref" ? make_ref_backend() : make_cpu_backend();
  Expected<ClipTextModel> model = ClipTextModel::load(tm, *cfg, *backend, c.precision);
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_TRUE(store->root().check_all_used().ok()) << store->root().check_all_used().message();

  Expected<ClipTokenizer> tok =
      ClipTokenizer::load_hf(std::string(FLICK_TEST_DATA) + "/clip_tokenizer/vocab.json",
                             std::string(FLICK_TEST_DATA) + "/clip_tokenizer/merges.txt");
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const Tensor ref_ids = *golden->get("clip.input_ids");  // [P, 77]
  const std::vector<std::string> prompts = manifest()["prompts"];
  ASSERT_EQ(static_cast<int64_t>(prompts.size()), ref_ids.dim(0));
  const std::vector<float> want_pooled = to_f32(*golden->get(tag + "pooled"));
  const std::vector<float> want_last = to_f32(*golden->get(tag + "last_hidden"));
  const std::vector<float> bf_pooled = to_f32(*golden->get("clip.bf16.pooled"));
  const std::vector<float> f32_pooled = to_f32(*golden->get("clip.fp32.pooled"));
  const int64_t w = 32, l = 77;
  for (size_t p = 0; p < prompts.size(); ++p) {
    // The tokenizer as FramePack calls tokenizer_2: 77 ids, padded / truncated.
    Expected<std::vector<int32_t>> ids = tok->encode_padded(prompts[p], 77);
    ASSERT_TRUE(ids.ok()) << ids.status().message();
    for (int64_t i = 0; i < l; ++i)
      ASSERT_EQ((*ids)[static_cast<size_t>(i)], ref_ids.ptr<int32_t>()[p * l + i]) << p << " " << i;

    std::map<std::string, std::vector<float>> taps;
    Expected<ClipTextModel::Output> out = model->forward(
        *ids, [&](std::string_view name, const Tensor& t) { taps[std::string(name)] = to_f32(t); });
    ASSERT_TRUE(out.ok()) << out.status().message();
    ASSERT_EQ(out->pooled.shape, Shape({1, w}));
    ASSERT_EQ(out->last_hidden.shape, Shape({1, l, w}));
    for (int64_t i = 0; i < cfg->layers; ++i) {
      const std::string name = "layer" + std::to_string(i);
      const double e = rel_l2(taps[name], row(to_f32(*golden->get(tag + name)), p, l * w));
      std::printf("  prompt %zu %-8s rel_l2 %.3g\n", p, name.c_str(), e);
      EXPECT_LE(e, bound) << p << " " << name;
    }
    EXPECT_LE(rel_l2(to_f32(out->last_hidden), row(want_last, p, l * w)), bound) << p;
    const double e = rel_l2(to_f32(out->pooled), row(want_pooled, p, w));
    const double ref_gap = rel_l2(row(bf_pooled, p, w), row(f32_pooled, p, w));
    std::printf("  prompt %zu pooled (row %lld) rel_l2 %.3g  (reference bf16 vs fp32: %.3g)\n", p,
                static_cast<long long>(out->pooled_index), e, ref_gap);
    EXPECT_LE(e, bound) << p;
    if (bf16) {
      EXPECT_LT(e, ref_gap) << p;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ClipTextGolden,
                         ::testing::Values(Case{"ref", Precision::F32}, Case{"cpu", Precision::F32},
                                           Case{"ref", Precision::BF16},
                                           Case{"cpu", Precision::BF16}),
                         [](const auto& info) {
                           return std::string(info.param.backend) + "_" +
                                  precision_name(info.param.precision);
                         });

TEST(ClipTextModel, RejectsBadIdsAndNamesConfigMismatches) {
  Expected<WeightStore> store = WeightStore::open({kWeights + "model.safetensors"});
  ASSERT_TRUE(store.ok());
  const WeightView tm = clip_text_model_view(*store);
  Expected<ClipTextConfig> cfg = ClipTextConfig::detect(tm, kWeights + "config.json");
  ASSERT_TRUE(cfg.ok());
  std::unique_ptr<Backend> backend = make_cpu_backend();
  Expected<ClipTextModel> model = ClipTextModel::load(tm, *cfg, *backend, Precision::F32);
  ASSERT_TRUE(model.ok());
  Expected<ClipTextModel::Output> r = model->forward(std::vector<int32_t>{1, 2, 3514});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("token 2 is id 3514"), std::string::npos)
      << r.status().message();
  EXPECT_FALSE(model->forward(std::vector<int32_t>(78, 1)).ok());
  EXPECT_FALSE(model->forward(std::vector<int32_t>{}).ok());

  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("flick_clip_text_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ifstream in(kWeights + "config.json");
  const nlohmann::json base = nlohmann::json::parse(in);
  auto detect_with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = base;
    edit(j);
    std::ofstream(dir / "config.json") << j.dump();
    return ClipTextConfig::detect(tm, (dir / "config.json").string());
  };
  auto expect_error = [](const Expected<ClipTextConfig>& e, const std::string& needle) {
    ASSERT_FALSE(e.ok()) << needle;
    EXPECT_NE(e.status().message().find(needle), std::string::npos) << e.status().message();
  };
  expect_error(detect_with([](auto& j) { j["hidden_size"] = 64; }), "hidden_size");
  expect_error(detect_with([](auto& j) { j["num_attention_heads"] = 3; }), "num_attention_heads");
  expect_error(detect_with([](auto& j) { j.erase("num_attention_heads"); }), "num_attention_heads");
  expect_error(detect_with([](auto& j) { j["hidden_act"] = "relu"; }), "hidden_act");
  // The nested form of a full CLIPConfig is read too.
  Expected<ClipTextConfig> nested = detect_with([&](auto& j) {
    j = nlohmann::json{{"text_config", base}};
    j["text_config"]["eos_token_id"] = 3513;
  });
  ASSERT_TRUE(nested.ok()) << nested.status().message();
  EXPECT_EQ(nested->eos_token_id, 3513);
  fs::remove_all(dir);
}

// The full-size CLIP-L layout (tools/framepack_text_goldens.py: transformers'
// CLIPTextModel on the meta device, 12 x 768, 49408 ids) holds exactly the
// tiny file's key set with 12 layers, and the shapes the detection expects.
TEST(ClipTextModel, FullSizeLayoutMatchesTheTinyFilesKeys) {
  std::ifstream f(kData + "layout.json");
  const nlohmann::json full = nlohmann::json::parse(f)["clip_l"];
  Expected<WeightStore> store = WeightStore::open({kWeights + "model.safetensors"});
  ASSERT_TRUE(store.ok());
  std::vector<std::string> tiny;
  for (const std::string& n : store->names()) {
    const std::string key = n;
    const size_t at = key.find(".layers.");
    if (at == std::string::npos) {
      tiny.push_back(key);
    } else if (key.compare(at + 8, 2, "0.") == 0) {  // layer 0's keys, for every layer
      const size_t dot = key.find('.', at + 8);
      for (int i = 0; i < 12; ++i)
        tiny.push_back(key.substr(0, at + 8) + std::to_string(i) + key.substr(dot));
    }
  }
  std::vector<std::string> keys;
  for (auto it = full.begin(); it != full.end(); ++it) keys.push_back(it.key());
  std::sort(keys.begin(), keys.end());
  std::sort(tiny.begin(), tiny.end());
  EXPECT_EQ(keys, tiny);
  EXPECT_EQ(full["text_model.embeddings.token_embedding.weight"], nlohmann::json({49408, 768}));
  EXPECT_EQ(full["text_model.embeddings.position_embedding.weight"], nlohmann::json({77, 768}));
  EXPECT_EQ(full["text_model.encoder.layers.11.mlp.fc1.weight"], nlohmann::json({3072, 768}));
}

}  // namespace
}  // namespace flick::clip
