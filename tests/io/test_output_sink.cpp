#include <gtest/gtest.h>

#include <algorithm>

#include "av_decode.h"
#include "io/contact_sheet.h"
#include "runtime/file_util.h"
#include "io/frame_archive.h"
#include "io/image.h"
#include "io/output_sink.h"
#include "io_test_util.h"

namespace flick {
namespace {

using testing::decode_video;
using testing::noise_frame;
using testing::psnr;
using testing::smooth_frame;
using testing::TempDir;

std::vector<Frame> clip(int n, int w = 48, int h = 32) {
  std::vector<Frame> frames;
  for (int i = 0; i < n; ++i) frames.push_back(smooth_frame(w, h, i));
  return frames;
}

Expected<std::vector<OutputFile>> render(const OutputSpec& spec, const std::string& dir,
                                         const std::vector<Frame>& frames, double fps = 25) {
  FLICK_ASSIGN_OR_RETURN(auto sink, make_output_sink(spec, dir));
  FLICK_TRY(sink->begin(frames[0].width, frames[0].height, fps, int64_t(frames.size())));
  for (const Frame& f : frames) FLICK_TRY(sink->write(f.view()));
  FLICK_TRY(sink->finish());
  return sink->outputs();
}

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// Every listed file exists with the listed size, and nothing else is there.
void expect_listing_matches(const TempDir& dir, const std::string& sub,
                            const std::vector<OutputFile>& files) {
  std::vector<std::string> names;
  for (const OutputFile& f : files) {
    names.push_back(f.name);
    auto size = file_size(dir.file(sub + "/" + f.name));
    ASSERT_TRUE(size.ok()) << f.name;
    EXPECT_EQ(*size, f.bytes) << f.name;
  }
  EXPECT_EQ(sorted(names), sorted(dir.entries(sub)));
}

TEST(OutputSink, PngFramesVideoAndContactSheet) {
  TempDir dir;
  OutputSpec spec;
  VideoSpec video;
  video.file = "walk.mp4";
  spec.video = video;  // fps 0: the rate given to begin()
  spec.frames.format = FrameFormat::Png;
  spec.contact_sheet = true;
  const auto frames = clip(5);
  const std::string out = dir.file("job.partial");  // created by the sink
  auto files = render(spec, out, frames, 12);
  ASSERT_TRUE(files.ok()) << files.status().message();
  expect_listing_matches(dir, "job.partial", *files);
  ASSERT_EQ(files->size(), 5u + 2u);
  for (int i = 0; i < 5; ++i) {
    auto f = read_png(out + "/" + frame_file_name(i, FrameFormat::Png));
    ASSERT_TRUE(f.ok()) << f.status().message();
    EXPECT_EQ(f->rgb, frames[i].rgb);
  }
  auto v = decode_video(out + "/walk.mp4");
  ASSERT_EQ(v.error, "");
  EXPECT_EQ(v.rgb.size(), 5u);
  EXPECT_EQ(av_cmp_q(v.avg_frame_rate, AVRational{12, 1}), 0);
  auto sheet = read_png(out + "/contact_sheet.png");
  ASSERT_TRUE(sheet.ok());
  // 5 frames -> 3 columns x 2 rows of 48x32 thumbnails (smaller than 320).
  EXPECT_EQ(sheet->width, 3 * 48 + 4 * ContactSheet::kGap);
  EXPECT_EQ(sheet->height, 2 * 32 + 3 * ContactSheet::kGap);
}

TEST(OutputSink, JpegFrames) {
  TempDir dir;
  OutputSpec spec;
  spec.frames.format = FrameFormat::Jpeg;
  spec.frames.jpeg_quality = 95;
  const auto frames = clip(3, 64, 48);
  auto files = render(spec, dir.path(), frames);
  ASSERT_TRUE(files.ok()) << files.status().message();
  expect_listing_matches(dir, "", *files);
  EXPECT_EQ((*files)[2].name, "frame_000002.jpg");
  auto f = read_jpeg(dir.file("frame_000002.jpg"));
  ASSERT_TRUE(f.ok());
  EXPECT_GE(psnr(*f, frames[2]), 35.0);
}

TEST(OutputSink, ArchiveAndLosslessVideo) {
  TempDir dir;
  OutputSpec spec;
  VideoSpec video;
  video.file = "master.mkv";
  video.codec = "ffv1";
  video.fps = 30;  // explicit: wins over the pipeline's rate
  spec.video = video;
  spec.frames.format = FrameFormat::Zst;
  std::vector<Frame> frames = {noise_frame(20, 12, 1), noise_frame(20, 12, 2)};
  auto files = render(spec, dir.path(), frames, 16);
  ASSERT_TRUE(files.ok()) << files.status().message();
  expect_listing_matches(dir, "", *files);
  auto r = FrameArchiveReader::open(dir.file("frames.zst"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->info().fps, 16);
  Frame f;
  ASSERT_TRUE(r->read_frame(1, &f).ok());
  EXPECT_EQ(f.rgb, frames[1].rgb);
  auto v = decode_video(dir.file("master.mkv"));
  ASSERT_EQ(v.error, "");
  EXPECT_EQ(av_cmp_q(v.avg_frame_rate, AVRational{30, 1}), 0);
  ASSERT_EQ(v.rgb.size(), 2u);
  EXPECT_EQ(v.rgb[1].rgb, frames[1].rgb);
}

TEST(OutputSink, AbandonedSinkLeavesOnlyFinishedFrames) {
  TempDir dir;
  OutputSpec spec;
  VideoSpec video;
  video.file = "v.mp4";
  spec.video = video;
  spec.frames.format = FrameFormat::Png;
  spec.contact_sheet = true;
  {
    auto sink = make_output_sink(spec, dir.path());
    ASSERT_TRUE(sink.ok());
    ASSERT_TRUE((*sink)->begin(16, 16, 25, 10).ok());
    ASSERT_TRUE((*sink)->write(smooth_frame(16, 16).view()).ok());
    // A wrong-sized frame fails, and every later call reports that error.
    Status bad = (*sink)->write(smooth_frame(8, 16).view());
    ASSERT_FALSE(bad.ok());
    EXPECT_FALSE((*sink)->write(smooth_frame(16, 16).view()).ok());
    EXPECT_EQ((*sink)->finish().message(), bad.message());
  }
  // The video temporary is gone; the one finished frame stays (a resumed
  // job may keep it).
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"frame_000000.png"});
}

// The overlay video holds the annotated frames (the annotator sees each
// frame's index and a copy, so the plain video and frames stay untouched).
TEST(OutputSink, OverlayVideoGetsAnnotatedCopies) {
  TempDir dir;
  OutputSpec spec;
  VideoSpec overlay;
  overlay.file = "icon.mkv";
  overlay.codec = "ffv1";  // lossless: the decoded frames are the annotated ones exactly
  spec.overlay = overlay;
  spec.frames.format = FrameFormat::Png;
  const auto frames = clip(3, 24, 16);
  std::vector<int64_t> seen;
  // Paints row `index` white.
  FrameAnnotator annotate = [&seen](int64_t index, Frame& f) {
    seen.push_back(index);
    std::fill_n(f.rgb.begin() + index * f.width * 3, f.width * 3, uint8_t{255});
  };
  {
    auto sink = make_output_sink(spec, dir.path(), annotate);
    ASSERT_TRUE(sink.ok()) << sink.status().message();
    ASSERT_TRUE((*sink)->begin(24, 16, 12, 3).ok());
    for (const Frame& f : frames) ASSERT_TRUE((*sink)->write(f.view()).ok());
    ASSERT_TRUE((*sink)->finish().ok());
    expect_listing_matches(dir, "", (*sink)->outputs());
  }
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2}));
  auto v = decode_video(dir.file("icon.mkv"));
  ASSERT_EQ(v.error, "");
  EXPECT_EQ(av_cmp_q(v.avg_frame_rate, AVRational{12, 1}), 0);
  ASSERT_EQ(v.rgb.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    Frame expected = frames[i];
    std::fill_n(expected.rgb.begin() + i * 24 * 3, 24 * 3, uint8_t{255});
    EXPECT_EQ(v.rgb[i].rgb, expected.rgb) << "frame " << i;
    auto png = read_png(dir.file(frame_file_name(i, FrameFormat::Png)));
    ASSERT_TRUE(png.ok());
    EXPECT_EQ(png->rgb, frames[i].rgb) << "frame " << i << " must not be annotated";
  }
}

TEST(OutputSink, OverlayNeedsAnnotatorAndItsOwnName) {
  TempDir dir;
  OutputSpec spec;
  VideoSpec video;
  video.file = "walk.mp4";
  spec.overlay = video;
  auto no_annotator = make_output_sink(spec, dir.path());
  ASSERT_FALSE(no_annotator.ok());
  EXPECT_NE(no_annotator.status().message().find("output.overlay"), std::string::npos);

  spec.video = video;  // the same name twice
  Status clash = validate_output_spec(spec);
  ASSERT_FALSE(clash.ok());
  EXPECT_NE(clash.message().find("output.overlay.file"), std::string::npos) << clash.message();

  spec.video.reset();
  spec.overlay->crf = 60;
  Status crf = validate_output_spec(spec);
  ASSERT_FALSE(crf.ok());
  EXPECT_NE(crf.message().find("output.overlay"), std::string::npos) << crf.message();
}

TEST(OutputSink, SpecValidation) {
  TempDir dir;
  OutputSpec spec;
  spec.frames.format = FrameFormat::Jpeg;
  spec.frames.jpeg_quality = 0;
  auto s = make_output_sink(spec, dir.path());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("quality"), std::string::npos);

  spec = {};
  spec.frames.format = FrameFormat::Png;
  spec.frames.png_level = 10;
  EXPECT_FALSE(validate_output_spec(spec).ok());

  spec = {};
  VideoSpec video;
  video.file = "contact_sheet.png";
  spec.video = video;
  EXPECT_FALSE(validate_output_spec(spec).ok());
  spec.video->file = "../escape.mp4";
  EXPECT_FALSE(validate_output_spec(spec).ok());

  spec = {};
  auto parent_missing = make_output_sink(spec, dir.file("no/such/dir"));
  ASSERT_FALSE(parent_missing.ok());
  EXPECT_NE(parent_missing.status().message().find("no/such/dir"), std::string::npos);
}

}  // namespace
}  // namespace flick
