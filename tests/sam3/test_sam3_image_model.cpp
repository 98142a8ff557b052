// The composed EfficientSAM3 image model (models/sam3/sam3_image_model.h) and
// the synthetic checkpoints it is tested with (models/sam3/sam3_synth.h).
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "models/sam3/sam3_checkpoint.h"
#include "models/sam3/sam3_image_model.h"
#include "models/sam3/sam3_layout.h"
#include "models/sam3/sam3_synth.h"
#include "runtime/backend.h"
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

// ---- the composed model against the reference (tools/sam3_image_goldens.py) ----

std::string vocab_path() {
  return std::string(FLICK_SOURCE_DIR) + "/models/sam3/data/bpe_simple_vocab_16e6.txt.gz";
}

std::vector<float> floats(const Tensor& t) {
  OwnedTensor c(DType::F32, t.shape);
  make_ref_backend()->copy(t, c.t);
  return std::vector<float>(c.t.ptr<float>(), c.t.ptr<float>() + t.numel());
}

struct Err {
  double max_abs = 0, mean_abs = 0, ref_max = 0;
  double max_rel() const { return max_abs / ref_max; }
  double mean_rel() const { return mean_abs / ref_max; }
};

Err error(const std::vector<float>& got, const std::vector<float>& want) {
  Err e;
  EXPECT_EQ(got.size(), want.size());
  if (got.size() != want.size() || want.empty()) return e;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(d <= e.max_abs)) e.max_abs = d;  // NaN propagates
    e.mean_abs += d;
    e.ref_max = std::max(e.ref_max, std::fabs(static_cast<double>(want[i])));
  }
  e.mean_abs /= static_cast<double>(got.size());
  return e;
}

// `got` as the golden stores it: whole, or (with "<name>.shape") the
// elements k * step of the flattened tensor, step = ceil(numel / 4096).
std::vector<float> as_stored(const std::string& name, const Tensor& got, const WeightView& g) {
  std::vector<float> all = floats(got);
  auto shape = g.get(name + ".shape", DType::I32);
  if (!shape.ok()) return all;
  std::vector<int64_t> want_shape;
  for (int64_t i = 0; i < shape->numel(); ++i) want_shape.push_back(shape->ptr<int32_t>()[i]);
  EXPECT_EQ(got.shape.to_vector(), want_shape) << name;
  const int64_t n = got.numel(), step = std::max<int64_t>(1, (n + 4095) / 4096);
  std::vector<float> sub;
  for (int64_t k = 0; k < n; k += step) sub.push_back(all[static_cast<size_t>(k)]);
  return sub;
}

struct Tol {
  double max_rel, mean_rel;
};

void expect_close(const std::string& name, const std::vector<float>& got,
                  const std::vector<float>& want, Tol tol) {
  const Err e = error(got, want);
  if (std::getenv("FLICK_SAM3_PRINT_ERRORS"))
    std::printf("  %-18s max|err|/max|ref| %.2e  mean %.2e  (max|ref| %.3g)\n", name.c_str(),
                e.max_rel(), e.mean_rel(), e.ref_max);
  EXPECT_GT(e.ref_max, 0.0) << name;
  EXPECT_LE(e.max_abs, tol.max_rel * e.ref_max)
      << name << ": max |err| " << e.max_abs << ", max |ref| " << e.ref_max;
  // The mean bound is for many-element tensors: a scalar (a presence logit)
  // has mean = max and is held to the max bound.
  const double mean_rel = got.size() < 16 ? tol.max_rel : tol.mean_rel;
  EXPECT_LE(e.mean_abs, mean_rel * e.ref_max)
      << name << ": mean |err| " << e.mean_abs << ", max |ref| " << e.ref_max;
}

std::vector<float> golden(const WeightView& g, const std::string& name) {
  auto t = g.get(name, DType::F32);
  EXPECT_TRUE(t.ok()) << name;
  return t.ok() ? floats(*t) : std::vector<float>{};
}

// The released architecture with sam3_synth's values (seed 2026, the
// goldens'), written once for the suite: 0.5 GB of fp32 and 1.8 GB of holes.
class Sam3ImageModelGolden : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    path_ = dir_->file("efficient_sam3_synth.pth");
    Sam3SynthOptions o;
    o.size = Sam3SynthSize::kFull;
    o.seed = 2026;
    const Status st = write_sam3_synth(path_, o);
    ASSERT_TRUE(st.ok()) << st.message();
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string path_;
  static TempDir* dir_;
};
std::string Sam3ImageModelGolden::path_;
TempDir* Sam3ImageModelGolden::dir_ = nullptr;

FrameView frame_of(const Tensor& hwc) {  // U8 [H, W, 3]
  return {static_cast<int>(hwc.dim(1)), static_cast<int>(hwc.dim(0)), 3 * hwc.dim(1),
          hwc.ptr<uint8_t>()};
}

std::string prompt_of(const WeightView& g) {
  auto t = g.get("prompt_text", DType::U8);
  EXPECT_TRUE(t.ok());
  return t.ok() ? std::string(t->ptr<char>(), static_cast<size_t>(t->numel())) : std::string();
}

struct ModelRun {
  std::map<std::string, std::vector<float>> taps;
  std::map<std::string, Shape> shapes;
  Sam3Detections det;
};

// Loads the synthetic checkpoint at `size`, runs the golden's frame and
// prompt (threshold 0: every query), records every tap as the golden stores it.
void run_model(const std::string& weights, const WeightView& g, Precision p, int64_t size,
               ModelRun& out) {
  auto be = make_cpu_backend();
  Sam3Options o;
  o.weights = weights;
  o.vocab = vocab_path();
  o.precision = p;
  o.image_size = size;
  auto model = Sam3ImageModel::load(o, *be);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto frame = g.get("frame", DType::U8);
  ASSERT_TRUE(frame.ok());
  auto tap = [&](std::string_view name, const Tensor& t) {
    const std::string n(name);
    out.shapes[n] = t.shape;
    out.taps[n] = as_stored(n, t, g);
  };
  ASSERT_TRUE((*model)->encode_image(frame_of(*frame), tap).ok());
  auto det = (*model)->detect(prompt_of(g), 0.0f, tap);
  ASSERT_TRUE(det.ok()) << det.status().message();
  out.det = std::move(*det);
}

TEST_F(Sam3ImageModelGolden, EveryTapAt224F32) {
  auto store = WeightStore::open({fixture("sam3_image_224.safetensors")});
  ASSERT_TRUE(store.ok()) << store.status().message();
  const WeightView g = store->root();
  ModelRun r;
  run_model(path_, g, Precision::F32, 224, r);
  ASSERT_FALSE(HasFatalFailure());
  // The tokens and pixels are exact (the same BPE vocabulary, torch's resize).
  auto tokens = g.get("tokens", DType::I32);
  ASSERT_TRUE(tokens.ok());
  ASSERT_EQ(r.taps["tokens"].size(), 77u);
  for (int i = 0; i < 77; ++i) EXPECT_EQ(r.taps["tokens"][size_t(i)], tokens->ptr<int32_t>()[i]);
  EXPECT_EQ(r.taps["pixels"], golden(g, "pixels"));
  const Tol tol{1e-4, 1e-5};
  for (const char* name : {"trunk", "neck.level0", "neck.level1", "neck.level2", "text", "prompt",
                           "memory", "logits", "scores", "boxes", "mask_logits"})
    expect_close(name, r.taps[name], golden(g, name), tol);
  for (int l = 0; l < 6; ++l)
    for (const char* what : {"hs", "ref", "presence"}) {
      const std::string n = "decoder." + std::string(what) + std::to_string(l);
      expect_close(n, r.taps[n], golden(g, n), tol);
    }
  // Detections at the frame's size: every query (threshold 0).
  const std::vector<float> want_scores = golden(g, "det.scores");
  ASSERT_EQ(r.det.score.size(), want_scores.size());
  expect_close("det.scores", r.det.score, want_scores, tol);
  std::vector<float> boxes;
  for (const auto& b : r.det.box_xyxy) boxes.insert(boxes.end(), b.begin(), b.end());
  expect_close("det.boxes", boxes, golden(g, "det.boxes"), tol);
  expect_close("det.mask_prob", as_stored("det.mask_prob", r.det.mask_prob.t, g),
               golden(g, "det.mask_prob"), tol);
}

}  // namespace
}  // namespace flick
