// The drawing primitives of io/overlay.h, checked pixel by pixel against
// coverage worked out by hand (a pixel is covered when its centre is inside).
#include <gtest/gtest.h>

#include "io/overlay.h"

namespace flick {
namespace {

Frame solid(int w, int h, Rgb c) {
  Frame f;
  f.width = w;
  f.height = h;
  f.rgb.resize(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < f.rgb.size(); i += 3) {
    f.rgb[i] = c.r;
    f.rgb[i + 1] = c.g;
    f.rgb[i + 2] = c.b;
  }
  return f;
}

Rgb at(const Frame& f, int x, int y) {
  const uint8_t* p = &f.rgb[(static_cast<size_t>(y) * f.width + x) * 3];
  return {p[0], p[1], p[2]};
}

bool is(const Frame& f, int x, int y, Rgb c) {
  const Rgb p = at(f, x, y);
  return p.r == c.r && p.g == c.g && p.b == c.b;
}

int count(const Frame& f, Rgb c) {
  int n = 0;
  for (int y = 0; y < f.height; ++y) {
    for (int x = 0; x < f.width; ++x) n += is(f, x, y, c);
  }
  return n;
}

constexpr Rgb kBlack{0, 0, 0};
constexpr Rgb kWhite{255, 255, 255};

TEST(Overlay, BlendRoundsToNearest) {
  Frame f = solid(2, 1, {100, 50, 0});
  blend_pixel(f, 0, 0, {0, 255, 0}, 0.8f);
  // 0.2 * 100 = 20; 0.8 * 255 + 0.2 * 50 = 214; 0.
  EXPECT_TRUE(is(f, 0, 0, {20, 214, 0}));
  EXPECT_TRUE(is(f, 1, 0, {100, 50, 0}));
  blend_pixel(f, 5, 0, kWhite, 1.0f);  // outside: ignored
  blend_pixel(f, -1, 0, kWhite, 1.0f);
}

TEST(Overlay, RoundedRectCutsItsCorners) {
  Frame f = solid(40, 30, kBlack);
  fill_rounded_rect(f, 5, 3, 20, 10, 4, kWhite, 1.0f);  // pixels x 5..24, y 3..12
  EXPECT_TRUE(is(f, 15, 8, kWhite));
  EXPECT_TRUE(is(f, 5, 7, kWhite));    // left edge, between the corners
  EXPECT_TRUE(is(f, 24, 7, kWhite));   // right edge
  EXPECT_TRUE(is(f, 14, 3, kWhite));   // top edge
  EXPECT_TRUE(is(f, 14, 12, kWhite));  // bottom edge
  EXPECT_TRUE(is(f, 6, 4, kWhite));    // centre (6.5, 4.5) is 3.54 from (9, 7): inside
  EXPECT_TRUE(is(f, 5, 3, kBlack));    // (5.5, 3.5) is 4.95 from the corner centre (9, 7)
  EXPECT_TRUE(is(f, 24, 12, kBlack));
  EXPECT_TRUE(is(f, 4, 7, kBlack));
  EXPECT_TRUE(is(f, 25, 7, kBlack));
  EXPECT_TRUE(is(f, 15, 13, kBlack));
  // Radius 0 is the plain box.
  Frame g = solid(40, 30, kBlack);
  fill_rounded_rect(g, 5, 3, 20, 10, 0, kWhite, 1.0f);
  EXPECT_EQ(count(g, kWhite), 200);
}

TEST(Overlay, DiscCoversCentresWithinTheRadius) {
  Frame f = solid(40, 30, kBlack);
  fill_disc(f, 20, 15, 5, kWhite, 1.0f);
  // Centres (i + 0.5, j + 0.5) around a pixel corner with (i+.5)² + (j+.5)² <= 25:
  // per quadrant 5 + 5 + 4 + 4 + 2 = 20.
  EXPECT_EQ(count(f, kWhite), 80);
  EXPECT_TRUE(is(f, 15, 15, kWhite));  // (15.5, 15.5): 4.5² + 0.5² = 20.5
  EXPECT_TRUE(is(f, 14, 15, kBlack));  // (14.5, 15.5): 30.5
  // Clipped at the frame's corner: the quadrant inside the frame.
  Frame g = solid(10, 10, kBlack);
  fill_disc(g, 0, 0, 5, kWhite, 1.0f);
  EXPECT_EQ(count(g, kWhite), 20);
}

TEST(Overlay, ArrowShaftAndHeadBlendEachPixelOnce) {
  Frame f = solid(40, 30, kBlack);
  draw_arrow(f, 5, 15, 35, 15, 2, kWhite, 0.5f);  // head: length 6, half base 3, base at x = 29
  const Rgb half{128, 128, 128};                  // round(127.5)
  EXPECT_TRUE(is(f, 10, 14, half));               // shaft rows 14, 15 (centres 0.5 from y = 15)
  EXPECT_TRUE(is(f, 10, 15, half));
  EXPECT_TRUE(is(f, 10, 13, kBlack));  // centre 1.5 from the axis
  EXPECT_TRUE(is(f, 10, 16, kBlack));
  EXPECT_TRUE(is(f, 29, 15, half));  // where shaft and head meet: blended once
  EXPECT_TRUE(is(f, 30, 13, half));  // head half-height at x = 30.5 is 2.25
  EXPECT_TRUE(is(f, 30, 12, kBlack));
  EXPECT_TRUE(is(f, 35, 15, kBlack));  // past the tip
  EXPECT_TRUE(is(f, 3, 15, kBlack));   // before the start
  // Pointing up: the head spans y 1..7, 2.25 pixels either side at y = 5.5.
  Frame g = solid(40, 30, kBlack);
  draw_arrow(g, 20, 15, 20, 1, 2, kWhite, 1.0f);
  EXPECT_TRUE(is(g, 19, 10, kWhite));
  EXPECT_TRUE(is(g, 20, 10, kWhite));
  EXPECT_TRUE(is(g, 21, 10, kBlack));
  EXPECT_TRUE(is(g, 21, 5, kWhite));
  EXPECT_TRUE(is(g, 22, 5, kBlack));
  EXPECT_TRUE(is(g, 20, 16, kBlack));
  EXPECT_TRUE(is(g, 20, 0, kBlack));
}

TEST(Overlay, TextUsesTheBitmapFont) {
  EXPECT_EQ(text_width("", 3), 0);
  EXPECT_EQ(text_width("W", 1), 5);
  EXPECT_EQ(text_width("AB", 2), 22);  // 2 x 6 columns x 2 - the trailing gap
  EXPECT_EQ(text_height(3), 21);

  Frame f = solid(12, 8, kBlack);
  draw_text(f, 0, 0, "I", 1, kWhite);
  // I: .###. / ..#.. x5 / .###.
  EXPECT_TRUE(is(f, 0, 0, kBlack));
  EXPECT_TRUE(is(f, 1, 0, kWhite));
  EXPECT_TRUE(is(f, 3, 0, kWhite));
  EXPECT_TRUE(is(f, 4, 0, kBlack));
  EXPECT_TRUE(is(f, 2, 3, kWhite));
  EXPECT_TRUE(is(f, 1, 3, kBlack));
  EXPECT_EQ(count(f, kWhite), 3 + 5 + 3);

  // Scale 2: the L's stem is 2 pixels wide and 14 high, its foot 10 wide.
  Frame l = solid(12, 16, kBlack);
  draw_text(l, 0, 0, "L", 2, kWhite);
  EXPECT_EQ(count(l, kWhite), 2 * 14 + 8 * 2);
  EXPECT_TRUE(is(l, 1, 0, kWhite));
  EXPECT_TRUE(is(l, 2, 0, kBlack));
  EXPECT_TRUE(is(l, 9, 13, kWhite));

  // Lower case draws as upper case; unknown characters as '?'.
  Frame upper = solid(20, 8, kBlack), lower = solid(20, 8, kBlack);
  draw_text(upper, 1, 0, "WS", 1, kWhite);
  draw_text(lower, 1, 0, "ws", 1, kWhite);
  EXPECT_EQ(upper.rgb, lower.rgb);
  Frame unknown = solid(8, 8, kBlack), question = solid(8, 8, kBlack);
  draw_text(unknown, 0, 0, "~", 1, kWhite);
  draw_text(question, 0, 0, "?", 1, kWhite);
  EXPECT_EQ(unknown.rgb, question.rgb);
  EXPECT_GT(count(question, kWhite), 0);
}

}  // namespace
}  // namespace flick
