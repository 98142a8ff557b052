// A FramePack image-to-video job through the binary, as users run it: the
// config names the tiny fixture folder in the released layout
// (tests/data/framepack_pipeline, tools/framepack_pipeline_goldens.py) and
// `flick drain` renders one job of each variant from the spool into an MP4
// and PNG frames; the PNG frames are checked against the reference worker's
// video, the MP4 by its decoded frame count and size.
#include "integration_util.h"
#include "runtime/weights/weight_store.h"
#include "tests/framepack_pipeline/framepack_fixture.h"

namespace flick::testing {
namespace {

const std::string& kData = kFramePackFixture;

std::string job(const Sandbox& sb, const std::string& id, const std::string& variant) {
  return "version = 1\npipeline = \"fp\"\nid = \"" + id + "\"\n[input]\nimage = \"" +
         sb.path("in/start.png") + "\"\n" + framepack_fixture_input() + "variant = \"" + variant +
         "\"\n[output]\ndir = \"" + sb.path("out/" + id) + "\"\nvideo = { file = \"" + id +
         ".mp4\" }\nframes = { format = \"png\" }\n";
}

TEST(FramePackJob, DrainRendersBothVariantsIntoVideoAndFrames) {
  Sandbox sb;
  stdfs::create_directories(sb.path("in"));
  stdfs::copy_file(kData + "input.png", sb.path("in/start.png"));
  sb.write_config("", framepack_fixture_pipeline(sb.path("cache")) + "precision = \"f32\"\n");
  sb.drop("orig.toml", job(sb, "orig", "original"));
  sb.drop("fwd.toml", job(sb, "fwd", "f1"));
  const RunResult r = sb.drain();
  ASSERT_EQ(r.code, 0) << r.err;

  Expected<WeightStore> golden = WeightStore::open({kData + "goldens.safetensors"});
  ASSERT_TRUE(golden.ok()) << golden.status().message();
  for (const auto& [id, variant] : {std::pair{"orig", "original"}, std::pair{"fwd", "f1"}}) {
    SCOPED_TRACE(id);
    std::optional<toml::value> st = sb.status("done", id);
    ASSERT_TRUE(st) << r.err;
    EXPECT_EQ(toml::find<std::string>(*st, "details", "variant"), variant);
    const Tensor want = *golden->get(std::string(variant) + ".frames");  // [T, H, W, 3]
    const int frames = static_cast<int>(want.dim(0));
    const int h = static_cast<int>(want.dim(1)), w = static_cast<int>(want.dim(2));
    EXPECT_EQ(toml::find<int64_t>(*st, "timing", "frames"), frames);
    const std::string out = sb.path(std::string("out/") + id + "/");
    const DecodedVideo mp4 = decode_video(out + id + ".mp4");
    EXPECT_TRUE(mp4.ok);
    EXPECT_EQ(mp4.codec, "h264");
    EXPECT_EQ(mp4.frames, frames);
    EXPECT_EQ(mp4.width, w);
    EXPECT_EQ(mp4.height, h);
    // The PNG frames against the reference worker's frames, within the
    // pipeline test's f32 bound (<= 1 level on <= 2 % of the values).
    const size_t frame_bytes = static_cast<size_t>(h) * w * 3;
    int64_t differ = 0, total = 0, worst = 0;
    for (int i = 0; i < frames; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "frame_%06d.png", i);
      int fw = 0, fh = 0;
      const std::vector<uint8_t> rgb = read_png_file(out + name, &fw, &fh);
      ASSERT_EQ(fw, w) << name;
      ASSERT_EQ(fh, h) << name;
      const uint8_t* ref = want.ptr<uint8_t>() + i * frame_bytes;
      for (size_t k = 0; k < frame_bytes; ++k) {
        const int64_t d = std::abs(int{rgb[k]} - int{ref[k]});
        differ += d != 0;
        worst = std::max(worst, d);
        ++total;
      }
    }
    EXPECT_LE(worst, 1);
    EXPECT_LE(differ, total / 50);
  }
  EXPECT_TRUE(leftovers(sb.root() + "/out").empty());
}

}  // namespace
}  // namespace flick::testing
