#include <gtest/gtest.h>

#include "av_decode.h"
#include "io/frame_archive.h"
#include "io/image.h"
#include "io/output_sink.h"
#include "io_test_util.h"
#include "models/pipelines/encode.h"
#include "runtime/file_util.h"
#include "tests/io/collecting_sink.h"

namespace flick {
namespace {

using testing::CollectingSink;
using testing::decode_video;
using testing::noise_frame;
using testing::smooth_frame;
using testing::TempDir;

std::vector<std::string> write_pngs(const TempDir& dir, const std::vector<Frame>& frames) {
  std::vector<std::string> paths;
  for (size_t i = 0; i < frames.size(); ++i) {
    paths.push_back(dir.file("in_" + std::to_string(i) + ".png"));
    EXPECT_TRUE(write_png(paths.back(), frames[i].view(), 1).ok());
  }
  return paths;
}

TEST(EncodePipeline, PngSequenceStreamsEveryFrameWithProgress) {
  TempDir dir;
  std::vector<Frame> frames;
  for (int i = 0; i < 6; ++i) frames.push_back(noise_frame(24, 16, i));
  EncodeInput in;
  in.frame_files = write_pngs(dir, frames);
  in.fps = 12;
  EncodePipeline p;
  ASSERT_TRUE(p.validate(in).ok());
  CollectingSink sink;
  std::vector<std::pair<int64_t, int64_t>> progress;
  RunContext ctx;
  ctx.progress = [&](int64_t done, int64_t total) { progress.emplace_back(done, total); };
  ASSERT_TRUE(p.run(in, sink, ctx).ok());
  EXPECT_EQ(sink.begins, 1);
  EXPECT_EQ(sink.finishes, 1);
  EXPECT_EQ(sink.width, 24);
  EXPECT_EQ(sink.fps, 12);
  EXPECT_EQ(sink.total, 6);
  ASSERT_EQ(sink.frames.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(sink.frames[i].rgb, frames[i].rgb) << i;
  ASSERT_EQ(progress.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(progress[i], std::make_pair(int64_t(i + 1), int64_t(6)));
}

TEST(EncodePipeline, MixedPngAndJpegIntoAnMp4) {
  TempDir dir;
  std::vector<std::string> files;
  for (int i = 0; i < 4; ++i) {
    files.push_back(dir.file("f" + std::to_string(i) + (i % 2 ? ".jpg" : ".png")));
    const Frame f = smooth_frame(64, 36, i);
    ASSERT_TRUE(
        (i % 2 ? write_jpeg(files.back(), f.view(), 95) : write_png(files.back(), f.view(), 1))
            .ok());
  }
  EncodeInput in;
  in.frame_files = files;
  in.fps = 25;
  OutputSpec spec;
  VideoSpec video;
  video.file = "shot.mp4";
  video.crf = 20;
  spec.video = video;
  spec.contact_sheet = true;
  auto sink = make_output_sink(spec, dir.file("out"));
  ASSERT_TRUE(sink.ok());
  EncodePipeline p;
  ASSERT_TRUE(p.validate(in).ok());
  ASSERT_TRUE(p.run(in, **sink, RunContext{}).ok());
  auto v = decode_video(dir.file("out/shot.mp4"));
  ASSERT_EQ(v.error, "");
  EXPECT_EQ(v.rgb.size(), 4u);
  EXPECT_EQ(v.width, 64);
  EXPECT_EQ((*sink)->outputs().size(), 2u);
}

TEST(EncodePipeline, ArchiveInputUsesItsFpsUnlessGiven) {
  TempDir dir;
  std::vector<Frame> frames = {noise_frame(10, 6, 1), noise_frame(10, 6, 2), noise_frame(10, 6, 3)};
  const std::string path = dir.file("in.zst");
  {
    auto w = FrameArchiveWriter::create(path, 10, 6, 16, 3);
    ASSERT_TRUE(w.ok());
    for (const Frame& f : frames) ASSERT_TRUE((*w)->write(f.view()).ok());
    ASSERT_TRUE((*w)->finish().ok());
  }
  EncodeInput in;
  in.archive = path;
  EncodePipeline p;
  ASSERT_TRUE(p.validate(in).ok());
  CollectingSink sink;
  ASSERT_TRUE(p.run(in, sink, RunContext{}).ok());
  EXPECT_EQ(sink.fps, 16);
  EXPECT_EQ(sink.total, 3);
  ASSERT_EQ(sink.frames.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(sink.frames[i].rgb, frames[i].rgb);
  in.fps = 50;
  CollectingSink sink50;
  ASSERT_TRUE(p.run(in, sink50, RunContext{}).ok());
  EXPECT_EQ(sink50.fps, 50);
}

TEST(EncodePipeline, ValidateNamesTheFirstOffendingFile) {
  TempDir dir;
  auto files = write_pngs(dir, {noise_frame(8, 8, 1), noise_frame(8, 8, 2), noise_frame(9, 8, 3),
                                noise_frame(7, 8, 4)});
  EncodeInput in;
  in.frame_files = files;
  in.fps = 25;
  EncodePipeline p;
  Status s = p.validate(in);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidInput);
  EXPECT_NE(s.message().find("in_2.png is 9x8"), std::string::npos) << s.message();
  // run() checks too (files can change after validation) and stops at the
  // same file without finishing the sink.
  CollectingSink sink;
  Status r = p.run(in, sink, RunContext{});
  EXPECT_NE(r.message().find("in_2.png"), std::string::npos) << r.message();
  EXPECT_EQ(sink.finishes, 0);

  in.frame_files = {files[0], dir.file("missing.png")};
  s = p.validate(in);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("missing.png"), std::string::npos);
}

TEST(EncodePipeline, ValidateRejectsBadShapes) {
  EncodePipeline p;
  EncodeInput none;
  none.fps = 25;
  EXPECT_FALSE(p.validate(none).ok());
  EncodeInput both;
  both.frame_files = {"a.png"};
  both.archive = "a.zst";
  both.fps = 25;
  EXPECT_FALSE(p.validate(both).ok());
  EncodeInput no_fps;
  no_fps.frame_files = {"a.png"};
  Status s = p.validate(no_fps);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("fps"), std::string::npos);
}

TEST(EncodePipeline, StopTokenInterrupts) {
  TempDir dir;
  EncodeInput in;
  in.frame_files =
      write_pngs(dir, {noise_frame(8, 8, 1), noise_frame(8, 8, 2), noise_frame(8, 8, 3)});
  in.fps = 25;
  std::atomic<bool> stop{false};
  RunContext ctx;
  ctx.stop = &stop;
  ctx.progress = [&](int64_t done, int64_t) {
    if (done == 2) stop = true;
  };
  CollectingSink sink;
  Status s = EncodePipeline().run(in, sink, ctx);
  EXPECT_EQ(s.code(), StatusCode::kInterrupted);
  EXPECT_EQ(sink.frames.size(), 2u);
  EXPECT_EQ(sink.finishes, 0);
}

}  // namespace
}  // namespace flick
