#include "models/wan/flow_sampler.h"

#include <cmath>

#include "runtime/dtype.h"
#include "runtime/status.h"

namespace flick::wan {
namespace {

// torch casts f64 to bf16 through float (c10::BFloat16 has only a float
// constructor): two roundings, reproduced here.
uint16_t bf16_from_f64(double v) { return f32_to_bf16(static_cast<float>(v)); }

template <typename T, typename Load, typename Store>
void flow_to_x0_impl(std::span<const T> x, std::span<const T> flow, float sigma, std::span<T> x0,
                     Load load, Store store) {
  FLICK_CHECK(x.size() == flow.size() && x.size() == x0.size());
  const double s = sigma;
  for (size_t i = 0; i < x.size(); ++i) {
    const double fx = load(x[i]);
    const double prod = s * load(flow[i]);
    x0[i] = store(fx - prod);
  }
}

template <typename T, typename Load, typename Store>
void renoise_impl(std::span<const T> x0, std::span<const T> noise, float sigma_next,
                  int64_t channels, int64_t frames, std::span<T> out, Load load, Store store) {
  FLICK_CHECK(x0.size() == noise.size() && x0.size() == out.size());
  FLICK_CHECK(channels > 0 && frames > 0 && x0.size() % (channels * frames) == 0);
  const int64_t hw = static_cast<int64_t>(x0.size()) / (channels * frames);
  const float keep = 1.0f - sigma_next;
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t f = 0; f < frames; ++f) {
      const T* xr = x0.data() + (c * frames + f) * hw;       // x0[c, f]
      const T* nr = noise.data() + (f * channels + c) * hw;  // noise[f, c]
      T* o = out.data() + (c * frames + f) * hw;
      for (int64_t i = 0; i < hw; ++i) {
        const float a = keep * load(xr[i]);
        const float b = sigma_next * load(nr[i]);
        o[i] = store(a + b);
      }
    }
  }
}

}  // namespace

std::vector<float> torch_linspace_f32(float start, float end, int64_t steps) {
  FLICK_CHECK(steps >= 2);
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int64_t halfway = steps / 2;
  std::vector<float> out(static_cast<size_t>(steps));
  for (int64_t idx = 0; idx < steps; ++idx) {
    out[idx] = idx < halfway ? std::fma(step, static_cast<float>(idx), start)
                             : std::fma(-step, static_cast<float>(steps - idx - 1), end);
  }
  return out;
}

FlowSchedule make_flow_schedule(float shift) {
  // extra_one_step: linspace(sigma_max 1, sigma_min 0, 1001)[:-1].
  std::vector<float> s = torch_linspace_f32(1.0f, 0.0f, kTrainSteps + 1);
  s.pop_back();
  FlowSchedule out;
  out.sigmas.resize(s.size());
  out.timesteps.resize(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    // shift * s / (1 + (shift - 1) * s): each tensor op rounds to fp32.
    const float num = shift * s[i];
    const float den = 1.0f + (shift - 1.0f) * s[i];
    out.sigmas[i] = num / den;
    out.timesteps[i] = out.sigmas[i] * static_cast<float>(kTrainSteps);
  }
  return out;
}

std::vector<int> warped_step_indices(std::span<const int> step_list) {
  std::vector<int> idx;
  for (int step : step_list) {
    FLICK_CHECK(step >= 0 && step <= kTrainSteps);
    idx.push_back(kTrainSteps - step);
  }
  return idx;
}

std::vector<float> warped_step_times(const FlowSchedule& s, std::span<const int> step_list) {
  std::vector<float> t;
  for (int i : warped_step_indices(step_list)) {
    t.push_back(i < static_cast<int>(s.timesteps.size()) ? s.timesteps[i] : 0.0f);
  }
  return t;
}

int sigma_index_f64(const FlowSchedule& s, float t) {
  int best = 0;
  double best_d = std::fabs(static_cast<double>(s.timesteps[0]) - t);
  for (size_t i = 1; i < s.timesteps.size(); ++i) {
    const double d = std::fabs(static_cast<double>(s.timesteps[i]) - t);
    if (d < best_d) best_d = d, best = static_cast<int>(i);
  }
  return best;
}

int sigma_index_f32(const FlowSchedule& s, float t) {
  int best = 0;
  float best_d = std::fabs(s.timesteps[0] - t);
  for (size_t i = 1; i < s.timesteps.size(); ++i) {
    const float d = std::fabs(s.timesteps[i] - t);
    if (d < best_d) best_d = d, best = static_cast<int>(i);
  }
  return best;
}

void flow_to_x0(std::span<const uint16_t> x, std::span<const uint16_t> flow, float sigma,
                std::span<uint16_t> x0) {
  flow_to_x0_impl<uint16_t>(
      x, flow, sigma, x0, [](uint16_t v) { return static_cast<double>(bf16_to_f32(v)); },
      bf16_from_f64);
}

void flow_to_x0(std::span<const float> x, std::span<const float> flow, float sigma,
                std::span<float> x0) {
  flow_to_x0_impl<float>(
      x, flow, sigma, x0, [](float v) { return static_cast<double>(v); },
      [](double v) { return static_cast<float>(v); });
}

void renoise(std::span<const uint16_t> x0, std::span<const uint16_t> noise, float sigma_next,
             int64_t channels, int64_t frames, std::span<uint16_t> out) {
  renoise_impl<uint16_t>(x0, noise, sigma_next, channels, frames, out, bf16_to_f32, f32_to_bf16);
}

void renoise(std::span<const float> x0, std::span<const float> noise, float sigma_next,
             int64_t channels, int64_t frames, std::span<float> out) {
  renoise_impl<float>(
      x0, noise, sigma_next, channels, frames, out, [](float v) { return v; },
      [](float v) { return v; });
}

}  // namespace flick::wan
