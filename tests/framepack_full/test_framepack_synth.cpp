// Synthetic FramePack weight folders (models/pipelines/framepack_synth.h,
// `flick synth --model framepack`) against layouts made independently of it:
//
//  full size: the key / shape tables the reference classes give on the meta
//    device (tests/data/framepack_dit/full_keys.json: FramePack's
//    HunyuanVideoTransformer3DModelPacked; framepack_full/llama_layout.json:
//    transformers' LlamaModel with HunyuanVideo's text_encoder config;
//    framepack_text/layout.json: CLIP-L, SigLIP so400m; hunyuan_vae/
//    full_layout.json: AutoencoderKLHunyuanVideo). The zero-filled folder
//    (sparse files, ~43 GB apparent, nothing written) is opened as the
//    framepack-i2v kind opens it: the sharded indexes, the configs detected
//    from the shapes plus config.json, the DiT layout check, Kijai's
//    single-file FP8 variant; the VAE, CLIP-L and SigLIP are loaded.
//  tiny size: the committed tiny fixtures (tests/data/framepack_pipeline/
//    weights, written by the reference classes' save_pretrained): every file's
//    names, dtypes and shapes; then the pipeline runs a job on it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/image_preprocess.h"
#include "models/clip/clip_text_model.h"
#include "models/hunyuan/framepack_dit.h"
#include "models/hunyuan_vae/hunyuan_vae.h"
#include "models/pipelines/framepack.h"
#include "models/pipelines/framepack_synth.h"
#include "models/siglip/siglip_vision.h"
#include "runtime/backend.h"
#include "runtime/weights/weight_store.h"
#include "tests/io/collecting_sink.h"
#include "tests/models/golden_compare.h"

namespace flick {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const std::string kData = std::string(FLICK_TEST_DATA) + "/";

Json read_json(const std::string& path) {
  std::ifstream f(path);
  return Json::parse(f);
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "flick-fp-synth-XXXXXX").string();
    EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& rel) const { return (fs::path(path_) / rel).string(); }
  const std::string& str() const { return path_; }

 private:
  std::string path_;
};

// name -> "DTYPE [shape]" of every tensor of an opened store.
std::map<std::string, std::string> described(const WeightStore& s) {
  std::map<std::string, std::string> out;
  for (const std::string& n : s.names()) {
    const TensorInfo* t = s.root().info(n);
    out[n] = std::string(t->type->name) + " " + t->shape_str();
  }
  return out;
}

// name -> "DTYPE [shape]" of a reference table ({name: shape} or [[name, shape], ...]).
std::map<std::string, std::string> described(const Json& table, const std::string& dtype) {
  std::map<std::string, std::string> out;
  auto add = [&](const std::string& n, const Json& shape) {
    out[n] = dtype + " " + shape_str(shape.get<std::vector<int64_t>>());
  };
  if (table.is_array()) {
    for (const Json& k : table) add(k[0].get<std::string>(), k[1]);
  } else {
    for (const auto& [n, shape] : table.items()) add(n, shape);
  }
  return out;
}

// Every difference, one line each (the test prints them all).
std::string diff(const std::map<std::string, std::string>& got,
                 const std::map<std::string, std::string>& want) {
  std::string out;
  for (const auto& [n, d] : want) {
    auto it = got.find(n);
    if (it == got.end())
      out += "  missing " + n + " (" + d + ")\n";
    else if (it->second != d)
      out += "  " + n + ": " + it->second + ", want " + d + "\n";
  }
  for (const auto& [n, d] : got)
    if (!want.count(n)) out += "  unexpected " + n + " (" + d + ")\n";
  return out;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

class FramePackSynthFull : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    FramePackSynthOptions o;
    o.size = FramePackSynthSize::kFull;
    o.fill = SynthFill::kZeros;
    o.tokenizers = std::string(FLICK_TEST_DATA);
    o.parts = {"transformer",   "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2",
               "image_encoder", "vae",          "kijai_fp8"};
    const Status s = write_framepack_synth(dir_->str(), o);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string path(const std::string& rel) { return *dir_ / rel; }
  static TempDir* dir_;
};
TempDir* FramePackSynthFull::dir_ = nullptr;

// The transformer: three 10 GB shards and their index (25.7 GB of BF16, as
// lllyasviel/FramePackI2V_HY), the reference's keys and shapes, the released
// config detected, and the layout check the loader runs first.
TEST_F(FramePackSynthFull, TransformerIsTheReleasedLayout) {
  EXPECT_EQ(
      files_in(path("transformer")),
      (std::vector<std::string>{"config.json", "diffusion_pytorch_model-00001-of-00003.safetensors",
                                "diffusion_pytorch_model-00002-of-00003.safetensors",
                                "diffusion_pytorch_model-00003-of-00003.safetensors",
                                "diffusion_pytorch_model.safetensors.index.json"}));
  const Json index = read_json(path("transformer/diffusion_pytorch_model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>() / 100000000, 257u);  // 25.7 GB
  Expected<hunyuan::FramePackDitFiles> files = hunyuan::framepack_dit_files(path("transformer"));
  ASSERT_TRUE(files.ok()) << files.status().message();
  Expected<WeightStore> store = WeightStore::open({files->weights});
  ASSERT_TRUE(store.ok()) << store.status().message();
  const Json ref = read_json(kData + "framepack_dit/full_keys.json");
  EXPECT_EQ(diff(described(*store), described(ref["keys"], "BF16")), "");
  Expected<hunyuan::FramePackDitConfig> c =
      hunyuan::FramePackDitConfig::detect(store->root(), files->config);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->dim, 3072);
  EXPECT_EQ(c->heads, 24);
  EXPECT_EQ(c->layers, 20);
  EXPECT_EQ(c->single_layers, 40);
  EXPECT_EQ(c->refiner_layers, 2);
  EXPECT_EQ(c->rope_axes, (std::array<int64_t, 3>{16, 56, 56}));
  EXPECT_EQ(c->rope_theta, 256.0);
  // config.json says what the reference's config says (full_keys.json's
  // "config": the class's registered config of the released model).
  const Json cfg = read_json(files->config);
  for (const auto& [k, v] : ref["config"].items()) EXPECT_EQ(cfg[k], v) << k;
  const Status layout = hunyuan::check_framepack_dit_layout(store->root(), *c);
  EXPECT_TRUE(layout.ok()) << layout.message();
}

// Kijai's single file: no config.json, the released config from the shapes,
// F8_E4M3 except norms and biases, the layout check passes.
TEST_F(FramePackSynthFull, KijaiFp8SingleFile) {
  Expected<hunyuan::FramePackDitFiles> files =
      hunyuan::framepack_dit_files(path("FramePackI2V_HY_fp8_e4m3fn.safetensors"));
  ASSERT_TRUE(files.ok()) << files.status().message();
  EXPECT_EQ(files->config, "");
  Expected<WeightStore> store = WeightStore::open({files->weights});
  ASSERT_TRUE(store.ok()) << store.status().message();
  const Json ref = read_json(kData + "framepack_dit/full_keys.json");
  std::map<std::string, std::string> want = described(ref["keys"], "BF16");
  for (auto& [n, d] : want)
    if (n.find("norm") == std::string::npos && n.find("bias") == std::string::npos)
      d.replace(0, 4, "F8_E4M3");
  EXPECT_EQ(diff(described(*store), want), "");
  // 9.5 B of the 12.87 B parameters are 8-bit (the modulation linears' 3.4 B
  // stay BF16): the file is 16.3 GB as Kijai's.
  uint64_t bytes = 0;
  for (const std::string& n : store->names()) bytes += store->root().info(n)->nbytes;
  EXPECT_EQ(bytes / 100000000, 163u);
  Expected<hunyuan::FramePackDitConfig> c =
      hunyuan::FramePackDitConfig::detect(store->root(), files->config);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->layers, 20);
  EXPECT_EQ(c->single_layers, 40);
  const Status layout = hunyuan::check_framepack_dit_layout(store->root(), *c);
  EXPECT_TRUE(layout.ok()) << layout.message();
}

// The LLaMA text encoder: four 5 GB shards (15 GB of F16) and the index, the
// reference LlamaModel's keys, the config detected.
TEST_F(FramePackSynthFull, TextEncoderIsTheReleasedLayout) {
  EXPECT_EQ(files_in(path("text_encoder")),
            (std::vector<std::string>{
                "config.json", "model-00001-of-00004.safetensors",
                "model-00002-of-00004.safetensors", "model-00003-of-00004.safetensors",
                "model-00004-of-00004.safetensors", "model.safetensors.index.json"}));
  Expected<WeightStore> store =
      WeightStore::open({path("text_encoder/model.safetensors.index.json")});
  ASSERT_TRUE(store.ok()) << store.status().message();
  const Json ref = read_json(kData + "framepack_full/llama_layout.json");
  EXPECT_EQ(diff(described(*store), described(ref["keys"], "F16")), "");
  Expected<llama::LlamaConfig> c =
      llama::LlamaConfig::detect(llama::llama_model_view(*store), path("text_encoder/config.json"));
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->vocab, 128320);
  EXPECT_EQ(c->hidden, 4096);
  EXPECT_EQ(c->layers, 32);
  EXPECT_EQ(c->heads, 32);
  EXPECT_EQ(c->kv_heads, 8);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->intermediate, 14336);
  EXPECT_EQ(c->rope_theta, 500000.f);
  const Json cfg = read_json(path("text_encoder/config.json"));
  for (const auto& [k, v] : ref["config"].items()) EXPECT_EQ(cfg[k], v) << k;
}

// CLIP-L, SigLIP and the VAE: the reference tables, then each is loaded in
// BF16 from the files (0.25 + 0.86 + 0.5 GB, one at a time).
TEST_F(FramePackSynthFull, SmallComponentsLoad) {
  std::unique_ptr<Backend> be = make_cpu_backend();
  const Json text = read_json(kData + "framepack_text/layout.json");
  {
    Expected<WeightStore> s = WeightStore::open({path("text_encoder_2/model.safetensors")});
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ(diff(described(*s), described(text["clip_l"], "F16")), "");
    Expected<clip::ClipTextConfig> c = clip::ClipTextConfig::detect(
        clip::clip_text_model_view(*s), path("text_encoder_2/config.json"));
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->width, 768);
    EXPECT_EQ(c->heads, 12);
    Expected<clip::ClipTextModel> m =
        clip::ClipTextModel::load(clip::clip_text_model_view(*s), *c, *be, Precision::BF16);
    EXPECT_TRUE(m.ok()) << m.status().message();
  }
  {
    Expected<WeightStore> s = WeightStore::open({path("image_encoder/model.safetensors")});
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ(diff(described(*s), described(text["siglip_so400m"], "F16")), "");
    Expected<siglip::SiglipVisionConfig> c = siglip::SiglipVisionConfig::detect(
        siglip::siglip_vision_model_view(*s), path("image_encoder/config.json"));
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->width, 1152);
    EXPECT_EQ(c->heads, 16);
    EXPECT_EQ(c->tokens(), 729);
    Expected<siglip::SiglipVision> m =
        siglip::SiglipVision::load(siglip::siglip_vision_model_view(*s), *c, *be, Precision::BF16);
    EXPECT_TRUE(m.ok()) << m.status().message();
  }
  {
    Expected<WeightStore> s = WeightStore::open({path("vae/diffusion_pytorch_model.safetensors")});
    ASSERT_TRUE(s.ok()) << s.status().message();
    const Json vae = read_json(kData + "hunyuan_vae/full_layout.json");
    EXPECT_EQ(diff(described(*s), described(vae["tensors"], "F16")), "");
    Expected<HunyuanVaeConfig> c = HunyuanVaeConfig::detect(s->root(), path("vae/config.json"));
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->block_out_channels, (std::vector<int64_t>{128, 256, 512, 512}));
    EXPECT_EQ(c->norm_groups, 32);
    for (const auto& [k, v] : vae["config"].items())
      EXPECT_EQ(read_json(path("vae/config.json"))[k], v) << k;
    Expected<HunyuanVae> m = HunyuanVae::load(s->root(), *c, *be, Precision::BF16);
    ASSERT_TRUE(m.ok()) << m.status().message();
    EXPECT_TRUE(s->root().check_all_used().ok()) << s->root().check_all_used().message();
  }
  EXPECT_EQ(files_in(path("tokenizer")), std::vector<std::string>{"tokenizer.json"});
  EXPECT_EQ(files_in(path("tokenizer_2")), (std::vector<std::string>{"merges.txt", "vocab.json"}));
}

// --dit-layers: the full width with fewer blocks, one shard, its config
// saying so.
TEST(FramePackSynth, ReducedDepthTransformer) {
  TempDir dir;
  FramePackSynthOptions o;
  o.size = FramePackSynthSize::kFull;
  o.fill = SynthFill::kZeros;
  o.parts = {"transformer"};
  o.dit_layers = 2;
  o.dit_single_layers = 4;
  ASSERT_TRUE(write_framepack_synth(dir.str(), o).ok());
  EXPECT_EQ(files_in(dir / "transformer"),
            (std::vector<std::string>{"config.json", "diffusion_pytorch_model.safetensors"}));
  Expected<WeightStore> s =
      WeightStore::open({dir / "transformer/diffusion_pytorch_model.safetensors"});
  ASSERT_TRUE(s.ok()) << s.status().message();
  Expected<hunyuan::FramePackDitConfig> c =
      hunyuan::FramePackDitConfig::detect(s->root(), dir / "transformer/config.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->dim, 3072);
  EXPECT_EQ(c->layers, 2);
  EXPECT_EQ(c->single_layers, 4);
  EXPECT_TRUE(hunyuan::check_framepack_dit_layout(s->root(), *c).ok());
  // The full table's tensors outside the blocks and in blocks 0-1 / 0-3.
  const Json ref = read_json(kData + "framepack_dit/full_keys.json");
  Json keys = Json::array();
  for (const Json& k : ref["keys"]) {
    const std::string n = k[0];
    auto block = [&](const std::string& prefix, int count) {
      if (n.rfind(prefix, 0) != 0) return true;
      return std::stoi(n.substr(prefix.size())) < count;
    };
    if (block("transformer_blocks.", 2) && block("single_transformer_blocks.", 4))
      keys.push_back(k);
  }
  EXPECT_EQ(diff(described(*s), described(keys, "BF16")), "");

  o.parts = {"vea"};
  const Status bad = write_framepack_synth(dir.str(), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("vea"), std::string::npos) << bad.message();
}

// The tiny size has the committed fixtures' files, names, dtypes and shapes.
TEST(FramePackSynth, TinyMatchesTheFixtures) {
  TempDir dir;
  FramePackSynthOptions o;
  o.tokenizers = std::string(FLICK_TEST_DATA);
  ASSERT_TRUE(write_framepack_synth(dir.str(), o).ok());
  const std::string fixture = kData + "framepack_pipeline/weights/";
  const std::pair<const char*, const char*> parts[] = {{"transformer", "diffusion_pytorch_model"},
                                                       {"text_encoder", "model"},
                                                       {"text_encoder_2", "model"},
                                                       {"vae", "diffusion_pytorch_model"},
                                                       {"image_encoder", "model"}};
  for (const auto& [part, stem] : parts) {
    auto open = [&](const std::string& folder) {
      const std::string index = folder + part + "/" + stem + ".safetensors.index.json";
      return WeightStore::open(
          {fs::exists(index) ? index : folder + part + "/" + stem + ".safetensors"});
    };
    Expected<WeightStore> got = open(dir.str() + "/");
    Expected<WeightStore> want = open(fixture);
    ASSERT_TRUE(got.ok()) << got.status().message();
    ASSERT_TRUE(want.ok()) << want.status().message();
    EXPECT_EQ(diff(described(*got), described(*want)), "") << part;
  }
}

// A job on the tiny synthetic folder: every component loads and runs (one
// section: 36 + 1 = 37 frames at 30 fps), values finite.
TEST(FramePackSynth, TinyFolderRunsAJob) {
  TempDir dir;
  FramePackSynthOptions o;
  o.tokenizers = std::string(FLICK_TEST_DATA);
  o.seed = 3;
  ASSERT_TRUE(write_framepack_synth(dir.str(), o).ok());
  std::unique_ptr<Backend> be = make_cpu_backend();
  FramePackOptions po;
  po.paths.weights = dir.str();
  po.buckets = {{32, 64}};
  Expected<std::unique_ptr<FramePackPipeline>> p = FramePackPipeline::load(po, *be);
  ASSERT_TRUE(p.ok()) << p.status().message();
  Expected<Frame> img = load_image_rgb(kData + "framepack_pipeline/input.png");
  ASSERT_TRUE(img.ok()) << img.status().message();
  FramePackInput in;
  in.image = std::move(*img);
  in.prompt = "a synthetic prompt";
  in.seconds = 1;
  in.steps = 2;
  testing::CollectingSink sink;
  bool finite = true;
  const Status s = (*p)->run(in, sink, RunContext{}, [&](std::string_view name, const Tensor& t) {
    if (name.ends_with(".latents"))
      for (float v : testing::to_f32(t)) finite = finite && std::isfinite(v);
  });
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(finite);
  EXPECT_EQ(sink.frames.size(), 37u);
  EXPECT_EQ(sink.fps, 30.0);
}

}  // namespace
}  // namespace flick
