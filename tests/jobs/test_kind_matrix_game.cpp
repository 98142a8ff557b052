// The matrix-game-2 kind: its [[pipeline]] keys and job tables, read without
// loading any weights (flick validate). Every bad input is an error at its
// line and key saying what was expected; a good job's action track reaches
// the prepared job exactly (checked through the overlay it draws).
#include <gtest/gtest.h>

#include "jobs/job.h"
#include "jobs_test_util.h"
#include "kind_job_test.h"
#include "models/pipelines/mg2_overlay.h"

namespace flick {
namespace {

constexpr int kWidth = 48, kHeight = 32;

class Mg2KindTest : public testing::KindJobTest {
 protected:
  Mg2KindTest() : KindJobTest("walk.toml") {}

  void SetUp() override {
    ASSERT_TRUE(
        testing::write_png_file(dir_ / "in/start.png", 64, 48, testing::pattern(64, 48, 1)));
    ASSERT_TRUE(
        testing::write_png_file(dir_ / "secret/start.png", 64, 48, testing::pattern(64, 48, 1)));
    testing::write_text(dir_ / "in/bad.png", "not a png at all");
    std::filesystem::create_directories(dir_ / "out");
    std::string pipelines;
    for (const char* mode : {"universal", "gta_drive", "templerun"}) {
      pipelines += "[[pipeline]]\nname = \"" + std::string(mode) +
                   "\"\nkind = \"matrix-game-2\"\nmode = \"" + mode +
                   "\"\nweights = \"/nonexistent/mg2\"\nwidth = 48\nheight = 32\n";
    }
    use_pipelines(pipelines);
  }

  // kGood with line `line` (1-based) replaced by `text` ("" deletes it).
  static std::string with_line(int line, const std::string& text, const std::string& job = kGood) {
    return replace_line(job, line, text);
  }

  static constexpr const char* kGood =
      "version = 1\n"                                       // 1
      "pipeline = \"universal\"\n"                          // 2
      "[input]\n"                                           // 3
      "image = \"{{IN}}/start.png\"\n"                      // 4
      "seed = 7\n"                                          // 5
      "latent_frames = 3\n"                                 // 6: 9 video frames
      "[actions]\n"                                         // 7
      "keyboard = [[\"w\", 4], [\"w+a\", 2], [\"\", 3]]\n"  // 8
      "mouse = [[0.0, 0.1, 9]]\n"                           // 9
      "[output]\n"                                          // 10
      "dir = \"{{OUT}}/walk\"\n"                            // 11
      "video = { file = \"walk.mp4\" }\n"                   // 12
      "overlay = { file = \"walk_icon.mp4\" }\n";           // 13
};

// The overlay the job draws on every frame equals the one drawn from
// `expected` tracks: the tracks arrived intact.
void expect_tracks(const Job& job, const Mg2ModeSpec& mode, const Mg2Tracks& expected) {
  const FrameAnnotator annotate = job.prepared->overlay();
  ASSERT_TRUE(annotate);
  const Mg2Overlay oracle(mode, expected);
  for (int64_t i = 0; i < expected.frames; ++i) {
    Frame got, want;
    got.width = want.width = 640;
    got.height = want.height = 352;
    got.rgb.assign(640 * 352 * 3, 90);
    want.rgb = got.rgb;
    annotate(i, got);
    oracle.draw(i, want);
    EXPECT_EQ(got.rgb, want.rgb) << "frame " << i;
  }
}

TEST_F(Mg2KindTest, GoodJobWithSegments) {
  std::optional<Job> j = parse(kGood);
  ASSERT_TRUE(j) << diag_.status().message();
  EXPECT_EQ(j->kind, "matrix-game-2");
  const std::string summary = j->prepared->summary();
  EXPECT_NE(summary.find("universal: 9 frames (3 latents) from " + (dir_ / "in/start.png")),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find("seed 7"), std::string::npos) << summary;
  ASSERT_TRUE(j->output.overlay);
  EXPECT_EQ(j->output.overlay->file, "walk_icon.mp4");
  // Not loaded (validate): the details name the mode only.
  EXPECT_EQ(j->prepared->status_details(),
            (std::vector<std::pair<std::string, std::string>>{{"mode", "universal"}}));

  Mg2Tracks t;
  t.frames = 9;
  t.keyboard = {1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0,  // w x4
                1, 0, 1, 0, 1, 0, 1, 0,                          // w+a x2
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};             // nothing x3
  for (int i = 0; i < 9; ++i) t.mouse.insert(t.mouse.end(), {0.0f, 0.1f});
  expect_tracks(*j, *find_mg2_mode("universal"), t);
}

TEST_F(Mg2KindTest, WithoutActionsTheCameraStandsStill) {
  std::string job = with_line(7, "", with_line(8, "", with_line(9, "")));
  std::optional<Job> j = parse(job);
  ASSERT_TRUE(j) << diag_.status().message();
  expect_tracks(*j, *find_mg2_mode("universal"), mg2_idle_tracks(*find_mg2_mode("universal"), 9));

  // Only a keyboard track: the mouse stays still. templerun idles with nomove.
  job = with_line(
      9, "", with_line(2, "pipeline = \"templerun\"", with_line(8, "keyboard = [[\"jump\", 9]]")));
  j = parse(job);
  ASSERT_TRUE(j) << diag_.status().message();
  Mg2Tracks t = mg2_idle_tracks(*find_mg2_mode("templerun"), 9);
  for (int f = 0; f < 9; ++f) {
    t.keyboard[f * 7 + 0] = 0;
    t.keyboard[f * 7 + 1] = 1;
  }
  expect_tracks(*j, *find_mg2_mode("templerun"), t);
  j = parse(with_line(8, "", with_line(9, "", with_line(2, "pipeline = \"templerun\""))));
  ASSERT_TRUE(j) << diag_.status().message();
  expect_tracks(*j, *find_mg2_mode("templerun"), mg2_idle_tracks(*find_mg2_mode("templerun"), 9));
}

TEST_F(Mg2KindTest, KeyboardSegmentErrors) {
  expect_error(with_line(8, "keyboard = [[\"w\", 4], [\"q\", 2], [\"\", 3]]"), 8,
               "actions.keyboard[1]", "unknown key \"q\" (universal keys: w, s, a, d)");
  expect_error(with_line(8, "keyboard = [[\"w\", 4], [\"\", 3]]"), 8, "actions.keyboard",
               "the segments cover 7 video frames, expected 9");
  // The hint says where 9 comes from.
  EXPECT_NE(diag_.first().message.find("latent_frames = 3 gives 1 + 4 x 2 = 9 video frames"),
            std::string::npos)
      << diag_.first().message;
  expect_error(with_line(8, "keyboard = [[\"w\"], [\"\", 9]]"), 8, "actions.keyboard[0]",
               "expected a [keys, frames] pair");
  expect_error(with_line(8, "keyboard = [[\"w\", 0], [\"\", 9]]"), 8, "actions.keyboard[0]",
               "expected a frame count (an integer >= 1), got 0");
  expect_error(with_line(8, "keyboard = [[\"w\", 4.5], [\"\", 9]]"), 8, "actions.keyboard[0]",
               "got a float");
  expect_error(with_line(8, "keyboard = \"w\""), 8, "actions.keyboard",
               "expected an array of [keys, frames] segments");
  expect_error(with_line(8, "keyboard = [[\"jump+slide\", 9]]",
                         with_line(2, "pipeline = \"templerun\"", with_line(9, ""))),
               8, "actions.keyboard[0]",
               "templerun takes exactly one key per segment (one-hot), got \"jump+slide\"");
  expect_error(with_line(2, "pipeline = \"templerun\"", with_line(9, "")), 8, "actions.keyboard[0]",
               "unknown key \"w\" (templerun keys: nomove, jump, slide, turnleft, turnright, "
               "leftside, rightside)");
  expect_error(with_line(2, "pipeline = \"gta_drive\""), 8, "actions.keyboard[1]",
               "unknown key \"a\" (gta_drive keys: w, s)");
}

TEST_F(Mg2KindTest, MouseSegmentErrors) {
  expect_error(with_line(9, "mouse = [[0.0, 0.1, 10]]"), 9, "actions.mouse",
               "the segments cover 10 video frames, expected 9");
  expect_error(with_line(9, "mouse = [[0.0, 1.5, 9]]"), 9, "actions.mouse[0]",
               "yaw must be finite and within ±1, got 1.5");
  expect_error(with_line(9, "mouse = [[nan, 0.0, 9]]"), 9, "actions.mouse[0]",
               "pitch must be finite");
  expect_error(with_line(9, "mouse = [[0.0, \"right\", 9]]"), 9, "actions.mouse[0]",
               "expected a number, got a string");
  expect_error(with_line(9, "mouse = [[0.0, 9]]"), 9, "actions.mouse[0]",
               "expected a [pitch, yaw, frames] triple");
  expect_error(with_line(8, "keyboard = [[\"jump\", 9]]", with_line(2, "pipeline = \"templerun\"")),
               9, "actions.mouse", "templerun has no mouse input (keyboard only)");
  expect_error(
      with_line(9, "mouse = [[0.1, 0.0, 9]]",
                with_line(8, "keyboard = [[\"w\", 9]]", with_line(2, "pipeline = \"gta_drive\""))),
      9, "actions.mouse[0]", "gta_drive steers with yaw only: pitch must be 0, got 0.1");
}

TEST_F(Mg2KindTest, InputErrors) {
  expect_error(with_line(6, "latent_frames = 4"), 6, "input.latent_frames",
               "expected a multiple of 3 (the model makes 3 latent frames per block), got 4");
  EXPECT_EQ(diag_.all().size(), 1u) << "the actions cannot be checked without a length:\n"
                                    << diag_.status().message();
  expect_error(with_line(6, "latent_frames = 0"), 6, "input.latent_frames",
               "expected an integer in 3..1023, got 0");
  expect_error(with_line(6, "latent_frames = 1026"), 6, "input.latent_frames", "3..1023");
  expect_error(with_line(6, ""), 3, "input.latent_frames", "missing key input.latent_frames");
  expect_error(with_line(5, "seed = -1"), 5, "input.seed", "got -1");
  expect_error(with_line(5, "sed = 1"), 5, "input.sed", "did you mean 'seed'?");
  expect_error(with_line(4, ""), 3, "input.image", "missing key input.image");
  expect_error(with_line(4, "image = \"{{SECRET}}/start.png\""), 4, "input.image",
               "outside the input roots");
  expect_error(with_line(4, "image = \"{{IN}}/none.png\""), 4, "input.image", "does not exist");
  expect_error(with_line(4, "image = \"{{IN}}/bad.png\""), 4, "input.image", dir_ / "in/bad.png");
  expect_error(with_line(4, "image = \"start.png\""), 4, "input.image", "not an absolute path");
  expect_error(with_line(3, "", with_line(4, "", with_line(5, "", with_line(6, "")))), 0, "input",
               "missing key input");
}

TEST_F(Mg2KindTest, CsvActions) {
  testing::write_text(dir_ / "in/walk.csv",
                      "w,s,a,d,pitch,yaw\n"
                      "# the first frame\n"
                      "0,0,0,0,0,0\n"
                      "1,0,0,0,0,0\n1,0,0,0,0,0\n1,0,0,0,0,0.1\n1,0,1,0,0,0.1\n"
                      "0,1,0,1,-0.1,0\n0,1,0,1,-0.1,0\n0,0,0,0,0,0\n0,0,0,0,0,0\n");
  const std::string csv_job = with_line(9, "", with_line(8, "file = \"{{IN}}/walk.csv\""));
  std::optional<Job> j = parse(csv_job);
  ASSERT_TRUE(j) << diag_.status().message();
  Mg2Tracks t;
  t.frames = 9;
  t.keyboard = {0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0,
                1, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0};
  t.mouse = {0, 0, 0, 0, 0, 0, 0, 0.1f, 0, 0.1f, -0.1f, 0, -0.1f, 0, 0, 0, 0, 0};
  expect_tracks(*j, *find_mg2_mode("universal"), t);

  testing::write_text(dir_ / "in/short.csv", "w,s,a,d,pitch,yaw\n1,0,0,0,0,0\n");
  expect_error(with_line(9, "", with_line(8, "file = \"{{IN}}/short.csv\"")), 8, "actions.file",
               dir_ / "in/short.csv" + ": 1 frame rows, expected 9");
  testing::write_text(dir_ / "in/bad.csv", "w,s,a,d,pitch,yaw\n1,0,0,0,0,0\n1,0,0,yes,0,0\n");
  expect_error(with_line(9, "", with_line(8, "file = \"{{IN}}/bad.csv\"")), 8, "actions.file",
               dir_ / "in/bad.csv" + ":3: column 4 ('d'): expected a number, got 'yes'");
  expect_error(with_line(9, "", with_line(8, "file = \"{{IN}}/none.csv\"")), 8, "actions.file",
               "does not exist");
  std::filesystem::create_directories(dir_ / "in/dir.csv");
  expect_error(with_line(9, "", with_line(8, "file = \"{{IN}}/dir.csv\"")), 8, "actions.file",
               "is not a regular file");
  testing::write_text(dir_ / "secret/walk.csv", "w,s,a,d,pitch,yaw\n");
  expect_error(with_line(9, "", with_line(8, "file = \"{{SECRET}}/walk.csv\"")), 8, "actions.file",
               "outside the input roots");
  expect_error(
      with_line(8, "file = \"{{IN}}/walk.csv\"\nkeyboard = [[\"w\", 9]]", with_line(9, "")), 8,
      "actions.file", "either as a CSV file or as keyboard/mouse segments, not both");
  // The same file for templerun: its columns are not the universal ones.
  expect_error(with_line(2, "pipeline = \"templerun\"", csv_job), 8, "actions.file",
               ":1: unknown column 'w' for templerun");
}

TEST_F(Mg2KindTest, ActionsTableErrors) {
  expect_error(with_line(9, "mouze = [[0.0, 0.1, 9]]"), 9, "actions.mouze",
               "did you mean 'mouse'?");
  // Top-level `actions` that is not a table.
  expect_error(with_line(2, "pipeline = \"universal\"\nactions = 3",
                         with_line(7, "", with_line(8, "", with_line(9, "")))),
               3, "actions", "expected a table, got an integer");
}

TEST_F(Mg2KindTest, PipelineEntryErrors) {
  const auto config_error = [&](const std::string& entry, const std::string& key,
                                const std::string& text) {
    Diagnostics d("flick.toml");
    std::optional<DaemonConfig> c = parse_config(
        "[daemon]\nspool = \"/x\"\ninput_roots = [\"" + (dir_ / "in") + "\"]\noutput_roots = [\"" +
            (dir_ / "out") + "\"]\n[[pipeline]]\nname = \"m\"\nkind = \"matrix-game-2\"\n" + entry,
        "flick.toml", "", d);
    ASSERT_FALSE(c) << entry;
    EXPECT_EQ(d.first().key, key) << d.first().message;
    EXPECT_NE(d.first().message.find(text), std::string::npos) << d.first().message;
  };
  const std::string weights = "weights = \"/w\"\n";
  config_error(weights, "pipeline[0].mode", "missing key pipeline[0].mode");
  config_error("mode = \"minecraft\"\n" + weights, "pipeline[0].mode",
               "unknown mode \"minecraft\" (expected one of universal, gta_drive, templerun)");
  config_error("mode = \"universal\"\n", "pipeline[0].weights", "missing key pipeline[0].weights");
  config_error("mode = \"universal\"\nweights = \"models/mg2\"\n", "pipeline[0].weights",
               "not an absolute path");
  config_error("mode = \"universal\"\n" + weights + "precision = \"fp4\"\n",
               "pipeline[0].precision", "\"bf16\", \"int8\", \"fp8\", \"f32\"");
  config_error("mode = \"universal\"\n" + weights + "vae_precision = \"fp8\"\n",
               "pipeline[0].vae_precision", "\"bf16\", \"int8\"");
  config_error(
      "mode = \"universal\"\n" + weights + "precision = \"f32\"\nvae_precision = \"int8\"\n",
      "pipeline[0].vae_precision", "need a reduced-precision pipeline");
  config_error("mode = \"universal\"\n" + weights + "backend = \"cuda\"\n", "pipeline[0].backend",
               "no pipeline runs on the CUDA backend yet");
  config_error("mode = \"universal\"\n" + weights + "width = 650\n", "pipeline[0].width",
               "expected a multiple of 16");
  config_error("mode = \"universal\"\n" + weights + "height = 8\n", "pipeline[0].height",
               "16..4096");
  config_error("mode = \"universal\"\n" + weights + "threads = 2\n", "pipeline[0].threads",
               "unknown key");
  // vae_precision beside precision parses.
  for (const char* v : {"bf16", "int8"}) {
    Diagnostics d("flick.toml");
    EXPECT_TRUE(parse_config("[daemon]\nspool = \"/x\"\ninput_roots = [\"" + (dir_ / "in") +
                                 "\"]\noutput_roots = [\"" + (dir_ / "out") +
                                 "\"]\n[[pipeline]]\nname = \"m\"\nkind = \"matrix-game-2\"\n" +
                                 "mode = \"universal\"\n" + weights + "precision = \"int8\"\n" +
                                 "vae_precision = \"" + v + "\"\n",
                             "flick.toml", "", d))
        << v << ": " << d.first().message;
  }
}

}  // namespace
}  // namespace flick
