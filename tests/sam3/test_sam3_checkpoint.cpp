// EfficientSAM3 checkpoint layouts and loading (models/sam3/sam3_layout.h,
// sam3_checkpoint.h) against the key tables tools/sam3_goldens.py derived
// from the reference classes (tests/data/sam3/*.txt.gz):
//  - the layouts flick generates for each variant equal the tables, name for
//    name, in state-dict order, shapes included;
//  - a full-size file in the released layout (all 2028 keys, zero-filled, so
//    sparse and instant) is recognised: RepViT-M0.9 + MobileCLIP-S1 with a
//    77-token context, 1277 image-path tensors, 751 skipped;
//  - the other variants (RepViT M1.1 / M2.3, MobileCLIP S0) and wrapper
//    prefixes are detected from shapes;
//  - a missing, mis-shaped or stray tensor gives one line naming it.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "models/sam3/detr_decoder.h"
#include "models/sam3/dot_scoring.h"
#include "models/sam3/fusion_encoder.h"
#include "models/sam3/geometry_cls.h"
#include "models/sam3/mobileclip_text.h"
#include "models/sam3/repvit_trunk.h"
#include "models/sam3/sam3_checkpoint.h"
#include "models/sam3/sam3_layout.h"
#include "models/sam3/sam3_neck.h"
#include "models/sam3/seg_head.h"
#include "runtime/backend.h"
#include "runtime/weights/pth_writer.h"
#include "runtime/weights/stored_type.h"
#include "runtime/weights/weight_store.h"

namespace flick {
namespace {

namespace fs = std::filesystem;

const std::string kTrunkPrefix = "detector.backbone.vision_backbone.trunk.model.";
const std::string kTextPrefix = "detector.backbone.language_backbone.";

// A gzip'd table: one `name dtype d0,d1,...` line per tensor.
Sam3Layout read_table(const std::string& file) {
  const std::string path = std::string(FLICK_TEST_DATA) + "/sam3/" + file + ".gz";
  gzFile f = gzopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
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

void expect_same(const Sam3Layout& got, const Sam3Layout& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(str(got[i]), str(want[i])) << "entry " << i;
}

// `table` with the entries under `prefix` replaced by `with` (in place of the first).
Sam3Layout replace_section(const Sam3Layout& table, const std::string& prefix,
                           const Sam3Layout& with) {
  Sam3Layout out;
  bool done = false;
  for (const auto& t : table) {
    if (!t.name.starts_with(prefix)) {
      out.push_back(t);
    } else if (!done) {
      out.insert(out.end(), with.begin(), with.end());
      done = true;
    }
  }
  return out;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "flick-sam3-XXXXXX").string();
    EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& rel) const { return (fs::path(path_) / rel).string(); }

 private:
  std::string path_;
};

// Writes `table` as a zero-filled .pth with every name prefixed by
// `root` ("model." = the released {"model": state_dict}, as flattened).
std::string write_zeros(const TempDir& dir, const Sam3Layout& table, const std::string& root,
                        const std::string& name = "ckpt.pth") {
  std::vector<StreamedTensor> ts;
  for (const auto& t : table) {
    StreamedTensor s;
    s.name = root + t.name;
    s.shape = t.shape;
    const StoredType* st = stored_type_by_name(t.dtype);
    EXPECT_NE(st, nullptr) << t.dtype;
    if (st->dtype)
      s.dtype = *st->dtype;
    else
      s.stored = st;
    ts.push_back(std::move(s));
  }
  const std::string path = dir.file(name);
  Status st = write_pth(path, ts);
  EXPECT_TRUE(st.ok()) << st.message();
  return path;
}

Expected<Sam3Checkpoint> inspect_file(const std::string& path, WeightStore& store) {
  FLICK_ASSIGN_OR_RETURN(store, WeightStore::open({path}));
  return Sam3Checkpoint::inspect(store);
}

const Sam3Layout& released() {
  static const Sam3Layout t = read_table("keys_efficient_sam3_repvit-m0_9_mobileclip_s1.txt");
  return t;
}

// ---- layouts equal the reference tables ----

TEST(Sam3Layout, ReleasedImagePathIsTheReferenceStateDict) {
  ASSERT_EQ(released().size(), 2028u);
  auto trunk = RepVitConfig::named("m0.9");
  auto text = MobileClipTextConfig::named("s1");
  ASSERT_TRUE(trunk.ok() && text.ok());
  const Sam3Layout image = sam3_image_layout(*trunk, *text, Sam3HeadConfig{});
  ASSERT_EQ(image.size(), 1277u);
  // The image model's state dict comes first in the released file.
  expect_same(image, Sam3Layout(released().begin(), released().begin() + 1277));
}

TEST(Sam3Layout, EveryTrunkAndTextVariant) {
  for (const char* v : {"m0_9", "m1_1", "m2_3"}) {
    SCOPED_TRACE(v);
    auto c = RepVitConfig::named(v);
    ASSERT_TRUE(c.ok()) << c.status().message();
    expect_same(c->layout(kTrunkPrefix), read_table(std::string("trunk_repvit_") + v + ".txt"));
  }
  for (const char* v : {"s0", "s1"}) {
    SCOPED_TRACE(v);
    auto c = MobileClipTextConfig::named(v);
    ASSERT_TRUE(c.ok()) << c.status().message();
    expect_same(c->layout(kTextPrefix), read_table(std::string("text_mobileclip_") + v + ".txt"));
  }
  EXPECT_FALSE(RepVitConfig::named("m3").ok());
  EXPECT_FALSE(MobileClipTextConfig::named("s2").ok());
}

// ---- full-size files ----

TEST(Sam3Checkpoint, ReleasedFileIsRecognised) {
  TempDir dir;
  const std::string path = write_zeros(dir, released(), "model.");
  WeightStore store;
  auto c = inspect_file(path, store);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->detector_prefix, "model.detector.");
  EXPECT_EQ(c->trunk_prefix, "model." + kTrunkPrefix);
  EXPECT_EQ(c->text_prefix, "model." + kTextPrefix);
  EXPECT_EQ(c->trunk.name, "m0_9");
  EXPECT_EQ(c->trunk.stem, 48);
  EXPECT_EQ(c->trunk.blocks.size(), 26u);
  EXPECT_EQ(c->trunk.out_channels(), 384);
  EXPECT_EQ(c->trunk.embed_dim, 1024);
  EXPECT_EQ(c->text.name, "s1");
  EXPECT_EQ(c->text.context, 77);  // errata: the released file holds the 77-row table
  EXPECT_EQ(c->text.layers, 12);
  EXPECT_EQ(c->text.heads, 8);
  EXPECT_EQ(c->text.dim, 512);
  EXPECT_EQ(c->text.vocab, 49408);
  EXPECT_EQ(c->head.queries, 200);
  EXPECT_EQ(c->head.d_model, 256);
  EXPECT_EQ(c->head.encoder_layers, 6);
  EXPECT_EQ(c->head.decoder_layers, 6);
  EXPECT_EQ(c->head.geometry_layers, 3);
  EXPECT_EQ(c->image_tensors, 1277u);
  EXPECT_EQ(c->skipped_tensors, 751u);  // SAM3 ViT 420 + sam2_convs 22 + tracker 309
  EXPECT_TRUE(store.check_all_used().ok());
}

// Every component loads from the released layout with the detected
// configuration and the reference's fixed sizes (1008 input, 72 grid, 200
// queries, 77 + 1 prompt tokens), planning its full-size buffers.
TEST(Sam3Checkpoint, ComponentsLoadFromTheReleasedLayout) {
  TempDir dir;
  Sam3Layout image(released().begin(), released().begin() + 1277);
  WeightStore store;
  auto c = inspect_file(write_zeros(dir, image, "model."), store);
  ASSERT_TRUE(c.ok()) << c.status().message();
  auto be = make_cpu_backend();
  const Precision p = Precision::BF16;
  const std::string& det = c->detector_prefix;
  const int64_t prompt = c->text.context + 1;  // 77 text tokens + the geometry CLS

  auto trunk = RepVitTrunk::load(store.view(c->trunk_prefix), *be, p, 1008);
  ASSERT_TRUE(trunk.ok()) << trunk.status().message();
  EXPECT_EQ(trunk->config().name, "m0_9");
  EXPECT_EQ(trunk->config().embed_size, 72);
  auto text = MobileClipText::load(store.view(c->text_prefix), *be, p);
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(text->config().heads, 8);
  EXPECT_EQ(text->config().context, 77);
  auto neck = Sam3Neck::load(store.view(det + "backbone.vision_backbone"), *be, p, 72);
  ASSERT_TRUE(neck.ok()) << neck.status().message();
  EXPECT_EQ(neck->config().in_channels, 1024);
  EXPECT_EQ(neck->config().d_model, 256);
  EXPECT_EQ(neck->position(0).shape, (Shape{1, 256, 288, 288}));
  auto geometry = GeometryCls::load(store.view(det + "geometry_encoder"), *be, p, 72);
  ASSERT_TRUE(geometry.ok()) << geometry.status().message();
  EXPECT_EQ(geometry->config().layers, 3);
  auto encoder = FusionEncoder::load(store.view(det + "transformer.encoder"), *be, p, 72, prompt);
  ASSERT_TRUE(encoder.ok()) << encoder.status().message();
  EXPECT_EQ(encoder->config().layers, 6);
  EXPECT_EQ(encoder->config().ffn, 2048);
  EXPECT_EQ(encoder->config().tokens, 5184);
  auto decoder = DetrDecoder::load(store.view(det + "transformer.decoder"), *be, p, 72, prompt);
  ASSERT_TRUE(decoder.ok()) << decoder.status().message();
  EXPECT_EQ(decoder->config().queries, 200);
  EXPECT_EQ(decoder->config().heads, 8);
  EXPECT_EQ(decoder->config().layers, 6);
  auto scoring = DotScoring::load(store.view(det + "dot_prod_scoring"), *be, p, 6 * 200, prompt);
  ASSERT_TRUE(scoring.ok()) << scoring.status().message();
  EXPECT_EQ(scoring->config().hidden, 2048);
  auto seg = SegHead::load(store.view(det + "segmentation_head"), *be, p, 72, 200, prompt);
  ASSERT_TRUE(seg.ok()) << seg.status().message();

  // The text encoder runs at full size on the tokens of an empty prompt
  // (SOT, EOT, padding): zero weights give a finite, zero-bias output.
  OwnedTensor tokens(DType::I32, {77});
  for (int i = 0; i < 77; ++i) tokens.t.ptr<int32_t>()[i] = 0;
  tokens.t.ptr<int32_t>()[0] = 49406;
  tokens.t.ptr<int32_t>()[1] = 49407;
  auto out = text->forward(tokens.t);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->shape, (Shape{1, 77, 256}));
}

TEST(Sam3Checkpoint, VariantsAndPrefixesAreDetected) {
  TempDir dir;
  // RepViT-M2.3 + MobileCLIP-S0, a bare state dict (no "model." wrapper).
  Sam3Layout t = replace_section(released(), kTrunkPrefix, read_table("trunk_repvit_m2_3.txt"));
  t = replace_section(t, kTextPrefix, read_table("text_mobileclip_s0.txt"));
  {
    WeightStore store;
    auto c = inspect_file(write_zeros(dir, t, "", "a.pth"), store);
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->trunk.name, "m2_3");
    EXPECT_EQ(c->trunk.out_channels(), 640);
    EXPECT_EQ(c->text.name, "s0");
    EXPECT_EQ(c->text.layers, 4);
    EXPECT_TRUE(c->text.repmixer_ends);
    EXPECT_EQ(c->detector_prefix, "detector.");
  }
  // RepViT-M1.1 under a student_trunk. wrapper, image path only (no tracker,
  // no SAM3 ViT), as the reference's _load_checkpoint also accepts.
  Sam3Layout m11 = read_table("trunk_repvit_m1_1.txt");
  for (auto& e : m11) e.name = kTrunkPrefix + "student_trunk." + e.name.substr(kTrunkPrefix.size());
  Sam3Layout image(released().begin(), released().begin() + 1277);
  image = replace_section(image, kTrunkPrefix, m11);
  {
    WeightStore store;
    auto c = inspect_file(write_zeros(dir, image, "", "b.pth"), store);
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->trunk.name, "m1_1");
    EXPECT_EQ(c->trunk_prefix, kTrunkPrefix + "student_trunk.");
    EXPECT_EQ(c->skipped_tensors, 0u);
  }
}

TEST(Sam3Checkpoint, EveryProblemNamesItsTensor) {
  TempDir dir;
  const std::string missing = "detector.transformer.decoder.layers.3.linear1.weight";
  const std::string reshaped =
      kTrunkPrefix + "backbone.model.features.5.channel_mixer.m.0.c.weight";
  const std::string stray = "detector.transformer.decoder.layers.3.linear9.weight";
  Sam3Layout t;
  for (auto e : released()) {
    if (e.name == missing) continue;
    if (e.name == reshaped) e.shape = {192, 64, 1, 1};
    t.push_back(e);
  }
  t.push_back({stray, "F32", {4}});
  WeightStore store;
  auto c = inspect_file(write_zeros(dir, t, "model."), store);
  ASSERT_FALSE(c.ok());
  const std::string& m = c.status().message();
  EXPECT_NE(m.find("3 problems"), std::string::npos) << m;
  EXPECT_NE(m.find("model." + missing + ": missing"), std::string::npos) << m;
  EXPECT_NE(
      m.find("model." + reshaped + ": expected shape [192, 96, 1, 1], file has [192, 64, 1, 1]"),
      std::string::npos)
      << m;
  EXPECT_NE(m.find("model." + stray + ": unexpected tensor"), std::string::npos) << m;
  EXPECT_NE(m.find("ckpt.pth"), std::string::npos) << m;
}

TEST(Sam3Checkpoint, MissingPartsAreNamed) {
  TempDir dir;
  {
    Sam3Layout t;
    for (const auto& e : released())
      if (!e.name.starts_with(kTextPrefix)) t.push_back(e);
    WeightStore store;
    auto c = inspect_file(write_zeros(dir, t, "", "notext.pth"), store);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("no MobileCLIP text encoder"), std::string::npos)
        << c.status().message();
  }
  {
    Sam3Layout t;
    const std::string pos = kTextPrefix + "encoder.positional_embedding.pos_embed.pos_embed";
    for (auto e : released()) {
      if (e.name == pos) e.shape = {77, 512};
      t.push_back(e);
    }
    WeightStore store;
    auto c = inspect_file(write_zeros(dir, t, "", "pos.pth"), store);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find(pos + ": expected a 4-d tensor, file has [77, 512]"),
              std::string::npos)
        << c.status().message();
  }
}

}  // namespace
}  // namespace flick
