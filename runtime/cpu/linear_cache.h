// CPU linear layers through the plan cache (runtime/plan_cache.h) in their
// packed form: the AMX B-tile layout (runtime/cpu/gemm.h) or oneDNN's
// blocked weights, so a warm load maps the entry and adopts the bytes in
// place (no quantization, no [N, K] copy, no packing, no reorder).
//
// An entry is
//   meta   I64 [kMetaLen]: layout (AMX / oneDNN), format version, precision,
//          N, K, the flags below
//   packed U8: AmxWeights::bytes() / the oneDNN weights md's size
//   md     U8 [sizeof(dnnl_memory_desc_t)] (oneDNN only): the blocked
//          layout, compared on adopt with the one this process's primitive
//          asks for (oneDNN 2.x descs are plain structs)
//   scale  F32 [N] (INT8 / FP8), bias F32 [N] (if any)
// and its key holds the precision, N, K and the layout family
// (packed_linear_kind), besides the plan cache's own (source, ISA, oneDNN
// version). Adopt checks every tensor's dtype and size against what this
// process would pack; an entry that fails is rebuilt with a warning.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace flick::cpu {

// The packed state of a CPU linear (from pack_linear or adopt) as tensors:
// views into its own memory, valid while `w` lives.
std::vector<Tensor> packed_linear_tensors(const PackedLinear& w);

// A linear made of packed_linear_tensors' output (views into a mapped entry,
// kept alive by `storage`): the packed bytes are used in place. An error
// (never a crash) when they are not what this process would pack for
// `precision`, n, k.
Expected<std::unique_ptr<PackedLinear>> adopt_packed_linear(std::span<const Tensor> tensors,
                                                            Precision precision, int64_t n,
                                                            int64_t k,
                                                            std::shared_ptr<const void> storage);

// The layout family pack_linear picks for `precision` on this CPU and the
// shapes ("packed-linear-v1 amx-s8 INT8 [N, K]"), for plan cache keys.
std::string packed_linear_kind(Precision precision, int64_t n, int64_t k, bool bias);

// Linear `layer` ([n, k], `precision`) packed by `pack` through the current
// PlanCacheScope's cache in packed form: a hit adopts the entry (pack is not
// called, so the caller's checkpoint tensors are not read), a miss packs and
// stores. Without a scope, pack().
Expected<std::unique_ptr<PackedLinear>> pack_linear_cached(
    std::string_view layer, Precision precision, int64_t n, int64_t k, bool bias,
    const std::function<Expected<std::unique_ptr<PackedLinear>>()>& pack);

}  // namespace flick::cpu
