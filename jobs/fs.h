// Filesystem helpers for the spool and the output directories: descriptor
// based (openat/renameat2/unlinkat relative to an open directory, O_NOFOLLOW)
// so a path checked once cannot be redirected by a symlink swapped in later,
// and durable (tmp, fsync, rename, fsync dir).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace flick::fs {

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // close() with its error checked (NFS and full disks report there).
  Status close(const std::string& name_for_errors);

 private:
  int fd_ = -1;
};

// Opens a directory, refusing a symlink as its last component.
Expected<Fd> open_dir(const std::string& path);
Expected<Fd> open_dir_at(int dirfd, const std::string& name, const std::string& display);
// An O_PATH descriptor of a directory: needs no read permission on it (only
// search on its parents), and serves as the directory of openat/renameat/
// fstatat. incoming/ (mode 2730) is opened so by its submitters.
Expected<Fd> open_dir_path(const std::string& path);

Status fsync_fd(int fd, const std::string& name_for_errors);
Status fsync_dir_at(int dirfd, const std::string& display);

// rename that fails with EEXIST instead of replacing an existing target
// (renameat2 RENAME_NOREPLACE; link+unlink where the filesystem lacks it).
// Returns the errno (0 on success).
int rename_noreplace(int from_dir, const std::string& from, int to_dir, const std::string& to);

// Writes `data` to dirfd/name atomically: a hidden temporary name in the same
// directory (".<name>.tmp.<pid>.<n>"), write, rename over `name`. With
// durable=true the file is fsynced before the rename and the directory after
// it (the commit of a status file); without, a reader or a crashed process
// still sees all or nothing, only a power loss may lose it. With
// replace=false an existing `name` is an error (EEXIST). The temporary is
// removed on failure. `dirfd` may be an O_PATH descriptor of a directory
// its caller may not read: durability then comes from syncfs().
Status write_file_atomic(int dirfd, const std::string& dir_display, const std::string& name,
                         const std::string& data, bool replace, bool durable, mode_t mode = 0640);

// True for names write_file_atomic uses for its temporaries.
bool is_temp_name(const std::string& name);
// The pid embedded in a temporary's name (0 if none).
int temp_name_pid(const std::string& name);

// Reads at most `limit` bytes from fd; `*over_limit` is set when the file is
// longer (the content then holds the first `limit` bytes).
Expected<std::string> read_limited(int fd, int64_t limit, bool* over_limit,
                                   const std::string& name_for_errors);

// Entries of a directory (no "." or ".."), unsorted.
Expected<std::vector<std::string>> list_dir(int dirfd, const std::string& display);

// Removes dirfd/name and everything below it without following symlinks.
Status remove_tree_at(int dirfd, const std::string& name, const std::string& display);

// Regular files below dirfd (recursively, symlinks not followed), as paths
// relative to it, sorted.
Expected<std::vector<std::string>> list_files_recursive(int dirfd, const std::string& display);

// Joins a directory and a name with exactly one '/'.
std::string join(const std::string& dir, const std::string& name);

}  // namespace flick::fs
