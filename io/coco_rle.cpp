#include "io/coco_rle.h"

#include <algorithm>

namespace flick {

CocoRle coco_rle_encode(const uint8_t* mask, int width, int height, int64_t stride) {
  CocoRle r;
  r.width = width;
  r.height = height;
  uint8_t current = 0;
  uint32_t run = 0;
  for (int x = 0; x < width; ++x) {
    for (int y = 0; y < height; ++y) {
      const uint8_t v = mask[y * stride + x] != 0 ? 1 : 0;
      if (v != current) {
        r.counts.push_back(run);
        current = v;
        run = 0;
      }
      ++run;
    }
  }
  r.counts.push_back(run);
  return r;
}

std::vector<uint8_t> coco_rle_decode(const CocoRle& rle) {
  const int64_t h = rle.height;
  std::vector<uint8_t> out(static_cast<size_t>(rle.width) * rle.height, 0);
  int64_t pos = 0;  // column-major index
  uint8_t v = 0;
  for (uint32_t run : rle.counts) {
    for (uint32_t i = 0; i < run && pos < h * rle.width; ++i, ++pos) {
      out[static_cast<size_t>((pos % h) * rle.width + pos / h)] = v;
    }
    v ^= 1;
  }
  return out;
}

// maskApi.c rleToString.
std::string coco_rle_to_string(const std::vector<uint32_t>& counts) {
  std::string s;
  for (size_t i = 0; i < counts.size(); ++i) {
    int64_t x = counts[i];
    if (i > 2) x -= counts[i - 2];
    bool more = true;
    while (more) {
      int64_t c = x & 0x1f;
      x >>= 5;  // arithmetic: negative differences end at -1
      more = (c & 0x10) != 0 ? x != -1 : x != 0;
      if (more) c |= 0x20;
      s.push_back(static_cast<char>(c + 48));
    }
  }
  return s;
}

// maskApi.c rleFrString, with the checks it leaves out.
Expected<CocoRle> coco_rle_from_string(std::string_view s, int height, int width) {
  if (height < 0 || width < 0) return invalid_input("RLE size must not be negative");
  CocoRle r;
  r.height = height;
  r.width = width;
  const int64_t total = int64_t{height} * width;
  int64_t sum = 0;
  size_t p = 0;
  while (p < s.size()) {
    int64_t x = 0;
    int k = 0;
    bool more = true;
    while (more) {
      if (p >= s.size()) return invalid_input("RLE counts end inside a number");
      const int c = static_cast<unsigned char>(s[p]) - 48;
      if (c < 0 || c > 63) {
        return invalid_input("RLE counts hold a character outside '0'..'o' at " +
                             std::to_string(p));
      }
      if (k >= 7) return invalid_input("RLE counts hold a number too long at " + std::to_string(p));
      x |= static_cast<int64_t>(c & 0x1f) << (5 * k);
      more = (c & 0x20) != 0;
      ++p;
      ++k;
      if (!more && (c & 0x10) != 0) x |= -(int64_t{1} << (5 * k));  // sign-extend
    }
    if (r.counts.size() > 2) x += r.counts[r.counts.size() - 2];
    if (x < 0 || x > total) {
      return invalid_input("RLE run " + std::to_string(r.counts.size()) + " is " +
                           std::to_string(x) + ", outside 0.." + std::to_string(total));
    }
    sum += x;
    if (sum > total) {
      return invalid_input("RLE runs add up to more than " + std::to_string(height) + "x" +
                           std::to_string(width) + " pixels");
    }
    r.counts.push_back(static_cast<uint32_t>(x));
  }
  if (sum != total) {
    return invalid_input("RLE runs add up to " + std::to_string(sum) + " pixels, expected " +
                         std::to_string(total));
  }
  return r;
}

int64_t coco_rle_area(const CocoRle& rle) {
  int64_t a = 0;
  for (size_t i = 1; i < rle.counts.size(); i += 2) a += rle.counts[i];
  return a;
}

// maskApi.c rleToBbox: x from the first and last set column, y the min/max
// row over all runs of ones (a run that wraps a column spans the full height).
std::array<double, 4> coco_rle_bbox(const CocoRle& rle) {
  const int64_t h = rle.height;
  if (h == 0 || rle.counts.size() < 2) return {0, 0, 0, 0};
  int64_t xs = rle.width, ys = h, xe = 0, ye = 0, cc = 0;
  bool any = false;
  for (size_t j = 0; j < rle.counts.size(); ++j) {
    cc += rle.counts[j];
    if (j % 2 == 0 || rle.counts[j] == 0) continue;
    any = true;
    const int64_t t = cc - rle.counts[j];  // first pixel of the run of ones
    const int64_t y0 = t % h, x0 = (t - y0) / h;
    const int64_t last = cc - 1;
    const int64_t y1 = last % h, x1 = (last - y1) / h;
    xs = std::min(xs, x0);
    xe = std::max(xe, x1);
    if (x0 < x1) {  // the run wraps into the next column
      ys = 0;
      ye = h - 1;
    } else {
      ys = std::min(ys, y0);
      ye = std::max(ye, y1);
    }
  }
  if (!any) return {0, 0, 0, 0};
  return {static_cast<double>(xs), static_cast<double>(ys), static_cast<double>(xe - xs + 1),
          static_cast<double>(ye - ys + 1)};
}

}  // namespace flick
