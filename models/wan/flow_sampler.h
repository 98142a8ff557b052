// Matrix-Game 2.0's few-step flow-matching sampler (spec §3): the
// FlowMatchScheduler(shift 5, 1000 train steps, extra_one_step) tables exactly
// as torch computes them in fp32, the warped step lists, the sigma lookup, the
// x0 prediction (f64) and the re-noise (fp32, then the working dtype).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace flick::wan {

inline constexpr int kTrainSteps = 1000;

// The scheduler after set_timesteps(1000): sigmas[i] and timesteps[i] =
// 1000 * sigmas[i], i < 1000, fp32.
struct FlowSchedule {
  std::vector<float> sigmas;
  std::vector<float> timesteps;
};
FlowSchedule make_flow_schedule(float shift = 5.0f);

// torch.linspace(start, end, steps) in fp32, element for element as ATen's
// CPU kernel computes it (a scalar loop since torch 2.1): the first half
// counts up from start, the second half down from end, each element one
// fused multiply-add (the compiler contracts start + step * idx in torch's
// build; verified bit for bit against torch 2.15's sigmas).
std::vector<float> torch_linspace_f32(float start, float end, int64_t steps);

// warp_denoising_step: cat(timesteps, [0])[1000 - step] for each listed step
// (e.g. [1000, 666, 333] -> grid indices 0, 334, 667). Returns the fp32 times
// the DiT sees.
std::vector<float> warped_step_times(const FlowSchedule& s, std::span<const int> step_list);
// The grid index of the same steps.
std::vector<int> warped_step_indices(std::span<const int> step_list);

// argmin_i |timesteps[i] - t| (first minimum), as _convert_flow_pred_to_x0
// does it in f64 and add_noise in fp32.
int sigma_index_f64(const FlowSchedule& s, float t);
int sigma_index_f32(const FlowSchedule& s, float t);

// x0 = cast(f64(x) - f64(sigma) * f64(flow)), elementwise; bf16 buffers hold
// raw bf16 bits. Same layout for all three.
void flow_to_x0(std::span<const uint16_t> x, std::span<const uint16_t> flow, float sigma,
                std::span<uint16_t> x0);
void flow_to_x0(std::span<const float> x, std::span<const float> flow, float sigma,
                std::span<float> x0);

// The next step's input for one block: out = cast(fp32(1 - s) * fp32(x0) +
// fp32(s) * fp32(noise)), three fp32 roundings, no FMA. x0 and out are
// [C, F, HW] (the latent's channel-major layout); noise is [F, C, HW], the
// (b f) c h w layout in which the sampler draws it, already in the working
// dtype.
void renoise(std::span<const uint16_t> x0, std::span<const uint16_t> noise, float sigma_next,
             int64_t channels, int64_t frames, std::span<uint16_t> out);
void renoise(std::span<const float> x0, std::span<const float> noise, float sigma_next,
             int64_t channels, int64_t frames, std::span<float> out);

}  // namespace flick::wan
