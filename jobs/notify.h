// systemd notification (sd_notify): READY=1 once config and pipelines are
// loaded, STATUS= with the job and frame progress, WATCHDOG=1 from the
// progress loop (never from a free-running thread, which would keep pinging
// through a hung kernel), RELOADING=1 around SIGHUP, STOPPING=1. Without
// NOTIFY_SOCKET (cron, a shell) every call is a cheap no-op.
#pragma once

#include <chrono>
#include <string>

namespace flick {

class Notifier {
 public:
  Notifier();

  void ready();
  void reloading();
  void stopping();
  // STATUS=; `force` skips the rate limit (at most ~4 updates a second).
  void status(const std::string& text, bool force = false);
  // Sends WATCHDOG=1 when half the watchdog interval has passed since the
  // last one. Call it from every loop that makes progress.
  void watchdog_tick();
  // The longest a loop may wait between ticks (a day when no watchdog).
  std::chrono::milliseconds max_wait() const;

 private:
  using Clock = std::chrono::steady_clock;
  void send(const std::string& message);

  bool enabled_ = false;
  std::chrono::microseconds watchdog_{0};
  Clock::time_point last_ping_;
  Clock::time_point last_status_;
};

}  // namespace flick
