// The SAM3 mask head (sam3/model/maskformer_segmentation.py
// UniversalSegmentationHead + PixelDecoder + MaskPredictor, as model_builder.py
// _create_segmentation_head configures it) for the image path:
//
//   mem' = mem + CA(LN(mem), prompt, prompt, key padding)     // [T, d], 8 heads
//   p = image(mem')                                           // [1, d, g, g]
//   p = relu(GN8(conv0(level1 + nearest_up(p))))              // [1, d, 2g, 2g]
//   p = relu(GN8(conv1(level0 + nearest_up(p))))              // [1, d, 4g, 4g] pixel embed
//   inst = instance_seg_head(p)                               // 1x1, [1, d, 4g, 4g]
//   masks[q] = mask_embed(hs_last[q]) . inst                  // MLP 3 (ReLU), [1, Q, 4g, 4g]
//
// In F32 flick folds the 1x1 instance head into the MLP's last layer
// (seg_head.cpp, load_weights) and multiplies the folded embeddings with p.
//
// The pixel decoder is built with 3 stages but only 2 finer levels reach it
// (scalp=1), so conv_layers.2 / norms.2 are never run; semantic_seg_head is
// computed by the reference and unused: both are recognised, not run.
// The outputs are mask logits (the processor's "masks_logits" are their
// sigmoids, errata A8).
#pragma once

#include <array>
#include <memory>
#include <span>
#include <vector>

#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"
#include "runtime/weights/weight_store.h"

namespace flick {

struct SegHeadConfig {
  int64_t d_model = 0;  // 256
  int64_t heads = 8;    // cross_attend_prompt; not in any shape
  int64_t groups = 8;   // GroupNorm(8, d)
  int64_t grid = 0;     // g = 72; the mask side is 4g = 288
  int64_t queries = 0;  // Q = 200; given at load
  int64_t max_prompt = 0;
  float eps = 1e-5f;  // LayerNorm and GroupNorm defaults
};

class SegHead {
 public:
  // `head` is "...segmentation_head.".
  static Expected<SegHead> load(const WeightView& head, Backend& backend, Precision precision,
                                int64_t grid, int64_t queries, int64_t max_prompt,
                                int64_t heads = 8);

  const SegHeadConfig& config() const { return cfg_; }
  // Whether the pixel decoder keeps its maps channels-last (its 3x3
  // convolutions' preferred layout on this backend): the neck's levels are
  // then best given channels-last too.
  bool channels_last() const { return channels_last_; }

  // level0 [1, d, 4g, 4g], level1 [1, d, 2g, 2g] (the neck's: channels-last
  // views are read in place, other layouts work too, slower), memory
  // [1, g*g, d] (the fusion encoder's), prompt [P, d] + U8 validity [P],
  // hs_last [Q, d] (the decoder's last normed output). Returns the mask
  // logits [1, Q, 4g, 4g] (activation dtype), a view into the component's
  // arena valid until the next forward().
  Expected<Tensor> forward(const Tensor& level0, const Tensor& level1, const Tensor& memory,
                           const Tensor& prompt, const Tensor& prompt_valid, const Tensor& hs_last);
  // The same for the queries listed only (1 .. Q row indices of hs_last, any
  // order): mask logits [1, n, 4g, 4g], row i being query queries[i]'s, equal
  // to that row of the full forward (the mask-embed MLP and the mask product
  // treat rows independently).
  Expected<Tensor> forward(const Tensor& level0, const Tensor& level1, const Tensor& memory,
                           const Tensor& prompt, const Tensor& prompt_valid, const Tensor& hs_last,
                           std::span<const int64_t> queries);

 private:
  SegHead() = default;
  Status load_weights(const WeightView& head);
  void plan();
  // forward() after the shape checks: hs [n, d], the rows whose masks are made.
  Tensor run(const Tensor& level0, const Tensor& level1, const Tensor& memory, const Tensor& prompt,
             const Tensor& prompt_valid, const Tensor& hs);
  // A map buffer as [1, d, n, n] (channels-last: a permuted [1, n, n, d]).
  Tensor map(Arena::BufferId id);
  // A [1, d, 4g, 4g] map buffer as the [1, d, 16T] matrix (channels-last:
  // column-major).
  Tensor columns(Arena::BufferId id);

  SegHeadConfig cfg_;
  Backend* backend_ = nullptr;
  Precision precision_ = Precision::F32;
  DType act_ = DType::F32;
  bool channels_last_ = true;
  std::vector<OwnedTensor> owned_;
  Tensor ln_w_, ln_b_;
  std::array<Tensor, 2> gn_w_, gn_b_;
  std::unique_ptr<PackedLinear> ca_q_, ca_kv_, ca_out_;
  std::array<std::unique_ptr<PackedConv>, 2> conv_;
  // The mask-embed MLP and the instance head; F32: the MLP's last layer
  // folded with the instance head, whose bias term is a d -> 1 linear
  // (load_weights), and no instance_.
  std::vector<std::unique_ptr<PackedLinear>> mask_embed_;
  std::unique_ptr<PackedConv> instance_;
  std::unique_ptr<PackedLinear> mask_bias_;

  Arena arena_;
  Arena::BufferId mem_ = -1, h_ = -1, q_ = -1, kv_ = -1, attn_ = -1, o_ = -1, prompt_ = -1,
                  valid_ = -1, img_ = -1, up1_ = -1, p1_ = -1, up0_ = -1, p0_ = -1, inst_ = -1,
                  hs_ = -1, qa_ = -1, qb_ = -1, emb_ = -1, mask_bias_out_ = -1, masks_ = -1;
};

}  // namespace flick
