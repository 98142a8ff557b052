// Shared oneDNN plumbing of the CPU backend: the one engine, a stream per
// calling thread, dtype and activation mapping.
#pragma once

#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace flick::cpu {

// The process's oneDNN CPU engine, shared by every packed object.
const dnnl::engine& onednn_engine();
// A stream on that engine for the calling thread.
dnnl::stream& onednn_stream();

dnnl::memory::data_type onednn_dtype(DType t);

// Appends the eltwise post-op computing act (nothing for None).
void append_activation(dnnl::post_ops& po, Activation act);

// Working memory of the oneDNN calls on the calling thread: the scratchpad
// and the staging buffers of reorders around a primitive. A thread runs one
// primitive at a time, so every plan shares these, sized by the largest need
// (grown on first use), instead of each plan keeping its own: a VAE has
// dozens of convolution plans, each with full-resolution buffers.
struct CallBuffers {
  enum Slot { kScratchpad, kSrc, kDst, kSlots };
  // At least `bytes` of slot s; valid until the next larger request of s.
  void* get(Slot s, size_t bytes);

 private:
  HostBuffer bufs_[kSlots];
};
CallBuffers& onednn_call_buffers();

// The implementation oneDNN picked ("brg:avx512_core_amx_int8", ...). Logs a
// warning the first time a slow reference implementation ("ref...") shows up,
// since that is a performance bug, not a correctness one.
std::string impl_name(const dnnl::primitive_desc_base& pd, const std::string& what);

// Weights reordered for the plan cache (linear_cache.h, conv_cache.h): the
// md's bytes as U8 (dnnl_memory_desc_t is a plain struct in oneDNN 2.x), a
// view valid while `md` lives.
Tensor md_bytes(const dnnl::memory::desc& md);
// Whether an entry's `md` bytes and `weights` are the layout `want` this
// process's primitive asks for, at its size: an error saying what differs.
Status check_adopted_weights(const Tensor& md, const Tensor& weights,
                             const dnnl::memory::desc& want);

// The first of oneDNN's candidate implementations for pd's operation, in its
// order of preference, whose name ("brgconv:avx512_core_vnni", ...) `take`
// accepts; none: nullopt. The operation descriptor pd was made from must
// outlive the call (the iteration reads it).
template <class PrimitiveDesc, class Take>
std::optional<PrimitiveDesc> first_impl(PrimitiveDesc pd, Take&& take) {
  do {
    if (take(std::string(pd.impl_info_str()))) return pd;
  } while (pd.next_impl());
  return std::nullopt;
}

// x -> y through oneDNN reorders (layout and dtype conversion), built once;
// run() allocates nothing. With round_to_bf16, f32 values pass through a
// dense bf16 buffer on the way (bf16 compute emulated by an f32 primitive
// on CPUs whose oneDNN has no bf16 kernels gets the same bf16-rounded
// inputs).
class ReorderChain {
 public:
  ReorderChain() = default;
  ReorderChain(const dnnl::memory::desc& from, const dnnl::memory& to, bool round_to_bf16);
  // Reads from `from_data` (laid out as `from`), writes `to`'s buffer.
  void run(dnnl::stream& s, void* from_data);

 private:
  dnnl::memory from_, mid_;
  std::vector<std::pair<dnnl::reorder, std::unordered_map<int, dnnl::memory>>> steps_;
};

// A primitive's plans, one per call signature (shapes, layouts, dtypes,
// activation): the plan whose key equals `key`, built by build(plan) on
// first use. Plan has a `key` member.
template <class Plan, class Key, class Build>
Plan& find_or_build_plan(std::vector<std::unique_ptr<Plan>>& plans, const Key& key, Build&& build) {
  for (auto& p : plans)
    if (p->key == key) return *p;
  auto p = std::make_unique<Plan>();
  p->key = key;
  build(*p);
  plans.push_back(std::move(p));
  return *plans.back();
}

}  // namespace flick::cpu
