// The Wan VAE's own kernels (models/wan_vae/wan_vae_kernels.h) against
// scalar oracles written here: the channel RMS norm + SiLU in both rounding
// modes, in every implementation this CPU runs (AVX-512, and the portable one
// other CPUs use); the upsampling conv as phases against nearest x2 then 3x3.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/wan_vae/wan_vae_blocks.h"
#include "models/wan_vae/wan_vae_kernels.h"
#include "models/wan_vae/wan_vae_kernels_internal.h"
#include "runtime/backend.h"
#include "runtime/dtype.h"

namespace flick::wan_vae {
namespace {

using RowsFn = void (*)(const void*, void*, bool, int64_t, int64_t, const float*, float,
                        NormRounding, bool);

std::vector<std::pair<std::string, RowsFn>> implementations() {
  std::vector<std::pair<std::string, RowsFn>> v{{"portable", portable::channel_rms_norm_rows}};
  if (has_avx512_kernels()) v.emplace_back("avx512", avx512::channel_rms_norm_rows);
  return v;
}

// Row r of the test input: values of magnitude ~2^(r % 5 - 2) (the norm's
// range), one all-zero row (the eps clamp), some exact bf16 values.
std::vector<float> input(int64_t rows, int64_t c) {
  std::vector<float> x(static_cast<size_t>(rows * c));
  uint32_t state = 99;
  for (int64_t r = 0; r < rows; ++r) {
    const float mag = std::ldexp(1.f, static_cast<int>(r % 5) - 2);
    for (int64_t j = 0; j < c; ++j) {
      state = state * 1664525u + 1013904223u;
      const float u = static_cast<float>(state >> 8) * 0x1p-23f - 1.f;
      x[static_cast<size_t>(r * c + j)] = r == 3 ? 0.f : round_bf16(u * 3.f * mag);
    }
  }
  return x;
}

float silu_ref(float v) { return v / (1.f + std::exp(-v)); }

// The reference's arithmetic, one op at a time in fp32, each result rounded
// to the activation dtype (PerOp), or evaluated in double (Once).
double oracle(const float* xr, int64_t c, int64_t j, const float* gamma, bool bf16, bool per_op,
              bool silu) {
  double ss = 0;
  for (int64_t i = 0; i < c; ++i) ss += static_cast<double>(xr[i]) * xr[i];
  const float scale = static_cast<float>(std::sqrt(static_cast<double>(c)));
  if (!per_op) {
    const double n = std::max(std::sqrt(ss), 1e-12);
    const double q = xr[j] / n * scale * gamma[j];
    return silu ? q / (1 + std::exp(-q)) : q;
  }
  auto rd = [&](float v) { return bf16 ? round_bf16(v) : v; };
  const float n = std::max(rd(static_cast<float>(std::sqrt(ss))), 1e-12f);
  float q = rd(rd(rd(xr[j] / n) * scale) * gamma[j]);
  return silu ? rd(silu_ref(q)) : q;
}

TEST(WanVaeKernels, ChannelRmsNormMatchesTheScalarDefinition) {
  // Tolerances: PerOp reproduces every rounding, so outputs are the oracle's
  // up to the last fp32 bits of |x| and exp (a summation order, a ~1 ulp
  // polynomial) - which moves a bf16 rounding only when it lands within an
  // fp32 ulp or two of a tie: at most 1 bf16 ulp, in well under 1 % of the
  // elements; F32 results within 4 fp32 ulp. Once: the double-precision
  // value rounded once to bf16, i.e. within 2^-8 of it.
  for (const auto& [name, fn] : implementations()) {
    for (int64_t c : {2, 8, 24, 96, 384}) {
      const int64_t rows = 37;
      const std::vector<float> x32 = input(rows, c);
      std::vector<float> gamma(static_cast<size_t>(c));
      for (int64_t j = 0; j < c; ++j) gamma[static_cast<size_t>(j)] = 1.f + 0.01f * (j % 7) - 0.03f;
      for (bool bf16 : {false, true}) {
        for (bool per_op : {true, false}) {
          if (!bf16 && !per_op) continue;  // F32 computes with PerOp only
          for (bool silu : {true, false}) {
            const std::string what = name + " c=" + std::to_string(c) + (bf16 ? " bf16" : " f32") +
                                     (per_op ? " per-op" : " once") + (silu ? " silu" : "");
            std::vector<uint16_t> xb(x32.size()), yb(x32.size());
            std::vector<float> yf(x32.size());
            for (size_t i = 0; i < x32.size(); ++i) xb[i] = f32_to_bf16(x32[i]);
            const float scale = static_cast<float>(std::sqrt(static_cast<double>(c)));
            const NormRounding r = per_op ? NormRounding::PerOp : NormRounding::Once;
            if (bf16) {
              fn(xb.data(), yb.data(), true, rows, c, gamma.data(), scale, r, silu);
            } else {
              fn(x32.data(), yf.data(), false, rows, c, gamma.data(), scale, r, silu);
            }
            int off_by_one = 0;
            for (int64_t i = 0; i < rows * c; ++i) {
              const int64_t row = i / c, j = i % c;
              const double want =
                  oracle(x32.data() + row * c, c, j, gamma.data(), bf16, per_op, silu);
              const double got =
                  bf16 ? bf16_to_f32(yb[static_cast<size_t>(i)]) : yf[static_cast<size_t>(i)];
              const double ulp =
                  bf16 ? std::ldexp(std::abs(want), -7) : std::ldexp(std::abs(want), -21);
              if (per_op && bf16) {
                if (got != want) {
                  ++off_by_one;
                  ASSERT_LE(std::abs(got - want), ulp + 1e-30) << what << " at " << i;
                }
              } else {
                const double tol = per_op ? ulp : std::ldexp(std::abs(want), -8);
                ASSERT_LE(std::abs(got - want), tol + 1e-30)
                    << what << " at " << i << ": " << got << " vs " << want;
              }
            }
            EXPECT_LE(off_by_one, rows * c / 100 + 1) << what;
          }
        }
      }
    }
  }
}

TEST(WanVaeKernels, ChannelRmsNormEntryPointSplitsRowsAndAliases) {
  // The threaded entry point over many rows, in place: the same values as
  // one call of the row kernel it picks.
  const int64_t rows = 5000, c = 96;
  const std::vector<float> x = input(rows, c);
  std::vector<float> gamma(c, 1.1f), want(x.size()), y = x;
  const RowsFn fn =
      has_avx512_kernels() ? avx512::channel_rms_norm_rows : portable::channel_rms_norm_rows;
  fn(x.data(), want.data(), false, rows, c, gamma.data(), static_cast<float>(std::sqrt(96.0)),
     NormRounding::PerOp, true);
  channel_rms_norm(y.data(), y.data(), DType::F32, rows, c, gamma.data(), NormRounding::PerOp,
                   true);
  EXPECT_EQ(y, want);
}

TEST(WanVaeKernels, UpsampleConvPhasesEqualNearestUpsampleThen3x3) {
  // Upsample's 2x2 phase conv of the source frame + interleave against the
  // definition, nearest x2 then a zero-padded 3x3 conv, in double. fp32
  // throughout (the reference backend's conv): the folded weights sum 1-4
  // taps first, so the two differ only by fp32 rounding (~1e-7 relative;
  // tolerance 1e-5 of the largest output).
  const int64_t h = 5, w = 7, c = 6, o = 4;
  std::vector<float> x = input(h * w, c);  // [H, W, C]
  OwnedTensor wt(DType::F32, Shape{o, c, 3, 3});
  const std::vector<float> wv = input(o * 9, c);
  std::copy(wv.begin(), wv.end(), wt.t.ptr<float>());
  std::unique_ptr<Backend> be = make_ref_backend();
  const OwnedTensor pw = Upsample::phase_weights(wt.t);
  ASSERT_EQ(pw.t.shape, Shape({4 * o, c, 1, 2, 2}));
  ConvDesc d;
  d.w = pw.t;
  d.spatial_dims = 3;
  d.padding = {0, 1, 1};
  d.precision = Precision::F32;
  auto packed = be->pack_conv(d);
  const Tensor xv = channels_last_view(x.data(), DType::F32, c, 1, h, w);
  OwnedTensor phases(DType::F32, Shape{h + 1, w + 1, 4, o}), y(DType::F32, Shape{2 * h, 2 * w, o});
  Tensor pv = channels_last_view(phases.t.data, DType::F32, 4 * o, 1, h + 1, w + 1);
  be->conv(xv, *packed, pv, Activation::None);
  interleave_upsample_phases(phases.t, y.t);

  std::vector<double> want(static_cast<size_t>(4 * h * w * o));
  double largest = 0;
  for (int64_t yy = 0; yy < 2 * h; ++yy) {
    for (int64_t xx = 0; xx < 2 * w; ++xx) {
      for (int64_t oc = 0; oc < o; ++oc) {
        double acc = 0;
        for (int64_t kh = 0; kh < 3; ++kh) {
          for (int64_t kw = 0; kw < 3; ++kw) {
            const int64_t uy = yy + kh - 1, ux = xx + kw - 1;  // upsampled pixel
            if (uy < 0 || uy >= 2 * h || ux < 0 || ux >= 2 * w) continue;
            for (int64_t ic = 0; ic < c; ++ic)
              acc +=
                  static_cast<double>(wv[static_cast<size_t>(((oc * c + ic) * 3 + kh) * 3 + kw)]) *
                  x[static_cast<size_t>(((uy / 2) * w + ux / 2) * c + ic)];
          }
        }
        want[static_cast<size_t>((yy * 2 * w + xx) * o + oc)] = acc;
        largest = std::max(largest, std::abs(acc));
      }
    }
  }
  const float* got = y.t.ptr<float>();
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 * largest) << "element " << i;
}

}  // namespace
}  // namespace flick::wan_vae
