// A contact sheet: up to 4x4 evenly spaced frames of a sequence as thumbnails
// on one image, so a person sees a whole job at a glance. Frames stream
// through add(); only the thumbnails are kept.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "io/frame.h"
#include "runtime/status.h"

struct SwsContext;

namespace flick {

class ContactSheet {
 public:
  static constexpr int kMaxCells = 16;
  static constexpr int kThumbSide = 320;  // longest thumbnail side, in pixels
  static constexpr int kGap = 4;          // pixels between and around cells
  static constexpr uint8_t kBackground = 32;

  // total_frames > 0: picks round(k * (total - 1) / (cells - 1)), k < cells.
  // Otherwise (unknown length): every s-th frame, s doubling whenever more
  // than kMaxCells are held, which keeps between 9 and 16 evenly spaced ones.
  static Expected<ContactSheet> create(int width, int height, int64_t total_frames);

  ContactSheet(ContactSheet&&) noexcept;
  ContactSheet& operator=(ContactSheet&&) noexcept;
  ~ContactSheet();

  // Every frame of the sequence, in order.
  Status add(const FrameView& frame);
  // Cells in reading order, ceil(sqrt(n)) columns; empty frame if nothing was
  // added.
  Frame render() const;
  // Indices of the frames shown, in cell order.
  std::vector<int64_t> shown_frames() const;

  int thumb_width() const { return thumb_width_; }
  int thumb_height() const { return thumb_height_; }

 private:
  ContactSheet() = default;
  bool wanted(int64_t index) const;

  struct Thumb {
    int64_t index;
    Frame frame;
  };
  int width_ = 0, height_ = 0;
  int thumb_width_ = 0, thumb_height_ = 0;
  int64_t total_ = 0;
  int64_t next_index_ = 0;
  int64_t stride_ = 1;          // unknown length only
  std::vector<int64_t> picks_;  // known length only
  std::vector<Thumb> thumbs_;
  SwsContext* sws_ = nullptr;
};

}  // namespace flick
