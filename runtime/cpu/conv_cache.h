// CPU convolutions through the plan cache (runtime/plan_cache.h) in their
// packed form: oneDNN's reordered (blocked) weights, so a warm load maps the
// entry and adopts the bytes in place (no checkpoint read, no casts or
// quantization, no reorder). The linears' counterpart is linear_cache.h.
//
// An entry is
//   meta    I32 [kMetaLen]: layout (oneDNN f32 / bf16 / fp8, or INT8),
//           format version, precision, O, K (= I/g * kernel), has scale,
//           has bias, INT8's activation encoding
//   packed  U8: the weights in the pack-time primitive's layout
//   md      U8 [sizeof(dnnl_memory_desc_t)]: that layout, compared on adopt
//           with the one this process's primitive asks for
//   INT8:   the s8 weights I8 [O, K] (the source of any other layout a call
//           wants) and their scales F32 [O]; FP8: the scales F32 [O]
//   bias    F32 [O] (if any)
// and its key holds the layout family, precision, weight shape and geometry
// (packed_conv_kind), besides the plan cache's own (source, ISA, oneDNN
// version). Adopt checks every tensor against what this process would pack;
// an entry that fails is rebuilt with a warning.
#pragma once

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

// The packed state of a CPU convolution (from pack_conv or adopt) as
// tensors: views into its own memory (and a thread-local meta, valid until
// the next call on this thread), valid while `w` lives.
std::vector<Tensor> packed_conv_tensors(const PackedConv& w);

// A convolution made of packed_conv_tensors' output (views into a mapped
// entry, kept alive by `storage`), for the layer `d` describes: its
// precision, geometry and the weight's shape (d.w, d.bias: shapes only;
// their data is not read). An error (never a crash) when the tensors are
// not what this process would pack for it.
Expected<std::unique_ptr<PackedConv>> adopt_packed_conv(std::span<const Tensor> tensors,
                                                        const ConvDesc& d,
                                                        std::shared_ptr<const void> storage);

// The layout family pack_conv picks for `d` and its shapes and geometry
// ("packed-conv-v1 onednn BF16 w [96, 96, 3, 3, 3] stride 1,1,1 ..."), for
// plan cache keys. d.bias present: a bias of d.w.dim(0) values.
std::string packed_conv_kind(const ConvDesc& d);

// Convolution `layer` (shapes and geometry in `d`, as for adopt) packed by
// `pack` through the current PlanCacheScope's cache in packed form: a hit
// adopts the entry (pack is not called, so the caller's checkpoint tensors
// are not read), a miss packs and stores. Without a scope, pack().
Expected<std::unique_ptr<PackedConv>> pack_conv_cached(
    std::string_view layer, const ConvDesc& d,
    const std::function<Expected<std::unique_ptr<PackedConv>>()>& pack);

}  // namespace flick::cpu
