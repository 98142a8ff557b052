// libFuzzer: a .zst frame archive (an encode job's input) opened and read as
// the encode pipeline does: header and seek table first, then frames.
#include <cstdint>
#include <cstdlib>

#include "io/frame_archive.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  flick::fuzz::MemFile file(data, size);
  auto r = flick::FrameArchiveReader::open(file.path());
  if (!r.ok()) return 0;
  const flick::ArchiveInfo& info = r->info();
  if (info.width <= 0 || info.height <= 0 || info.frame_count < 0 || !(info.fps > 0)) std::abort();
  flick::Frame frame;
  // A few frames, and the last: enough to reach every check of read_frame.
  for (int64_t i = 0; i < info.frame_count; i = i < 4 ? i + 1 : info.frame_count - 1) {
    if (r->read_frame(i, &frame).ok() &&
        frame.rgb.size() != size_t(3) * size_t(info.width) * size_t(info.height)) {
      std::abort();
    }
    if (i == info.frame_count - 1) break;
  }
  return 0;
}
