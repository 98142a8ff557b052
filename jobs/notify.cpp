#include "jobs/notify.h"

#include <systemd/sd-daemon.h>

#include <cstdint>
#include <cstdlib>

#include "runtime/log.h"

namespace flick {

Notifier::Notifier() {
  enabled_ = std::getenv("NOTIFY_SOCKET") != nullptr;
  uint64_t usec = 0;
  // > 0 only when WATCHDOG_USEC is set (and WATCHDOG_PID, if set, is us).
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) watchdog_ = std::chrono::microseconds(usec);
  last_ping_ = Clock::now();
  last_status_ = Clock::time_point{};
}

void Notifier::send(const std::string& message) {
  if (!enabled_) return;
  const int rc = sd_notify(0, message.c_str());
  if (rc < 0) log_debug("sd_notify failed: " + std::to_string(-rc));
}

void Notifier::ready() { send("READY=1\nSTATUS=ready"); }

void Notifier::reloading() { send("RELOADING=1"); }

void Notifier::stopping() { send("STOPPING=1"); }

void Notifier::status(const std::string& text, bool force) {
  const Clock::time_point now = Clock::now();
  if (!force && now - last_status_ < std::chrono::milliseconds(250)) return;
  last_status_ = now;
  send("STATUS=" + text);
}

void Notifier::watchdog_tick() {
  if (watchdog_.count() == 0) return;
  const Clock::time_point now = Clock::now();
  if (now - last_ping_ < watchdog_ / 2) return;
  last_ping_ = now;
  send("WATCHDOG=1");
}

std::chrono::milliseconds Notifier::max_wait() const {
  if (watchdog_.count() == 0) return std::chrono::hours(24);
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(watchdog_ / 4));
}

}  // namespace flick
