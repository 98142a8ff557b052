// Reading video files (the sam3-segment input) through libavformat /
// libavcodec (FFmpeg 5.1): the best video stream is decoded one frame at a
// time and converted to RGB8 by swscale with the stream's own matrix and
// range (BT.709 when the stream says so, BT.601 when it says so or says
// nothing), so memory stays at one frame whatever the length.
//
// Hostile files: the size is checked from the stream header and again on
// every decoded frame (a size change mid-stream is an error), the number of
// frames is capped, the decoder reports corrupt data instead of concealing it
// (AV_EF_EXPLODE), and a stream that ends before the frame count its
// container promised is reported as truncated. Every error names the file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "io/frame.h"
#include "runtime/status.h"

namespace flick {

struct VideoReaderLimits {
  int max_side = 8192;                        // width and height
  int64_t max_pixels = int64_t{1} << 25;      // width * height (33.5 M: 8K UHD fits)
  int64_t max_frames = 1000000;               // decoded frames
  int64_t max_file_bytes = int64_t{1} << 40;  // refused at open from fstat
};

struct VideoInfo {
  int width = 0;
  int height = 0;
  double fps = 0;           // the stream's average rate; 0 when unknown
  int64_t frame_count = 0;  // from the container index; 0 when unknown
  std::string codec;        // "h264", "ffv1", ...
};

class VideoReader {
 public:
  // Opens `path` and reads the stream headers (no frame is decoded).
  static Expected<std::unique_ptr<VideoReader>> open(const std::string& path,
                                                     const VideoReaderLimits& limits = {});
  // The same for a file already open: the reader takes `fd` over (closes it,
  // even on failure) and reads only through it; `name` is for messages.
  static Expected<std::unique_ptr<VideoReader>> open_fd(int fd, const std::string& name,
                                                        const VideoReaderLimits& limits = {});
  ~VideoReader();
  VideoReader(const VideoReader&) = delete;
  VideoReader& operator=(const VideoReader&) = delete;

  const VideoInfo& info() const;
  const std::string& name() const;
  // Decodes the next frame into `out` (resized as needed, reused across
  // calls). Returns false after the last frame.
  Expected<bool> read(Frame* out);
  // Frames returned so far.
  int64_t frames_read() const;

 private:
  struct Impl;
  explicit VideoReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flick
