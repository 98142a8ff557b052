// `flick run --dump FILE` on a Matrix-Game 2.0 job (tiny synthetic weights):
// the safetensors file holds the names its golden tests use
// (Mg2Pipeline::Tap, tools/mg2_goldens.py) with the shapes of the run. The
// sam3-segment names are checked in test_sam3_segment.cpp.
#include <nlohmann/json.hpp>

#include "integration_util.h"

namespace flick::testing {
namespace {

TEST(RunDump, MatrixGameTapsByName) {
  Sandbox sb;
  const RunResult synth = sb.run(
      {"synth", sb.path("models/mg2"), "--size", "tiny", "--mode", "universal", "--seed", "3"},
      "synth");
  ASSERT_EQ(synth.code, 0) << synth.err;
  sb.write_config("",
                  "[[pipeline]]\nname = \"mg2\"\nkind = \"matrix-game-2\"\nmode = "
                  "\"universal\"\nweights = \"" +
                      sb.path("models/mg2") +
                      "\"\nprecision = \"bf16\"\nwidth = 48\nheight = 32\n");
  ASSERT_TRUE(write_png_file(sb.path("in/start.png"), 64, 48, pattern(64, 48, 2)));
  write_text(sb.path("walk.toml"),
             "version = 1\npipeline = \"mg2\"\n[input]\nimage = \"" + sb.path("in/start.png") +
                 "\"\nseed = 11\nlatent_frames = 3\n[output]\ndir = \"" + sb.path("out/walk") +
                 "\"\nvideo = { file = \"walk.mp4\" }\n");
  const RunResult r =
      sb.flick("run", {sb.path("walk.toml"), "--dump", sb.path("walk.safetensors")}, "run");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("tensors written to " + sb.path("walk.safetensors")), std::string::npos)
      << r.out;
  const std::string file = read_text(sb.path("walk.safetensors"));
  ASSERT_GT(file.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<uint8_t>(file[i]);
  const auto header = nlohmann::json::parse(file.substr(8, n));
  for (const char* name : {"img_cond", "visual_context", "b0.s0.x", "b0.s0.flow", "b0.s0.x0",
                           "b0.latents", "b0.frames"}) {
    EXPECT_TRUE(header.contains(name)) << name;
  }
  // One block of 3 latents at 48 x 32: latents [1, 16, 3, 4, 6], 9 frames.
  EXPECT_EQ(header["b0.latents"]["shape"].back(), 6);
  EXPECT_EQ(header["b0.frames"]["shape"][1], 9);
  EXPECT_FALSE(header.contains("b1.latents"));
}

}  // namespace
}  // namespace flick::testing
