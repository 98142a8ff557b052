// The plan cache: weights prepared at load (quantized, packed) kept on disk so
// the next start maps them instead of recomputing them.
//
// One file per entry ("<dir>/<entry name>.plan"); an entry holds a few
// tensors (a layer's int8 weight and its scales, say). Layout:
//   [0, 64)        header: magic "FLICKPC1", format version, key length,
//                  tensor count, payload length, payload checksum, header
//                  checksum (over the header's other bytes and the key)
//   [64, ...)      the key text (UTF-8), then the tensor records
//                  (dtype, rank, dims), then padding to 64 bytes
//   payload        each tensor's bytes, each 64-byte aligned
// The key is everything the bytes depend on, as text lines "name=value"
// (source identity, precision, shapes, ISA, oneDNN version, the code's
// format version): a reader compares it whole, so a stale entry is never
// used. Entries are written with AtomicFile (tmp, fsync, rename): a reader
// sees a whole entry or none, two writers of one entry each rename a whole
// file (last one wins; both are identical). Read with mmap: the tensors are
// views into the mapping, no copy.
//
// Validation on read: magic, version, sizes against the file size, header
// checksum, key equal, payload checksum. Any failure is a warning naming the
// file and a miss (the caller rebuilds and stores over it); never an error
// and never a crash. Deleting the directory or any file in it is safe.
//
// The payload checksum is a 64-bit hash of 8-byte words in four lanes
// (about memory bandwidth): it guards against a torn or bit-rotted file,
// not an adversary; the cache directory is trusted like the checkpoint.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"
#include "runtime/tensor.h"

namespace flick {

// Identity of a weight source file without reading all of it: its size, its
// mtime (ns) and the SHA-256 of its first MiB (a safetensors file's header:
// every tensor's name, dtype, shape and offsets, and its metadata). A
// rewritten checkpoint changes the mtime; a copy with the mtime kept
// (cp -p, rsync -t) and new values of the same shapes is the one change it
// cannot see, which hashing 5 GB at every start (seconds) would.
// "size=...;mtime_ns=...;head_sha256=..." for `path`.
Expected<std::string> source_identity(const std::string& path);

// Builds a key text: add() lines in a fixed order.
class PlanKey {
 public:
  PlanKey& add(std::string_view name, std::string_view value);
  PlanKey& add(std::string_view name, int64_t value);
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

// A cache entry read back: tensor views into the mapped file.
class PlanEntry {
 public:
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  friend class PlanCache;
  std::shared_ptr<void> mapping_;  // munmap on last release
  std::vector<Tensor> tensors_;
};

// What `flick cache` lists per entry.
struct PlanEntryInfo {
  std::string file;   // file name in the directory
  int64_t bytes = 0;  // file size
  int64_t mtime_s = 0;
  std::string key;  // empty with `problem` set if the header is unreadable
  std::string problem;
};

class PlanCache {
 public:
  // `dir` is created (with its parent, not further up) on the first store.
  explicit PlanCache(std::string dir);

  const std::string& dir() const { return dir_; }

  // The entry `name` ([A-Za-z0-9._-], others become '_') if its file is
  // whole and its key equals `key`; otherwise nullopt, with a warning when
  // a file was there but unusable (corrupt, truncated, stale).
  std::optional<PlanEntry> load(std::string_view name, const std::string& key) const;

  // Writes entry `name` atomically. Tensors must be contiguous CPU tensors.
  Status store(std::string_view name, const std::string& key,
               std::span<const Tensor> tensors) const;

  // Every *.plan file in the directory (an absent directory lists empty).
  Expected<std::vector<PlanEntryInfo>> list() const;
  // Removes every *.plan file and stale temporaries; returns how many.
  Expected<int64_t> clear() const;

  // Counters for logs and tests: entries loaded, rejected (warned) and stored.
  int64_t hits() const { return hits_; }
  int64_t rejected() const { return rejected_; }
  int64_t stores() const { return stores_; }

 private:
  std::string path_of(std::string_view name) const;
  std::string dir_;
  mutable int64_t hits_ = 0, rejected_ = 0, stores_ = 0;
};

// The payload checksum (exposed for tests).
uint64_t plan_checksum(const void* data, size_t size, uint64_t seed = 0);

}  // namespace flick
