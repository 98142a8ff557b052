#include "jobs/signals.h"

#include <pthread.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "runtime/log.h"

namespace flick {
namespace {

sigset_t watched_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

}  // namespace

void block_stop_signals() {
  const sigset_t set = watched_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void unblock_stop_signals() {
  const sigset_t set = watched_signals();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

SignalWatch::SignalWatch() {
  const sigset_t set = watched_signals();
  block_stop_signals();  // already blocked by main(); a no-op then
  fd_ = fs::Fd(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
  FLICK_CHECK(fd_.valid(), "signalfd");
}

void SignalWatch::poll() {
  signalfd_siginfo info;
  while (::read(fd_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    if (info.ssi_signo == SIGHUP) {
      reload_ = true;
    } else if (!stop_.exchange(true)) {
      log_info(std::string("received ") + (info.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM") +
               ": stopping after the current block");
    }
  }
}

bool SignalWatch::take_reload() {
  const bool r = reload_;
  reload_ = false;
  return r;
}

}  // namespace flick
