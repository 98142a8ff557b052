// runtime/tensor.h views and runtime/arena.h. The oracle for every view is
// the element's value: a [2, 3, 4] tensor holds value(i, j, k) = 100 i + 10 j + k,
// so a view is right exactly when at() finds the value its indices name.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <tuple>

#include "runtime/arena.h"
#include "runtime/tensor.h"

namespace flick {
namespace {

float value(int64_t i, int64_t j, int64_t k) { return static_cast<float>(100 * i + 10 * j + k); }

OwnedTensor make_234() {
  OwnedTensor t(DType::F32, Shape{2, 3, 4});
  float* p = t.t.ptr<float>();
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) p[(i * 3 + j) * 4 + k] = value(i, j, k);
  return t;
}

float at3(const Tensor& t, int64_t a, int64_t b, int64_t c) {
  return *static_cast<const float*>(t.at({a, b, c}));
}

TEST(Shape, BasicsAndNegativeIndices) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.ndim, 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s[-1], 4);
  EXPECT_EQ(s[0], 2);
  EXPECT_EQ(s.str(), "[2, 3, 4]");
  EXPECT_EQ(Shape::from_vector({2, 3, 4}), s);
  EXPECT_NE(Shape({2, 3}), s);
  EXPECT_EQ(s.to_vector(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(Shape{}.numel(), 1);  // a scalar holds one element
  auto st = contiguous_strides(s);
  EXPECT_EQ(st[0], 12);
  EXPECT_EQ(st[1], 4);
  EXPECT_EQ(st[2], 1);
}

TEST(Tensor, ContiguousViewAndAt) {
  OwnedTensor o = make_234();
  const Tensor& t = o;
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 64, 0u);  // HostBuffer alignment
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(at3(t, i, j, k), value(i, j, k));
  EXPECT_EQ(t.str(), "F32[2, 3, 4]");
}

TEST(Tensor, SliceKeepsStridesAndOffsetsData) {
  OwnedTensor o = make_234();
  Tensor s = o.t.slice(1, 1, 2);  // [2, 2, 4], rows j = 1, 2
  EXPECT_EQ(s.shape, (Shape{2, 2, 4}));
  EXPECT_FALSE(s.is_contiguous());
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(at3(s, i, j, k), value(i, j + 1, k));
  Tensor last = o.t.slice(-1, 3, 1);  // negative dim
  EXPECT_EQ(last.shape, (Shape{2, 3, 1}));
  EXPECT_EQ(at3(last, 1, 2, 0), value(1, 2, 3));
  Tensor outer = o.t.slice(0, 1, 1);  // a slice of the outer dim stays contiguous
  EXPECT_TRUE(outer.is_contiguous());
  EXPECT_EQ(at3(outer, 0, 0, 0), value(1, 0, 0));
  Tensor empty = o.t.slice(2, 4, 0);
  EXPECT_EQ(empty.numel(), 0);
}

TEST(Tensor, PermuteReordersDims) {
  OwnedTensor o = make_234();
  Tensor p = o.t.permute({2, 0, 1});  // [4, 2, 3]
  EXPECT_EQ(p.shape, (Shape{4, 2, 3}));
  EXPECT_FALSE(p.is_contiguous());
  for (int64_t k = 0; k < 4; ++k)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(at3(p, k, i, j), value(i, j, k));
  // Permuting back restores the contiguous view.
  Tensor back = p.permute({1, 2, 0});
  EXPECT_TRUE(back.is_contiguous());
  EXPECT_EQ(back.shape, o.t.shape);
}

TEST(Tensor, SelectDropsADim) {
  OwnedTensor o = make_234();
  Tensor s = o.t.select(1, 2);  // [2, 4]
  EXPECT_EQ(s.shape, (Shape{2, 4}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t k = 0; k < 4; ++k)
      EXPECT_EQ(*static_cast<const float*>(s.at({i, k})), value(i, 2, k));
  Tensor last = o.t.select(-1, 1);  // [2, 3]
  EXPECT_EQ(last.shape, (Shape{2, 3}));
  EXPECT_EQ(*static_cast<const float*>(last.at({1, 2})), value(1, 2, 1));
  // Select on a permuted view composes.
  Tensor ps = o.t.permute({2, 0, 1}).select(0, 3);  // [2, 3] at k = 3
  EXPECT_EQ(*static_cast<const float*>(ps.at({1, 1})), value(1, 1, 3));
}

TEST(Tensor, ReshapeOfContiguousViews) {
  OwnedTensor o = make_234();
  Tensor r = o.t.reshape(Shape{6, 4});
  EXPECT_TRUE(r.is_contiguous());
  EXPECT_EQ(*static_cast<const float*>(r.at({4, 3})), value(1, 1, 3));  // row 4 = (i 1, j 1)
  Tensor flat = o.t.reshape(Shape{24});
  for (int64_t n = 0; n < 24; ++n)
    EXPECT_EQ(*static_cast<const float*>(flat.at({n})), value(n / 12, n / 4 % 3, n % 4));
  // A slice along the outer dim is still contiguous and can be reshaped.
  Tensor row = o.t.select(0, 1).reshape(Shape{12});
  EXPECT_EQ(*static_cast<const float*>(row.at({5})), value(1, 1, 1));
}

TEST(Tensor, ByteAddressingForEveryDType) {
  for (DType t : kAllDTypes) {
    OwnedTensor o(t, Shape{3, 5});
    Tensor v = o.t.permute({1, 0});
    const char* base = static_cast<const char*>(o.t.data);
    EXPECT_EQ(static_cast<const char*>(v.at({4, 2})) - base,
              static_cast<std::ptrdiff_t>((2 * 5 + 4) * dtype_size(t)))
        << dtype_name(t);
    EXPECT_EQ(o.t.nbytes(), 15 * dtype_size(t));
  }
}

TEST(Tensor, ViewsDieOnProgrammerErrors) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // other tests start OpenMP threads
  OwnedTensor o = make_234();
  EXPECT_DEATH((void)o.t.slice(1, 2, 2), "slice out of range");
  EXPECT_DEATH((void)o.t.permute({0, 1}).reshape(Shape{6, 4}), "permute rank mismatch");
  EXPECT_DEATH((void)o.t.reshape(Shape{5, 5}), "reshape changes numel");
  EXPECT_DEATH((void)o.t.permute({2, 0, 1}).reshape(Shape{24}), "non-contiguous");
  EXPECT_DEATH((void)o.t.at({0, 0}), "index rank mismatch");
}

TEST(HostBuffer, ZeroedAlignedAndMovable) {
  HostBuffer a(1000);
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
  const auto* p = static_cast<const uint8_t*>(a.data());
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(p[i], 0) << i;
  void* raw = a.data();
  HostBuffer b(std::move(a));
  EXPECT_EQ(b.data(), raw);
  EXPECT_EQ(b.size(), 1000u);
  EXPECT_EQ(a.data(), nullptr);
  HostBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), raw);
  EXPECT_EQ(HostBuffer(0).data(), nullptr);
}

TEST(Arena, CarvesAlignedDisjointBuffers) {
  Arena arena;
  auto a = arena.request("a", DType::F32, Shape{3, 5});   // 60 bytes -> 64
  auto b = arena.request("b", DType::BF16, Shape{7});     // 14 bytes -> 64
  auto c = arena.request("c", DType::I8, Shape{2, 64});   // 128 bytes
  auto d = arena.request("d", DType::F8_E4M3, Shape{0});  // empty
  EXPECT_FALSE(arena.finalized());
  arena.finalize();
  EXPECT_TRUE(arena.finalized());
  EXPECT_EQ(arena.size(), 4);
  EXPECT_EQ(arena.bytes(), 64u + 64u + 128u);
  EXPECT_EQ(arena.name(b), "b");
  Tensor ta = arena.get(a), tb = arena.get(b), tc = arena.get(c), td = arena.get(d);
  EXPECT_EQ(ta.shape, (Shape{3, 5}));
  EXPECT_EQ(tb.dtype, DType::BF16);
  EXPECT_EQ(td.numel(), 0);
  // Every buffer is cache-line aligned and no two overlap.
  std::set<std::pair<uintptr_t, uintptr_t>> ranges;
  for (const Tensor& t : {ta, tb, tc}) {
    auto lo = reinterpret_cast<uintptr_t>(t.data);
    EXPECT_EQ(lo % 64, 0u) << t.str();
    EXPECT_TRUE(t.is_contiguous());
    for (const auto& [l, h] : ranges) EXPECT_TRUE(lo + t.nbytes() <= l || lo >= h) << t.str();
    ranges.insert({lo, lo + t.nbytes()});
  }
  // Writes through one buffer do not show in another.
  std::memset(ta.data, 0xFF, ta.nbytes());
  for (int64_t i = 0; i < tb.numel(); ++i)
    EXPECT_EQ(static_cast<const uint16_t*>(tb.data)[i], 0) << i;
}

TEST(Arena, SamePlanComparesNamesDtypesShapesInOrder) {
  auto plan = [](std::initializer_list<std::tuple<const char*, DType, Shape>> bufs) {
    Arena a;
    for (const auto& [n, t, s] : bufs) a.request(n, t, s);
    return a;
  };
  const Arena base = plan({{"x", DType::BF16, {2, 3}}, {"y", DType::F32, {4}}});
  EXPECT_TRUE(base.same_plan(plan({{"x", DType::BF16, {2, 3}}, {"y", DType::F32, {4}}})));
  EXPECT_FALSE(base.same_plan(plan({{"y", DType::F32, {4}}, {"x", DType::BF16, {2, 3}}})));
  EXPECT_FALSE(base.same_plan(plan({{"x", DType::F32, {2, 3}}, {"y", DType::F32, {4}}})));
  EXPECT_FALSE(base.same_plan(plan({{"x", DType::BF16, {3, 2}}, {"y", DType::F32, {4}}})));
  EXPECT_FALSE(base.same_plan(plan({{"x", DType::BF16, {2, 3}}, {"z", DType::F32, {4}}})));
  EXPECT_FALSE(base.same_plan(plan({{"x", DType::BF16, {2, 3}}})));
}

TEST(Arena, ReleaseFreesTheMemoryAndGetAllocatesItAgain) {
  Arena arena;
  auto a = arena.request("a", DType::F32, Shape{1024});
  auto b = arena.request("b", DType::BF16, Shape{8, 8});
  arena.finalize();
  arena.get(a).ptr<float>()[5] = 3.f;
  EXPECT_EQ(arena.get(a).ptr<float>()[5], 3.f);
  arena.release();
  const Tensor ta = arena.get(a), tb = arena.get(b);  // allocated again, zeroed
  EXPECT_EQ(ta.shape, Shape({1024}));
  EXPECT_EQ(tb.shape, Shape({8, 8}));
  EXPECT_EQ(static_cast<char*>(tb.data) - static_cast<char*>(ta.data), 4096);
  EXPECT_EQ(ta.ptr<float>()[5], 0.f);
  ta.ptr<float>()[5] = 7.f;
  EXPECT_EQ(arena.get(a).ptr<float>()[5], 7.f);  // and stays until the next release
  EXPECT_EQ(arena.bytes(), 4096u + 128u);
}

TEST(Arena, DiesOnMisuse) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Arena arena;
  auto a = arena.request("a", DType::F32, Shape{4});
  EXPECT_DEATH((void)arena.get(a), "before finalize");
  arena.finalize();
  EXPECT_DEATH((void)arena.request("late", DType::F32, Shape{1}), "after finalize: late");
  EXPECT_DEATH((void)arena.get(7), "bad arena buffer id");
  EXPECT_DEATH(arena.finalize(), "finalized twice");
}

}  // namespace
}  // namespace flick
