// The subcommands as a user and a batch system see them: help, exit codes,
// flick run / submit / status / validate, refused spool files, recovery of
// states a crash can leave, and SIGHUP.
#include <sys/file.h>
#include <sys/stat.h>

#include <sstream>

#include "integration_util.h"
#include "jobs/fs.h"

namespace flick::testing {
namespace {

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    sb_.write_config();
    ASSERT_EQ(sb_.drain().code, 0);
    sb_.make_frames("shot", 3, 16, 12);
  }
  Sandbox sb_;
};

TEST_F(Cli, HelpForEverySubcommandAndUsageErrors) {
  RunResult r = sb_.run({"--help"}, "help");
  EXPECT_EQ(r.code, 0);
  for (const char* sub : {"serve", "drain", "run", "submit", "status", "validate"}) {
    EXPECT_NE(r.out.find(sub), std::string::npos) << sub;
    const RunResult h = sb_.run({sub, "--help"}, std::string("help-") + sub);
    EXPECT_EQ(h.code, 0) << sub;
    EXPECT_NE(h.out.find("Usage"), std::string::npos) << sub;
    EXPECT_NE(h.out.find("--config"), std::string::npos) << sub;
  }
  EXPECT_EQ(sb_.run({}, "none").code, 64);
  EXPECT_EQ(sb_.run({"run"}, "missing-arg").code, 64);
  EXPECT_EQ(sb_.run({"drain", "--bogus"}, "bogus").code, 64);
  // A config that does not exist or does not parse is an invalid input.
  EXPECT_EQ(sb_.run({"drain", "--config", sb_.path("nope.toml")}, "noconf").code, 65);
  write_text(sb_.path("broken.toml"), "[daemon]\nspool = 3\n");
  const RunResult broken = sb_.run({"serve", "--config", sb_.path("broken.toml")}, "broken");
  EXPECT_EQ(broken.code, 65);
  EXPECT_NE(broken.err.find("daemon.spool"), std::string::npos) << broken.err;
}

TEST_F(Cli, RunIsForegroundAndRerunsAreSafe) {
  const std::string job = sb_.path("job.toml");
  write_text(job, sb_.encode_job("shot", "fg"));
  RunResult r = sb_.flick("run", {job});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("job: done"), std::string::npos) << r.out;
  expect_done_job(sb_, "job", 3, 16, 12);
  const std::string committed = read_text(sb_.spool("done/job.status.toml"));
  // Again: already done, exit 0, nothing rendered.
  r = sb_.flick("run", {job});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("already done"), std::string::npos) << r.out;
  EXPECT_EQ(read_text(sb_.spool("done/job.status.toml")), committed);
  // The same id with other content is refused.
  write_text(job, sb_.encode_job("shot", "fg2"));
  r = sb_.flick("run", {job});
  EXPECT_EQ(r.code, 65);
  EXPECT_NE(r.err.find("duplicate id"), std::string::npos) << r.err;
  // An invalid job: 65 with the formatted error, and nothing left in the spool.
  write_text(sb_.path("bad.toml"), "version = 1\npipeline = \"encode\"\n[input]\nframes = 3\n");
  r = sb_.flick("run", {sb_.path("bad.toml")});
  EXPECT_EQ(r.code, 65);
  EXPECT_NE(r.err.find("bad.toml"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" 4 | frames = 3"), std::string::npos) << r.err;
  EXPECT_TRUE(list(sb_.spool("active")).empty());
  EXPECT_TRUE(list(sb_.spool("quarantine")).empty());
}

TEST_F(Cli, ValidateSubmitStatus) {
  write_text(sb_.path("a.toml"), sb_.encode_job("shot", "a"));
  write_text(sb_.path("b.toml"), "version = 1\npipeline = \"encode\"\n[input]\nframes = \"" +
                                     sb_.path("in/shot/*.png") + "\"\nfps = \"x\"\n");
  RunResult r = sb_.flick("validate", {sb_.path("a.toml")});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("ok: job a"), std::string::npos) << r.out;
  r = sb_.flick("validate", {sb_.path("a.toml"), sb_.path("b.toml")});
  EXPECT_EQ(r.code, 65);
  EXPECT_NE(r.err.find("input.fps: expected a number"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("missing key output"), std::string::npos) << r.err;

  r = sb_.run({"submit", "--spool", sb_.spool(), sb_.path("a.toml")}, "submit");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, sb_.spool("incoming/a.toml") + "\n");
  struct stat st;
  ASSERT_EQ(::stat(sb_.spool("incoming/a.toml").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  // A queued name is never replaced.
  r = sb_.run({"submit", "--spool", sb_.spool(), sb_.path("a.toml")}, "submit2");
  EXPECT_EQ(r.code, 75);
  EXPECT_NE(r.err.find("already queued"), std::string::npos) << r.err;
  // A file that is not TOML is refused at submission.
  write_text(sb_.path("c.toml"), "version = = 1\n");
  EXPECT_EQ(sb_.flick("submit", {sb_.path("c.toml")}).code, 65);

  r = sb_.flick("status");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("incoming    1"), std::string::npos) << r.out;
  EXPECT_EQ(sb_.drain().code, 0);
  r = sb_.flick("status");
  EXPECT_NE(r.out.find("done        1"), std::string::npos) << r.out;
  expect_done_job(sb_, "a", 3, 16, 12);
}

// Spool files of the wrong kind, owner or mode are refused (quarantined
// without being opened or parsed).
TEST_F(Cli, RefusedSpoolFiles) {
  const std::string job = sb_.encode_job("shot", "unused");
  sb_.drop("mode.toml", job);
  ::chmod(sb_.spool("incoming/mode.toml").c_str(), 0666);
  sb_.drop("linked.toml", job);
  ::link(sb_.spool("incoming/linked.toml").c_str(), sb_.path("elsewhere.toml").c_str());
  ::symlink(sb_.path("elsewhere.toml").c_str(), sb_.spool("incoming/symlink.toml").c_str());
  ::mkfifo(sb_.spool("incoming/fifo.toml").c_str(), 0640);
  std::vector<std::pair<std::string, std::string>> expected = {
      {"mode", "lets group or others write it"},
      {"linked", "hard links"},
      {"symlink", "is a symlink"},
      {"fifo", "not a regular file"}};
  if (::geteuid() == 0) {
    sb_.drop("owner.toml", job);
    ASSERT_EQ(::chown(sb_.spool("incoming/owner.toml").c_str(), 12345, 12345), 0);
    expected.push_back({"owner", "owned by uid 12345"});
  }
  EXPECT_EQ(sb_.drain().code, 65);
  for (const auto& [stem, says] : expected) {
    std::optional<toml::value> st = sb_.status("quarantine", stem);
    ASSERT_TRUE(st) << stem;
    const std::string m = toml::find<std::string>(*st, "error", "message");
    EXPECT_NE(m.find(says), std::string::npos) << stem << ": " << m;
  }
  EXPECT_TRUE(list(sb_.spool("incoming")).empty());
  EXPECT_EQ(sb_.count("done"), 0);
}

// A crash after the status was committed but before the job file moved:
// the next start finishes the move and runs nothing again.
TEST_F(Cli, RecoveryFinishesACommittedJob) {
  sb_.drop("c.toml", sb_.encode_job("shot", "c"));
  ASSERT_EQ(sb_.drain().code, 0);
  const std::string before = read_text(sb_.spool("done/c.status.toml"));
  stdfs::rename(sb_.spool("done/c.toml"), sb_.spool("active/c.toml"));
  const RunResult r = sb_.drain();
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(list(sb_.spool("active")).empty());
  EXPECT_TRUE(stdfs::exists(sb_.spool("done/c.toml")));
  EXPECT_EQ(read_text(sb_.spool("done/c.status.toml")), before);
  expect_done_job(sb_, "c", 3, 16, 12);
}

// A crash after the outputs were renamed into place but before the commit:
// the next attempt recognises its own output directory (by the inode in the
// attempt ledger), replaces it and commits.
TEST_F(Cli, RecoveryReplacesItsOwnUncommittedOutputs) {
  sb_.drop("r.toml", sb_.encode_job("shot", "r"));
  ASSERT_EQ(sb_.drain().code, 0);
  const std::string out = sb_.path("out/r");
  struct stat st;
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  stdfs::rename(sb_.spool("done/r.toml"), sb_.spool("active/r.toml"));
  stdfs::remove(sb_.spool("done/r.status.toml"));
  write_text(sb_.spool("active/r.status.toml"),
             "id = \"r\"\nstate = \"running\"\nattempts = 0\njob_file = \"x\"\noutput_dir = \"" +
                 out + "\"\npartial_dev = \"" + std::to_string(st.st_dev) + "\"\npartial_ino = \"" +
                 std::to_string(st.st_ino) + "\"\n");
  const RunResult r = sb_.drain();
  EXPECT_EQ(r.code, 0) << r.err;
  expect_done_job(sb_, "r", 3, 16, 12);
  EXPECT_EQ(toml::find<int64_t>(*sb_.status("done", "r"), "attempts"), 2);  // the dead one counts
  EXPECT_TRUE(list(sb_.spool("active")).empty());
}

// An output directory that is not the job's own is never overwritten.
TEST_F(Cli, ExistingOutputDirectoryIsRefused) {
  stdfs::create_directories(sb_.path("out/taken"));
  write_text(sb_.path("out/taken/precious.txt"), "keep");
  sb_.drop("t.toml", sb_.encode_job("shot", "taken"));
  EXPECT_EQ(sb_.drain().code, 65);
  std::optional<toml::value> st = sb_.status("quarantine", "t");
  ASSERT_TRUE(st);
  EXPECT_EQ(toml::find<std::string>(*st, "error", "key"), "output.dir");
  EXPECT_EQ(toml::find<int64_t>(*st, "error", "line"), 7);
  EXPECT_EQ(read_text(sb_.path("out/taken/precious.txt")), "keep");
  EXPECT_TRUE(leftovers(sb_.root()).empty());
  EXPECT_TRUE(list(sb_.spool("active")).empty());
}

// A temporary failure (here: another process holds the output directory's
// .partial) requeues the job; it waits retry_delay (recorded in its ledger in
// active/, not in the submitter's file), then runs.
TEST_F(Cli, TemporaryFailureIsRetriedAfterTheDelay) {
  sb_.write_config("retry_delay = 2");
  stdfs::create_directories(sb_.path("out/busy.partial"));
  fs::Fd held(::open(sb_.path("out/busy.partial").c_str(), O_RDONLY | O_DIRECTORY));
  ASSERT_EQ(::flock(held.get(), LOCK_EX), 0);
  sb_.drop("busy.toml", sb_.encode_job("shot", "busy"));
  RunResult r = sb_.drain();
  EXPECT_EQ(r.code, 75) << r.err;
  EXPECT_NE(r.err.find("another job is rendering into"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("jobs waiting for a retry remain"), std::string::npos) << r.err;
  EXPECT_EQ(list(sb_.spool("incoming")), std::vector<std::string>{"busy.toml"});
  std::optional<toml::value> ledger = sb_.status("active", "busy");
  ASSERT_TRUE(ledger);
  EXPECT_EQ(toml::find<std::string>(*ledger, "state"), "queued");
  EXPECT_EQ(toml::find<int64_t>(*ledger, "attempts"), 1);
  EXPECT_TRUE(toml::find(*ledger, "not_before").is_offset_datetime());
  r = sb_.flick("status");
  EXPECT_NE(r.out.find("retry busy.toml: 1 attempt(s) so far"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not before"), std::string::npos) << r.out;

  // The renderer holding it finishes; the job still waits for its time.
  held = fs::Fd();
  stdfs::remove(sb_.path("out/busy.partial"));
  EXPECT_EQ(sb_.drain().code, 75);
  EXPECT_EQ(sb_.count("done"), 0);
  ASSERT_TRUE(wait_until(
      [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
        sb_.drain();
        return sb_.count("done") == 1;
      },
      std::chrono::seconds(20)));
  expect_done_job(sb_, "busy", 3, 16, 12);
  EXPECT_EQ(toml::find<int64_t>(*sb_.status("done", "busy"), "attempts"), 2);
  EXPECT_TRUE(list(sb_.spool("active")).empty());
}

// inotify is only a hint: a job whose arrival raised no watched event (a
// hard link made into incoming/ raises only IN_CREATE) is found by the
// periodic rescan.
TEST_F(Cli, PeriodicRescanFindsJobsInotifyMissed) {
  auto daemon = sb_.serve("rescan");
  ASSERT_TRUE(wait_until([&] { return daemon->err().find("serving") != std::string::npos; }));
  write_text(sb_.path("staged.toml"), sb_.encode_job("shot", "linked"));
  ::chmod(sb_.path("staged.toml").c_str(), 0640);
  ASSERT_EQ(::link(sb_.path("staged.toml").c_str(), sb_.spool("incoming/linked.toml").c_str()), 0);
  ASSERT_EQ(::unlink(sb_.path("staged.toml").c_str()), 0);  // one link left
  ASSERT_TRUE(wait_until([&] { return sb_.count("done") == 1; }, std::chrono::seconds(30)));
  daemon->signal(SIGTERM);
  EXPECT_EQ(daemon->wait(), 0);
  expect_done_job(sb_, "linked", 3, 16, 12);
}

// SIGHUP reloads the config: a new pipeline becomes usable; a broken config
// is reported and the running one kept.
TEST_F(Cli, SighupReloadsTheConfig) {
  auto daemon = sb_.serve("hup");
  std::string job = sb_.encode_job("shot", "h1");
  job.replace(job.find("\"encode\""), 8, "\"enc2\"");
  sb_.drop("h1.toml", job);
  ASSERT_TRUE(wait_until([&] { return sb_.count("quarantine") == 1; }));

  sb_.write_config("",
                   "[[pipeline]]\nname = \"encode\"\nkind = \"encode\"\n[[pipeline]]\nname = "
                   "\"enc2\"\nkind = \"encode\"\n");
  daemon->signal(SIGHUP);
  ASSERT_TRUE(wait_until(
      [&] { return daemon->err().find("configuration reloaded") != std::string::npos; }));
  job.replace(job.find("out/h1"), 6, "out/h2");
  sb_.drop("h2.toml", job);
  ASSERT_TRUE(wait_until([&] { return sb_.count("done") == 1; }));

  write_text(sb_.config(), "[daemon]\nspool = [\n");
  daemon->signal(SIGHUP);
  ASSERT_TRUE(wait_until([&] { return daemon->err().find("reload failed") != std::string::npos; }));
  sb_.drop("h3.toml", sb_.encode_job("shot", "h3"));
  ASSERT_TRUE(wait_until([&] { return sb_.count("done") == 2; }));
  daemon->signal(SIGTERM);
  EXPECT_EQ(daemon->wait(), 0);
  expect_done_job(sb_, "h2", 3, 16, 12);
}

// `flick bench` prints the peaks, then a row per case: time, rate, the share
// of the peak of the unit the case ran on and, with --window-peaks, that peak
// as re-measured between the case's repetitions. Speeds depend on the
// machine: this checks the table and that its numbers agree with each other.
TEST(Bench, CaseRowsBesideTheirPeaks) {
  Sandbox sb;
  const RunResult r = sb.run(
      {"bench", "--quick", "--window-peaks", "--filter", "attention bf16 clip 257x257"}, "bench");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("f32 FMA"), std::string::npos) << r.out;
  const bool bf16_dot = __builtin_cpu_supports("avx512bf16");
  int rows = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    const std::string head = "attention bf16 clip 257x257 16x80 ";
    if (line.rfind(head, 0) != 0) continue;
    ++rows;
    std::istringstream cols(line.substr(head.size()));
    std::string kernel, unit;
    double ms = 0, rate = 0;
    cols >> kernel >> ms >> rate >> unit;
    EXPECT_GT(ms, 0) << line;
    EXPECT_EQ(unit, "GFLOPS") << line;
    // 4 * 16 heads * 257 * 257 * 80 FLOPs in `ms`.
    EXPECT_NEAR(rate, 4.0 * 16 * 257 * 257 * 80 / (ms * 1e-3) * 1e-9, 0.01 * rate + 1) << line;
    if (bf16_dot) {
      EXPECT_NE(line.find("peak in its window"), std::string::npos) << line;
    }
  }
  EXPECT_GE(rows, 1) << r.out;
  // A filter that matches nothing runs no case.
  const RunResult none = sb.run({"bench", "--quick", "--filter", "no such case"}, "bench-none");
  EXPECT_EQ(none.code, 0) << none.err;
  EXPECT_EQ(none.out.find("attention"), std::string::npos) << none.out;
}

}  // namespace
}  // namespace flick::testing
