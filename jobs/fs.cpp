#include "jobs/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace flick::fs {

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Status Fd::close(const std::string& name_for_errors) {
  if (fd_ < 0) return ok_status();
  const int rc = ::close(release());
  if (rc != 0 && errno != EINTR) return errno_status("closing", name_for_errors, errno);
  return ok_status();
}

Expected<Fd> open_dir(const std::string& path) { return open_dir_at(AT_FDCWD, path, path); }

Expected<Fd> open_dir_at(int dirfd, const std::string& name, const std::string& display) {
  const int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP || errno == ENOTDIR) {
      return invalid_input(display + " is not a directory (symlinks are not followed here)");
    }
    return errno_status("opening directory", display, errno);
  }
  return Fd(fd);
}

Expected<Fd> open_dir_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP || errno == ENOTDIR) {
      return invalid_input(path + " is not a directory (symlinks are not followed here)");
    }
    return errno_status("opening directory", path, errno);
  }
  return Fd(fd);
}

Status fsync_fd(int fd, const std::string& name_for_errors) {
  // An fsync error cannot be retried (the kernel drops the dirty pages and
  // reports once), so it fails the whole write; the caller regenerates.
  if (::fsync(fd) != 0) return errno_status("fsync", name_for_errors, errno);
  return ok_status();
}

Status fsync_dir_at(int dirfd, const std::string& display) { return fsync_fd(dirfd, display); }

int rename_noreplace(int from_dir, const std::string& from, int to_dir, const std::string& to) {
  if (::syscall(SYS_renameat2, from_dir, from.c_str(), to_dir, to.c_str(), RENAME_NOREPLACE) == 0) {
    return 0;
  }
  if (errno != EINVAL && errno != ENOSYS) return errno;
  // Filesystems without RENAME_NOREPLACE: link() refuses an existing target.
  if (::linkat(from_dir, from.c_str(), to_dir, to.c_str(), 0) != 0) return errno;
  if (::unlinkat(from_dir, from.c_str(), 0) != 0) return errno;
  return 0;
}

namespace {

// ".<name>.tmp.<pid>.<random>": the pid tells the reaper whose it is; the
// random part keeps concurrent writers of one name apart.
std::string temp_name_for(const std::string& name) {
  uint64_t r = 0;
  if (::getrandom(&r, sizeof r, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof r)) {
    r = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&r)) ^ static_cast<uint64_t>(::clock());
  }
  char suffix[24];
  std::snprintf(suffix, sizeof suffix, "%016llx", static_cast<unsigned long long>(r));
  return "." + name + ".tmp." + std::to_string(::getpid()) + "." + suffix;
}

Status write_all(int fd, const std::string& data, const std::string& display) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("writing", display, errno);
    }
    done += static_cast<size_t>(n);
  }
  return ok_status();
}

// Makes a rename into dirfd durable. An O_PATH descriptor cannot be
// fsynced: the directory is reopened for reading where the caller may read
// it; a submitter may not read incoming/ (mode 2730), so there the
// filesystem is synced through the file just renamed.
Status commit_rename(int dirfd, const std::string& dir_display, const std::string& name) {
  const int flags = ::fcntl(dirfd, F_GETFL);
  if (flags < 0 || (flags & O_PATH) == 0) return fsync_dir_at(dirfd, dir_display);
  Fd dir(::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.valid()) return fsync_dir_at(dir.get(), dir_display);
  const std::string display = join(dir_display, name);
  Fd file(::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!file.valid()) {
    if (errno == ENOENT) return ok_status();  // already claimed: the daemon's from here
    return errno_status("opening", display, errno);
  }
  if (::syncfs(file.get()) != 0) return errno_status("syncfs", display, errno);
  return ok_status();
}

}  // namespace

bool is_temp_name(const std::string& name) {
  return name.size() > 1 && name[0] == '.' && name.find(".tmp.") != std::string::npos;
}

int temp_name_pid(const std::string& name) {
  const size_t p = name.rfind(".tmp.");
  if (p == std::string::npos) return 0;
  return std::atoi(name.c_str() + p + 5);
}

Status write_file_atomic(int dirfd, const std::string& dir_display, const std::string& name,
                         const std::string& data, bool replace, bool durable, mode_t mode) {
  const std::string display = join(dir_display, name);
  const std::string temp = temp_name_for(name);
  Fd fd(::openat(dirfd, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd.valid()) return errno_status("creating", join(dir_display, temp), errno);
  Status s = write_all(fd.get(), data, display);
  if (s.ok() && durable) s = fsync_fd(fd.get(), display);
  if (s.ok()) s = fd.close(display);
  if (s.ok()) {
    int err = 0;
    if (replace) {
      if (::renameat(dirfd, temp.c_str(), dirfd, name.c_str()) != 0) err = errno;
    } else {
      err = rename_noreplace(dirfd, temp, dirfd, name);
    }
    if (err != 0) s = errno_status("renaming into place", display, err);
  }
  if (!s.ok()) {
    ::unlinkat(dirfd, temp.c_str(), 0);
    return s;
  }
  if (durable) return commit_rename(dirfd, dir_display, name);
  return ok_status();
}

Expected<std::string> read_limited(int fd, int64_t limit, bool* over_limit,
                                   const std::string& name_for_errors) {
  std::string out;
  *over_limit = false;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("reading", name_for_errors, errno);
    }
    const int64_t room = limit - static_cast<int64_t>(out.size());
    if (n > room) {
      out.append(buf, static_cast<size_t>(std::max<int64_t>(room, 0)));
      *over_limit = true;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Expected<std::vector<std::string>> list_dir(int dirfd, const std::string& display) {
  // fdopendir takes ownership of its descriptor: give it a duplicate.
  const int dup = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dup < 0) return errno_status("opening directory", display, errno);
  DIR* d = ::fdopendir(dup);
  if (d == nullptr) {
    const int err = errno;
    ::close(dup);
    return errno_status("reading directory", display, err);
  }
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
    errno = 0;
  }
  const int err = errno;
  ::closedir(d);
  if (err != 0) return errno_status("reading directory", display, err);
  return names;
}

Status remove_tree_at(int dirfd, const std::string& name, const std::string& display) {
  struct stat st;
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return ok_status();
    return errno_status("stat", display, errno);
  }
  if (S_ISDIR(st.st_mode)) {
    FLICK_ASSIGN_OR_RETURN(Fd sub, open_dir_at(dirfd, name, display));
    FLICK_ASSIGN_OR_RETURN(std::vector<std::string> entries, list_dir(sub.get(), display));
    for (const std::string& e : entries) {
      FLICK_TRY(remove_tree_at(sub.get(), e, join(display, e)));
    }
    if (::unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
      return errno_status("removing", display, errno);
    }
    return ok_status();
  }
  if (::unlinkat(dirfd, name.c_str(), 0) != 0 && errno != ENOENT) {
    return errno_status("removing", display, errno);
  }
  return ok_status();
}

namespace {

Status collect_files(int dirfd, const std::string& prefix, const std::string& display, int depth,
                     std::vector<std::string>* out) {
  if (depth > 16) return invalid_input(display + ": directories nested too deeply");
  FLICK_ASSIGN_OR_RETURN(std::vector<std::string> entries, list_dir(dirfd, display));
  for (const std::string& e : entries) {
    struct stat st;
    if (::fstatat(dirfd, e.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return errno_status("stat", join(display, e), errno);
    }
    const std::string rel = prefix.empty() ? e : prefix + "/" + e;
    if (S_ISREG(st.st_mode)) {
      out->push_back(rel);
    } else if (S_ISDIR(st.st_mode)) {
      FLICK_ASSIGN_OR_RETURN(Fd sub, open_dir_at(dirfd, e, join(display, e)));
      FLICK_TRY(collect_files(sub.get(), rel, join(display, e), depth + 1, out));
    }
  }
  return ok_status();
}

}  // namespace

Expected<std::vector<std::string>> list_files_recursive(int dirfd, const std::string& display) {
  std::vector<std::string> out;
  FLICK_TRY(collect_files(dirfd, "", display, 0, &out));
  std::sort(out.begin(), out.end());
  return out;
}

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

}  // namespace flick::fs
