#include <gtest/gtest.h>

#include <cstring>

#include "av_decode.h"
#include "runtime/file_util.h"
#include "io/video.h"
#include "io_test_util.h"

namespace flick {
namespace {

using testing::decode_video;
using testing::noise_frame;
using testing::psnr;
using testing::smooth_frame;
using testing::TempDir;

VideoSpec h264(const std::string& file, int crf = 18, double fps = 25) {
  VideoSpec s;
  s.file = file;
  s.codec = "h264";
  s.crf = crf;
  s.fps = fps;
  return s;
}

Status encode(const std::string& path, const VideoSpec& spec, const std::vector<Frame>& frames) {
  FLICK_ASSIGN_OR_RETURN(auto w,
                         VideoWriter::create(path, spec, frames[0].width, frames[0].height));
  for (const Frame& f : frames) FLICK_TRY(w->write(f.view()));
  return w->finish();
}

// Top-level MP4 boxes in file order.
std::vector<std::string> mp4_boxes(const std::vector<uint8_t>& file) {
  std::vector<std::string> boxes;
  size_t pos = 0;
  while (pos + 8 <= file.size()) {
    uint64_t size =
        uint64_t(file[pos]) << 24 | file[pos + 1] << 16 | file[pos + 2] << 8 | file[pos + 3];
    boxes.emplace_back(reinterpret_cast<const char*>(&file[pos + 4]), 4);
    if (size == 1) {
      size = 0;
      for (int i = 0; i < 8; ++i) size = size << 8 | file[pos + 8 + i];
    }
    if (size < 8) break;
    pos += size;
  }
  return boxes;
}

TEST(VideoH264, DecodesBackWithTagsFramesAndQuality) {
  TempDir dir;
  std::vector<Frame> frames;
  for (int t = 0; t < 30; ++t) frames.push_back(smooth_frame(128, 72, t));
  const std::string path = dir.file("walk.mp4");
  ASSERT_TRUE(encode(path, h264("walk.mp4"), frames).ok());
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"walk.mp4"});

  auto v = decode_video(path);
  ASSERT_EQ(v.error, "");
  EXPECT_EQ(v.codec, "h264");
  EXPECT_EQ(v.width, 128);
  EXPECT_EQ(v.height, 72);
  EXPECT_EQ(v.pix_fmt, AV_PIX_FMT_YUV420P);
  EXPECT_EQ(v.primaries, AVCOL_PRI_BT709);
  EXPECT_EQ(v.trc, AVCOL_TRC_BT709);
  EXPECT_EQ(v.colorspace, AVCOL_SPC_BT709);
  EXPECT_EQ(v.range, AVCOL_RANGE_MPEG);
  EXPECT_EQ(av_cmp_q(v.avg_frame_rate, AVRational{25, 1}), 0);
  // All 30 frames came out (the encoder was flushed), one frame period apart.
  ASSERT_EQ(v.rgb.size(), 30u);
  for (size_t i = 0; i < v.pts.size(); ++i) {
    EXPECT_EQ(av_rescale_q(v.pts[i], v.time_base, AVRational{1, 25}), int64_t(i)) << "frame " << i;
  }
  // crf 18 on a smooth image: 30 dB is a loose floor (x264 typically gives
  // 40+); the lossy path forbids an exact check.
  for (size_t i = 0; i < frames.size(); ++i) EXPECT_GE(psnr(frames[i], v.rgb[i]), 30.0) << i;

  // +faststart: the index (moov) precedes the media data (mdat).
  auto boxes = mp4_boxes(*read_file(path));
  auto moov = std::find(boxes.begin(), boxes.end(), "moov");
  auto mdat = std::find(boxes.begin(), boxes.end(), "mdat");
  ASSERT_NE(moov, boxes.end());
  ASSERT_NE(mdat, boxes.end());
  EXPECT_LT(moov - boxes.begin(), mdat - boxes.begin());
}

// The luma must come from BT.709 coefficients (as tagged), not swscale's
// BT.601 default: compare with Y = 16 + 219 * (0.2126 R + 0.7152 G + 0.0722 B)
// computed here. On saturated colours the two matrices differ by 10+ levels.
TEST(VideoH264, LumaUsesBt709Coefficients) {
  TempDir dir;
  Frame f{64, 64, std::vector<uint8_t>(64 * 64 * 3)};
  const uint8_t colours[4][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {255, 255, 0}};
  for (int y = 0; y < 64; ++y) {
    for (int x = 0; x < 64; ++x)
      std::memcpy(&f.rgb[(y * 64 + x) * 3], colours[(y / 32) * 2 + x / 32], 3);
  }
  const std::string path = dir.file("c.mp4");
  ASSERT_TRUE(encode(path, h264("c.mp4", 0), {f, f}).ok());  // crf 0: near lossless
  auto v = decode_video(path);
  ASSERT_EQ(v.error, "");
  ASSERT_EQ(v.y.size(), 2u);
  for (int q = 0; q < 4; ++q) {
    const uint8_t* c = colours[q];
    const double y709 = 16 + 219 * (0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]) / 255;
    const int px = (q % 2) * 32 + 16, py = (q / 2) * 32 + 16;  // centre of the quadrant
    EXPECT_NEAR(v.y[0][py * 64 + px], y709, 1.5) << "colour " << q;
  }
}

TEST(VideoH264, OddSizesArePaddedToEven) {
  TempDir dir;
  std::vector<Frame> frames = {smooth_frame(65, 47, 0), smooth_frame(65, 47, 1)};
  const std::string path = dir.file("odd.mkv");  // h264 in Matroska works too
  ASSERT_TRUE(encode(path, h264("odd.mkv"), frames).ok());
  auto v = decode_video(path);
  ASSERT_EQ(v.error, "");
  EXPECT_EQ(v.container, "matroska,webm");
  EXPECT_EQ(v.width, 66);
  EXPECT_EQ(v.height, 48);
  ASSERT_EQ(v.rgb.size(), 2u);
  // The original pixels are in the top-left corner.
  Frame crop{65, 47, {}};
  for (int y = 0; y < 47; ++y) {
    auto row = v.rgb[0].rgb.begin() + y * 66 * 3;
    crop.rgb.insert(crop.rgb.end(), row, row + 65 * 3);
  }
  EXPECT_GE(psnr(frames[0], crop), 30.0);
}

TEST(VideoH264, NonIntegerFrameRate) {
  TempDir dir;
  const std::string path = dir.file("ntsc.mp4");
  ASSERT_TRUE(
      encode(path, h264("ntsc.mp4", 23, 29.97), {smooth_frame(32, 32), smooth_frame(32, 32, 1)})
          .ok());
  auto v = decode_video(path);
  ASSERT_EQ(v.error, "");
  EXPECT_NEAR(av_q2d(v.avg_frame_rate), 29.97, 1e-6);
}

TEST(VideoFfv1, LosslessRoundTripIsExact) {
  TempDir dir;
  std::vector<Frame> frames = {noise_frame(45, 31, 1), smooth_frame(45, 31, 2),
                               noise_frame(45, 31, 3)};
  VideoSpec spec;
  spec.file = "lossless.mkv";
  spec.codec = "ffv1";
  spec.fps = 24;
  const std::string path = dir.file("lossless.mkv");
  ASSERT_TRUE(encode(path, spec, frames).ok());
  auto v = decode_video(path);
  ASSERT_EQ(v.error, "");
  EXPECT_EQ(v.codec, "ffv1");
  EXPECT_EQ(v.width, 45);
  EXPECT_EQ(v.height, 31);
  ASSERT_EQ(v.rgb.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(v.rgb[i].rgb, frames[i].rgb) << "frame " << i;
}

TEST(Video, SpecValidation) {
  EXPECT_TRUE(validate_video_spec(h264("a.mp4")).ok());
  EXPECT_FALSE(validate_video_spec(h264("a.avi")).ok());
  EXPECT_FALSE(validate_video_spec(h264("sub/a.mp4")).ok());
  EXPECT_FALSE(validate_video_spec(h264("a.mp4", 52)).ok());
  EXPECT_FALSE(validate_video_spec(h264("a.mp4", 18, -1)).ok());
  VideoSpec ffv1_mp4 = h264("a.mp4");
  ffv1_mp4.codec = "ffv1";
  Status s = validate_video_spec(ffv1_mp4);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(".mkv"), std::string::npos);
  VideoSpec preset = h264("a.mp4");
  preset.preset = "warp";
  s = validate_video_spec(preset);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("warp"), std::string::npos);
}

TEST(Video, AbandonedWriterLeavesNoFile) {
  TempDir dir;
  {
    auto w = VideoWriter::create(dir.file("x.mp4"), h264("x.mp4"), 32, 32);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->write(smooth_frame(32, 32).view()).ok());
    EXPECT_FALSE((*w)->write(smooth_frame(30, 32).view()).ok());
  }
  EXPECT_TRUE(dir.entries().empty());
}

}  // namespace
}  // namespace flick
