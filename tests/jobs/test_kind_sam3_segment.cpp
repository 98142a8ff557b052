// The sam3-segment kind: its [[pipeline]] keys and [input] table, read
// without loading the model (flick validate). Every bad input is an error at
// its line and key saying what was expected.
#include <gtest/gtest.h>

#include "io/video.h"
#include "jobs/job.h"
#include "jobs_test_util.h"
#include "kind_job_test.h"

namespace flick {
namespace {

class Sam3KindTest : public testing::KindJobTest {
 protected:
  Sam3KindTest() : KindJobTest("seg.toml") {}

  void SetUp() override {
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(testing::write_png_file(dir_ / ("in/shot/f" + std::to_string(i) + ".png"), 32, 24,
                                          testing::pattern(32, 24, i)));
    }
    ASSERT_TRUE(
        testing::write_png_file(dir_ / "secret/f.png", 32, 24, testing::pattern(32, 24, 1)));
    testing::write_text(dir_ / "in/bad.mp4", "this is not a video");
    {
      VideoSpec v;
      v.file = "clip.mkv";
      v.codec = "ffv1";
      v.fps = 10;
      auto w = VideoWriter::create(dir_ / "in/clip.mkv", v, 32, 24);
      ASSERT_TRUE(w.ok());
      const std::vector<uint8_t> rgb = testing::pattern(32, 24, 3);
      ASSERT_TRUE((*w)->write(FrameView{32, 24, 96, rgb.data()}).ok());
      ASSERT_TRUE((*w)->finish().ok());
    }
    std::filesystem::create_directories(dir_ / "out");
    use_pipelines(
        "[[pipeline]]\nname = \"sam3\"\nkind = \"sam3-segment\"\nweights = "
        "\"/nonexistent/sam3.pth\"\nprecision = \"bf16\"\nimage_size = 1008\n");
  }

  static std::string with_line(int line, const std::string& text, const std::string& job = kGood) {
    return replace_line(job, line, text);
  }

  static constexpr const char* kGood =
      "version = 1\n"                            // 1
      "pipeline = \"sam3\"\n"                    // 2
      "[input]\n"                                // 3
      "frames = \"{{IN}}/shot/*.png\"\n"         // 4
      "prompts = [\"person\", \"red car\"]\n"    // 5
      "threshold = 0.4\n"                        // 6
      "every_n = 2\n"                            // 7
      "[output]\n"                               // 8
      "dir = \"{{OUT}}/seg\"\n"                  // 9
      "overlay = { file = \"overlay.mp4\" }\n";  // 10
};

TEST_F(Sam3KindTest, GoodJobs) {
  std::optional<Job> j = parse(kGood);
  ASSERT_TRUE(j) << diag_.status().message();
  EXPECT_EQ(j->kind, "sam3-segment");
  const std::string summary = j->prepared->summary();
  EXPECT_NE(summary.find("\"person\", \"red car\""), std::string::npos) << summary;
  EXPECT_NE(summary.find("3 frames from " + (dir_ / "in") + "/shot/*.png"), std::string::npos)
      << summary;
  EXPECT_NE(summary.find("every 2 frames"), std::string::npos) << summary;
  EXPECT_TRUE(j->prepared->overlay());
  // A video, and the defaults (threshold 0.5, every frame).
  j = parse(with_line(4, "video = \"{{IN}}/clip.mkv\"", with_line(6, "", with_line(7, ""))));
  ASSERT_TRUE(j) << diag_.status().message();
  EXPECT_NE(j->prepared->summary().find(dir_ / "in/clip.mkv"), std::string::npos);
  EXPECT_NE(j->prepared->summary().find("threshold 0.50"), std::string::npos)
      << j->prepared->summary();
  // threshold 0 keeps every query.
  EXPECT_TRUE(parse(with_line(6, "threshold = 0")));
}

// The label PNGs and detections.jsonl are written on every run, so an
// [output] with only `dir` is a complete job for this kind (not for encode:
// tests/jobs/test_job.cpp).
TEST_F(Sam3KindTest, OutputDirAloneIsEnough) {
  std::optional<Job> j = parse(with_line(10, ""));
  ASSERT_TRUE(j) << diag_.status().message();
  EXPECT_FALSE(j->output.video || j->output.overlay || j->output.contact_sheet);
  EXPECT_TRUE(j->prepared->writes_own_files());
}

TEST_F(Sam3KindTest, PromptErrors) {
  expect_error(with_line(5, "prompts = []"), 5, "input.prompts", "is empty");
  expect_error(with_line(5, "prompts = [\"person\", \"\"]"), 5, "input.prompts[1]", "is empty");
  expect_error(with_line(5, "prompts = [\"person\", 3]"), 5, "input.prompts[1]",
               "expected a text prompt (a string), got an integer");
  expect_error(with_line(5, "prompts = [{ box = [1, 2, 3, 4] }]"), 5, "input.prompts[0]",
               "only text prompts are supported (no box or point prompts)");
  expect_error(with_line(5, "prompts = \"person\""), 5, "input.prompts",
               "expected an array of text prompts");
  expect_error(with_line(5, ""), 3, "input.prompts", "missing");
  expect_error(with_line(5, "prompts = [\"" + std::string(300, 'x') + "\"]"), 5, "input.prompts[0]",
               "300 bytes, more than 256");
}

TEST_F(Sam3KindTest, ThresholdAndStrideErrors) {
  expect_error(with_line(6, "threshold = 1.0"), 6, "input.threshold", "in [0, 1)");
  expect_error(with_line(6, "threshold = -0.1"), 6, "input.threshold", "");
  expect_error(with_line(6, "threshold = \"high\""), 6, "input.threshold", "");
  expect_error(with_line(6, "threshold = nan"), 6, "input.threshold", "");
  expect_error(with_line(7, "every_n = 0"), 7, "input.every_n", "");
  expect_error(with_line(7, "every_n = -3"), 7, "input.every_n", "");
  expect_error(with_line(7, "every_n = 1.5"), 7, "input.every_n", "");
}

TEST_F(Sam3KindTest, SourceErrors) {
  // An unreadable video: named, at the key.
  expect_error(with_line(4, "video = \"{{IN}}/bad.mp4\""), 4, "input.video", dir_ / "in/bad.mp4");
  expect_error(with_line(4, "video = \"{{IN}}/missing.mp4\""), 4, "input.video", "missing.mp4");
  // Outside the input roots: frames, video, a symlink out of them.
  expect_error(with_line(4, "frames = \"{{SECRET}}/*.png\""), 4, "input.frames",
               "outside the input roots");
  expect_error(with_line(4, "video = \"{{SECRET}}/f.png\""), 4, "input.video",
               "outside the input roots");
  std::filesystem::create_symlink(dir_ / "secret/f.png", dir_ / "in/link.mp4");
  expect_error(with_line(4, "video = \"{{IN}}/link.mp4\""), 4, "input.video",
               "outside the input roots");
  expect_error(with_line(4, "video = \"{{IN}}/../secret/f.png\""), 4, "input.video", "..");
  // Both, or neither.
  expect_error(with_line(4, "frames = \"{{IN}}/shot/*.png\"\nvideo = \"{{IN}}/clip.mkv\""), 5,
               "input.video", "not both");
  expect_error(with_line(4, ""), 3, "input", "expected `frames`");
  // Unknown keys get a did-you-mean.
  expect_error(with_line(7, "every = 2"), 7, "input.every", "every_n");
}

TEST_F(Sam3KindTest, PipelineEntryErrors) {
  auto config_error = [&](const std::string& entry, const std::string& key,
                          const std::string& text) {
    Diagnostics d("flick.toml");
    std::optional<DaemonConfig> c =
        parse_config("[daemon]\nspool = \"/x\"\ninput_roots = [\"" + (dir_ / "in") +
                         "\"]\noutput_roots = [\"" + (dir_ / "out") +
                         "\"]\n[[pipeline]]\nname = \"sam3\"\nkind = \"sam3-segment\"\n" + entry,
                     "flick.toml", "", d);
    ASSERT_FALSE(c) << entry;
    EXPECT_EQ(d.first().key, key) << d.first().message;
    EXPECT_NE(d.first().message.find(text), std::string::npos) << d.first().message;
  };
  config_error("", "pipeline[0].weights", "missing");
  config_error("weights = \"rel/sam3.pth\"", "pipeline[0].weights", "absolute");
  config_error("weights = \"/w.pth\"\nimage_size = 1000", "pipeline[0].image_size",
               "multiple of 14");
  config_error("weights = \"/w.pth\"\nprecision = \"int4\"", "pipeline[0].precision", "");
  config_error("weights = \"/w.pth\"\nbackend = \"cuda\"", "pipeline[0].backend",
               "no pipeline runs on the CUDA backend yet");
}

}  // namespace
}  // namespace flick
