// Every product and sum below is rounded to fp32 separately, as torch's
// elementwise kernels do; the places where torch fuses (linspace) use std::fma.
// No contraction into FMAs (GCC contracts by default even with -std=c++20).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "models/hunyuan/unipc_sampler.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "runtime/dtype.h"

namespace flick::hunyuan {
namespace {

// torch.linalg.solve of the UniPC systems (2x2 or 3x3, fp32) as torch 2.15's
// MKL LAPACK computes them (getrf + getrs), found by testing candidate
// operation orders against torch.linalg.solve (bit-exact on 1,000 random 2x2
// / 3x3 systems and on every UniPC system of 6-, 25-, 30-, 50- and 100-step
// schedules, under MKL's AVX-512 and AVX2 code paths):
//  - getrf: partial pivoting on the first largest |pivot|; a column with two
//    entries below the pivot is scaled by the pivot's reciprocal, one with a
//    single entry divided by it (sgetrf2's one-column case); the trailing
//    update a - l * u fused.
//  - getrs, 3x3: y1 = fma(-l10, y0, b1), y2 = b2 - fma(l20, y0, l21 * y1);
//    x2 = y2 / u22, x1 = fma(-u12, x2, y1) / u11,
//    x0 = (y0 - fma(u02, x2, u01 * x1)) / u00.
//  - getrs, 2x2: y1 = fma(-l10, y0, b1); x1 = y1 * (1 / u11),
//    x0 = fma(-u01, x1, y0) * (1 / u00).
std::vector<float> solve(std::vector<std::vector<float>> a, std::vector<float> b) {
  const size_t n = b.size();
  for (size_t j = 0; j < n; ++j) {
    size_t p = j;
    for (size_t i = j + 1; i < n; ++i)
      if (std::fabs(a[i][j]) > std::fabs(a[p][j])) p = i;
    std::swap(a[j], a[p]);
    std::swap(b[j], b[p]);  // getrs applies the same interchanges to b
    const float r = 1.0f / a[j][j];
    for (size_t i = j + 1; i < n; ++i) a[i][j] = n - j - 1 >= 2 ? a[i][j] * r : a[i][j] / a[j][j];
    for (size_t i = j + 1; i < n; ++i)
      for (size_t k = j + 1; k < n; ++k) a[i][k] = std::fma(-a[i][j], a[j][k], a[i][k]);
  }
  if (n == 1) return {b[0] / a[0][0]};
  if (n == 2) {
    const float y1 = std::fma(-a[1][0], b[0], b[1]);
    const float x1 = y1 * (1.0f / a[1][1]);
    const float x0 = std::fma(-a[0][1], x1, b[0]) * (1.0f / a[0][0]);
    return {x0, x1};
  }
  const float y0 = b[0];
  const float y1 = std::fma(-a[1][0], y0, b[1]);
  const float y2 = b[2] - std::fma(a[2][0], y0, a[2][1] * y1);
  const float x2 = y2 / a[2][2];
  const float x1 = std::fma(-a[1][2], x2, y1) / a[1][1];
  const float x0 = (y0 - std::fma(a[0][2], x2, a[0][1] * x1)) / a[0][0];
  return {x0, x1, x2};
}

// torch.tensordot(D1s, rhos, ([1], [0])): an [N, K] x [K] GEMM (MKL), per
// element d0 * r0 with d1 * r1 fused into it (the unfused sum differs from the
// reference in about 1e-8 relative). Checked with K = 2 on 64- and
// 1,152-value latents under MKL's AVX-512 and AVX2 code paths (for this
// stacked, permuted operand both fuse).
float dot(const std::vector<const float*>& d, std::span<const float> rho, size_t e) {
  float acc = d[0][e] * rho[0];
  for (size_t k = 1; k < d.size(); ++k) acc = std::fma(d[k][e], rho[k], acc);
  return acc;
}

// torch.log of an fp32 tensor on the CPU is MKL VML's vsLn in its
// high-accuracy mode (ATen vml.h), torch.expm1 SLEEF's expm1f_u10 (ATen's
// vectorised kernels): both within an ulp, mostly but not always correctly
// rounded, and VML's result depends on MKL's code path for the CPU
// (MKL_ENABLE_INSTRUCTIONS), SLEEF's on ATen's (AVX2 and AVX-512 agree).
// flick takes the correctly rounded values. With MKL's AVX-512 path (this
// machine) log agrees on every sigma of the tested schedules and expm1 on all
// but a few step sizes: at mu = ln 7 (every 640 bucket), among 2..100 steps
// only the last step of 24, 30 and 32 steps differs; the demo's 25 steps are
// exact. tools/framepack_unipc_goldens.py records where they differ; from
// there on the test bounds the effect (5e-7 relative after 22 steps on MKL's
// AVX2 path, whose log differs at 2 of 25 sigmas).
float correctly_rounded_log(float x) {
  return static_cast<float>(std::log(static_cast<double>(x)));
}
float correctly_rounded_expm1(float x) {
  return static_cast<float>(std::expm1(static_cast<double>(x)));
}

}  // namespace

double flux_mu(int64_t seq_length) {
  // k_diffusion_hunyuan.py:13-19: x1 = 256, y1 = 0.5, x2 = 4096, y2 = 1.15, exp_max = 7.
  const double k = (1.15 - 0.5) / (4096 - 256);
  const double b = 0.5 - k * 256;
  const double mu = k * static_cast<double>(seq_length) + b;
  return std::min(mu, std::log(7.0));
}

std::vector<float> torch_linspace(float start, float end, int64_t steps) {
  // ATen RangeFactoriesKernel.cpp linspace_kernel: step in fp32; indices
  // below steps / 2 count from start, the rest from end; the compiler fuses
  // `start + step * idx` into an FMA (spec errata 2). Checked against torch
  // 2.15 at 26, 31, 51 and 101 points; its AVX2 and AVX-512 kernels agree, the
  // unvectorised build (ATEN_CPU_CAPABILITY=default, no FMA) differs.
  std::vector<float> out(static_cast<size_t>(std::max<int64_t>(steps, 0)));
  if (steps <= 0) return out;
  if (steps == 1) {
    out[0] = start;
    return out;
  }
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int64_t halfway = steps / 2;
  auto scalar = [&](int64_t idx) {
    return idx < halfway ? std::fma(step, static_cast<float>(idx), start)
                         : std::fma(-step, static_cast<float>(steps - idx - 1), end);
  };
  for (int64_t i = 0; i < steps; ++i) out[static_cast<size_t>(i)] = scalar(i);
  return out;
}

std::vector<float> flux_sigmas(int64_t steps, double mu) {
  // flux_time_shift(t, mu) = exp(mu) / (exp(mu) + (1 / t - 1) ** 1.0) on an
  // fp32 tensor: `scalar / tensor` is tensor.reciprocal() * scalar
  // (torch/_tensor.py __rdiv__), the scalar rounded to fp32; ** 1.0 is a copy.
  std::vector<float> t = torch_linspace(1.0f, 0.0f, steps + 1);
  const auto e = static_cast<float>(std::exp(mu));
  for (float& v : t) {
    const float inv_t = 1.0f / v;  // 1 / 0 = inf -> sigma 0
    const float d = e + (inv_t - 1.0f);
    v = (1.0f / d) * e;
  }
  return t;
}

float fm_timestep(float sigma) { return round_bf16(sigma * 1000.0f); }

float distilled_guidance(double gs) {
  // torch.tensor([gs * 1000.0]) is fp32, then .to(bfloat16).
  return round_bf16(static_cast<float>(gs * 1000.0));
}

DenoiseFn fm_denoiser(VelocityFn velocity, float cfg_scale) {
  return [velocity = std::move(velocity), cfg_scale](std::span<const float> x, float sigma,
                                                     std::span<float> x0) -> Status {
    const size_t n = x.size();
    std::vector<float> xb(n), pos(n), neg(n);
    for (size_t i = 0; i < n; ++i) xb[i] = round_bf16(x[i]);  // x.to(bf16)
    const float timestep = fm_timestep(sigma);
    FLICK_TRY(velocity(xb, timestep, 0, pos));
    const bool real_cfg = cfg_scale != 1.0f;
    if (real_cfg) FLICK_TRY(velocity(xb, timestep, 1, neg));
    for (size_t i = 0; i < n; ++i) {
      // pred_cfg = neg + cfg * (pos - neg), neg = zeros_like(pos) when cfg == 1.
      const float nv = real_cfg ? neg[i] : 0.0f;
      const float pred = nv + cfg_scale * (pos[i] - nv);
      x0[i] = xb[i] - pred * sigma;  // x.float() - pred * sigma
    }
    return ok_status();
  };
}

Expected<std::vector<float>> sample_unipc(const DenoiseFn& model, std::vector<float> x,
                                          std::span<const float> sigmas,
                                          const StepCallback& callback) {
  const auto count = static_cast<int64_t>(sigmas.size());
  if (count < 2)
    return invalid_input("UniPC: needs at least 2 sigmas, got " + std::to_string(count));
  for (int64_t i = 0; i + 1 < count; ++i)
    if (!(sigmas[static_cast<size_t>(i)] > 0.0f))
      return invalid_input("UniPC: sigma " + std::to_string(i) + " is not positive");
  const size_t n = x.size();
  // uni_pc_fm.py:123: order = min(3, len(sigmas) - 2); a 2-sigma schedule
  // (one step) only makes the first model call.
  const int64_t max_order = std::min<int64_t>(3, count - 2);
  std::vector<std::vector<float>> models;  // model_prev_list, oldest first
  std::vector<float> ts;                   // t_prev_list
  std::vector<float> xt_(n), mt(n);
  for (int64_t i = 0; i + 1 < count; ++i) {
    const float t = sigmas[static_cast<size_t>(i)];
    if (i == 0) {
      std::vector<float> m0(n);
      FLICK_TRY(model(x, t, m0));
      models = {std::move(m0)};
      ts = {t};
    } else {
      const int64_t order = std::min(i, max_order);
      // ---- update_fn (uni_pc_fm.py:25-110), fp32 0-dim tensors ----
      const float t0 = ts.back();
      const std::vector<float>& m0 = models.back();
      const float lambda0 = -correctly_rounded_log(t0), lambda_t = -correctly_rounded_log(t);
      const float h = lambda_t - lambda0;
      std::vector<float> rks;
      std::vector<std::vector<float>> d1s;
      for (int64_t k = 1; k < order; ++k) {
        const float lambda_k = -correctly_rounded_log(ts[ts.size() - 1 - static_cast<size_t>(k)]);
        const std::vector<float>& mk = models[models.size() - 1 - static_cast<size_t>(k)];
        const float rk = (lambda_k - lambda0) / h;
        rks.push_back(rk);
        std::vector<float>& d = d1s.emplace_back(n);
        for (size_t e = 0; e < n; ++e) d[e] = (mk[e] - m0[e]) / rk;
      }
      rks.push_back(1.0f);
      const float hh = -h;
      const float h_phi_1 = correctly_rounded_expm1(hh);
      float h_phi_k = h_phi_1 / hh - 1.0f;
      int64_t factorial = 1;
      const float b_h = hh;  // variant bh1
      std::vector<std::vector<float>> r;
      std::vector<float> b;
      for (int64_t p = 1; p <= order; ++p) {
        std::vector<float>& row = r.emplace_back();
        for (float rk : rks) row.push_back(p == 1 ? 1.0f : p == 2 ? rk : rk * rk);  // pow(rks, p-1)
        b.push_back(h_phi_k * static_cast<float>(factorial) / b_h);
        factorial *= p + 1;
        h_phi_k = h_phi_k / hh - static_cast<float>(1.0 / static_cast<double>(factorial));
      }
      std::vector<float> rhos_p, rhos_c;
      if (!d1s.empty()) {
        if (order == 2) {
          rhos_p = {0.5f};
        } else {
          std::vector<std::vector<float>> r_sub(static_cast<size_t>(order - 1));
          for (int64_t p = 0; p + 1 < order; ++p)
            r_sub[static_cast<size_t>(p)].assign(r[static_cast<size_t>(p)].begin(),
                                                 r[static_cast<size_t>(p)].end() - 1);
          rhos_p = solve(r_sub, std::vector<float>(b.begin(), b.end() - 1));
        }
      }
      rhos_c = order == 1 ? std::vector<float>{0.5f} : solve(r, b);
      const float ratio = t / t0;
      std::vector<const float*> dp;
      for (const std::vector<float>& d : d1s) dp.push_back(d.data());
      std::vector<float> xp(n);
      for (size_t e = 0; e < n; ++e) {
        xt_[e] = ratio * x[e] - h_phi_1 * m0[e];
        xp[e] = dp.empty() ? xt_[e] : xt_[e] - b_h * dot(dp, rhos_p, e);
      }
      FLICK_TRY(model(xp, t, mt));
      const float rc_last = rhos_c.back();
      for (size_t e = 0; e < n; ++e) {
        const float corr = dp.empty() ? 0.0f : dot(dp, rhos_c, e);
        const float d1_t = mt[e] - m0[e];
        x[e] = xt_[e] - b_h * (corr + rc_last * d1_t);
      }
      models.push_back(mt);
      ts.push_back(t);
    }
    // Keep the last `order` entries (model_prev_list[-order:]).
    const auto keep = static_cast<size_t>(std::max<int64_t>(max_order, 1));
    if (models.size() > keep) {
      models.erase(models.begin(), models.end() - static_cast<std::ptrdiff_t>(keep));
      ts.erase(ts.begin(), ts.end() - static_cast<std::ptrdiff_t>(keep));
    }
    if (callback) callback(UniPcStep{i, x, models.back()});
  }
  return models.back();
}

std::vector<float> framepack_sigmas(int64_t steps, int64_t t, int64_t h, int64_t w, double shift) {
  const double mu = shift > 0 ? std::log(shift) : flux_mu(t * h * w / 4);
  return flux_sigmas(steps, mu);
}

std::vector<float> section_noise(TorchGenerator& gen, int64_t t, int64_t h, int64_t w) {
  std::vector<float> out(static_cast<size_t>(16 * t * h * w));
  gen.randn(out.data(), static_cast<int64_t>(out.size()));
  return out;
}

Expected<std::vector<float>> sample_section(const VelocityFn& velocity, TorchGenerator& gen,
                                            int64_t t, int64_t h, int64_t w,
                                            const SectionSampling& sampling,
                                            const StepCallback& callback) {
  if (t < 1 || h < 1 || w < 1 || sampling.steps < 1)
    return invalid_input("sample_section: latent [1, 16, " + std::to_string(t) + ", " +
                         std::to_string(h) + ", " + std::to_string(w) + "], " +
                         std::to_string(sampling.steps) + " steps");
  std::vector<float> noise = section_noise(gen, t, h, w);
  const std::vector<float> sigmas = framepack_sigmas(sampling.steps, t, h, w, sampling.shift);
  return sample_unipc(fm_denoiser(velocity, sampling.cfg_scale), std::move(noise), sigmas,
                      callback);
}

}  // namespace flick::hunyuan
