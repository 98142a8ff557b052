// The composed EfficientSAM3 image model (models/sam3/sam3_image_model.h) and
// the synthetic checkpoints it is tested with (models/sam3/sam3_synth.h).
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "models/sam3/sam3_checkpoint.h"
#include "models/sam3/sam3_layout.h"
#include "models/sam3/sam3_synth.h"
#include "runtime/weights/weight_store.h"

namespace flick {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) {
  return std::string(FLICK_TEST_DATA) + "/sam3/" + name;
}

// A gzip'd key table: one `name dtype d0,d1,...` line per tensor.
Sam3Layout read_table(const std::string& file) {
  gzFile f = gzopen(fixture(file).c_str(), "rb");
  EXPECT_NE(f, nullptr) << file;
  std::string text;
  char buf[1 << 16];
  for (int n; f && (n = gzread(f, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  if (f) gzclose(f);
  std::istringstream in(text);
  Sam3Layout out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    Sam3LayoutTensor t;
    std::string dims;
    ls >> t.name >> t.dtype >> dims;
    std::stringstream ds(dims);
    for (std::string d; std::getline(ds, d, ',');) t.shape.push_back(std::stoll(d));
    out.push_back(t);
  }
  return out;
}

std::string str(const Sam3LayoutTensor& t) {
  std::string s = t.name + " " + t.dtype + " ";
  for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? "," : "") + std::to_string(t.shape[i]);
  return s;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "flick-sam3-model-XXXXXX").string();
    EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& rel) const { return (fs::path(path_) / rel).string(); }

 private:
  std::string path_;
};

// ---- synthetic checkpoints ----

TEST(Sam3Synth, FullLayoutIsTheReleasedFile) {
  const Sam3Layout want = read_table("keys_efficient_sam3_repvit-m0_9_mobileclip_s1.txt.gz");
  const Sam3Layout got = sam3_released_layout(sam3_synth_dims(Sam3SynthSize::kFull));
  ASSERT_EQ(want.size(), 2028u);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(str(got[i]), str(want[i])) << "entry " << i;
  EXPECT_EQ(sam3_released_layout(sam3_synth_dims(Sam3SynthSize::kFull), false).size(), 1277u);
}

TEST(Sam3Synth, ValuesAreTorchRandnScaled) {
  // Oracle: torch 2.15, torch.randn(shape, generator=torch.Generator().manual_seed(seed + i))
  // * std + offset in fp32. A LayerNorm weight (1 + 0.1 g; 3 elements: torch's
  // scalar path) at seed 7, index 5, and a linear weight (g / sqrt(8); the
  // vectorised path with a redrawn last block) at seed 7, index 2.
  const Sam3LayoutTensor ln{"detector.x.norm.weight", "F32", {3}};
  float v[32];
  sam3_synth_values(7, 5, ln, v);
  EXPECT_EQ(v[0], 0x1.f50d8p-1f);
  EXPECT_EQ(v[1], 0x1.b972c4p-1f);
  EXPECT_EQ(v[2], 0x1.fd341cp-1f);
  const Sam3LayoutTensor w{"detector.x.linear1.weight", "F32", {4, 8}};
  sam3_synth_values(7, 2, w, v);
  EXPECT_EQ(v[0], -0x1.82702cp-2f);
  EXPECT_EQ(v[17], 0x1.2c1440p-2f);
  EXPECT_EQ(v[31], -0x1.00341ep-1f);
  // The unused parts are zero; BatchNorm weights 0.5 + 0.1 g.
  EXPECT_EQ(sam3_synth_scale("tracker.no_mem_embed", {1, 1, 256}).std, 0.0);
  EXPECT_EQ(
      sam3_synth_scale("detector.backbone.vision_backbone.trunk.blocks.0.norm1.weight", {1024}).std,
      0.0);
  EXPECT_EQ(sam3_synth_scale("detector.backbone.vision_backbone.trunk.model.backbone.model."
                             "features.1.token_mixer.0.bn.weight",
                             {48})
                .offset,
            0.5);
}

TEST(Sam3Synth, TinyCheckpointIsRecognised) {
  TempDir dir;
  const std::string path = dir.file("tiny.pth");
  Sam3SynthOptions o;
  o.size = Sam3SynthSize::kTiny;
  o.seed = 3;
  ASSERT_TRUE(write_sam3_synth(path, o).ok());
  auto store = WeightStore::open({path});
  ASSERT_TRUE(store.ok()) << store.status().message();
  auto c = Sam3Checkpoint::inspect(*store);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->detector_prefix, "model.detector.");
  EXPECT_EQ(c->skipped_tensors, 751u);
  EXPECT_EQ(c->head.d_model, 32);
  EXPECT_EQ(c->head.queries, 20);
  EXPECT_EQ(c->text.context, 77);
  EXPECT_EQ(c->text.vocab, 49408);
  EXPECT_EQ(c->trunk.blocks.size(), 7u);
  EXPECT_TRUE(store->check_all_used().ok());
  // The values are the scheme's, tensor by tensor (index = layout order).
  const Sam3Layout layout = sam3_released_layout(sam3_synth_dims(Sam3SynthSize::kTiny));
  for (size_t i : {size_t{0}, size_t{7}, layout.size() / 2}) {
    const Sam3LayoutTensor& t = layout[i];
    if (t.dtype != "F32") continue;
    auto got = store->get("model." + t.name, DType::F32);
    ASSERT_TRUE(got.ok()) << t.name;
    std::vector<float> want(static_cast<size_t>(got->numel()));
    sam3_synth_values(3, i, t, want.data());
    for (size_t k = 0; k < want.size(); ++k) ASSERT_EQ(got->ptr<float>()[k], want[k]) << t.name;
  }
}

}  // namespace
}  // namespace flick
