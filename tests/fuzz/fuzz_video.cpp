// libFuzzer: a video file (a sam3-segment job's input) opened and decoded as
// the pipeline reads it: headers, then frames in order until the end or an
// error. The limits are small so that one input stays well inside the
// per-input timeout; the checks they guard are the same at any size.
#include <cstdint>
#include <cstdlib>

#include "io/video_reader.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  flick::fuzz::MemFile file(data, size);
  flick::VideoReaderLimits limits;
  limits.max_side = 512;
  limits.max_pixels = 512 * 512;
  limits.max_frames = 32;
  auto r = flick::VideoReader::open(file.path(), limits);
  if (!r.ok()) return 0;
  const flick::VideoInfo& info = (*r)->info();
  if (info.width <= 0 || info.height <= 0 || info.width > limits.max_side ||
      info.height > limits.max_side) {
    std::abort();  // open() must refuse what the limits exclude
  }
  flick::Frame frame;
  for (;;) {
    auto more = (*r)->read(&frame);
    if (!more.ok() || !*more) break;
    if (frame.width != info.width || frame.height != info.height ||
        frame.rgb.size() != size_t(3) * size_t(frame.width) * size_t(frame.height)) {
      std::abort();  // a size change mid-stream must be an error, not a frame
    }
    if ((*r)->frames_read() > limits.max_frames) std::abort();
  }
  return 0;
}
