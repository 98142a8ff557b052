// The job subcommands: serve, drain, run, submit, status, validate.
#include <fcntl.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "jobs/cli.h"
#include "jobs/config.h"
#include "jobs/daemon.h"
#include "jobs/job.h"
#include "jobs/notify.h"
#include "jobs/signals.h"
#include "jobs/spool.h"
#include "jobs/worker.h"
#include "models/pipelines/tensor_dump.h"
#include "runtime/log.h"

namespace flick {
namespace {

struct CommonOptions {
  std::string config = kDefaultConfigPath;
  std::string spool;
};

void add_config_options(CLI::App* cmd, CommonOptions* o) {
  cmd->add_option("--config", o->config, "daemon config file")->capture_default_str();
  cmd->add_option("--spool", o->spool, "spool directory (overrides [daemon].spool)");
}

// A one-line progress bar on a terminal's stderr, redrawn at most 10 times a
// second.
class ProgressBar {
 public:
  void update(const Progress& p) {
    const auto now = std::chrono::steady_clock::now();
    if (p.frames_done != p.frames_total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    constexpr int kWidth = 30;
    const int filled =
        p.frames_total > 0 ? static_cast<int>(kWidth * p.frames_done / p.frames_total) : 0;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\r%s [%s] %lld/%lld frames %6.1f fps", p.id.c_str(), bar.c_str(),
                 static_cast<long long>(p.frames_done), static_cast<long long>(p.frames_total),
                 p.fps);
    drawn_ = true;
    if (p.frames_done == p.frames_total) end();  // the log lines that follow start clean
    std::fflush(stderr);
  }
  void end() {
    if (drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }

 private:
  std::chrono::steady_clock::time_point last_{};
  bool drawn_ = false;
};

// `dump`: empty, or where --dump writes the job's named intermediates.
int cmd_run(const CommonOptions& o, const std::string& job_path, const std::string& dump) {
  SignalWatch signals;  // before anything starts threads
  Expected<DaemonConfig> config = load_config(o.config, o.spool);
  if (!config.ok()) {
    log_error(config.status().message());
    return exit_code(config.status());
  }
  if (Status s = load_pipelines(*config, nullptr); !s.ok()) {
    log_error(s.message());
    return exit_code(s);
  }
  Expected<Spool> spool = Spool::open(config->spool, /*create=*/true);
  if (!spool.ok()) {
    log_error(spool.status().message());
    return exit_code(spool.status());
  }
  ProgressBar bar;
  Notifier notifier;  // flick run under systemd-run gets STATUS and WATCHDOG too
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  std::optional<TensorDump> tensors;
  WorkerOptions wo;
  if (!dump.empty()) {
    tensors.emplace(dump);
    wo.tap = tensors->tap();
  }
  wo.foreground = true;
  wo.stop = &signals.stop_flag();
  wo.on_progress = [&](const Progress& p) {
    signals.poll();
    notifier.watchdog_tick();
    if (tty && p.frames_done > 0) bar.update(p);
  };
  Worker worker(*spool, *config, std::move(wo));
  const JobResult r = worker.run_file(job_path);
  bar.end();
  if (tensors && r.outcome == Outcome::kDone) {
    if (Status s = tensors->write(); !s.ok()) {
      log_error(s.message());
      return exit_code(s);
    }
    std::printf("%s: %zu tensors written to %s\n", r.id.c_str(), tensors->size(), dump.c_str());
  } else if (tensors && r.outcome == Outcome::kAlreadyDone) {
    log_warning(r.id + ": already done, nothing ran: no tensors written to " + dump +
                " (remove the job's status from the spool's done/ to run it again)");
  }
  switch (r.outcome) {
    case Outcome::kDone:
      std::printf("%s: done (%s)\n", r.id.c_str(),
                  spool->path(SpoolDir::kDone, r.id + kStatusSuffix).c_str());
      break;
    case Outcome::kAlreadyDone:
      std::printf("%s: already done (%s)\n", r.id.c_str(),
                  spool->path(SpoolDir::kDone, r.id + kStatusSuffix).c_str());
      break;
    case Outcome::kQuarantined:
      // The worker logged the formatted errors.
      std::fprintf(stderr, "%s\n", r.status.message().c_str());
      break;
    default: log_error(r.id + ": " + outcome_name(r.outcome) + ": " + r.status.message());
  }
  return exit_code_for(r);
}

// Reads a job file for submission: size, TOML syntax and its id.
Expected<std::pair<std::string, std::string>> read_for_submit(const std::string& path,
                                                              int64_t limit) {
  fs::Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!f.valid()) return errno_status("opening job", path, errno);
  bool over = false;
  FLICK_ASSIGN_OR_RETURN(std::string text, fs::read_limited(f.get(), limit, &over, path));
  if (over) {
    return invalid_input(path + " is larger than the job size limit (" + std::to_string(limit) +
                         " bytes)");
  }
  Diagnostics diag(path);
  std::optional<toml::value> doc = parse_toml(text, diag);
  if (!doc) return diag.status();
  std::string base = path.substr(path.rfind('/') + 1);
  std::string id = base.ends_with(kJobSuffix) ? base.substr(0, base.size() - 5) : base;
  const auto& t = doc->as_table();
  if (auto it = t.find("id"); it != t.end() && it->second.is_string()) id = it->second.as_string();
  if (!valid_job_id(id)) {
    return invalid_input(path + ": '" + id +
                         "' is not a valid job id (letters, digits, '.', '_', '-'; set id = ...)");
  }
  return std::pair(std::move(id), std::move(text));
}

// incoming/ as a submitter holds it: O_PATH, since it is write+search only
// for the submit group (2730: nobody lists the others' jobs). Someone who
// may not create files there is told so before any job is read.
Expected<fs::Fd> open_incoming_for_submit(const std::string& incoming) {
  FLICK_ASSIGN_OR_RETURN(fs::Fd dir, fs::open_dir_path(incoming));
  if (::faccessat(AT_FDCWD, incoming.c_str(), W_OK | X_OK, AT_EACCESS) != 0) {
    const int err = errno;
    struct stat st;
    std::string group_name;
    if (::fstat(dir.get(), &st) == 0) {
      const struct group* g = ::getgrgid(st.st_gid);
      group_name = " (" +
                   (g != nullptr ? std::string(g->gr_name) : "gid " + std::to_string(st.st_gid)) +
                   ")";
    }
    return Status(
        StatusCode::kIoError,
        "submitting to " + incoming + ": " + std::strerror(err) +
            (err == EACCES ? "; submitters must be members of its group" + group_name : ""));
  }
  return dir;
}

int cmd_submit(const CommonOptions& o, const std::vector<std::string>& files) {
  std::string spool = o.spool;
  int64_t limit = int64_t{1} << 20;
  if (spool.empty()) {
    Expected<DaemonConfig> config = load_config(o.config, "");
    if (!config.ok()) {
      log_error(config.status().message());
      return exit_code(config.status());
    }
    spool = config->spool;
    limit = config->max_job_bytes;
  }
  const std::string incoming = fs::join(spool, spool_dir_name(SpoolDir::kIncoming));
  Expected<fs::Fd> dir = open_incoming_for_submit(incoming);
  if (!dir.ok()) {
    log_error(dir.status().message());
    return exit_code(dir.status());
  }
  int worst = 0;
  for (const std::string& path : files) {
    Expected<std::pair<std::string, std::string>> job = invalid_input(path + ": not read");
    try {
      job = read_for_submit(path, limit);
    } catch (const std::exception& e) {  // a bug the file reached: this file's error only
      job = invalid_input(path + ": internal error while reading the job: " + e.what());
    }
    Status s = job.ok() ? ok_status() : job.status();
    struct stat st;
    if (s.ok() &&
        ::fstatat(dir->get(), (job->first + kJobSuffix).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      s = unavailable("a job named " + job->first + kJobSuffix + " is already queued in " +
                      incoming);
    }
    if (s.ok()) {
      // A hidden temporary in incoming/, fsynced, then renamed to <id>.toml
      // without replacing a queued job of the same name.
      s = fs::write_file_atomic(dir->get(), incoming, job->first + kJobSuffix, job->second,
                                /*replace=*/false, /*durable=*/true, 0640);
    }
    if (!s.ok()) {
      log_error(s.message());
      worst = worse_exit_code(worst, exit_code(s));
      continue;
    }
    std::printf("%s\n", fs::join(incoming, job->first + kJobSuffix).c_str());
  }
  return worst;
}

// Checks one job file; returns its exit status (0 when valid).
int validate_one(const DaemonConfig& config, const std::string& path) {
  fs::Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!f.valid()) {
    Status s = errno_status("opening job", path, errno);
    log_error(s.message());
    return exit_code(s);
  }
  bool over = false;
  Expected<std::string> text = fs::read_limited(f.get(), config.max_job_bytes, &over, path);
  if (!text.ok() || over) {
    log_error(text.ok() ? path + " is over the job size limit of " +
                              std::to_string(config.max_job_bytes) + " bytes"
                        : text.status().message());
    return 65;
  }
  std::string base = path.substr(path.rfind('/') + 1);
  const std::string stem = base.ends_with(kJobSuffix) ? base.substr(0, base.size() - 5) : base;
  Diagnostics diag(path);
  std::optional<Job> job = parse_job({path, stem, *text}, config, diag);
  if (job && ::access(job->output.dir.c_str(), F_OK) == 0) {
    diag.add(job->error_at(
        "output.dir",
        "'" + job->output.dir + "' already exists (flick never overwrites an output directory)",
        "exists"));
  }
  if (!diag.ok()) {
    std::fprintf(stderr, "%s\n", diag.status().message().c_str());
    return exit_code(diag.status());
  }
  std::printf("%s: ok: job %s, pipeline %s: %s -> %s\n", path.c_str(), job->id.c_str(),
              job->pipeline.c_str(), job->prepared->summary().c_str(), job->output.dir.c_str());
  return 0;
}

int cmd_validate(const CommonOptions& o, const std::vector<std::string>& files) {
  Expected<DaemonConfig> config = load_config(o.config, o.spool);
  if (!config.ok()) {
    log_error(config.status().message());
    return exit_code(config.status());
  }
  int status = 0;
  for (const std::string& path : files) {
    int code = 0;
    try {
      code = validate_one(*config, path);
    } catch (const std::exception& e) {
      // A bug a job file reached: reported as that file's error, and the
      // other files are still checked.
      log_error(path + ": internal error while checking the job: " + e.what());
      code = 65;
    } catch (...) {
      log_error(path + ": internal error while checking the job: an unknown exception");
      code = 65;
    }
    status = worse_exit_code(status, code);
  }
  return status;
}

// The state of active/<name>: held by a live process or orphaned.
std::string active_state(const Spool& spool, const std::string& name) {
  fs::Fd f(::openat(spool.fd(SpoolDir::kActive), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!f.valid()) return "unknown (" + std::string(std::strerror(errno)) + ")";
  if (::flock(f.get(), LOCK_SH | LOCK_NB) != 0) return "running";
  return "orphaned (its process died; the next daemon start requeues it)";
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

int cmd_status(const CommonOptions& o) {
  std::string root = o.spool;
  if (root.empty()) {
    Expected<DaemonConfig> config = load_config(o.config, "");
    if (!config.ok()) {
      log_error(config.status().message());
      return exit_code(config.status());
    }
    root = config->spool;
  }
  Expected<Spool> spool = Spool::open(root, /*create=*/false);
  if (!spool.ok()) {
    log_error(spool.status().message());
    return exit_code(spool.status());
  }
  std::printf("spool %s\n", root.c_str());
  constexpr SpoolDir kDirs[] = {SpoolDir::kIncoming, SpoolDir::kActive, SpoolDir::kDone,
                                SpoolDir::kFailed, SpoolDir::kQuarantine};
  std::vector<Spool::Entry> lists[5];
  for (int i = 0; i < 5; ++i) {
    Expected<std::vector<Spool::Entry>> e = spool->list_jobs(kDirs[i]);
    if (e.ok()) lists[i] = std::move(*e);
    std::printf("  %-11s %zu\n", spool_dir_name(kDirs[i]), lists[i].size());
  }
  for (const Spool::Entry& e : lists[1]) {
    const std::string id = *job_file_stem(e.name);
    Expected<std::optional<JobStatus>> ledger = spool->read_status(SpoolDir::kActive, id);
    std::string extra;
    if (ledger.ok() && ledger->has_value()) {
      extra = ", attempt " + std::to_string((*ledger)->attempts + 1) + ", pid " +
              std::to_string((*ledger)->pid);
    }
    std::printf("active %s: %s%s\n", id.c_str(), active_state(*spool, e.name).c_str(),
                extra.c_str());
  }
  // Queued jobs that are retries: their ledger says why and when.
  const int64_t now = unix_now_ns();
  for (const Spool::Entry& e : lists[0]) {
    Expected<std::optional<JobStatus>> l =
        spool->read_status(SpoolDir::kActive, *job_file_stem(e.name));
    if (!l.ok() || !l->has_value() || (*l)->state != JobState::kQueued) continue;
    const JobStatus& ledger = **l;
    std::printf("retry %s: %d attempt(s) so far%s%s; %s\n", e.name.c_str(), ledger.attempts,
                ledger.error ? ", last: " : "",
                ledger.error ? first_line(ledger.error->message).c_str() : "",
                ledger.not_before_ns > now
                    ? ("not before " + format_utc(ledger.not_before_ns)).c_str()
                    : "due now");
  }
  // The most recent failures and quarantined jobs, newest last.
  for (int i : {3, 4}) {
    const std::vector<Spool::Entry>& l = lists[i];
    for (size_t k = l.size() > 10 ? l.size() - 10 : 0; k < l.size(); ++k) {
      const std::string stem = *job_file_stem(l[k].name);
      Expected<std::optional<JobStatus>> st = spool->read_status(kDirs[i], stem);
      std::string why = "no status file";
      if (st.ok() && st->has_value() && (*st)->error) why = first_line((*st)->error->message);
      std::printf("%s %s: %s\n", i == 3 ? "failed" : "quarantined", stem.c_str(), why.c_str());
    }
  }
  return 0;
}

}  // namespace

void register_cache(CLI::App& app, CliContext& ctx);  // jobs/cmd_cache.cpp

void register_job_commands(CLI::App& app, CliContext& ctx) {
  auto common = std::make_shared<CommonOptions>();
  register_cache(app, ctx);  // the daemon's plan cache

  CLI::App* serve = app.add_subcommand(
      "serve",
      "run the spool daemon (systemd Type=notify): take jobs from incoming/ until SIGTERM");
  add_config_options(serve, common.get());
  serve->callback([&ctx, common] {
    ctx.exit_status = run_daemon({common->config, common->spool, /*drain=*/false});
  });

  CLI::App* drain = app.add_subcommand(
      "drain", "process every job queued in the spool, then exit (for cron and timers)");
  add_config_options(drain, common.get());
  drain->callback([&ctx, common] {
    ctx.exit_status = run_daemon({common->config, common->spool, /*drain=*/true});
  });

  auto job = std::make_shared<std::string>();
  auto dump = std::make_shared<std::string>();
  CLI::App* run = app.add_subcommand(
      "run",
      "run one job file in the foreground (recorded in the spool's done/; a rerun of a "
      "finished job exits 0 at once)");
  add_config_options(run, common.get());
  run->add_option("JOB", *job, "job file (TOML)")->required();
  run->add_option("--dump", *dump,
                  "also write the pipeline's named intermediates to this .safetensors file "
                  "(names: README, \"Tensor dumps\")");
  run->callback([&ctx, common, job, dump] { ctx.exit_status = cmd_run(*common, *job, *dump); });

  auto files = std::make_shared<std::vector<std::string>>();
  CLI::App* submit = app.add_subcommand(
      "submit", "drop job files into the spool atomically (as incoming/<id>.toml)");
  add_config_options(submit, common.get());
  submit->add_option("JOB", *files, "job files (TOML)")->required();
  submit->callback([&ctx, common, files] { ctx.exit_status = cmd_submit(*common, *files); });

  CLI::App* status = app.add_subcommand("status",
                                        "summarise the spool: queued, active, done, "
                                        "failed and quarantined jobs");
  add_config_options(status, common.get());
  status->callback([&ctx, common] { ctx.exit_status = cmd_status(*common); });

  CLI::App* validate = app.add_subcommand(
      "validate", "check job files against a config (keys, types, paths, inputs) without running");
  add_config_options(validate, common.get());
  validate->add_option("JOB", *files, "job files (TOML)")->required();
  validate->callback([&ctx, common, files] { ctx.exit_status = cmd_validate(*common, *files); });
}

}  // namespace flick
