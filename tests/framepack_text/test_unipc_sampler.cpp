// FramePack's sampler (models/hunyuan/unipc_sampler) against FramePack's own
// sample_hunyuan / fm_wrapper / FlowMatchUniPC (tools/framepack_unipc_goldens.py)
// with a stand-in transformer whose twin is below: every sigma, timestep,
// step and result compared bit for bit (25 steps as the demo, real CFG, the
// one- and two-step orders, 30 and 50 steps at mu = ln 7), and the sections'
// torch.randn noise.
// The stand-in's twin rounds each op, as torch: no contraction into FMAs.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/hunyuan/unipc_sampler.h"
#include "runtime/random.h"
#include "runtime/weights/weight_store.h"

namespace flick::hunyuan {
namespace {

const std::string kData = std::string(FLICK_TEST_DATA) + "/framepack_text/";

WeightStore& goldens() {
  static WeightStore store = [] {
    Expected<WeightStore> s = WeightStore::open({kData + "unipc.safetensors"});
    EXPECT_TRUE(s.ok()) << s.status().message();
    return std::move(*s);
  }();
  return store;
}

std::vector<float> golden(const std::string& name) {
  Expected<Tensor> t = goldens().get(name);
  EXPECT_TRUE(t.ok()) << name << ": " << t.status().message();
  if (!t.ok()) return {};
  return std::vector<float>(t->ptr<float>(), t->ptr<float>() + t->numel());
}

// Elements whose bits differ, and the largest distance in fp32 ulps.
struct Diff {
  int64_t mismatches = 0;
  int64_t max_ulps = 0;
};
Diff diff(const std::vector<float>& got, const std::vector<float>& want) {
  Diff d;
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    int32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    if (a == b) continue;
    ++d.mismatches;
    const int64_t ia = a < 0 ? int64_t(INT32_MIN) - a : a, ib = b < 0 ? int64_t(INT32_MIN) - b : b;
    d.max_ulps = std::max<int64_t>(d.max_ulps, std::llabs(ia - ib));
  }
  return d;
}

TEST(FramePackSchedule, SigmasBitExactWithTheReference) {
  for (int64_t n : {25, 30, 50, 7})
    for (int64_t l : {13680, 216, 18}) {
      const std::string name = "sigmas.n" + std::to_string(n) + ".L" + std::to_string(l);
      const std::vector<float> got = flux_sigmas(n, flux_mu(l));
      const Diff d = diff(got, golden(name));
      EXPECT_EQ(d.mismatches, 0) << name << ": max " << d.max_ulps << " ulps";
    }
  // mu = ln 7 for the 640 buckets; computed below the cap (errata 7).
  EXPECT_EQ(flux_mu(13680), std::log(7.0));
  EXPECT_NEAR(flux_mu(216), 0.4932, 1e-4);
  EXPECT_EQ(distilled_guidance(10.0), 9984.0f);  // bf16(10000)
  EXPECT_EQ(fm_timestep(1.0f), 1000.0f);
}

TEST(FramePackSchedule, LinspaceBitExactWithTorch) {
  for (int64_t n : {25, 30, 50, 100, 7}) {
    const std::string name = "linspace.n" + std::to_string(n);
    const Diff d = diff(torch_linspace(1.0f, 0.0f, n + 1), golden(name));
    EXPECT_EQ(d.mismatches, 0) << name << ": max " << d.max_ulps << " ulps";
  }
}

// The stand-in transformer of tools/framepack_unipc_goldens.py:
// v = (x * A[c] + (t * 0.0004) * B[c]) + s, s = 0.25 (positive) / -0.5 (negative).
VelocityFn stand_in(int64_t per_channel, std::vector<float>* timesteps) {
  return [per_channel, timesteps](std::span<const float> xb, float timestep, int cond,
                                  std::span<float> v) -> Status {
    if (timesteps) timesteps->push_back(timestep);
    const float tt = timestep * 0.0004f;
    const float s = cond == 0 ? 0.25f : -0.5f;
    for (size_t e = 0; e < xb.size(); ++e) {
      const auto c = static_cast<int64_t>(e) / per_channel % 16;
      const float a = static_cast<float>(c - 7) / 16.0f, b = static_cast<float>(c % 5 + 1) / 8.0f;
      const float xa = xb[e] * a, tb = tt * b;
      v[e] = (xa + tb) + s;
    }
    return ok_status();
  };
}

TEST(FramePackUniPc, EveryStepBitExactWithSampleHunyuan) {
  std::ifstream f(kData + "unipc.json");
  const nlohmann::json manifest = nlohmann::json::parse(f);
  int run = 0, inexact_runs = 0;
  for (const nlohmann::json& r : manifest["runs"]) {
    const std::string tag = "run" + std::to_string(run++) + ".";
    const int64_t steps = r["steps"], t = r["shape"][2], h = r["shape"][3], w = r["shape"][4];
    // The noise: torch.randn from the run's generator.
    TorchGenerator gen(r["seed"].get<uint64_t>());
    std::vector<float> noise = section_noise(gen, t, h, w);
    Diff d = diff(noise, golden(tag + "noise"));
    EXPECT_EQ(d.mismatches, 0) << tag << "noise: max " << d.max_ulps << " ulps";

    std::vector<float> timesteps;
    const DenoiseFn model = fm_denoiser(stand_in(t * h * w, &timesteps), r["cfg"].get<float>());
    const std::vector<float> sigmas = framepack_sigmas(steps, t, h, w, r["shift"].get<double>());
    // Every step's x and x0 bit for bit: the stand-in's twin is exact, so any
    // difference is the sampler's (schedule, bf16 points, UniPC arithmetic,
    // linalg.solve, tensordot). One known exception: torch's log and expm1
    // (MKL VML, SLEEF) are not always correctly rounded, flick's are
    // (unipc_sampler.cpp); the goldens list where they differ. From the first
    // step using such a value on, bound max |x - x_ref| by 1e-6 of max |x_ref|
    // (observed 9.7e-8 after one such step, 4.7e-7 after 22 on MKL's AVX2 path).
    int64_t first_off = steps;
    for (int64_t i : r["log_not_correctly_rounded_at"].get<std::vector<int64_t>>())
      first_off = std::min(first_off, i);
    for (int64_t i : r["expm1_not_correctly_rounded_at"].get<std::vector<int64_t>>())
      first_off = std::min(first_off, i);
    inexact_runs += first_off < steps;
    const bool exact_all = first_off == steps;
    int64_t seen = 0, bad = 0, worst = 0;
    double worst_rel = 0;
    auto rel_max = [](const std::vector<float>& got, const std::vector<float>& want) {
      double num = 0, den = 0;
      for (size_t e = 0; e < want.size(); ++e) {
        num = std::max(num, std::fabs(static_cast<double>(got[e]) - want[e]));
        den = std::max(den, std::fabs(static_cast<double>(want[e])));
      }
      return num / std::max(den, 1e-30);
    };
    Expected<std::vector<float>> out = sample_unipc(model, noise, sigmas, [&](const UniPcStep& s) {
      const std::string i = std::to_string(s.index);
      const std::vector<float> x(s.x.begin(), s.x.end()), x0(s.denoised.begin(), s.denoised.end());
      const std::vector<float> want_x = golden(tag + "x" + i),
                               want_x0 = golden(tag + "denoised" + i);
      if (s.index < first_off) {
        const Diff dx = diff(x, want_x), dd = diff(x0, want_x0);
        bad += dx.mismatches + dd.mismatches;
        worst = std::max({worst, dx.max_ulps, dd.max_ulps});
      } else {
        worst_rel = std::max({worst_rel, rel_max(x, want_x), rel_max(x0, want_x0)});
      }
      ++seen;
    });
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(seen, steps) << tag;
    std::printf(
        "  %s %lld steps, cfg %.1f: %lld differing values before step %lld (max %lld ulps)"
        "; after: max rel %.3g\n",
        tag.c_str(), static_cast<long long>(steps), r["cfg"].get<double>(),
        static_cast<long long>(bad), static_cast<long long>(first_off),
        static_cast<long long>(worst), worst_rel);
    EXPECT_EQ(bad, 0) << tag;
    EXPECT_LE(worst_rel, 1e-6) << tag;
    if (exact_all) {
      d = diff(*out, golden(tag + "out"));
      EXPECT_EQ(d.mismatches, 0) << tag << "out: max " << d.max_ulps << " ulps";
    }
    EXPECT_EQ(timesteps, golden(tag + "timesteps")) << tag;
    EXPECT_EQ(static_cast<int64_t>(timesteps.size()), r["calls"].get<int64_t>()) << tag;
    EXPECT_EQ(distilled_guidance(r["gs"].get<double>()), golden(tag + "guidance")[0]) << tag;
  }
  // The exception is exercised: the 30-step run (SLEEF's expm1 at its last
  // step) and the run with MKL's AVX2 path; the others are exact throughout.
  EXPECT_EQ(inexact_runs, 2);
}

// sample_section (noise from the generator + schedule + sampler) gives
// sample_hunyuan's result for every run whose log / expm1 are all correctly
// rounded.
TEST(FramePackUniPc, SampleSectionEqualsSampleHunyuan) {
  std::ifstream f(kData + "unipc.json");
  const nlohmann::json manifest = nlohmann::json::parse(f);
  int run = 0, compared = 0;
  for (const nlohmann::json& r : manifest["runs"]) {
    const std::string tag = "run" + std::to_string(run++) + ".";
    if (!r["log_not_correctly_rounded_at"].empty() || !r["expm1_not_correctly_rounded_at"].empty())
      continue;
    const int64_t t = r["shape"][2], h = r["shape"][3], w = r["shape"][4];
    TorchGenerator gen(r["seed"].get<uint64_t>());
    SectionSampling s;
    s.steps = r["steps"];
    s.cfg_scale = r["cfg"].get<float>();
    s.shift = r["shift"].get<double>();
    Expected<std::vector<float>> out =
        sample_section(stand_in(t * h * w, nullptr), gen, t, h, w, s);
    ASSERT_TRUE(out.ok()) << out.status().message();
    const Diff d = diff(*out, golden(tag + "out"));
    EXPECT_EQ(d.mismatches, 0) << tag << "max " << d.max_ulps << " ulps";
    ++compared;
  }
  EXPECT_EQ(compared, 5);
  TorchGenerator gen(0);
  EXPECT_FALSE(sample_section(stand_in(1, nullptr), gen, 0, 2, 2, SectionSampling{}).ok());
}

// Two sections drawn from one generator, as the demo's worker consumes it.
TEST(FramePackUniPc, SectionNoiseIsConsumedSequentially) {
  TorchGenerator gen(31337);
  std::vector<float> both = section_noise(gen, 9, 3, 5);
  const std::vector<float> second = section_noise(gen, 9, 3, 5);
  both.insert(both.end(), second.begin(), second.end());
  const Diff d = diff(both, golden("section_noise"));
  EXPECT_EQ(d.mismatches, 0) << "max " << d.max_ulps << " ulps";
}

TEST(FramePackUniPc, RejectsBadSchedules) {
  const DenoiseFn model = fm_denoiser(stand_in(1, nullptr), 1.0f);
  EXPECT_FALSE(sample_unipc(model, std::vector<float>(16), std::vector<float>{1.0f}).ok());
  EXPECT_FALSE(
      sample_unipc(model, std::vector<float>(16), std::vector<float>{1.0f, 0.0f, 0.0f}).ok());
}

}  // namespace
}  // namespace flick::hunyuan
