#include "jobs/spool.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/log.h"

namespace flick {
namespace {

constexpr SpoolDir kAllDirs[] = {SpoolDir::kIncoming, SpoolDir::kActive,     SpoolDir::kDone,
                                 SpoolDir::kFailed,   SpoolDir::kQuarantine, SpoolDir::kTmp};

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// statfs f_type values of filesystems where inotify does not see other
// hosts' writes and flock is emulated.
const char* network_fs_name(long type) {
  switch (static_cast<unsigned long>(type)) {
    case 0x6969: return "NFS";
    case 0xFF534D42: return "CIFS";
    case 0xFE534D42: return "SMB2";
    case 0x517B: return "SMB";
    case 0x65735546: return "FUSE";
    case 0x01021997: return "9P";
    case 0x5346414F: return "AFS";
    case 0x47504653: return "GPFS";
    case 0x0BD00BD0: return "Lustre";
    case 0x00C36400: return "CephFS";
  }
  return nullptr;
}

Status check_dir(int fd, const std::string& display) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return errno_status("stat", display, errno);
  const uid_t me = ::geteuid();
  if (st.st_uid != me && me != 0) {
    return invalid_input("spool directory " + display + " is owned by uid " +
                         std::to_string(st.st_uid) + ", not by this process (uid " +
                         std::to_string(me) + ")");
  }
  if ((st.st_mode & S_IWOTH) != 0) {
    return invalid_input("spool directory " + display +
                         " is writable by everyone; refusing it (chmod o-w)");
  }
  return ok_status();
}

// Makes root/name when it is missing. A directory that exists (made by
// systemd-tmpfiles, or an earlier start) is left as it is: no mkdir is even
// tried, since a mode with S_ISGID is refused with EPERM under
// RestrictSUIDSGID=yes before the kernel looks whether the name exists.
// incoming/ gets the setgid bit (files dropped there take its group, the
// submit group) where the process may set it; where it may not, it is made
// without and a warning says what that costs.
Status create_spool_dir(int root_fd, const std::string& name, SpoolDir d,
                        const std::string& display) {
  struct stat st;
  if (::fstatat(root_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return ok_status();
  if (errno != ENOENT) return errno_status("stat", display, errno);
  // incoming/: the submit group may drop files but not list them.
  const mode_t mode = d == SpoolDir::kIncoming ? 0730 : 0700;
  if (::mkdirat(root_fd, name.c_str(), mode) != 0) {
    if (errno == EEXIST) return ok_status();  // made meanwhile by another process
    return errno_status("creating", display, errno);
  }
  ::fchmodat(root_fd, name.c_str(), mode, 0);  // the umask may have masked bits
  if (d != SpoolDir::kIncoming) return ok_status();
  if (::fchmodat(root_fd, name.c_str(), mode | S_ISGID, 0) != 0) {
    log_warning(
        "created " + display + " without the setgid bit (" + std::strerror(errno) +
        "; RestrictSUIDSGID=?): files submitted there keep their submitter's primary "
        "group, and the daemon refuses those not of the group of incoming/. Create the spool with "
        "systemd-tmpfiles (incoming/ mode 2730, group of the submitters) instead");
  }
  return ok_status();
}

}  // namespace

const char* spool_dir_name(SpoolDir d) {
  switch (d) {
    case SpoolDir::kIncoming: return "incoming";
    case SpoolDir::kActive: return "active";
    case SpoolDir::kDone: return "done";
    case SpoolDir::kFailed: return "failed";
    case SpoolDir::kQuarantine: return "quarantine";
    case SpoolDir::kTmp: return "tmp";
  }
  return "?";
}

std::optional<std::string> job_file_stem(const std::string& name) {
  if (name.empty() || name[0] == '.' || !ends_with(name, kJobSuffix) ||
      ends_with(name, kStatusSuffix)) {
    return std::nullopt;
  }
  std::string stem = name.substr(0, name.size() - std::string_view(kJobSuffix).size());
  if (stem.empty()) return std::nullopt;
  return stem;
}

Expected<Spool> Spool::open(const std::string& root, bool create) {
  Spool s;
  s.root_ = root;
  if (create && ::mkdir(root.c_str(), 0755) != 0 && errno != EEXIST) {
    return errno_status("creating spool", root, errno);
  }
  FLICK_ASSIGN_OR_RETURN(fs::Fd root_fd, fs::open_dir(root));
  FLICK_TRY(check_dir(root_fd.get(), root));
  for (SpoolDir d : kAllDirs) {
    const std::string name = spool_dir_name(d);
    const std::string display = fs::join(root, name);
    if (create) FLICK_TRY(create_spool_dir(root_fd.get(), name, d, display));
    Expected<fs::Fd> fd = fs::open_dir_at(root_fd.get(), name, display);
    if (!fd.ok()) {
      if (fd.status().code() == StatusCode::kNotFound) {
        return not_found("spool directory " + display +
                         " does not exist (flick serve creates it; or systemd-tmpfiles)");
      }
      return fd.status();
    }
    FLICK_TRY(check_dir(fd->get(), display));
    if (d == SpoolDir::kIncoming) {
      struct stat st;
      if (::fstat(fd->get(), &st) != 0) return errno_status("stat", display, errno);
      s.incoming_gid_ = st.st_gid;
    }
    s.dirs_[static_cast<int>(d)] = std::move(*fd);
  }
  struct statfs sf;
  if (::fstatfs(root_fd.get(), &sf) == 0) {
    if (const char* n = network_fs_name(sf.f_type)) {
      s.network_fs_ = true;
      s.fs_name_ = n;
    }
  }
  return s;
}

std::string Spool::path(SpoolDir d, const std::string& name) const {
  const std::string dir = fs::join(root_, spool_dir_name(d));
  return name.empty() ? dir : fs::join(dir, name);
}

Expected<std::vector<Spool::Entry>> Spool::list_jobs(SpoolDir d) const {
  FLICK_ASSIGN_OR_RETURN(std::vector<std::string> names, fs::list_dir(fd(d), path(d)));
  std::vector<Entry> out;
  out.reserve(names.size());
  for (std::string& n : names) {
    if (!job_file_stem(n)) continue;
    struct stat st;
    if (::fstatat(fd(d), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
    out.push_back({std::move(n), int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec});
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    return a.mtime_ns != b.mtime_ns ? a.mtime_ns < b.mtime_ns : a.name < b.name;
  });
  return out;
}

Expected<fs::Fd> Spool::lock_job(SpoolDir d, const std::string& name, bool* busy) const {
  *busy = false;
  // O_NONBLOCK: a FIFO dropped into the spool must not block the open.
  fs::Fd f(::openat(fd(d), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!f.valid()) return errno_status("opening", path(d, name), errno);
  if (::flock(f.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      *busy = true;
      return fs::Fd();
    }
    return errno_status("locking", path(d, name), errno);
  }
  // The name may have been moved away (and perhaps replaced) between the
  // open and the lock: it must still name the inode we locked.
  struct stat by_fd, by_name;
  if (::fstat(f.get(), &by_fd) != 0) return errno_status("stat", path(d, name), errno);
  if (::fstatat(fd(d), name.c_str(), &by_name, AT_SYMLINK_NOFOLLOW) != 0 ||
      by_fd.st_dev != by_name.st_dev || by_fd.st_ino != by_name.st_ino) {
    *busy = true;
    return fs::Fd();
  }
  return f;
}

Expected<std::optional<JobStatus>> Spool::read_status(SpoolDir d, const std::string& stem) const {
  const std::string name = stem + kStatusSuffix;
  fs::Fd f(::openat(fd(d), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!f.valid()) {
    if (errno == ENOENT) return std::optional<JobStatus>();
    return errno_status("opening", path(d, name), errno);
  }
  bool over = false;
  FLICK_ASSIGN_OR_RETURN(std::string text,
                         fs::read_limited(f.get(), 16 << 20, &over, path(d, name)));
  FLICK_ASSIGN_OR_RETURN(JobStatus s, parse_status(text, path(d, name)));
  return std::optional<JobStatus>(std::move(s));
}

Status Spool::write_status(SpoolDir d, const std::string& stem, const JobStatus& s, bool replace,
                           bool durable) const {
  return fs::write_file_atomic(fd(d), path(d), stem + kStatusSuffix, format_status(s), replace,
                               durable);
}

Status Spool::remove_status(SpoolDir d, const std::string& stem) const {
  const std::string name = stem + kStatusSuffix;
  if (::unlinkat(fd(d), name.c_str(), 0) != 0 && errno != ENOENT) {
    return errno_status("removing", path(d, name), errno);
  }
  return ok_status();
}

void Spool::reap_temporaries(bool include_own) const {
  for (SpoolDir d : kAllDirs) {
    Expected<std::vector<std::string>> names = fs::list_dir(fd(d), path(d));
    if (!names.ok()) continue;
    for (const std::string& n : *names) {
      if (!fs::is_temp_name(n)) continue;
      const int pid = fs::temp_name_pid(n);
      const bool owner_gone = pid <= 0 || (include_own && pid == ::getpid()) ||
                              (pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH);
      if (owner_gone && ::unlinkat(fd(d), n.c_str(), 0) == 0) {
        log_debug("removed stale temporary " + path(d, n));
      }
    }
  }
}

}  // namespace flick
