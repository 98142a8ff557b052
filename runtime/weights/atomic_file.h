// A file that appears at its path complete or not at all: written to a temp
// name in the same directory, then fsync, rename over the path, fsync of the
// directory (a rename is durable only once its directory is synced).
#pragma once

#include <cstddef>
#include <string>

#include "runtime/status.h"

namespace flick {

class AtomicFile {
 public:
  AtomicFile(AtomicFile&& o) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  // Without commit(): removes the temp file.
  ~AtomicFile();

  static Expected<AtomicFile> create(const std::string& path);
  Status write(const void* data, size_t n);
  Status commit();

 private:
  AtomicFile() = default;
  std::string path_, tmp_path_;
  int fd_ = -1;
};

}  // namespace flick
