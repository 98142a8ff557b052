#include "models/wan/kv_ring.h"

#include <algorithm>

#include "runtime/status.h"

namespace flick::wan {

KvRing::KvRing(int64_t size, int64_t sink, int64_t max_attention)
    : size_(size), sink_(sink), max_attention_(max_attention < 0 ? size : max_attention) {
  FLICK_CHECK(size > 0 && sink >= 0 && sink < size);
}

KvRingStep KvRing::advance(int64_t chunk_end, int64_t n) {
  FLICK_CHECK(n > 0 && n <= size_ - sink_ && chunk_end >= n);
  // A chunk may repeat the last one (same end) or follow it; it never goes
  // back past what the cache already covers.
  FLICK_CHECK(chunk_end >= global_end_ || chunk_end - n >= global_end_ - local_end_);
  KvRingStep step;
  if (chunk_end > global_end_ && local_end_ + n > size_) {
    step.evicted = local_end_ + n - size_;
    step.rolled = local_end_ - step.evicted - sink_;
    local_end_ = local_end_ + chunk_end - global_end_ - step.evicted;
  } else {
    local_end_ = local_end_ + chunk_end - global_end_;
  }
  FLICK_CHECK(local_end_ >= n && local_end_ <= size_);
  step.write_begin = local_end_ - n;
  step.write_end = local_end_;
  step.attend_begin = std::max<int64_t>(0, local_end_ - max_attention_);
  step.attend_end = local_end_;
  global_end_ = chunk_end;
  return step;
}

}  // namespace flick::wan
