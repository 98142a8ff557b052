#include "io/boxed_mask.h"

#include <algorithm>

namespace flick {
namespace {

// The mask of the pixels where set(x, y), scanning the frame once for the
// box and once more inside it.
template <class Set>
BoxedMask boxed_mask_of(int width, int height, const Set& set) {
  BoxedMask m;
  m.width = std::max(width, 0);
  m.height = std::max(height, 0);
  int x0 = m.width, y0 = m.height, x1 = 0, y1 = 0;
  for (int y = 0; y < m.height; ++y) {
    int first = 0;
    while (first < m.width && !set(first, y)) ++first;
    if (first == m.width) continue;
    int last = m.width - 1;
    while (!set(last, y)) --last;
    x0 = std::min(x0, first);
    x1 = std::max(x1, last + 1);
    y0 = std::min(y0, y);
    y1 = y + 1;
  }
  if (x1 == 0) return m;  // nothing set: box and bits stay empty
  m.x0 = x0, m.y0 = y0, m.x1 = x1, m.y1 = y1;
  const int bw = x1 - x0;
  m.bits.resize(static_cast<size_t>(bw) * static_cast<size_t>(y1 - y0));
  for (int y = y0; y < y1; ++y) {
    uint8_t* row = m.bits.data() + static_cast<size_t>(y - y0) * static_cast<size_t>(bw);
    for (int x = x0; x < x1; ++x) {
      const uint8_t v = set(x, y) ? 1 : 0;
      row[x - x0] = v;
      m.area += v;
    }
  }
  return m;
}

}  // namespace

BoxedMask boxed_mask_above(const float* plane, int width, int height, int64_t stride, float above) {
  return boxed_mask_of(width, height, [&](int x, int y) { return plane[y * stride + x] > above; });
}

BoxedMask boxed_mask_above_window(const float* plane, int x0, int y0, int win_w, int win_h,
                                  int64_t stride, int width, int height, float above) {
  BoxedMask m = boxed_mask_above(plane, win_w, win_h, stride, above);
  m.width = std::max(width, 0);
  m.height = std::max(height, 0);
  if (!m.empty()) m.x0 += x0, m.x1 += x0, m.y0 += y0, m.y1 += y0;
  return m;
}

BoxedMask boxed_mask_from_bytes(const uint8_t* mask, int width, int height, int64_t stride) {
  return boxed_mask_of(width, height, [&](int x, int y) { return mask[y * stride + x] != 0; });
}

std::vector<uint8_t> boxed_mask_full(const BoxedMask& m) {
  std::vector<uint8_t> out(static_cast<size_t>(m.width) * static_cast<size_t>(m.height), 0);
  for (int y = m.y0; y < m.y1; ++y)
    for (int x = m.x0; x < m.x1; ++x)
      out[static_cast<size_t>(y) * static_cast<size_t>(m.width) + static_cast<size_t>(x)] =
          m.at(x, y) ? 1 : 0;
  return out;
}

int64_t boxed_mask_intersection(const BoxedMask& a, const BoxedMask& b) {
  if (a.width != b.width || a.height != b.height || a.empty() || b.empty()) return 0;
  const int x0 = std::max(a.x0, b.x0), x1 = std::min(a.x1, b.x1);
  const int y0 = std::max(a.y0, b.y0), y1 = std::min(a.y1, b.y1);
  int64_t n = 0;
  for (int y = y0; y < y1; ++y) {
    const uint8_t* ra = a.bits.data() + static_cast<size_t>(y - a.y0) * size_t(a.box_width());
    const uint8_t* rb = b.bits.data() + static_cast<size_t>(y - b.y0) * size_t(b.box_width());
    for (int x = x0; x < x1; ++x) n += ra[x - a.x0] & rb[x - b.x0];
  }
  return n;
}

double boxed_mask_iou(const BoxedMask& a, const BoxedMask& b) {
  const int64_t inter = boxed_mask_intersection(a, b);
  const int64_t uni = a.area + b.area - inter;
  return uni == 0 ? 0 : double(inter) / double(uni);
}

CocoRle coco_rle_encode(const BoxedMask& m) {
  CocoRle r;
  r.width = m.width;
  r.height = m.height;
  uint8_t current = 0;
  uint32_t run = 0;
  auto zeros = [&](int64_t n) {
    if (n <= 0) return;
    if (current != 0) {
      r.counts.push_back(run);
      current = 0;
      run = 0;
    }
    run += static_cast<uint32_t>(n);
  };
  // Column-major: the columns left of the box, then each column's rows above
  // the box, inside it and below it, then the columns right of it.
  zeros(int64_t{m.x0} * m.height);
  for (int x = m.x0; x < m.x1; ++x) {
    zeros(m.y0);
    for (int y = m.y0; y < m.y1; ++y) {
      const uint8_t v = m.at(x, y) ? 1 : 0;
      if (v != current) {
        r.counts.push_back(run);
        current = v;
        run = 0;
      }
      ++run;
    }
    zeros(m.height - m.y1);
  }
  zeros(int64_t{m.width - m.x1} * m.height);
  r.counts.push_back(run);
  return r;
}

}  // namespace flick
