// The Wan VAE encoder's constant-tail reuse (WanVaeEncoder::
// set_reuse_steady_frames): Matrix-Game's conditioning video is the start
// image followed by zero frames, and every convolution of the encoder skips
// the output frames whose input window lies in a run of equal frames at the
// end of its input, copying the first such output instead (the norms and
// residual adds likewise; whole chunks once the stream state repeats,
// without a tap). The oracle is the
// same encoder computing every frame (itself checked against the reference's
// goldens in test_wan_vae.cpp): latents and every intermediate must be equal
// bit for bit, fp32 and bf16, on the scalar reference backend and the CPU
// backend, at the tiny checkpoint's widths and at the real ones (96-384
// channels, the real oneDNN kernels for those channel counts).
//
// At 352x640, where the CPU backend picks other convolution kernels (direct
// AMX for frames of 2^15 pixels and up), the comparison takes half an hour on
// two cores, too long for the suite: `flick bench --filter mg2.cond` encodes
// the released sizes both ways and reports whether the latents are
// bit-identical (bench/RESULTS.md has the runs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/wan_vae/wan_vae_encoder.h"
#include "models/wan_vae/wan_vae_synthetic.h"
#include "runtime/dtype.h"
#include "runtime/plan_cache.h"
#include "runtime/weights/weight_store.h"

namespace flick {
namespace {

const std::string kCheckpoint = std::string(FLICK_TEST_DATA) + "/mg2/weights/Wan2.1_VAE.pth";

// A video [1, 3, T, H, W] F32: frame 0 pseudo-random in [-1, 1), the rest
// zero (Matrix-Game's conditioning input) unless `extra` names frames that
// get other pseudo-random contents.
OwnedTensor make_video(int64_t t, int64_t h, int64_t w, const std::vector<int64_t>& extra = {}) {
  OwnedTensor v(DType::F32, Shape{1, 3, t, h, w});
  float* p = v.t.ptr<float>();
  std::fill_n(p, v.t.numel(), 0.f);
  uint32_t state = 5;
  std::vector<int64_t> filled{0};
  filled.insert(filled.end(), extra.begin(), extra.end());
  for (int64_t f : filled)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t i = 0; i < h * w; ++i) {
        state = state * 1664525u + 1013904223u;
        p[(c * t + f) * h * w + i] = static_cast<float>(state >> 8) * 0x1p-23f - 1.f;
      }
  return v;
}

// Every tap of one encode, per layer ("conv1", "down3", "middle", "head",
// "conv1_mu_logvar", "latents"), as the frames in video order: a 64-bit
// checksum of each frame's bytes (channel-major; the full-size taps would
// take gigabytes), and the latents' bytes themselves.
using Frame = uint64_t;
struct LayerFrames {
  std::map<std::string, std::vector<Frame>> taps;
  std::vector<uint8_t> latents;
};

LayerFrames encode_frames(Backend& be, WanVaeEncoder& enc, const Tensor& video) {
  LayerFrames out;
  const auto keep = [&](std::string_view name, const Tensor& x) {
    std::string key(name);
    if (key.rfind("chunk", 0) == 0) key = key.substr(key.find('.') + 1);
    OwnedTensor c(x.dtype, x.shape);  // [1, C, T, H, W] contiguous
    be.copy(x, c.t);
    const int64_t ch = x.dim(1), t = x.dim(2);
    const size_t plane = static_cast<size_t>(x.dim(3) * x.dim(4)) * dtype_size(x.dtype);
    std::vector<uint8_t> fr(static_cast<size_t>(ch) * plane);
    for (int64_t f = 0; f < t; ++f) {
      for (int64_t k = 0; k < ch; ++k)
        std::memcpy(fr.data() + k * plane,
                    static_cast<const uint8_t*>(c.t.data) + (k * t + f) * plane, plane);
      out.taps[key].push_back(plan_checksum(fr.data(), fr.size()));
    }
  };
  Expected<Tensor> z = enc.encode(video, keep);
  EXPECT_TRUE(z.ok()) << z.status().message();
  if (!z.ok()) return out;
  keep("latents", *z);
  const auto* p = static_cast<const uint8_t*>(z->data);
  out.latents.assign(p, p + z->nbytes());
  return out;
}

// The first frame from which all of a layer's frames are equal (the last
// index when the last two differ).
int64_t steady_from(const std::vector<Frame>& f) {
  int64_t s = static_cast<int64_t>(f.size()) - 1;
  while (s > 0 && f[static_cast<size_t>(s - 1)] == f.back()) --s;
  return s;
}

// Encodes `video` with and without the reuse; expects every frame of every
// tap equal. Returns the reusing run's frames.
LayerFrames expect_reuse_exact(Backend& be, WanVaeEncoder& enc, const Tensor& video,
                               const std::string& what) {
  enc.set_reuse_steady_frames(false);
  const LayerFrames full = encode_frames(be, enc, video);
  enc.set_reuse_steady_frames(true);
  const LayerFrames reused = encode_frames(be, enc, video);
  EXPECT_FALSE(full.latents.empty()) << what;
  EXPECT_TRUE(reused.latents == full.latents) << what << ": the latents differ";
  EXPECT_EQ(full.taps.size(), reused.taps.size()) << what;
  for (const auto& [key, frames] : full.taps) {
    EXPECT_TRUE(reused.taps.count(key)) << what << " " << key;
    if (!reused.taps.count(key)) continue;
    const std::vector<Frame>& got = reused.taps.at(key);
    EXPECT_EQ(got.size(), frames.size()) << what << " " << key;
    for (size_t i = 0; i < std::min(got.size(), frames.size()); ++i)
      EXPECT_EQ(got[i], frames[i]) << what << ": " << key << " frame " << i << " differs";
  }
  return reused;
}

std::unique_ptr<Backend> backend_named(const std::string& name) {
  return name == "ref" ? make_ref_backend() : make_cpu_backend();
}

// The tiny checkpoint on the backend the parameter names.
class WanVaeSteadyTiny : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    be_ = backend_named(GetParam());
    Expected<WeightStore> store = WeightStore::open({kCheckpoint});
    ASSERT_TRUE(store.ok()) << store.status().message();
    store_.emplace(std::move(*store));
  }
  Expected<WanVaeEncoder> load(Precision p) { return WanVaeEncoder::load(store_->root(), *be_, p); }
  std::unique_ptr<Backend> be_;
  std::optional<WeightStore> store_;
};

TEST_P(WanVaeSteadyTiny, ReuseIsBitExactAndTheSteadyFramesAreWhereTheArchitectureSays) {
  // 36 latents (141 frames): long enough that even the latents reach their
  // constant tail. Where each layer's tail starts follows from the
  // architecture: a 3-tap causal conv moves it 2 frames later (its window
  // must lie in the input's tail), a residual block 4, a Down3d maps input
  // frame s to output ceil(s / 2) + 1 (output j >= 1 reads inputs 2j - 2 ..
  // 2j). From the input's 1: conv1 3; stage 0 res blocks 7, 11 (Down2d 11);
  // stage 1 15, 19; Down3d 11; stage 2 15, 19; Down3d 11; stage 3 15, 19;
  // middle (res, attention, res) 27; head conv 29; the 1x1 conv 29.
  const std::map<std::string, int64_t> want = {
      {"conv1", 3},   {"down0", 7},  {"down1", 11},           {"down2", 11},
      {"down3", 15},  {"down4", 19}, {"down5", 11},           {"down6", 15},
      {"down7", 19},  {"down8", 11}, {"down9", 15},           {"down10", 19},
      {"middle", 27}, {"head", 29},  {"conv1_mu_logvar", 29}, {"latents", 29}};
  for (Precision p : {Precision::F32, Precision::BF16}) {
    SCOPED_TRACE(precision_name(p));
    Expected<WanVaeEncoder> enc = load(p);
    ASSERT_TRUE(enc.ok()) << enc.status().message();
    const OwnedTensor video = make_video(141, 32, 48);
    const LayerFrames got = expect_reuse_exact(*be_, *enc, video.t, "image + zeros");
    ASSERT_EQ(got.taps.size(), want.size());
    for (const auto& [key, s] : want) {
      ASSERT_TRUE(got.taps.count(key)) << key;
      EXPECT_EQ(steady_from(got.taps.at(key)), s) << key;
    }
  }
}

TEST_P(WanVaeSteadyTiny, OtherTailsAndRunsAreBitExact) {
  // Runs of zero frames broken by other frames (a run ending mid-chunk, one
  // frame at the very end, a constant tail starting inside a chunk), and a
  // video with no two equal frames: the reuse must only ever copy frames
  // whose windows are equal.
  std::vector<int64_t> all;
  for (int64_t f = 1; f < 21; ++f) all.push_back(f);
  const std::vector<std::vector<int64_t>> cases = {{6, 19}, {20}, {2, 3, 9, 14}, all};
  for (Precision p : {Precision::F32, Precision::BF16}) {
    SCOPED_TRACE(precision_name(p));
    Expected<WanVaeEncoder> enc = load(p);
    ASSERT_TRUE(enc.ok()) << enc.status().message();
    for (size_t i = 0; i < cases.size(); ++i) {
      const OwnedTensor video = make_video(21, 32, 48, cases[i]);
      expect_reuse_exact(*be_, *enc, video.t, "case " + std::to_string(i));
    }
  }
}

TEST_P(WanVaeSteadyTiny, WholeChunksRepeatOnceTheStreamStateIsSteady) {
  // Without a tap, chunks are copied once the state (every cached frame)
  // stops changing and the frames repeat: 36 latents of image + zeros, and
  // the same with a frame at the end that is not zero (its chunk must be
  // computed: the state is no longer steady after it).
  for (Precision p : {Precision::F32, Precision::BF16}) {
    SCOPED_TRACE(precision_name(p));
    Expected<WanVaeEncoder> enc = load(p);
    ASSERT_TRUE(enc.ok()) << enc.status().message();
    for (const std::vector<int64_t>& extra : {std::vector<int64_t>{}, std::vector<int64_t>{136}}) {
      const OwnedTensor video = make_video(141, 32, 48, extra);
      std::vector<uint8_t> latents[2];
      for (int reuse = 0; reuse < 2; ++reuse) {
        enc->set_reuse_steady_frames(reuse == 1);
        Expected<Tensor> z = enc->encode(video.t);
        ASSERT_TRUE(z.ok()) << z.status().message();
        const auto* b = static_cast<const uint8_t*>(z->data);
        latents[reuse].assign(b, b + z->nbytes());
        if (reuse == 0) {
          EXPECT_EQ(enc->chunks_reused(), 0);
        }
      }
      EXPECT_TRUE(latents[0] == latents[1]) << extra.size() << " extra frames: latents differ";
      // The state after chunk 28 (the last cache to fill with steady frames
      // is the head conv's: middle frames 27 and 28) equals the state after
      // 29, so chunks 30-35 are copies; with frame 136 (chunk 34) only 30-33:
      // chunk 34's frames differ and chunk 35 sees the state it changed.
      EXPECT_EQ(enc->chunks_reused(), extra.empty() ? 6 : 4) << extra.size();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, WanVaeSteadyTiny, ::testing::Values("ref", "cpu"),
                         [](const auto& info) { return std::string(info.param); });

// The real widths (96-384 channels) on synthetic weights, small frames: the
// oneDNN kernels chosen for those channel counts, each convolution run with
// 1 to 4 output frames per call.
void check_real_widths(int64_t frames, int64_t h, int64_t w) {
  std::unique_ptr<Backend> be = make_cpu_backend();
  Expected<WeightStore> store = wan_vae::make_synthetic_wan_vae(96, 7);
  ASSERT_TRUE(store.ok()) << store.status().message();
  for (Precision p : {Precision::BF16, Precision::F32}) {
    SCOPED_TRACE(precision_name(p));
    Expected<WanVaeEncoder> enc = WanVaeEncoder::load(store->root(), *be, p);
    ASSERT_TRUE(enc.ok()) << enc.status().message();
    const OwnedTensor video = make_video(frames, h, w);
    const LayerFrames got = expect_reuse_exact(*be, *enc, video.t, "image + zeros");
    ASSERT_TRUE(got.taps.count("down4") && got.taps.count("latents"));
    EXPECT_EQ(steady_from(got.taps.at("down4")), 19);
    EXPECT_EQ(got.taps.at("latents").size(), static_cast<size_t>(1 + (frames - 1) / 4));
  }
}

TEST(WanVaeSteadyRealWidths, ReuseIsBitExact) { check_real_widths(21, 32, 48); }

}  // namespace
}  // namespace flick
