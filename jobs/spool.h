// The spool directory: layout, locks and the atomic moves between states.
//
//   incoming/    submitters write a hidden temporary, then rename it to <name>.toml
//   active/      <id>.toml: claimed (lock, then rename from incoming/), flock held
//                for the job's life; <id>.status.toml: the attempt ledger
//   done/        <id>.toml + <id>.status.toml (outputs, sizes, hashes, timing)
//   failed/      <id>.toml + <id>.status.toml with the error (after max attempts)
//   quarantine/  <name>.toml + <name>.status.toml: invalid jobs, never retried
//   tmp/         scratch space of the daemon
//
// Every move of a job file is made by the process holding its flock, so a
// lock taken on an open descriptor and re-checked against the name it was
// opened by is a claim no other process can race.
#pragma once

#include <sys/stat.h>

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "jobs/fs.h"
#include "jobs/status_file.h"
#include "runtime/status.h"

namespace flick {

enum class SpoolDir { kIncoming, kActive, kDone, kFailed, kQuarantine, kTmp };
inline constexpr int kSpoolDirCount = 6;
const char* spool_dir_name(SpoolDir d);

inline constexpr const char* kJobSuffix = ".toml";
inline constexpr const char* kStatusSuffix = ".status.toml";

// "x.toml" -> "x" for job files (not hidden, not temporaries, not status
// files); nullopt otherwise.
std::optional<std::string> job_file_stem(const std::string& name);

class Spool {
 public:
  // Opens the spool at `root`. With create=true, missing directories are
  // made (incoming/ group-writable and setgid for a submit group, the rest
  // private; existing ones are left as they are, and where setgid is
  // forbidden, as under systemd's RestrictSUIDSGID=yes, incoming/ is made
  // without it and a warning says so). Every directory must be a real directory owned by this user
  // (or root) and not writable by others.
  static Expected<Spool> open(const std::string& root, bool create);

  const std::string& root() const { return root_; }
  int fd(SpoolDir d) const { return dirs_[static_cast<int>(d)].get(); }
  std::string path(SpoolDir d, const std::string& name = "") const;
  // Group of incoming/: files of that group (the submit group) are accepted.
  gid_t incoming_gid() const { return incoming_gid_; }
  // NFS, CIFS, FUSE: inotify misses remote writers there.
  bool on_network_filesystem() const { return network_fs_; }
  const std::string& filesystem_name() const { return fs_name_; }

  struct Entry {
    std::string name;
    int64_t mtime_ns = 0;
  };
  // Job files in `d`, in queue order (mtime, then name).
  Expected<std::vector<Entry>> list_jobs(SpoolDir d) const;

  // Opens d/name without following symlinks and takes its flock
  // (non-blocking). Returns an invalid Fd with *busy set when another process
  // holds it, or when the name no longer refers to the file opened.
  Expected<fs::Fd> lock_job(SpoolDir d, const std::string& name, bool* busy) const;

  // The status file d/<stem>.status.toml, if there is one.
  Expected<std::optional<JobStatus>> read_status(SpoolDir d, const std::string& stem) const;
  // Writes d/<stem>.status.toml atomically; durable = fsync file and dir.
  Status write_status(SpoolDir d, const std::string& stem, const JobStatus& s, bool replace,
                      bool durable) const;
  Status remove_status(SpoolDir d, const std::string& stem) const;

  // Removes temporaries (".<name>.tmp.<pid>.<n>") of processes that are
  // gone; at start-up (include_own) also those carrying this process's pid,
  // left by an earlier process that had it.
  void reap_temporaries(bool include_own) const;

 private:
  Spool() = default;

  std::string root_;
  std::array<fs::Fd, kSpoolDirCount> dirs_;
  gid_t incoming_gid_ = 0;
  bool network_fs_ = false;
  std::string fs_name_;
};

}  // namespace flick
