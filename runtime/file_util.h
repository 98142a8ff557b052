// Durable file writing: every output is written under a temporary name in its
// final directory, fsynced, then renamed into place, so a reader (or a crash)
// sees the whole file or none of it. The directory itself is fsynced once,
// after the last rename, with fsync_dir().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace flick {

class AtomicFile {
 public:
  // Opens "<dir>/.<name>.tmp-<random>" next to `path` with O_EXCL.
  static Expected<AtomicFile> create(const std::string& path);

  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&& other) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  // Removes the temporary file unless commit() succeeded.
  ~AtomicFile();

  Status write(const void* data, size_t size);
  // Writes at an absolute offset (to patch a header after the fact).
  Status pwrite(const void* data, size_t size, int64_t offset);
  // fsync, close, rename to the final path. The directory is not synced.
  Status commit();

  const std::string& path() const { return path_; }
  // Another writer (libavformat) may open this name and write the data; the
  // fsync in commit() covers it because it syncs the inode.
  const std::string& temp_path() const { return temp_path_; }
  int64_t bytes_written() const { return bytes_written_; }

 private:
  AtomicFile() = default;
  void discard();

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  int64_t bytes_written_ = 0;
};

// Writes `data` to `path` atomically (tmp, fsync, rename).
Status write_file_atomic(const std::string& path, const void* data, size_t size);

// fsync a directory so the renames in it are durable.
Status fsync_dir(const std::string& dir);

// Creates `dir` (not its parents) unless it already is a directory.
Status ensure_dir(const std::string& dir);

// Reads a whole file (up to max_bytes, else an error naming the file).
Expected<std::vector<uint8_t>> read_file(const std::string& path,
                                         int64_t max_bytes = int64_t{1} << 31);

// The same for an open regular file (read from its start with pread);
// `name` is for messages. The descriptor stays open.
Expected<std::vector<uint8_t>> read_fd(int fd, const std::string& name,
                                       int64_t max_bytes = int64_t{1} << 31);

// Size of a regular file in bytes.
Expected<int64_t> file_size(const std::string& path);

// "a/b/c.png" -> "a/b", "c.png" -> ".".
std::string parent_dir(const std::string& path);
std::string join_path(const std::string& dir, const std::string& name);

}  // namespace flick
