// Arena: every activation buffer and cache of a plan is requested first, then
// carved out of one 64-byte-aligned allocation. The job loop never allocates.
#pragma once

#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace flick {

class Arena {
 public:
  using BufferId = int;

  // Planning phase: record a buffer; returns its id.
  BufferId request(std::string name, DType dtype, Shape shape);
  // Allocate once. After this no more requests are accepted.
  void finalize();
  // Frees the memory (contents are lost); the next get() allocates it again.
  // For buffers idle during a long phase of a pipeline (a DiT's activations
  // while the VAE decodes).
  void release();
  bool finalized() const { return finalized_; }

  // The tensor for a planned buffer (valid after finalize()).
  Tensor get(BufferId id) const;
  const std::string& name(BufferId id) const { return entries_[static_cast<size_t>(id)].name; }
  size_t bytes() const { return total_; }
  // Whether `o` planned the same buffers (names, dtypes, shapes, in order):
  // then the ids of one are valid in the other, and users that never run
  // at the same time can share one allocation.
  bool same_plan(const Arena& o) const;
  int size() const { return static_cast<int>(entries_.size()); }

 private:
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    size_t offset;
  };
  std::vector<Entry> entries_;
  size_t total_ = 0;
  bool finalized_ = false;
  mutable HostBuffer memory_;  // empty after release() until the next get()
};

}  // namespace flick
