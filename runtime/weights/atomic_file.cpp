#include "runtime/weights/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <utility>

namespace flick {
namespace {

std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

AtomicFile::AtomicFile(AtomicFile&& o) noexcept
    : path_(std::move(o.path_)), tmp_path_(std::move(o.tmp_path_)), fd_(std::exchange(o.fd_, -1)) {}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

Expected<AtomicFile> AtomicFile::create(const std::string& path) {
  // Unique among threads and processes; O_EXCL catches a stale leftover.
  static std::atomic<unsigned> counter{0};
  size_t slash = path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty()) return invalid_input("cannot write '" + path + "': not a file name");
  AtomicFile f;
  f.path_ = path;
  f.tmp_path_ = dir + "." + base + ".tmp-" + std::to_string(getpid()) + "-" +
                std::to_string(counter.fetch_add(1));
  f.fd_ = ::open(f.tmp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (f.fd_ < 0) return errno_status("cannot create", f.tmp_path_, errno);
  return f;
}

Status AtomicFile::write(const void* data, size_t n) {
  FLICK_CHECK(fd_ >= 0, "write after commit");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno_status("cannot write", tmp_path_, errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return ok_status();
}

Status AtomicFile::commit() {
  FLICK_CHECK(fd_ >= 0, "commit twice");
  // An fsync error cannot be retried (the kernel drops the dirty pages), so
  // the caller must regenerate the file; the temp file is removed.
  if (::fsync(fd_) != 0) return errno_status("cannot sync", tmp_path_, errno);
  int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    Status s = errno_status("cannot close", tmp_path_, errno);
    ::unlink(tmp_path_.c_str());
    return s;
  }
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    Status s = errno_status("cannot rename to", path_, errno);
    ::unlink(tmp_path_.c_str());
    return s;
  }
  std::string dir = parent_dir(path_);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return errno_status("cannot open directory", dir, errno);
  int rc = ::fsync(dfd);
  int err = errno;
  ::close(dfd);
  if (rc != 0) return errno_status("cannot sync directory", dir, err);
  return ok_status();
}

}  // namespace flick
