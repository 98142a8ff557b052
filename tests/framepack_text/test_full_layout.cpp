// Full-size checkpoints in the released layouts (key / shape tables from
// tools/framepack_text_goldens.py: transformers' CLIPTextModel (CLIP-L) and
// SiglipVisionModel (so400m-patch14-384) built on the meta device), written
// as zero-filled fp16 safetensors (sparse, instant) with the released
// config.json values: the config detection reads the released shapes, and a
// missing or mis-shaped tensor is an error naming it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/clip/clip_text_model.h"
#include "models/pipelines/mg2_synth.h"
#include "models/siglip/siglip_vision.h"
#include "runtime/weights/weight_store.h"

namespace flick {
namespace {

namespace fs = std::filesystem;

const std::string kData = std::string(FLICK_TEST_DATA) + "/framepack_text/";

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "flick-fp-text-XXXXXX").string();
    EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& rel) const { return (fs::path(path_) / rel).string(); }

 private:
  std::string path_;
};

// The table of one model, optionally without one tensor or with one reshaped.
std::vector<LayoutTensor> layout(const std::string& model, const std::string& drop = "",
                                 const std::string& reshape = "",
                                 const std::vector<int64_t>& shape = {}) {
  std::ifstream f(kData + "layout.json");
  const nlohmann::json table = nlohmann::json::parse(f)[model];
  std::vector<LayoutTensor> out;
  for (auto it = table.begin(); it != table.end(); ++it) {
    if (it.key() == drop) continue;
    LayoutTensor& t = out.emplace_back();
    t.name = it.key();
    t.dtype = DType::F16;  // the released files are fp16
    t.shape = it.key() == reshape ? shape : it.value().get<std::vector<int64_t>>();
  }
  return out;
}

Expected<WeightStore> write(const TempDir& dir, const std::string& name,
                            const std::vector<LayoutTensor>& tensors) {
  FLICK_TRY(write_synth_checkpoint(dir.file(name), tensors, 0, SynthFill::kZeros));
  return WeightStore::open({dir.file(name)});
}

// hunyuanvideo-community/HunyuanVideo text_encoder_2/config.json's keys no
// shape carries (openai/clip-vit-large-patch14's text config).
std::string clip_config(const TempDir& dir) {
  const std::string path = dir.file("clip_config.json");
  std::ofstream(path) << R"({"architectures": ["CLIPTextModel"], "hidden_act": "quick_gelu",
    "hidden_size": 768, "intermediate_size": 3072, "layer_norm_eps": 1e-05,
    "max_position_embeddings": 77, "num_attention_heads": 12, "num_hidden_layers": 12,
    "bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1, "vocab_size": 49408})";
  return path;
}

// lllyasviel/flux_redux_bfl image_encoder/config.json (so400m-patch14-384).
std::string siglip_config(const TempDir& dir) {
  const std::string path = dir.file("siglip_config.json");
  std::ofstream(path)
      << R"({"architectures": ["SiglipVisionModel"], "hidden_act": "gelu_pytorch_tanh",
    "hidden_size": 1152, "image_size": 384, "intermediate_size": 4304, "layer_norm_eps": 1e-06,
    "num_attention_heads": 16, "num_channels": 3, "num_hidden_layers": 27, "patch_size": 14})";
  return path;
}

TEST(FramePackFullLayout, ClipLDetectedFromTheReleasedShapes) {
  TempDir dir;
  Expected<WeightStore> store = write(dir, "clip.safetensors", layout("clip_l"));
  ASSERT_TRUE(store.ok()) << store.status().message();
  Expected<clip::ClipTextConfig> c =
      clip::ClipTextConfig::detect(clip::clip_text_model_view(*store), clip_config(dir));
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->vocab, 49408);
  EXPECT_EQ(c->width, 768);
  EXPECT_EQ(c->positions, 77);
  EXPECT_EQ(c->layers, 12);
  EXPECT_EQ(c->heads, 12);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->intermediate, 3072);
  EXPECT_TRUE(c->quick_gelu);
  EXPECT_EQ(c->eos_token_id, 2);

  // A tensor missing from layer 0 (the loader fails before packing much).
  Expected<WeightStore> missing =
      write(dir, "missing.safetensors",
            layout("clip_l", "text_model.encoder.layers.0.self_attn.k_proj.weight"));
  ASSERT_TRUE(missing.ok());
  std::unique_ptr<Backend> backend = make_ref_backend();
  Expected<clip::ClipTextModel> m =
      clip::ClipTextModel::load(clip::clip_text_model_view(*missing), *c, *backend, Precision::F32);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("text_model.encoder.layers.0.self_attn.k_proj.weight"),
            std::string::npos)
      << m.status().message();
  // A mis-shaped position table: detection names it.
  Expected<WeightStore> bad =
      write(dir, "bad.safetensors",
            layout("clip_l", "", "text_model.embeddings.position_embedding.weight", {77, 512}));
  ASSERT_TRUE(bad.ok());
  Expected<clip::ClipTextConfig> bc =
      clip::ClipTextConfig::detect(clip::clip_text_model_view(*bad), clip_config(dir));
  ASSERT_FALSE(bc.ok());
  EXPECT_NE(bc.status().message().find("text_model.embeddings.position_embedding.weight"),
            std::string::npos)
      << bc.status().message();
}

TEST(FramePackFullLayout, SiglipSo400mDetectedFromTheReleasedShapes) {
  TempDir dir;
  Expected<WeightStore> store = write(dir, "siglip.safetensors", layout("siglip_so400m"));
  ASSERT_TRUE(store.ok()) << store.status().message();
  Expected<siglip::SiglipVisionConfig> c = siglip::SiglipVisionConfig::detect(
      siglip::siglip_vision_model_view(*store), siglip_config(dir));
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->width, 1152);
  EXPECT_EQ(c->layers, 27);
  EXPECT_EQ(c->heads, 16);
  EXPECT_EQ(c->head_dim, 72);
  EXPECT_EQ(c->intermediate, 4304);
  EXPECT_EQ(c->patch, 14);
  EXPECT_EQ(c->grid, 27);
  EXPECT_EQ(c->tokens(), 729);
  EXPECT_TRUE(c->gelu_tanh);
  EXPECT_EQ(c->eps, 1e-6f);

  Expected<WeightStore> missing =
      write(dir, "missing.safetensors",
            layout("siglip_so400m", "vision_model.encoder.layers.0.mlp.fc1.bias"));
  ASSERT_TRUE(missing.ok());
  std::unique_ptr<Backend> backend = make_ref_backend();
  Expected<siglip::SiglipVision> m = siglip::SiglipVision::load(
      siglip::siglip_vision_model_view(*missing), *c, *backend, Precision::F32);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("vision_model.encoder.layers.0.mlp.fc1.bias"),
            std::string::npos)
      << m.status().message();
  Expected<WeightStore> bad =
      write(dir, "bad.safetensors",
            layout("siglip_so400m", "", "vision_model.embeddings.patch_embedding.weight",
                   {1152, 3, 16, 16}));
  ASSERT_TRUE(bad.ok());
  Expected<siglip::SiglipVisionConfig> bc = siglip::SiglipVisionConfig::detect(
      siglip::siglip_vision_model_view(*bad), siglip_config(dir));
  ASSERT_FALSE(bc.ok());  // (384 / 16)^2 = 576 patches, the file has 729 positions
  EXPECT_NE(bc.status().message().find("vision_model.embeddings.position_embedding.weight"),
            std::string::npos)
      << bc.status().message();
}

}  // namespace
}  // namespace flick
