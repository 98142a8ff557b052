// Which raw (pixel-frame) actions condition latent frame f (spec §6): the
// track is front-padded with 12 copies of raw frame 0, and latent f reads raw
// frames [4f - 12, 4f) (negative indices -> frame 0; frame 4f itself is
// excluded), flattened time-major (slot * C + channel).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "runtime/status.h"

namespace flick::wan {

inline constexpr int kActionWindowLatents = 3;  // windows_size
inline constexpr int kVaeTimeRatio = 4;         // raw frames per latent
inline constexpr int kActionWindowFrames = kActionWindowLatents * kVaeTimeRatio;  // 12

// Raw frame read by window slot k (0..11) of latent f.
constexpr int64_t action_window_frame(int64_t latent, int slot) {
  const int64_t raw = kVaeTimeRatio * latent - kActionWindowFrames + slot;
  return raw < 0 ? 0 : raw;
}

// out[k * C + c] = track[action_window_frame(latent, k) * C + c], k < 12.
// track: [raw_frames, C] rows of any element type (actions, or their
// per-raw-frame embeddings). Fails when the track is too short for `latent`.
template <typename T>
Status gather_action_window(std::span<const T> track, int64_t channels, int64_t latent,
                            std::span<T> out) {
  FLICK_CHECK(channels > 0 && latent >= 0 && track.size() % channels == 0 &&
              out.size() == static_cast<size_t>(kActionWindowFrames * channels));
  const int64_t raw_frames = static_cast<int64_t>(track.size()) / channels;
  const int64_t last = action_window_frame(latent, kActionWindowFrames - 1);
  if (last >= raw_frames) {
    return invalid_input("action track has " + std::to_string(raw_frames) +
                         " raw frames; latent frame " + std::to_string(latent) + " needs " +
                         std::to_string(last + 1));
  }
  for (int k = 0; k < kActionWindowFrames; ++k) {
    const T* row = track.data() + action_window_frame(latent, k) * channels;
    for (int64_t c = 0; c < channels; ++c) out[k * channels + c] = row[c];
  }
  return ok_status();
}

}  // namespace flick::wan
