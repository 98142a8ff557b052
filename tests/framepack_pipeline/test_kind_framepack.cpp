// The framepack-i2v kind: [[pipeline]] and job keys read as flick validate
// reads them (every bad value an error at its key), and one job of each
// variant run end to end through the kind on the tiny fixture folder
// (tools/framepack_pipeline_goldens.py), its frames against the reference
// worker's video; the prompt encoding is written to the prompt cache once
// and reused by the second job.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "jobs/config.h"
#include "jobs/job.h"
#include "models/pipelines/framepack.h"
#include "runtime/weights/weight_store.h"
#include "tests/framepack_pipeline/framepack_fixture.h"
#include "tests/io/collecting_sink.h"
#include "tests/jobs/jobs_test_util.h"

namespace flick {
namespace {

namespace fsys = std::filesystem;
using testing::framepack_fixture_input;
using testing::framepack_fixture_pipeline;
const std::string& kData = testing::kFramePackFixture;

// Peak resident memory of this process (VmHWM), in MiB.
double peak_rss_mib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

class FramePackKindTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fsys::create_directories(dir_ / "in");
    fsys::create_directories(dir_ / "out");
    fsys::copy_file(kData + "input.png", dir_ / "in/start.png");
  }

  std::string pipeline_entry(const std::string& extra) const {
    return framepack_fixture_pipeline(dir_ / "cache") + extra;
  }

  std::optional<DaemonConfig> config(const std::string& extra) {
    cdiag_ = Diagnostics("flick.toml");
    return parse_config("[daemon]\nspool = \"/x\"\ninput_roots = [\"" + (dir_ / "in") +
                            "\"]\noutput_roots = [\"" + (dir_ / "out") + "\"]\n" +
                            pipeline_entry(extra),
                        "flick.toml", "", cdiag_);
  }

  void expect_config_error(const std::string& extra, const std::string& key,
                           const std::string& text) {
    std::optional<DaemonConfig> c = config(extra);
    ASSERT_FALSE(c) << "accepted:\n" << extra;
    // Every error is reported (sorted by line): one of them is this one.
    bool found = false;
    for (const Diagnostic& d : cdiag_.all()) {
      found |= d.key.find(key) != std::string::npos && d.message.find(text) != std::string::npos;
    }
    EXPECT_TRUE(found) << key << " / " << text << " not in:\n" << cdiag_.status().message();
  }

  std::string job(const std::string& input_extra) const {
    return "version = 1\npipeline = \"fp\"\n[input]\nimage = \"" + (dir_ / "in/start.png") +
           "\"\n" + framepack_fixture_input() + input_extra + "[output]\ndir = \"" +
           (dir_ / "out/j") + "\"\nvideo = { file = \"j.mp4\" }\n";
  }

  std::optional<Job> parse(const DaemonConfig& c, const std::string& body) {
    jdiag_ = Diagnostics("j.toml");
    return parse_job({"j.toml", "j", body}, c, jdiag_);
  }

  void expect_job_error(const DaemonConfig& c, const std::string& body, const std::string& key,
                        const std::string& text) {
    std::optional<Job> j = parse(c, body);
    ASSERT_FALSE(j) << "accepted:\n" << body;
    const Diagnostic& d = jdiag_.first();
    EXPECT_EQ(d.key, key) << d.message;
    EXPECT_NE(d.message.find(text), std::string::npos) << d.message;
  }

  testing::ScratchDir dir_;
  Diagnostics cdiag_{""}, jdiag_{""};
};

TEST_F(FramePackKindTest, PipelineKeysAreChecked) {
  ASSERT_TRUE(config("precision = \"f32\"\nvariant = \"f1\"\n")) << cdiag_.status().message();
  // fp8 / int8 quantize the DiT and the LLaMA (framepack.h).
  ASSERT_TRUE(config("precision = \"int8\"\n")) << cdiag_.status().message();
  ASSERT_TRUE(config("precision = \"fp8\"\n")) << cdiag_.status().message();
  expect_config_error("precision = \"f16\"\n", "precision", "");
  expect_config_error("variant = \"f2\"\n", "variant", "");
  expect_config_error("resolution = 512\n", "resolution", "640");
  expect_config_error("resolution = 640\n", "buckets", "not both");
  expect_config_error("vae = \"relative/vae\"\n", "vae", "absolute");
  expect_config_error("backend = \"cuda\"\n", "backend", "CUDA");
  expect_config_error("keep_dit_loaded = \"no\"\n", "keep_dit_loaded", "");
  expect_config_error("image_encoders = \"/x\"\n", "image_encoders", "image_encoder");
  ASSERT_TRUE(config("keep_dit_loaded = false\nvae_tiling = true\n")) << cdiag_.status().message();
}

TEST_F(FramePackKindTest, BucketsMustBeMultiplesOf16) {
  cdiag_ = Diagnostics("flick.toml");
  std::optional<DaemonConfig> c = parse_config(
      "[daemon]\nspool = \"/x\"\ninput_roots = [\"" + (dir_ / "in") + "\"]\noutput_roots = [\"" +
          (dir_ / "out") +
          "\"]\n[[pipeline]]\nname = \"fp\"\nkind = \"framepack-i2v\"\nweights = \"/w\"\n"
          "buckets = [[32, 40]]\n",
      "flick.toml", "", cdiag_);
  ASSERT_FALSE(c);
  EXPECT_NE(cdiag_.first().key.find("buckets"), std::string::npos);
  EXPECT_NE(cdiag_.first().message.find("multiple of 16"), std::string::npos);
}

TEST_F(FramePackKindTest, JobKeysAreChecked) {
  std::optional<DaemonConfig> c = config("");
  ASSERT_TRUE(c) << cdiag_.status().message();
  std::optional<Job> good = parse(*c, job(""));
  ASSERT_TRUE(good) << jdiag_.status().message();
  EXPECT_EQ(good->kind, "framepack-i2v");
  EXPECT_NE(good->prepared->summary().find("original: 73 frames (2 sections, 3 steps)"),
            std::string::npos)
      << good->prepared->summary();
  expect_job_error(*c, job("end_image = \"" + (dir_ / "in/start.png") + "\"\n"), "input.end_image",
                   "97fe5db");
  expect_job_error(*c, job("variant = \"f2\"\n"), "input.variant", "");
  expect_job_error(*c, job("teacache = 1\n"), "input.teacache", "");
  expect_job_error(*c, job("stepz = 4\n"), "input.stepz", "steps");  // did you mean
  expect_job_error(*c, job("steps = 0\n").replace(job("").find("steps = 3\n"), 10, ""),
                   "input.steps", "");
  std::string no_prompt = job("");
  no_prompt.erase(no_prompt.find("prompt = "), no_prompt.find('\n', no_prompt.find("prompt = ")) -
                                                   no_prompt.find("prompt = ") + 1);
  expect_job_error(*c, no_prompt, "input.prompt", "");
  std::string long_video = job("");
  long_video.replace(long_video.find("seconds = 2"), 11, "seconds = 121");
  expect_job_error(*c, long_video, "input.seconds", "");
}

// One job per variant through the kind, f32 (the golden's precision): the
// frames within the pipeline test's bound (<= 1 level on <= 2 % of values).
TEST_F(FramePackKindTest, JobsRunEndToEndAndReuseThePromptCache) {
  Expected<WeightStore> golden = WeightStore::open({kData + "goldens.safetensors"});
  ASSERT_TRUE(golden.ok()) << golden.status().message();
  fsys::file_time_type cached_at;
  for (const char* variant : {"original", "f1"}) {
    // A new instance per job: the second reads the encoding from the disk
    // cache (an instance also keeps its last prompt in memory).
    std::optional<DaemonConfig> c = config("precision = \"f32\"\n");
    ASSERT_TRUE(c) << cdiag_.status().message();
    ASSERT_TRUE(load_pipelines(*c, nullptr).ok());
    std::optional<Job> j = parse(*c, job("variant = \"" + std::string(variant) + "\"\n"));
    ASSERT_TRUE(j) << jdiag_.status().message();
    testing::CollectingSink sink;
    RunContext ctx;
    int64_t progress_calls = 0;
    ctx.progress = [&](int64_t, int64_t) { ++progress_calls; };
    Status s = j->prepared->run(sink, ctx);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(progress_calls, 2);
    const Tensor want = *golden->get(std::string(variant) + ".frames");  // [T, H, W, 3]
    ASSERT_EQ(static_cast<int64_t>(sink.frames.size()), want.dim(0));
    EXPECT_EQ(sink.fps, 30);
    int64_t differ = 0, total = 0, worst = 0;
    for (const Frame& f : sink.frames) {
      ASSERT_EQ(f.rgb.size(), static_cast<size_t>(want.dim(1) * want.dim(2) * 3));
      for (uint8_t v : f.rgb) {
        const int64_t d = std::abs(int{v} - int{want.ptr<uint8_t>()[total++]});
        differ += d != 0;
        worst = std::max(worst, d);
      }
    }
    EXPECT_LE(worst, 1) << variant;
    EXPECT_LE(differ, total / 50) << variant;
    const auto details = j->prepared->status_details();
    EXPECT_EQ(details.at(0).second, variant);
    // One cache file, written by the first job and only read by the second
    // (a miss would rewrite it).
    std::vector<fsys::path> files;
    for (const auto& e : fsys::directory_iterator(dir_ / "cache")) files.push_back(e.path());
    ASSERT_EQ(files.size(), 1u);
    EXPECT_EQ(files[0].extension(), ".fpprompt");
    if (std::string(variant) == "original") {
      cached_at = fsys::last_write_time(files[0]);
    } else {
      EXPECT_EQ(fsys::last_write_time(files[0]), cached_at);
    }
  }
  std::printf("framepack-i2v tiny jobs: peak RSS %.0f MiB\n", peak_rss_mib());
}

}  // namespace
}  // namespace flick
