#include <gtest/gtest.h>

#include <cmath>

#include "io/contact_sheet.h"

namespace flick {
namespace {

// Frame i is one flat colour that encodes i, so a cell's centre pixel tells
// which frame it shows (area scaling keeps a flat colour exact).
Frame flat(int w, int h, int64_t i) {
  Frame f{w, h, std::vector<uint8_t>(size_t{3} * w * h)};
  for (size_t p = 0; p < f.rgb.size(); p += 3) {
    f.rgb[p] = static_cast<uint8_t>(i & 0xff);
    f.rgb[p + 1] = static_cast<uint8_t>(i >> 8);
    f.rgb[p + 2] = 200;
  }
  return f;
}

int64_t frame_in_cell(const Frame& sheet, const ContactSheet& cs, int cell, int cols) {
  const int x = ContactSheet::kGap + (cell % cols) * (cs.thumb_width() + ContactSheet::kGap) +
                cs.thumb_width() / 2;
  const int y = ContactSheet::kGap + (cell / cols) * (cs.thumb_height() + ContactSheet::kGap) +
                cs.thumb_height() / 2;
  const uint8_t* p = &sheet.rgb[(size_t(y) * sheet.width + x) * 3];
  return p[0] | int64_t{p[1]} << 8;
}

TEST(ContactSheet, KnownLengthShowsSixteenEvenlySpacedFrames) {
  // 640x352 frames (Matrix-Game's size) -> 320x176 thumbnails, 4x4 grid.
  auto cs = ContactSheet::create(640, 352, 57);
  ASSERT_TRUE(cs.ok());
  for (int64_t i = 0; i < 57; ++i) ASSERT_TRUE(cs->add(flat(640, 352, i).view()).ok());
  EXPECT_EQ(cs->thumb_width(), 320);
  EXPECT_EQ(cs->thumb_height(), 176);
  const Frame sheet = cs->render();
  EXPECT_EQ(sheet.width, 4 * 320 + 5 * ContactSheet::kGap);
  EXPECT_EQ(sheet.height, 4 * 176 + 5 * ContactSheet::kGap);
  const auto shown = cs->shown_frames();
  ASSERT_EQ(shown.size(), 16u);
  for (int k = 0; k < 16; ++k) {
    const int64_t expected = std::llround(k * 56.0 / 15.0);  // first and last included
    EXPECT_EQ(shown[k], expected);
    EXPECT_EQ(frame_in_cell(sheet, *cs, k, 4), expected) << "cell " << k;
  }
  // Gaps keep the background colour.
  EXPECT_EQ(sheet.rgb[0], ContactSheet::kBackground);
}

TEST(ContactSheet, FewFramesAllShown) {
  auto cs = ContactSheet::create(30, 20, 3);
  ASSERT_TRUE(cs.ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cs->add(flat(30, 20, i).view()).ok());
  const Frame sheet = cs->render();
  // 3 cells -> 2 columns, 2 rows; thumbnails keep the small frames' size.
  EXPECT_EQ(sheet.width, 2 * 30 + 3 * ContactSheet::kGap);
  EXPECT_EQ(sheet.height, 2 * 20 + 3 * ContactSheet::kGap);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(frame_in_cell(sheet, *cs, k, 2), k);
}

TEST(ContactSheet, UnknownLengthKeepsEvenSpacing) {
  auto cs = ContactSheet::create(64, 64, 0);
  ASSERT_TRUE(cs.ok());
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(cs->add(flat(64, 64, i).view()).ok());
  const auto shown = cs->shown_frames();
  // Stride doubles 1 -> 2 -> 4 -> 8: frames 0, 8, ..., 96.
  ASSERT_EQ(shown.size(), 13u);
  for (size_t k = 0; k < shown.size(); ++k) EXPECT_EQ(shown[k], int64_t(8 * k));
  const Frame sheet = cs->render();
  for (int k = 0; k < 13; ++k) EXPECT_EQ(frame_in_cell(sheet, *cs, k, 4), 8 * k);
}

TEST(ContactSheet, PortraitAndErrors) {
  auto cs = ContactSheet::create(352, 640, 1);
  ASSERT_TRUE(cs.ok());
  EXPECT_EQ(cs->thumb_width(), 176);
  EXPECT_EQ(cs->thumb_height(), 320);
  EXPECT_TRUE(cs->render().rgb.empty());  // nothing added yet
  EXPECT_FALSE(cs->add(flat(640, 352, 0).view()).ok());
  EXPECT_FALSE(ContactSheet::create(0, 10, 5).ok());
}

}  // namespace
}  // namespace flick
