// Video files through libavformat / libavcodec (FFmpeg 5.1):
//   h264: libx264, yuv420p, BT.709 primaries / transfer / matrix, limited
//         range, converted by swscale with BT.709 coefficients; CRF and preset
//         from VideoSpec; MP4 with the moov atom first (+faststart).
//   ffv1: lossless FFV1 level 3 (bgr0 planes, slice CRCs, intra only) in MKV.
// The file is written under a temporary name and renamed by finish().
#pragma once

#include <memory>
#include <string>

#include "io/frame.h"
#include "io/output_spec.h"
#include "runtime/status.h"

namespace flick {

// Checks codec, container (from the file extension), crf, preset and fps (0
// allowed: "the pipeline's rate") without opening anything; the message names
// the offending field.
Status validate_video_spec(const VideoSpec& spec);

class VideoWriter {
 public:
  // `path` is the final file name; the container is chosen from its extension
  // (.mp4 / .mov / .mkv). H.264 needs even sizes: odd widths or heights are
  // padded by repeating the last column / row. spec.fps must be set (> 0).
  static Expected<std::unique_ptr<VideoWriter>> create(const std::string& path,
                                                       const VideoSpec& spec, int width,
                                                       int height);
  ~VideoWriter();
  VideoWriter(const VideoWriter&) = delete;
  VideoWriter& operator=(const VideoWriter&) = delete;

  Status write(const FrameView& frame);
  // Flushes the encoder, writes the trailer, fsyncs and renames into place.
  // The directory is not synced.
  Status finish();

  int64_t frames_written() const;
  const std::string& path() const;

 private:
  struct Impl;
  explicit VideoWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flick
