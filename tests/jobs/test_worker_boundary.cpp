// The worker's exception boundary: a bug that one job's bytes reach (an
// exception from the pipeline's checks or from its render) ends that job,
// quarantined or failed with the exception in its status file, and the
// worker goes on with the next job.
#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>

#include "jobs/worker.h"
#include "jobs_test_util.h"

namespace flick {
namespace {

class ThrowingRun : public PreparedJob {
 public:
  std::string summary() const override { return "throws while rendering"; }
  Status run(FrameSink&, const RunContext&) override { throw std::logic_error("boom in render"); }
};

class OkRun : public PreparedJob {
 public:
  std::string summary() const override { return "renders nothing"; }
  Status run(FrameSink&, const RunContext&) override { return ok_status(); }
};

// [input] how = "prepare" | "prepare-int" | "render" | "ok".
class ThrowingInstance : public PipelineInstance {
 public:
  Status load() override { return ok_status(); }
  std::unique_ptr<PreparedJob> prepare(TableReader& job, const DaemonConfig&) const override {
    std::optional<TableReader> input = job.table("input", Need::kRequired);
    if (!input) return nullptr;
    const std::optional<std::string> how = input->string("how", Need::kRequired, "a string");
    input->check_unknown_keys();
    if (!how) return nullptr;
    if (*how == "prepare") throw std::out_of_range("boom in prepare");
    if (*how == "prepare-int") throw 42;
    if (*how == "render") return std::make_unique<ThrowingRun>();
    return std::make_unique<OkRun>();
  }
};

class WorkerBoundary : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_ / "in");
    std::filesystem::create_directories(dir_ / "out");
    Diagnostics d("flick.toml");
    std::optional<DaemonConfig> c =
        parse_config("[daemon]\nspool = \"" + (dir_ / "spool") + "\"\ninput_roots = [\"" +
                         (dir_ / "in") + "\"]\noutput_roots = [\"" + (dir_ / "out") +
                         "\"]\nretry_delay = 0\n[[pipeline]]\nname = \"t\"\nkind = \"encode\"\n",
                     "flick.toml", "", d);
    ASSERT_TRUE(c) << d.status().message();
    config_ = std::move(*c);
    config_.pipelines[0].instance = std::make_shared<ThrowingInstance>();
    config_.pipelines[0].loaded = true;
    Expected<Spool> s = Spool::open(config_.spool, /*create=*/true);
    ASSERT_TRUE(s.ok()) << s.status().message();
    spool_.emplace(std::move(*s));
  }

  void drop(const std::string& stem, const std::string& how) {
    testing::write_text(dir_ / ("spool/incoming/" + stem + ".toml"),
                        "version = 1\npipeline = \"t\"\n[input]\nhow = \"" + how +
                            "\"\n[output]\ndir = \"" + (dir_ / ("out/" + stem)) +
                            "\"\nframes = { format = \"png\" }\n");
    std::filesystem::permissions(dir_ / ("spool/incoming/" + stem + ".toml"),
                                 std::filesystem::perms(0640));
  }

  std::string error_message(const std::string& dir, const std::string& stem) {
    Expected<std::optional<JobStatus>> st =
        spool_->read_status(dir == "quarantine" ? SpoolDir::kQuarantine : SpoolDir::kFailed, stem);
    if (!st.ok() || !st->has_value() || !(*st)->error) return "";
    return (*st)->error->message;
  }

  testing::ScratchDir dir_;
  DaemonConfig config_;
  std::optional<Spool> spool_;
};

TEST_F(WorkerBoundary, ExceptionWhileCheckingQuarantinesThatJobOnly) {
  drop("a", "prepare");
  drop("b", "prepare-int");
  drop("c", "ok");
  Worker w(*spool_, config_, {});
  const JobResult a = w.process_incoming("a.toml");
  EXPECT_EQ(a.outcome, Outcome::kQuarantined) << a.status.message();
  EXPECT_NE(error_message("quarantine", "a")
                .find("internal error while checking the job: boom "
                      "in prepare"),
            std::string::npos)
      << error_message("quarantine", "a");
  const JobResult b = w.process_incoming("b.toml");
  EXPECT_EQ(b.outcome, Outcome::kQuarantined);
  EXPECT_NE(error_message("quarantine", "b").find("unknown type"), std::string::npos);
  const JobResult c = w.process_incoming("c.toml");
  EXPECT_EQ(c.outcome, Outcome::kDone) << c.status.message();
  EXPECT_TRUE(std::filesystem::is_directory(dir_ / "out/c"));
}

TEST_F(WorkerBoundary, ExceptionWhileRenderingFailsThatJobAtOnce) {
  drop("r", "render");
  Worker w(*spool_, config_, {});
  const JobResult r = w.process_incoming("r.toml");
  EXPECT_EQ(r.outcome, Outcome::kFailed) << r.status.message();
  EXPECT_EQ(r.attempts, 1);  // not retried: it would throw again
  EXPECT_NE(error_message("failed", "r").find("internal error while rendering: boom in render"),
            std::string::npos)
      << error_message("failed", "r");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out/r.partial"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out/r"));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "spool/failed/r.toml"));
  EXPECT_TRUE(std::filesystem::is_empty(dir_ / "spool/active"));
}

}  // namespace
}  // namespace flick
