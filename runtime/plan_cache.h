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
#include <functional>
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
  // Keeps the mapping (and so the tensors' bytes) alive: for objects that
  // adopt the bytes in place (runtime/cpu/linear_cache.h).
  std::shared_ptr<const void> storage() const { return mapping_; }

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
  // Creates the directory (and its parent) if needed: a pipeline checks it
  // once and loads without the cache (one warning) if it cannot.
  Status create_dir() const;

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
  // "<dir>: N entries loaded, M stored, R rejected", for a load's log line.
  std::string summary() const;

 private:
  friend struct PlanCached;
  std::string path_of(std::string_view name) const;
  std::string dir_;
  mutable int64_t hits_ = 0, rejected_ = 0, stores_ = 0;
};

// A pipeline's cache at `dir` (empty: none), its directory created; one that
// cannot be made is a warning naming `who` and no cache (the load goes on
// without it, as the cache is an optimisation).
std::optional<PlanCache> open_plan_cache(const std::string& dir, std::string_view who);

// The cache a component loader consults while a pipeline loads: set by the
// pipeline around its load (thread-local, nested scopes restore the outer
// one), so the linear loaders of every model (wan_quant, clip_vision) reach
// it without a cache parameter threaded through each component's load().
// No scope (or a null cache): loaders build as they always did.
class PlanCacheScope {
 public:
  // `platform`: what the prepared bytes depend on besides the checkpoint
  // ("isa=avx512_core_amx;onednn=3.5.3"), part of every key.
  PlanCacheScope(const PlanCache* cache, std::string platform);
  ~PlanCacheScope();
  PlanCacheScope(const PlanCacheScope&) = delete;
  PlanCacheScope& operator=(const PlanCacheScope&) = delete;

  // The checkpoint the next entries come from: entry names start with
  // `component` ("mg2-universal.dit"), keys hold `identity`
  // (source_identity() of the file).
  void set_source(std::string component, std::string identity);
  // set_source for a checkpoint at `path` made of `files` (its shards, or
  // just `path`): the component is "<prefix>-<8 hex digits of the SHA-256
  // of path's canonical form>" (the same checkpoint named another way shares
  // entries, two checkpoints never evict each other), the identity that of
  // every file (source_identity, ';'-joined: a changed shard makes every
  // entry stale). Nothing without a cache (no file is read).
  Status set_checkpoint_source(std::string_view prefix, const std::string& path,
                               const std::vector<std::string>& files);

  static PlanCacheScope* current();
  const PlanCache* cache() const { return cache_; }

 private:
  friend struct PlanCached;
  const PlanCache* cache_;
  std::string platform_, component_, identity_;
  PlanCacheScope* outer_;
};

// Part of every PlanCached key: bump it whenever a cached preparation
// changes its bytes (ref::prepare_weights' int8 rule, the VAE's weight
// casts, an entry's layout), so entries written by an older flick are stale
// rather than trusted. (No build id is in the key: a rebuild that changes no
// rule keeps the cache.)
inline constexpr std::string_view kPlanCodeVersion = "flick-plan-1";

// Tensors prepared at load through the current scope's cache: the entry
// "<component>.<layer>" if its key (format `kind`, which names what the
// bytes are and their shapes, the layer, the source identity, the platform)
// matches, else build()'s tensors, stored for the next load (a failed store
// is a warning: the cache is an optimisation). Without a scope, build().
// `accept`, if given, judges a loaded entry's tensors beyond the key (an
// adopter checking a packed layout, say): an error is a warning, the entry
// counts as rejected, and build() replaces it. build() may return views
// (an OwnedTensor with an empty buffer) into memory it keeps itself.
struct PlanCached {
  std::vector<Tensor> tensors;  // views into `entry` or `built`
  bool hit = false;
  std::optional<PlanEntry> entry;
  std::vector<OwnedTensor> built;

  static Expected<PlanCached> get(std::string_view layer, std::string_view kind,
                                  const std::function<Expected<std::vector<OwnedTensor>>()>& build,
                                  const std::function<Status(const PlanEntry&)>& accept = nullptr);
};

// An object prepared at load (a packed linear or convolution: linear_cache.h,
// conv_cache.h) through the current scope's cache in its prepared form: a
// hit returns adopt(entry) and build() is not called (so no checkpoint
// tensor is read); a miss build()s and stores tensors_of(built) (views into
// the built object, stored before anything else runs on this thread). An
// entry adopt refuses is a warning and a rebuild (PlanCached::get). Without
// a scope, build().
template <class T>
Expected<std::unique_ptr<T>> plan_cached_object(
    std::string_view layer, std::string_view kind,
    const std::function<Expected<std::unique_ptr<T>>()>& build,
    const std::function<std::vector<Tensor>(const T&)>& tensors_of,
    const std::function<Expected<std::unique_ptr<T>>(const PlanEntry&)>& adopt) {
  const PlanCacheScope* scope = PlanCacheScope::current();
  if (scope == nullptr || scope->cache() == nullptr) return build();
  std::unique_ptr<T> built, adopted;
  FLICK_ASSIGN_OR_RETURN(PlanCached c, PlanCached::get(
                                           layer, kind,
                                           [&]() -> Expected<std::vector<OwnedTensor>> {
                                             FLICK_ASSIGN_OR_RETURN(built, build());
                                             std::vector<OwnedTensor> out;
                                             for (const Tensor& v : tensors_of(*built))
                                               out.emplace_back().t = v;
                                             return out;
                                           },
                                           [&](const PlanEntry& e) -> Status {
                                             Expected<std::unique_ptr<T>> a = adopt(e);
                                             if (!a.ok()) return a.status();
                                             adopted = std::move(*a);
                                             return ok_status();
                                           }));
  return c.hit ? std::move(adopted) : std::move(built);
}

// The payload checksum (exposed for tests).
uint64_t plan_checksum(const void* data, size_t size, uint64_t seed = 0);

}  // namespace flick
