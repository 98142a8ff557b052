#include "models/wan/time_embedding.h"

#include <cmath>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/status.h"

namespace flick::wan {

void time_sinusoid_f64(float t, int freq_dim, std::span<double> out) {
  FLICK_CHECK(freq_dim > 0 && freq_dim % 2 == 0 && out.size() == static_cast<size_t>(freq_dim));
  const int half = freq_dim / 2;
  const double pos = t;
  for (int j = 0; j < half; ++j) {
    // torch.pow(10000, -arange(half).div(half)) then outer with the position.
    const double omega = std::pow(10000.0, -(static_cast<double>(j) / half));
    const double angle = pos * omega;
    out[j] = std::cos(angle);
    out[half + j] = std::sin(angle);
  }
}

void time_sinusoid_bf16(std::span<const float> times, int freq_dim, std::span<uint16_t> out) {
  FLICK_CHECK(out.size() == times.size() * static_cast<size_t>(freq_dim));
  std::vector<double> row(static_cast<size_t>(freq_dim));
  for (size_t i = 0; i < times.size(); ++i) {
    time_sinusoid_f64(times[i], freq_dim, row);
    // f64 -> bf16 goes through float in torch (c10::BFloat16(float)).
    for (int j = 0; j < freq_dim; ++j) {
      out[i * freq_dim + j] = f32_to_bf16(static_cast<float>(row[j]));
    }
  }
}

}  // namespace flick::wan
