// <id>.status.toml: what happened to a job. In done/, failed/ and
// quarantine/ it is written last and atomically (tmp, fsync, rename, fsync
// dir): a job is done exactly when its status file says so. The same format
// is the attempt ledger active/<id>.status.toml of a job being run or
// retried (attempts so far, the output directory it renders into).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "jobs/toml_reader.h"
#include "runtime/status.h"

namespace flick {

enum class JobState { kQueued, kRunning, kDone, kFailed, kQuarantined };
const char* job_state_name(JobState s);

struct OutputRecord {
  std::string path;  // absolute, in the final output directory
  int64_t bytes = 0;
  std::string sha256;
};

struct JobTiming {
  double queued_s = 0;     // submission (file mtime) to claim
  double validate_ms = 0;  // read, hash, parse, path checks
  double render_ms = 0;    // the pipeline into <dir>.partial
  double commit_ms = 0;    // fsync, hash, rename into place, status
  double total_ms = 0;     // claim to status committed
  int64_t frames = 0;
  double fps = 0;          // frames / render time
  double s_per_frame = 0;  // render time / frames
};

struct JobStatus {
  std::string id;
  JobState state = JobState::kQueued;
  int attempts = 0;  // attempts finished (a crash counts as one)
  std::string pipeline;
  std::string job_file;  // where it was submitted
  std::string job_sha256;
  std::string summary;  // the pipeline's one-line description of the job
  int exit_code = 0;    // the exit status this outcome maps to
  int64_t submitted_ns = 0, started_ns = 0, finished_ns = 0;  // Unix time; 0 = unset
  std::string host;
  int pid = 0;
  // Ledger fields: the output directory this job renders into and the
  // .partial directory it created, which prove ownership after a crash.
  std::string output_dir;
  uint64_t partial_dev = 0, partial_ino = 0;
  // A queued retry waits until then (Unix ns; 0 = now). Kept here, in the
  // daemon's own file, rather than in the job file's mtime, which the daemon
  // may not change on a file a submitter owns.
  int64_t not_before_ns = 0;
  std::optional<JobTiming> timing;
  // [details]: what the pipeline reports about a finished run
  // (PreparedJob::status_details), e.g. precision = "int8 DiT, bf16 CLIP, f32 VAE".
  std::vector<std::pair<std::string, std::string>> details;
  std::optional<Diagnostic> error;
  std::vector<OutputRecord> outputs;
};

std::string format_status(const JobStatus& s);
// Reads what the daemon needs back (state, attempts, hashes, ledger fields).
Expected<JobStatus> parse_status(const std::string& text, const std::string& display);

int64_t unix_now_ns();
// "2025-06-01T12:00:00.123Z"
std::string format_utc(int64_t unix_ns);

// A TOML basic string literal: quotes, escapes, invalid UTF-8 replaced by U+FFFD.
std::string toml_quote(std::string_view s);

}  // namespace flick
