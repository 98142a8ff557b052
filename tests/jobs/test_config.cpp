#include <gtest/gtest.h>

#include <filesystem>

#include "jobs/config.h"
#include "jobs_test_util.h"

namespace flick {
namespace {

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_ / "in");
    std::filesystem::create_directories(dir_ / "out");
  }
  std::string daemon_table(const std::string& extra = "") {
    return "[daemon]\nspool = \"" + (dir_ / "spool") + "\"\ninput_roots = [\"" + (dir_ / "in") +
           "\"]\noutput_roots = [\"" + (dir_ / "out") + "\"]\n" + extra;
  }
  std::optional<DaemonConfig> parse(const std::string& text, const std::string& spool = "") {
    diag_ = Diagnostics("flick.toml");
    return parse_config(text, "flick.toml", spool, diag_);
  }
  testing::ScratchDir dir_;
  Diagnostics diag_{"flick.toml"};
};

TEST_F(ConfigTest, MinimalConfigWithDefaults) {
  std::optional<DaemonConfig> c =
      parse(daemon_table() + "[[pipeline]]\nname = \"encode\"\nkind = \"encode\"\n");
  ASSERT_TRUE(c) << diag_.status().message();
  EXPECT_EQ(c->spool, dir_ / "spool");
  ASSERT_EQ(c->input_roots.size(), 1u);
  EXPECT_EQ(c->input_roots[0].canonical, dir_ / "in");
  EXPECT_EQ(c->max_attempts, 3);
  EXPECT_EQ(c->plan_cache, "/var/cache/flick");
  ASSERT_EQ(c->pipelines.size(), 1u);
  EXPECT_EQ(c->pipelines[0].kind, "encode");
  EXPECT_NE(c->find_pipeline("encode"), nullptr);
  EXPECT_TRUE(load_pipelines(*c, nullptr).ok());
  EXPECT_TRUE(c->pipelines[0].loaded);
}

TEST_F(ConfigTest, AllDaemonKeys) {
  std::optional<DaemonConfig> c =
      parse(daemon_table("plan_cache = \"/var/cache/x\"\nmax_attempts = 5\nretry_delay = 0\n"
                         "rescan_interval = 2\nmax_job_bytes = 4096\n") +
            "[[pipeline]]\nname = \"a\"\nkind = \"encode\"\n[[pipeline]]\nname = \"b\"\nkind = "
            "\"encode\"\n");
  ASSERT_TRUE(c) << diag_.status().message();
  EXPECT_EQ(c->plan_cache, "/var/cache/x");
  EXPECT_EQ(c->max_attempts, 5);
  EXPECT_EQ(c->retry_delay_s, 0);
  EXPECT_EQ(c->rescan_interval_s, 2);
  EXPECT_EQ(c->max_job_bytes, 4096);
  EXPECT_EQ(c->pipeline_names(), "a, b");
}

TEST_F(ConfigTest, UnknownKindNamesTheAvailableOnes) {
  EXPECT_FALSE(parse(daemon_table() +
                     "[[pipeline]]\nname = \"fp\"\nkind = \"framepak\"\nweights = \"/w\"\n"));
  ASSERT_EQ(diag_.all().size(), 1u);  // its other keys are not reported as unknown
  const Diagnostic& d = diag_.first();
  EXPECT_EQ(d.key, "pipeline[0].kind");
  EXPECT_EQ(d.line, 7);
  EXPECT_NE(d.message.find("'framepak'"), std::string::npos);
  EXPECT_NE(d.message.find("this build has: encode, matrix-game-2"), std::string::npos)
      << d.message;
}

TEST_F(ConfigTest, ErrorsAreCollected) {
  EXPECT_FALSE(parse(daemon_table("max_attempts = \"3\"\nspoool = 1\n") +
                     "[[pipeline]]\nname = \"e\"\nkind = \"encode\"\nextra = 1\n"
                     "[[pipeline]]\nname = \"e\"\nkind = \"encode\"\n"));
  std::vector<std::string> keys;
  for (const Diagnostic& d : diag_.all()) keys.push_back(d.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"daemon.max_attempts", "daemon.spoool",
                                            "pipeline[0].extra", "pipeline[1].name"}));
  EXPECT_NE(diag_.all()[3].message.find("defined twice"), std::string::npos);
}

TEST_F(ConfigTest, RootsMustExistAndSpoolBeAbsolute) {
  EXPECT_FALSE(parse("[daemon]\nspool = \"spool\"\ninput_roots = [\"" + (dir_ / "nope") +
                     "\"]\noutput_roots = []\n[[pipeline]]\nname = \"e\"\nkind = \"encode\"\n"));
  std::vector<std::string> keys;
  for (const Diagnostic& d : diag_.all()) keys.push_back(d.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"daemon.spool", "daemon.input_roots",
                                            "daemon.output_roots"}));
}

TEST_F(ConfigTest, SpoolOverride) {
  const std::string text = "[daemon]\ninput_roots = [\"" + (dir_ / "in") +
                           "\"]\noutput_roots = [\"" + (dir_ / "out") +
                           "\"]\n[[pipeline]]\nname = \"e\"\nkind = \"encode\"\n";
  EXPECT_FALSE(parse(text));  // spool required without --spool
  std::optional<DaemonConfig> c = parse(text, "/var/spool/other");
  ASSERT_TRUE(c) << diag_.status().message();
  EXPECT_EQ(c->spool, "/var/spool/other");
}

TEST_F(ConfigTest, PipelinesAreRequired) {
  EXPECT_FALSE(parse(daemon_table()));
  EXPECT_EQ(diag_.first().key, "pipeline");
}

TEST_F(ConfigTest, ReloadReusesUnchangedInstances) {
  const std::string text = daemon_table() + "[[pipeline]]\nname = \"e\"\nkind = \"encode\"\n";
  std::optional<DaemonConfig> a = parse(text);
  ASSERT_TRUE(a);
  ASSERT_TRUE(load_pipelines(*a, nullptr).ok());
  std::optional<DaemonConfig> b = parse(text);
  ASSERT_TRUE(b);
  ASSERT_TRUE(load_pipelines(*b, &*a).ok());
  EXPECT_EQ(a->pipelines[0].instance, b->pipelines[0].instance);
}

TEST_F(ConfigTest, LoadConfigReportsMissingFile) {
  Expected<DaemonConfig> c = load_config(dir_ / "nope.toml", "");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(exit_code(c.status()), 65);
  EXPECT_NE(c.status().message().find("nope.toml"), std::string::npos);
}

}  // namespace
}  // namespace flick
