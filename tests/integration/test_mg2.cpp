// A Matrix-Game 2.0 job through the binary, as users run it: `flick synth`
// writes a tiny model in the released layout (real head sizes), the config
// names it, and `flick drain` renders a job from the spool into an MP4, PNG
// frames and an overlay video; a bad job is quarantined with its line.
#include "integration_util.h"
#include "models/pipelines/mg2_overlay.h"

namespace flick::testing {
namespace {

constexpr int kW = 48, kH = 32;
constexpr int kFrames = 9;  // latent_frames = 3

class Mg2Job : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    sb_ = new Sandbox();
    const RunResult r = sb_->run(
        {"synth", sb_->path("models/mg2"), "--size", "tiny", "--mode", "universal", "--seed", "3"},
        "synth");
    ASSERT_EQ(r.code, 0) << r.err;
    sb_->write_config("",
                      "[[pipeline]]\nname = \"mg2\"\nkind = \"matrix-game-2\"\nmode = "
                      "\"universal\"\nweights = \"" +
                          sb_->path("models/mg2") +
                          "\"\nprecision = \"bf16\"\nwidth = 48\nheight = 32\n");
    ASSERT_TRUE(write_png_file(sb_->path("in/start.png"), 64, 48, pattern(64, 48, 2)));
  }
  static void TearDownTestSuite() {
    delete sb_;
    sb_ = nullptr;
  }

  static std::string job(const std::string& id, const std::string& keyboard) {
    return "version = 1\npipeline = \"mg2\"\nid = \"" + id +
           "\"\n[input]\n"
           "image = \"" +
           sb_->path("in/start.png") +
           "\"\nseed = 11\nlatent_frames = 3\n"
           "[actions]\n"
           "keyboard = " +
           keyboard +
           "\n"
           "mouse = [[0.0, 0.1, 5], [-0.1, 0.0, 4]]\n"
           "[output]\n"
           "dir = \"" +
           sb_->path("out/" + id) +
           "\"\n"
           "video = { file = \"walk.mp4\" }\n"
           "overlay = { file = \"walk_icon.mkv\", codec = \"ffv1\" }\n"
           "frames = { format = \"png\" }\n";
  }

  static Sandbox* sb_;
};
Sandbox* Mg2Job::sb_ = nullptr;

TEST_F(Mg2Job, DrainRendersVideoFramesAndOverlay) {
  sb_->drop("walk.toml", job("walk", "[[\"w\", 4], [\"w+d\", 2], [\"\", 3]]"));
  sb_->drop("typo.toml", job("typo", "[[\"w\", 4], [\"x\", 5]]"));
  const RunResult r = sb_->drain();
  EXPECT_EQ(r.code, 65) << r.err;  // the typo job is invalid, the walk done

  // The bad job: quarantined, the error at its line and key.
  std::optional<toml::value> q = sb_->status("quarantine", "typo");
  ASSERT_TRUE(q);
  EXPECT_EQ(toml::find<std::string>(*q, "error", "key"), "actions.keyboard[1]");
  EXPECT_EQ(toml::find<int64_t>(*q, "error", "line"), 9);
  EXPECT_NE(toml::find<std::string>(*q, "error", "message").find("unknown key \"x\""),
            std::string::npos);

  // The good one: done, with what the pipeline ran in and the time per frame.
  std::optional<toml::value> st = sb_->status("done", "walk");
  ASSERT_TRUE(st) << r.err;
  EXPECT_EQ(toml::find<std::string>(*st, "details", "mode"), "universal");
  EXPECT_NE(toml::find<std::string>(*st, "details", "precision").find("bf16"), std::string::npos);
  EXPECT_EQ(toml::find<int64_t>(*st, "timing", "frames"), kFrames);
  EXPECT_GT(toml::find<double>(*st, "timing", "s_per_frame"), 0);
  EXPECT_EQ(toml::find<toml::array>(*st, "outputs").size(), size_t{kFrames + 2});

  const std::string out = sb_->path("out/walk/");
  const DecodedVideo mp4 = decode_video(out + "walk.mp4");
  EXPECT_TRUE(mp4.ok);
  EXPECT_EQ(mp4.codec, "h264");
  EXPECT_EQ(mp4.frames, kFrames);
  EXPECT_EQ(mp4.width, kW);
  EXPECT_EQ(mp4.height, kH);

  // The overlay video is each PNG frame with the job's actions drawn on it.
  Mg2Tracks tracks;
  tracks.frames = kFrames;
  tracks.keyboard = {1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0,
                     0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int f = 0; f < kFrames; ++f) {
    if (f < 5) {
      tracks.mouse.insert(tracks.mouse.end(), {0.0f, 0.1f});
    } else {
      tracks.mouse.insert(tracks.mouse.end(), {-0.1f, 0.0f});
    }
  }
  const Mg2Overlay overlay(*find_mg2_mode("universal"), tracks);
  const DecodedVideo icon = decode_video(out + "walk_icon.mkv");
  EXPECT_TRUE(icon.ok);
  ASSERT_EQ(icon.rgb.size(), size_t{kFrames});
  for (int i = 0; i < kFrames; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "frame_%06d.png", i);
    Frame f;
    f.rgb = read_png_file(out + name, &f.width, &f.height);
    ASSERT_EQ(f.width, kW) << name;
    ASSERT_EQ(f.height, kH) << name;
    overlay.draw(i, f);
    EXPECT_TRUE(icon.rgb[i] == f.rgb) << "overlay frame " << i;
  }
  EXPECT_TRUE(leftovers(sb_->root() + "/out").empty());
}

TEST_F(Mg2Job, ValidateChecksActionsWithoutRendering) {
  write_text(sb_->path("v.toml"), job("v", "[[\"w\", 10]]"));
  const RunResult r = sb_->flick("validate", {sb_->path("v.toml")});
  EXPECT_EQ(r.code, 65);
  EXPECT_NE(r.err.find("the segments cover 10 video frames, expected 9"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(" 9 | keyboard = [[\"w\", 10]]"), std::string::npos) << r.err;
  EXPECT_FALSE(stdfs::exists(sb_->path("out/v")));
}

}  // namespace
}  // namespace flick::testing
