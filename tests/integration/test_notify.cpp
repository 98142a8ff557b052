// sd_notify as systemd sees it: the test is the service manager, with its own
// NOTIFY_SOCKET and WATCHDOG_USEC.
#include <sys/socket.h>
#include <sys/un.h>

#include "integration_util.h"

namespace flick::testing {
namespace {

// A datagram socket like systemd's notify socket; collects messages.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    ok_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~NotifySocket() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  bool ok() const { return ok_; }
  // Reads what has arrived; each datagram may hold several NAME=value lines.
  void poll() {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      std::string msg(buf, static_cast<size_t>(n));
      size_t i = 0;
      while (i < msg.size()) {
        const size_t j = std::min(msg.find('\n', i), msg.size());
        if (j > i) lines_.push_back(msg.substr(i, j - i));
        i = j + 1;
      }
    }
  }
  const std::vector<std::string>& lines() const { return lines_; }
  // Index of the first line starting with `prefix` at or after `from`, or -1.
  int find(const std::string& prefix, int from = 0) const {
    for (int i = from; i < static_cast<int>(lines_.size()); ++i) {
      if (lines_[i].rfind(prefix, 0) == 0) return i;
    }
    return -1;
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool ok_ = false;
  std::vector<std::string> lines_;
};

TEST(Notify, ReadyStatusWatchdogStoppingInOrder) {
  Sandbox sb;
  sb.write_config();
  ASSERT_EQ(sb.drain().code, 0);
  sb.make_frames("shot", 40, 32, 32);
  NotifySocket sock(sb.path("notify.sock"));
  ASSERT_TRUE(sock.ok());
  auto daemon =
      sb.serve("notify", {{"NOTIFY_SOCKET", sb.path("notify.sock")}, {"WATCHDOG_USEC", "200000"}});
  ASSERT_TRUE(wait_until([&] {
    sock.poll();
    return sock.find("READY=1") >= 0;
  }));
  // READY comes once the config and pipelines are loaded: before any job.
  sb.drop("n1.toml", sb.encode_job("shot", "n1"));
  ASSERT_TRUE(wait_until([&] { return sb.count("done") == 1; }));
  // Idle for a while: the watchdog is still fed from the event loop.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  daemon->signal(SIGTERM);
  EXPECT_EQ(daemon->wait(), 0) << daemon->err();
  sock.poll();
  std::string all;
  for (const std::string& l : sock.lines()) all += l + "\n";
  const int ready = sock.find("READY=1");
  const int job_status = sock.find("STATUS=job n1", ready);
  const int frame_status = sock.find("STATUS=job n1: frame ", ready);
  const int watchdog = sock.find("WATCHDOG=1", ready);
  const int stopping = sock.find("STOPPING=1");
  ASSERT_GE(ready, 0) << all;
  ASSERT_GE(frame_status, 0) << all;
  EXPECT_EQ(sock.find("READY=1", ready + 1), -1) << "READY twice\n" << all;
  EXPECT_GT(job_status, ready) << all;
  EXPECT_GT(frame_status, ready) << all;
  EXPECT_GT(watchdog, ready) << all;
  EXPECT_GT(stopping, std::max(job_status, watchdog)) << all;
  EXPECT_EQ(stopping, static_cast<int>(sock.lines().size()) - 1) << "STOPPING is last\n" << all;
  // The last frame's count always gets through the rate limit.
  EXPECT_GE(sock.find("STATUS=job n1: frame 40/40, ", ready), 0) << all;
  EXPECT_NE(sock.lines()[frame_status].find(" fps"), std::string::npos) << all;
  // After the job finished, while idle, WATCHDOG=1 kept coming.
  int idle_pings = 0;
  for (int i = sock.find("STATUS=idle", frame_status); i >= 0 && i < stopping; ++i) {
    idle_pings += sock.lines()[i] == "WATCHDOG=1";
  }
  EXPECT_GE(idle_pings, 1) << all;
}

TEST(Notify, NoSocketIsHarmless) {
  Sandbox sb;
  sb.write_config();
  ASSERT_EQ(sb.drain().code, 0);
  sb.make_frames("shot", 2, 16, 16);
  sb.drop("q.toml", sb.encode_job("shot", "q"));
  auto daemon = sb.serve("nosock");
  ASSERT_TRUE(wait_until([&] { return sb.count("done") == 1; }));
  daemon->signal(SIGTERM);
  EXPECT_EQ(daemon->wait(), 0);
}

}  // namespace
}  // namespace flick::testing
