// A sam3-segment job through the daemon, as users run it: `flick synth
// --model sam3` writes a tiny EfficientSAM3 checkpoint in the released
// layout, the config names it, `flick serve` segments a short synthetic
// H.264 video into label PNGs, detections.jsonl, an overlay MP4 and a
// contact sheet. The outputs are checked against each other (every RLE
// decodes to exactly the label PNG's pixels of its id, highest score on
// top) and the videos are decoded back. Hostile videos fail with the file
// named and the daemon goes on; `flick run --dump` writes the named taps.
#include <nlohmann/json.hpp>

#include "integration_util.h"
#include "io/coco_rle.h"
#include "io/label_png.h"
#include "io/video.h"

namespace flick::testing {
namespace {

constexpr int kW = 64, kH = 48;
constexpr int kSourceFrames = 8;
constexpr int kEveryN = 2;
constexpr int kFrames = kSourceFrames / kEveryN;

// Source frame t: a red square moving right, a blue one standing still.
Frame scene(int t) {
  Frame f{kW, kH, std::vector<uint8_t>(size_t(kW) * kH * 3, 90)};
  auto square = [&](int x0, int y0, int s, uint8_t r, uint8_t g, uint8_t b) {
    for (int y = y0; y < y0 + s; ++y) {
      for (int x = x0; x < x0 + s; ++x) {
        uint8_t* p = &f.rgb[(size_t(y) * kW + x) * 3];
        p[0] = r, p[1] = g, p[2] = b;
      }
    }
  };
  square(4 + 3 * t, 6, 14, 220, 30, 30);
  square(36, 26, 16, 20, 30, 230);
  return f;
}

std::string read_all(const std::string& path) { return read_text(path); }

class Sam3Segment : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    sb_ = new Sandbox();
    const RunResult r = sb_->run(
        {"synth", sb_->path("models/sam3.pth"), "--model", "sam3", "--size", "tiny", "--seed", "5"},
        "synth");
    ASSERT_EQ(r.code, 0) << r.err;
    // 224: the smallest size the goldens use, so each frame takes well under
    // a second on 2 cores.
    sb_->write_config("", "[[pipeline]]\nname = \"sam3\"\nkind = \"sam3-segment\"\nweights = \"" +
                              sb_->path("models/sam3.pth") + "\"\nimage_size = 224\n");
    VideoSpec v;
    v.file = "clip.mp4";
    v.fps = 24;
    auto w = VideoWriter::create(sb_->path("in/clip.mp4"), v, kW, kH);
    ASSERT_TRUE(w.ok()) << w.status().message();
    for (int t = 0; t < kSourceFrames; ++t) ASSERT_TRUE((*w)->write(scene(t).view()).ok());
    ASSERT_TRUE((*w)->finish().ok());
    // Hostile: the same cut in half (its index promises 8 frames), and junk.
    std::string bytes = read_all(sb_->path("in/clip.mp4"));
    write_text(sb_->path("in/cut.mp4"), bytes.substr(0, bytes.size() / 2));
    write_text(sb_->path("in/junk.mp4"), std::string(5000, 'x'));
  }
  static void TearDownTestSuite() {
    delete sb_;
    sb_ = nullptr;
  }

  static std::string job(const std::string& id, const std::string& video,
                         const std::string& extra_output = "") {
    return "version = 1\npipeline = \"sam3\"\nid = \"" + id + "\"\n[input]\nvideo = \"" +
           sb_->path("in/" + video) +
           "\"\nprompts = [\"red square\", \"blue\"]\nthreshold = 0.1\nevery_n = " +
           std::to_string(kEveryN) + "\n[output]\ndir = \"" + sb_->path("out/" + id) +
           "\"\nvideo = { file = \"frames.mp4\" }\noverlay = { file = \"overlay.mp4\" }\n"
           "contact_sheet = true\n" +
           extra_output;
  }

  static Sandbox* sb_;
};
Sandbox* Sam3Segment::sb_ = nullptr;

// The label PNG of frame k against the JSON line's objects: each pixel holds
// the id of the highest-scoring object whose RLE mask covers it (equal
// scores: the later object), 0 where none does.
void check_frame(const std::string& dir, int64_t k, const nlohmann::json& line) {
  SCOPED_TRACE("frame " + std::to_string(k));
  EXPECT_EQ(line["frame"], k);
  EXPECT_EQ(line["source_frame"], k * kEveryN);
  EXPECT_EQ(line["width"], kW);
  EXPECT_EQ(line["height"], kH);
  char name[32];
  std::snprintf(name, sizeof name, "/label_%06lld.png", static_cast<long long>(k));
  const std::string png = read_text(dir + name);
  auto labels = decode_label_png(reinterpret_cast<const uint8_t*>(png.data()), png.size(), name);
  ASSERT_TRUE(labels.ok()) << labels.status().message();
  ASSERT_EQ(labels->width, kW);
  ASSERT_EQ(labels->height, kH);
  std::vector<uint16_t> expected(size_t(kW) * kH, 0);
  std::vector<float> best(expected.size(), -1);
  std::set<int64_t> ids;
  for (const auto& o : line["objects"]) {
    const int64_t id = o["id"];
    EXPECT_TRUE(ids.insert(id).second) << "id " << id << " twice in one frame";
    EXPECT_GE(id, 1);
    EXPECT_EQ(o["rle"]["size"], (std::vector<int>{kH, kW}));
    auto rle = coco_rle_from_string(o["rle"]["counts"].get<std::string>(), kH, kW);
    ASSERT_TRUE(rle.ok()) << rle.status().message();
    EXPECT_EQ(coco_rle_area(*rle), o["area"].get<int64_t>());
    const std::vector<uint8_t> mask = coco_rle_decode(*rle);
    const float score = o["score"];
    EXPECT_GT(score, 0.1f);  // threshold
    for (size_t p = 0; p < mask.size(); ++p) {
      if (mask[p] != 0 && score >= best[p]) {
        best[p] = score;
        expected[p] = static_cast<uint16_t>(id);
      }
    }
  }
  EXPECT_EQ(labels->ids, expected);
}

TEST_F(Sam3Segment, ServeSegmentsAVideo) {
  auto daemon = sb_->serve("serve");
  sb_->drop("seg.toml", job("seg", "clip.mp4"));
  ASSERT_TRUE(wait_until([&] { return stdfs::exists(sb_->spool("done/seg.toml")); },
                         std::chrono::seconds(300)))
      << daemon->err();
  std::optional<toml::value> st = sb_->status("done", "seg");
  ASSERT_TRUE(st);
  EXPECT_EQ(toml::find<std::string>(*st, "details", "frames"), std::to_string(kFrames));
  const std::string dir = sb_->path("out/seg");
  // Everything the status lists, and nothing else.
  std::set<std::string> listed, present;
  for (const toml::value& o : toml::find<toml::array>(*st, "outputs")) {
    listed.insert(toml::find<std::string>(o, "path"));
  }
  for (const auto& e : stdfs::directory_iterator(dir)) present.insert(e.path());
  EXPECT_EQ(listed, present);
  std::set<std::string> expected_names = {"contact_sheet.png", "detections.jsonl", "frames.mp4",
                                          "overlay.mp4"};
  for (int k = 0; k < kFrames; ++k) {
    char name[32];
    std::snprintf(name, sizeof name, "label_%06d.png", k);
    expected_names.insert(name);
  }
  std::set<std::string> names;
  for (const std::string& p : present) names.insert(p.substr(p.rfind('/') + 1));
  EXPECT_EQ(names, expected_names);

  // One JSON line per processed frame, each consistent with its label PNG.
  std::istringstream lines(read_text(dir + "/detections.jsonl"));
  std::string line;
  int64_t k = 0;
  int64_t objects = 0;
  for (; std::getline(lines, line); ++k) {
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << line;
    objects += static_cast<int64_t>(j["objects"].size());
    check_frame(dir, k, j);
  }
  EXPECT_EQ(k, kFrames);
  EXPECT_GT(objects, kFrames);  // the checks above saw masks, not just empty frames
  EXPECT_EQ(toml::find<std::string>(*st, "details", "detections"), std::to_string(objects));

  // Both videos decode back to every processed frame (what the overlay
  // draws is tested in tests/jobs/test_sam3_tracks.cpp).
  const DecodedVideo plain = decode_video(dir + "/frames.mp4");
  const DecodedVideo overlay = decode_video(dir + "/overlay.mp4");
  for (const DecodedVideo* v : {&plain, &overlay}) {
    EXPECT_TRUE(v->ok);
    EXPECT_EQ(v->frames, kFrames);
    EXPECT_EQ(v->width, kW);
    EXPECT_EQ(v->height, kH);
  }
  EXPECT_TRUE(daemon->running()) << daemon->err();
  daemon->signal(SIGTERM);
  EXPECT_EQ(daemon->wait(), 0) << daemon->err();
}

TEST_F(Sam3Segment, HostileVideosFailWithTheFileNamedAndTheDaemonGoesOn) {
  auto daemon = sb_->serve("hostile");
  sb_->drop("junk.toml", job("junk", "junk.mp4"));
  sb_->drop("cut.toml", job("cut", "cut.mp4"));
  ASSERT_TRUE(wait_until(
      [&] {
        return stdfs::exists(sb_->spool("quarantine/junk.toml")) &&
               (stdfs::exists(sb_->spool("failed/cut.toml")) ||
                stdfs::exists(sb_->spool("quarantine/cut.toml")));
      },
      std::chrono::seconds(300)))
      << daemon->err();
  // Junk: invalid at validation, at the key, naming the file.
  const std::string junk =
      toml::find<std::string>(*sb_->status("quarantine", "junk"), "error", "message");
  EXPECT_NE(junk.find(sb_->path("in/junk.mp4")), std::string::npos) << junk;
  EXPECT_NE(junk.find("input.video"), std::string::npos) << junk;
  // Cut: its header is intact, the data ends early: the job fails (not
  // retried: the file will not heal) naming the file, no outputs remain.
  std::optional<toml::value> cut = sb_->status("failed", "cut");
  if (!cut) cut = sb_->status("quarantine", "cut");
  ASSERT_TRUE(cut);
  const std::string why = toml::find<std::string>(*cut, "error", "message");
  EXPECT_NE(why.find(sb_->path("in/cut.mp4")), std::string::npos) << why;
  EXPECT_FALSE(stdfs::exists(sb_->path("out/cut")));
  EXPECT_FALSE(stdfs::exists(sb_->path("out/cut.partial")));
  // Still serving: a good job after them is done.
  sb_->drop("after.toml", job("after", "clip.mp4"));
  ASSERT_TRUE(wait_until([&] { return stdfs::exists(sb_->spool("done/after.toml")); },
                         std::chrono::seconds(300)))
      << daemon->err();
  EXPECT_TRUE(daemon->running());
  daemon->signal(SIGTERM);
  EXPECT_EQ(daemon->wait(), 0) << daemon->err();
}

TEST_F(Sam3Segment, RunDumpWritesTheNamedIntermediates) {
  write_text(sb_->path("dump.toml"), job("dumped", "clip.mp4"));
  const RunResult r =
      sb_->flick("run", {sb_->path("dump.toml"), "--dump", sb_->path("dump.safetensors")}, "dump");
  ASSERT_EQ(r.code, 0) << r.err;
  // The safetensors header: u64 length, then JSON naming every tensor.
  const std::string file = read_text(sb_->path("dump.safetensors"));
  ASSERT_GT(file.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<uint8_t>(file[i]);
  const auto header = nlohmann::json::parse(file.substr(8, n));
  for (const char* name :
       {"f0.pixels", "f0.trunk", "f0.neck.level0", "f0.p0.tokens", "f0.p0.text", "f0.p0.scores",
        "f0.p1.boxes", "f0.p1.mask_logits", "f1.pixels", "f1.p1.scores"}) {
    EXPECT_TRUE(header.contains(name)) << name;
  }
  // Only the first kSam3DumpFrames (2) frames.
  EXPECT_FALSE(header.contains("f2.pixels"));
  EXPECT_EQ(header["f0.p0.scores"]["dtype"], "F32");
  // A rerun of the finished job writes nothing and says so.
  const RunResult again =
      sb_->flick("run", {sb_->path("dump.toml"), "--dump", sb_->path("dump2.safetensors")}, "dump");
  EXPECT_EQ(again.code, 0);
  EXPECT_FALSE(stdfs::exists(sb_->path("dump2.safetensors")));
  EXPECT_NE(again.err.find("already done"), std::string::npos) << again.err;
}

// SIGTERM mid-job: the daemon stops between frames, discards the partial
// outputs (label PNGs included), requeues the job without counting an
// attempt and exits 0; a later drain completes it.
TEST(Sam3SegmentCrash, SigtermMidJobRequeuesAndLaterCompletes) {
  constexpr int kLong = 24;
  Sandbox sb;
  const RunResult synth = sb.run({"synth", sb.path("models/sam3.pth"), "--model", "sam3"}, "synth");
  ASSERT_EQ(synth.code, 0) << synth.err;
  // 448: slow enough per frame that the signal lands mid-job.
  sb.write_config("", "[[pipeline]]\nname = \"sam3\"\nkind = \"sam3-segment\"\nweights = \"" +
                          sb.path("models/sam3.pth") + "\"\nimage_size = 448\n");
  ASSERT_EQ(sb.drain().code, 0);
  sb.make_frames("long", kLong, 32, 24);
  sb.drop("long.toml", "version = 1\npipeline = \"sam3\"\n[input]\nframes = \"" +
                           sb.path("in/long") +
                           "/*.png\"\nprompts = [\"thing\"]\n[output]\ndir = \"" +
                           sb.path("out/long") + "\"\ncontact_sheet = true\n");
  auto daemon = sb.serve("sigterm");
  const std::string partial = sb.path("out/long.partial");
  ASSERT_TRUE(wait_until([&] { return stdfs::exists(partial + "/label_000001.png"); }))
      << daemon->err();
  daemon->signal(SIGTERM);
  EXPECT_EQ(daemon->wait(), 0) << daemon->err();
  EXPECT_FALSE(stdfs::exists(partial));
  EXPECT_FALSE(stdfs::exists(sb.path("out/long")));
  EXPECT_EQ(list(sb.spool("incoming")), std::vector<std::string>{"long.toml"});
  EXPECT_NE(daemon->err().find("requeued"), std::string::npos) << daemon->err();

  const RunResult r = sb.drain();
  EXPECT_EQ(r.code, 0) << r.err;
  std::optional<toml::value> st = sb.status("done", "long");
  ASSERT_TRUE(st);
  EXPECT_EQ(toml::find<int64_t>(*st, "attempts"), 1);
  EXPECT_EQ(toml::find<std::string>(*st, "details", "frames"), std::to_string(kLong));
  EXPECT_TRUE(stdfs::exists(sb.path("out/long/label_000023.png")));
}

}  // namespace
}  // namespace flick::testing
