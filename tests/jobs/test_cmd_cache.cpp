// `flick cache` (jobs/cmd_cache.cpp) against a directory the plan cache
// filled, and the daemon's [daemon].plan_cache reaching the Matrix-Game
// pipeline's load (jobs/config.cpp load_pipelines, jobs/kind_matrix_game.cpp).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "jobs/config.h"
#include "runtime/cpu/onednn_info.h"
#include "runtime/plan_cache.h"
#include "tests/jobs/jobs_test_util.h"

namespace flick {
namespace {

namespace fs = std::filesystem;

// stdout and exit status of the flick binary with `args`.
std::pair<std::string, int> flick(const std::string& args) {
  FILE* p = ::popen((std::string(FLICK_BINARY) + " " + args + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = ::pclose(p);
  return {out, WIFEXITED(st) ? WEXITSTATUS(st) : -1};
}

TEST(FlickCache, ListsEntriesWithKeysAndClearsThem) {
  testing::ScratchDir d;
  const std::string dir = d / "plans";
  PlanCache cache(dir);
  OwnedTensor w(DType::I8, Shape{64, 1024});  // 64 KiB
  const Tensor t[] = {w.t};
  ASSERT_TRUE(cache.store("mg2-dit.blocks.0.q", "source=size=1\nisa=0x7\n", t).ok());
  ASSERT_TRUE(cache.store("mg2-dit.blocks.1.q", "source=size=1\nisa=0x7\n", t).ok());
  testing::write_text(dir + "/torn.plan", "FLICKPC1");

  auto [out, rc] = flick("cache list --keys --dir " + dir);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("mg2-dit.blocks.0.q.plan"), std::string::npos) << out;
  EXPECT_NE(out.find("mg2-dit.blocks.1.q.plan"), std::string::npos) << out;
  EXPECT_NE(out.find("64.2 KiB"), std::string::npos) << out;  // 64 KiB of weight + header
  EXPECT_NE(out.find("isa=0x7"), std::string::npos) << out;
  EXPECT_NE(out.find("torn.plan  [unreadable header: rebuilt on next load]"), std::string::npos)
      << out;
  EXPECT_NE(out.find(dir + ": 3 entries"), std::string::npos) << out;

  std::tie(out, rc) = flick("cache --dir " + dir + " clear");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("removed 3 entries"), std::string::npos) << out;
  std::tie(out, rc) = flick("cache --dir " + dir);  // list is the default
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find(dir + ": 0 entries, 0 B"), std::string::npos) << out;
  // An explicit config that is not there is an error, not the default dir.
  std::tie(out, rc) = flick("cache --config " + (d / "absent.toml"));
  EXPECT_NE(rc, 0) << out;
}

TEST(FlickCache, TheDirectoryComesFromTheConfig) {
  testing::ScratchDir d;
  fs::create_directories(d / "in");
  fs::create_directories(d / "out");
  testing::write_text(d / "flick.toml",
                      "[daemon]\nspool = \"" + (d / "spool") + "\"\ninput_roots = [\"" +
                          (d / "in") + "\"]\noutput_roots = [\"" + (d / "out") +
                          "\"]\nplan_cache = \"" + (d / "pc") +
                          "\"\n[[pipeline]]\nname = \"encode\"\nkind = \"encode\"\n");
  auto [out, rc] = flick("cache --config " + (d / "flick.toml"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find(d / "pc" + ": 0 entries"), std::string::npos) << out;
}

std::map<std::string, ino_t> inodes(const std::string& dir) {
  std::map<std::string, ino_t> m;
  for (const auto& e : fs::directory_iterator(dir)) {
    struct stat st;
    if (stat(e.path().c_str(), &st) == 0) m[e.path().filename().string()] = st.st_ino;
  }
  return m;
}

// A matrix-game-2 pipeline of the daemon config loads through
// [daemon].plan_cache: the INT8 load fills it, a second config's load of the
// same weights maps the entries (files unchanged).
TEST(FlickCache, TheDaemonsPlanCacheReachesTheMatrixGamePipeline) {
  if (!cpu::cpu_supports(Precision::INT8)) GTEST_SKIP() << "no AVX-512 VNNI: no INT8 pipeline";
  testing::ScratchDir d;
  auto [out, rc] = flick("synth --size tiny --mode universal " + (d / "mg2"));
  ASSERT_EQ(rc, 0) << out;
  fs::create_directories(d / "in");
  fs::create_directories(d / "out");
  const std::string text = "[daemon]\nspool = \"/x\"\ninput_roots = [\"" + (d / "in") +
                           "\"]\noutput_roots = [\"" + (d / "out") + "\"]\nplan_cache = \"" +
                           (d / "pc") +
                           "\"\n[[pipeline]]\nname = \"mg\"\nkind = \"matrix-game-2\"\nmode = "
                           "\"universal\"\nweights = \"" +
                           (d / "mg2") + "\"\nprecision = \"int8\"\nwidth = 48\nheight = 32\n";
  auto load = [&] {
    Diagnostics diag("flick.toml");
    std::optional<DaemonConfig> c = parse_config(text, "flick.toml", "", diag);
    ASSERT_TRUE(c) << diag.status().message();
    const Status s = load_pipelines(*c, nullptr);
    ASSERT_TRUE(s.ok()) << s.message();
  };
  load();
  EXPECT_TRUE(loading_plan_cache().empty());  // only while loading
  const auto cold = inodes(d / "pc");
  EXPECT_GT(cold.size(), 10u);  // the DiT's and CLIP's INT8 linears
  load();
  EXPECT_EQ(inodes(d / "pc"), cold);  // every entry a hit: none rewritten
}

}  // namespace
}  // namespace flick
