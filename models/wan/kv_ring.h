// The rolling KV-cache bookkeeping of the causal DiT and its action module
// (spec §4; causal_model.py and action_module.py share the rule). No tensor
// maths: advance() says how to shift the cache, where to write the new chunk
// and which window to attend. Units are cache entries: tokens for the
// self-attention cache, latent frames for the mouse and keyboard caches.
//
// Every sampler step of a block and the block's t = 0 re-run pass the same
// chunk end, so they write the same slots; only a chunk that ends past
// global_end can roll the cache.
#pragma once

#include <cstdint>

namespace flick::wan {

struct KvRingStep {
  // Before writing: copy entries [sink + evicted, sink + evicted + rolled) to
  // [sink, sink + rolled) (overlapping, left shift: copy front to back).
  int64_t evicted = 0;
  int64_t rolled = 0;
  // Write the chunk's K/V into [write_begin, write_end).
  int64_t write_begin = 0, write_end = 0;
  // Attend over [attend_begin, attend_end) (attend_end = write_end).
  int64_t attend_begin = 0, attend_end = 0;
};

class KvRing {
 public:
  // size: the cache's capacity (local_attn_size x entries per frame);
  // max_attention: the longest window attended (the reference's
  // max_attention_size; equal to size at the real resolution).
  explicit KvRing(int64_t size, int64_t sink = 0, int64_t max_attention = -1);

  // A chunk of n entries covering absolute positions [chunk_end - n, chunk_end).
  KvRingStep advance(int64_t chunk_end, int64_t n);

  int64_t size() const { return size_; }
  int64_t global_end() const { return global_end_; }
  int64_t local_end() const { return local_end_; }

 private:
  int64_t size_, sink_, max_attention_;
  int64_t global_end_ = 0, local_end_ = 0;
};

}  // namespace flick::wan
