// SIGTERM, SIGINT and SIGHUP delivered through a signalfd: blocked in every
// thread (set before any thread starts, so pipeline and encoder threads
// inherit the mask), read from the event loop and, during a job, from the
// progress callback. No handler, no global state.
#pragma once

#include <atomic>

#include "jobs/fs.h"

namespace flick {

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread. main() calls it
// first, before the config, the pipelines or any library starts a thread:
// threads inherit the mask, so none of them can take a signal's default
// action (death) and the SignalWatch made later sees every one.
void block_stop_signals();
// Undoes block_stop_signals() for commands that do not watch the signals
// (validate, submit, ...): SIGTERM must still end them.
void unblock_stop_signals();

class SignalWatch {
 public:
  // Blocks the signals and opens the signalfd. Call first thing in a command.
  // The signals stay blocked for the rest of the process.
  SignalWatch();
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

  int fd() const { return fd_.get(); }
  // Reads every pending signal without blocking: SIGTERM/SIGINT set the stop
  // flag, SIGHUP the reload flag.
  void poll();

  const std::atomic<bool>& stop_flag() const { return stop_; }
  bool stop_requested() const { return stop_.load(); }
  // True once per SIGHUP (the flag is cleared).
  bool take_reload();

 private:
  fs::Fd fd_;
  std::atomic<bool> stop_{false};
  bool reload_ = false;
};

}  // namespace flick
