// The CausalWanModel DiT against the Matrix-Game 2.0 reference goldens
// (tests/data/mg2/pipeline_<mode>.safetensors, made by tools/mg2_goldens.py
// from the reference's own pipeline on the tiny checkpoints): the first DiT
// call (block 0, step 0, empty caches), every named intermediate, in the
// reference's bf16 numerics (`ref.`) and in fp32 (`fp32.`).
//
// The action module (blocks < action_blocks) is not part of the component
// yet, so each stage starts from the golden input of that stage: block 0's
// and block 1's attention halves from the golden block input, their
// feed-forward halves from the golden `x_after_action`, the action-free
// blocks from the previous block's golden output and the head from the last
// block's. That checks every stage independently.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "models/wan/wan_dit.h"
#include "runtime/dtype.h"
#include "runtime/weights/weight_store.h"

namespace flick {
namespace {

const std::string kData = std::string(FLICK_TEST_DATA) + "/mg2/";

struct Mode {
  const char* name;
  const char* checkpoint;
  int64_t local_attn_frames;
};
const Mode kModes[] = {
    {"universal", "weights/base_distilled_model/base_distill.safetensors", 6},
    {"gta_drive", "weights/gta_distilled_model/gta_keyboard2dim.safetensors", 4},
    {"templerun", "weights/templerun_distilled_model/templerun_7dim_onlykey.safetensors", 6},
};
constexpr int64_t kTinyHeadDim = 32;  // dim 64, 2 heads (manifest tiny.dit)

std::vector<float> to_f32(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  OwnedTensor c(DType::F32, t.shape);
  // Taps may be strided views (modulation slices, cache windows).
  make_cpu_backend()->copy(t, c.t);
  std::copy(c.t.ptr<float>(), c.t.ptr<float>() + t.numel(), out.begin());
  return out;
}

double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

struct Case {
  Mode mode;
  Precision precision;
};

class WanDitGolden : public ::testing::TestWithParam<Case> {};

TEST_P(WanDitGolden, MatchesTheReferenceAtEveryIntermediate) {
  const Case c = GetParam();
  const bool bf16 = c.precision == Precision::BF16;
  const DType act = bf16 ? DType::BF16 : DType::F32;
  const std::string prefix = bf16 ? "ref." : "fp32.";
  const std::string call = prefix + "call.b0.s0.";
  // Tolerances (relative L2 per tensor, CPU backend). fp32: the same
  // arithmetic as torch's fp32 run up to GEMM / attention / norm summation
  // order, one stage deep (every stage starts from a golden input); observed
  // <= 4e-7: 1e-5. bf16: every op rounds to bf16 where the reference rounds;
  // the fp32 accumulation order inside GEMMs and attention flips an
  // occasional rounding by 1 ulp (2^-8 relative) and the flip feeds the rest
  // of the stage; observed: half the tensors bit-exact, the worst 2.1e-3
  // (cross-attention output): 5e-3, well below the reference's own
  // bf16-vs-fp32 distance at these tensors (manifest: 1.3-1.6 %).
  const double tol = bf16 ? 5e-3 : 1e-5;

  Expected<WeightStore> golden =
      WeightStore::open({kData + "pipeline_" + c.mode.name + ".safetensors"});
  ASSERT_TRUE(golden.ok()) << golden.status().message();
  Expected<WeightStore> store = WeightStore::open({kData + c.mode.checkpoint});
  ASSERT_TRUE(store.ok()) << store.status().message();
  auto g = [&](const std::string& name) {
    Expected<Tensor> t = golden->get(name);
    EXPECT_TRUE(t.ok()) << name << ": " << t.status().message();
    return t.ok() ? *t : Tensor{};
  };

  const Tensor img_cond = g(prefix + "img_cond");  // [1, 16, N, h, w]
  const int64_t lh = img_cond.dim(3), lw = img_cond.dim(4), frames = 3;
  const Tensor visual = g(prefix + "visual_context");  // [1, Tc, clip]
  WanDitShape shape;
  shape.latent_h = lh;
  shape.latent_w = lw;
  shape.frames = frames;
  shape.context_tokens = visual.dim(1);
  shape.local_attn_frames = c.mode.local_attn_frames;
  std::unique_ptr<Backend> backend = make_cpu_backend();
  Expected<WanDit> dit =
      WanDit::load(store->view("model."), *backend, c.precision, shape, kTinyHeadDim);
  ASSERT_TRUE(dit.ok()) << dit.status().message();
  const WanDitConfig& cfg = dit->config();
  EXPECT_EQ(cfg.dim, 64);
  EXPECT_EQ(cfg.heads, 2);
  EXPECT_EQ(cfg.layers, 4);
  EXPECT_EQ(cfg.ffn_dim, 128);
  EXPECT_EQ(cfg.in_dim, 36);
  EXPECT_EQ(cfg.clip_dim, 32);
  EXPECT_EQ(cfg.action_blocks, 2);

  int compared = 0;
  WanDit::Tap tap = [&](std::string_view name, const Tensor& t) {
    const std::string key = call + std::string(name);
    if (!golden->has(key)) return;
    const Tensor want = *golden->get(key);
    ASSERT_EQ(want.numel(), t.numel()) << key << ": " << t.str() << " vs " << want.str();
    const double err = rel_l2(to_f32(t), to_f32(want));
    EXPECT_LE(err, tol) << key;
    ++compared;
  };

  // ---- inputs of the first call: noise frames 0-2, cond = [mask, img_cond] ----
  const Tensor noise = g("noise.initial");  // [1, 16, N, h, w] F32
  OwnedTensor noisy(act, {1, 16, frames, lh, lw}), cond(act, {1, 20, frames, lh, lw});
  backend->copy(noise.slice(2, 0, frames), noisy.t);
  {
    OwnedTensor cf(DType::F32, {1, 20, frames, lh, lw});
    float* p = cf.t.ptr<float>();
    const int64_t plane = lh * lw;
    for (int64_t ch = 0; ch < 4; ++ch)  // the mask: 1 for latent 0
      for (int64_t f = 0; f < frames; ++f)
        for (int64_t i = 0; i < plane; ++i) p[(ch * frames + f) * plane + i] = f == 0 ? 1.f : 0.f;
    Tensor img_part = cf.t.slice(1, 4, 16);
    backend->copy(img_cond.slice(2, 0, frames), img_part);
    backend->copy(cf.t, cond.t);
  }
  const Tensor t_first = g(prefix + "t_first_call");  // [1, 3] F32
  OwnedTensor t(DType::F32, {frames});
  backend->copy(t_first.reshape({frames}), t.t);

  ASSERT_TRUE(dit->set_context(visual, tap).ok());
  ASSERT_TRUE(dit->embed(noisy.t, cond.t, t.t, tap).ok());

  Tensor x = dit->tokens();  // [tokens, dim]
  auto load_x = [&](const std::string& name) {
    const Tensor src = g(call + name);
    backend->copy(src.reshape(x.shape), x);
  };
  for (int64_t i = 0; i < cfg.layers; ++i) {
    const std::string blk = "blk" + std::to_string(i) + ".";
    if (i > 0) load_x("blk" + std::to_string(i - 1) + ".out");
    if (i < cfg.action_blocks) {
      if (bf16) {  // the fp32 goldens store block outputs only
        dit->attention(i, /*start_frame=*/0, tap);
        load_x(blk + "x_after_action");
        dit->feed_forward(i, tap);
      }
    } else {
      dit->block(i, /*start_frame=*/0, tap);
    }
  }
  dit->head(tap);

  // Every golden of the call but the action module's and the inputs we fed.
  int expected = 0;
  for (const std::string& n : golden->names()) {
    if (n.rfind(call, 0) != 0) continue;
    const std::string rest = n.substr(call.size());
    if (rest.find(".act.") != std::string::npos || rest.find("x_after_action") != std::string::npos)
      continue;
    if (!bf16 && (rest == "blk0.out" || rest == "blk1.out")) continue;
    ++expected;
  }
  EXPECT_EQ(compared, expected);
  // fp32: 5 embeddings, blk2/3.out, head_norm, head_out, flow. bf16: 5
  // embeddings, 20 of block 0, x_after_sa/ca and out of blocks 1-3, 3 of the head.
  EXPECT_EQ(expected, bf16 ? 37 : 10);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const Mode& m : kModes)
    for (Precision p : {Precision::F32, Precision::BF16}) out.push_back({m, p});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Modes, WanDitGolden, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.mode.name) + "_" +
                                  precision_name(info.param.precision);
                         });

TEST(WanDitLoad, ReportsBadCheckpoints) {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  WanDitShape shape{4, 6, 3, 10, 6};
  // A checkpoint that is not a DiT: the missing tensor is named.
  Expected<WeightStore> clip = WeightStore::open({kData + "clip.safetensors"});
  ASSERT_TRUE(clip.ok());
  Expected<WanDit> a = WanDit::load(clip->view("model."), *backend, Precision::BF16, shape, 32);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("model.patch_embedding.weight"), std::string::npos)
      << a.status().message();

  Expected<WeightStore> store = WeightStore::open({kData + kModes[0].checkpoint});
  ASSERT_TRUE(store.ok());
  // Head size that does not divide the width.
  Expected<WanDit> b = WanDit::load(store->view("model."), *backend, Precision::BF16, shape, 48);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("head size 48"), std::string::npos) << b.status().message();
  // Unsupported precision and an odd latent grid.
  EXPECT_FALSE(WanDit::load(store->view("model."), *backend, Precision::INT8, shape, 32).ok());
  WanDitShape odd = shape;
  odd.latent_w = 5;
  EXPECT_FALSE(WanDit::load(store->view("model."), *backend, Precision::BF16, odd, 32).ok());
  // Wrong prefix: everything is missing, named with the prefix.
  Expected<WanDit> d = WanDit::load(store->view("net."), *backend, Precision::BF16, shape, 32);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("net.patch_embedding.weight"), std::string::npos);
  // Input validation of a loaded model.
  Expected<WanDit> ok = WanDit::load(store->view("model."), *backend, Precision::BF16, shape, 32);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  OwnedTensor wrong(DType::F32, {1, 10, 31});
  Status s = ok->set_context(wrong.t);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("visual context"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace flick
