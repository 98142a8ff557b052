// CPU linears through the plan cache in packed form (runtime/cpu/linear_cache.h):
// a warm pack adopts the stored layout (AMX tiles or oneDNN's blocked
// weights) without calling the packer, and the adopted linear computes the
// same bits as the freshly packed one; every damaged, doctored or foreign
// entry is rebuilt with a warning, never trusted, never a crash.
//
// The oracle is the ordinary cpu::pack_linear of the same weights (itself
// checked against runtime/ref by tests/ops): the cache must not change one
// bit. Which layout a precision gets depends on the CPU and on
// ONEDNN_MAX_CPU_ISA (AVX512_CORE_BF16 reaches the oneDNN path of INT8 / BF16
// on an AMX host; F32 is oneDNN everywhere).
#include <gtest/gtest.h>
#include <oneapi/dnnl/dnnl.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "runtime/cpu/linear_cache.h"
#include "runtime/cpu/onednn_info.h"
#include "runtime/cpu/ops.h"
#include "runtime/dtype.h"
#include "runtime/plan_cache.h"
#include "tests/core/plan_entry_doctor.h"

namespace flick {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kN = 70, kK = 100, kM = 37;  // not multiples of any tile

struct Case {
  Precision precision;
  bool bias;
};

class LinearCacheTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!cpu::cpu_supports(GetParam().precision)) GTEST_SKIP() << "precision not on this CPU";
    char tmpl[] = "/tmp/flick-linear-cache-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    w_ = OwnedTensor(DType::F32, Shape{kN, kK});
    for (int64_t i = 0; i < w_.t.numel(); ++i)
      w_.t.ptr<float>()[i] = static_cast<float>((i * 7919) % 201 - 100) / 64.f;
    b_ = OwnedTensor(DType::F32, Shape{kN});
    for (int64_t i = 0; i < kN; ++i) b_.t.ptr<float>()[i] = 0.25f * static_cast<float>(i % 9 - 4);
    x_ = OwnedTensor(DType::BF16, Shape{kM, kK});
    for (int64_t i = 0; i < x_.t.numel(); ++i)
      x_.t.ptr<uint16_t>()[i] = f32_to_bf16(static_cast<float>((i * 31) % 97 - 48) / 32.f);
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }

  LinearDesc desc() const {
    return {w_.t, Tensor{}, GetParam().bias ? b_.t : Tensor{}, GetParam().precision};
  }
  // pack_linear_cached of the layer under a scope on dir(); counts packs.
  std::unique_ptr<PackedLinear> cached(int* packs) {
    PlanCache cache(dir());
    PlanCacheScope scope(&cache, "test-platform");
    scope.set_source("lc", "size=1;mtime_ns=2");
    Expected<std::unique_ptr<PackedLinear>> l =
        cpu::pack_linear_cached("blocks.0.q", GetParam().precision, kN, kK, GetParam().bias,
                                [&]() -> Expected<std::unique_ptr<PackedLinear>> {
                                  ++*packs;
                                  return cpu::pack_linear(desc());
                                });
    EXPECT_TRUE(l.ok()) << l.status().message();
    return l.ok() ? std::move(*l) : nullptr;
  }
  std::vector<uint8_t> run(const PackedLinear& l) const {
    OwnedTensor y(DType::F32, Shape{kM, kN});
    cpu::linear(x_.t, l, y.t, Activation::Silu);
    const auto* p = static_cast<const uint8_t*>(y.t.data);
    return std::vector<uint8_t>(p, p + y.t.nbytes());
  }
  std::string dir() const { return root_ + "/plans"; }
  std::string file() const { return dir() + "/lc.blocks.0.q.plan"; }

  plan_test::StoredEntry stored() const { return plan_test::read_entry(dir(), "lc.blocks.0.q"); }
  void restore(const plan_test::StoredEntry& s) const {
    plan_test::write_entry(dir(), "lc.blocks.0.q", s);
  }
  void expect_rebuilt(const std::string& why) {
    plan_test::expect_rebuilt(
        why, file(), run(*cpu::pack_linear(desc())), [&](int* packs) { return cached(packs); },
        [&](const PackedLinear& p) { return run(p); });
  }

  std::string root_;
  OwnedTensor w_, b_, x_;
};

TEST_P(LinearCacheTest, WarmAdoptsTheEntryBitForBit) {
  const std::unique_ptr<PackedLinear> fresh = cpu::pack_linear(desc());
  const std::vector<uint8_t> want = run(*fresh);
  int packs = 0;
  const std::unique_ptr<PackedLinear> cold = cached(&packs);
  ASSERT_NE(cold, nullptr);
  EXPECT_EQ(packs, 1);
  EXPECT_EQ(run(*cold), want);
  EXPECT_TRUE(fs::exists(file()));
  packs = 0;
  const std::unique_ptr<PackedLinear> warm = cached(&packs);
  ASSERT_NE(warm, nullptr);
  EXPECT_EQ(packs, 0);  // adopted: the packer (and the checkpoint) not touched
  EXPECT_EQ(warm->precision(), GetParam().precision);
  EXPECT_EQ(warm->out_features(), kN);
  EXPECT_EQ(warm->in_features(), kK);
  EXPECT_EQ(cpu::linear_impl(*warm), cpu::linear_impl(*fresh));
  EXPECT_EQ(run(*warm), want);
  // The adopted linear serialises to the same bytes as the fresh one.
  EXPECT_EQ(plan_test::bytes_of(cpu::packed_linear_tensors(*warm)),
            plan_test::bytes_of(cpu::packed_linear_tensors(*fresh)));
}

TEST_P(LinearCacheTest, CorruptOrTruncatedEntryIsRebuilt) {
  int packs = 0;
  ASSERT_NE(cached(&packs), nullptr);
  const auto size = fs::file_size(file());
  plan_test::flip_bit(file(), static_cast<std::streamoff>(size - 200));  // the payload checksum
  expect_rebuilt("flipped bit");
  fs::resize_file(file(), size / 2);
  expect_rebuilt("truncated");
}

TEST_P(LinearCacheTest, DoctoredEntryWithValidChecksumsIsRebuilt) {
  int packs = 0;
  ASSERT_NE(cached(&packs), nullptr);
  const plan_test::StoredEntry good = stored();
  ASSERT_GE(good.tensors.size(), 2u);
  // Entries whose checksums and key are right but whose tensors are not what
  // this process packs: adopt must refuse each, never read past a buffer.
  auto doctored = [&](const char* why, auto edit) {
    plan_test::StoredEntry s = stored();
    edit(s);
    restore(s);
    expect_rebuilt(why);
    restore(good);
  };
  doctored("other layout",
           [](plan_test::StoredEntry& s) { s.tensors[0].t.ptr<int32_t>()[0] ^= 3; });
  doctored("other shape", [](plan_test::StoredEntry& s) { s.tensors[0].t.ptr<int32_t>()[3] += 1; });
  doctored("packed bytes cut short",
           [](plan_test::StoredEntry& s) { plan_test::shorten(s.tensors[1], 64); });
  doctored("a tensor missing", [](plan_test::StoredEntry& s) { s.tensors.pop_back(); });
  doctored("no meta", [](plan_test::StoredEntry& s) { s.tensors.erase(s.tensors.begin()); });
  if (cpu::linear_impl(*cpu::pack_linear(desc())).rfind("flick:", 0) != 0) {
    // oneDNN: the stored weights md (tensors[2]) is compared with the one
    // this process's primitive wants.
    doctored("other oneDNN layout", [](plan_test::StoredEntry& s) {
      ASSERT_GE(s.tensors.size(), 3u);
      dnnl_memory_desc_t md;
      ASSERT_EQ(s.tensors[2].t.nbytes(), static_cast<int64_t>(sizeof(md)));
      std::memcpy(&md, s.tensors[2].t.data, sizeof(md));
      for (int d = 1; d < 3; ++d) md.format_desc.blocking.strides[d] += 64;  // another layout
      std::memcpy(s.tensors[2].t.data, &md, sizeof(md));
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, LinearCacheTest,
                         ::testing::Values(Case{Precision::INT8, true},
                                           Case{Precision::INT8, false},
                                           Case{Precision::BF16, true}, Case{Precision::FP8, true},
                                           Case{Precision::F32, true}),
                         [](const auto& info) {
                           return std::string(precision_name(info.param.precision)) +
                                  (info.param.bias ? "_bias" : "");
                         });

}  // namespace
}  // namespace flick
