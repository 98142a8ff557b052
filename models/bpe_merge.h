// BPE merging shared by the tokenizers (models/llama, models/clip): given a
// word's initial symbol ids, repeatedly merge the lowest-ranked adjacent pair,
// the leftmost among equal ranks, as Hugging Face tokenizers' Word::merge_all
// does. A heap keeps a long word at n log n instead of n^2. For CLIP's bpe(),
// which merges every occurrence of the best pair in one step, the order is
// the same: a merge never creates another instance of its own pair.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <unordered_map>
#include <vector>

namespace flick {

struct BpeMerge {
  int32_t rank;
  int32_t merged;
};
// Keyed by (left id << 32 | right id).
using BpeMerges = std::unordered_map<uint64_t, BpeMerge>;

inline uint64_t bpe_pair_key(int32_t left, int32_t right) {
  return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
}

// Appends the merged ids of `ids` (one word) to `out`.
inline void bpe_merge(const std::vector<int32_t>& ids, const BpeMerges& merges,
                      std::vector<int32_t>& out) {
  if (ids.empty()) return;
  struct Symbol {
    int32_t id, prev, next;
    bool alive;
  };
  const auto n = static_cast<int32_t>(ids.size());
  std::vector<Symbol> s(ids.size());
  for (int32_t i = 0; i < n; ++i) s[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};
  struct Candidate {
    int32_t rank, pos, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto merge_of = [&](int32_t pos) -> const BpeMerge* {
    const int32_t next = s[pos].next;
    if (next < 0) return nullptr;
    auto it = merges.find(bpe_pair_key(s[pos].id, s[next].id));
    return it == merges.end() ? nullptr : &it->second;
  };
  auto push = [&](int32_t pos) {
    if (const BpeMerge* m = merge_of(pos)) heap.push({m->rank, pos, m->merged});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    // Stale when either symbol changed since it was queued.
    const BpeMerge* m = s[c.pos].alive ? merge_of(c.pos) : nullptr;
    if (!m || m->merged != c.merged || m->rank != c.rank) continue;
    const int32_t right = s[c.pos].next;
    s[c.pos].id = c.merged;
    s[right].alive = false;
    s[c.pos].next = s[right].next;
    if (s[c.pos].next >= 0) s[s[c.pos].next].prev = c.pos;
    if (s[c.pos].prev >= 0) push(s[c.pos].prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = s[i].next) out.push_back(s[i].id);
}

}  // namespace flick
