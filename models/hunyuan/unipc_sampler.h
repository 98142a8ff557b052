// FramePack's sampler: the flow-matching UniPC "bh1" of sample_hunyuan
// (FramePack @ 97fe5db diffusers_helper/pipelines/k_diffusion_hunyuan.py:28-120,
// k_diffusion/wrapper.py fm_wrapper, k_diffusion/uni_pc_fm.py FlowMatchUniPC),
// reproduced operation by operation in fp32 so that a model giving the same
// velocities gives the same latents bit for bit (including torch.linalg.solve's
// MKL operation order and the tensordot's FMA), as long as torch's log (MKL
// VML) and expm1 (SLEEF), within an ulp but not always correctly rounded,
// return the correctly rounded values flick computes; see
// unipc_sampler.cpp for how often they do not:
//
//   L      = T * h * w / 4                          (tokens of the noisy window)
//   mu     = min(0.5 + (L - 256) * 0.65 / 3840, ln 7)          (double)
//   t      = torch.linspace(1, 0, steps + 1)                    (fp32, two-sided, FMA)
//   sigma  = fp32(fp32(1 / (E + (1/t - 1))) * E), E = fp32(exp(mu))
//            (flux_time_shift's scalar / tensor is a reciprocal then a multiply)
//   x0(x, sigma) = float(bf16(x)) - v * sigma,  v = DiT(bf16(x), bf16(sigma * 1000))
//            (fm_wrapper; with real CFG v = v_neg + cfg * (v_pos - v_neg))
//   UniPC bh1, order min(3, steps - 1): 1, 2, 3, 3, ...; one model call per step
//   (two with real CFG), the result is the last x0 (sigma = 0 is never stepped to).
//
// The noise is torch.randn([1, 16, T, h, w]) from the section's CPU generator
// (runtime/random.h, the AVX2/AVX-512 fill of a default x86 torch), consumed
// sequentially across sections (demo_gradio.py: one generator per job).
//
// Tensors here are host fp32 vectors (the state is small next to the DiT:
// 16 x 9 x 80 x 76 = 875k values at the 640 bucket); the DiT plugs in as a
// VelocityFn.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "runtime/random.h"
#include "runtime/status.h"

namespace flick::hunyuan {

// calculate_flux_mu(seq_length, exp_max=7.0) (k_diffusion_hunyuan.py:13-19), in double.
double flux_mu(int64_t seq_length);
// torch.linspace(start, end, steps) on the CPU in fp32: the two-sided formula
// with the vectorised kernel's fused multiply-add (spec errata 2).
std::vector<float> torch_linspace(float start, float end, int64_t steps);
// get_flux_sigmas_from_mu(steps, mu): steps + 1 values, 1 .. 0.
std::vector<float> flux_sigmas(int64_t steps, double mu);
// The bf16 model inputs fm_wrapper makes: bf16(fp32(sigma * 1000)), and the
// distilled guidance bf16(fp32(gs * 1000)) of sample_hunyuan (10 -> 9984).
float fm_timestep(float sigma);
float distilled_guidance(double gs);

// The DiT: the velocity for the latent rounded to bf16 (values held as fp32)
// at a bf16 timestep. cond 0 is the positive conditioning, 1 the negative
// (called only with real CFG). v has x's size.
using VelocityFn =
    std::function<Status(std::span<const float> xb, float timestep, int cond, std::span<float> v)>;
// A k-diffusion model: x0 for x at sigma.
using DenoiseFn = std::function<Status(std::span<const float> x, float sigma, std::span<float> x0)>;

// fm_wrapper (wrapper.py:20-50) with guidance_rescale 0 (the demo's; rescale
// needs torch's std reduction order and is not reproduced).
DenoiseFn fm_denoiser(VelocityFn velocity, float cfg_scale);

struct UniPcStep {
  int64_t index = 0;                // i of the sampler loop, 0 .. steps-1
  std::span<const float> x;         // x after step i (the noise at i = 0)
  std::span<const float> denoised;  // the newest x0
};
using StepCallback = std::function<void(const UniPcStep&)>;

// FlowMatchUniPC(variant="bh1").sample(x, sigmas): the final x0. sigmas as
// flux_sigmas gives them (at least 2 values, positive but for the last).
Expected<std::vector<float>> sample_unipc(const DenoiseFn& model, std::vector<float> x,
                                          std::span<const float> sigmas,
                                          const StepCallback& callback = {});

// sample_hunyuan's sigma schedule for a [1, 16, T, h, w] latent: mu from the
// token count unless a shift is given (mu = ln shift).
std::vector<float> framepack_sigmas(int64_t steps, int64_t t, int64_t h, int64_t w,
                                    double shift = 0.0);

// The section's initial noise, torch.randn((1, 16, T, h, w), generator=gen):
// consumes 16 * T * h * w normals from gen (C order).
std::vector<float> section_noise(TorchGenerator& gen, int64_t t, int64_t h, int64_t w);

struct SectionSampling {
  int64_t steps = 25;      // num_inference_steps (demo default)
  float cfg_scale = 1.0f;  // real CFG (demo: 1, the negative is never evaluated)
  double shift = 0.0;      // 0: mu from the token count (the demo's shift=None)
};

// sample_hunyuan (k_diffusion_hunyuan.py:28-120) for one section with
// initial_latent = concat_latent = None, guidance_rescale 0: draws the noise
// [1, 16, T, h, w] from gen, then the UniPC sampler over framepack_sigmas
// with fm_denoiser(velocity). Returns the final x0, [1, 16, T, h, w] in C
// order. The distilled guidance (distilled_guidance(gs)) and the text /
// image conditioning are the velocity function's.
Expected<std::vector<float>> sample_section(const VelocityFn& velocity, TorchGenerator& gen,
                                            int64_t t, int64_t h, int64_t w,
                                            const SectionSampling& sampling,
                                            const StepCallback& callback = {});

}  // namespace flick::hunyuan
