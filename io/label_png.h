// Label maps (sam3-segment: pixel value = object id, 0 = no object) as
// 16-bit grayscale PNG, so ids up to 65535 fit; samples are stored
// big-endian as PNG requires. Any PNG reader that keeps 16 bits reads the ids
// back (Pillow: mode "I;16"; numpy.asarray gives uint16).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace flick {

inline constexpr int64_t kMaxLabelId = 65535;

struct LabelMap {
  int width = 0;
  int height = 0;
  std::vector<uint16_t> ids;  // [height, width]
};

// zlib level 0..9; `out` is replaced.
Status encode_label_png(const LabelMap& labels, int zlib_level, std::vector<uint8_t>* out);
// Reads a 16-bit grayscale PNG (anything else is refused); `name` for messages.
Expected<LabelMap> decode_label_png(const uint8_t* data, size_t size, const std::string& name);

}  // namespace flick
