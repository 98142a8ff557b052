#include "io/overlay.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "runtime/status.h"

namespace flick {
namespace {

// 7 rows of 5 bits each; bit 4 is the leftmost column.
using Glyph = std::array<uint8_t, kGlyphHeight>;

struct GlyphEntry {
  char c;
  Glyph rows;
};

constexpr GlyphEntry kFont[] = {
    {'A', {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {'B', {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}},
    {'C', {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}},
    {'D', {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C}},
    {'E', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}},
    {'F', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}},
    {'G', {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}},
    {'H', {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {'I', {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'J', {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}},
    {'K', {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}},
    {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}},
    {'M', {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}},
    {'N', {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11}},
    {'O', {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}},
    {'P', {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}},
    {'Q', {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}},
    {'R', {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}},
    {'S', {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}},
    {'T', {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
    {'U', {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}},
    {'V', {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'W', {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}},
    {'X', {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11}},
    {'Y', {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04}},
    {'Z', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}},
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}},
    {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}},
    {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}},
    {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}},
    {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}},
    {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {' ', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}},
    {'-', {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00}},
    {'+', {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00}},
    {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}},
    {'/', {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00}},
    {':', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}},
    {'<', {0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02}},
    {'>', {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08}},
    {'?', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04}},
};

const Glyph& glyph(char c) {
  if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  for (const GlyphEntry& e : kFont) {
    if (e.c == c) return e.rows;
  }
  return glyph('?');
}

uint8_t mix(uint8_t pixel, uint8_t color, float alpha) {
  const float v = color * alpha + pixel * (1.0f - alpha);
  return static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
}

// The pixels whose centres may lie in [x0, x1] x [y0, y1], clipped.
struct PixelBox {
  int x0, y0, x1, y1;  // inclusive
};
PixelBox clip(const Frame& f, float x0, float y0, float x1, float y1) {
  return {std::max(0, static_cast<int>(std::floor(x0))),
          std::max(0, static_cast<int>(std::floor(y0))),
          std::min(f.width - 1, static_cast<int>(std::ceil(x1))),
          std::min(f.height - 1, static_cast<int>(std::ceil(y1)))};
}

// Squared distance from p to the segment a-b.
float segment_distance2(float px, float py, float ax, float ay, float bx, float by) {
  const float dx = bx - ax, dy = by - ay;
  const float len2 = dx * dx + dy * dy;
  float t = len2 > 0 ? ((px - ax) * dx + (py - ay) * dy) / len2 : 0.0f;
  t = std::clamp(t, 0.0f, 1.0f);
  const float ex = ax + t * dx - px, ey = ay + t * dy - py;
  return ex * ex + ey * ey;
}

// Inside the triangle a-b-c (either winding), edges included.
bool in_triangle(float px, float py, float ax, float ay, float bx, float by, float cx, float cy) {
  const auto edge = [&](float x0, float y0, float x1, float y1) {
    return (x1 - x0) * (py - y0) - (y1 - y0) * (px - x0);
  };
  const float e0 = edge(ax, ay, bx, by), e1 = edge(bx, by, cx, cy), e2 = edge(cx, cy, ax, ay);
  return (e0 >= 0 && e1 >= 0 && e2 >= 0) || (e0 <= 0 && e1 <= 0 && e2 <= 0);
}

}  // namespace

void blend_pixel(Frame& frame, int x, int y, Rgb color, float alpha) {
  if (x < 0 || y < 0 || x >= frame.width || y >= frame.height) return;
  uint8_t* p = &frame.rgb[(static_cast<size_t>(y) * frame.width + x) * 3];
  p[0] = mix(p[0], color.r, alpha);
  p[1] = mix(p[1], color.g, alpha);
  p[2] = mix(p[2], color.b, alpha);
}

void fill_rounded_rect(Frame& frame, int x, int y, int w, int h, int radius, Rgb color,
                       float alpha) {
  if (w <= 0 || h <= 0) return;
  const float r = static_cast<float>(std::clamp(radius, 0, std::min(w, h) / 2));
  const PixelBox b = clip(frame, float(x), float(y), float(x + w - 1), float(y + h - 1));
  for (int py = b.y0; py <= b.y1; ++py) {
    for (int px = b.x0; px <= b.x1; ++px) {
      // Distance of the pixel centre from the inner rectangle the corner
      // circles are centred on.
      const float cx = px + 0.5f, cy = py + 0.5f;
      const float dx = std::max({x + r - cx, cx - (x + w - r), 0.0f});
      const float dy = std::max({y + r - cy, cy - (y + h - r), 0.0f});
      if (dx * dx + dy * dy <= r * r) blend_pixel(frame, px, py, color, alpha);
    }
  }
}

void fill_disc(Frame& frame, float cx, float cy, float radius, Rgb color, float alpha) {
  const PixelBox b = clip(frame, cx - radius, cy - radius, cx + radius, cy + radius);
  for (int py = b.y0; py <= b.y1; ++py) {
    for (int px = b.x0; px <= b.x1; ++px) {
      const float dx = px + 0.5f - cx, dy = py + 0.5f - cy;
      if (dx * dx + dy * dy <= radius * radius) blend_pixel(frame, px, py, color, alpha);
    }
  }
}

void draw_arrow(Frame& frame, float x0, float y0, float x1, float y1, float thickness, Rgb color,
                float alpha) {
  const float dx = x1 - x0, dy = y1 - y0;
  const float len = std::sqrt(dx * dx + dy * dy);
  if (len <= 0) return;
  const float ux = dx / len, uy = dy / len;
  const float head = std::min(3.0f * thickness, len);
  const float half_base = 1.5f * thickness;
  const float bx = x1 - ux * head, by = y1 - uy * head;  // centre of the head's base
  const float lx = bx - uy * half_base, ly = by + ux * half_base;
  const float rx = bx + uy * half_base, ry = by - ux * half_base;
  const float half = thickness / 2;
  const float pad = std::max(half, half_base);
  const PixelBox b = clip(frame, std::min(x0, x1) - pad, std::min(y0, y1) - pad,
                          std::max(x0, x1) + pad, std::max(y0, y1) + pad);
  for (int py = b.y0; py <= b.y1; ++py) {
    for (int px = b.x0; px <= b.x1; ++px) {
      const float cx = px + 0.5f, cy = py + 0.5f;
      const bool shaft = segment_distance2(cx, cy, x0, y0, bx, by) <= half * half;
      if (shaft || in_triangle(cx, cy, x1, y1, lx, ly, rx, ry)) {
        blend_pixel(frame, px, py, color, alpha);
      }
    }
  }
}

int text_width(std::string_view text, int scale) {
  if (text.empty()) return 0;
  return static_cast<int>(text.size()) * (kGlyphWidth + 1) * scale - scale;
}

void draw_text(Frame& frame, int x, int y, std::string_view text, int scale, Rgb color) {
  FLICK_CHECK(scale >= 1);
  for (char c : text) {
    const Glyph& g = glyph(c);
    for (int row = 0; row < kGlyphHeight; ++row) {
      for (int col = 0; col < kGlyphWidth; ++col) {
        if (((g[row] >> (kGlyphWidth - 1 - col)) & 1) == 0) continue;
        for (int sy = 0; sy < scale; ++sy) {
          for (int sx = 0; sx < scale; ++sx) {
            blend_pixel(frame, x + col * scale + sx, y + row * scale + sy, color, 1.0f);
          }
        }
      }
    }
    x += (kGlyphWidth + 1) * scale;
  }
}

}  // namespace flick
