// What the packed-entry tests of the plan cache share (test_linear_cache.cpp,
// test_conv_cache.cpp): an entry read back as copies to doctor and stored
// back under its key (valid checksums, wrong contents), a flipped bit, and
// the check that a warm pack of a damaged entry rebuilds it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "runtime/plan_cache.h"
#include "runtime/tensor.h"

namespace flick::plan_test {

struct StoredEntry {
  std::string key;
  std::vector<OwnedTensor> tensors;
};

// The entry `name`, the only one in `dir`, as copies of its tensors.
inline StoredEntry read_entry(const std::string& dir, const std::string& name) {
  PlanCache cache(dir);
  Expected<std::vector<PlanEntryInfo>> l = cache.list();
  EXPECT_TRUE(l.ok() && l->size() == 1u);
  StoredEntry s;
  if (!l.ok() || l->size() != 1u) return s;
  s.key = (*l)[0].key;
  std::optional<PlanEntry> e = cache.load(name, s.key);
  EXPECT_TRUE(e.has_value());
  if (!e) return s;
  for (const Tensor& t : e->tensors()) {
    OwnedTensor& o = s.tensors.emplace_back(t.dtype, t.shape);
    std::memcpy(o.t.data, t.data, t.nbytes());
  }
  return s;
}

inline void write_entry(const std::string& dir, const std::string& name, const StoredEntry& s) {
  std::vector<Tensor> t;
  for (const OwnedTensor& o : s.tensors) t.push_back(o.t);
  ASSERT_TRUE(PlanCache(dir).store(name, s.key, t).ok());
}

// Each tensor's bytes (to compare two objects' packed_*_tensors()).
inline std::vector<std::vector<uint8_t>> bytes_of(const std::vector<Tensor>& ts) {
  std::vector<std::vector<uint8_t>> out;
  for (const Tensor& t : ts) {
    const auto* p = static_cast<const uint8_t*>(t.data);
    out.emplace_back(p, p + t.nbytes());
  }
  return out;
}

// Drops the last `n` elements of a 1-d tensor.
inline void shorten(OwnedTensor& t, int64_t n) {
  OwnedTensor shorter(t.t.dtype, Shape{t.t.numel() - n});
  std::memcpy(shorter.t.data, t.t.data, shorter.t.nbytes());
  t = std::move(shorter);
}

// Flips bit 2 of the byte at `offset` of `file`.
inline void flip_bit(const std::string& file, std::streamoff offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.read(&c, 1);
  c ^= 4;
  f.seekp(offset);
  f.write(&c, 1);
}

// A warm pack of a damaged entry: `cached(&packs)` packs once more, with a
// warning naming `file`, and computes `want` (`run` of the packed object);
// the pack after it adopts the rebuilt entry and computes `want` too.
template <class Cached, class Run>
void expect_rebuilt(const std::string& why, const std::string& file,
                    const std::vector<uint8_t>& want, Cached&& cached, Run&& run) {
  int packs = 0;
  testing::internal::CaptureStderr();
  auto p = cached(&packs);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(packs, 1) << why;
  EXPECT_NE(err.find(file), std::string::npos) << why << ": " << err;
  EXPECT_NE(err.find("rebuilding"), std::string::npos) << why << ": " << err;
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(run(*p), want) << why;
  packs = 0;
  auto again = cached(&packs);
  EXPECT_EQ(packs, 0) << why;
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(run(*again), want) << why;
}

}  // namespace flick::plan_test
