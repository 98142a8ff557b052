// The action overlay of a Matrix-Game 2.0 video, as the reference's
// *_icon.mp4 (utils/visualize.py) shows it: the mode's keys as boxes in the
// bottom-left corner (pressed: green, else grey, alpha-blended, labelled) and,
// for a mode with mouse, a compass in the bottom-right corner whose arrow
// points where the camera turns (yaw right, pitch up).
//
//   universal      [W]            gta_drive  [W]     templerun  [TURN L][JUMP ][TURN R]
//               [A][S][D]                    [S]                [LEFT  ][SLIDE][RIGHT ][IDLE]
//
// Sizes follow the frame height: keys are 50 px at the released 352 px.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/frame.h"
#include "io/overlay.h"
#include "models/pipelines/matrix_game.h"
#include "models/pipelines/mg2_actions.h"

namespace flick {

class Mg2Overlay {
 public:
  static constexpr Rgb kPressed{0, 255, 0};
  static constexpr Rgb kReleased{200, 200, 200};
  static constexpr float kPressedAlpha = 0.8f;  // the reference's alphas
  static constexpr float kReleasedAlpha = 0.5f;
  // A mouse move of this size (the reference's ±0.1) draws a full-length arrow.
  static constexpr double kFullArrow = 0.1;

  struct KeyBox {
    int channel;        // keyboard channel (index into mode.keys)
    std::string label;  // "W", "TURN L"
    int x, y, w, h;
  };
  struct Compass {
    float cx, cy, radius;
  };

  // `tracks` are the job's checked tracks (validate_mg2_input).
  Mg2Overlay(const Mg2ModeSpec& mode, Mg2Tracks tracks);

  // Draws the overlay of video frame `index` onto `frame`.
  void draw(int64_t index, Frame& frame) const;

  // The layout for a width x height frame (for drawing and for tests).
  std::vector<KeyBox> key_boxes(int width, int height) const;
  // Only for a mode with mouse.
  std::optional<Compass> compass(int width, int height) const;
  // Where the compass arrow of frame `index` ends, relative to the centre,
  // in pixels (x right, y down); (0, 0) when the mouse is still.
  std::pair<float, float> arrow(int64_t index, const Compass& c) const;

 private:
  Mg2ModeSpec mode_;
  Mg2Tracks tracks_;
};

}  // namespace flick
