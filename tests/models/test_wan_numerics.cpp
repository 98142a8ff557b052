// models/wan numerics against the Matrix-Game 2.0 reference goldens
// (tests/data/mg2, made by running the reference on CPU; README there).
// Everything here is bit-exact against torch's own tensors, except the f64
// cos/sin tables, which torch evaluates with SLEEF (1-ulp) and we with libm:
// those are compared within a few f64 ulps, and their bf16/fp32 uses exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "models/wan/action_rope.h"
#include "models/wan/action_window.h"
#include "models/wan/flow_sampler.h"
#include "models/wan/kv_ring.h"
#include "models/wan/rope3d.h"
#include "models/wan/sampler_noise.h"
#include "models/wan/time_embedding.h"
#include "models/wan/unpatchify.h"
#include "runtime/backend.h"
#include "runtime/dtype.h"
#include "runtime/weights/safetensors.h"

namespace flick::wan {
namespace {

// One golden file; typed copies of its tensors (the test fails on a missing
// name or a wrong stored type).
class Golden {
 public:
  explicit Golden(const std::string& file) {
    auto f = SafetensorsFile::open(std::string(FLICK_TEST_DATA) + "/mg2/" + file);
    EXPECT_TRUE(f.ok()) << file;
    if (f.ok()) file_ = std::move(f).value();
  }
  bool has(const std::string& name) const { return file_ && file_->find(name) >= 0; }
  std::vector<int64_t> shape(const std::string& name) const {
    return file_->tensors()[index(name)].shape;
  }
  template <typename T>
  std::vector<T> get(const std::string& name, std::string_view type) const {
    const int64_t i = index(name);
    const TensorInfo& info = file_->tensors()[i];
    EXPECT_EQ(info.type->name, type) << name;
    auto data = file_->data(static_cast<size_t>(i));
    EXPECT_TRUE(data.ok()) << name;
    std::vector<T> out(info.nbytes / sizeof(T));
    if (data.ok() && info.type->name == type) std::memcpy(out.data(), *data, info.nbytes);
    return out;
  }
  std::vector<uint16_t> bf16(const std::string& n) const { return get<uint16_t>(n, "BF16"); }
  std::vector<float> f32(const std::string& n) const { return get<float>(n, "F32"); }
  std::vector<double> f64(const std::string& n) const { return get<double>(n, "F64"); }
  std::vector<int64_t> i64(const std::string& n) const { return get<int64_t>(n, "I64"); }

 private:
  int64_t index(const std::string& name) const {
    const int64_t i = file_ ? file_->find(name) : -1;
    if (i < 0) ADD_FAILURE() << "golden tensor missing: " << name;
    FLICK_CHECK(i >= 0);
    return i;
  }
  std::unique_ptr<SafetensorsFile> file_;
};

const Golden& constants() {
  static const Golden g("constants.safetensors");
  return g;
}

struct Mode {
  std::string name;
  int latents;
  int local_attn;  // latent frames
  std::vector<int> steps;
  const char* preset;
};
const std::vector<Mode>& modes() {
  static const std::vector<Mode> m = {
      {"universal", 9, 6, {1000, 666, 333}, "universal_gta"},
      {"gta_drive", 6, 4, {1000, 666, 333}, "universal_gta"},
      {"templerun", 9, 6, {1000, 750, 500, 250}, "templerun"},
  };
  return m;
}
const Golden& pipeline(const Mode& m) {
  static std::map<std::string, std::unique_ptr<Golden>> cache;
  auto& g = cache[m.name];
  if (!g) g = std::make_unique<Golden>("pipeline_" + m.name + ".safetensors");
  return *g;
}

// Tiny goldens: 4x6 latent, 2x3 patch grid = 6 tokens per latent frame,
// 2 DiT heads of 32, 2 action heads of 64.
constexpr int64_t kH = 4, kW = 6, kGridH = 2, kGridW = 3, kFrameTokens = 6;
constexpr int64_t kHeads = 2, kHeadDim = 32, kActionHeads = 2;

template <typename T>
size_t count_diff(const std::vector<T>& a, const std::vector<T>& b);

// The backends the model ops run on: the CPU one and the scalar oracle.
std::vector<std::unique_ptr<Backend>> both_backends() {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(make_cpu_backend());
  v.push_back(make_ref_backend());
  return v;
}

// x [tokens, heads, head_dim] bf16 bits through Rope3d::apply on `be`.
std::vector<uint16_t> rope3d_on(Backend& be, const Rope3d& rope, const std::vector<uint16_t>& x,
                                int64_t frames, int64_t h, int64_t w, int64_t heads,
                                int64_t start) {
  std::vector<uint16_t> out(x.size());
  const Shape shape{frames * h * w, heads, rope.head_dim()};
  const Tensor xt = Tensor::view(const_cast<uint16_t*>(x.data()), DType::BF16, shape);
  Tensor yt = Tensor::view(out.data(), DType::BF16, shape);
  rope.apply(be, xt, frames, h, w, start, yt);
  return out;
}

template <typename T>
size_t count_diff(const std::vector<T>& a, const std::vector<T>& b) {
  EXPECT_EQ(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += a[i] != b[i];
  return n + (a.size() > b.size() ? a.size() - b.size() : b.size() - a.size());
}

// [B*S..] reshape helpers for [1, F*S, H, D] <-> [S, F, H, D].
std::vector<uint16_t> frames_to_tokens_major(const std::vector<uint16_t>& x, int64_t frames,
                                             int64_t tokens, int64_t row) {
  std::vector<uint16_t> out(x.size());
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t s = 0; s < tokens; ++s)
      std::memcpy(&out[(s * frames + f) * row], &x[(f * tokens + s) * row], row * 2);
  return out;
}

// ---- 1. scheduler and sampler ----

TEST(WanFlowSchedule, TablesMatchTorchBitForBit) {
  const FlowSchedule s = make_flow_schedule();
  EXPECT_EQ(count_diff(s.sigmas, constants().f32("scheduler.sigmas")), 0u);
  EXPECT_EQ(count_diff(s.timesteps, constants().f32("scheduler.timesteps")), 0u);
}

TEST(WanFlowSchedule, WarpedStepsAndSigmaLookup) {
  const FlowSchedule s = make_flow_schedule();
  for (const auto& [preset, steps] : std::vector<std::pair<std::string, std::vector<int>>>{
           {"universal_gta", {1000, 666, 333}}, {"templerun", {1000, 750, 500, 250}}}) {
    SCOPED_TRACE(preset);
    const std::vector<float> t = warped_step_times(s, steps);
    EXPECT_EQ(count_diff(t, constants().f32("sampler." + preset + ".t")), 0u);
    const std::vector<int64_t> grid = constants().i64("sampler." + preset + ".grid_index");
    const std::vector<float> sigma = constants().f32("sampler." + preset + ".sigma");
    const std::vector<int> idx = warped_step_indices(steps);
    ASSERT_EQ(idx.size(), grid.size());
    for (size_t k = 0; k < t.size(); ++k) {
      EXPECT_EQ(idx[k], grid[k]);
      EXPECT_EQ(sigma_index_f64(s, t[k]), grid[k]);
      EXPECT_EQ(sigma_index_f32(s, t[k]), grid[k]);
      EXPECT_EQ(f32_bits(s.sigmas[sigma_index_f64(s, t[k])]), f32_bits(sigma[k]));
    }
  }
}

TEST(WanFlowSchedule, LinspaceHalvesMeetAtTheMiddle) {
  // Independent of torch: first half counts up from start, second half down
  // from end, so both ends are exact and the sequence is monotonic.
  const std::vector<float> v = torch_linspace_f32(1.0f, 0.0f, 1001);
  EXPECT_EQ(v.front(), 1.0f);
  EXPECT_EQ(v.back(), 0.0f);
  for (size_t i = 1; i < v.size(); ++i) EXPECT_LT(v[i], v[i - 1]) << i;
}

// x0 prediction and re-noise over every step of every block, in the
// reference precision (bf16) and in fp32, each against the recorded tensors.
TEST(WanSampler, EveryStepOfEveryModeBitExact) {
  const FlowSchedule sched = make_flow_schedule();
  for (const Mode& m : modes()) {
    SCOPED_TRACE(m.name);
    const Golden& p = pipeline(m);
    const std::vector<float> t = warped_step_times(sched, m.steps);
    const std::vector<float> init = p.f32("noise.initial");  // [16, N, h, w]
    const int64_t hw = kH * kW, block = 16 * 3 * hw;
    for (int b = 0; b < m.latents / 3; ++b) {
      std::vector<uint16_t> x_bf(block);
      std::vector<float> x_f(block);
      for (int64_t c = 0; c < 16; ++c)
        for (int64_t f = 0; f < 3; ++f)
          for (int64_t i = 0; i < hw; ++i) {
            const float v = init[(c * m.latents + 3 * b + f) * hw + i];
            x_bf[(c * 3 + f) * hw + i] = f32_to_bf16(v);
            x_f[(c * 3 + f) * hw + i] = v;
          }
      for (size_t k = 0; k < m.steps.size(); ++k) {
        const std::string key = "b" + std::to_string(b) + ".s" + std::to_string(k);
        SCOPED_TRACE(key);
        const float sigma = sched.sigmas[sigma_index_f64(sched, t[k])];
        std::vector<uint16_t> x0_bf(block);
        flow_to_x0(x_bf, p.bf16("ref." + key + ".flow"), sigma, x0_bf);
        EXPECT_EQ(count_diff(x0_bf, p.bf16("ref." + key + ".x0")), 0u);
        std::vector<float> x0_f(block);
        flow_to_x0(x_f, p.f32("fp32." + key + ".flow"), sigma, x0_f);
        EXPECT_EQ(count_diff(x0_f, p.f32("fp32." + key + ".x0")), 0u);
        if (k + 1 == m.steps.size()) break;
        // Continue from the recorded x0 so one step's miss does not cascade.
        const float next = sched.sigmas[sigma_index_f32(sched, t[k + 1])];
        const std::vector<float> noise = p.f32("noise." + key);  // [3, 16, h, w]
        std::vector<uint16_t> noise_bf(noise.size());
        for (size_t i = 0; i < noise.size(); ++i) noise_bf[i] = f32_to_bf16(noise[i]);
        renoise(p.bf16("ref." + key + ".x0"), noise_bf, next, 16, 3, x_bf);
        const std::string nkey = "b" + std::to_string(b) + ".s" + std::to_string(k + 1);
        EXPECT_EQ(count_diff(x_bf, p.bf16("ref." + nkey + ".x")), 0u);
        renoise(p.f32("fp32." + key + ".x0"), noise, next, 16, 3, x_f);
      }
    }
  }
}

// ---- 7. noise ----

TEST(WanSamplerNoise, InitialAndEveryRenoiseDrawInOrder) {
  for (const Mode& m : modes()) {
    SCOPED_TRACE(m.name);
    const Golden& p = pipeline(m);
    SamplerNoise noise(42, m.latents, kH, kW);
    EXPECT_EQ(count_diff(noise.initial(), p.f32("noise.initial")), 0u);
    for (int b = 0; b < m.latents / 3; ++b)
      for (size_t k = 0; k + 1 < m.steps.size(); ++k) {
        const std::string key = "noise.b" + std::to_string(b) + ".s" + std::to_string(k);
        EXPECT_EQ(count_diff(noise.next_renoise(), p.f32(key)), 0u) << key;
      }
  }
}

// ---- 2. time embedding ----

TEST(WanTimeEmbedding, SinusoidMatchesReference) {
  const std::vector<float> t = constants().f32("sinusoid.t");
  const std::vector<double> ref = constants().f64("sinusoid.f64");
  ASSERT_EQ(ref.size(), t.size() * kFreqDim);
  std::vector<double> row(kFreqDim);
  std::vector<uint16_t> mine(t.size() * kFreqDim);
  time_sinusoid_bf16(t, kFreqDim, mine);
  double max_err = 0;
  size_t bf16_diff = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    time_sinusoid_f64(t[i], kFreqDim, row);
    for (int j = 0; j < kFreqDim; ++j) {
      const double r = ref[i * kFreqDim + j];
      max_err = std::max(max_err, std::fabs(row[j] - r));
      bf16_diff += mine[i * kFreqDim + j] != f32_to_bf16(static_cast<float>(r));
    }
  }
  // Angles reach 1000 rad: a 1-ulp difference in pow or cos (SLEEF vs libm)
  // is at most ~2e-13 after the product; far below the bf16 step.
  EXPECT_LT(max_err, 1e-12);
  EXPECT_EQ(bf16_diff, 0u);
  // The bf16 tensor the DiT consumed in the first call (t = 1000 per frame).
  for (const Mode& m : modes()) {
    const Golden& p = pipeline(m);
    const std::vector<float> t0 = p.f32("ref.t_first_call");
    std::vector<uint16_t> s(t0.size() * kFreqDim);
    time_sinusoid_bf16(t0, kFreqDim, s);
    EXPECT_EQ(count_diff(s, p.bf16("ref.call.b0.s0.sinusoid")), 0u) << m.name;
  }
}

// ---- 3. 3-D RoPE ----

TEST(WanRope3d, SplitFollowsHeadDim) {
  const RopeSplit full = rope_split(128), tiny = rope_split(32);
  EXPECT_EQ(full.t, 22);
  EXPECT_EQ(full.h, 21);
  EXPECT_EQ(full.w, 21);
  EXPECT_EQ(tiny.t, 6);
  EXPECT_EQ(tiny.h, 5);
  EXPECT_EQ(tiny.w, 5);
}

TEST(WanRope3d, TableRowsMatchReference) {
  for (const auto& [name, hd] :
       std::vector<std::pair<std::string, int>>{{"full", 128}, {"tiny", 32}}) {
    SCOPED_TRACE(name);
    const Rope3d rope(hd);
    const std::vector<int64_t> rows = constants().i64("rope." + name + ".rows");
    const std::vector<double> rc = constants().f64("rope." + name + ".cos_f64");
    const std::vector<double> rs = constants().f64("rope." + name + ".sin_f64");
    const int pairs = hd / 2;
    std::vector<double> c(pairs), s(pairs);
    double max_err = 0;
    for (size_t r = 0; r < rows.size(); ++r) {
      rope.table_row(rows[r], c, s);
      for (int p = 0; p < pairs; ++p) {
        max_err = std::max(max_err, std::fabs(c[p] - rc[r * pairs + p]));
        max_err = std::max(max_err, std::fabs(s[p] - rs[r * pairs + p]));
      }
    }
    // |values| <= 1: a few f64 ulps (SLEEF cos/sin are 1-ulp, libm < 1).
    EXPECT_LT(max_err, 1e-15);
  }
}

TEST(WanRope3d, ApplyOnQueriesAndKeysBitExact) {
  const Rope3d rope(kHeadDim);
  for (const auto& be : both_backends()) {
    for (const Mode& m : modes()) {
      SCOPED_TRACE(std::string(be->name()) + " " + m.name);
      const Golden& p = pipeline(m);
      for (const char* qk : {"q", "k"}) {
        const std::string a = "ref.call.b0.s0.blk0.sa_";
        const std::vector<uint16_t> x = p.bf16(a + qk);  // [1, 18, 64] = [18, 2, 32]
        const std::vector<uint16_t> out = rope3d_on(*be, rope, x, 3, kGridH, kGridW, kHeads, 0);
        EXPECT_EQ(count_diff(out, p.bf16(a + qk + "_rope")), 0u) << qk;
      }
    }
  }
}

TEST(WanRope3d, F32TablesAreTheRoundedExactTable) {
  const Rope3d rope(128);
  std::vector<float> cos, sin;
  rope.token_tables_f32(2, 3, 4, 500, cos, sin);
  ASSERT_EQ(cos.size(), 2u * 3 * 4 * 64);
  std::vector<double> c(64), s(64);
  // Token (f=1, i=2, j=3): temporal pairs at 501, height at 2, width at 3.
  const size_t tok = (1 * 3 + 2) * 4 + 3;
  rope.table_row(501, c, s);
  for (int p = 0; p < 22; ++p) EXPECT_EQ(cos[tok * 64 + p], static_cast<float>(c[p]));
  rope.table_row(2, c, s);
  for (int p = 22; p < 43; ++p) EXPECT_EQ(sin[tok * 64 + p], static_cast<float>(s[p]));
  rope.table_row(3, c, s);
  for (int p = 43; p < 64; ++p) EXPECT_EQ(cos[tok * 64 + p], static_cast<float>(c[p]));
}

// Random bf16 bits over the whole range (normals of every scale, denormals,
// zeros, infinities, NaNs) from a fixed LCG.
std::vector<uint16_t> random_bf16(size_t n, uint32_t seed) {
  std::vector<uint16_t> v(n);
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = static_cast<uint16_t>(seed >> 16);
  }
  return v;
}

TEST(WanRope3d, ApplyAtFullHeadDimRotatesEveryTokenByItsOwnAngles) {
  // 2 frames of 3 x 4 tokens from frame 500, 3 heads of 128: each token
  // against the complex128 rotation by its reference table rows (temporal
  // pairs at the frame, height pairs at i, width pairs at j), on both backends.
  const Rope3d rope(128);
  const int64_t frames = 2, h = 3, w = 4, heads = 3, start = 500;
  const std::vector<uint16_t> x = random_bf16(static_cast<size_t>(frames * h * w * heads * 128), 9);
  for (const auto& be : both_backends()) {
    SCOPED_TRACE(be->name());
    const std::vector<uint16_t> got = rope3d_on(*be, rope, x, frames, h, w, heads, start);
    std::vector<double> c(64), s(64), rc(64), rs(64);
    for (int64_t f = 0; f < frames; ++f)
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < w; ++j) {
          const int64_t tok = (f * h + i) * w + j;
          for (auto [pos, lo, hi] :
               {std::tuple{start + f, 0, 22}, std::tuple{i, 22, 43}, std::tuple{j, 43, 64}}) {
            rope.table_row(pos, rc, rs);
            for (int p = lo; p < hi; ++p) c[p] = rc[p], s[p] = rs[p];
          }
          const size_t base = static_cast<size_t>(tok * heads * 128);
          size_t bad = 0;
          for (int64_t e = 0; e < heads * 64; ++e) {
            const size_t at = base + static_cast<size_t>(2 * e);
            const double a = bf16_to_f32(x[at]), b = bf16_to_f32(x[at + 1]);
            const size_t p = static_cast<size_t>(e % 64);
            const double ac = a * c[p], bd = b * s[p], ad = a * s[p], bc = b * c[p];
            bad += got[at] != f32_to_bf16(static_cast<float>(ac - bd));
            bad += got[at + 1] != f32_to_bf16(static_cast<float>(bc + ad));
          }
          EXPECT_EQ(bad, 0u) << tok;
        }
  }
}

// The fused modulation / gated residual (the backend's mul_add_stepwise, as
// the DiT calls it) against the reference backend's mul then add (each
// rounded to bf16), bit for bit: per-frame q and r repeated over the tokens
// from a strided [F, 6, D] table as the DiT passes them, and per-token r (the
// residual stream), D with a vector tail.
TEST(WanBf16MulAdd, MatchesTheSeparateBackendOpsBitForBit) {
  const int64_t f = 3, t = 29, d = 200;
  std::unique_ptr<Backend> ref = make_ref_backend();
  auto bf16 = [](Shape shape, uint32_t seed) {
    OwnedTensor o(DType::BF16, shape);
    // Finite values of mixed scale (the random_bf16 range less Inf / NaN).
    std::vector<uint16_t> v = random_bf16(static_cast<size_t>(o.t.numel()), seed);
    for (auto& x : v) x = static_cast<uint16_t>((x & 0x8000) | (0x3000 + (x & 0x1FFF)));
    std::memcpy(o.t.data, v.data(), v.size() * 2);
    return o;
  };
  const OwnedTensor p = bf16({f, t, d}, 1), table = bf16({f, 6, d}, 2), x = bf16({f, t, d}, 3);
  const Tensor q = table.t.slice(1, 1, 1), r = table.t.slice(1, 4, 1);  // [F, 1, D]
  for (const auto& be : both_backends()) {
    for (bool per_token_r : {false, true}) {
      SCOPED_TRACE(std::string(be->name()) + (per_token_r ? " per-token r" : " per-frame r"));
      const Tensor rr = per_token_r ? x.t : r;
      OwnedTensor want(DType::BF16, {f, t, d}), got(DType::BF16, {f, t, d});
      ref->mul(p.t, q, want.t);
      ref->add(want.t, rr, want.t);
      be->mul_add_stepwise(rr, p.t, q, got.t);
      EXPECT_EQ(std::memcmp(got.t.data, want.t.data, static_cast<size_t>(want.t.numel()) * 2), 0);
      if (per_token_r) {  // in place on the residual stream, as gated_residual runs it
        OwnedTensor acc = bf16({f, t, d}, 3);
        be->mul_add_stepwise(acc.t, p.t, q, acc.t);
        EXPECT_EQ(std::memcmp(acc.t.data, want.t.data, static_cast<size_t>(want.t.numel()) * 2), 0);
      } else {  // in place on the product's input, as modulate runs it
        OwnedTensor y = bf16({f, t, d}, 1);
        be->mul_add_stepwise(rr, y.t, q, y.t);
        EXPECT_EQ(std::memcmp(y.t.data, want.t.data, static_cast<size_t>(want.t.numel()) * 2), 0);
      }
    }
  }
}

// ---- 4. action window, action RoPE, action RMSNorm ----

TEST(WanActionWindow, KeyboardAndMouseWindows) {
  for (const Mode& m : modes()) {
    SCOPED_TRACE(m.name);
    const Golden& p = pipeline(m);
    const std::string act = "ref.call.b0.s0.blk0.act.";
    // kb_raw: the padded track the reference embeds; slot k of latent f
    // reads padded row 4f + k, i.e. raw frame action_window_frame(f, k).
    const std::vector<float> kb = p.f32("inputs.keyboard");  // [1, T, K]
    const int64_t K = p.shape("inputs.keyboard")[2];
    const std::vector<uint16_t> raw = p.bf16(act + "kb_raw");  // [1, 12 + 9, K]
    for (int f = 0; f < 3; ++f)
      for (int k = 0; k < kActionWindowFrames; ++k)
        for (int64_t c = 0; c < K; ++c)
          EXPECT_EQ(raw[(4 * f + k) * K + c], f32_to_bf16(kb[action_window_frame(f, k) * K + c]));
    // Keyboard window: embeddings of the unpadded frames, gathered.
    const std::vector<uint16_t> emb = p.bf16(act + "kb_embed");  // [1, 21, E]
    const int64_t E = p.shape(act + "kb_embed")[2];
    const std::vector<uint16_t> track(emb.begin() + kActionWindowFrames * E, emb.end());
    const std::vector<uint16_t> win = p.bf16(act + "kb_window");  // [1, 3, 12 E]
    for (int f = 0; f < 3; ++f) {
      std::vector<uint16_t> out(kActionWindowFrames * E);
      ASSERT_TRUE(gather_action_window<uint16_t>(track, E, f, out).ok());
      EXPECT_EQ(count_diff(out, std::vector<uint16_t>(win.begin() + f * out.size(),
                                                      win.begin() + (f + 1) * out.size())),
                0u);
    }
    if (m.name == "templerun") continue;                     // no mouse
    const std::vector<float> mouse = p.f32("inputs.mouse");  // [1, T, 2]
    std::vector<uint16_t> mouse_bf(mouse.size());
    for (size_t i = 0; i < mouse.size(); ++i) mouse_bf[i] = f32_to_bf16(mouse[i]);
    const std::vector<uint16_t> mi = p.bf16(act + "mouse_in");  // [6, 3, 64 + 24]
    const int64_t dim = p.shape(act + "mouse_in")[2] - 24;
    for (int f = 0; f < 3; ++f) {
      std::vector<uint16_t> out(24);
      ASSERT_TRUE(gather_action_window<uint16_t>(mouse_bf, 2, f, out).ok());
      for (int64_t s = 0; s < kFrameTokens; ++s)
        for (int i = 0; i < 24; ++i) EXPECT_EQ(mi[(s * 3 + f) * (dim + 24) + dim + i], out[i]);
    }
  }
}

TEST(WanActionWindow, ShortTrackIsAnError) {
  const std::vector<float> track(2 * 8);  // 8 raw frames, 2 channels
  std::vector<float> out(24);
  EXPECT_TRUE(gather_action_window<float>(track, 2, 1, out).ok());  // needs frame 3
  const Status s = gather_action_window<float>(track, 2, 3, out);   // needs frame 11
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("8 raw frames"), std::string::npos) << s.message();
}

int64_t ulp_distance(float a, float b) {
  auto key = [](float v) {
    const int32_t i = static_cast<int32_t>(f32_bits(v));
    return i < 0 ? static_cast<int64_t>(INT32_MIN) - i : static_cast<int64_t>(i);
  };
  return std::llabs(key(a) - key(b));
}

TEST(WanActionRope, TableMatchesReference) {
  const std::vector<int64_t> rows = constants().i64("action_rope.rows");
  const std::vector<float> rc = constants().f32("action_rope.cos");
  const std::vector<float> rs = constants().f32("action_rope.sin");
  std::vector<float> c(64), s(64);
  int64_t max_ulp = 0;
  size_t differ = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    action_rope_row(rows[r], c, s);
    for (int d = 0; d < 64; ++d) {
      const int64_t u =
          std::max(ulp_distance(c[d], rc[r * 64 + d]), ulp_distance(s[d], rs[r * 64 + d]));
      max_ulp = std::max(max_ulp, u);
      differ += u != 0;
      if (d >= kActionRopeTimeDims) {
        EXPECT_EQ(u, 0) << "identity dims are exact";
      }
    }
  }
  // The angles are exact; torch evaluates fp32 cos/sin with SLEEF's 1-ulp
  // vectorised kernels, we with libm (correctly rounded in practice), so a
  // value may sit one ulp apart. The RoPE outputs used by the model are
  // compared bit-exact below.
  EXPECT_LE(max_ulp, 1);
  EXPECT_LT(differ, rows.size() * 8 / 4) << "most entries agree exactly";
}

TEST(WanActionRope, ApplyOnQueriesAndKeysBitExact) {
  for (const auto& be : both_backends())
    for (const Mode& m : modes()) {
      SCOPED_TRACE(std::string(be->name()) + " " + m.name);
      const Golden& p = pipeline(m);
      const std::string act = "ref.call.b0.s0.blk0.act.";
      const int64_t row = kActionHeads * kActionHeadDim;
      // kb_q_norm is [1, F*S, H, 64] frame-major; kb_q_rope [S, F, H, 64].
      const std::vector<uint16_t> q =
          frames_to_tokens_major(p.bf16(act + "kb_q_norm"), 3, kFrameTokens, row);
      std::vector<uint16_t> out(q.size());
      action_rope_apply_bf16(*be, q, 3, kActionHeads, 0, out);
      EXPECT_EQ(count_diff(out, p.bf16(act + "kb_q_rope")), 0u);
      const std::vector<uint16_t> k = p.bf16(act + "kb_k_norm");  // [1, 3, H, 64]
      out.resize(k.size());
      action_rope_apply_bf16(*be, k, 3, kActionHeads, 0, out);
      EXPECT_EQ(count_diff(out, p.bf16(act + "kb_k_rope")), 0u);
      if (m.name == "templerun") continue;
      for (const char* qk : {"q", "k"}) {
        const std::vector<uint16_t> x = p.bf16(act + "mouse_" + qk + "_norm");  // [S, F, H, 64]
        out.resize(x.size());
        action_rope_apply_bf16(*be, x, 3, kActionHeads, 0, out);
        EXPECT_EQ(count_diff(out, p.bf16(act + "mouse_" + qk + "_rope")), 0u) << qk;
      }
    }
}

TEST(WanActionRmsNorm, KeyboardKeysBitExact) {
  for (const auto& be : both_backends())
    for (const Mode& m : modes()) {
      SCOPED_TRACE(std::string(be->name()) + " " + m.name);
      const Golden& p = pipeline(m);
      const std::string act = "ref.call.b0.s0.blk0.act.";
      // kb_kv [1, 3, 2*H*64] splits (K V, H, 64); K is the first half.
      const std::vector<uint16_t> kv = p.bf16(act + "kb_kv");
      const int64_t row = kActionHeads * kActionHeadDim;
      std::vector<uint16_t> k;
      for (int f = 0; f < 3; ++f)
        k.insert(k.end(), kv.begin() + f * 2 * row, kv.begin() + f * 2 * row + row);
      std::vector<uint16_t> out(k.size());
      action_rms_norm_bf16(*be, k, kActionHeadDim, out);
      EXPECT_EQ(count_diff(out, p.bf16(act + "kb_k_norm")), 0u);
    }
}

// ---- 5. KV ring ----

// Replays a whole run through KvRing (every sampler step plus the t = 0
// re-run of each block) on a cache of labels (which call wrote the entry)
// and checks the recorded caches against it: entries with the same label
// hold the same bytes, entries written by different calls differ.
TEST(WanKvRing, ReplaysTheRecordedCaches) {
  for (const Mode& m : modes()) {
    SCOPED_TRACE(m.name);
    const Golden& p = pipeline(m);
    const int64_t S = kFrameTokens, size = m.local_attn * S, chunk = 3 * S;
    const int last = m.latents / 3 - 1;
    const int calls_per_block = static_cast<int>(m.steps.size()) + 1;
    KvRing ring(size);
    KvRing action_ring(m.local_attn);  // frames
    std::vector<int> label(size, -1);  // call id * 100000 + absolute token
    std::vector<int> window_labels;
    for (int b = 0; b <= last; ++b) {
      for (int call = 0; call < calls_per_block; ++call) {
        const int id = b * calls_per_block + call;
        const KvRingStep st = ring.advance((3 * b + 3) * S, chunk);
        const KvRingStep at = action_ring.advance(3 * b + 3, 3);
        EXPECT_EQ(at.attend_end - at.attend_begin, (st.attend_end - st.attend_begin) / S);
        for (int64_t i = 0; i < st.rolled; ++i) label[i] = label[i + st.evicted];
        for (int64_t i = st.write_begin; i < st.write_end; ++i)
          label[i] = id * 100000 + (3 * b * S + (i - st.write_begin));
        if (b == 0 && call == 0) {
          EXPECT_EQ(st.write_begin, 0);
          EXPECT_EQ(st.attend_end, chunk);
        }
        if (b == last && call == 0) {
          window_labels.assign(label.begin() + st.attend_begin, label.begin() + st.attend_end);
          EXPECT_EQ(st.attend_end - st.attend_begin, size);
          // Shape of the recorded mouse / keyboard windows: L frames.
          EXPECT_EQ(p.shape("ref.call.b" + std::to_string(b) + ".s0.blk0.act.kb_kwin")[1],
                    at.attend_end - at.attend_begin);
        }
      }
    }
    EXPECT_EQ(ring.local_end(), p.i64("ref.final_cache.blk0.local_end")[0]);
    EXPECT_EQ(ring.global_end(), p.i64("ref.final_cache.blk0.global_end")[0]);
    const std::string w = "ref.call.b" + std::to_string(last) + ".s0.blk0.sa_";
    const int64_t row = kHeads * kHeadDim;
    for (const char* kv : {"k", "v"}) {
      const std::vector<uint16_t> win = p.bf16(w + kv + "win");
      const std::vector<uint16_t> fin = p.bf16(std::string("ref.final_cache.blk0.") + kv);
      ASSERT_EQ(win.size(), window_labels.size() * row);
      ASSERT_EQ(fin.size(), label.size() * row);
      size_t same_label = 0, diff_label = 0;
      for (size_t i = 0; i < window_labels.size(); ++i)
        for (size_t j = 0; j < label.size(); ++j) {
          const bool eq = std::memcmp(&win[i * row], &fin[j * row], row * 2) == 0;
          if (window_labels[i] == label[j]) {
            EXPECT_TRUE(eq) << kv << " window " << i << " final " << j;
            ++same_label;
          } else if (window_labels[i] % 100000 == label[j] % 100000) {
            // Same token, written by the s0 call vs the clean re-run.
            EXPECT_FALSE(eq) << kv << " window " << i << " final " << j;
            ++diff_label;
          }
        }
      EXPECT_EQ(same_label, static_cast<size_t>((m.local_attn - 3) * S));
      EXPECT_EQ(diff_label, static_cast<size_t>(3 * S));
    }
    // The first call's window is exactly the keys it wrote.
    const std::string a = "ref.call.b0.s0.blk0.";
    EXPECT_EQ(count_diff(p.bf16(a + "sa_kwin"), p.bf16(a + "sa_k_rope")), 0u);
    EXPECT_EQ(count_diff(p.bf16(a + "act.kb_kwin"), p.bf16(a + "act.kb_k_rope")), 0u);
  }
}

TEST(WanKvRing, RollsLikeTheSpec) {
  // L = 4 frames of 1 entry, blocks of 3 (gta_drive): block 1 evicts 2,
  // keeps frame 2 at slot 0 and writes [1, 4).
  KvRing ring(4);
  KvRingStep s = ring.advance(3, 3);
  EXPECT_EQ(s.write_begin, 0);
  EXPECT_EQ(s.write_end, 3);
  s = ring.advance(3, 3);  // next step of the same block: same slots
  EXPECT_EQ(s.evicted, 0);
  EXPECT_EQ(s.write_begin, 0);
  s = ring.advance(6, 3);
  EXPECT_EQ(s.evicted, 2);
  EXPECT_EQ(s.rolled, 1);
  EXPECT_EQ(s.write_begin, 1);
  EXPECT_EQ(s.write_end, 4);
  EXPECT_EQ(s.attend_begin, 0);
  EXPECT_EQ(ring.global_end(), 6);
}

// ---- 6. unpatchify ----

TEST(WanUnpatchify, HeadOutputToFlowBitExact) {
  for (const auto& be : both_backends())
    for (const Mode& m : modes()) {
      const Golden& p = pipeline(m);
      std::vector<uint16_t> ho = p.bf16("ref.call.b0.s0.head_out");  // [1, 3, 6, 64]
      std::vector<uint16_t> out(ho.size());
      const Tensor tokens =
          Tensor::view(ho.data(), DType::BF16, Shape{3 * kGridH * kGridW, kPatchDim});
      Tensor flow = Tensor::view(out.data(), DType::BF16,
                                 Shape{1, kLatentChannels, 3, 2 * kGridH, 2 * kGridW});
      unpatchify(*be, tokens, 3, kGridH, kGridW, flow);
      EXPECT_EQ(count_diff(out, p.bf16("ref.call.b0.s0.flow")), 0u) << be->name() << " " << m.name;
    }
}

}  // namespace
}  // namespace flick::wan
