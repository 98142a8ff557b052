#include "runtime/arena.h"

namespace flick {

Arena::BufferId Arena::request(std::string name, DType dtype, Shape shape) {
  FLICK_CHECK(!finalized_, "Arena::request after finalize: " + name);
  size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  entries_.push_back({std::move(name), dtype, shape, total_});
  total_ += (bytes + 63) / 64 * 64;  // keep every buffer cache-line aligned
  return static_cast<BufferId>(entries_.size() - 1);
}

void Arena::finalize() {
  FLICK_CHECK(!finalized_, "Arena finalized twice");
  memory_ = HostBuffer(total_);
  finalized_ = true;
}

bool Arena::same_plan(const Arena& o) const {
  if (entries_.size() != o.entries_.size()) return false;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry &a = entries_[i], &b = o.entries_[i];
    if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape) return false;
  }
  return true;
}

void Arena::release() {
  FLICK_CHECK(finalized_, "Arena::release before finalize");
  memory_ = HostBuffer();
}

Tensor Arena::get(BufferId id) const {
  FLICK_CHECK(finalized_, "Arena::get before finalize");
  if (memory_.size() < total_) memory_ = HostBuffer(total_);
  FLICK_CHECK(id >= 0 && id < size(), "bad arena buffer id");
  const Entry& e = entries_[static_cast<size_t>(id)];
  return Tensor::view(static_cast<char*>(memory_.data()) + e.offset, e.dtype, e.shape);
}

}  // namespace flick
