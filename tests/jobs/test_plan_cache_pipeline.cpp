// The plan cache in a real load: the INT8 Matrix-Game 2.0 pipeline (tiny
// synthetic checkpoint of tests/data/mg2/weights) loaded without a cache, with
// a cold cache and with a warm one makes the same video bit for bit; the warm
// load really uses the entries (a doctored entry changes the video), and a
// damaged entry is rebuilt with a warning.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "models/pipelines/matrix_game.h"
#include "runtime/cpu/onednn_info.h"
#include "runtime/plan_cache.h"
#include "tests/io/collecting_sink.h"

namespace flick {
namespace {

namespace fs = std::filesystem;
using testing::CollectingSink;

Mg2Options tiny_int8(const std::string& cache) {
  Mg2Options o;
  o.weights = std::string(FLICK_TEST_DATA) + "/mg2/weights";
  o.mode = Mg2Mode::kUniversal;
  o.precision = Precision::INT8;
  o.width = 48;
  o.height = 32;
  o.dit_head_dim = 32;  // the tiny checkpoint's heads (tests/models/test_mg2_pipeline.cpp)
  o.clip_head_dim = 16;
  o.plan_cache = cache;
  return o;
}

// The video of one 3-latent job (9 frames) as raw RGB.
std::vector<std::vector<uint8_t>> video(const Mg2Options& o) {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  Expected<std::unique_ptr<Mg2Pipeline>> p = Mg2Pipeline::load(o, *backend);
  EXPECT_TRUE(p.ok()) << p.status().message();
  if (!p.ok()) return {};
  Mg2Input in;
  in.image.width = o.width;
  in.image.height = o.height;
  in.image.rgb.resize(static_cast<size_t>(3 * o.width * o.height));
  for (size_t i = 0; i < in.image.rgb.size(); ++i) in.image.rgb[i] = static_cast<uint8_t>(i * 7);
  in.seed = 11;
  in.latent_frames = 3;
  const int64_t t = mg2_video_frames(3);
  in.keyboard.assign(static_cast<size_t>(t * 4), 0.f);
  for (size_t i = 0; i < in.keyboard.size(); i += 4) in.keyboard[i] = 1.f;  // w held
  in.mouse.assign(static_cast<size_t>(t * 2), 0.1f);
  CollectingSink sink;
  const Status s = (*p)->run(in, sink, RunContext{});
  EXPECT_TRUE(s.ok()) << s.message();
  std::vector<std::vector<uint8_t>> out;
  for (const Frame& f : sink.frames) out.push_back(f.rgb);
  return out;
}

std::map<std::string, ino_t> inodes(const std::string& dir) {
  std::map<std::string, ino_t> m;
  for (const auto& e : fs::directory_iterator(dir)) {
    struct stat st;
    if (stat(e.path().c_str(), &st) == 0) m[e.path().filename().string()] = st.st_ino;
  }
  return m;
}

class PlanCachePipeline : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu::cpu_supports(Precision::INT8)) GTEST_SKIP() << "no AVX-512 VNNI: no INT8 pipeline";
    char tmpl[] = "/tmp/flick-plan-pipe-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/cache/plans";  // neither level exists yet
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }
  std::string root_, dir_;
};

TEST_F(PlanCachePipeline, ColdAndWarmLoadsMakeTheSameVideoBitForBit) {
  const auto uncached = video(tiny_int8(""));
  ASSERT_EQ(uncached.size(), 9u);
  const auto cold = video(tiny_int8(dir_));
  EXPECT_EQ(cold, uncached);
  // Every INT8 linear of the DiT (fused q/k/v included) and of CLIP's
  // blocks, and every convolution of the VAE, packed
  // (runtime/cpu/conv_cache.h).
  Expected<std::vector<PlanEntryInfo>> l = PlanCache(dir_).list();
  ASSERT_TRUE(l.ok());
  int dit = 0, clip = 0, vae = 0;
  for (const PlanEntryInfo& e : *l) {
    EXPECT_TRUE(e.problem.empty()) << e.file << ": " << e.problem;
    dit += e.file.rfind("mg2-universal-dit-", 0) == 0;
    clip += e.file.rfind("mg2-clip-", 0) == 0;
    if (e.file.rfind("mg2-vae-", 0) == 0) {
      ++vae;
      EXPECT_NE(e.key.find("kind=packed-conv-v1 onednn "), std::string::npos) << e.key;
    }
    EXPECT_NE(e.key.find("isa="), std::string::npos) << e.key;
    EXPECT_NE(e.key.find("mtime_ns="), std::string::npos) << e.key;
  }
  EXPECT_GT(dit, 0);
  EXPECT_GT(clip, 0);
  EXPECT_GT(vae, 0);
  EXPECT_EQ(static_cast<int>(l->size()), dit + clip + vae);
  const auto before = inodes(dir_);
  const auto warm = video(tiny_int8(dir_));
  EXPECT_EQ(warm, uncached);
  EXPECT_EQ(inodes(dir_), before);  // nothing rewritten: every entry was a hit
}

// `flick synth --size tiny` weights have the real head sizes and a VAE of
// the released layout: its packed convolution entries are bit-exact too,
// BF16 and (vae_precision = "int8") INT8 alike.
TEST_F(PlanCachePipeline, SynthWeightsWithVaeEntriesAreBitExact) {
  const std::string weights = root_ + "/mg2";
  const int rc = std::system((std::string(FLICK_BINARY) + " synth --size tiny --mode universal " +
                              weights + " > /dev/null 2>&1")
                                 .c_str());
  ASSERT_EQ(rc, 0);
  Mg2Options o = tiny_int8("");
  o.weights = weights;
  o.dit_head_dim = 0;  // the released sizes
  o.clip_head_dim = 0;
  const auto uncached = video(o);
  ASSERT_EQ(uncached.size(), 9u);
  o.plan_cache = dir_;
  EXPECT_EQ(video(o), uncached);  // cold
  int vae = 0;
  Expected<std::vector<PlanEntryInfo>> l = PlanCache(dir_).list();
  ASSERT_TRUE(l.ok());
  for (const PlanEntryInfo& e : *l) vae += e.file.rfind("mg2-vae-", 0) == 0;
  EXPECT_GT(vae, 0);
  const auto before = inodes(dir_);
  EXPECT_EQ(video(o), uncached);  // warm
  EXPECT_EQ(inodes(dir_), before);

  // The INT8 VAE: its residual blocks' convs are INT8 entries (s8 weights,
  // scales, oneDNN's blocks), the others BF16; a second pipeline
  // configuration in the same cache evicts none of the first's entries.
  o.vae_precision = Precision::INT8;
  o.plan_cache.clear();
  const auto uncached8 = video(o);
  ASSERT_EQ(uncached8.size(), 9u);
  o.plan_cache = dir_;
  EXPECT_EQ(video(o), uncached8);  // cold for the INT8 convs
  l = PlanCache(dir_).list();
  ASSERT_TRUE(l.ok());
  int int8 = 0;
  for (const PlanEntryInfo& e : *l)
    int8 += e.file.rfind("mg2-vae-", 0) == 0 && e.key.find("onednn-u8s8 int8") != std::string::npos;
  EXPECT_GT(int8, 0);
  const auto before8 = inodes(dir_);
  EXPECT_EQ(video(o), uncached8);  // warm
  EXPECT_EQ(inodes(dir_), before8);
  for (const auto& [file, ino] : before) EXPECT_EQ(before8.count(file), 1u) << file;
  o.vae_precision = Precision::BF16;
  EXPECT_EQ(video(o), uncached);  // the BF16 entries still there, still hits
  EXPECT_EQ(inodes(dir_), before8);
}

TEST_F(PlanCachePipeline, AWarmLoadUsesTheEntriesAndRebuildsADamagedOne) {
  const auto uncached = video(tiny_int8(dir_));  // cold: fills the cache
  ASSERT_EQ(uncached.size(), 9u);
  PlanCache cache(dir_);
  Expected<std::vector<PlanEntryInfo>> l = cache.list();
  ASSERT_TRUE(l.ok());
  // A DiT self-attention entry rewritten (same key, valid file) with its
  // weights negated: a load that reads the entry makes another video.
  const PlanEntryInfo* qkv = nullptr;
  for (const PlanEntryInfo& e : *l)
    if (e.file.find("dit") != std::string::npos &&
        e.file.find("blocks.0.self_attn.q") != std::string::npos)
      qkv = &e;
  ASSERT_NE(qkv, nullptr);
  const std::string name = qkv->file.substr(0, qkv->file.size() - 5);  // less ".plan"
  std::optional<PlanEntry> entry = cache.load(name, qkv->key);
  ASSERT_TRUE(entry.has_value());
  // The CPU backend's entry is the packed linear (runtime/cpu/linear_cache.h):
  // meta, then the packed int8 weights (AMX tiles or oneDNN's blocks; as
  // bytes, negated in any layout), then the rest as stored.
  std::vector<Tensor> doctored = entry->tensors();
  ASSERT_GE(doctored.size(), 2u);
  const Tensor& packed = doctored[1];
  ASSERT_EQ(packed.dtype, DType::U8);
  OwnedTensor w(DType::U8, packed.shape);
  for (int64_t i = 0; i < w.t.numel(); ++i)
    w.t.ptr<int8_t>()[i] = static_cast<int8_t>(-packed.ptr<const int8_t>()[i]);
  doctored[1] = w.t;
  ASSERT_TRUE(cache.store(name, qkv->key, doctored).ok());
  EXPECT_NE(video(tiny_int8(dir_)), uncached);
  // The same entry damaged (its last byte flipped): a warning naming it,
  // rebuilt from the checkpoint, the video right again.
  const std::string path = dir_ + "/" + qkv->file;
  {
    FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, -1, SEEK_END);
    const int c = std::fgetc(f);
    std::fseek(f, -1, SEEK_END);
    std::fputc(c ^ 0x40, f);
    std::fclose(f);
  }
  ::testing::internal::CaptureStderr();
  const auto rebuilt = video(tiny_int8(dir_));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rebuilt, uncached);
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_NE(err.find("rebuilding"), std::string::npos) << err;
  // ... and the rebuilt entry is whole again.
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(cache.load(name, qkv->key).has_value());
  ::testing::internal::GetCapturedStderr();
  // Deleting the cache is safe: the next load rebuilds it.
  ASSERT_TRUE(cache.clear().ok());
  EXPECT_EQ(video(tiny_int8(dir_)), uncached);
  EXPECT_FALSE(cache.list()->empty());
}

}  // namespace
}  // namespace flick
