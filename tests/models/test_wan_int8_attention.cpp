// INT8 self-attention in the Matrix-Game DiT (Backend::attention_int8, taken
// at precision INT8) on the golden inputs of tests/data/mg2: the cosine of
// every block's attention output against BF16 attention on the same inputs,
// the flows against the BF16 DiT, and the whole pipeline's video PSNR
// against the BF16 pipeline. The backend is wrapped so that the DiT takes the
// INT8 attention on any host (the CPU backend declines it where AMX-BF16
// runs: slower there, see bench/RESULTS.md).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/mg2_quality.h"
#include "models/pipelines/matrix_game.h"
#include "runtime/cpu/onednn_info.h"
#include "runtime/op_list.h"
#include "runtime/weights/weight_store.h"

namespace flick {
namespace {

const std::string kData = std::string(FLICK_TEST_DATA) + "/mg2";

// Every op forwarded to `inner`.
class Forwarding : public Backend {
 public:
  explicit Forwarding(Backend& inner) : inner_(inner) {}
  const char* name() const override { return inner_.name(); }
#define FLICK_TEST_FORWARD(ret, name, params, args) \
  ret name params override { return inner_.name args; }
  FLICK_OP_LIST(FLICK_TEST_FORWARD)
#undef FLICK_TEST_FORWARD

 protected:
  Backend& inner_;
};

double cosine(const Tensor& a, const Tensor& b) {
  double ab = 0, aa = 0, bb = 0;
  const int64_t n = a.numel();
  for (int64_t i = 0; i < n; ++i) {  // both contiguous, same shape
    const double x = load_as_f32(a.dtype, a.data, i), y = load_as_f32(b.dtype, b.data, i);
    ab += x * y;
    aa += x * x;
    bb += y * y;
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
}

// attention_int8 allowed (int8 = true) or declined; every attention_int8 call
// also runs BF16 attention on its inputs and records the cosine of the two.
class Int8AttentionObserver final : public Forwarding {
 public:
  Int8AttentionObserver(Backend& inner, bool int8) : Forwarding(inner), int8_(int8) {}
  bool attention_int8_pays_off() override { return int8_; }
  void attention_int8(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                      const AttentionParams& p) override {
    OwnedTensor exact(out.dtype, out.shape);
    inner_.attention(q, k, v, exact, p);
    inner_.attention_int8(q, k, v, out, p);
    OwnedTensor got(out.dtype, out.shape);  // out may be strided: copy to compare
    inner_.copy(out, got);
    cosines.push_back(cosine(got, exact));
  }
  std::vector<double> cosines;  // in call order

 private:
  bool int8_;
};

std::unique_ptr<Backend> cpu_backend() { return make_cpu_backend(); }

// Per block (calls cycle over the DiT's blocks): the worst cosine.
std::vector<double> worst_per_block(const std::vector<double>& cosines, size_t blocks) {
  std::vector<double> worst(blocks, 1.0);
  for (size_t i = 0; i < cosines.size(); ++i)
    worst[i % blocks] = std::min(worst[i % blocks], cosines[i]);
  return worst;
}

class WanInt8Attention : public ::testing::TestWithParam<Mg2ModeSpec> {
 protected:
  void SetUp() override {
    if (!cpu::cpu_supports(Precision::INT8)) GTEST_SKIP() << "INT8 needs AVX-512 VNNI";
  }
};

// Per-block attention cosine, INT8 against BF16 attention on the same inputs
// (the DiT's own q and KV window at INT8 precision). Observed on the tiny
// golden DiT (2 heads of 32, windows of up to 6 latent frames), worst block
// of each mode: 0.999984 / 0.999986 / 0.999990 (universal / gta_drive /
// templerun). 0.9999 keeps a 6x margin in 1 - cosine; the op tests show
// what breaks it (without K smoothing the error grows 4x on offset keys).
// The flows then stay within the INT8 DiT's threshold of
// tests/models/test_wan_quant.cpp (0.999 per call): observed 0.99977 /
// 0.99988 / 0.99989, as with BF16 attention (the same worst-block cosines on
// the VNNI and the AMX-INT8 kernels).
TEST_P(WanInt8Attention, PerBlockAttentionCosineAndFlows) {
  const Mg2ModeSpec& mode = GetParam();
  const std::string ckpt = bench::mg2_golden_checkpoint(kData, mode);
  Expected<WeightStore> store = WeightStore::open({ckpt});
  ASSERT_TRUE(store.ok()) << store.status().message();
  std::unique_ptr<Backend> cpu = cpu_backend();
  auto bf16 = bench::mg2_dit_flows(kData, mode, store->view("model."), Precision::BF16, *cpu);
  ASSERT_TRUE(bf16.ok()) << bf16.status().message();
  Int8AttentionObserver obs(*cpu, true);
  auto int8 = bench::mg2_dit_flows(kData, mode, store->view("model."), Precision::INT8, obs);
  ASSERT_TRUE(int8.ok()) << int8.status().message();
  ASSERT_FALSE(int8->empty());
  // One self-attention per block per DiT call, all on attention_int8.
  ASSERT_EQ(obs.cosines.size() % int8->size(), 0u);
  const size_t blocks = obs.cosines.size() / int8->size();
  ASSERT_GT(blocks, 0u);
  const std::vector<double> worst = worst_per_block(obs.cosines, blocks);
  std::printf("%s: attention cosine INT8 vs BF16, worst per block:", mode.name.data());
  for (size_t b = 0; b < blocks; ++b) {
    std::printf(" %.6f", worst[b]);
    EXPECT_GE(worst[b], 0.9999) << "block " << b;
  }
  const bench::FlowAgreement a = bench::compare_flows(*bf16, *int8);
  std::printf("; flows vs BF16 DiT: worst call cosine %.6f, rel L2 %.4f\n", a.min_cosine,
              a.max_rel_l2);
  EXPECT_GE(a.min_cosine, 0.999);
}

// Video PSNR of the whole INT8 pipeline with INT8 self-attention against the
// BF16 pipeline. Observed (universal / gta_drive / templerun) with the VNNI
// kernel: 30.81 / 32.70 / 35.58 dB; with the AMX-INT8 kernel (what an AMX
// host runs here): 31.11 / 32.36 / 35.16 dB; against 30.78 / 32.33 /
// 35.01 dB for the INT8 pipeline with
// BF16 attention - the attention's quantization is lost in the linears'
// (the differences are noise of the tiny random VAE, which turns a 1 % flow
// change into visible pixels: see test_wan_quant.cpp). Asserted: the INT8
// target of test_wan_quant.cpp (30 dB), and at most 1 dB below the INT8
// pipeline with BF16 attention. The BF16 pipeline, offered
// attention_int8, never takes it.
TEST_P(WanInt8Attention, VideoPsnrAgainstBf16Pipeline) {
  const Mg2ModeSpec& mode = GetParam();
  const std::string weights = kData + "/weights";
  std::unique_ptr<Backend> cpu = cpu_backend();
  Int8AttentionObserver bf16_obs(*cpu, true);
  auto bf16 = bench::mg2_pipeline_video(kData, weights, mode, Precision::BF16, bf16_obs);
  ASSERT_TRUE(bf16.ok()) << bf16.status().message();
  EXPECT_TRUE(bf16_obs.cosines.empty());
  Int8AttentionObserver with(*cpu, true), without(*cpu, false);
  auto int8_attn = bench::mg2_pipeline_video(kData, weights, mode, Precision::INT8, with);
  ASSERT_TRUE(int8_attn.ok()) << int8_attn.status().message();
  EXPECT_FALSE(with.cosines.empty());
  auto bf16_attn = bench::mg2_pipeline_video(kData, weights, mode, Precision::INT8, without);
  ASSERT_TRUE(bf16_attn.ok()) << bf16_attn.status().message();
  EXPECT_TRUE(without.cosines.empty());
  const double psnr = bench::psnr_u8(*bf16, *int8_attn);
  std::printf(
      "%s: video PSNR vs BF16 pipeline: INT8 + INT8 attention %.2f dB, INT8 + BF16 "
      "attention %.2f dB\n",
      mode.name.data(), psnr, bench::psnr_u8(*bf16, *bf16_attn));
  EXPECT_GE(psnr, 30.0);
  EXPECT_GE(psnr, bench::psnr_u8(*bf16, *bf16_attn) - 1.0);
}

INSTANTIATE_TEST_SUITE_P(Modes, WanInt8Attention, ::testing::ValuesIn(mg2_modes()),
                         [](const ::testing::TestParamInfo<Mg2ModeSpec>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace flick
