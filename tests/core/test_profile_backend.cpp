// The op profiler (runtime/profile_backend.h): ops through the decorator give
// the bytes the undecorated CPU backend gives, and every call is counted under
// its row with its FLOPs. No timing is asserted beyond being non-negative.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>

#include "runtime/dtype.h"
#include "runtime/profile_backend.h"

namespace flick {
namespace {

OwnedTensor filled(DType dt, Shape shape, float phase) {
  OwnedTensor t(DType::F32, shape);
  float* p = t.t.ptr<float>();
  for (int64_t i = 0; i < t.t.numel(); ++i) p[i] = std::sin(0.37f * static_cast<float>(i) + phase);
  if (dt == DType::F32) return t;
  OwnedTensor o(dt, shape);
  convert(DType::F32, t.t.data, dt, o.t.data, t.t.numel());
  return o;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape == b.shape && a.dtype == b.dtype &&
         std::memcmp(a.data, b.data, static_cast<size_t>(a.numel()) * dtype_size(a.dtype)) == 0;
}

// A few ops of a transformer block (linear, norm, attention, residual) on
// `be`; returns their outputs.
struct Outputs {
  OwnedTensor y, h, attn, x;
};
Outputs run_block(Backend& be) {
  constexpr int64_t m = 24, k = 64, n = 96, heads = 2, d = 16;
  Outputs o;
  const OwnedTensor x = filled(DType::BF16, {m, k}, 0.1f);
  const OwnedTensor w = filled(DType::BF16, {n, k}, 0.7f);
  const OwnedTensor bias = filled(DType::F32, {n}, 1.3f);
  std::unique_ptr<PackedLinear> lin = be.pack_linear({w.t, Tensor{}, bias.t, Precision::BF16});
  o.y = OwnedTensor(DType::BF16, {m, n});
  be.linear(x.t, *lin, o.y.t, Activation::None);
  be.linear(x.t, *lin, o.y.t, Activation::GeluTanh);  // a second call: counts add
  o.h = OwnedTensor(DType::BF16, {m, n});
  be.layer_norm(o.y.t, Tensor{}, Tensor{}, 1e-6f, o.h.t);
  const OwnedTensor q = filled(DType::BF16, {1, m, heads, d}, 0.3f);
  const OwnedTensor kk = filled(DType::BF16, {1, m, heads, d}, 0.5f);
  const OwnedTensor v = filled(DType::BF16, {1, m, heads, d}, 0.9f);
  o.attn = OwnedTensor(DType::BF16, {1, m, heads, d});
  be.attention(q.t, kk.t, v.t, o.attn.t, AttentionParams{});
  o.x = filled(DType::BF16, {m, heads * d}, 2.9f);
  be.add(o.x.t, o.attn.t.reshape({m, heads * d}), o.x.t);
  return o;
}

TEST(ProfileBackend, SameResultsAsTheWrappedBackendAndCountsEveryCall) {
  std::unique_ptr<Backend> plain = make_cpu_backend();
  ProfileBackend prof(make_cpu_backend());
  EXPECT_STREQ(prof.name(), "cpu");  // code that checks for the CPU backend sees through it

  const Outputs want = run_block(*plain);
  const Outputs got = run_block(prof);
  EXPECT_TRUE(same_bytes(got.y.t, want.y.t));
  EXPECT_TRUE(same_bytes(got.h.t, want.h.t));
  EXPECT_TRUE(same_bytes(got.attn.t, want.attn.t));
  EXPECT_TRUE(same_bytes(got.x.t, want.x.t));

  const ProfileStats s = prof.stats();
  auto calls = [&](std::string_view op) {
    auto it = s.entries.find(op);
    return it == s.entries.end() ? int64_t{0} : it->second.calls;
  };
  EXPECT_EQ(calls("pack_linear"), 1);
  EXPECT_EQ(calls("linear.bf16 64->96"), 2);
  EXPECT_EQ(calls("layer_norm"), 1);
  EXPECT_EQ(calls("attention 1x24x24"), 1);
  EXPECT_EQ(calls("add"), 1);
  EXPECT_EQ(s.entries.size(), 5u);
  // FLOPs: 2 M N K per linear call; 4 Lq Lk H D for attention.
  EXPECT_DOUBLE_EQ(s.entries.find("linear.bf16 64->96")->second.flops, 2 * (2.0 * 24 * 96 * 64));
  EXPECT_DOUBLE_EQ(s.entries.find("attention 1x24x24")->second.flops, 4.0 * 24 * 24 * 2 * 16);
  EXPECT_EQ(s.entries.find("add")->second.flops, 0);
  for (const auto& [name, e] : s.entries) EXPECT_GE(e.seconds, 0) << name;

  const std::string table = s.table("test");
  EXPECT_NE(table.find("linear.bf16 64->96"), std::string::npos) << table;
  EXPECT_NE(table.find("(outside ops)"), std::string::npos) << table;

  // A later snapshot minus an earlier one holds only the calls in between.
  OwnedTensor a = filled(DType::F32, {8}, 0.f);
  prof.add(a.t, a.t, a.t);
  const ProfileStats d = prof.stats().minus(s);
  ASSERT_EQ(d.entries.size(), 1u);
  EXPECT_EQ(d.entries.begin()->first, "add");
  EXPECT_EQ(d.entries.begin()->second.calls, 1);

  prof.reset();
  EXPECT_TRUE(prof.stats().entries.empty());
}

TEST(ProfileBackend, SectionsRecordTheirTimeWithoutTheOpsInside) {
  ProfileBackend prof(make_cpu_backend());
  OwnedTensor a = filled(DType::F32, {1024}, 0.f);
  {
    ProfileScope outer(prof, "outer");
    prof.add(a.t, a.t, a.t);
    {
      ProfileScope inner(prof, "inner");
      prof.mul(a.t, a.t, a.t);
    }
  }
  const ProfileStats s = prof.stats();
  ASSERT_EQ(s.entries.size(), 4u);
  EXPECT_EQ(s.entries.find("[outer]")->second.calls, 1);
  EXPECT_EQ(s.entries.find("[inner]")->second.calls, 1);
  // Exclusive times: the parts add up to at most the wall time.
  double sum = 0;
  for (const auto& [name, e] : s.entries) sum += e.seconds;
  EXPECT_LE(sum, std::chrono::duration<double>(s.until - s.since).count());

  // Over a backend that is not a profiler a scope records nothing and runs.
  std::unique_ptr<Backend> plain = make_cpu_backend();
  EXPECT_EQ(as_profiler(*plain), nullptr);
  ProfileScope none(*plain, "none");
}

TEST(ProfileBackend, WrapsOnlyWhenFlickProfileIsSet) {
  const char* old = getenv("FLICK_PROFILE");
  const std::string saved = old ? old : "";
  unsetenv("FLICK_PROFILE");
  std::unique_ptr<Backend> off = profile_if_enabled(make_cpu_backend());
  EXPECT_EQ(as_profiler(*off), nullptr);
  setenv("FLICK_PROFILE", "0", 1);
  EXPECT_FALSE(profiling_enabled());
  setenv("FLICK_PROFILE", "1", 1);
  std::unique_ptr<Backend> on = profile_if_enabled(make_cpu_backend());
  EXPECT_NE(as_profiler(*on), nullptr);
  if (old) {
    setenv("FLICK_PROFILE", saved.c_str(), 1);
  } else {
    unsetenv("FLICK_PROFILE");
  }
}

}  // namespace
}  // namespace flick
