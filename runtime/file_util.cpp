#include "runtime/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <random>

namespace flick {
namespace {

std::string base_name(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A name no other writer in this or another process picks: pid, a process
// counter and random bits (O_EXCL catches the rest).
std::string temp_suffix() {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[64];
  std::snprintf(buf, sizeof(buf), ".tmp-%d-%llu-%08llx", static_cast<int>(getpid()),
                static_cast<unsigned long long>(counter.fetch_add(1)),
                static_cast<unsigned long long>(rng() & 0xffffffffu));
  return buf;
}

}  // namespace

std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

Expected<AtomicFile> AtomicFile::create(const std::string& path) {
  AtomicFile f;
  f.path_ = path;
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::string name(1, '.');  // hidden, so globs over the directory skip it
    name += base_name(path);
    name += temp_suffix();
    f.temp_path_ = join_path(parent_dir(path), name);
    f.fd_ =
        ::open(f.temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (f.fd_ >= 0) return f;
    if (errno != EEXIST) return errno_status("cannot create", f.temp_path_, errno);
  }
  return io_error("cannot create a temporary file next to " + path);
}

AtomicFile::AtomicFile(AtomicFile&& o) noexcept
    : path_(std::move(o.path_)),
      temp_path_(std::move(o.temp_path_)),
      fd_(o.fd_),
      bytes_written_(o.bytes_written_) {
  o.fd_ = -1;
  o.temp_path_.clear();
}

AtomicFile& AtomicFile::operator=(AtomicFile&& o) noexcept {
  if (this != &o) {
    discard();
    path_ = std::move(o.path_);
    temp_path_ = std::move(o.temp_path_);
    fd_ = o.fd_;
    bytes_written_ = o.bytes_written_;
    o.fd_ = -1;
    o.temp_path_.clear();
  }
  return *this;
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  temp_path_.clear();
}

Status AtomicFile::write(const void* data, size_t size) {
  FLICK_CHECK(fd_ >= 0, "write after commit");
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("cannot write", temp_path_, errno);
    }
    p += n;
    size -= static_cast<size_t>(n);
    bytes_written_ += n;
  }
  return ok_status();
}

Status AtomicFile::pwrite(const void* data, size_t size, int64_t offset) {
  FLICK_CHECK(fd_ >= 0, "write after commit");
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    ssize_t n = ::pwrite(fd_, p, size, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("cannot write", temp_path_, errno);
    }
    p += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
  return ok_status();
}

Status AtomicFile::commit() {
  FLICK_CHECK(fd_ >= 0, "commit twice");
  // An fsync error cannot be retried (the kernel drops the dirty pages), so
  // the file is discarded and the caller regenerates it.
  if (::fsync(fd_) != 0) {
    Status s = errno_status("cannot fsync", temp_path_, errno);
    discard();
    return s;
  }
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) {
    Status s = errno_status("cannot close", temp_path_, errno);
    discard();
    return s;
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    Status s = errno_status("cannot rename " + temp_path_ + " to", path_, errno);
    discard();
    return s;
  }
  temp_path_.clear();
  return ok_status();
}

Status write_file_atomic(const std::string& path, const void* data, size_t size) {
  FLICK_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::create(path));
  FLICK_TRY(f.write(data, size));
  return f.commit();
}

Status fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open directory", dir, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return errno_status("cannot fsync directory", dir, err);
  return ok_status();
}

Status ensure_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) == 0) return ok_status();
  if (errno != EEXIST) return errno_status("cannot create directory", dir, errno);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return errno_status("cannot stat", dir, errno);
  if (!S_ISDIR(st.st_mode)) return io_error(dir + " exists and is not a directory");
  return ok_status();
}

Expected<int64_t> file_size(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return errno_status("cannot stat", path, errno);
  if (!S_ISREG(st.st_mode)) return invalid_input(path + " is not a regular file");
  return static_cast<int64_t>(st.st_size);
}

Expected<std::vector<uint8_t>> read_file(const std::string& path, int64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open", path, errno);
  Expected<std::vector<uint8_t>> data = read_fd(fd, path, max_bytes);
  ::close(fd);
  return data;
}

Expected<std::vector<uint8_t>> read_fd(int fd, const std::string& name, int64_t max_bytes) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return errno_status("cannot stat", name, errno);
  if (!S_ISREG(st.st_mode)) return invalid_input(name + " is not a regular file");
  if (st.st_size > max_bytes) {
    return invalid_input(name + " is too large (" + std::to_string(st.st_size) + " bytes, limit " +
                         std::to_string(max_bytes) + ")");
  }
  std::vector<uint8_t> data(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < data.size()) {
    // pread: from the start, wherever an earlier reader left the offset.
    const ssize_t n = ::pread(fd, data.data() + done, data.size() - done, static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("cannot read", name, errno);
    }
    if (n == 0) break;  // shrank while reading
    done += static_cast<size_t>(n);
  }
  data.resize(done);
  return data;
}

}  // namespace flick
