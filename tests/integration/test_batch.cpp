// 50 jobs of the encode pipeline through `flick drain`, 10 of them malformed
// in different ways: every good one ends in done/ exactly once with outputs
// that decode to its input frames; every bad one in quarantine/ with an error
// naming its file, line and key.
#include <sys/stat.h>

#include "integration_util.h"

namespace flick::testing {
namespace {

constexpr int kFrames = 3, kW = 32, kH = 24;

struct BadJob {
  std::string name;
  std::string text;
  int line;         // of the error; 0 for a file-level error
  std::string key;  // the key it names; "" for a file-level error
  std::string says;
};

TEST(Batch, FiftyJobsTenMalformed) {
  Sandbox sb;
  sb.write_config("max_job_bytes = 4096");
  ASSERT_EQ(sb.drain().code, 0);  // creates the spool
  sb.make_frames("shot", kFrames, kW, kH);
  ASSERT_TRUE(write_png_file(sb.path("secret/s.png"), kW, kH, pattern(kW, kH, 0)));
  ::symlink(sb.path("secret").c_str(), sb.path("in/link").c_str());
  ::symlink(sb.path("secret").c_str(), sb.path("out/evil").c_str());

  // 40 good jobs, alternating output sets (H.264 MP4 + PNG frames; lossless
  // FFV1 MKV + contact sheet + frame archive).
  std::vector<std::string> good;
  for (int i = 0; i < 40; ++i) {
    char id[16];
    std::snprintf(id, sizeof id, "good-%02d", i);
    good.push_back(id);
    const std::string outputs =
        i % 2 == 0 ? "video = { file = \"v.mp4\", crf = 20 }\nframes = { format = \"png\" }\n"
                   : "video = { file = \"v.mkv\", codec = \"ffv1\" }\nframes = { format = \"zst\" "
                     "}\ncontact_sheet = true\n";
    sb.drop(std::string(id) + ".toml", sb.encode_job("shot", id, outputs));
  }

  const std::string good_job = sb.encode_job("shot", "x");
  auto with = [&](const std::string& from, const std::string& to, std::string text) {
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  // Lines of encode_job(): 1 version, 2 pipeline, 3 [input], 4 frames,
  // 5 fps, 6 [output], 7 dir, 8 video, 9 frames.
  std::vector<BadJob> bad = {
      {"bad-syntax", with("fps = 25", "fps = \"25", sb.encode_job("shot", "b1")), 5, "input.fps",
       "syntax error"},
      {"bad-unknown-key", with("fps = 25", "fsp = 25", sb.encode_job("shot", "b2")), 5, "input.fsp",
       "unknown key"},
      {"bad-wrong-type", with("crf = 20", "crf = \"20\"", sb.encode_job("shot", "b3")), 8,
       "output.video.crf", "expected an integer in 0..51, got a string"},
      {"bad-missing-input", sb.encode_job("nothing-here", "b4"), 4, "input.frames",
       "no file matches"},
      {"bad-outside-roots",
       with(sb.path("in/shot"), sb.path("secret"), sb.encode_job("shot", "b5")), 4, "input.frames",
       "outside the input roots"},
      {"bad-symlink-escape", sb.encode_job("link", "b6"), 4, "input.frames",
       "resolves through a symlink"},
      {"bad-oversized", sb.encode_job("shot", "b7") + "# " + std::string(5000, 'x') + "\n", 0, "",
       "over the limit of 4096"},
      {"bad-unknown-pipeline", with("\"encode\"", "\"mg2\"", sb.encode_job("shot", "b8")), 2,
       "pipeline", "unknown pipeline"},
      {"bad-output-escape",
       with(sb.path("out/b9"), sb.path("out/evil/b9"), sb.encode_job("shot", "b9")), 7,
       "output.dir", "outside the output roots"},
      // Submitted after good-03 (older mtime below), with other content.
      {"bad-duplicate-id",
       sb.encode_job("shot", "b10", "frames = { format = \"png\" }\n", "id = \"good-03\"\n"), 3,
       "id", "duplicate id"},
  };
  for (const BadJob& b : bad) sb.drop(b.name + ".toml", b.text);
  // Queue order is (mtime, name): everything first, the duplicate last.
  const timespec early[2] = {{1000000000, 0}, {1000000000, 0}};
  const timespec later[2] = {{1000000100, 0}, {1000000100, 0}};
  for (const std::string& n : list(sb.spool("incoming"))) {
    ::utimensat(AT_FDCWD, sb.spool("incoming/" + n).c_str(),
                n == "bad-duplicate-id.toml" ? later : early, 0);
  }

  const RunResult r = sb.drain();
  EXPECT_EQ(r.code, 65) << r.err;  // some jobs were invalid

  EXPECT_TRUE(list(sb.spool("incoming")).empty());
  EXPECT_TRUE(list(sb.spool("active")).empty());
  EXPECT_TRUE(list(sb.spool("failed")).empty());
  EXPECT_EQ(sb.count("done"), 40);
  EXPECT_EQ(sb.count("done", ".toml") - sb.count("done"), 40);  // job files beside statuses
  EXPECT_EQ(sb.count("quarantine"), 10);
  EXPECT_TRUE(leftovers(sb.root()).empty());

  for (const std::string& id : good) {
    expect_done_job(sb, id, kFrames, kW, kH);
    std::optional<toml::value> st = sb.status("done", id);
    ASSERT_TRUE(st);
    EXPECT_EQ(toml::find<int64_t>(*st, "attempts"), 1);
    EXPECT_EQ(toml::find<int64_t>(*st, "timing", "frames"), kFrames);
  }
  for (const BadJob& b : bad) {
    SCOPED_TRACE(b.name);
    std::optional<toml::value> st = sb.status("quarantine", b.name);
    ASSERT_TRUE(st) << "no quarantine/" << b.name << ".status.toml";
    EXPECT_TRUE(stdfs::exists(sb.spool("quarantine/" + b.name + ".toml")));
    EXPECT_EQ(toml::find<std::string>(*st, "state"), "quarantined");
    EXPECT_EQ(toml::find<int64_t>(*st, "exit_code"), 65);
    const toml::value& e = toml::find(*st, "error");
    const std::string file = sb.spool("incoming/" + b.name + ".toml");
    EXPECT_EQ(toml::find<std::string>(e, "file"), file);
    const std::string message = toml::find<std::string>(e, "message");
    EXPECT_NE(message.find(b.says), std::string::npos) << message;
    EXPECT_NE(message.find(file), std::string::npos) << message;
    if (b.line > 0) {
      EXPECT_EQ(toml::find<int64_t>(e, "line"), b.line) << message;
      EXPECT_GT(toml::find<int64_t>(e, "column"), 0);
      EXPECT_EQ(toml::find<std::string>(e, "key"), b.key) << message;
      // The formatted error quotes the offending line under its number.
      EXPECT_NE(message.find(" " + std::to_string(b.line) + " | "), std::string::npos) << message;
    } else {
      // A file-level error (the size limit) has no line or key to name.
      EXPECT_EQ(e.as_table().count("line"), 0u);
      EXPECT_EQ(e.as_table().count("key"), 0u);
    }
  }
  // Nothing was written for the bad jobs.
  for (const std::string& o : list(sb.path("out")))
    EXPECT_EQ(o.rfind("b", 0), std::string::npos) << o;
}

}  // namespace
}  // namespace flick::testing
