// Disk full: a job rendering onto a filesystem too small for its outputs
// fails cleanly (a temporary failure, retried up to max_attempts) and leaves
// no partial output anywhere.
#include <sys/mount.h>

#include "integration_util.h"

namespace flick::testing {
namespace {

TEST(DiskFull, FailsCleanlyIsRetriedAndLeavesNothing) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "needs root to mount a small tmpfs as an output root (run make test as root "
                    "to include this test)";
  }
  Sandbox sb;
  const std::string small = sb.path("small");
  stdfs::create_directories(small);
  if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=256k") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno)
                 << "): no CAP_SYS_ADMIN in this container";
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{small};

  sb.write_config("max_attempts = 2", "[[pipeline]]\nname = \"encode\"\nkind = \"encode\"\n",
                  small);
  ASSERT_EQ(sb.drain().code, 0);
  // 24 frames of 96x96 as uncompressed PNG (level 0): ~27 KiB each, ~650 KiB in all.
  sb.make_frames("big", 24, 96, 96);
  std::string job = sb.encode_job("big", "unused", "frames = { format = \"png\", level = 0 }\n");
  job.replace(job.find(sb.path("out/unused")), sb.path("out/unused").size(), small + "/full");
  sb.drop("full.toml", job);
  // A job that fits is unaffected.
  sb.make_frames("tiny", 2, 8, 8);
  std::string fits = sb.encode_job("tiny", "unused", "frames = { format = \"png\" }\n");
  fits.replace(fits.find(sb.path("out/unused")), sb.path("out/unused").size(), small + "/fits");

  const RunResult r = sb.drain();
  EXPECT_EQ(r.code, 1) << r.err;  // failed after its attempts
  EXPECT_NE(r.err.find("requeued"), std::string::npos) << r.err;
  std::optional<toml::value> st = sb.status("failed", "full");
  ASSERT_TRUE(st) << r.err;
  EXPECT_EQ(toml::find<std::string>(*st, "state"), "failed");
  EXPECT_EQ(toml::find<int64_t>(*st, "attempts"), 2);
  EXPECT_EQ(toml::find<int64_t>(*st, "exit_code"), 75);
  const std::string message = toml::find<std::string>(*st, "error", "message");
  EXPECT_NE(message.find(std::strerror(ENOSPC)), std::string::npos) << message;
  EXPECT_TRUE(stdfs::exists(sb.spool("failed/full.toml")));
  EXPECT_TRUE(list(sb.spool("incoming")).empty());
  EXPECT_TRUE(list(sb.spool("active")).empty());
  // Nothing on the small filesystem: no partial directory, no temporaries.
  EXPECT_TRUE(list(small).empty()) << list(small).front();
  EXPECT_TRUE(leftovers(sb.root()).empty());

  sb.drop("fits.toml", fits);
  EXPECT_EQ(sb.drain().code, 0);
  expect_done_job(sb, "fits", 2, 8, 8);
}

}  // namespace
}  // namespace flick::testing
