// What a job asks to be written ([output] of a job file), as plain data.
// jobs/ parses TOML into it; io/ turns it into a FrameSink.
#pragma once

#include <optional>
#include <string>

namespace flick {

struct VideoSpec {
  std::string file;            // relative to the output dir: "walk.mp4" / "walk.mkv"
  std::string codec = "h264";  // h264 (MP4, yuv420p, BT.709) | ffv1 (MKV, lossless)
  int crf = 18;                // h264 only, 0..51
  double fps = 0;              // 0: the frame rate the pipeline produces (FrameSink::begin)
  std::string preset = "veryfast";
};

enum class FrameFormat { None, Png, Jpeg, Zst };

struct FramesSpec {
  FrameFormat format = FrameFormat::None;
  int jpeg_quality = 92;  // 1..100
  int png_level = 1;      // zlib level 0..9 (fast by default)
  int zstd_level = 3;     // zst only, 1..19
};

struct OutputSpec {
  std::string dir;  // final directory; writers render into "<dir>.partial/"
  std::optional<VideoSpec> video;
  // A second video of the same frames with the pipeline's per-frame
  // annotations drawn on them (Matrix-Game: the pressed keys and the mouse).
  std::optional<VideoSpec> overlay;
  FramesSpec frames;
  bool contact_sheet = false;
};

}  // namespace flick
