// A FrameSink that keeps what it is given (copies of the frames and the
// begin() arguments), for tests that compare a pipeline's frames with an
// oracle.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "io/frame.h"
#include "io/frame_sink.h"

namespace flick::testing {

class CollectingSink : public FrameSink {
 public:
  Status begin(int w, int h, double fps, int64_t total) override {
    ++begins;
    width = w;
    height = h;
    this->fps = fps;
    this->total = total;
    return ok_status();
  }
  Status write(const FrameView& f) override {
    Frame copy{f.width, f.height, {}};
    for (int y = 0; y < f.height; ++y) {
      copy.rgb.insert(copy.rgb.end(), f.rgb + y * f.stride, f.rgb + y * f.stride + 3 * f.width);
    }
    frames.push_back(std::move(copy));
    return ok_status();
  }
  Status finish() override {
    ++finishes;
    return ok_status();
  }
  int begins = 0, finishes = 0, width = 0, height = 0;
  double fps = 0;
  int64_t total = 0;
  std::vector<Frame> frames;
};

}  // namespace flick::testing
