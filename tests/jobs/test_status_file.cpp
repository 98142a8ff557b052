#include <gtest/gtest.h>

#include <sstream>

#include "jobs/status_file.h"

namespace flick {
namespace {

JobStatus sample() {
  JobStatus s;
  s.id = "shot-12";
  s.state = JobState::kDone;
  s.attempts = 2;
  s.pipeline = "encode";
  s.summary = "encode 3 frames";
  s.job_file = "/spool/incoming/shot-12.toml";
  s.job_sha256 = std::string(64, 'a');
  s.submitted_ns = 1700000000123000000;
  s.started_ns = 1700000001000000000;
  s.finished_ns = 1700000002999000000;
  s.host = "render-1";
  s.pid = 4242;
  s.output_dir = "/out/shot-12";
  s.partial_dev = 2049;
  s.partial_ino = 18446744073709551000ull;  // beyond int64: kept as a string
  JobTiming t;
  t.total_ms = 12.5;
  t.frames = 3;
  s.timing = t;
  s.outputs = {{"/out/shot-12/a.mp4", 1234, std::string(64, 'b')},
               {"/out/shot-12/f.png", 5, std::string(64, 'c')}};
  return s;
}

TEST(StatusFile, RoundTrip) {
  const std::string text = format_status(sample());
  Expected<JobStatus> back = parse_status(text, "x.status.toml");
  ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << text;
  EXPECT_EQ(back->id, "shot-12");
  EXPECT_EQ(back->state, JobState::kDone);
  EXPECT_EQ(back->attempts, 2);
  EXPECT_EQ(back->pipeline, "encode");
  EXPECT_EQ(back->job_sha256, std::string(64, 'a'));
  EXPECT_EQ(back->pid, 4242);
  EXPECT_EQ(back->partial_dev, 2049u);
  EXPECT_EQ(back->partial_ino, 18446744073709551000ull);
  ASSERT_EQ(back->outputs.size(), 2u);
  EXPECT_EQ(back->outputs[1].path, "/out/shot-12/f.png");
  EXPECT_EQ(back->outputs[0].bytes, 1234);
}

// Times are TOML offset date-times (UTC), read back as such by toml11.
TEST(StatusFile, TimesAreTomlDatetimes) {
  EXPECT_EQ(format_utc(1700000000123000000), "2023-11-14T22:13:20.123Z");
  std::istringstream in(format_status(sample()));
  const toml::value v = toml::parse(in, "x");
  ASSERT_TRUE(v.at("finished").is_offset_datetime());
  EXPECT_EQ(v.at("finished").as_offset_datetime().date.year, 2023);
  EXPECT_EQ(v.at("timing").at("frames").as_integer(), 3);
}

// Error messages carry file text: quotes, backslashes, control characters
// and invalid UTF-8 must all come back as valid TOML.
TEST(StatusFile, ErrorsWithHostileTextStayValidToml) {
  JobStatus s = sample();
  s.state = JobState::kQuarantined;
  Diagnostic d;
  d.file = "/spool/incoming/we\"ird\\name.toml";
  d.line = 3;
  d.column = 9;
  d.key = "input.frames";
  d.message = std::string("[error] bad \"x\"\n --> f\t\x01\x7f end \xff\xfe ok \xc3\xa9");
  s.error = d;
  const std::string text = format_status(s);
  Expected<JobStatus> back = parse_status(text, "q.status.toml");
  ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << text;
  ASSERT_TRUE(back->error);
  EXPECT_EQ(back->error->file, d.file);
  EXPECT_EQ(back->error->line, 3);
  EXPECT_EQ(back->error->column, 9);
  EXPECT_EQ(back->error->key, "input.frames");
  EXPECT_EQ(
      back->error->message,
      std::string("[error] bad \"x\"\n --> f\t\x01\x7f end \xef\xbf\xbd\xef\xbf\xbd ok \xc3\xa9"));
}

// What a pipeline reports about its run ([details]) and the seconds per
// frame come back in the file's order.
TEST(StatusFile, DetailsAndSecondsPerFrame) {
  JobStatus s = sample();
  s.timing->render_ms = 9000;
  s.timing->s_per_frame = 3.0;
  s.details = {
      {"mode", "universal"}, {"precision", "int8 DiT, bf16 CLIP, f32 VAE"}, {"odd key", "quoted"}};
  const std::string text = format_status(s);
  std::istringstream in(text);
  const toml::value v = toml::parse(in, "x");
  EXPECT_DOUBLE_EQ(v.at("timing").at("s_per_frame").as_floating(), 3.0);
  EXPECT_EQ(v.at("details").at("precision").as_string().str, "int8 DiT, bf16 CLIP, f32 VAE");
  EXPECT_EQ(v.at("details").at("odd key").as_string().str, "quoted");
  Expected<JobStatus> back = parse_status(text, "x.status.toml");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->details, s.details);
  // Without details there is no [details] table.
  EXPECT_EQ(format_status(sample()).find("[details]"), std::string::npos);
}

TEST(StatusFile, RejectsGarbage) {
  EXPECT_FALSE(parse_status("state = \"bogus\"\n", "x").ok());
  EXPECT_FALSE(parse_status("not toml", "x").ok());
}

}  // namespace
}  // namespace flick
