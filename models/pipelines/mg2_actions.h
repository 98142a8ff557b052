// The action track of a Matrix-Game 2.0 job, checked against the mode, as the
// per-video-frame tracks Mg2Input wants: keyboard [T, K] of 0/1 and mouse
// [T, 2] ([pitch, yaw]), T = mg2_video_frames(latent_frames).
//
// Two sources (the jobs code reads the TOML; everything here is plain data):
//   run-length segments  keyboard = [["w", 24], ["w+a", 12], ["", 21]]
//                        mouse    = [[0.0, 0.1, 57]]            # [pitch, yaw, frames]
//   a CSV file           header naming the columns (the mode's key names, plus
//                        pitch,yaw for a mode with mouse), one row per frame.
//
// Semantics, from the reference (utils/conditions.py, pipeline/causal_inference.py):
//   universal  keys w s a d, any combination; mouse [pitch, yaw] per frame
//              (the reference's camera moves are ±0.1).
//   gta_drive  keys w s; the mouse steers with yaw only: the model was trained
//              with [0, ±0.1], so pitch must be 0.
//   templerun  exactly one of its 7 keys per frame (one-hot; "nomove" is a real
//              channel, not an all-zero row); no mouse.
// Mouse values must be finite with |v| <= kMg2MaxMouse.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/pipelines/matrix_game.h"
#include "runtime/status.h"

namespace flick {

// The reference's camera moves are ±0.1 per frame (CAM_VALUE). Ten times that
// is already far outside what the model saw in training; a larger value is
// almost surely a units mistake (degrees, pixels), so it is refused.
inline constexpr double kMg2MaxMouse = 1.0;

struct Mg2Tracks {
  int64_t frames = 0;           // T
  std::vector<float> keyboard;  // [T, K] 0/1, row-major
  std::vector<float> mouse;     // [T, 2] [pitch, yaw]; empty for a mode without mouse
};

// A job without [actions]: standing still. No key and a still mouse; for
// templerun "nomove" (its one-hot idle channel).
Mg2Tracks mg2_idle_tracks(const Mg2ModeSpec& mode, int64_t frames);

// The keyboard channels pressed by `combo`: the mode's key names joined by
// '+', case-insensitive, "" = nothing pressed; bit k = mode.keys[k]. Errors
// list the valid names; templerun needs exactly one name.
Expected<uint32_t> parse_mg2_keys(const Mg2ModeSpec& mode, std::string_view combo);

// One mouse value pair: finite, |v| <= kMg2MaxMouse, pitch 0 for gta_drive;
// refused for a mode without mouse.
Status check_mg2_mouse(const Mg2ModeSpec& mode, double pitch, double yaw);

struct Mg2KeySegment {
  uint32_t pressed = 0;  // from parse_mg2_keys
  int64_t frames = 0;    // >= 1
};
struct Mg2MouseSegment {
  double pitch = 0, yaw = 0;  // checked by check_mg2_mouse
  int64_t frames = 0;         // >= 1
};

// Run-length segments into a [T, K] / [T, 2] track. The lengths must sum to
// exactly `frames`; the message says both totals.
Expected<std::vector<float>> expand_mg2_keyboard(const Mg2ModeSpec& mode,
                                                 std::span<const Mg2KeySegment> segments,
                                                 int64_t frames);
Expected<std::vector<float>> expand_mg2_mouse(std::span<const Mg2MouseSegment> segments,
                                              int64_t frames);

// Largest CSV accepted: far more than the longest track needs.
inline constexpr int64_t kMg2MaxCsvBytes = int64_t{4} << 20;

// A CSV action file: a header row naming every column once (the mode's keys,
// plus pitch and yaw for a mode with mouse; any order, case-insensitive), then
// exactly `frames` rows of numbers. Keys are 0 or 1 (templerun: exactly one 1
// per row). Blank lines and lines starting with '#' are skipped; CRLF is fine.
// Errors read "<display>:<line>: ..." and name the column.
Expected<Mg2Tracks> parse_mg2_actions_csv(const Mg2ModeSpec& mode, std::string_view text,
                                          int64_t frames, const std::string& display);

// "w, s, a, d" for messages.
std::string mg2_key_list(const Mg2ModeSpec& mode);

}  // namespace flick
