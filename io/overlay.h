// Small drawing primitives for annotating RGB8 frames (the action overlay of
// Matrix-Game videos): alpha-blended rounded boxes, discs, arrows and text in
// a built-in 5x7 bitmap font. No anti-aliasing: a pixel is covered when its
// centre is inside the shape. Everything clips to the frame.
#pragma once

#include <cstdint>
#include <string_view>

#include "io/frame.h"

namespace flick {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
};

// `alpha` in [0, 1] blends the colour over the pixel: round(c·a + p·(1 - a)).
void blend_pixel(Frame& frame, int x, int y, Rgb color, float alpha);

// The box [x, x + w) x [y, y + h) with corners rounded by `radius` pixels.
void fill_rounded_rect(Frame& frame, int x, int y, int w, int h, int radius, Rgb color,
                       float alpha);
void fill_disc(Frame& frame, float cx, float cy, float radius, Rgb color, float alpha);
// A shaft `thickness` pixels wide from (x0, y0) to a triangular head whose
// tip is (x1, y1). Each pixel is blended once, where shaft and head meet too.
void draw_arrow(Frame& frame, float x0, float y0, float x1, float y1, float thickness, Rgb color,
                float alpha);

inline constexpr int kGlyphWidth = 5;
inline constexpr int kGlyphHeight = 7;
// Each font pixel is drawn as scale x scale pixels, one blank font column
// between characters. Letters are upper case (lower case is drawn as upper
// case); digits, space and - + . / : < > ? are there too, anything else is '?'.
int text_width(std::string_view text, int scale);
constexpr int text_height(int scale) { return kGlyphHeight * scale; }
// (x, y) is the top-left corner of the first character. Opaque.
void draw_text(Frame& frame, int x, int y, std::string_view text, int scale, Rgb color);

}  // namespace flick
