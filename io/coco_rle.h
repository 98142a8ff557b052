// COCO run-length encoding of binary masks, as pycocotools writes it
// (cocoapi common/maskApi.c): runs over the mask in column-major order
// (x outer, y inner), alternating 0s and 1s and starting with a (possibly
// empty) run of 0s; the compressed `counts` string of rleToString stores
// each run, minus the run two before it from the third on, in 5-bit groups
// (low first, 0x20 = more follows, 0x10 of the last group = negative)
// offset by 48 into printable ASCII.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace flick {

struct CocoRle {
  int height = 0;
  int width = 0;
  std::vector<uint32_t> counts;  // run lengths, column-major, zeros first
};

// `mask` is row-major, height rows of `stride` bytes; a pixel is set when its
// byte is nonzero.
CocoRle coco_rle_encode(const uint8_t* mask, int width, int height, int64_t stride);
// The mask back, row-major (width * height bytes of 0 / 1).
std::vector<uint8_t> coco_rle_decode(const CocoRle& rle);

// pycocotools rleToString / rleFrString.
std::string coco_rle_to_string(const std::vector<uint32_t>& counts);
// Checks what a hostile string could break: bad characters, a run that is
// negative or overflows, runs that do not add up to height * width.
Expected<CocoRle> coco_rle_from_string(std::string_view counts, int height, int width);

// pycocotools area (set pixels) and toBbox ([x, y, w, h] of the set pixels'
// bounding box; all zero for an empty mask).
int64_t coco_rle_area(const CocoRle& rle);
std::array<double, 4> coco_rle_bbox(const CocoRle& rle);

}  // namespace flick
