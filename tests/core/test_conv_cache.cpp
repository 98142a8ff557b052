// CPU convolutions through the plan cache in packed form
// (runtime/cpu/conv_cache.h): a warm pack adopts the stored oneDNN layout
// without calling the packer, and the adopted convolution computes the same
// bits as the freshly packed one; every damaged, doctored or foreign entry
// is rebuilt with a warning, never trusted, never a crash.
//
// The oracle is the ordinary cpu::pack_conv of the same weights (itself
// checked against runtime/ref by tests/ops): the cache must not change one
// bit.
#include <gtest/gtest.h>
#include <oneapi/dnnl/dnnl.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <vector>

#include "runtime/cpu/conv_cache.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/onednn_info.h"
#include "runtime/cpu/ops.h"
#include "runtime/dtype.h"
#include "runtime/plan_cache.h"
#include "tests/core/plan_entry_doctor.h"

namespace flick {
namespace {

namespace fs = std::filesystem;

struct Case {
  Precision precision;
  int spatial_dims;
  bool bias;
  int64_t stride;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << precision_name(c.precision) << " " << c.spatial_dims << "-d" << (c.bias ? " bias" : "")
      << " stride " << c.stride;
}

constexpr int64_t kOut = 24, kIn = 20, kSize = 9;  // channels not multiples of 16

class ConvCacheTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!cpu::cpu_supports(GetParam().precision)) GTEST_SKIP() << "precision not on this CPU";
    char tmpl[] = "/tmp/flick-conv-cache-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    const bool three = GetParam().spatial_dims == 3;
    w_ = OwnedTensor(DType::F32, three ? Shape{kOut, kIn, 3, 3, 3} : Shape{kOut, kIn, 3, 3});
    for (int64_t i = 0; i < w_.t.numel(); ++i)
      w_.t.ptr<float>()[i] = static_cast<float>((i * 7919) % 201 - 100) / 256.f;
    b_ = OwnedTensor(DType::F32, Shape{kOut});
    for (int64_t i = 0; i < kOut; ++i) b_.t.ptr<float>()[i] = 0.25f * static_cast<float>(i % 9 - 4);
    x_ = OwnedTensor(DType::BF16,
                     three ? Shape{1, kIn, 3, kSize, kSize} : Shape{1, kIn, kSize, kSize});
    for (int64_t i = 0; i < x_.t.numel(); ++i)
      x_.t.ptr<uint16_t>()[i] = f32_to_bf16(static_cast<float>((i * 31) % 97 - 48) / 32.f);
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }

  ConvDesc desc() const {
    ConvDesc d;
    d.w = w_.t;
    if (GetParam().bias) d.bias = b_.t;
    d.spatial_dims = GetParam().spatial_dims;
    const int sd = d.spatial_dims;
    for (int i = 0; i < sd; ++i) {
      d.padding[static_cast<size_t>(i)] = 1;
      // A 3-d layer strides in space only, as the VAE's downsampling does.
      d.stride[static_cast<size_t>(i)] = (sd == 3 && i == 0) ? 1 : GetParam().stride;
    }
    d.precision = GetParam().precision;
    return d;
  }
  // What pack_conv_cached is told: the layer's shapes and geometry, no data.
  ConvDesc shapes_only() const {
    ConvDesc d = desc();
    d.w = Tensor{};
    d.w.dtype = DType::F32;
    d.w.shape = w_.t.shape;
    if (GetParam().bias) {
      d.bias = Tensor{};
      d.bias.dtype = DType::F32;
      d.bias.shape = Shape{kOut};
    }
    return d;
  }
  // pack_conv_cached of the layer under a scope on dir(); counts packs.
  std::unique_ptr<PackedConv> cached(int* packs) {
    PlanCache cache(dir());
    PlanCacheScope scope(&cache, "test-platform");
    scope.set_source("cc", "size=1;mtime_ns=2");
    Expected<std::unique_ptr<PackedConv>> c = cpu::pack_conv_cached(
        "decoder.conv1", shapes_only(), [&]() -> Expected<std::unique_ptr<PackedConv>> {
          ++*packs;
          return cpu::pack_conv(desc());
        });
    EXPECT_TRUE(c.ok()) << c.status().message();
    return c.ok() ? std::move(*c) : nullptr;
  }
  std::vector<uint8_t> run(const PackedConv& c) const {
    const ConvDesc d = desc();
    Shape ys = x_.t.shape;
    ys[1] = kOut;
    for (int i = 0; i < d.spatial_dims; ++i)
      ys[2 + i] = (x_.t.dim(2 + i) + 2 - 3) / d.stride[static_cast<size_t>(i)] + 1;
    OwnedTensor y(DType::F32, ys);
    cpu::conv(x_.t, c, y.t, Activation::Silu);
    const auto* p = static_cast<const uint8_t*>(y.t.data);
    return std::vector<uint8_t>(p, p + y.t.nbytes());
  }
  std::string dir() const { return root_ + "/plans"; }
  std::string file() const { return dir() + "/cc.decoder.conv1.plan"; }

  plan_test::StoredEntry stored() const { return plan_test::read_entry(dir(), "cc.decoder.conv1"); }
  void restore(const plan_test::StoredEntry& s) const {
    plan_test::write_entry(dir(), "cc.decoder.conv1", s);
  }
  void expect_rebuilt(const std::string& why) {
    plan_test::expect_rebuilt(
        why, file(), run(*cpu::pack_conv(desc())), [&](int* packs) { return cached(packs); },
        [&](const PackedConv& p) { return run(p); });
  }

  std::string root_;
  OwnedTensor w_, b_, x_;
};

TEST_P(ConvCacheTest, WarmAdoptsTheEntryBitForBit) {
  const std::unique_ptr<PackedConv> fresh = cpu::pack_conv(desc());
  const std::vector<uint8_t> want = run(*fresh);
  int packs = 0;
  const std::unique_ptr<PackedConv> cold = cached(&packs);
  ASSERT_NE(cold, nullptr);
  EXPECT_EQ(packs, 1);
  EXPECT_EQ(run(*cold), want);
  EXPECT_TRUE(fs::exists(file()));
  packs = 0;
  const std::unique_ptr<PackedConv> warm = cached(&packs);
  ASSERT_NE(warm, nullptr);
  EXPECT_EQ(packs, 0);  // adopted: the packer (and the checkpoint) not touched
  EXPECT_EQ(warm->desc().precision, GetParam().precision);
  EXPECT_EQ(warm->desc().w.shape, w_.t.shape);
  EXPECT_EQ(cpu::conv_impl(*warm), cpu::conv_impl(*fresh));
  EXPECT_EQ(run(*warm), want);
  // A second call shape (another frame size) on the adopted weights.
  x_ = OwnedTensor(x_.t.dtype, [&] {
    Shape s = x_.t.shape;
    s[x_.t.ndim() - 1] = 2 * kSize;
    return s;
  }());
  for (int64_t i = 0; i < x_.t.numel(); ++i)
    x_.t.ptr<uint16_t>()[i] = f32_to_bf16(static_cast<float>((i * 17) % 89 - 44) / 32.f);
  EXPECT_EQ(run(*warm), run(*fresh));
  // The adopted conv serialises to the same bytes as the fresh one.
  EXPECT_EQ(plan_test::bytes_of(cpu::packed_conv_tensors(*warm)),
            plan_test::bytes_of(cpu::packed_conv_tensors(*fresh)));
}

TEST_P(ConvCacheTest, CorruptOrTruncatedEntryIsRebuilt) {
  int packs = 0;
  ASSERT_NE(cached(&packs), nullptr);
  const auto size = fs::file_size(file());
  plan_test::flip_bit(file(), static_cast<std::streamoff>(size - 100));  // the payload checksum
  expect_rebuilt("flipped bit");
  fs::resize_file(file(), size / 2);
  expect_rebuilt("truncated");
}

TEST_P(ConvCacheTest, DoctoredEntryWithValidChecksumsIsRebuilt) {
  int packs = 0;
  ASSERT_NE(cached(&packs), nullptr);
  const plan_test::StoredEntry good = stored();
  ASSERT_GE(good.tensors.size(), 3u);
  auto doctored = [&](const char* why, auto edit) {
    plan_test::StoredEntry s = stored();
    edit(s);
    restore(s);
    expect_rebuilt(why);
    restore(good);
  };
  doctored("other layout",
           [](plan_test::StoredEntry& s) { s.tensors[0].t.ptr<int32_t>()[0] ^= 3; });
  doctored("other channels",
           [](plan_test::StoredEntry& s) { s.tensors[0].t.ptr<int32_t>()[3] += 1; });
  doctored("other precision",
           [](plan_test::StoredEntry& s) { s.tensors[0].t.ptr<int32_t>()[2] ^= 1; });
  doctored("bias flag flipped",
           [](plan_test::StoredEntry& s) { s.tensors[0].t.ptr<int32_t>()[6] ^= 1; });
  doctored("packed bytes cut short",
           [](plan_test::StoredEntry& s) { plan_test::shorten(s.tensors[1], 64); });
  doctored("a tensor missing", [](plan_test::StoredEntry& s) { s.tensors.pop_back(); });
  doctored("no meta", [](plan_test::StoredEntry& s) { s.tensors.erase(s.tensors.begin()); });
  doctored("other oneDNN layout", [](plan_test::StoredEntry& s) {
    dnnl_memory_desc_t md;
    ASSERT_EQ(s.tensors[2].t.nbytes(), static_cast<int64_t>(sizeof(md)));
    std::memcpy(&md, s.tensors[2].t.data, sizeof(md));
    md.format_desc.blocking.strides[1] += 64;  // another layout
    std::memcpy(s.tensors[2].t.data, &md, sizeof(md));
  });
  if (GetParam().precision == Precision::INT8) {
    doctored("s8 weights of another shape", [](plan_test::StoredEntry& s) {
      OwnedTensor& p = s.tensors[3];
      OwnedTensor other(DType::I8, Shape{p.t.dim(0) - 1, p.t.dim(1)});
      std::memcpy(other.t.data, p.t.data, other.t.nbytes());
      p = std::move(other);
    });
  }
}

// The key names the geometry: a layer of another stride is another entry,
// never the first one's bytes.
TEST_P(ConvCacheTest, GeometryIsInTheKey) {
  ConvDesc a = shapes_only(), b = shapes_only();
  b.stride[1] = a.stride[1] == 1 ? 2 : 1;
  EXPECT_NE(cpu::packed_conv_kind(a), cpu::packed_conv_kind(b));
  b = shapes_only();
  b.padding[0] += 1;
  EXPECT_NE(cpu::packed_conv_kind(a), cpu::packed_conv_kind(b));
  b = shapes_only();
  b.bias = a.bias.ndim() > 0 ? Tensor{} : Tensor::view(nullptr, DType::F32, Shape{kOut});
  EXPECT_NE(cpu::packed_conv_kind(a), cpu::packed_conv_kind(b));
}

// An F32 1x1 conv runs channels-last calls on flick's FMA GEMM, which packs
// from plain weights: a warm load reorders the entry's oneDNN weights back
// to plain and takes the same route, bit for bit.
TEST(ConvCache, F32OneByOneAdoptedOntoTheGemm) {
  char tmpl[] = "/tmp/flick-conv-cache-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  OwnedTensor w(DType::F32, Shape{kOut, 32, 1, 1}), b(DType::F32, Shape{kOut});
  for (int64_t i = 0; i < w.t.numel(); ++i)
    w.t.ptr<float>()[i] = static_cast<float>((i * 7919) % 201 - 100) / 256.f;
  for (int64_t i = 0; i < kOut; ++i) b.t.ptr<float>()[i] = 0.25f * static_cast<float>(i % 9 - 4);
  ConvDesc d;
  d.w = w.t;
  d.bias = b.t;
  d.precision = Precision::F32;
  ConvDesc shapes = d;
  shapes.w = Tensor{};
  shapes.w.dtype = DType::F32;
  shapes.w.shape = w.t.shape;
  shapes.bias = Tensor{};
  shapes.bias.dtype = DType::F32;
  shapes.bias.shape = Shape{kOut};
  // Channels-last x [1, 32, 5, 7] and y [1, kOut, 5, 7] over [1, 5, 7, C] buffers.
  OwnedTensor xb(DType::F32, Shape{1, 5, 7, 32});
  for (int64_t i = 0; i < xb.t.numel(); ++i)
    xb.t.ptr<float>()[i] = static_cast<float>((i * 31) % 97 - 48) / 32.f;
  const Tensor x = xb.t.permute({0, 3, 1, 2});
  auto run = [&](const PackedConv& c) {
    OwnedTensor yb(DType::F32, Shape{1, 5, 7, kOut});
    Tensor y = yb.t.permute({0, 3, 1, 2});
    cpu::conv(x, c, y, Activation::Relu);
    const auto* p = static_cast<const uint8_t*>(yb.t.data);
    return std::vector<uint8_t>(p, p + yb.t.nbytes());
  };
  auto cached = [&](int* packs) {
    PlanCache cache(root + "/plans");
    PlanCacheScope scope(&cache, "test-platform");
    scope.set_source("cc", "size=1;mtime_ns=2");
    Expected<std::unique_ptr<PackedConv>> c = cpu::pack_conv_cached(
        "neck.conv_1x1", shapes, [&]() -> Expected<std::unique_ptr<PackedConv>> {
          ++*packs;
          return cpu::pack_conv(d);
        });
    EXPECT_TRUE(c.ok()) << c.status().message();
    return c.ok() ? std::move(*c) : nullptr;
  };
  const std::unique_ptr<PackedConv> fresh = cpu::pack_conv(d);
  const std::vector<uint8_t> want = run(*fresh);
  int packs = 0;
  const std::unique_ptr<PackedConv> cold = cached(&packs);
  ASSERT_NE(cold, nullptr);
  EXPECT_EQ(run(*cold), want);
  packs = 0;
  const std::unique_ptr<PackedConv> warm = cached(&packs);
  ASSERT_NE(warm, nullptr);
  EXPECT_EQ(packs, 0);
  EXPECT_EQ(run(*warm), want);
  EXPECT_EQ(cpu::conv_impl(*warm), cpu::conv_impl(*fresh));
  if (cpu::linear_uses_avx512_f32()) {
    EXPECT_EQ(cpu::conv_impl(*warm), "flick:avx512_f32 (1x1 as GEMM)");
  }
  fs::remove_all(root);
}

INSTANTIATE_TEST_SUITE_P(
    Layers, ConvCacheTest,
    ::testing::Values(Case{Precision::F32, 2, true, 1}, Case{Precision::BF16, 3, true, 1},
                      Case{Precision::BF16, 2, false, 2}, Case{Precision::FP8, 2, true, 1},
                      Case{Precision::INT8, 3, true, 1}, Case{Precision::INT8, 2, false, 2}),
    [](const auto& info) {
      return std::string(precision_name(info.param.precision)) + "_" +
             std::to_string(info.param.spatial_dims) + "d" + (info.param.bias ? "_bias" : "") +
             "_stride" + std::to_string(info.param.stride);
    });

}  // namespace
}  // namespace flick
