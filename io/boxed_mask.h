// A binary mask of a frame kept as the bounding box of its set pixels and the
// bytes inside that box. A detector's masks cover a small part of the frame:
// sam3-segment keeps up to 200 per prompt and frame, which as full 1280x720
// planes were ~0.9 MB each, allocated, scanned and copied whole by the
// tracker, the label map, the RLE encoder and the overlay; boxed, each of
// those touches only the box.
#pragma once

#include <cstdint>
#include <vector>

#include "io/coco_rle.h"

namespace flick {

struct BoxedMask {
  int width = 0, height = 0;           // the frame
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;  // the set pixels' box, x1 / y1 exclusive; all 0 when empty
  int64_t area = 0;                    // set pixels
  std::vector<uint8_t> bits;           // [y1 - y0][x1 - x0] 0 / 1, row-major

  bool empty() const { return area == 0; }
  int box_width() const { return x1 - x0; }
  int box_height() const { return y1 - y0; }
  // Pixel (x, y) of the frame, anywhere in it.
  bool at(int x, int y) const {
    return x >= x0 && x < x1 && y >= y0 && y < y1 &&
           bits[static_cast<size_t>(y - y0) * static_cast<size_t>(x1 - x0) +
                static_cast<size_t>(x - x0)] != 0;
  }
};

// The mask of a row-major plane (height rows of `stride` values): pixel set
// where plane > above.
BoxedMask boxed_mask_above(const float* plane, int width, int height, int64_t stride, float above);
// The mask of a width x height frame set only inside a window: plane holds
// the window's win_h rows of win_w values (row stride `stride`) from pixel
// (x0, y0), set where plane > above.
BoxedMask boxed_mask_above_window(const float* plane, int x0, int y0, int win_w, int win_h,
                                  int64_t stride, int width, int height, float above);
// The mask of row-major bytes (set where nonzero).
BoxedMask boxed_mask_from_bytes(const uint8_t* mask, int width, int height, int64_t stride);
// The whole frame, row-major 0 / 1 (width * height bytes).
std::vector<uint8_t> boxed_mask_full(const BoxedMask& m);

// Set pixels in both masks (masks of different frame sizes share none).
int64_t boxed_mask_intersection(const BoxedMask& a, const BoxedMask& b);
// Intersection over union (0 when both are empty).
double boxed_mask_iou(const BoxedMask& a, const BoxedMask& b);

// coco_rle_encode of the whole frame, in time proportional to the box.
CocoRle coco_rle_encode(const BoxedMask& m);

}  // namespace flick
