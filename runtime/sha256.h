// SHA-256 (FIPS 180-4) for job-file and output hashes in status files and the
// plan cache's keys (runtime/plan_cache.h). A small portable implementation:
// hashing is a few percent of a job's commit time and not worth a crypto
// library dependency.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/status.h"

namespace flick {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // Finishes the hash; the object must not be updated afterwards.
  std::array<uint8_t, 32> digest();
  // Lowercase hex of digest().
  std::string hex_digest();

 private:
  void compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::string_view data);

// Hashes a file read through an open descriptor (from its current offset).
Expected<std::string> sha256_fd(int fd, const std::string& name_for_errors);

}  // namespace flick
