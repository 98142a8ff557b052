// BoxedMask against the full-frame computations it replaces: the bytes of
// the frame, coco_rle_encode of the whole plane (itself checked against
// pycocotools in test_coco_rle.cpp) and a plain IoU over every pixel.
#include <gtest/gtest.h>

#include <array>
#include <limits>
#include <random>

#include "io/boxed_mask.h"

namespace flick {
namespace {

struct Case {
  int w, h;
  std::vector<uint8_t> full;
};

std::vector<Case> cases() {
  std::mt19937 rng(11);
  std::vector<Case> out;
  auto blank = [](int w, int h) { return Case{w, h, std::vector<uint8_t>(size_t(w) * h, 0)}; };
  out.push_back(blank(17, 9));  // empty
  out.push_back(blank(1, 1));
  {
    Case c = blank(1, 1);
    c.full[0] = 1;
    out.push_back(c);
  }
  for (auto [x, y] : {std::pair{0, 0}, {16, 0}, {0, 8}, {16, 8}, {7, 4}}) {  // one pixel
    Case c = blank(17, 9);
    c.full[size_t(y) * 17 + size_t(x)] = 1;
    out.push_back(c);
  }
  {
    Case c = blank(17, 9);  // everything
    std::fill(c.full.begin(), c.full.end(), 1);
    out.push_back(c);
  }
  // Blobs (a disc with holes) and sparse noise; every other one 40 x 30, so
  // IoU has overlapping pairs of one size.
  for (int i = 0; i < 40; ++i) {
    const bool fixed = i % 2 == 0;
    const int w = fixed ? 40 : 1 + int(rng() % 64), h = fixed ? 30 : 1 + int(rng() % 48);
    Case c = blank(w, h);
    const float cx = float(rng() % unsigned(w)), cy = float(rng() % unsigned(h));
    const float r = 1.f + float(rng() % 20);
    const bool sparse = i % 3 == 0;
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const bool in = (x - cx) * (x - cx) + (y - cy) * (y - cy) <= r * r && rng() % 7 != 0;
        c.full[size_t(y) * size_t(w) + size_t(x)] = sparse ? uint8_t(rng() % 23 == 0) : in;
      }
    out.push_back(c);
  }
  return out;
}

TEST(BoxedMask, MatchesTheFullPlane) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(std::to_string(c.w) + "x" + std::to_string(c.h));
    const BoxedMask m = boxed_mask_from_bytes(c.full.data(), c.w, c.h, c.w);
    EXPECT_EQ(boxed_mask_full(m), c.full);
    int64_t area = 0;
    int x0 = c.w, y0 = c.h, x1 = 0, y1 = 0;
    for (int y = 0; y < c.h; ++y)
      for (int x = 0; x < c.w; ++x) {
        const bool set = c.full[size_t(y) * size_t(c.w) + size_t(x)] != 0;
        EXPECT_EQ(m.at(x, y), set);
        if (!set) continue;
        ++area;
        x0 = std::min(x0, x), y0 = std::min(y0, y), x1 = std::max(x1, x + 1),
        y1 = std::max(y1, y + 1);
      }
    EXPECT_EQ(m.area, area);
    if (area == 0) {
      EXPECT_TRUE(m.empty());
      EXPECT_EQ((std::array{m.x0, m.y0, m.x1, m.y1}), (std::array{0, 0, 0, 0}));
      EXPECT_TRUE(m.bits.empty());
    } else {
      EXPECT_EQ((std::array{m.x0, m.y0, m.x1, m.y1}), (std::array{x0, y0, x1, y1}));
    }
    // RLE: the same runs as encoding every pixel.
    const CocoRle want = coco_rle_encode(c.full.data(), c.w, c.h, c.w);
    const CocoRle got = coco_rle_encode(m);
    EXPECT_EQ(got.counts, want.counts);
    EXPECT_EQ(got.width, c.w);
    EXPECT_EQ(got.height, c.h);
    EXPECT_EQ(coco_rle_area(got), m.area);
  }
}

TEST(BoxedMask, FromAPlaneUsesAStrictThreshold) {
  // 3 rows of 4 values in a stride of 6: only values > 0.5 are set, the
  // padding is never read as pixels.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> plane = {0.1f, 0.5f, 0.51f, 0.f,  9.f, 9.f,  //
                                    nan,  0.f,  0.f,   0.f,  9.f, 9.f,  //
                                    0.f,  1.f,  0.5f,  0.6f, 9.f, 9.f};
  const BoxedMask m = boxed_mask_above(plane.data(), 4, 3, 6, 0.5f);
  EXPECT_EQ(boxed_mask_full(m), (std::vector<uint8_t>{0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 1}));
  EXPECT_EQ((std::array{m.x0, m.y0, m.x1, m.y1}), (std::array{1, 0, 4, 3}));
  EXPECT_EQ(m.area, 3);
}

TEST(BoxedMask, IouMatchesAPixelCount) {
  const std::vector<Case> all = cases();
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = 0; j < all.size(); ++j) {
      const Case &a = all[i], &b = all[j];
      const BoxedMask ma = boxed_mask_from_bytes(a.full.data(), a.w, a.h, a.w);
      const BoxedMask mb = boxed_mask_from_bytes(b.full.data(), b.w, b.h, b.w);
      if (a.w != b.w || a.h != b.h) {
        EXPECT_EQ(boxed_mask_intersection(ma, mb), 0);
        continue;
      }
      int64_t inter = 0, uni = 0;
      for (size_t p = 0; p < a.full.size(); ++p) {
        inter += a.full[p] && b.full[p];
        uni += a.full[p] || b.full[p];
      }
      EXPECT_EQ(boxed_mask_intersection(ma, mb), inter) << i << " " << j;
      EXPECT_DOUBLE_EQ(boxed_mask_iou(ma, mb), uni == 0 ? 0 : double(inter) / double(uni));
    }
}

}  // namespace
}  // namespace flick
