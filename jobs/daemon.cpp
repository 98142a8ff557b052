#include "jobs/daemon.h"

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>

#include "jobs/config.h"
#include "jobs/notify.h"
#include "jobs/signals.h"
#include "jobs/spool.h"
#include "jobs/status_file.h"
#include "jobs/worker.h"
#include "runtime/log.h"

namespace flick {
namespace {

using Clock = std::chrono::steady_clock;

// Aggregate exit status of a drain: failed beats quarantined beats requeued.
class DrainOutcome {
 public:
  void add(const JobResult& r) {
    if (r.outcome == Outcome::kSkipped) return;
    status_ = worse_exit_code(status_, r.outcome == Outcome::kFailed ? 1 : exit_code_for(r));
  }
  void interrupted() { status_ = worse_exit_code(status_, 75); }
  int exit_status() const { return status_; }

 private:
  int status_ = 0;
};

class Daemon {
 public:
  explicit Daemon(const DaemonOptions& options) : options_(options) {}

  int run() {
    Expected<DaemonConfig> config = load_config(options_.config_path, options_.spool_override);
    if (!config.ok()) {
      log_error(config.status().message());
      return exit_code(config.status());
    }
    config_ = std::make_unique<DaemonConfig>(std::move(*config));
    notifier_.status("loading pipelines", true);
    if (Status s = load_pipelines(*config_, nullptr); !s.ok()) {
      log_error(s.message());
      return exit_code(s);
    }
    // A SIGTERM held while the pipelines loaded (seconds to minutes) stops
    // here, before the spool is touched or READY=1 is sent.
    if (stop_requested_in_start_up()) return stopped_exit_status();
    Expected<Spool> spool = Spool::open(config_->spool, /*create=*/true);
    if (!spool.ok()) {
      log_error(spool.status().message());
      return exit_code(spool.status());
    }
    spool_ = std::make_unique<Spool>(std::move(*spool));
    if (spool_->on_network_filesystem()) {
      log_warning("spool " + spool_->root() + " is on " + spool_->filesystem_name() +
                  ": inotify does not see other hosts' writes there; polling every " +
                  std::to_string(config_->rescan_interval_s) + " s");
    } else if (!options_.drain) {
      watch_incoming();  // before the first scan: files already there raise no event
    }
    make_worker();
    spool_->reap_temporaries(/*include_own=*/true);
    const int recovered = worker_->recover_orphans();
    if (recovered > 0)
      log_info("recovered " + std::to_string(recovered) + " job(s) of dead processes");
    if (!options_.drain) {
      notifier_.ready();
      log_info("serving " + spool_->root() + " with pipelines: " + config_->pipeline_names());
    }
    loop();
    if (!options_.drain) notifier_.stopping();
    if (signals_.stop_requested()) {
      log_info("stopped");
      if (options_.drain) drain_outcome_.interrupted();
    }
    return options_.drain ? drain_outcome_.exit_status() : 0;
  }

 private:
  bool stop_requested_in_start_up() {
    signals_.poll();
    if (!signals_.stop_requested()) return false;
    log_info("stopped during start-up");
    return true;
  }

  // serve stopped by a signal exits 0; an interrupted drain 75 (its jobs
  // are still queued: worth running again).
  int stopped_exit_status() {
    if (!options_.drain) return 0;
    drain_outcome_.interrupted();
    return drain_outcome_.exit_status();
  }

  void make_worker() {
    WorkerOptions wo;
    wo.stop = &signals_.stop_flag();
    wo.on_progress = [this](const Progress& p) { on_progress(p); };
    worker_ = std::make_unique<Worker>(*spool_, *config_, std::move(wo));
  }

  void watch_incoming() {
    inotify_ = fs::Fd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    if (!inotify_.valid() ||
        ::inotify_add_watch(inotify_.get(), spool_->path(SpoolDir::kIncoming).c_str(),
                            IN_MOVED_TO | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF) < 0) {
      log_warning("inotify unavailable (" + std::string(std::strerror(errno)) +
                  "); polling every " + std::to_string(config_->rescan_interval_s) + " s");
      inotify_ = fs::Fd();
    }
  }

  void on_progress(const Progress& p) {
    signals_.poll();  // a SIGTERM during a job stops it at the next block
    notifier_.watchdog_tick();
    if (p.frames_done == 0) {
      notifier_.status("job " + p.id + ": starting", true);
      return;
    }
    char fps[32];
    std::snprintf(fps, sizeof fps, "%.1f", p.fps);
    // Rate-limited, except the last frame: every job shows its final count.
    notifier_.status("job " + p.id + ": frame " + std::to_string(p.frames_done) + "/" +
                         std::to_string(p.frames_total) + ", " + fps + " fps",
                     p.frames_done == p.frames_total);
  }

  void reload() {
    notifier_.reloading();
    log_info("SIGHUP: reloading " + options_.config_path);
    Expected<DaemonConfig> fresh = load_config(options_.config_path, options_.spool_override);
    Status s = fresh.ok() ? load_pipelines(*fresh, config_.get()) : fresh.status();
    if (!s.ok()) {
      log_error("reload failed, keeping the running configuration:\n" + s.message());
    } else {
      if (fresh->spool != config_->spool) {
        log_warning("a new spool (" + fresh->spool + ") takes a restart; still serving " +
                    config_->spool);
        fresh->spool = config_->spool;
      }
      config_ = std::make_unique<DaemonConfig>(std::move(*fresh));
      make_worker();
      log_info("configuration reloaded; pipelines: " + config_->pipeline_names());
    }
    notifier_.ready();
  }

  // Rescans incoming/: the jobs that may run now, and when the next delayed
  // one becomes due.
  void rescan() {
    Expected<std::vector<std::string>> names = worker_->runnable_jobs(&next_due_ns_);
    if (!names.ok()) {
      log_error(names.status().message());
      return;
    }
    queue_.assign(names->begin(), names->end());
  }

  // Drains inotify events; true when any arrived. Names are not used: a
  // rescan follows every wake-up, which also covers IN_Q_OVERFLOW (events
  // lost) and files whose events were never seen.
  bool read_events() {
    if (!inotify_.valid()) return false;
    alignas(inotify_event) char buf[16384];
    bool any = false;
    for (;;) {
      const ssize_t n = ::read(inotify_.get(), buf, sizeof buf);
      if (n <= 0) break;
      any = true;
      for (ssize_t off = 0; off < n;) {
        const auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
        if (ev->mask & IN_Q_OVERFLOW) log_debug("inotify queue overflowed; rescanning");
        if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) {
          log_warning(spool_->path(SpoolDir::kIncoming) + " was moved or removed; polling");
          inotify_ = fs::Fd();
          return true;
        }
        off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
      }
    }
    return any;
  }

  void wait_for_work() {
    auto timeout = std::chrono::milliseconds(int64_t{config_->rescan_interval_s} * 1000);
    if (next_due_ns_ > 0) {
      const auto due = std::chrono::milliseconds((next_due_ns_ - unix_now_ns()) / 1000000 + 1);
      timeout = std::min(timeout, std::max(due, std::chrono::milliseconds(1)));
    }
    timeout = std::min(timeout, notifier_.max_wait());
    pollfd fds[2] = {{signals_.fd(), POLLIN, 0}, {inotify_.get(), POLLIN, 0}};
    const int nfds = inotify_.valid() ? 2 : 1;
    const int rc = ::poll(fds, nfds, static_cast<int>(timeout.count()));
    // The events only wake the loop; the rescan that follows is what counts.
    if (rc > 0 && nfds == 2 && (fds[1].revents & POLLIN)) read_events();
  }

  void loop() {
    last_recovery_ = Clock::now();
    for (;;) {
      signals_.poll();
      notifier_.watchdog_tick();
      if (signals_.stop_requested()) return;
      if (signals_.take_reload()) reload();
      if (!options_.drain &&
          Clock::now() - last_recovery_ >= std::chrono::seconds(config_->rescan_interval_s)) {
        // A daemon sharing the spool may have died since the last look.
        worker_->recover_orphans();
        last_recovery_ = Clock::now();
      }
      if (queue_.empty()) rescan();
      if (!queue_.empty()) {
        const std::string name = queue_.front();
        queue_.pop_front();
        const JobResult r = worker_->process_incoming(name);
        drain_outcome_.add(r);
        if (r.outcome == Outcome::kInterrupted) return;
        if (r.outcome != Outcome::kSkipped) ++jobs_handled_;
        notifier_.status("idle; " + std::to_string(jobs_handled_) + " job(s) handled",
                         queue_.empty());
        continue;
      }
      if (options_.drain) {
        if (next_due_ns_ > 0) {
          log_info("drain: jobs waiting for a retry remain in " +
                   spool_->path(SpoolDir::kIncoming));
          drain_outcome_.interrupted();
        }
        return;
      }
      wait_for_work();
    }
  }

  DaemonOptions options_;
  SignalWatch signals_;
  Notifier notifier_;
  std::unique_ptr<DaemonConfig> config_;
  std::unique_ptr<Spool> spool_;
  std::unique_ptr<Worker> worker_;
  fs::Fd inotify_;
  std::deque<std::string> queue_;
  int64_t next_due_ns_ = 0;
  Clock::time_point last_recovery_{};
  int64_t jobs_handled_ = 0;
  DrainOutcome drain_outcome_;
};

}  // namespace

int run_daemon(const DaemonOptions& options) {
  Daemon d(options);
  return d.run();
}

}  // namespace flick
