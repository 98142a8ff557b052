#include "jobs/worker.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>

#include "io/output_sink.h"
#include "jobs/sha256.h"
#include "runtime/log.h"

namespace flick {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::string host_name() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

// Cleanup after the outcome is decided: a failure there is worth a log line,
// not a different outcome.
void warn_if_error(const Status& s) {
  if (!s.ok()) log_warning(s.message());
}

bool permanent(const Status& s) {
  return s.code() == StatusCode::kInvalidInput || s.code() == StatusCode::kNotFound ||
         s.code() == StatusCode::kUsage;
}

Diagnostic file_diagnostic(const std::string& file, const std::string& what,
                           StatusCode code = StatusCode::kInvalidInput) {
  Diagnostics d(file);
  d.error_in_file("", what, code);
  return d.first();
}

Diagnostic runtime_diagnostic(const std::string& file, const Status& s) {
  Diagnostic d;
  d.code = s.code();
  d.file = file;
  d.message = s.message();
  return d;
}

// What the exception being handled says (inside a catch block only).
std::string current_exception_text() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception of unknown type";
  }
}

// The output directory's parent, created below its deepest existing
// ancestor one component at a time without following symlinks. The
// ancestor is opened beneath its output root with no symlink followed: one
// swapped in since the job was checked fails the open.
Expected<fs::Fd> open_output_parent(const OutputDir& out, const std::vector<Root>& roots) {
  FLICK_ASSIGN_OR_RETURN(fs::Fd dir,
                         open_beneath(out.base, roots, O_RDONLY | O_DIRECTORY, "output.dir"));
  std::string display = out.base;
  for (const std::string& c : out.create) {
    display = fs::join(display, c);
    if (::mkdirat(dir.get(), c.c_str(), 0755) != 0 && errno != EEXIST) {
      return errno_status("creating", display, errno);
    }
    FLICK_ASSIGN_OR_RETURN(fs::Fd sub, fs::open_dir_at(dir.get(), c, display));
    dir = std::move(sub);
  }
  return dir;
}

// The name of directory `fd` that the output writers (libavformat, libpng:
// they take paths) use: /proc/self/fd/N reaches the directory this process
// created and locked whatever is renamed or swapped along `display` since.
// Without /proc, `display` itself.
std::string through_descriptor(int fd, const std::string& display) {
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  struct stat by_proc, by_fd;
  if (::stat(proc.c_str(), &by_proc) == 0 && ::fstat(fd, &by_fd) == 0 &&
      by_proc.st_ino == by_fd.st_ino && by_proc.st_dev == by_fd.st_dev) {
    return proc;
  }
  log_warning("/proc/self/fd is not available: writing outputs by path into " + display);
  return display;
}

// `s` with `alias` replaced by `path` in its message (errors say where the
// user will look, not /proc/self/fd/N).
Status with_path_for(const Status& s, const std::string& alias, const std::string& path) {
  if (s.ok() || alias == path) return s;
  std::string m = s.message();
  for (size_t p = 0; (p = m.find(alias, p)) != std::string::npos; p += path.size()) {
    m.replace(p, alias.size(), path);
  }
  return Status(s.code(), m);
}

std::string parent_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_of(const std::string& path) { return path.substr(path.rfind('/') + 1); }

}  // namespace

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kDone: return "done";
    case Outcome::kAlreadyDone: return "already done";
    case Outcome::kQuarantined: return "quarantined";
    case Outcome::kRequeued: return "requeued";
    case Outcome::kFailed: return "failed";
    case Outcome::kInterrupted: return "interrupted";
    case Outcome::kSkipped: return "skipped";
  }
  return "?";
}

int exit_code_for(const JobResult& r) {
  switch (r.outcome) {
    case Outcome::kDone:
    case Outcome::kAlreadyDone: return 0;
    case Outcome::kQuarantined: return 65;
    case Outcome::kRequeued:
    case Outcome::kInterrupted:
    case Outcome::kSkipped: return 75;
    case Outcome::kFailed: return r.status.ok() ? 1 : exit_code(r.status);
  }
  return 1;
}

int worse_exit_code(int a, int b) {
  auto rank = [](int c) { return c == 0 ? 0 : c == 75 ? 1 : c == 65 ? 2 : 3; };
  return rank(a) >= rank(b) ? a : b;
}

// A job file held under its flock.
struct Worker::Claim {
  fs::Fd lock;
  SpoolDir dir = SpoolDir::kIncoming;  // where the file is now
  std::string name;                    // its name there
  std::string display;                 // the path shown in errors: where it was submitted
  std::string stem;
  std::string text;
  std::string sha256;
  int64_t submitted_ns = 0;
  int64_t started_ns = 0;
  Clock::time_point start;
  double validate_ms = 0;
};

Worker::Worker(const Spool& spool, const DaemonConfig& config, WorkerOptions options)
    : spool_(spool), config_(config), options_(std::move(options)), host_(host_name()) {}

JobStatus Worker::base_status(const Claim& c, const std::string& id) const {
  JobStatus s;
  s.id = id;
  s.job_file = c.display;
  s.job_sha256 = c.sha256;
  s.submitted_ns = c.submitted_ns;
  s.started_ns = c.started_ns;
  s.host = host_;
  s.pid = static_cast<int>(::getpid());
  return s;
}

JobResult Worker::process_incoming(const std::string& name) {
  Claim c;
  c.dir = SpoolDir::kIncoming;
  c.name = name;
  c.display = spool_.path(SpoolDir::kIncoming, name);
  c.stem = job_file_stem(name).value_or(name);
  c.start = Clock::now();
  c.started_ns = unix_now_ns();

  struct stat st;
  if (::fstatat(spool_.fd(SpoolDir::kIncoming), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return {Outcome::kSkipped, c.stem, ok_status()};
  }
  if (!S_ISREG(st.st_mode)) {
    // Never opened: a symlink could point anywhere, a FIFO would block.
    const char* what = S_ISLNK(st.st_mode) ? "a symlink" : "not a regular file";
    return quarantine(c,
                      file_diagnostic(c.display, "refused: the job file is " + std::string(what)));
  }
  bool busy = false;
  Expected<fs::Fd> lock = spool_.lock_job(SpoolDir::kIncoming, name, &busy);
  if (!lock.ok()) {
    if (lock.status().code() == StatusCode::kNotFound)
      return {Outcome::kSkipped, c.stem, ok_status()};
    // Unreadable by the daemon: wrong owner or mode. Nothing can be locked,
    // so the quarantine move races only with other daemons doing the same.
    return quarantine(c, file_diagnostic(c.display, "refused: " + lock.status().message()));
  }
  if (busy) return {Outcome::kSkipped, c.stem, ok_status()};
  c.lock = std::move(*lock);
  try {
    return claim_and_run(c);
  } catch (...) {
    return contain(c, current_exception_text());
  }
}

// Nothing done with one job's bytes may end the process: an exception that
// escaped the boundaries around parsing and rendering ends this job only,
// quarantined while it is still in incoming/, failed once claimed.
JobResult Worker::contain(Claim& c, const std::string& what) {
  const std::string message = "internal error: " + what;
  log_error("job " + c.display + ": " + message);
  try {
    if (c.dir == SpoolDir::kIncoming) return quarantine(c, file_diagnostic(c.display, message));
    return fail(c, c.stem, Status(StatusCode::kInternal, message), 1, "");
  } catch (...) {
    // Even the bookkeeping failed (out of memory?): leave the file where it
    // is for the next pass.
    return {Outcome::kSkipped, c.stem, Status(StatusCode::kInternal, message)};
  }
}

JobResult Worker::claim_and_run(Claim& c) {
  struct stat st;
  if (::fstat(c.lock.get(), &st) != 0) {
    return {Outcome::kSkipped, c.stem, errno_status("stat", c.display, errno)};
  }
  c.submitted_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  if (!options_.foreground) {
    // Spool files of the wrong owner or mode are refused: a job is accepted
    // from this daemon's user, root, or the group of incoming/ (the submit
    // group), and must not be writable by anyone else after submission.
    const bool owner_ok =
        st.st_uid == ::geteuid() || st.st_uid == 0 || st.st_gid == spool_.incoming_gid();
    if (!S_ISREG(st.st_mode) || st.st_nlink != 1) {
      return quarantine(
          c, file_diagnostic(c.display, "refused: the job file has " + std::to_string(st.st_nlink) +
                                            " hard links (expected 1)"));
    }
    if (!owner_ok) {
      return quarantine(
          c, file_diagnostic(c.display, "refused: the job file is owned by uid " +
                                            std::to_string(st.st_uid) + " gid " +
                                            std::to_string(st.st_gid) +
                                            ", neither this daemon's user nor the group of " +
                                            spool_.path(SpoolDir::kIncoming)));
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      return quarantine(
          c, file_diagnostic(c.display, std::string("refused: the job file's mode ") + mode +
                                            " lets group or others write it (chmod go-w)"));
    }
  }
  if (st.st_size > config_.max_job_bytes) {
    return quarantine(c,
                      file_diagnostic(c.display, "the job file is " + std::to_string(st.st_size) +
                                                     " bytes, over the limit of " +
                                                     std::to_string(config_.max_job_bytes) +
                                                     " (max_job_bytes in " + config_.file + ")"));
  }
  bool over = false;
  Expected<std::string> text =
      fs::read_limited(c.lock.get(), config_.max_job_bytes, &over, c.display);
  if (!text.ok()) return {Outcome::kSkipped, c.stem, text.status()};
  if (over) {
    return quarantine(
        c, file_diagnostic(c.display, "the job file is over the limit of " +
                                          std::to_string(config_.max_job_bytes) +
                                          " bytes (max_job_bytes in " + config_.file + ")"));
  }
  c.text = std::move(*text);
  c.sha256 = sha256_hex(c.text);

  Diagnostics diag(c.display);
  std::optional<Job> job;
  try {
    job = parse_job({c.display, c.stem, c.text}, config_, diag);
  } catch (...) {
    // A bug the job's bytes reached: this job is refused, the daemon lives.
    return quarantine(c, file_diagnostic(c.display, "internal error while checking the job: " +
                                                        current_exception_text()));
  }
  if (!job) {
    if (!permanent(diag.status())) {
      // An I/O error while checking inputs: worth another try, not quarantine.
      return requeue(c, c.stem, 0, config_.retry_delay_s, Outcome::kRequeued, diag.status());
    }
    Diagnostic first = diag.first();
    first.message = diag.status().message();  // every error, not only the first
    return quarantine(c, first);
  }

  // Duplicate ids: the same content again is a rerun of a finished job;
  // different content under a finished job's id is refused.
  Expected<std::optional<JobStatus>> done = spool_.read_status(SpoolDir::kDone, job->id);
  if (!done.ok()) return {Outcome::kSkipped, job->id, done.status()};
  if (done->has_value()) {
    if ((*done)->job_sha256 == c.sha256) {
      log_info("job " + job->id + ": already done (" + spool_.path(SpoolDir::kDone, job->id) +
               kStatusSuffix + ")");
      if (c.dir == SpoolDir::kIncoming) ::unlinkat(spool_.fd(c.dir), c.name.c_str(), 0);
      return {Outcome::kAlreadyDone, job->id, ok_status()};
    }
    return quarantine(c,
                      job->error_at("id",
                                    "duplicate id \"" + job->id +
                                        "\": a different job with this id is already done (" +
                                        spool_.path(SpoolDir::kDone, job->id) + kStatusSuffix + ")",
                                    "id already used"));
  }

  // The claim: into active/ under the id, never replacing another job.
  const std::string active_name = job->id + kJobSuffix;
  if (c.dir == SpoolDir::kIncoming) {
    const int err = fs::rename_noreplace(spool_.fd(SpoolDir::kIncoming), c.name,
                                         spool_.fd(SpoolDir::kActive), active_name);
    if (err == EEXIST) {
      // Same content: the same job submitted twice while it runs; it is
      // taken again (and found done) after the running one finishes.
      fs::Fd other(::openat(spool_.fd(SpoolDir::kActive), active_name.c_str(),
                            O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
      if (other.valid()) {
        Expected<std::string> h =
            sha256_fd(other.get(), spool_.path(SpoolDir::kActive, active_name));
        if (h.ok() && *h == c.sha256) return {Outcome::kSkipped, job->id, ok_status()};
      }
      return quarantine(c, job->error_at("id",
                                         "duplicate id \"" + job->id +
                                             "\": a different job with this id is active (" +
                                             spool_.path(SpoolDir::kActive, active_name) + ")",
                                         "id already used"));
    }
    if (err != 0) {
      return {Outcome::kSkipped, job->id, errno_status("claiming", c.display, err)};
    }
    c.dir = SpoolDir::kActive;
    c.name = active_name;
    c.stem = job->id;
  }
  c.validate_ms = ms_since(c.start);
  return run_claimed(c, *job);
}

JobResult Worker::run_claimed(Claim& c, Job& job) {
  Expected<std::optional<JobStatus>> ledger_read = spool_.read_status(SpoolDir::kActive, job.id);
  const std::optional<JobStatus> ledger =
      ledger_read.ok() ? std::move(*ledger_read) : std::optional<JobStatus>();
  if (ledger && !ledger->job_sha256.empty() && ledger->job_sha256 != c.sha256) {
    return quarantine(c,
                      job.error_at("id",
                                   "duplicate id \"" + job.id +
                                       "\": a different job with this id is waiting for a "
                                       "retry (" +
                                       spool_.path(SpoolDir::kActive, job.id) + kStatusSuffix + ")",
                                   "id already used"),
                      /*owns_ledger=*/false);
  }
  const int previous_attempts = ledger ? ledger->attempts : 0;
  const std::string final_path = job.output_dir.final_path();
  const std::string partial_name = job.output_dir.leaf + ".partial";
  const std::string partial_path = job.output_dir.partial_path();

  Expected<fs::Fd> parent = open_output_parent(job.output_dir, config_.output_roots);
  if (!parent.ok()) {
    if (permanent(parent.status())) {
      return quarantine(c,
                        job.error_at("output.dir", parent.status().message(), "cannot create it"));
    }
    return retry_or_fail(c, job, parent.status(), previous_attempts + 1);
  }
  const int pfd = parent->get();

  // An existing output directory is never overwritten, unless it is this
  // job's own, renamed into place by an attempt that died before its commit.
  struct stat st;
  if (::fstatat(pfd, job.output_dir.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    const bool ours = ledger && ledger->partial_ino == st.st_ino &&
                      ledger->partial_dev == st.st_dev && S_ISDIR(st.st_mode);
    if (!ours) {
      return quarantine(c, job.error_at("output.dir",
                                        "'" + final_path +
                                            "' already exists (flick never overwrites an output "
                                            "directory; remove it or choose another)",
                                        "exists"));
    }
    log_info("job " + job.id + ": removing " + final_path + " left by an interrupted attempt");
    Status s = fs::remove_tree_at(pfd, job.output_dir.leaf, final_path);
    if (!s.ok()) return retry_or_fail(c, job, s, previous_attempts + 1);
  }
  // A .partial nobody holds is left from a dead attempt; one that is held
  // belongs to a job rendering there right now.
  if (::fstatat(pfd, partial_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    fs::Fd other(
        ::openat(pfd, partial_name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    const bool held = other.valid() && ::flock(other.get(), LOCK_EX | LOCK_NB) != 0;
    const bool ours = ledger && ledger->output_dir == final_path;
    if (held || !other.valid() || !ours) {
      return retry_or_fail(
          c, job,
          unavailable("'" + partial_path + "' exists: another job is rendering into " + final_path +
                      (held ? "" : " or died doing so (remove it if so)")),
          previous_attempts + 1);
    }
    Status s = fs::remove_tree_at(pfd, partial_name, partial_path);
    if (!s.ok()) return retry_or_fail(c, job, s, previous_attempts + 1);
  }

  // The ledger names the output directory before .partial exists and its
  // inode after, so a later attempt recognises what this one leaves behind.
  JobStatus running = base_status(c, job.id);
  running.state = JobState::kRunning;
  running.attempts = previous_attempts;
  running.pipeline = job.pipeline;
  running.output_dir = final_path;
  Status s = spool_.write_status(SpoolDir::kActive, job.id, running, /*replace=*/true,
                                 /*durable=*/false);
  if (!s.ok()) return retry_or_fail(c, job, s, previous_attempts + 1);
  if (::mkdirat(pfd, partial_name.c_str(), 0755) != 0) {
    return retry_or_fail(c, job, errno_status("creating", partial_path, errno),
                         previous_attempts + 1);
  }
  Expected<fs::Fd> partial = fs::open_dir_at(pfd, partial_name, partial_path);
  if (!partial.ok() || ::flock(partial->get(), LOCK_EX | LOCK_NB) != 0 ||
      ::fstat(partial->get(), &st) != 0) {
    warn_if_error(fs::remove_tree_at(pfd, partial_name, partial_path));
    return retry_or_fail(c, job, io_error("cannot open and lock " + partial_path),
                         previous_attempts + 1);
  }
  running.partial_dev = st.st_dev;
  running.partial_ino = st.st_ino;
  s = spool_.write_status(SpoolDir::kActive, job.id, running, true, false);
  if (!s.ok()) {
    warn_if_error(fs::remove_tree_at(pfd, partial_name, partial_path));
    return retry_or_fail(c, job, s, previous_attempts + 1);
  }

  // Render.
  log_info("job " + job.id + ": " + job.prepared->summary() + " -> " + final_path);
  const Clock::time_point render_start = Clock::now();
  int64_t frames_done = 0;
  RunContext ctx;
  ctx.stop = options_.stop;
  ctx.tap = options_.tap;
  ctx.progress = [&](int64_t done, int64_t total) {
    frames_done = done;
    if (!options_.on_progress) return;
    const double secs = std::chrono::duration<double>(Clock::now() - render_start).count();
    options_.on_progress({job.id, done, total, secs > 0 ? double(done) / secs : 0});
  };
  if (options_.on_progress) options_.on_progress({job.id, 0, 0, 0});
  bool threw = false;
  const std::string sink_dir = through_descriptor(partial->get(), partial_path);
  try {
    Expected<std::unique_ptr<FrameSink>> sink =
        make_output_sink(job.output, sink_dir, job.prepared->overlay());
    s = sink.ok() ? job.prepared->run(**sink, ctx) : sink.status();
  } catch (...) {  // the sink's destructor has discarded unfinished files
    threw = true;
    s = Status(StatusCode::kInternal,
               "internal error while rendering: " + current_exception_text());
  }
  s = with_path_for(s, sink_dir, partial_path);
  const double render_ms = ms_since(render_start);
  if (!s.ok()) {
    Status cleaned = fs::remove_tree_at(pfd, partial_name, partial_path);
    if (!cleaned.ok()) log_warning(cleaned.message());
    s = s.with_context("job " + job.id);
    // A bug this job reaches would throw again on every attempt.
    if (threw) return fail(c, job.id, s, previous_attempts + 1, job.pipeline);
    if (s.code() == StatusCode::kInterrupted && ctx.stop_requested()) {
      return requeue(c, job.id, previous_attempts, 0, Outcome::kInterrupted, s);
    }
    if (permanent(s)) return fail(c, job.id, s, previous_attempts + 1, job.pipeline);
    return retry_or_fail(c, job, s, previous_attempts + 1);
  }

  // Commit: hash what was written, rename .partial into place, then write
  // the status (the commit point), then move the job file.
  const Clock::time_point commit_start = Clock::now();
  JobStatus done = base_status(c, job.id);
  done.state = JobState::kDone;
  done.attempts = previous_attempts + 1;
  done.pipeline = job.pipeline;
  done.summary = job.prepared->summary();
  done.details = job.prepared->status_details();
  Expected<std::vector<std::string>> files = fs::list_files_recursive(partial->get(), partial_path);
  if (!files.ok()) s = files.status();
  for (size_t i = 0; s.ok() && i < files->size(); ++i) {
    const std::string& rel = (*files)[i];
    fs::Fd f(::openat(partial->get(), rel.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!f.valid()) {
      s = errno_status("opening", fs::join(partial_path, rel), errno);
      break;
    }
    struct stat fst;
    if (::fstat(f.get(), &fst) != 0) {
      s = errno_status("stat", fs::join(partial_path, rel), errno);
      break;
    }
    Expected<std::string> h = sha256_fd(f.get(), fs::join(partial_path, rel));
    if (!h.ok()) {
      s = h.status();
      break;
    }
    done.outputs.push_back({fs::join(final_path, rel), fst.st_size, *h});
  }
  if (s.ok()) {
    const int err = fs::rename_noreplace(pfd, partial_name, pfd, job.output_dir.leaf);
    if (err != 0) s = errno_status("renaming into place", partial_path, err);
  }
  if (s.ok()) s = fs::fsync_dir_at(pfd, parent_of(partial_path));
  if (!s.ok()) {
    warn_if_error(fs::remove_tree_at(pfd, partial_name, partial_path));
    return retry_or_fail(c, job, s.with_context("job " + job.id), previous_attempts + 1);
  }
  done.finished_ns = unix_now_ns();
  done.exit_code = 0;
  JobTiming t;
  t.queued_s = double(c.started_ns - c.submitted_ns) / 1e9;
  t.validate_ms = c.validate_ms;
  t.render_ms = render_ms;
  t.frames = frames_done;
  t.fps = render_ms > 0 ? double(frames_done) / (render_ms / 1000) : 0;
  t.s_per_frame = frames_done > 0 ? render_ms / 1000 / double(frames_done) : 0;
  t.commit_ms = ms_since(commit_start);  // up to the status write itself
  t.total_ms = ms_since(c.start);
  done.timing = t;
  s = spool_.write_status(SpoolDir::kDone, job.id, done, /*replace=*/false, /*durable=*/true);
  if (!s.ok()) {
    // Not committed, so not done: take the outputs back out of sight (a
    // crash here instead leaves them to the next attempt, which knows their
    // inode from the ledger).
    warn_if_error(fs::remove_tree_at(pfd, job.output_dir.leaf, final_path));
    return retry_or_fail(c, job, s.with_context("job " + job.id), previous_attempts + 1);
  }
  // Committed. The rest is tidying that recovery redoes after a crash.
  if (::renameat(spool_.fd(c.dir), c.name.c_str(), spool_.fd(SpoolDir::kDone),
                 (job.id + kJobSuffix).c_str()) != 0) {
    log_warning("job " + job.id + ": moving the job file to done/: " + std::strerror(errno));
  }
  warn_if_error(spool_.remove_status(SpoolDir::kActive, job.id));
  // A failed earlier run of this id is superseded.
  ::unlinkat(spool_.fd(SpoolDir::kFailed), (job.id + kStatusSuffix).c_str(), 0);
  ::unlinkat(spool_.fd(SpoolDir::kFailed), (job.id + kJobSuffix).c_str(), 0);
  log_info("job " + job.id + ": done, " + std::to_string(frames_done) + " frames in " +
           std::to_string(static_cast<int>(t.total_ms)) + " ms");
  JobResult r(Outcome::kDone, job.id, ok_status());
  r.timing = t;
  r.attempts = done.attempts;
  return r;
}

JobResult Worker::quarantine(Claim& c, const Diagnostic& why, bool owns_ledger) {
  const Status status(why.code, why.message);
  log_warning("job " + c.display + ": invalid, " +
              (options_.foreground ? std::string("not run") : "quarantined") + "\n" + why.message);
  if (options_.foreground) {
    if (c.dir == SpoolDir::kActive) {
      ::unlinkat(spool_.fd(SpoolDir::kActive), c.name.c_str(), 0);
      if (owns_ledger) warn_if_error(spool_.remove_status(SpoolDir::kActive, c.stem));
    }
    return {Outcome::kQuarantined, c.stem, status};
  }
  JobStatus s = base_status(c, c.stem);
  s.state = JobState::kQuarantined;
  s.exit_code = 65;
  s.finished_ns = unix_now_ns();
  s.error = why;
  s.error->code = StatusCode::kInvalidInput;
  // The status reserves the name (never replacing one), then the job follows.
  const int qfd = spool_.fd(SpoolDir::kQuarantine);
  std::string qname;
  for (int n = 1; n < 10000 && qname.empty(); ++n) {
    const std::string candidate = n == 1 ? c.stem : c.stem + "-" + std::to_string(n);
    struct stat st;
    auto taken = [&] {
      return ::fstatat(qfd, (candidate + kJobSuffix).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 ||
             ::fstatat(qfd, (candidate + kStatusSuffix).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
    };
    if (taken()) continue;
    Status w = spool_.write_status(SpoolDir::kQuarantine, candidate, s, /*replace=*/false,
                                   /*durable=*/true);
    if (w.ok()) {
      qname = candidate;
    } else if (!taken()) {  // not lost to a concurrent quarantine of the same name
      return {Outcome::kSkipped, c.stem, w};
    }
  }
  if (qname.empty()) return {Outcome::kSkipped, c.stem, io_error("quarantine/ is full")};
  const int err = fs::rename_noreplace(spool_.fd(c.dir), c.name, spool_.fd(SpoolDir::kQuarantine),
                                       qname + kJobSuffix);
  if (err != 0 && err != ENOENT) {
    log_warning("moving " + c.display + " to quarantine/: " + std::strerror(err));
  }
  if (c.dir == SpoolDir::kActive && owns_ledger) {
    warn_if_error(spool_.remove_status(SpoolDir::kActive, c.stem));
  }
  return {Outcome::kQuarantined, c.stem, status};
}

JobResult Worker::fail(Claim& c, const std::string& id, const Status& why, int attempts,
                       const std::string& pipeline) {
  log_error("job " + id + ": failed after " + std::to_string(attempts) +
            " attempt(s): " + why.message());
  JobStatus s = base_status(c, id);
  s.state = JobState::kFailed;
  s.attempts = attempts;
  s.pipeline = pipeline;
  s.exit_code = exit_code(why);
  s.finished_ns = unix_now_ns();
  s.error = runtime_diagnostic(c.display, why);
  Status w = spool_.write_status(SpoolDir::kFailed, id, s, /*replace=*/true, /*durable=*/true);
  if (!w.ok()) {
    log_error(w.message());
    return {Outcome::kSkipped, id, w};
  }
  if (::renameat(spool_.fd(c.dir), c.name.c_str(), spool_.fd(SpoolDir::kFailed),
                 (id + kJobSuffix).c_str()) != 0) {
    log_warning("moving job " + id + " to failed/: " + std::strerror(errno));
  }
  warn_if_error(spool_.remove_status(SpoolDir::kActive, id));
  JobResult r{Outcome::kFailed, id, why};
  r.attempts = attempts;
  return r;
}

JobResult Worker::retry_or_fail(Claim& c, Job& job, const Status& why, int attempts) {
  if (options_.foreground || attempts >= config_.max_attempts) {
    return fail(c, job.id, why, attempts, job.pipeline);
  }
  return requeue(c, job.id, attempts, config_.retry_delay_s, Outcome::kRequeued, why);
}

JobResult Worker::requeue(Claim& c, const std::string& id, int attempts, int delay_s,
                          Outcome outcome, const Status& why) {
  JobResult r{outcome, id, why};
  r.attempts = attempts;
  if (options_.foreground) {
    // flick run: the job file is the user's; nothing is left queued.
    if (c.dir == SpoolDir::kActive) {
      ::unlinkat(spool_.fd(SpoolDir::kActive), c.name.c_str(), 0);
      warn_if_error(spool_.remove_status(SpoolDir::kActive, id));
    }
    return r;
  }
  log_warning("job " + id + ": " + why.message() + "; requeued" +
              (delay_s > 0 ? " (retry in " + std::to_string(delay_s) + " s)" : ""));
  const int64_t not_before = unix_now_ns() + int64_t{delay_s} * 1000000000;
  if (c.dir == SpoolDir::kIncoming) {
    deferred_[c.name] = not_before;
    return r;
  }
  JobStatus ledger = base_status(c, id);
  ledger.state = JobState::kQueued;
  ledger.attempts = attempts;
  ledger.not_before_ns = not_before;
  ledger.error = runtime_diagnostic(c.display, why);
  // Keep what proves which output directory is this job's own: the next
  // attempt may find it renamed into place by this one.
  Expected<std::optional<JobStatus>> old = spool_.read_status(SpoolDir::kActive, id);
  if (old.ok() && old->has_value()) {
    ledger.pipeline = (*old)->pipeline;
    ledger.output_dir = (*old)->output_dir;
    ledger.partial_dev = (*old)->partial_dev;
    ledger.partial_ino = (*old)->partial_ino;
  }
  warn_if_error(spool_.write_status(SpoolDir::kActive, id, ledger, true, false));
  const int err = fs::rename_noreplace(spool_.fd(SpoolDir::kActive), c.name,
                                       spool_.fd(SpoolDir::kIncoming), id + kJobSuffix);
  if (err != 0) {
    // A new file of the same name was submitted meanwhile: the job stays in
    // active/, unlocked, and the next recovery pass requeues it.
    log_warning("job " + id + ": requeue: " + std::strerror(err));
  }
  return r;
}

void Worker::clean_outputs_of(const JobStatus& ledger) {
  if (ledger.output_dir.empty()) return;
  bool allowed = false;
  for (const Root& r : config_.output_roots) allowed |= is_within(ledger.output_dir, r.canonical);
  if (!allowed) return;
  Expected<fs::Fd> parent = open_beneath(parent_of(ledger.output_dir), config_.output_roots,
                                         O_RDONLY | O_DIRECTORY, "output.dir");
  if (!parent.ok()) return;
  const std::string leaf = base_of(ledger.output_dir);
  const std::string partial = leaf + ".partial";
  fs::Fd p(
      ::openat(parent->get(), partial.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (p.valid() && ::flock(p.get(), LOCK_EX | LOCK_NB) == 0) {
    warn_if_error(fs::remove_tree_at(parent->get(), partial, ledger.output_dir + ".partial"));
  }
  struct stat st;
  if (ledger.partial_ino != 0 &&
      ::fstatat(parent->get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      st.st_ino == ledger.partial_ino && st.st_dev == ledger.partial_dev) {
    warn_if_error(fs::remove_tree_at(parent->get(), leaf, ledger.output_dir));
  }
}

int Worker::recover_orphans() {
  Expected<std::vector<Spool::Entry>> entries = spool_.list_jobs(SpoolDir::kActive);
  if (!entries.ok()) {
    log_error(entries.status().message());
    return 0;
  }
  int handled = 0;
  for (const Spool::Entry& e : *entries) {
    bool busy = false;
    Expected<fs::Fd> lock = spool_.lock_job(SpoolDir::kActive, e.name, &busy);
    if (!lock.ok() || busy) continue;  // running in a live process, or gone
    Claim c;
    c.lock = std::move(*lock);
    c.dir = SpoolDir::kActive;
    c.name = e.name;
    c.stem = *job_file_stem(e.name);
    c.display = spool_.path(SpoolDir::kActive, e.name);
    c.start = Clock::now();
    c.started_ns = unix_now_ns();
    bool over = false;
    Expected<std::string> text =
        fs::read_limited(c.lock.get(), int64_t{64} << 20, &over, c.display);
    if (!text.ok()) continue;
    c.sha256 = sha256_hex(*text);
    const std::string& id = c.stem;
    ++handled;
    // Committed before the process died: only the move is missing.
    bool finished = false;
    for (SpoolDir d : {SpoolDir::kDone, SpoolDir::kFailed, SpoolDir::kQuarantine}) {
      Expected<std::optional<JobStatus>> st = spool_.read_status(d, id);
      if (st.ok() && st->has_value() && (*st)->job_sha256 == c.sha256) {
        ::renameat(spool_.fd(SpoolDir::kActive), e.name.c_str(), spool_.fd(d), e.name.c_str());
        warn_if_error(spool_.remove_status(SpoolDir::kActive, id));
        log_info("job " + id + ": completed the move to " + spool_dir_name(d) + "/");
        finished = true;
        break;
      }
    }
    if (finished) continue;
    Expected<std::optional<JobStatus>> ledger = spool_.read_status(SpoolDir::kActive, id);
    const std::optional<JobStatus> l = ledger.ok() ? std::move(*ledger) : std::nullopt;
    if (l) c.display = l->job_file.empty() ? c.display : l->job_file;
    const int attempts = (l ? l->attempts : 0) + 1;
    const Status why =
        unavailable("the process running it (attempt " + std::to_string(attempts) + ") died");
    if (attempts >= config_.max_attempts) {
      if (l) clean_outputs_of(*l);
      fail(c, id, why, attempts, l ? l->pipeline : "");
    } else {
      requeue(c, id, attempts, config_.retry_delay_s, Outcome::kRequeued, why);
    }
  }
  remove_stale_ledgers();
  return handled;
}

// A process killed between moving a committed job file out of active/ and
// removing its attempt ledger leaves the ledger behind. It is garbage once the
// job's final status exists and no job file of that id is queued or claimed
// (incoming/ is looked at before active/, the order a claim moves it in).
void Worker::remove_stale_ledgers() {
  Expected<std::vector<std::string>> names =
      fs::list_dir(spool_.fd(SpoolDir::kActive), spool_.path(SpoolDir::kActive));
  if (!names.ok()) return;
  const auto exists_in = [&](SpoolDir d, const std::string& name) {
    struct stat st;
    return ::fstatat(spool_.fd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  };
  for (const std::string& n : *names) {
    if (n[0] == '.' || !n.ends_with(kStatusSuffix)) continue;
    const std::string id = n.substr(0, n.size() - std::string_view(kStatusSuffix).size());
    const std::string job_name = id + kJobSuffix;
    bool finished = false;
    for (SpoolDir d : {SpoolDir::kDone, SpoolDir::kFailed, SpoolDir::kQuarantine}) {
      finished |= exists_in(d, n);
    }
    if (!finished || exists_in(SpoolDir::kIncoming, job_name) ||
        exists_in(SpoolDir::kActive, job_name)) {
      continue;
    }
    warn_if_error(spool_.remove_status(SpoolDir::kActive, id));
    log_info("job " + id +
             ": removed the attempt ledger left by a process that died after its commit");
  }
}

Expected<std::vector<std::string>> Worker::runnable_jobs(int64_t* next_due_ns) {
  *next_due_ns = 0;
  FLICK_ASSIGN_OR_RETURN(std::vector<Spool::Entry> entries, spool_.list_jobs(SpoolDir::kIncoming));
  const int64_t now = unix_now_ns();
  // Retry times of requeued jobs, from their ledgers in active/.
  std::map<std::string, int64_t> not_before;
  Expected<std::vector<std::string>> names =
      fs::list_dir(spool_.fd(SpoolDir::kActive), spool_.path(SpoolDir::kActive));
  if (names.ok()) {
    for (const std::string& n : *names) {
      if (n[0] == '.' || !n.ends_with(kStatusSuffix)) continue;
      const std::string id = n.substr(0, n.size() - std::string_view(kStatusSuffix).size());
      Expected<std::optional<JobStatus>> l = spool_.read_status(SpoolDir::kActive, id);
      if (l.ok() && l->has_value() && (*l)->state == JobState::kQueued) {
        not_before[id + kJobSuffix] = (*l)->not_before_ns;
      }
    }
  }
  std::map<std::string, int64_t> still_deferred;
  std::vector<std::string> out;
  for (const Spool::Entry& e : entries) {
    int64_t due = 0;
    if (auto it = not_before.find(e.name); it != not_before.end()) due = it->second;
    if (auto it = deferred_.find(e.name); it != deferred_.end()) {
      due = std::max(due, it->second);
      if (it->second > now) still_deferred.insert(*it);
    }
    if (due > now) {
      if (*next_due_ns == 0 || due < *next_due_ns) *next_due_ns = due;
      continue;
    }
    out.push_back(e.name);
  }
  deferred_ = std::move(still_deferred);
  return out;
}

JobResult Worker::run_file(const std::string& path) {
  Claim c;
  try {
    return run_file_claim(path, c);
  } catch (...) {
    return contain(c, current_exception_text());
  }
}

JobResult Worker::run_file_claim(const std::string& path, Claim& c) {
  c.display = path;
  const std::string base = base_of(path);
  c.stem = base.size() > 5 && base.ends_with(kJobSuffix) ? base.substr(0, base.size() - 5) : base;
  c.start = Clock::now();
  c.started_ns = unix_now_ns();
  fs::Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!f.valid()) return {Outcome::kFailed, c.stem, errno_status("opening job", path, errno)};
  struct stat st;
  if (::fstat(f.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return {Outcome::kQuarantined, c.stem, invalid_input(path + " is not a regular file")};
  }
  bool over = false;
  Expected<std::string> text = fs::read_limited(f.get(), config_.max_job_bytes, &over, path);
  if (!text.ok()) return {Outcome::kFailed, c.stem, text.status()};
  if (over) {
    return {Outcome::kQuarantined, c.stem,
            invalid_input(path + " is over the job size limit of " +
                          std::to_string(config_.max_job_bytes) + " bytes (max_job_bytes in " +
                          config_.file + ")")};
  }
  c.text = std::move(*text);
  c.sha256 = sha256_hex(c.text);
  c.submitted_ns = c.started_ns;
  Diagnostics diag(path);
  std::optional<Job> job = parse_job({path, c.stem, c.text}, config_, diag);
  if (!job) {
    return {permanent(diag.status()) ? Outcome::kQuarantined : Outcome::kFailed, c.stem,
            diag.status()};
  }
  Expected<std::optional<JobStatus>> done = spool_.read_status(SpoolDir::kDone, job->id);
  if (!done.ok()) return {Outcome::kFailed, job->id, done.status()};
  if (done->has_value()) {
    if ((*done)->job_sha256 == c.sha256) return {Outcome::kAlreadyDone, job->id, ok_status()};
    const Diagnostic d = job->error_at(
        "id",
        "duplicate id \"" + job->id + "\": a different job with this id is already done (" +
            spool_.path(SpoolDir::kDone, job->id) + kStatusSuffix + ")",
        "id already used");
    return {Outcome::kQuarantined, job->id, Status(StatusCode::kInvalidInput, d.message)};
  }
  // Into active/ already locked (lock a hidden temporary, then rename), so
  // no recovery pass ever sees it unlocked while this process lives.
  const std::string temp = "." + job->id + ".run.tmp." + std::to_string(::getpid()) + ".0";
  const int afd = spool_.fd(SpoolDir::kActive);
  fs::Fd lock(
      ::openat(afd, temp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640));
  if (!lock.valid()) {
    return {Outcome::kFailed, job->id,
            errno_status("creating", spool_.path(SpoolDir::kActive, temp), errno)};
  }
  ::flock(lock.get(), LOCK_EX);
  size_t written = 0;
  while (written < c.text.size()) {
    const ssize_t n = ::write(lock.get(), c.text.data() + written, c.text.size() - written);
    if (n <= 0) {
      ::unlinkat(afd, temp.c_str(), 0);
      return {Outcome::kFailed, job->id,
              errno_status("writing", spool_.path(SpoolDir::kActive, temp), errno)};
    }
    written += static_cast<size_t>(n);
  }
  const int err = fs::rename_noreplace(afd, temp, afd, job->id + kJobSuffix);
  if (err != 0) {
    ::unlinkat(afd, temp.c_str(), 0);
    if (err == EEXIST) {
      return {Outcome::kSkipped, job->id,
              unavailable("job " + job->id + " is active in " + spool_.root() +
                          " (run by another process)")};
    }
    return {Outcome::kFailed, job->id, errno_status("claiming", path, err)};
  }
  c.lock = std::move(lock);
  c.dir = SpoolDir::kActive;
  c.name = job->id + kJobSuffix;
  c.stem = job->id;
  c.validate_ms = ms_since(c.start);
  return run_claimed(c, *job);
}

}  // namespace flick
