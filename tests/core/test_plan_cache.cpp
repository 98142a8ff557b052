// The plan cache's on-disk store (runtime/plan_cache.h): round trip, every
// kind of damaged or stale entry is a warned miss (never trusted, never a
// crash), and concurrent writers leave a whole entry.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "runtime/plan_cache.h"
#include "runtime/sha256.h"

namespace flick {
namespace {

namespace fs = std::filesystem;

class PlanCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/flick-plan-cache-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/plans";  // created by the first store
    w_ = OwnedTensor(DType::I8, Shape{7, 33});
    for (int64_t i = 0; i < w_.t.numel(); ++i) w_.t.ptr<int8_t>()[i] = static_cast<int8_t>(i * 37);
    s_ = OwnedTensor(DType::F32, Shape{7});
    for (int64_t i = 0; i < 7; ++i) s_.t.ptr<float>()[i] = 0.01f * static_cast<float>(i + 1);
    key_ = PlanKey().add("source", "size=1;mtime_ns=2").add("isa", "avx512_core_amx").text();
  }
  void TearDown() override { fs::remove_all(root_); }

  std::vector<Tensor> tensors() const { return {w_.t, s_.t}; }
  std::string file() const { return dir_ + "/blocks.0.q.plan"; }

  // load() of a damaged entry: a miss, with a warning naming the file.
  void expect_rejected(const PlanCache& c, const std::string& why) {
    testing::internal::CaptureStderr();
    EXPECT_FALSE(c.load("blocks.0.q", key_).has_value()) << why;
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find(file()), std::string::npos) << why << ": " << err;
    EXPECT_NE(err.find("rebuilding"), std::string::npos) << why << ": " << err;
  }

  std::string root_, dir_, key_;
  OwnedTensor w_, s_;
};

TEST_F(PlanCacheTest, RoundTripIsByteExact) {
  PlanCache c(dir_);
  EXPECT_FALSE(c.load("blocks.0.q", key_).has_value());  // empty: a silent miss
  EXPECT_EQ(c.rejected(), 0);
  ASSERT_TRUE(c.store("blocks.0.q", key_, tensors()).ok());
  std::optional<PlanEntry> e = c.load("blocks.0.q", key_);
  ASSERT_TRUE(e.has_value());
  ASSERT_EQ(e->tensors().size(), 2u);
  const Tensor& w = e->tensors()[0];
  const Tensor& s = e->tensors()[1];
  EXPECT_EQ(w.dtype, DType::I8);
  EXPECT_EQ(w.shape, (Shape{7, 33}));
  EXPECT_EQ(s.dtype, DType::F32);
  EXPECT_EQ(s.shape, (Shape{7}));
  EXPECT_EQ(std::memcmp(w.data, w_.t.data, w.nbytes()), 0);
  EXPECT_EQ(std::memcmp(s.data, s_.t.data, s.nbytes()), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s.data) % 64, 0u);  // each tensor 64-byte aligned
  EXPECT_EQ(c.hits(), 1);
  // The views outlive the cache object: the entry holds the mapping.
  PlanEntry copy = *e;
  e.reset();
  EXPECT_EQ(std::memcmp(copy.tensors()[0].data, w_.t.data, w_.t.nbytes()), 0);
}

TEST_F(PlanCacheTest, EveryCorruptByteIsRejected) {
  PlanCache c(dir_);
  ASSERT_TRUE(c.store("blocks.0.q", key_, tensors()).ok());
  const int64_t size = static_cast<int64_t>(fs::file_size(file()));
  std::vector<char> good(static_cast<size_t>(size));
  std::ifstream(file(), std::ios::binary).read(good.data(), size);
  // A flipped bit anywhere is caught (header, key, records and padding by
  // the header checksum, the payload by its own).
  for (int64_t off = 0; off < size; ++off) {
    std::vector<char> bad = good;
    bad[static_cast<size_t>(off)] ^= 0x10;
    std::ofstream(file(), std::ios::binary | std::ios::trunc).write(bad.data(), size);
    testing::internal::CaptureStderr();
    const bool hit = c.load("blocks.0.q", key_).has_value();
    testing::internal::GetCapturedStderr();
    ASSERT_FALSE(hit) << "byte " << off << " of " << size;
  }
  // And one payload byte, with the warning checked.
  std::vector<char> bad = good;
  bad[static_cast<size_t>(size - 1)] ^= 1;
  std::ofstream(file(), std::ios::binary | std::ios::trunc).write(bad.data(), size);
  expect_rejected(c, "payload byte");
  // A rebuilt entry is used again.
  ASSERT_TRUE(c.store("blocks.0.q", key_, tensors()).ok());
  EXPECT_TRUE(c.load("blocks.0.q", key_).has_value());
}

TEST_F(PlanCacheTest, TruncatedFileIsRejected) {
  PlanCache c(dir_);
  ASSERT_TRUE(c.store("blocks.0.q", key_, tensors()).ok());
  const auto size = fs::file_size(file());
  for (uintmax_t cut : {size - 1, size / 2, uintmax_t{100}, uintmax_t{63}, uintmax_t{0}}) {
    ASSERT_TRUE(c.store("blocks.0.q", key_, tensors()).ok());
    fs::resize_file(file(), cut);
    expect_rejected(c, "cut to " + std::to_string(cut));
  }
  // Longer than the header says: also rejected.
  ASSERT_TRUE(c.store("blocks.0.q", key_, tensors()).ok());
  fs::resize_file(file(), size + 64);
  expect_rejected(c, "grown");
}

TEST_F(PlanCacheTest, StaleKeyIsRejected) {
  PlanCache c(dir_);
  ASSERT_TRUE(c.store("blocks.0.q", key_, tensors()).ok());
  // The source changed (size / mtime / header), or the ISA did.
  const std::string changed_source =
      PlanKey().add("source", "size=1;mtime_ns=3").add("isa", "avx512_core_amx").text();
  const std::string other_isa =
      PlanKey().add("source", "size=1;mtime_ns=2").add("isa", "avx2").text();
  for (const std::string& k : {changed_source, other_isa}) {
    testing::internal::CaptureStderr();
    EXPECT_FALSE(c.load("blocks.0.q", k).has_value());
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("stale"), std::string::npos) << err;
  }
  EXPECT_EQ(c.rejected(), 2);
  // Rebuilt under the new key: the new key hits, the old one is stale now.
  ASSERT_TRUE(c.store("blocks.0.q", other_isa, tensors()).ok());
  EXPECT_TRUE(c.load("blocks.0.q", other_isa).has_value());
  testing::internal::CaptureStderr();
  EXPECT_FALSE(c.load("blocks.0.q", key_).has_value());
  testing::internal::GetCapturedStderr();
}

TEST_F(PlanCacheTest, SourceIdentityFollowsSizeMtimeAndHead) {
  const std::string src = root_ + "/model.safetensors";
  std::ofstream(src, std::ios::binary) << "0123456789";
  Expected<std::string> a = source_identity(src);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_NE(a->find("size=10;"), std::string::npos) << *a;
  EXPECT_NE(a->find("head_sha256=" + sha256_hex("0123456789")), std::string::npos) << *a;
  // Same size and content, another mtime.
  struct timespec times[2] = {{0, UTIME_OMIT}, {1000, 5}};
  ASSERT_EQ(utimensat(AT_FDCWD, src.c_str(), times, 0), 0);
  Expected<std::string> b = source_identity(src);
  ASSERT_TRUE(b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_NE(b->find("mtime_ns=1000000000005;"), std::string::npos) << *b;
  // Same size and mtime, another first byte (the header).
  std::ofstream(src, std::ios::binary) << "X123456789";
  ASSERT_EQ(utimensat(AT_FDCWD, src.c_str(), times, 0), 0);
  Expected<std::string> c = source_identity(src);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*b, *c);
  EXPECT_FALSE(source_identity(root_ + "/absent").ok());
}

// set_checkpoint_source: entries named by the checkpoint's canonical path
// (another spelling of it shares them, another checkpoint does not), keyed
// by every shard's identity (a changed shard makes them stale); without a
// cache no file is touched.
TEST_F(PlanCacheTest, CheckpointSourceNamesByPathAndKeysByEveryShard) {
  const std::string a = root_ + "/ckpt/a.safetensors", b = root_ + "/ckpt/b.safetensors";
  fs::create_directories(root_ + "/ckpt");
  std::ofstream(a, std::ios::binary) << "shard a";
  std::ofstream(b, std::ios::binary) << "shard b";
  PlanCache cache(dir_);
  int builds = 0;
  // One entry through a scope whose source is `path`: true on a hit.
  auto get = [&](const std::string& path, const std::vector<std::string>& files) {
    PlanCacheScope scope(&cache, "test-platform");
    EXPECT_TRUE(scope.set_checkpoint_source("ck", path, files).ok());
    Expected<PlanCached> c = PlanCached::get("l", "test-kind", [&] {
      ++builds;
      std::vector<OwnedTensor> out;
      out.emplace_back().t = s_.t;
      return Expected<std::vector<OwnedTensor>>(std::move(out));
    });
    EXPECT_TRUE(c.ok()) << c.status().message();
    return c.ok() && c->hit;
  };
  EXPECT_FALSE(get(a, {a, b}));  // cold
  const std::string name =
      "ck-" + sha256_hex(fs::weakly_canonical(a).string()).substr(0, 8) + ".l.plan";
  EXPECT_TRUE(fs::exists(dir_ + "/" + name)) << name;
  EXPECT_TRUE(get(root_ + "/ckpt/../ckpt/./a.safetensors", {a, b}));  // same file, other spelling
  EXPECT_EQ(builds, 1);
  // Another shard's size changes: stale, rebuilt (a warned miss), then warm.
  std::ofstream(b, std::ios::binary) << "shard b, rewritten";
  testing::internal::CaptureStderr();
  EXPECT_FALSE(get(a, {a, b}));
  testing::internal::GetCapturedStderr();
  EXPECT_TRUE(get(a, {a, b}));
  EXPECT_EQ(builds, 2);
  EXPECT_FALSE(get(b, {b}));  // another checkpoint: its own entry
  // A file that cannot be read is an error naming it; without a cache,
  // nothing is read.
  PlanCacheScope with(&cache, "test-platform");
  const Status missing = with.set_checkpoint_source("ck", a, {a, root_ + "/absent"});
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find(root_ + "/absent"), std::string::npos) << missing.message();
  PlanCacheScope without(nullptr, "test-platform");
  EXPECT_TRUE(without.set_checkpoint_source("ck", a, {root_ + "/absent"}).ok());
}

TEST_F(PlanCacheTest, NotAnEntryAndUnreadableDirectory) {
  PlanCache c(dir_);
  fs::create_directories(dir_);
  std::ofstream(file(), std::ios::binary) << std::string(200, 'x');
  expect_rejected(c, "garbage");
  // A cache whose directory cannot be created: store fails, load misses.
  PlanCache bad("/proc/flick-no-such/plans");
  EXPECT_FALSE(bad.store("x", key_, tensors()).ok());
  EXPECT_FALSE(bad.load("x", key_).has_value());
}

TEST_F(PlanCacheTest, ListAndClear) {
  PlanCache c(dir_);
  Expected<std::vector<PlanEntryInfo>> none = c.list();  // absent directory
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  ASSERT_TRUE(c.store("blocks.0.q", key_, tensors()).ok());
  ASSERT_TRUE(c.store("weird/name with space", key_, tensors()).ok());
  std::ofstream(dir_ + "/broken.plan") << "nope";
  std::ofstream(dir_ + "/README") << "not an entry";
  Expected<std::vector<PlanEntryInfo>> l = c.list();
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->size(), 3u);
  EXPECT_EQ((*l)[0].file, "blocks.0.q.plan");
  EXPECT_EQ((*l)[0].key, key_);
  EXPECT_EQ((*l)[0].bytes, static_cast<int64_t>(fs::file_size(file())));
  EXPECT_TRUE((*l)[0].problem.empty());
  EXPECT_EQ((*l)[1].file, "broken.plan");
  EXPECT_FALSE((*l)[1].problem.empty());
  EXPECT_EQ((*l)[2].file, "weird_name_with_space.plan");
  Expected<int64_t> removed = c.clear();
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 3);
  EXPECT_TRUE(fs::exists(dir_ + "/README"));  // only entries go
  EXPECT_TRUE(c.list()->empty());
  EXPECT_FALSE(c.load("blocks.0.q", key_).has_value());
}

// Two processes store the same entry (with different contents, to tell a
// torn mix from a whole file) many times while this one reads it: every read
// is a miss or one writer's whole entry, never a mix, never a warning about
// a torn file.
TEST_F(PlanCacheTest, ConcurrentWritersLeaveAWholeEntry) {
  OwnedTensor big(DType::I8, Shape{256, 1024});
  auto writer = [&](int8_t fill) {
    std::memset(big.t.data, fill, big.t.nbytes());
    PlanCache c(dir_);
    const Tensor t[] = {big.t};
    for (int i = 0; i < 40; ++i)
      if (!c.store("shared", key_, t).ok()) _exit(1);
    _exit(0);
  };
  pid_t a = fork();
  if (a == 0) writer(1);
  pid_t b = fork();
  if (b == 0) writer(2);
  PlanCache c(dir_);
  int hits = 0;
  testing::internal::CaptureStderr();
  int st_a = 0, st_b = 0;
  bool a_done = false, b_done = false;
  while (!(a_done && b_done)) {
    a_done = a_done || waitpid(a, &st_a, WNOHANG) == a;
    b_done = b_done || waitpid(b, &st_b, WNOHANG) == b;
    std::optional<PlanEntry> e = c.load("shared", key_);
    if (!e) continue;
    ++hits;
    const auto* p = e->tensors()[0].ptr<const int8_t>();
    const int8_t first = p[0];
    ASSERT_TRUE(first == 1 || first == 2);
    for (int64_t j = 0; j < big.t.numel(); j += 4093) ASSERT_EQ(p[j], first);
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(WIFEXITED(st_a) && WEXITSTATUS(st_a) == 0);
  EXPECT_TRUE(WIFEXITED(st_b) && WEXITSTATUS(st_b) == 0);
  EXPECT_EQ(c.rejected(), 0) << err;
  EXPECT_GT(hits, 0);  // the reads did overlap the writes
  EXPECT_TRUE(c.load("shared", key_).has_value());
  // No temporaries left behind.
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string(), "shared.plan");
}

TEST(PlanChecksum, SeesEveryByteAndTheLength) {
  std::vector<uint8_t> d(1000, 0);
  const uint64_t h0 = plan_checksum(d.data(), d.size());
  for (size_t i : {size_t{0}, size_t{7}, size_t{31}, size_t{32}, size_t{500}, size_t{999}}) {
    d[i] = 1;
    EXPECT_NE(plan_checksum(d.data(), d.size()), h0) << i;
    d[i] = 0;
  }
  EXPECT_NE(plan_checksum(d.data(), 999), h0);
  EXPECT_NE(plan_checksum(d.data(), d.size(), 1), h0);
}

}  // namespace
}  // namespace flick
