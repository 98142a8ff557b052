#include "models/pipelines/mg2_overlay.h"

#include <algorithm>
#include <cmath>

namespace flick {
namespace {

struct Slot {
  std::string_view key;
  std::string_view label;
  int col, row;  // row 0 on top of row 1
};

// Key name -> label and place in the cluster. templerun's follow the
// reference's overlay: jump/slide/leftside/rightside on the W/S/A/D places,
// the turns beside jump.
constexpr Slot kSlots[] = {
    {"w", "W", 1, 0},
    {"a", "A", 0, 1},
    {"s", "S", 1, 1},
    {"d", "D", 2, 1},
    {"turnleft", "TURN L", 0, 0},
    {"jump", "JUMP", 1, 0},
    {"turnright", "TURN R", 2, 0},
    {"leftside", "LEFT", 0, 1},
    {"slide", "SLIDE", 1, 1},
    {"rightside", "RIGHT", 2, 1},
    {"nomove", "IDLE", 3, 1},
};

const Slot& slot_of(const Mg2ModeSpec& mode, std::string_view key) {
  if (mode.mode == Mg2Mode::kGtaDrive) {
    // Only W above S.
    static constexpr Slot kW{"w", "W", 0, 0}, kS{"s", "S", 0, 1};
    if (key == "w") return kW;
    if (key == "s") return kS;
  }
  for (const Slot& s : kSlots) {
    if (s.key == key) return s;
  }
  FLICK_CHECK(false, "no overlay slot for key");
  return kSlots[0];
}

// The unit of the layout: a key's height, 50 px at the released 352 px.
int unit(int height) {
  return std::clamp(static_cast<int>(std::lround(height * 50.0 / 352)), 8, 128);
}
int margin(int s) { return static_cast<int>(std::lround(0.4 * s)); }
int text_scale(int s) { return std::max(1, s / 20); }

}  // namespace

Mg2Overlay::Mg2Overlay(const Mg2ModeSpec& mode, Mg2Tracks tracks)
    : mode_(mode), tracks_(std::move(tracks)) {
  FLICK_CHECK(tracks_.keyboard.size() == static_cast<size_t>(tracks_.frames * mode_.keyboard_dim));
  FLICK_CHECK(tracks_.mouse.size() == (mode_.mouse ? static_cast<size_t>(tracks_.frames * 2) : 0));
}

std::vector<Mg2Overlay::KeyBox> Mg2Overlay::key_boxes(int width, int height) const {
  const int s = unit(height), m = margin(s), gap = std::max(1, s / 5);
  const int scale = text_scale(s), pad = std::max(1, s / 8);
  int box_w = s;
  for (std::string_view key : mode_.keys) {
    box_w = std::max(box_w, text_width(slot_of(mode_, key).label, scale) + 2 * pad);
  }
  std::vector<KeyBox> boxes;
  for (size_t k = 0; k < mode_.keys.size(); ++k) {
    const Slot& slot = slot_of(mode_, mode_.keys[k]);
    boxes.push_back({static_cast<int>(k), std::string(slot.label), m + slot.col * (box_w + gap),
                     height - m - s - (1 - slot.row) * (s + gap), box_w, s});
  }
  return boxes;
}

std::optional<Mg2Overlay::Compass> Mg2Overlay::compass(int width, int height) const {
  if (!mode_.mouse) return std::nullopt;
  const int s = unit(height), m = margin(s);
  return Compass{static_cast<float>(width - m - s), static_cast<float>(height - m - s),
                 static_cast<float>(s)};
}

std::pair<float, float> Mg2Overlay::arrow(int64_t index, const Compass& c) const {
  const double pitch = tracks_.mouse[index * 2], yaw = tracks_.mouse[index * 2 + 1];
  const double magnitude = std::hypot(pitch, yaw);
  if (magnitude == 0) return {0.0f, 0.0f};
  const double length = c.radius * 0.85 * std::min(1.0, magnitude / kFullArrow);
  return {static_cast<float>(yaw / magnitude * length),
          static_cast<float>(-pitch / magnitude * length)};  // pitch up is screen up
}

void Mg2Overlay::draw(int64_t index, Frame& frame) const {
  FLICK_CHECK(index >= 0 && index < tracks_.frames, "overlay frame index out of range");
  const int s = unit(frame.height), scale = text_scale(s);
  for (const KeyBox& b : key_boxes(frame.width, frame.height)) {
    const bool pressed = tracks_.keyboard[index * mode_.keyboard_dim + b.channel] != 0;
    fill_rounded_rect(frame, b.x, b.y, b.w, b.h, s / 5, pressed ? kPressed : kReleased,
                      pressed ? kPressedAlpha : kReleasedAlpha);
    draw_text(frame, b.x + (b.w - text_width(b.label, scale)) / 2,
              b.y + (b.h - text_height(scale)) / 2, b.label, scale, Rgb{0, 0, 0});
  }
  if (const std::optional<Compass> c = compass(frame.width, frame.height)) {
    const float thickness = std::max(2.0f, c->radius / 10);
    fill_disc(frame, c->cx, c->cy, c->radius, kReleased, kReleasedAlpha);
    const auto [dx, dy] = arrow(index, *c);
    if (std::hypot(dx, dy) >= 1) {
      draw_arrow(frame, c->cx, c->cy, c->cx + dx, c->cy + dy, thickness, kPressed, kPressedAlpha);
    }
    fill_disc(frame, c->cx, c->cy, thickness * 0.75f, Rgb{0, 0, 0}, 1.0f);
  }
}

}  // namespace flick
