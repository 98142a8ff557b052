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

  // The stored entry's key and tensors (copies), to doctor and store back.
  struct Stored {
    std::string key;
    std::vector<OwnedTensor> tensors;
  };
  Stored stored() const {
    PlanCache cache(dir());
    Expected<std::vector<PlanEntryInfo>> l = cache.list();
    EXPECT_TRUE(l.ok() && l->size() == 1u);
    Stored s;
    if (!l.ok() || l->size() != 1u) return s;
    s.key = (*l)[0].key;
    std::optional<PlanEntry> e = cache.load("lc.blocks.0.q", s.key);
    EXPECT_TRUE(e.has_value());
    if (!e) return s;
    for (const Tensor& t : e->tensors()) {
      OwnedTensor& o = s.tensors.emplace_back(t.dtype, t.shape);
      std::memcpy(o.t.data, t.data, t.nbytes());
    }
    return s;
  }
  void restore(const Stored& s) const {
    std::vector<Tensor> t;
    for (const OwnedTensor& o : s.tensors) t.push_back(o.t);
    ASSERT_TRUE(PlanCache(dir()).store("lc.blocks.0.q", s.key, t).ok());
  }
  // A warm pack of a doctored entry: rebuilt (packed once more) with a
  // warning naming the file, and still the fresh linear's bits.
  void expect_rebuilt(const std::string& why) {
    const std::vector<uint8_t> want = run(*cpu::pack_linear(desc()));
    int packs = 0;
    testing::internal::CaptureStderr();
    std::unique_ptr<PackedLinear> l = cached(&packs);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(packs, 1) << why;
    EXPECT_NE(err.find(file()), std::string::npos) << why << ": " << err;
    EXPECT_NE(err.find("rebuilding"), std::string::npos) << why << ": " << err;
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(run(*l), want) << why;
    // The rebuilt entry is good again: the next pack adopts it.
    packs = 0;
    std::unique_ptr<PackedLinear> again = cached(&packs);
    EXPECT_EQ(packs, 0) << why;
    ASSERT_NE(again, nullptr);
    EXPECT_EQ(run(*again), want) << why;
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
  const std::vector<Tensor> a = cpu::packed_linear_tensors(*fresh);
  std::vector<std::vector<uint8_t>> fresh_bytes;
  for (const Tensor& t : a) {
    const auto* p = static_cast<const uint8_t*>(t.data);
    fresh_bytes.emplace_back(p, p + t.nbytes());
  }
  const std::vector<Tensor> b = cpu::packed_linear_tensors(*warm);
  ASSERT_EQ(b.size(), fresh_bytes.size());
  for (size_t i = 0; i < b.size(); ++i) {
    const auto* p = static_cast<const uint8_t*>(b[i].data);
    EXPECT_EQ(std::vector<uint8_t>(p, p + b[i].nbytes()), fresh_bytes[i]) << "tensor " << i;
  }
}

TEST_P(LinearCacheTest, CorruptOrTruncatedEntryIsRebuilt) {
  int packs = 0;
  ASSERT_NE(cached(&packs), nullptr);
  const auto size = fs::file_size(file());
  {  // one flipped bit in the packed weights: the payload checksum
    std::fstream f(file(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(size - 200));
    char c = 0;
    f.read(&c, 1);
    c ^= 4;
    f.seekp(static_cast<std::streamoff>(size - 200));
    f.write(&c, 1);
  }
  expect_rebuilt("flipped bit");
  fs::resize_file(file(), size / 2);
  expect_rebuilt("truncated");
}

TEST_P(LinearCacheTest, DoctoredEntryWithValidChecksumsIsRebuilt) {
  int packs = 0;
  ASSERT_NE(cached(&packs), nullptr);
  const Stored good = stored();
  ASSERT_GE(good.tensors.size(), 2u);
  // Entries whose checksums and key are right but whose tensors are not what
  // this process packs: adopt must refuse each, never read past a buffer.
  auto doctored = [&](const char* why, auto edit) {
    Stored s = stored();
    edit(s);
    restore(s);
    expect_rebuilt(why);
    restore(good);
  };
  doctored("other layout", [](Stored& s) { s.tensors[0].t.ptr<int32_t>()[0] ^= 3; });
  doctored("other shape", [](Stored& s) { s.tensors[0].t.ptr<int32_t>()[3] += 1; });
  doctored("packed bytes cut short", [](Stored& s) {
    OwnedTensor& p = s.tensors[1];
    OwnedTensor shorter(DType::U8, Shape{p.t.numel() - 64});
    std::memcpy(shorter.t.data, p.t.data, shorter.t.nbytes());
    p = std::move(shorter);
  });
  doctored("a tensor missing", [](Stored& s) { s.tensors.pop_back(); });
  doctored("no meta", [](Stored& s) { s.tensors.erase(s.tensors.begin()); });
  if (cpu::linear_impl(*cpu::pack_linear(desc())).rfind("flick:", 0) != 0) {
    // oneDNN: the stored weights md (tensors[2]) is compared with the one
    // this process's primitive wants.
    doctored("other oneDNN layout", [](Stored& s) {
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
