// The HunyuanVideo VAE (models/hunyuan_vae) against diffusers 0.33.1's
// AutoencoderKLHunyuanVideo at a tiny config (tools/hunyuan_vae_goldens.py:
// 4 levels of 4-8 channels, GroupNorm 2 groups, 4 latent channels, random
// weights incl. norms and biases; CPU fp32 reference, plus the reference's
// bf16 run of three outputs), run as FramePack runs it: per-block encode and
// decode intermediates, the start image's posterior mean * 0.476986, the
// always-on temporally tiled decode (9 latents: 3 tiles, the last short), the
// low-VRAM spatial tiles (tiny 32 px tiles at stride 24 px so 5x5 latents
// split 2x2) for decode, temporal+spatial decode and encode, and the
// temporally tiled encode. Then the full-size key layout (from the
// reference's meta-device init) on synthetic zero weights.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/hunyuan_vae/hunyuan_vae.h"
#include "runtime/weights/stored_type.h"
#include "runtime/weights/weight_file.h"
#include "runtime/weights/weight_store.h"
#include "tests/models/golden_compare.h"

namespace flick {
namespace {

const std::string kData = std::string(FLICK_TEST_DATA) + "/hunyuan_vae/";
const std::string kWeights = kData + "vae/diffusion_pytorch_model.safetensors";
const std::string kConfig = kData + "vae/config.json";

using testing::rel_l2;
using testing::to_f32;

struct Fixture {
  WeightStore weights, golden;
  HunyuanVaeConfig cfg;
};

Fixture open_fixture() {
  Fixture f;
  Expected<WeightStore> w = WeightStore::open({kWeights});
  EXPECT_TRUE(w.ok()) << w.status().message();
  f.weights = std::move(*w);
  Expected<WeightStore> g = WeightStore::open({kData + "goldens.safetensors"});
  EXPECT_TRUE(g.ok()) << g.status().message();
  f.golden = std::move(*g);
  Expected<HunyuanVaeConfig> cfg = HunyuanVaeConfig::detect(f.weights.root(), kConfig);
  EXPECT_TRUE(cfg.ok()) << cfg.status().message();
  f.cfg = *cfg;
  return f;
}

std::vector<float> golden(const Fixture& f, const std::string& name) {
  Expected<Tensor> t = f.golden.get(name);
  EXPECT_TRUE(t.ok()) << name;
  return to_f32(*t);
}
Shape golden_shape(const Fixture& f, const std::string& name) { return f.golden.get(name)->shape; }

TEST(HunyuanVaeConfig, DetectsTheTinyConfigFromShapesAndConfigJson) {
  Fixture f = open_fixture();
  EXPECT_EQ(f.cfg.block_out_channels, (std::vector<int64_t>{4, 8, 8, 8}));
  EXPECT_EQ(f.cfg.layers_per_block, 2);
  EXPECT_EQ(f.cfg.latent_channels, 4);
  EXPECT_EQ(f.cfg.in_channels, 3);
  EXPECT_EQ(f.cfg.out_channels, 3);
  EXPECT_EQ(f.cfg.norm_groups, 2);
  EXPECT_EQ(f.cfg.scaling_factor, 0.476986f);
  EXPECT_EQ(f.cfg.spatial_ratio, 8);
  EXPECT_EQ(f.cfg.temporal_ratio, 4);
  EXPECT_TRUE(f.cfg.mid_attention && f.cfg.has_encoder && f.cfg.has_decoder);
}

// config.json values that disagree with the shapes, unsupported settings and
// missing keys are errors naming the key.
TEST(HunyuanVaeConfig, MismatchesAreNamed) {
  Expected<WeightStore> w = WeightStore::open({kWeights});
  ASSERT_TRUE(w.ok());
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("flick_hyvae_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ifstream in(kConfig);
  const nlohmann::json base = nlohmann::json::parse(in);
  auto detect_with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = base;
    edit(j);
    std::ofstream(dir / "config.json") << j.dump();
    return HunyuanVaeConfig::detect(w->root(), (dir / "config.json").string());
  };
  auto expect_error = [](const Expected<HunyuanVaeConfig>& r, const std::string& needle) {
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  expect_error(detect_with([](auto& j) {
                 j["block_out_channels"] = {4, 8, 8, 16};
               }),
               "block_out_channels");
  expect_error(detect_with([](auto& j) { j["latent_channels"] = 16; }), "latent_channels");
  expect_error(detect_with([](auto& j) { j["layers_per_block"] = 3; }), "layers_per_block");
  expect_error(detect_with([](auto& j) { j.erase("norm_num_groups"); }), "norm_num_groups");
  expect_error(detect_with([](auto& j) { j.erase("scaling_factor"); }), "scaling_factor");
  expect_error(detect_with([](auto& j) { j["act_fn"] = "gelu"; }), "act_fn");
  expect_error(detect_with([](auto& j) { j["up_block_types"][1] = "UpDecoderBlock2D"; }),
               "up_block_types");
  // Groups that do not divide the channels: the loader names the norm.
  Expected<HunyuanVaeConfig> cfg = detect_with([](auto& j) { j["norm_num_groups"] = 3; });
  ASSERT_TRUE(cfg.ok());
  std::unique_ptr<Backend> be = make_ref_backend();
  Expected<HunyuanVae> vae = HunyuanVae::load(w->root(), *cfg, *be, Precision::F32);
  ASSERT_FALSE(vae.ok());
  EXPECT_NE(vae.status().message().find("encoder.down_blocks.0.resnets.0.norm1"), std::string::npos)
      << vae.status().message();
  std::filesystem::remove_all(dir);
}

struct Case {
  const char* backend;
  Precision precision;
};
std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.backend) + "_" + precision_name(info.param.precision);
}

class HunyuanVaeF32 : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    f_ = open_fixture();
    be_ = std::string(GetParam().backend) == "ref" ? make_ref_backend() : make_cpu_backend();
    Expected<HunyuanVae> v = HunyuanVae::load(f_.weights.root(), f_.cfg, *be_, Precision::F32);
    ASSERT_TRUE(v.ok()) << v.status().message();
    vae_ = std::make_unique<HunyuanVae>(std::move(*v));
    EXPECT_TRUE(f_.weights.root().check_all_used().ok())
        << f_.weights.root().check_all_used().message();
  }
  // Tolerance (relative L2, fp32): the reference's arithmetic up to the
  // summation order of the convolutions (oneDNN / the scalar oracle vs torch's
  // mkldnn), the GroupNorm statistics (double sums vs torch's fp32 Welford)
  // and the attention, growing with depth: observed 2e-7 after one conv,
  // 1-5e-6 after the 20-30 layers of a whole encode / decode (the scalar
  // oracle and oneDNN alike, so mostly torch's own rounding): 2e-5.
  static constexpr double kTol = 2e-5;
  void expect_close(const std::vector<float>& got, const Shape& got_shape,
                    const std::string& name) {
    ASSERT_EQ(got_shape, golden_shape(f_, name)) << name;
    const double e = rel_l2(got, golden(f_, name));
    std::printf("  %-22s rel_l2 %.3g\n", name.c_str(), e);
    EXPECT_LE(e, kTol) << name;
  }
  void expect_close(const OwnedTensor& got, const std::string& name) {
    expect_close(to_f32(got.t), got.t.shape, name);
  }
  Tensor input(const std::string& name) { return *f_.golden.get(name); }

  Fixture f_;
  std::unique_ptr<Backend> be_;
  std::unique_ptr<HunyuanVae> vae_;
};

TEST_P(HunyuanVaeF32, EncodeMatchesPerBlock) {
  std::map<std::string, std::pair<std::vector<float>, Shape>> taps;
  Expected<OwnedTensor> m = vae_->encode(input("enc.x"), [&](std::string_view n, const Tensor& t) {
    taps[std::string(n)] = {to_f32(t), t.shape};
  });
  ASSERT_TRUE(m.ok()) << m.status().message();
  for (const char* n : {"conv_in", "down0.res0", "down0", "down1", "down2", "down3", "mid.res0",
                        "mid.attn", "mid", "conv_out", "moments"}) {
    ASSERT_TRUE(taps.count(n)) << n;
    expect_close(taps[n].first, taps[n].second, std::string("enc.") + n);
  }
  expect_close(*m, "enc.moments");
}

// FramePack's start frame: posterior mean * scaling_factor (spec 1.3; the
// reference samples from the global RNG, flick takes the mean).
TEST_P(HunyuanVaeF32, StartLatentIsThePosteriorMeanScaled) {
  Expected<OwnedTensor> mean = vae_->posterior_mean(input("img.x"));
  ASSERT_TRUE(mean.ok()) << mean.status().message();
  expect_close(*mean, "img.mean");
  Expected<OwnedTensor> lat = vae_->start_latent(input("img.x"));
  ASSERT_TRUE(lat.ok());
  expect_close(*lat, "img.latent");
}

TEST_P(HunyuanVaeF32, DecodeMatchesPerBlock) {
  std::map<std::string, std::pair<std::vector<float>, Shape>> taps;
  Expected<OwnedTensor> y = vae_->decode(input("dec.z"), [&](std::string_view n, const Tensor& t) {
    taps[std::string(n)] = {to_f32(t), t.shape};
  });
  ASSERT_TRUE(y.ok()) << y.status().message();
  for (const char* n : {"post_quant_conv", "conv_in", "mid", "up0.res0", "up0.upsample", "up0",
                        "up1", "up2", "up3"}) {
    ASSERT_TRUE(taps.count(n)) << n;
    expect_close(taps[n].first, taps[n].second, std::string("dec.") + n);
  }
  expect_close(*y, "dec.out");
}

// 9 latents: tiles z[0:5], z[3:8], z[6:9] -> 13 + 12 + 8 = 33 frames, two
// 4-frame blends. An untiled decode of the same latents is far from the
// reference (GroupNorm statistics and attention span the tile): the tiling
// is what the golden checks.
TEST_P(HunyuanVaeF32, TemporalTiledDecode) {
  Expected<OwnedTensor> y = vae_->decode(input("tdec.z"));
  ASSERT_TRUE(y.ok()) << y.status().message();
  EXPECT_EQ(y->t.shape, Shape({1, 3, 33, 16, 24}));
  expect_close(*y, "tdec.out");
  // FramePack's vae_decode: the sampler's latents (z * scaling_factor) are
  // divided by it first (flick multiplies by the fp32 reciprocal: 1 ulp).
  OwnedTensor scaled(DType::F32, input("tdec.z").shape);
  be_->affine(input("tdec.z"), f_.cfg.scaling_factor, 0.f, scaled.t);
  Expected<OwnedTensor> yl = vae_->decode_latents(scaled.t);
  ASSERT_TRUE(yl.ok()) << yl.status().message();
  expect_close(*yl, "tdec.out");
  HunyuanVaeTiling untiled;
  untiled.framewise_decode = false;
  vae_->set_tiling(untiled);
  Expected<OwnedTensor> u = vae_->decode(input("tdec.z"));
  ASSERT_TRUE(u.ok());
  const double e = rel_l2(to_f32(u->t), golden(f_, "tdec.out"));
  std::printf("  untiled decode vs the tiled reference: rel_l2 %.3g\n", e);
  EXPECT_GT(e, 1000 * kTol);
}

// FramePack's section lengths: 19 latents (73 frames: tiles at 0, 3, .., 18,
// the last one's single frame dropped) and 7 (25 frames, likewise).
TEST_P(HunyuanVaeF32, TemporalTiledDecodeOfSectionLengths) {
  for (int n : {7, 19}) {
    const std::string tag = "tdec" + std::to_string(n);
    Expected<OwnedTensor> y = vae_->decode(input(tag + ".z"));
    ASSERT_TRUE(y.ok()) << y.status().message();
    EXPECT_EQ(y->t.dim(2), 4 * (n - 1) + 1);
    expect_close(*y, tag + ".out");
  }
}

// FramePack's low-VRAM mode (enable_tiling) with tiny tiles: 32 px at stride
// 24 px (4 / 3 latents), so 5x5 latents are 2x2 tiles blended over 8 px.
HunyuanVaeTiling low_vram_tiny() {
  HunyuanVaeTiling t = HunyuanVaeTiling::low_vram();
  t.min_height = t.min_width = 32;
  t.stride_height = t.stride_width = 24;
  return t;
}

TEST_P(HunyuanVaeF32, LowVramSpatialTiles) {
  vae_->set_tiling(low_vram_tiny());
  Expected<OwnedTensor> s = vae_->decode(input("sdec.z"));  // 2 latents: tiled_decode
  ASSERT_TRUE(s.ok()) << s.status().message();
  expect_close(*s, "sdec.out");
  Expected<OwnedTensor> ts = vae_->decode(input("tsdec.z"));  // 5 latents: temporal + spatial
  ASSERT_TRUE(ts.ok()) << ts.status().message();
  expect_close(*ts, "tsdec.out");
  Expected<OwnedTensor> e = vae_->encode(input("senc.x"));  // 40x48 px: 2x2 tiles
  ASSERT_TRUE(e.ok()) << e.status().message();
  expect_close(*e, "senc.moments");
}

TEST_P(HunyuanVaeF32, TemporalTiledEncode) {
  Expected<OwnedTensor> e = vae_->encode(input("tenc.x"));  // 21 frames: tiles at 0, 12
  ASSERT_TRUE(e.ok()) << e.status().message();
  expect_close(*e, "tenc.moments");
}

INSTANTIATE_TEST_SUITE_P(Backends, HunyuanVaeF32,
                         ::testing::Values(Case{"ref", Precision::F32},
                                           Case{"cpu", Precision::F32}),
                         case_name);

TEST_P(HunyuanVaeF32, RejectsInputsOfTheWrongShape) {
  OwnedTensor x(DType::F32, Shape{1, 4, 1, 16, 16});  // 4 channels, not 3
  std::memset(x.t.data, 0, x.t.nbytes());
  Expected<OwnedTensor> m = vae_->encode(x.t);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("[1, 3, T, H, W]"), std::string::npos)
      << m.status().message();
  OwnedTensor z(DType::F32, Shape{2, 4, 1, 2, 2});  // batch 2
  std::memset(z.t.data, 0, z.t.nbytes());
  EXPECT_FALSE(vae_->decode(z.t).ok());
  OwnedTensor z3(DType::F32, Shape{1, 4, 2, 2});  // no time axis
  std::memset(z3.t.data, 0, z3.t.nbytes());
  EXPECT_FALSE(vae_->decode(z3.t).ok());
}

class HunyuanVaeBf16 : public ::testing::TestWithParam<Case> {};

// bf16 against the reference's own bf16 run (CPU, bf16 weights and
// activations) and its fp32 run. Both round every op's output to bf16 (8
// mantissa bits, 2^-9 relative) but sum in different orders, so single
// roundings flip and the flips propagate through ~30 layers; at these tiny
// widths (GroupNorm over 2-4 channels) that is 2-4 % from fp32 for either
// implementation, and two such independent error patterns are ~sqrt(2) times
// that apart. Observed: flick's bf16 is 1.6-5.1 % from the fp32 run where the
// reference's bf16 is 2.1-3.8 %, and 2.9-5.7 % from the reference's bf16 run.
// Bound for both distances: twice the reference's own bf16-vs-fp32 distance
// (printed). A wrong blend, mask or rounding point shows up as tens of %.
TEST_P(HunyuanVaeBf16, WithinTheReferencesBf16Error) {
  Fixture f = open_fixture();
  std::unique_ptr<Backend> be =
      std::string(GetParam().backend) == "ref" ? make_ref_backend() : make_cpu_backend();
  Expected<HunyuanVae> vae = HunyuanVae::load(f.weights.root(), f.cfg, *be, Precision::BF16);
  ASSERT_TRUE(vae.ok()) << vae.status().message();
  auto check = [&](const OwnedTensor& got, const std::string& name, const std::string& fp32) {
    ASSERT_EQ(got.t.shape, golden_shape(f, fp32)) << name;
    const std::vector<float> g = to_f32(got.t), ref16 = golden(f, "bf16." + name),
                             ref32 = golden(f, fp32);
    const double e16 = rel_l2(g, ref16), e32 = rel_l2(g, ref32), gap = rel_l2(ref16, ref32);
    std::printf("  %-10s vs ref bf16 %.3g, vs ref fp32 %.3g (ref bf16 vs fp32 %.3g)\n",
                name.c_str(), e16, e32, gap);
    EXPECT_LE(e16, 2 * gap) << name;
    EXPECT_LE(e32, 2 * gap) << name;
  };
  Expected<OwnedTensor> y = vae->decode(*f.golden.get("tdec.z"));
  ASSERT_TRUE(y.ok()) << y.status().message();
  check(*y, "tdec.out", "tdec.out");
  Expected<OwnedTensor> m = vae->posterior_mean(*f.golden.get("enc.x"));
  ASSERT_TRUE(m.ok()) << m.status().message();
  check(*m, "enc.mean", "enc.mean");
  Expected<OwnedTensor> im = vae->posterior_mean(*f.golden.get("img.x"));
  ASSERT_TRUE(im.ok()) << im.status().message();
  check(*im, "img.mean", "img.mean");
}

INSTANTIATE_TEST_SUITE_P(Backends, HunyuanVaeBf16,
                         ::testing::Values(Case{"ref", Precision::BF16},
                                           Case{"cpu", Precision::BF16}),
                         case_name);

// Every key and shape of the released checkpoint layout (full_layout.json,
// written by the goldens script from the reference class's default config on
// the meta device), F32 zeros from one shared buffer.
class ZeroFile final : public WeightFile {
 public:
  explicit ZeroFile(const nlohmann::json& tensors) {
    path_ = "synthetic:hunyuan_vae_full";
    uint64_t largest = 0;
    for (const auto& [name, shape] : tensors.items()) {
      TensorInfo info;
      info.name = name;
      info.type = &stored_type_of(DType::F32);
      info.shape = shape.get<std::vector<int64_t>>();
      info.numel = 1;
      for (int64_t d : info.shape) info.numel *= static_cast<uint64_t>(d);
      info.nbytes = info.numel * 4;
      largest = std::max(largest, info.nbytes);
      tensors_.push_back(std::move(info));
    }
    std::sort(tensors_.begin(), tensors_.end(),
              [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
    zeros_.assign(largest, 0);
  }
  std::string_view format() const override { return "synthetic"; }
  Expected<const uint8_t*> data(size_t) override { return zeros_.data(); }

 private:
  std::vector<uint8_t> zeros_;
};

// The full-size layout: config detection from the real keys and shapes, every
// tensor used, the parameter counts of the spec (100.3 M + 146.1 M), and the
// shapes of an encode and a (temporally tiled) decode at the real widths.
TEST(HunyuanVaeFullSize, LoadsTheReleasedLayoutAndRunsShapes) {
  std::ifstream in(kData + "full_layout.json");
  const nlohmann::json layout = nlohmann::json::parse(in);
  uint64_t enc = 0, dec = 0;
  for (const auto& [name, shape] : layout["tensors"].items()) {
    uint64_t n = 1;
    for (int64_t d : shape.get<std::vector<int64_t>>()) n *= static_cast<uint64_t>(d);
    if (name.starts_with("encoder.")) enc += n;
    if (name.starts_with("decoder.")) dec += n;
  }
  EXPECT_EQ(enc, 100341408u);
  EXPECT_EQ(dec, 146136067u);
  WeightStore store;
  ASSERT_TRUE(store.add(std::make_unique<ZeroFile>(layout["tensors"])).ok());
  const std::filesystem::path cfg_path =
      std::filesystem::temp_directory_path() /
      ("flick_hyvae_full_" + std::to_string(::getpid()) + ".json");
  std::ofstream(cfg_path) << layout["config"].dump();
  Expected<HunyuanVaeConfig> cfg = HunyuanVaeConfig::detect(store.root(), cfg_path.string());
  std::filesystem::remove(cfg_path);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->block_out_channels, (std::vector<int64_t>{128, 256, 512, 512}));
  EXPECT_EQ(cfg->latent_channels, 16);
  EXPECT_EQ(cfg->layers_per_block, 2);
  EXPECT_EQ(cfg->norm_groups, 32);
  EXPECT_EQ(cfg->scaling_factor, 0.476986f);
  EXPECT_TRUE(cfg->mid_attention);
  // BF16 packs half the bytes of F32 (0.5 GB); the shapes are the same.
  std::unique_ptr<Backend> be = make_cpu_backend();
  Expected<HunyuanVae> vae = HunyuanVae::load(store.root(), *cfg, *be, Precision::BF16);
  ASSERT_TRUE(vae.ok()) << vae.status().message();
  EXPECT_TRUE(store.root().check_all_used().ok()) << store.root().check_all_used().message();

  OwnedTensor x(DType::F32, Shape{1, 3, 9, 16, 16});
  std::memset(x.t.data, 0, x.t.nbytes());
  Expected<OwnedTensor> m = vae->encode(x.t);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->t.shape, Shape({1, 32, 3, 2, 2}));    // (9 - 1) / 4 + 1 latents, 8x smaller
  OwnedTensor z(DType::F32, Shape{1, 16, 5, 2, 2});  // 5 latents: 2 temporal tiles
  std::memset(z.t.data, 0, z.t.nbytes());
  Expected<OwnedTensor> y = vae->decode_latents(z.t);
  ASSERT_TRUE(y.ok()) << y.status().message();
  EXPECT_EQ(y->t.shape, Shape({1, 3, 17, 16, 16}));
  for (float v : to_f32(y->t)) ASSERT_EQ(v, 0.f);  // zero weights: zero output, no NaN
}

// A checkpoint lacking a tensor: the loader names it.
TEST(HunyuanVaeFullSize, MissingTensorIsNamed) {
  std::ifstream in(kData + "full_layout.json");
  nlohmann::json layout = nlohmann::json::parse(in);
  layout["tensors"].erase("decoder.up_blocks.2.resnets.0.conv_shortcut.conv.bias");
  WeightStore store;
  ASSERT_TRUE(store.add(std::make_unique<ZeroFile>(layout["tensors"])).ok());
  HunyuanVaeConfig cfg;  // the released config, decoder only
  cfg.block_out_channels = {128, 256, 512, 512};
  cfg.has_encoder = false;
  std::unique_ptr<Backend> be = make_ref_backend();
  Expected<HunyuanVae> vae = HunyuanVae::load(store.root(), cfg, *be, Precision::BF16);
  ASSERT_FALSE(vae.ok());
  EXPECT_NE(vae.status().message().find("decoder.up_blocks.2.resnets.0.conv_shortcut.conv.bias"),
            std::string::npos)
      << vae.status().message();
}

}  // namespace
}  // namespace flick
