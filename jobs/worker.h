// Runs jobs from the spool through the spool protocol: claim (lock, check,
// parse, rename into active/), render into "<output dir>.partial/", rename
// it into place, commit the status file, move the job file to its final
// directory. Also requeues the jobs of processes that died.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jobs/config.h"
#include "jobs/job.h"
#include "jobs/spool.h"
#include "jobs/status_file.h"
#include "runtime/tensor.h"

namespace flick {

struct Progress {
  std::string id;
  int64_t frames_done = 0;
  int64_t frames_total = 0;
  double fps = 0;
};

struct WorkerOptions {
  // flick run: a job that cannot finish is not requeued, and invalid jobs are
  // reported, not quarantined (the file is the user's, not the spool's).
  bool foreground = false;
  // Set by SIGTERM/SIGINT handling; the pipeline stops at its next block.
  const std::atomic<bool>* stop = nullptr;
  // Called when a job starts (frames_done = 0) and after every block.
  std::function<void(const Progress&)> on_progress;
  // `flick run --dump`: passed to the pipeline as RunContext::tap.
  std::function<void(std::string_view name, const Tensor& t)> tap;
};

enum class Outcome {
  kDone,
  kAlreadyDone,  // the same job (same id and content) was done before
  kQuarantined,  // invalid: never retried
  kRequeued,     // a temporary failure; back in incoming/ for another attempt
  kFailed,       // out of attempts, or a permanent error while running
  kInterrupted,  // stopped by a signal; requeued without counting an attempt
  kSkipped,      // held by another process, or gone
};
const char* outcome_name(Outcome o);

struct JobResult {
  JobResult() = default;
  JobResult(Outcome o, std::string job_id, Status why)
      : outcome(o), id(std::move(job_id)), status(std::move(why)) {}

  Outcome outcome = Outcome::kSkipped;
  std::string id;  // the job id, or the file name when none could be read
  Status status;   // the reason when not done
  std::optional<JobTiming> timing;
  int attempts = 0;
};

// The exit status for a job's result (0 done or already done, 65 invalid,
// 75 worth retrying, 1 otherwise).
int exit_code_for(const JobResult& r);

// The more serious of two exit statuses, for commands that handle several
// jobs: 1 (failed) over 65 (invalid) over 75 (retry) over 0.
int worse_exit_code(int a, int b);

class Worker {
 public:
  Worker(const Spool& spool, const DaemonConfig& config, WorkerOptions options);

  // Claims incoming/<name> and runs it.
  JobResult process_incoming(const std::string& name);
  // flick run: runs the job file at `path` through active/ and done/ like a
  // spooled job (so a rerun of a finished job is a no-op).
  JobResult run_file(const std::string& path);
  // Jobs in active/ whose process died: requeued with attempts+1, failed
  // after max_attempts, or moved on if their status was already committed.
  // Returns how many were handled.
  int recover_orphans();
  void remove_stale_ledgers();

  // Names in incoming/ that may run now, in queue order; *next_due_ns is set
  // to the earliest time a deferred retry becomes due (0 if none).
  Expected<std::vector<std::string>> runnable_jobs(int64_t* next_due_ns);

 private:
  struct Claim;

  JobResult claim_and_run(Claim& c);
  JobResult run_file_claim(const std::string& path, Claim& c);
  // The last boundary: an exception from anything done with a job's bytes.
  JobResult contain(Claim& c, const std::string& what);
  JobResult run_claimed(Claim& c, Job& job);
  // owns_ledger=false: the ledger active/<id>.status.toml belongs to another
  // job with the same id and stays.
  JobResult quarantine(Claim& c, const Diagnostic& why, bool owns_ledger = true);
  JobResult fail(Claim& c, const std::string& id, const Status& why, int attempts,
                 const std::string& pipeline);
  JobResult retry_or_fail(Claim& c, Job& job, const Status& why, int attempts);
  JobResult requeue(Claim& c, const std::string& id, int attempts, int delay_s, Outcome outcome,
                    const Status& why);
  // Removes a job's .partial (and, when `final_ino` matches, its output
  // directory) left by an attempt that died.
  void clean_outputs_of(const JobStatus& ledger);
  JobStatus base_status(const Claim& c, const std::string& id) const;

  const Spool& spool_;
  const DaemonConfig& config_;
  WorkerOptions options_;
  std::string host_;
  // incoming/ names whose check failed for a temporary reason before they
  // could be claimed (no ledger exists for them yet): name -> retry time.
  std::map<std::string, int64_t> deferred_;
};

}  // namespace flick
