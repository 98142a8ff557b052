// Synthetic Matrix-Game 2.0 checkpoints (models/pipelines/mg2_synth.h, `flick
// synth`):
//  - the full-size layout equals the key lists of the released files
//    (tests/data/mg2/full_keys.json.gz, derived from the reference classes);
//  - full-size files (zero-filled, so sparse and instant) are recognised by
//    every component's config detection, and a missing, stray or mis-shaped
//    tensor gives exactly one error naming the tensor and the file;
//  - the tiny size loads through the component loaders and the pipeline with
//    the default head sizes, and produces finite, varying outputs;
//  - the values are the documented per-element rule, deterministic in the seed.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/clip/clip_vision.h"
#include "models/pipelines/matrix_game.h"
#include "models/pipelines/mg2_synth.h"
#include "models/wan/wan_action.h"
#include "models/wan/wan_dit.h"
#include "models/wan_vae/wan_vae_decoder.h"
#include "models/wan_vae/wan_vae_encoder.h"
#include "runtime/dtype.h"
#include "runtime/weights/weight_store.h"

namespace flick {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "flick-mg2-XXXXXX").string();
    EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& rel) const { return (fs::path(path_) / rel).string(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

const Mg2ModeSpec& mode_spec(Mg2Mode m) {
  for (const Mg2ModeSpec& s : mg2_modes())
    if (s.mode == m) return s;
  std::abort();
}

nlohmann::json full_keys() {
  const std::string path = std::string(FLICK_TEST_DATA) + "/mg2/full_keys.json.gz";
  gzFile f = gzopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  std::string text;
  char buf[1 << 16];
  for (int n; (n = gzread(f, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return nlohmann::json::parse(text);
}

// ---- the full-size layout ----

TEST(Mg2Layout, FullSizeIsTheReleasedKeyListInStateDictOrder) {
  const nlohmann::json tables = full_keys();
  const Mg2Dims d = mg2_synth_dims(Mg2SynthSize::kFull);
  std::vector<std::pair<std::string, std::vector<LayoutTensor>>> files;
  for (const Mg2ModeSpec& m : mg2_modes())
    files.emplace_back(std::string(m.checkpoint), mg2_dit_layout(d, m));
  files.emplace_back(std::string(kMg2VaeFile), mg2_vae_layout(d));
  files.emplace_back(std::string(kMg2ClipFile), mg2_clip_layout(d));
  ASSERT_EQ(files.size(), tables.size());
  for (const auto& [name, layout] : files) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(tables.contains(name));
    const auto& t = tables[name];
    const auto& keys = t["keys"];
    ASSERT_EQ(layout.size(), keys.size());
    uint64_t params = 0;
    for (size_t i = 0; i < layout.size(); ++i) {
      EXPECT_EQ(layout[i].name, keys[i][0].get<std::string>()) << i;
      EXPECT_EQ(layout[i].shape, keys[i][1].get<std::vector<int64_t>>()) << layout[i].name;
      EXPECT_EQ(dtype_name(layout[i].dtype), t["dtype"].get<std::string>()) << layout[i].name;
      uint64_t n = 1;
      for (int64_t x : layout[i].shape) n *= static_cast<uint64_t>(x);
      params += n;
    }
    EXPECT_EQ(params, t["parameters"].get<uint64_t>());
  }
}

// Full-size files of every mode, all zeros (holes): written once per suite.
class Mg2FullSize : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    Mg2SynthOptions o;
    o.size = Mg2SynthSize::kFull;
    o.fill = SynthFill::kZeros;
    const Status s = write_mg2_synth(dir_->path(), o);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string path(std::string_view rel) { return dir_->file(std::string(rel)); }
  static WeightStore open(std::string_view rel) {
    auto s = WeightStore::open({path(rel)});
    EXPECT_TRUE(s.ok()) << s.status().message();
    return s.ok() ? std::move(*s) : WeightStore();
  }
  // The layout check of `mode` on a copy of the directory whose file `rel`
  // holds `layout` (zeros); the other files are hard links to the originals.
  static Status check_with(std::string_view rel, const std::vector<LayoutTensor>& layout,
                           const Mg2ModeSpec& mode) {
    TempDir copy;
    for (const auto& e : fs::recursive_directory_iterator(dir_->path())) {
      const fs::path r = fs::relative(e.path(), dir_->path());
      if (e.is_directory())
        fs::create_directories(copy.file(r.string()));
      else if (r != fs::path(rel))
        fs::create_hard_link(e.path(), copy.file(r.string()));
    }
    const Status w =
        write_synth_checkpoint(copy.file(std::string(rel)), layout, 0, SynthFill::kZeros);
    EXPECT_TRUE(w.ok()) << w.message();
    const Status s = check_mg2_layout(copy.path(), mode);
    // Errors name the copy's files; report them as the original's.
    std::string msg = s.message();
    for (size_t at; (at = msg.find(copy.path())) != std::string::npos;)
      msg.replace(at, copy.path().size(), dir_->path());
    return s.ok() ? s : Status(s.code(), msg);
  }
  static TempDir* dir_;
};
TempDir* Mg2FullSize::dir_ = nullptr;

TEST_F(Mg2FullSize, FilesAreSparseAndSizedLikeTheRealOnes) {
  // Published sizes: 508 MB (VAE) and 4.77 GB (CLIP) at F32; the DiT files
  // hold 2 bytes per parameter plus the header.
  uint64_t allocated = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_->path())) {
    if (!e.is_regular_file()) continue;
    struct stat st;
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    allocated += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  EXPECT_LT(allocated, uint64_t{64} << 20) << "zero-filled files should be holes";
  const uint64_t dit = fs::file_size(path(mode_spec(Mg2Mode::kUniversal).checkpoint));
  EXPECT_GT(dit, 2 * uint64_t{1'619'242'304});
  EXPECT_LT(dit, 2 * uint64_t{1'619'242'304} + (1 << 20));
  EXPECT_NEAR(static_cast<double>(fs::file_size(path(kMg2VaeFile))), 4.0 * 126'892'531, 1e6);
  EXPECT_NEAR(static_cast<double>(fs::file_size(path(kMg2ClipFile))), 4.0 * 1'193'014'785, 1e6);
}

TEST_F(Mg2FullSize, EveryComponentDetectsTheReleasedConfig) {
  struct Want {
    Mg2Mode mode;
    int64_t keyboard_dim;
    bool mouse;
  };
  for (const Want w : {Want{Mg2Mode::kUniversal, 4, true}, Want{Mg2Mode::kGtaDrive, 2, true},
                       Want{Mg2Mode::kTemplerun, 7, false}}) {
    const Mg2ModeSpec& m = mode_spec(w.mode);
    SCOPED_TRACE(std::string(m.name));
    WeightStore dit = open(m.checkpoint);
    auto c = WanDitConfig::detect(dit.view("model."));
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->dim, 1536);
    EXPECT_EQ(c->ffn_dim, 8960);
    EXPECT_EQ(c->heads, 12);
    EXPECT_EQ(c->head_dim, 128);
    EXPECT_EQ(c->layers, 30);
    EXPECT_EQ(c->in_dim, 36);
    EXPECT_EQ(c->out_dim, 16);
    EXPECT_EQ(c->freq_dim, 256);
    EXPECT_EQ(c->clip_dim, 1280);
    EXPECT_EQ(c->action_blocks, 15);
    for (int64_t b : {int64_t{0}, int64_t{14}}) {
      auto a = WanActionConfig::detect(
          dit.view("model.blocks." + std::to_string(b) + ".action_model."), c->dim);
      ASSERT_TRUE(a.ok()) << a.status().message();
      EXPECT_EQ(a->heads, 16);
      EXPECT_EQ(a->attn_width, 1024);
      EXPECT_EQ(a->keyboard_dim, w.keyboard_dim);
      EXPECT_EQ(a->keyboard_hidden, 128);
      EXPECT_EQ(a->has_mouse(), w.mouse);
      EXPECT_EQ(a->mouse_hidden, w.mouse ? 1024 : 0);
      EXPECT_EQ(a->mouse_dim, w.mouse ? 2 : 0);
    }
    EXPECT_FALSE(dit.has("model.blocks.15.action_model.proj_keyboard.weight"));
    const Status s = check_mg2_layout(dir_->path(), m);
    EXPECT_TRUE(s.ok()) << s.message();
  }

  WeightStore vae = open(kMg2VaeFile);
  auto e = WanVaeEncoderConfig::detect(vae.root());
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->z_dim, 16);
  EXPECT_EQ(e->dim, 96);
  EXPECT_EQ(e->out_dim, 384);
  EXPECT_EQ(e->downsamples, 11);
  EXPECT_EQ(e->temporal_down, 2);
  EXPECT_EQ(e->spatial_down, 3);
  auto dc = WanVaeDecoderConfig::detect(vae.root());
  ASSERT_TRUE(dc.ok()) << dc.status().message();
  EXPECT_EQ(dc->z_dim, 16);
  EXPECT_EQ(dc->dim, 384);
  EXPECT_EQ(dc->out_dim, 96);
  EXPECT_EQ(dc->upsamples, 15);
  EXPECT_EQ(dc->temporal_up, 2);
  EXPECT_EQ(dc->spatial_up, 3);

  WeightStore clip = open(kMg2ClipFile);
  auto v = ClipVisionConfig::detect(clip.view("visual"));
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->width, 1280);
  EXPECT_EQ(v->layers, 32);
  EXPECT_EQ(v->heads, 16);
  EXPECT_EQ(v->head_dim, 80);
  EXPECT_EQ(v->mlp_dim, 5120);
  EXPECT_EQ(v->patch, 14);
  EXPECT_EQ(v->grid, 16);
  EXPECT_EQ(v->image_size, 224);
  EXPECT_EQ(v->tokens(), 257);
}

// A layout with one tensor dropped, one added or one reshaped.
std::vector<LayoutTensor> without(std::vector<LayoutTensor> l, const std::string& name) {
  std::erase_if(l, [&](const LayoutTensor& t) { return t.name == name; });
  return l;
}
std::vector<LayoutTensor> with_extra(std::vector<LayoutTensor> l, LayoutTensor t) {
  l.insert(l.begin() + static_cast<std::ptrdiff_t>(l.size() / 2), std::move(t));
  return l;
}
std::vector<LayoutTensor> reshaped(std::vector<LayoutTensor> l, const std::string& name,
                                   std::vector<int64_t> shape) {
  for (LayoutTensor& t : l)
    if (t.name == name) t.shape = std::move(shape);
  return l;
}

TEST_F(Mg2FullSize, EachBadTensorIsOneErrorNamingTensorAndFile) {
  const Mg2Dims d = mg2_synth_dims(Mg2SynthSize::kFull);
  const Mg2ModeSpec& uni = mode_spec(Mg2Mode::kUniversal);
  const Mg2ModeSpec& temple = mode_spec(Mg2Mode::kTemplerun);
  const std::string dit = path(uni.checkpoint), vae = path(kMg2VaeFile), clip = path(kMg2ClipFile),
                    temple_dit = path(temple.checkpoint);
  struct Case {
    std::string file;  // relative
    std::vector<LayoutTensor> layout;
    const Mg2ModeSpec* mode;
    std::string error;
  };
  const std::vector<Case> cases = {
      {std::string(uni.checkpoint),
       without(mg2_dit_layout(d, uni), "model.blocks.20.cross_attn.v.bias"), &uni,
       dit + ": model.blocks.20.cross_attn.v.bias: missing (expected BF16 [1536])"},
      {std::string(uni.checkpoint),
       with_extra(mg2_dit_layout(d, uni), {"model.blocks.3.self_attn.extra", DType::BF16, {8}}),
       &uni, dit + ": model.blocks.3.self_attn.extra: not a tensor of the Matrix-Game 2.0 layout"},
      {std::string(uni.checkpoint),
       reshaped(mg2_dit_layout(d, uni), "model.blocks.7.ffn.2.weight", {1536, 8000}), &uni,
       dit + ": model.blocks.7.ffn.2.weight: expected shape [1536, 8960], file has [1536, 8000]"},
      {std::string(uni.checkpoint),
       reshaped(mg2_dit_layout(d, uni), "model.blocks.9.action_model.mouse_mlp.0.weight",
                {1024, 1562}),
       &uni,
       dit + ": model.blocks.9.action_model.mouse_mlp.0.weight: expected shape [1024, 1560], "
             "file has [1024, 1562]"},
      {std::string(temple.checkpoint),
       without(mg2_dit_layout(d, temple), "model.blocks.14.action_model.key_attn_k_norm.weight"),
       &temple,
       temple_dit + ": model.blocks.14.action_model.key_attn_k_norm.weight: missing (expected "
                    "BF16 [64])"},
      {std::string(kMg2VaeFile), without(mg2_vae_layout(d), "decoder.upsamples.5.residual.6.bias"),
       &uni, vae + ": decoder.upsamples.5.residual.6.bias: missing (expected F32 [384])"},
      {std::string(kMg2VaeFile),
       reshaped(mg2_vae_layout(d), "encoder.middle.1.norm.gamma", {384, 1, 1, 1}), &uni,
       vae + ": encoder.middle.1.norm.gamma: expected shape [384, 1, 1], file has [384, 1, 1, 1]"},
      {std::string(kMg2ClipFile),
       reshaped(mg2_clip_layout(d), "visual.transformer.30.mlp.0.weight", {5121, 1280}), &uni,
       clip + ": visual.transformer.30.mlp.0.weight: expected shape [5120, 1280], file has "
              "[5121, 1280]"},
      {std::string(kMg2ClipFile),
       with_extra(mg2_clip_layout(d), {"textual.blocks.3.ffn.1.bias", DType::F32, {4096}}), &uni,
       clip + ": textual.blocks.3.ffn.1.bias: not a tensor of the Matrix-Game 2.0 layout"},
      // Tensors the detection reads: its own error, still one line naming both.
      {std::string(uni.checkpoint), without(mg2_dit_layout(d, uni), "model.patch_embedding.weight"),
       &uni, dit + ": model.patch_embedding.weight: missing from the checkpoint"},
      {std::string(kMg2ClipFile), without(mg2_clip_layout(d), "visual.cls_embedding"), &uni,
       clip + ": visual.cls_embedding: missing from the checkpoint"},
      // Another mode's checkpoint under this mode's name.
      {std::string(uni.checkpoint), mg2_dit_layout(d, temple), &uni,
       dit + ": the action modules take 7 keys and no mouse; mode universal has 4 keys and "
             "mouse"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.error);
    const Status s = check_with(c.file, c.layout, *c.mode);
    EXPECT_EQ(s.code(), c.error.find("missing from") != std::string::npos
                            ? StatusCode::kNotFound
                            : StatusCode::kInvalidInput);
    EXPECT_EQ(s.message(), c.error);
  }
}

TEST_F(Mg2FullSize, SeveralBadTensorsAreListedOnePerLine) {
  const Mg2Dims d = mg2_synth_dims(Mg2SynthSize::kFull);
  const Mg2ModeSpec& uni = mode_spec(Mg2Mode::kUniversal);
  auto layout = without(mg2_dit_layout(d, uni), "model.blocks.1.ffn.0.bias");
  layout = reshaped(std::move(layout), "model.head.head.bias", {65});
  const Status s = check_with(uni.checkpoint, layout, uni);
  const std::string dit = path(uni.checkpoint);
  EXPECT_EQ(s.message(), dit +
                             ": 2 tensors do not match the Matrix-Game 2.0 layout:\n"
                             "  model.blocks.1.ffn.0.bias: missing (expected BF16 [8960])\n"
                             "  model.head.head.bias: expected shape [64], file has [65]");
}

// ---- the tiny size ----

double stddev(const std::vector<float>& v) {
  double m = 0, s = 0;
  for (float x : v) m += x;
  m /= static_cast<double>(v.size());
  for (float x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

std::vector<float> to_f32(const Tensor& t) {
  OwnedTensor c(DType::F32, t.shape);
  make_cpu_backend()->copy(t, c.t);
  return {c.t.ptr<float>(), c.t.ptr<float>() + t.numel()};
}

bool all_finite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

// Finite and not (nearly) constant: the synthetic weights keep activations
// in a sane range, and inputs still matter.
void expect_lively(const Tensor& t, const std::string& what) {
  const std::vector<float> v = to_f32(t);
  EXPECT_TRUE(all_finite(v)) << what;
  EXPECT_GT(stddev(v), 1e-2) << what;
}

// `flick synth --size tiny` (the binary, as users run it) into a temp dir.
class Mg2Tiny : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const std::string cmd = std::string("'") + FLICK_BINARY + "' synth '" + dir_->path() +
                            "' --size tiny --seed 7 > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static TempDir* dir_;
};
TempDir* Mg2Tiny::dir_ = nullptr;

TEST_F(Mg2Tiny, TheCliWritesTheLibraryLayoutForEveryMode) {
  for (const Mg2ModeSpec& m : mg2_modes()) {
    const Status s = check_mg2_layout(dir_->path(), m);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  // The same bytes as the library writes for the same seed.
  TempDir again;
  Mg2SynthOptions o;
  o.seed = 7;
  o.modes = {Mg2Mode::kGtaDrive};
  ASSERT_TRUE(write_mg2_synth(again.path(), o).ok());
  for (std::string_view rel :
       {mode_spec(Mg2Mode::kGtaDrive).checkpoint, kMg2VaeFile, kMg2ClipFile}) {
    SCOPED_TRACE(std::string(rel));
    std::ifstream a(dir_->file(std::string(rel)), std::ios::binary),
        b(again.file(std::string(rel)), std::ios::binary);
    const std::string x{std::istreambuf_iterator<char>(a), {}},
        y{std::istreambuf_iterator<char>(b), {}};
    EXPECT_GT(x.size(), 1000u);
    EXPECT_TRUE(x == y);
  }
}

TEST(Mg2SynthCli, BadArgumentsAreUsageErrors) {
  TempDir dir;
  for (const char* args : {"--size huge", "--mode racing", "--fill ones", ""}) {
    const std::string cmd = std::string("'") + FLICK_BINARY + "' synth " +
                            (*args ? "'" + dir.path() + "' " + args : std::string()) +
                            " > /dev/null 2>&1";
    const int rc = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(rc)) << cmd;
    EXPECT_EQ(WEXITSTATUS(rc), 64) << cmd;
  }
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST_F(Mg2Tiny, ComponentsLoadWithDefaultHeadsAndGiveLivelyOutputs) {
  std::unique_ptr<Backend> be = make_cpu_backend();
  const Mg2ModeSpec& m = mode_spec(Mg2Mode::kUniversal);
  auto clip_store = WeightStore::open({dir_->file(std::string(kMg2ClipFile))});
  auto vae_store = WeightStore::open({dir_->file(std::string(kMg2VaeFile))});
  auto dit_store = WeightStore::open({dir_->file(std::string(m.checkpoint))});
  ASSERT_TRUE(clip_store.ok() && vae_store.ok() && dit_store.ok());

  // CLIP: 224 px, 257 tokens of width 160, 2 heads of 80.
  auto clip = ClipVision::load(clip_store->view("visual"), *be, Precision::F32);
  ASSERT_TRUE(clip.ok()) << clip.status().message();
  EXPECT_EQ(clip->config().heads, 2);
  OwnedTensor image(DType::F32, {1, 3, 32, 48});
  for (int64_t i = 0; i < image.t.numel(); ++i)
    image.t.ptr<float>()[i] = std::sin(0.37f * static_cast<float>(i));  // in [-1, 1]
  auto ctx = clip->forward(image.t);
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  EXPECT_EQ(ctx->shape, Shape({1, 257, 160}));
  expect_lively(*ctx, "CLIP hidden state");
  const OwnedTensor context = [&] {
    OwnedTensor c(DType::F32, ctx->shape);
    be->copy(*ctx, c.t);
    return c;
  }();

  // VAE: 1 + 4 frames -> 2 latents -> 1 + 4 frames.
  auto enc = WanVaeEncoder::load(vae_store->root(), *be, Precision::F32);
  ASSERT_TRUE(enc.ok()) << enc.status().message();
  OwnedTensor video(DType::F32, {1, 3, 5, 32, 48});
  for (int64_t i = 0; i < video.t.numel(); ++i)
    video.t.ptr<float>()[i] = std::cos(0.11f * static_cast<float>(i));
  auto z = enc->encode(video.t);
  ASSERT_TRUE(z.ok()) << z.status().message();
  EXPECT_EQ(z->shape, Shape({1, 16, 2, 4, 6}));
  expect_lively(*z, "VAE latents");
  OwnedTensor latents(DType::F32, z->shape);
  be->copy(*z, latents.t);
  auto dec = WanVaeDecoder::load(vae_store->root(), *be, Precision::F32);
  ASSERT_TRUE(dec.ok()) << dec.status().message();
  auto frames = dec->decode(latents.t);
  ASSERT_TRUE(frames.ok()) << frames.status().message();
  EXPECT_EQ(frames->shape, Shape({1, 5, 3, 32, 48}));
  expect_lively(*frames, "VAE frames");

  // DiT: one call on 3 latent frames of 4 x 6, action modules in blocks 0-1.
  const WeightView model = dit_store->view("model.");
  const WanDitShape shape{4, 6, 3, 257, m.local_attn_frames};
  auto dit = WanDit::load(model, *be, Precision::BF16, shape);
  ASSERT_TRUE(dit.ok()) << dit.status().message();
  EXPECT_EQ(dit->config().heads, 2);
  EXPECT_EQ(dit->config().action_blocks, 2);
  std::vector<WanActionModule> actions;
  for (int64_t i = 0; i < dit->config().action_blocks; ++i) {
    auto a =
        WanActionModule::load(model.sub("blocks." + std::to_string(i) + ".action_model"), *be,
                              Precision::BF16, 256, 3, shape.frame_tokens(), m.local_attn_frames);
    ASSERT_TRUE(a.ok()) << a.status().message();
    actions.push_back(std::move(*a));
  }
  // Every tensor of the DiT file is used by the DiT and its action modules.
  EXPECT_TRUE(dit_store->check_all_used().ok()) << dit_store->check_all_used().message();

  OwnedTensor ctx_bf16(DType::BF16, context.t.shape);
  be->copy(context.t, ctx_bf16.t);
  ASSERT_TRUE(dit->set_context(ctx_bf16.t).ok());
  OwnedTensor noisy(DType::BF16, {1, 16, 3, 4, 6}), cond(DType::BF16, {1, 20, 3, 4, 6});
  OwnedTensor t(DType::F32, {3});
  for (int64_t i = 0; i < noisy.t.numel(); ++i)
    noisy.t.ptr<uint16_t>()[i] = f32_to_bf16(std::sin(0.5f * static_cast<float>(i)));
  for (int64_t i = 0; i < cond.t.numel(); ++i)
    cond.t.ptr<uint16_t>()[i] = f32_to_bf16(std::cos(0.3f * static_cast<float>(i)));
  std::fill_n(t.t.ptr<float>(), 3, 750.f);
  ASSERT_TRUE(dit->embed(noisy.t, cond.t, t.t).ok());
  const int64_t raw = mg2_video_frames(3);
  OwnedTensor keyboard(DType::F32, {raw, 4}), mouse(DType::F32, {raw, 2});
  for (int64_t i = 0; i < raw; ++i) {
    keyboard.t.ptr<float>()[i * 4 + i % 4] = 1.f;
    mouse.t.ptr<float>()[i * 2] = 0.1f * static_cast<float>(i % 3);
  }
  Tensor tokens = dit->tokens();
  for (int64_t i = 0; i < dit->config().layers; ++i) {
    if (i < dit->config().action_blocks) {
      dit->attention(i, 0);
      ASSERT_TRUE(actions[static_cast<size_t>(i)].forward(tokens, keyboard.t, mouse.t, 0).ok());
      dit->feed_forward(i);
    } else {
      dit->block(i, 0);
    }
  }
  const Tensor flow = dit->head();
  EXPECT_EQ(flow.shape, Shape({1, 16, 3, 4, 6}));
  expect_lively(flow, "DiT flow");
}

TEST_F(Mg2Tiny, ThePipelineLoadsWithDefaultHeadsAndRendersAVaryingVideo) {
  std::unique_ptr<Backend> be = make_cpu_backend();
  Mg2Options o;
  o.weights = dir_->path();
  o.mode = Mg2Mode::kTemplerun;
  o.precision = Precision::BF16;
  o.width = 48;
  o.height = 32;
  auto p = Mg2Pipeline::load(o, *be);
  ASSERT_TRUE(p.ok()) << p.status().message();

  struct Sink : FrameSink {
    Status begin(int, int, double, int64_t) override { return ok_status(); }
    Status write(const FrameView& f) override {
      for (int y = 0; y < f.height; ++y)
        pixels.insert(pixels.end(), f.rgb + y * f.stride, f.rgb + y * f.stride + 3 * f.width);
      ++frames;
      return ok_status();
    }
    Status finish() override { return ok_status(); }
    std::vector<uint8_t> pixels;
    int frames = 0;
  } sink;
  Mg2Input in;
  in.image.width = 48;
  in.image.height = 32;
  for (int i = 0; i < 48 * 32 * 3; ++i)
    in.image.rgb.push_back(static_cast<uint8_t>((i * 37) % 256));
  in.seed = 1;
  in.latent_frames = 3;
  const int64_t t = mg2_video_frames(3);
  in.keyboard.assign(static_cast<size_t>(t * 7), 0.f);
  for (int64_t i = 0; i < t; ++i) in.keyboard[static_cast<size_t>(i * 7 + i % 7)] = 1.f;
  const Status s = (*p)->run(in, sink, RunContext{});
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(sink.frames, t);
  // A picture, not a flat or saturated field: many distinct pixel values.
  std::vector<int> histogram(256, 0);
  for (uint8_t v : sink.pixels) ++histogram[v];
  const auto levels =
      std::count_if(histogram.begin(), histogram.end(), [](int c) { return c > 0; });
  EXPECT_GT(levels, 32);
  EXPECT_LT(*std::max_element(histogram.begin(), histogram.end()),
            static_cast<int>(sink.pixels.size() / 2));
}

// ---- values ----

// The writer's chunked, multi-threaded output equals the per-element rule:
// a 3M-element F32 tensor spans two 8 MiB chunks, in safetensors and .pth.
TEST(Mg2SynthValues, FilesHoldThePerElementRule) {
  TempDir dir;
  const std::vector<LayoutTensor> layout = {
      {"blocks.0.ffn.0.weight", DType::F32, {3000, 1000}},
      {"blocks.0.ffn.0.bias", DType::BF16, {3000}},
      {"blocks.0.norm.weight", DType::F32, {1000}},
  };
  for (const char* name : {"w.safetensors", "w.pth"}) {
    SCOPED_TRACE(name);
    const std::string path = dir.file(name);
    ASSERT_TRUE(write_synth_checkpoint(path, layout, 42, SynthFill::kRandom).ok());
    auto store = WeightStore::open({path});
    ASSERT_TRUE(store.ok()) << store.status().message();
    for (const LayoutTensor& l : layout) {
      auto t = store->get(l.name, l.dtype, Shape::from_vector(l.shape));
      ASSERT_TRUE(t.ok()) << t.status().message();
      const SynthScale sc = mg2_synth_scale(l.name, l.shape);
      int64_t mismatches = 0;
      for (int64_t i = 0; i < t->numel(); ++i) {
        float want = mg2_synth_value(42, l.name, sc, static_cast<uint64_t>(i));
        if (l.dtype == DType::BF16) want = round_bf16(want);
        mismatches += load_as_f32(t->dtype, t->data, i) != want;
      }
      EXPECT_EQ(mismatches, 0) << l.name;
    }
  }
}

// Scales as documented; statistics of 3M / 1M / 1000 samples, tolerances a few
// standard errors wide.
TEST(Mg2SynthValues, ScalesFollowTheRule) {
  auto sample = [](std::string_view name, const std::vector<int64_t>& shape, int64_t n) {
    const SynthScale sc = mg2_synth_scale(name, shape);
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = mg2_synth_value(0, name, sc, i);
    return v;
  };
  auto mean = [](const std::vector<float>& v) {
    double m = 0;
    for (float x : v) m += x;
    return m / static_cast<double>(v.size());
  };
  const auto w = sample("model.blocks.0.ffn.0.weight", {8960, 1536}, 3'000'000);
  EXPECT_NEAR(mean(w), 0.0, 1e-4);
  EXPECT_NEAR(stddev(w), 1.0 / std::sqrt(1536.0), 2e-4);
  // Four summed 16-bit uniforms are bounded: |g| <= sqrt(12).
  const double bound = std::sqrt(12.0) / std::sqrt(1536.0) + 1e-6;
  EXPECT_TRUE(std::all_of(w.begin(), w.end(), [&](float x) { return std::abs(x) <= bound; }));
  const auto conv = sample("decoder.head.2.weight", {3, 96, 3, 3, 3}, 7776);
  EXPECT_NEAR(stddev(conv), 1.0 / std::sqrt(96.0 * 27.0), 0.001);
  const auto bias = sample("model.blocks.0.ffn.0.bias", {8960}, 1'000'000);
  EXPECT_NEAR(stddev(bias), 0.02, 1e-4);
  const auto norm = sample("model.blocks.0.self_attn.norm_q.weight", {1536}, 1'000'000);
  EXPECT_NEAR(mean(norm), 1.0, 1e-3);
  EXPECT_NEAR(stddev(norm), 0.1, 1e-3);
  const auto gamma = sample("encoder.head.0.gamma", {384, 1, 1, 1}, 1'000'000);
  EXPECT_NEAR(mean(gamma), 1.0, 1e-3);
  const auto mod = sample("model.blocks.0.modulation", {1, 6, 1536}, 1'000'000);
  EXPECT_NEAR(stddev(mod), 1.0 / std::sqrt(1536.0), 1e-4);
  const auto emb = sample("textual.token_embedding.weight", {250002, 1024}, 1'000'000);
  EXPECT_NEAR(stddev(emb), 0.02, 1e-4);
  const auto patch = sample("visual.patch_embedding.weight", {1280, 3, 14, 14}, 1'000'000);
  EXPECT_NEAR(stddev(patch), 1.0 / std::sqrt(588.0), 1e-4);
  const auto ls = sample("log_scale", {}, 1);
  EXPECT_FLOAT_EQ(ls[0], static_cast<float>(std::log(1.0 / 0.07)));
}

TEST(Mg2SynthValues, TheSeedDecidesEveryValue) {
  const SynthScale sc{0.0, 1.0};
  int same_seed_diff = 0, other_seed_same = 0, other_name_same = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    const float a = mg2_synth_value(5, "x.weight", sc, i);
    same_seed_diff += a != mg2_synth_value(5, "x.weight", sc, i);
    other_seed_same += a == mg2_synth_value(6, "x.weight", sc, i);
    other_name_same += a == mg2_synth_value(5, "y.weight", sc, i);
  }
  EXPECT_EQ(same_seed_diff, 0);
  // Values are quantised to 2^18 levels: a few equal draws are chance.
  EXPECT_LT(other_seed_same, 20);
  EXPECT_LT(other_name_same, 20);
}

}  // namespace
}  // namespace flick
