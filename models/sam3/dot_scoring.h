// The SAM3 query scores (sam3/model/model_misc.py DotProductScoring, as
// model_builder.py _create_dot_product_scoring configures it):
//
//   p = out_norm(layers.1(relu(layers.0(prompt))) + prompt)    // MLP 2 layers, residual, LN
//   pooled = mean of p over the valid prompt tokens              // mask: code uses ~prompt_mask
//   logit[l, q] = clamp(hs_proj(hs[l, q]) . prompt_proj(pooled) / sqrt(d_proj), -12, 12)
//
// (The reference's comment calls prompt_mask "1 = valid"; the code negates it,
// so True = padding, as everywhere else: model_misc.py mean_pool_text.)
// The image model's probability is sigmoid(logit) * sigmoid(presence)
// (supervise_joint_box_scores=False); the boxes are the decoder's refined
// references (the box head applied to hs is the refinement step itself).
#pragma once

#include <memory>
#include <vector>

#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"
#include "runtime/weights/weight_store.h"

namespace flick {

struct DotScoringConfig {
  int64_t d_model = 0;  // 256
  int64_t hidden = 0;   // 2048 (prompt MLP)
  int64_t d_proj = 0;   // 256
  int64_t rows = 0;     // hs rows planned for: layers x queries
  int64_t max_prompt = 0;
  float clamp = 12.f;
  float eps = 1e-5f;
};

class DotScoring {
 public:
  // `scoring` is "...dot_prod_scoring."; rows = layers * queries of the hs
  // forward() takes.
  static Expected<DotScoring> load(const WeightView& scoring, Backend& backend, Precision precision,
                                   int64_t rows, int64_t max_prompt);

  const DotScoringConfig& config() const { return cfg_; }

  // hs: [rows, d] (any leading shape flattened), prompt [P, d], prompt_valid
  // U8 [P]. Returns the clamped logits, F32 [rows], a view into the
  // component's arena valid until the next forward().
  Expected<Tensor> forward(const Tensor& hs, const Tensor& prompt, const Tensor& prompt_valid);

 private:
  DotScoring() = default;
  Status load_weights(const WeightView& scoring);
  void plan();

  DotScoringConfig cfg_;
  Backend* backend_ = nullptr;
  Precision precision_ = Precision::F32;
  DType act_ = DType::F32;
  std::vector<OwnedTensor> owned_;
  Tensor norm_w_, norm_b_;
  std::unique_ptr<PackedLinear> fc1_, fc2_, prompt_proj_, hs_proj_;

  Arena arena_;
  Arena::BufferId prompt_ = -1, hidden_ = -1, mlp_ = -1, weights_ = -1, pooled_ = -1, proj_ = -1,
                  hsp_ = -1, scores_ = -1, logits_ = -1;
};

}  // namespace flick
