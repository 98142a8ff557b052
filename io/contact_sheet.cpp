#include "io/contact_sheet.h"

extern "C" {
#include <libswscale/swscale.h>
}

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

namespace flick {

Expected<ContactSheet> ContactSheet::create(int width, int height, int64_t total_frames) {
  if (width <= 0 || height <= 0) {
    return invalid_input("contact sheet: frame size " + std::to_string(width) + "x" +
                         std::to_string(height) + " is invalid");
  }
  ContactSheet s;
  s.width_ = width;
  s.height_ = height;
  const double scale = std::min(1.0, double{kThumbSide} / std::max(width, height));
  s.thumb_width_ = std::max(1, static_cast<int>(std::lround(width * scale)));
  s.thumb_height_ = std::max(1, static_cast<int>(std::lround(height * scale)));
  s.total_ = total_frames;
  if (total_frames > 0) {
    const int64_t cells = std::min<int64_t>(kMaxCells, total_frames);
    for (int64_t k = 0; k < cells; ++k) {
      s.picks_.push_back(cells == 1 ? 0
                                    : std::llround(double(k) * (total_frames - 1) / (cells - 1)));
    }
  }
  // Area averaging: every source pixel counts once, no aliasing.
  s.sws_ = sws_getContext(width, height, AV_PIX_FMT_RGB24, s.thumb_width_, s.thumb_height_,
                          AV_PIX_FMT_RGB24, SWS_AREA, nullptr, nullptr, nullptr);
  if (s.sws_ == nullptr) return internal_error("contact sheet: cannot create the scaler");
  return s;
}

ContactSheet::ContactSheet(ContactSheet&& o) noexcept { *this = std::move(o); }

ContactSheet& ContactSheet::operator=(ContactSheet&& o) noexcept {
  if (this != &o) {
    sws_freeContext(sws_);
    width_ = o.width_;
    height_ = o.height_;
    thumb_width_ = o.thumb_width_;
    thumb_height_ = o.thumb_height_;
    total_ = o.total_;
    next_index_ = o.next_index_;
    stride_ = o.stride_;
    picks_ = std::move(o.picks_);
    thumbs_ = std::move(o.thumbs_);
    sws_ = o.sws_;
    o.sws_ = nullptr;
  }
  return *this;
}

ContactSheet::~ContactSheet() { sws_freeContext(sws_); }

bool ContactSheet::wanted(int64_t index) const {
  if (total_ > 0) return std::binary_search(picks_.begin(), picks_.end(), index);
  return index % stride_ == 0;
}

Status ContactSheet::add(const FrameView& f) {
  if (f.width != width_ || f.height != height_) {
    return invalid_input("contact sheet: frame " + std::to_string(next_index_) + " is " +
                         std::to_string(f.width) + "x" + std::to_string(f.height) + ", expected " +
                         std::to_string(width_) + "x" + std::to_string(height_));
  }
  const int64_t index = next_index_++;
  if (!wanted(index)) return ok_status();
  FLICK_CHECK(f.stride <= INT_MAX);
  Thumb t{index, Frame{thumb_width_, thumb_height_,
                       std::vector<uint8_t>(size_t{3} * thumb_width_ * thumb_height_)}};
  const uint8_t* src = f.rgb;
  const int src_stride = static_cast<int>(f.stride);
  uint8_t* dst = t.frame.rgb.data();
  const int dst_stride = 3 * thumb_width_;
  sws_scale(sws_, &src, &src_stride, 0, height_, &dst, &dst_stride);
  thumbs_.push_back(std::move(t));
  if (total_ <= 0 && static_cast<int>(thumbs_.size()) > kMaxCells) {
    // Keep every other one; they stay evenly spaced at twice the stride.
    stride_ *= 2;
    std::erase_if(thumbs_, [&](const Thumb& th) { return th.index % stride_ != 0; });
  }
  return ok_status();
}

std::vector<int64_t> ContactSheet::shown_frames() const {
  std::vector<int64_t> out;
  for (const Thumb& t : thumbs_) out.push_back(t.index);
  return out;
}

Frame ContactSheet::render() const {
  Frame sheet;
  const int n = static_cast<int>(thumbs_.size());
  if (n == 0) return sheet;
  const int cols = static_cast<int>(std::ceil(std::sqrt(double(n))));
  const int rows = (n + cols - 1) / cols;
  sheet.width = cols * thumb_width_ + (cols + 1) * kGap;
  sheet.height = rows * thumb_height_ + (rows + 1) * kGap;
  sheet.rgb.assign(size_t{3} * sheet.width * sheet.height, kBackground);
  const size_t thumb_row = size_t{3} * thumb_width_;
  for (int i = 0; i < n; ++i) {
    const int x0 = kGap + (i % cols) * (thumb_width_ + kGap);
    const int y0 = kGap + (i / cols) * (thumb_height_ + kGap);
    for (int y = 0; y < thumb_height_; ++y) {
      std::memcpy(sheet.rgb.data() + (size_t(y0 + y) * sheet.width + x0) * 3,
                  thumbs_[i].frame.rgb.data() + thumb_row * y, thumb_row);
    }
  }
  return sheet;
}

}  // namespace flick
