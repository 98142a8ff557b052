#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "jobs/job.h"
#include "jobs_test_util.h"

namespace flick {
namespace {

class JobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(testing::write_png_file(dir_ / ("in/shot/f" + std::to_string(i) + ".png"), 8, 6,
                                          testing::pattern(8, 6, i)));
    }
    ASSERT_TRUE(testing::write_png_file(dir_ / "in/odd/a.png", 8, 6, testing::pattern(8, 6, 0)));
    ASSERT_TRUE(testing::write_png_file(dir_ / "in/odd/b.png", 4, 4, testing::pattern(4, 4, 0)));
    ASSERT_TRUE(testing::write_png_file(dir_ / "secret/s.png", 8, 6, testing::pattern(8, 6, 0)));
    ::symlink((dir_ / "secret").c_str(), (dir_ / "in/link").c_str());
    std::filesystem::create_directories(dir_ / "out");
    Diagnostics d("flick.toml");
    std::optional<DaemonConfig> c = parse_config(
        "[daemon]\nspool = \"/x\"\ninput_roots = [\"" + (dir_ / "in") + "\"]\noutput_roots = [\"" +
            (dir_ / "out") + "\"]\n[[pipeline]]\nname = \"encode\"\nkind = \"encode\"\n",
        "flick.toml", "", d);
    ASSERT_TRUE(c) << d.status().message();
    config_ = std::move(*c);
  }

  // A good job with `replace` applied to its text ({{IN}} / {{OUT}} expand).
  std::string job_text(const std::string& body) {
    std::string t = body;
    for (auto [from, to] :
         {std::pair<std::string, std::string>{"{{IN}}", dir_ / "in"}, {"{{OUT}}", dir_ / "out"}}) {
      for (size_t p; (p = t.find(from)) != std::string::npos;) t.replace(p, from.size(), to);
    }
    return t;
  }

  std::optional<Job> parse(const std::string& body, const std::string& stem = "shot-1") {
    diag_ = Diagnostics(stem + ".toml");
    return parse_job({stem + ".toml", stem, job_text(body)}, config_, diag_);
  }

  // Parses a job expected to fail with its first error at `line` on `key`.
  std::string expect_error(const std::string& body, int line, const std::string& key) {
    std::optional<Job> j = parse(body);
    EXPECT_FALSE(j);
    if (diag_.ok()) return "";
    EXPECT_EQ(diag_.first().file, "shot-1.toml");
    EXPECT_EQ(diag_.first().line, line) << diag_.first().message;
    EXPECT_EQ(diag_.first().key, key) << diag_.first().message;
    return diag_.first().message;
  }

  static constexpr const char* kGood =
      "version = 1\npipeline = \"encode\"\n[input]\nframes = \"{{IN}}/shot/*.png\"\nfps = 30\n"
      "[output]\ndir = \"{{OUT}}/shot-1\"\nvideo = { file = \"shot.mp4\", crf = 20 }\n"
      "frames = { format = \"png\", level = 3 }\ncontact_sheet = true\n";

  testing::ScratchDir dir_;
  DaemonConfig config_;
  Diagnostics diag_{""};
};

TEST_F(JobTest, GoodEncodeJob) {
  std::optional<Job> j = parse(kGood);
  ASSERT_TRUE(j) << diag_.status().message();
  EXPECT_EQ(j->id, "shot-1");
  EXPECT_TRUE(j->id_from_stem);
  EXPECT_EQ(j->pipeline, "encode");
  EXPECT_EQ(j->kind, "encode");
  EXPECT_EQ(j->output.dir, dir_ / "out/shot-1");
  ASSERT_TRUE(j->output.video);
  EXPECT_EQ(j->output.video->file, "shot.mp4");
  EXPECT_EQ(j->output.video->codec, "h264");
  EXPECT_EQ(j->output.video->crf, 20);
  EXPECT_EQ(j->output.frames.format, FrameFormat::Png);
  EXPECT_EQ(j->output.frames.png_level, 3);
  EXPECT_TRUE(j->output.contact_sheet);
  ASSERT_NE(j->prepared, nullptr);
  EXPECT_NE(j->prepared->summary().find("3 frames"), std::string::npos);
}

TEST_F(JobTest, ExplicitIdAndFfv1) {
  std::optional<Job> j = parse(
      "version = 1\npipeline = \"encode\"\nid = \"take.2_b\"\n[input]\nframes = "
      "\"{{IN}}/shot/f1.png\"\n[output]\ndir = \"{{OUT}}/a/b\"\nvideo = { file = \"x.mkv\", codec "
      "= \"ffv1\" }\nframes = { format = \"jpeg\", quality = 80 }\n");
  ASSERT_TRUE(j) << diag_.status().message();
  EXPECT_EQ(j->id, "take.2_b");
  EXPECT_FALSE(j->id_from_stem);
  EXPECT_EQ(j->output.video->codec, "ffv1");
  EXPECT_EQ(j->output.frames.jpeg_quality, 80);
  EXPECT_EQ(j->output_dir.create, std::vector<std::string>{"a"});
}

TEST_F(JobTest, UnknownKeys) {
  expect_error(std::string(kGood) + "[extra]\nx = 1\n", 11, "extra");
  std::string t = kGood;
  t.replace(t.find("fps = 30"), 8, "fsp = 30");
  const std::string m = expect_error(t, 5, "input.fsp");
  EXPECT_NE(m.find("did you mean 'fps'?"), std::string::npos);
  t = kGood;
  t.replace(t.find("crf = 20"), 8, "cfr = 20");
  expect_error(t, 8, "output.video.cfr");
}

TEST_F(JobTest, WrongTypes) {
  std::string t = kGood;
  t.replace(t.find("fps = 30"), 8, "fps = \"30\"");
  EXPECT_NE(expect_error(t, 5, "input.fps").find("got a string"), std::string::npos);
  t = kGood;
  t.replace(t.find("version = 1"), 11, "version = \"1\"");
  expect_error(t, 1, "version");
  t = kGood;
  t.replace(t.find("contact_sheet = true"), 20, "contact_sheet = 1");
  expect_error(t, 10, "output.contact_sheet");
}

TEST_F(JobTest, VersionAndPipeline) {
  std::string t = kGood;
  t.replace(t.find("version = 1"), 11, "version = 2");
  EXPECT_NE(expect_error(t, 1, "version").find("unsupported job version 2"), std::string::npos);
  t = kGood;
  t.replace(t.find("\"encode\""), 8, "\"mg2\"");
  EXPECT_NE(expect_error(t, 2, "pipeline").find("flick.toml defines: encode"), std::string::npos);
}

TEST_F(JobTest, OutputChecks) {
  std::string t = kGood;
  t.replace(t.find("shot.mp4"), 8, "shot.mkv");
  expect_error(t, 8, "output.video.file");
  t = kGood;
  t.replace(t.find("crf = 20"), 8, "crf = 52");
  expect_error(t, 8, "output.video.crf");
  t = kGood;
  t.replace(t.find("level = 3"), 9, "quality = 3");
  expect_error(t, 9, "output.frames.quality");
  expect_error(
      "version = 1\npipeline = \"encode\"\n[input]\nframes = \"{{IN}}/shot/*.png\"\n[output]\n"
      "dir = \"{{OUT}}/x\"\n",
      5, "output");
}

// An overlay video needs a pipeline that draws one; encode has no actions.
TEST_F(JobTest, OverlayOnlyWhereThePipelineDrawsOne) {
  std::string t = kGood;
  t.insert(t.find("frames = {"), "overlay = { file = \"icon.mp4\" }\n");
  const std::string m = expect_error(t, 9, "output.overlay");
  EXPECT_NE(m.find("the encode pipeline has nothing to draw an overlay from"), std::string::npos)
      << m;
  t = kGood;
  t.insert(t.find("frames = {"), "overlay = { file = \"shot.mp4\" }\n");
  EXPECT_NE(expect_error(t, 6, "output").find("needs a name of its own"), std::string::npos);
}

TEST_F(JobTest, MissingInput) {
  std::string t = kGood;
  t.replace(t.find("shot/*.png"), 10, "nothing/*.png");
  const std::string m = expect_error(t, 4, "input.frames");
  EXPECT_NE(m.find("no file matches"), std::string::npos);
  EXPECT_EQ(diag_.status().code(), StatusCode::kInvalidInput);
}

TEST_F(JobTest, PathsOutsideTheRoots) {
  std::string t = kGood;
  t.replace(t.find("{{IN}}/shot"), 11, dir_ / "secret");
  EXPECT_NE(expect_error(t, 4, "input.frames").find("outside the input roots"), std::string::npos);
  t = kGood;
  t.replace(t.find("{{IN}}/shot"), 11, "{{IN}}/link");
  EXPECT_NE(expect_error(t, 4, "input.frames").find("resolves through a symlink"),
            std::string::npos);
  t = kGood;
  t.replace(t.find("{{IN}}/shot"), 11, "{{IN}}/../secret");
  EXPECT_NE(expect_error(t, 4, "input.frames").find("'..'"), std::string::npos);
  t = kGood;
  t.replace(t.find("{{OUT}}/shot-1"), 14, dir_ / "secret/o");
  EXPECT_NE(expect_error(t, 7, "output.dir").find("outside the output roots"), std::string::npos);
}

TEST_F(JobTest, FramesOfDifferentSizesAreRejectedBeforeRunning) {
  std::string t = kGood;
  t.replace(t.find("shot/*.png"), 10, "odd/*.png");
  expect_error(t, 4, "input.frames");
}

TEST_F(JobTest, InvalidIds) {
  std::string t = kGood;
  t.insert(t.find("[input]"), "id = \"../x\"\n");
  expect_error(t, 3, "id");
  std::optional<Job> j = parse(kGood, "bad name");
  EXPECT_FALSE(j);
  EXPECT_EQ(diag_.first().key, "id");
}

TEST_F(JobTest, ErrorAtLaterKey) {
  std::optional<Job> j = parse(kGood);
  ASSERT_TRUE(j);
  const Diagnostic d = j->error_at("output.dir", "exists", "here");
  EXPECT_EQ(d.line, 7);
  EXPECT_EQ(d.key, "output.dir");
  const Diagnostic no_position = j->error_at("id", "duplicate", "here");  // id from the stem
  EXPECT_EQ(no_position.line, 0);
  EXPECT_EQ(no_position.key, "id");
}

TEST(JobId, Rules) {
  EXPECT_TRUE(valid_job_id("shot-12"));
  EXPECT_TRUE(valid_job_id("a.b_c-d9"));
  EXPECT_FALSE(valid_job_id(""));
  EXPECT_FALSE(valid_job_id(".hidden"));
  EXPECT_FALSE(valid_job_id("a/b"));
  EXPECT_FALSE(valid_job_id("x.status"));
  EXPECT_FALSE(valid_job_id(std::string(129, 'a')));
}

}  // namespace
}  // namespace flick
