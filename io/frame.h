// Frames as pipelines produce them and writers consume them.
#pragma once

#include <cstdint>
#include <vector>

namespace flick {

// A non-owning view of one RGB8 frame, rows top to bottom, `stride` bytes
// apart (>= 3 * width).
struct FrameView {
  int width = 0;
  int height = 0;
  int64_t stride = 0;
  const uint8_t* rgb = nullptr;
};

// An owning RGB8 frame (tightly packed).
struct Frame {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // [height, width, 3]
  FrameView view() const { return {width, height, 3LL * width, rgb.data()}; }
};

}  // namespace flick
