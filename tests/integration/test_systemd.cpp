// Packaging: `make install` (cmake --install) puts the units, the
// sysusers/tmpfiles snippets and the example config in place, and
// systemd-analyze verify accepts the installed units.
#include "integration_util.h"

namespace flick::testing {
namespace {

// The build tree holding FLICK_BINARY (the first parent with a CMakeCache.txt).
std::string build_dir() {
  for (stdfs::path p = stdfs::path(FLICK_BINARY).parent_path(); p != p.root_path();
       p = p.parent_path()) {
    if (stdfs::exists(p / "CMakeCache.txt")) return p;
  }
  return "";
}

int sh(const std::string& command, std::string* output) {
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  output->clear();
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) output->append(buf, n);
  const int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

bool have(const std::string& tool) {
  std::string out;
  return sh("command -v " + tool, &out) == 0;
}

class Packaging : public ::testing::Test {
 protected:
  void SetUp() override {
    build_ = build_dir();
    ASSERT_FALSE(build_.empty()) << "no CMakeCache.txt above " << FLICK_BINARY;
    prefix_ = sb_.path("prefix");
    std::string out;
    ASSERT_EQ(sh("cmake --install '" + build_ + "' --prefix '" + prefix_ + "'", &out), 0) << out;
  }
  Sandbox sb_;
  std::string build_, prefix_;
};

TEST_F(Packaging, InstallsUnitsSnippetsAndExampleConfig) {
  for (const char* f :
       {"bin/flick", "lib/systemd/system/flick.service", "lib/systemd/system/flick-drain.service",
        "lib/systemd/system/flick-drain.timer", "lib/sysusers.d/flick.conf",
        "lib/tmpfiles.d/flick.conf", "share/doc/flick/flick.toml.example"}) {
    EXPECT_TRUE(stdfs::exists(prefix_ + "/" + f)) << f;
  }
  const std::string unit = read_text(prefix_ + "/lib/systemd/system/flick.service");
  EXPECT_NE(unit.find("ExecStart=" + prefix_ + "/bin/flick serve"), std::string::npos) << unit;
  EXPECT_NE(unit.find("Type=notify"), std::string::npos);
  EXPECT_NE(unit.find("WatchdogSec="), std::string::npos);
  EXPECT_NE(unit.find("ReadWritePaths=/var/spool/flick /srv/render/out"), std::string::npos);
  EXPECT_EQ(unit.find("@FLICK_BIN@"), std::string::npos);

  // The example config is accepted once its roots exist.
  std::string config = read_text(prefix_ + "/share/doc/flick/flick.toml.example");
  for (auto [from, to] : {std::pair<std::string, std::string>{"/var/spool/flick", sb_.spool()},
                          {"/srv/render/in", sb_.path("in")},
                          {"/srv/render/out", sb_.path("out")}}) {
    config.replace(config.find(from), from.size(), to);
  }
  write_text(sb_.config(), config);
  const RunResult r = sb_.drain();
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(Packaging, SystemdAnalyzeVerifyPassesOnTheInstalledUnits) {
  if (!have("systemd-analyze")) GTEST_SKIP() << "systemd-analyze is not installed";
  const std::string dir = prefix_ + "/lib/systemd/system/";
  std::string out;
  // --man=no: Documentation=man:... links are not checked (a minimal system
  // has no man; what the units say is what is tested).
  const int rc =
      sh("SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no '" + dir + "flick.service' '" +
             dir + "flick-drain.service' '" + dir + "flick-drain.timer'",
         &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("flick"), std::string::npos) << "warnings about the units:\n" << out;
}

TEST_F(Packaging, SysusersAndTmpfilesSnippetsApply) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "needs root: the snippets create the flick user and chown the spool "
                    "(in a scratch root)";
  }
  if (!have("systemd-sysusers") || !have("systemd-tmpfiles")) {
    GTEST_SKIP() << "systemd-sysusers / systemd-tmpfiles are not installed";
  }
  // Applied to a scratch root, never to this machine.
  const std::string root = sb_.path("root");
  stdfs::create_directories(root + "/etc");
  std::string out;
  ASSERT_EQ(sh("systemd-sysusers --root='" + root + "' '" + prefix_ + "/lib/sysusers.d/flick.conf'",
               &out),
            0)
      << out;
  const std::string passwd = read_text(root + "/etc/passwd");
  const std::string group = read_text(root + "/etc/group");
  EXPECT_NE(passwd.find("flick:"), std::string::npos) << passwd;
  EXPECT_NE(group.find("flick-submit:"), std::string::npos) << group;
  EXPECT_NE(group.find(":flick\n"), std::string::npos) << "flick is a member of flick-submit\n"
                                                       << group;
  ASSERT_EQ(sh("systemd-tmpfiles --root='" + root + "' --create '" + prefix_ +
                   "/lib/tmpfiles.d/flick.conf'",
               &out),
            0)
      << out;
  struct stat st;
  ASSERT_EQ(::stat((root + "/var/spool/flick/incoming").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 02730u);
  ASSERT_EQ(::stat((root + "/var/spool/flick/active").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

}  // namespace
}  // namespace flick::testing
