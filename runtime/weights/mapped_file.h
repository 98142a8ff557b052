// A whole regular file mapped read-only (PROT_READ, MAP_PRIVATE). Deploy new
// weights by rename, never by rewriting a mapped file in place: truncating a
// mapped file makes later reads fault (SIGBUS).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/status.h"

namespace flick {

class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // Errors: not_found, io_error (errno), invalid_input (not a regular file).
  static Expected<MappedFile> open(const std::string& path);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Hint that [offset, offset + len) will be read soon.
  void will_need(size_t offset, size_t len) const;
  // Drops the file's pages from this process's resident memory (weights
  // already copied into packed layouts). Pointers stay valid: a later read
  // faults the page back in from the page cache or the disk.
  void release_pages() const;

 private:
  const uint8_t* data_ = nullptr;  // nullptr for an empty file
  size_t size_ = 0;
};

}  // namespace flick
