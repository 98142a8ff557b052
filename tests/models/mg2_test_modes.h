// The Matrix-Game 2.0 mode table for the action and overlay tests: keys in
// channel order as matrix_game.h documents them (spec §1).
// TODO(merge): use find_mg2_mode once matrix_game.cpp is on main.
#pragma once

#include <string_view>

#include "models/pipelines/matrix_game.h"
#include "runtime/status.h"

namespace flick::testing {

inline const Mg2ModeSpec& mg2_mode(std::string_view name) {
  static constexpr std::string_view kUniversal[] = {"w", "s", "a", "d"};
  static constexpr std::string_view kGta[] = {"w", "s"};
  static constexpr std::string_view kTemplerun[] = {"nomove",    "jump",     "slide",    "turnleft",
                                                    "turnright", "leftside", "rightside"};
  static constexpr int kSteps[] = {1000, 666, 333};
  static const Mg2ModeSpec kModes[] = {
      {Mg2Mode::kUniversal, "universal", "", 4, true, 6, kSteps, kUniversal},
      {Mg2Mode::kGtaDrive, "gta_drive", "", 2, true, 4, kSteps, kGta},
      {Mg2Mode::kTemplerun, "templerun", "", 7, false, 6, kSteps, kTemplerun},
  };
  for (const Mg2ModeSpec& m : kModes) {
    if (m.name == name) return m;
  }
  FLICK_CHECK(false, "no such mode");
  return kModes[0];
}

}  // namespace flick::testing
