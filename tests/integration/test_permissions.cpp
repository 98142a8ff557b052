// Who may do what, tried as the users themselves: the spool made with the
// modes of jobs/systemd/flick.tmpfiles (incoming/ 2730, owned by the
// daemon's user, group = the submit group), the submitter, an outsider and
// the daemon each run unprivileged through setpriv with numeric ids (no
// /etc/passwd entries needed). The test process itself must be root to set
// this up; root passes every permission check, so nothing here may run as
// root but the setup.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "integration_util.h"

namespace flick::testing {
namespace {

constexpr uid_t kDaemonUid = 61001;
constexpr gid_t kDaemonGid = 61001;
constexpr gid_t kSubmitGid = 61100;
constexpr uid_t kSubmitterUid = 61002;
constexpr uid_t kOutsiderUid = 61003;
constexpr gid_t kOutsiderGid = 61003;

struct Identity {
  uid_t uid;
  gid_t gid;
  gid_t extra_group;  // the only supplementary group
};
constexpr Identity kDaemon = {kDaemonUid, kDaemonGid, kSubmitGid};  // SupplementaryGroups=
constexpr Identity kSubmitter = {kSubmitterUid, kSubmitterUid, kSubmitGid};
constexpr Identity kOutsider = {kOutsiderUid, kOutsiderGid, kOutsiderGid};

// Runs `command` (a shell word list of paths without spaces) as `who`.
RunResult run_as(const Sandbox& sb, const Identity& who, const std::string& command,
                 const std::string& log) {
  const std::string out = sb.path("logs/" + log + ".out"), err = sb.path("logs/" + log + ".err");
  const std::string line = "setpriv --reuid=" + std::to_string(who.uid) +
                           " --regid=" + std::to_string(who.gid) +
                           " --groups=" + std::to_string(who.extra_group) + " " + command + " >" +
                           out + " 2>" + err + " </dev/null";
  const int st = std::system(line.c_str());
  RunResult r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

void make_dir(const std::string& path, mode_t mode, uid_t uid, gid_t gid) {
  ASSERT_EQ(::mkdir(path.c_str(), 0700), 0) << path;
  ASSERT_EQ(::chown(path.c_str(), uid, gid), 0) << path;
  ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;  // after chown, which clears setgid
}

class Permissions : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to make the users' spool (setpriv)";
    if (std::system("setpriv --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no setpriv";
    ASSERT_EQ(::chmod(sb_.root().c_str(), 0755), 0);
    ASSERT_EQ(::chmod(sb_.path("logs").c_str(), 0777), 0);  // every identity's output
    ASSERT_EQ(::chown(sb_.path("out").c_str(), kDaemonUid, kDaemonGid), 0);
    sb_.write_config();
    // What systemd-tmpfiles makes from jobs/systemd/flick.tmpfiles.
    make_dir(sb_.spool(), 0755, kDaemonUid, kDaemonGid);
    make_dir(sb_.spool("incoming"), 02730, kDaemonUid, kSubmitGid);
    make_dir(sb_.spool("active"), 0700, kDaemonUid, kDaemonGid);
    for (const char* d : {"done", "failed", "quarantine"}) {
      make_dir(sb_.spool(d), 0750, kDaemonUid, kSubmitGid);
    }
    make_dir(sb_.spool("tmp"), 0700, kDaemonUid, kDaemonGid);
    sb_.make_frames("shot", 2, 16, 16);
    stdfs::create_directories(sb_.path("jobs"));
    write_text(sb_.path("jobs/shot.toml"),
               sb_.encode_job("shot", "shot", "frames = { format = \"png\" }\n"));
  }

  std::string flick(const std::string& sub, const std::string& args = "") const {
    return std::string(FLICK_BINARY) + " " + sub + " --config " + sb_.config() + " " + args;
  }

  Sandbox sb_;
};

// A member of the submit group submits into incoming/, which it cannot
// list; the file takes the submit group (setgid), and the daemon's user
// (a member of that group, as the unit's SupplementaryGroups= makes it)
// renders it.
TEST_F(Permissions, SubmitGroupMemberSubmitsAndTheDaemonRendersIt) {
  const RunResult submit =
      run_as(sb_, kSubmitter, flick("submit", sb_.path("jobs/shot.toml")), "submit-member");
  ASSERT_EQ(submit.code, 0) << submit.err;
  EXPECT_EQ(submit.out, sb_.spool("incoming/shot.toml") + "\n");
  struct stat st;
  ASSERT_EQ(::stat(sb_.spool("incoming/shot.toml").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kSubmitterUid);
  EXPECT_EQ(st.st_gid, kSubmitGid);  // from incoming/'s setgid bit
  EXPECT_EQ(st.st_mode & 07777, 0640u);

  // incoming/ is write+search for the group: no listing the others' jobs.
  const RunResult ls = run_as(sb_, kSubmitter, "ls -A " + sb_.spool("incoming"), "ls-member");
  EXPECT_NE(ls.code, 0);
  EXPECT_NE(ls.err.find("Permission denied"), std::string::npos) << ls.err;

  const RunResult drain = run_as(sb_, kDaemon, flick("drain"), "drain");
  EXPECT_EQ(drain.code, 0) << drain.err;
  expect_done_job(sb_, "shot", 2, 16, 16);
}

// Someone outside the submit group cannot submit, and is told why.
TEST_F(Permissions, OutsiderCannotSubmit) {
  const RunResult submit =
      run_as(sb_, kOutsider, flick("submit", sb_.path("jobs/shot.toml")), "submit-outsider");
  EXPECT_EQ(submit.code, 75) << submit.err;
  EXPECT_NE(submit.err.find("submitting to " + sb_.spool("incoming") + ": Permission denied"),
            std::string::npos)
      << submit.err;
  EXPECT_NE(submit.err.find("members of its group"), std::string::npos) << submit.err;
  EXPECT_TRUE(list(sb_.spool("incoming")).empty());
}

}  // namespace
}  // namespace flick::testing
