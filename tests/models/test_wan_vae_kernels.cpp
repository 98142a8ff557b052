// The Wan VAE's upsampling conv as phases (Upsample::phase_weights and the
// backend-copy interleave of models/wan_vae/wan_vae_kernels.h) against
// nearest x2 then 3x3, on the reference and the CPU backend. (The VAE's
// RMS norm is the backend op normalize_l2: tests/ops/test_stepwise.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "models/wan_vae/wan_vae_blocks.h"
#include "models/wan_vae/wan_vae_kernels.h"
#include "runtime/backend.h"
#include "runtime/dtype.h"

namespace flick::wan_vae {
namespace {

// Row r of the test input: values of magnitude ~2^(r % 5 - 2), exact bf16.
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
  interleave_upsample_phases(*be, phases.t, y.t);
  // The CPU backend's copy moves the same bytes.
  OwnedTensor y_cpu(DType::F32, y.t.shape);
  interleave_upsample_phases(*make_cpu_backend(), phases.t, y_cpu.t);
  EXPECT_EQ(std::memcmp(y_cpu.t.data, y.t.data, y.t.nbytes()), 0);

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
