// The Matrix-Game 2.0 mode table (matrix_game.cpp) by name, for the action and
// overlay tests.
#pragma once

#include <string_view>

#include "models/pipelines/matrix_game.h"
#include "runtime/status.h"

namespace flick::testing {

inline const Mg2ModeSpec& mg2_mode(std::string_view name) {
  const Mg2ModeSpec* m = find_mg2_mode(name);
  FLICK_CHECK(m != nullptr, "no such mode");
  return *m;
}

}  // namespace flick::testing
