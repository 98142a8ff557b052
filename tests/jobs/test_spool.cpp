#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <functional>
#include <vector>

#include "jobs/fs.h"
#include "jobs/spool.h"
#include "jobs_test_util.h"

namespace flick {
namespace {

TEST(Spool, CreatesItsDirectoriesWithTheirModes) {
  testing::ScratchDir dir;
  Expected<Spool> s = Spool::open(dir / "spool", /*create=*/true);
  ASSERT_TRUE(s.ok()) << s.status().message();
  struct stat st;
  ASSERT_EQ(::stat((dir / "spool/incoming").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 02730u);  // submit group drops, cannot list
  ASSERT_EQ(::stat((dir / "spool/active").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  for (const char* d : {"done", "failed", "quarantine", "tmp"}) {
    EXPECT_TRUE(std::filesystem::is_directory(dir / ("spool/" + std::string(d)))) << d;
  }
  EXPECT_FALSE(Spool::open(dir / "missing", /*create=*/false).ok());
}

// What systemd's RestrictSUIDSGID=yes installs: a seccomp filter that fails
// mkdir/chmod calls whose mode has S_ISUID or S_ISGID with EPERM (whether
// or not the call would do anything).
void restrict_suid_sgid() {
  const std::pair<long, int> calls[] = {
      {__NR_mkdir, 1}, {__NR_mkdirat, 2}, {__NR_chmod, 1}, {__NR_fchmod, 1}, {__NR_fchmodat, 2}};
  std::vector<sock_filter> f = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  for (const auto& [nr, arg] : calls) {
    f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
    f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 3));
    f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                         static_cast<uint32_t>(offsetof(seccomp_data, args) + 8 * arg)));
    f.push_back(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, S_ISUID | S_ISGID, 0, 1));
    f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM));
  }
  f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  const sock_fprog prog = {static_cast<unsigned short>(f.size()), f.data()};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    ::_exit(90);
  }
}

// Runs `body` in a child under restrict_suid_sgid(); its exit status.
int run_restricted(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    restrict_suid_sgid();
    // The filter is in force (else the test proves nothing).
    if (::mkdir("/nonexistent-flick-dir/x", 02755) == 0 || errno != EPERM) ::_exit(91);
    ::_exit(body());
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// Under RestrictSUIDSGID=yes the daemon opens a spool that systemd-tmpfiles
// made (incoming/ 2730) without trying to set the setgid bit, and creates a
// missing incoming/ without it rather than failing to start.
TEST(Spool, OpensAndCreatesUnderRestrictSuidSgid) {
  testing::ScratchDir dir;
  ASSERT_TRUE(Spool::open(dir / "made", /*create=*/true).ok());  // as tmpfiles would
  const int existing = run_restricted([&] {
    Expected<Spool> s = Spool::open(dir / "made", /*create=*/true);
    if (!s.ok()) std::fprintf(stderr, "%s\n", s.status().message().c_str());
    return s.ok() ? 0 : 1;
  });
  EXPECT_EQ(existing, 0);
  struct stat st;
  ASSERT_EQ(::stat((dir / "made/incoming").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 02730u);  // left as it was

  const int fresh = run_restricted([&] {
    Expected<Spool> s = Spool::open(dir / "fresh", /*create=*/true);
    if (!s.ok()) std::fprintf(stderr, "%s\n", s.status().message().c_str());
    return s.ok() ? 0 : 1;
  });
  EXPECT_EQ(fresh, 0);
  ASSERT_EQ(::stat((dir / "fresh/incoming").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0730u);  // setgid forbidden: made without
}

TEST(Spool, RefusesWorldWritableAndSymlinkedDirectories) {
  testing::ScratchDir dir;
  ASSERT_TRUE(Spool::open(dir / "spool", true).ok());
  ::chmod((dir / "spool/done").c_str(), 0777);
  Expected<Spool> s = Spool::open(dir / "spool", false);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("writable by everyone"), std::string::npos);
  ::chmod((dir / "spool/done").c_str(), 0700);
  std::filesystem::remove(dir / "spool/failed");
  std::filesystem::create_directories(dir / "elsewhere");
  ::symlink((dir / "elsewhere").c_str(), (dir / "spool/failed").c_str());
  EXPECT_FALSE(Spool::open(dir / "spool", false).ok());
}

TEST(Spool, ListsJobsInQueueOrder) {
  testing::ScratchDir dir;
  Expected<Spool> s = Spool::open(dir / "spool", true);
  ASSERT_TRUE(s.ok());
  const std::string in = dir / "spool/incoming/";
  for (const char* n : {"b.toml", "a.toml", "c.toml", ".tmp.toml", "x.status.toml", "notes.txt"}) {
    testing::write_text(in + n, "x");
  }
  // c is oldest; a and b share a time and go by name.
  const timespec old_time[2] = {{1000, 0}, {1000, 0}};
  const timespec same[2] = {{2000, 0}, {2000, 0}};
  ::utimensat(AT_FDCWD, (in + "c.toml").c_str(), old_time, 0);
  ::utimensat(AT_FDCWD, (in + "a.toml").c_str(), same, 0);
  ::utimensat(AT_FDCWD, (in + "b.toml").c_str(), same, 0);
  Expected<std::vector<Spool::Entry>> l = s->list_jobs(SpoolDir::kIncoming);
  ASSERT_TRUE(l.ok());
  std::vector<std::string> names;
  for (const auto& e : *l) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"c.toml", "a.toml", "b.toml"}));
}

TEST(Spool, LockIsExclusiveAndFollowsTheName) {
  testing::ScratchDir dir;
  Expected<Spool> s = Spool::open(dir / "spool", true);
  ASSERT_TRUE(s.ok());
  testing::write_text(dir / "spool/incoming/j.toml", "x");
  bool busy = false;
  Expected<fs::Fd> first = s->lock_job(SpoolDir::kIncoming, "j.toml", &busy);
  ASSERT_TRUE(first.ok());
  ASSERT_FALSE(busy);
  ASSERT_TRUE(first->valid());
  // Another open file description (another daemon) cannot take it.
  Expected<fs::Fd> second = s->lock_job(SpoolDir::kIncoming, "j.toml", &busy);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(busy);
  EXPECT_FALSE(second->valid());
  // After the holder moves it away and unlocks, a stale name is not locked.
  ASSERT_EQ(::renameat(s->fd(SpoolDir::kIncoming), "j.toml", s->fd(SpoolDir::kActive), "j.toml"),
            0);
  testing::write_text(dir / "spool/incoming/j.toml", "new");
  Expected<fs::Fd> third = s->lock_job(SpoolDir::kIncoming, "j.toml", &busy);
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE(busy);  // the new file is a different inode: free
  // Symlinks are never followed.
  ::symlink("/etc/passwd", (dir / "spool/incoming/l.toml").c_str());
  EXPECT_FALSE(s->lock_job(SpoolDir::kIncoming, "l.toml", &busy).ok());
}

TEST(Spool, StatusFilesAndTemporaries) {
  testing::ScratchDir dir;
  Expected<Spool> s = Spool::open(dir / "spool", true);
  ASSERT_TRUE(s.ok());
  JobStatus st;
  st.id = "j";
  st.state = JobState::kFailed;
  st.attempts = 3;
  ASSERT_TRUE(s->write_status(SpoolDir::kFailed, "j", st, false, true).ok());
  // Without replace an existing status is never overwritten.
  EXPECT_FALSE(s->write_status(SpoolDir::kFailed, "j", st, false, true).ok());
  Expected<std::optional<JobStatus>> back = s->read_status(SpoolDir::kFailed, "j");
  ASSERT_TRUE(back.ok());
  ASSERT_TRUE(back->has_value());
  EXPECT_EQ((*back)->attempts, 3);
  EXPECT_FALSE(s->read_status(SpoolDir::kDone, "j")->has_value());
  // A temporary of a process that is gone is reaped; a live one's is kept.
  testing::write_text(dir / "spool/done/.x.status.toml.tmp.999999999.0", "");
  const std::string mine = ".y.tmp." + std::to_string(::getppid()) + ".0";
  testing::write_text(dir / ("spool/done/" + mine), "");
  s->reap_temporaries(false);
  EXPECT_FALSE(std::filesystem::exists(dir / "spool/done/.x.status.toml.tmp.999999999.0"));
  EXPECT_TRUE(std::filesystem::exists(dir / ("spool/done/" + mine)));
  ASSERT_TRUE(s->remove_status(SpoolDir::kFailed, "j").ok());
  EXPECT_FALSE(s->read_status(SpoolDir::kFailed, "j")->has_value());
}

TEST(Spool, JobFileStem) {
  EXPECT_EQ(job_file_stem("a.toml"), "a");
  EXPECT_EQ(job_file_stem("a.b.toml"), "a.b");
  EXPECT_EQ(job_file_stem("a.status.toml"), std::nullopt);
  EXPECT_EQ(job_file_stem(".a.toml"), std::nullopt);
  EXPECT_EQ(job_file_stem("a.txt"), std::nullopt);
  EXPECT_EQ(job_file_stem(".toml"), std::nullopt);
}

}  // namespace
}  // namespace flick
