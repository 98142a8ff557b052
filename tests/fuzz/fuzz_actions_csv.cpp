// libFuzzer: a Matrix-Game action CSV (the file an [actions] table names).
// The first byte picks the mode and the track length, the rest is the file.
// Whatever parses must be a track of exactly that many rows of valid values.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "models/pipelines/mg2_actions.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const auto modes = flick::mg2_modes();
  const flick::Mg2ModeSpec& mode = modes[data[0] % modes.size()];
  // 1, 5, 9, ... 61 video frames: the lengths 1..16 latent frames give.
  const int64_t frames = flick::mg2_video_frames(1 + (data[0] >> 4));
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  auto t = flick::parse_mg2_actions_csv(mode, text, frames, "fuzz.csv");
  if (!t.ok()) return 0;
  if (t->frames != frames || t->keyboard.size() != size_t(frames * mode.keyboard_dim)) std::abort();
  if (t->mouse.size() != (mode.mouse ? size_t(2 * frames) : 0)) std::abort();
  for (float k : t->keyboard)
    if (k != 0.f && k != 1.f) std::abort();
  for (float m : t->mouse)
    if (!std::isfinite(m) || std::fabs(m) > flick::kMg2MaxMouse) std::abort();
  return 0;
}
