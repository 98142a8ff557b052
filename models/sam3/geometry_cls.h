// The geometry encoder's CLS token for text-only prompts
// (sam3/model/geometry_encoders.py SequenceGeometryEncoder.forward with the
// empty box prompt of Sam3Image._get_dummy_prompt; model_builder.py
// _create_geometry_encoder). With no points and no boxes the sequence is the
// CLS embedding alone:
//
//   x = norm(final_proj(cls_embed))                       // [1, d]
//   layer (pre-norm, TransformerEncoderLayer):
//     h = LN1 x; x += SA(h, h, h)                         // one token: pos_enc_at_attn=False
//     h = LN2 x; x += CA(q = h, k = mem + pos, v = mem)   // pos_enc_at_cross_attn_keys=True
//     h = LN3 x; x += linear2(relu(linear1 h))
//   cls = encode_norm(x)                                  // [1, d], prompt mask: valid
//
// mem is the neck's 1x level, NOT passed through img_pre_norm (that norm only
// feeds the point / box pooling, which an empty prompt skips). The token
// depends on the image, not on the text: one per frame, shared by prompts.
// The point / box projection tensors are recognised and unused.
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"
#include "runtime/weights/weight_store.h"

namespace flick {

struct GeometryClsConfig {
  int64_t d_model = 0;  // 256
  int64_t ffn = 0;      // 2048
  int64_t layers = 0;   // 3
  int64_t heads = 8;
  int64_t tokens = 0;  // T = g*g image tokens; given at load
  float eps = 1e-5f;
};

class GeometryCls {
 public:
  // Taps "proj" (after final_proj + norm), "layer{i}", "cls" (all [1, d]).
  using Tap = std::function<void(std::string_view name, const Tensor& t)>;

  // `geometry` is "...geometry_encoder.".
  static Expected<GeometryCls> load(const WeightView& geometry, Backend& backend,
                                    Precision precision, int64_t grid, int64_t heads = 8);

  const GeometryClsConfig& config() const { return cfg_; }
  DType activation_dtype() const { return act_; }

  // image, pos: [1, d, g, g]. Returns the CLS token [1, d] (a view into the
  // component's arena, valid until the next forward()).
  Expected<Tensor> forward(const Tensor& image, const Tensor& pos, const Tap& tap = {});

 private:
  struct Layer {
    Tensor n1_w, n1_b, n2_w, n2_b, n3_w, n3_b;
    std::unique_ptr<PackedLinear> sa_qkv, sa_out, ca_q, ca_k, ca_v, ca_out, fc1, fc2;
  };

  GeometryCls() = default;
  Status load_weights(const WeightView& geometry);
  void plan();

  GeometryClsConfig cfg_;
  Backend* backend_ = nullptr;
  Precision precision_ = Precision::F32;
  DType act_ = DType::F32;
  std::vector<OwnedTensor> owned_;
  Tensor cls_embed_, norm_w_, norm_b_, encode_norm_w_, encode_norm_b_;
  std::unique_ptr<PackedLinear> final_proj_;
  std::vector<Layer> layers_;

  Arena arena_;
  Arena::BufferId mem_ = -1, memp_ = -1, k_ = -1, v_ = -1, x_ = -1, h_ = -1, qkv_ = -1, q_ = -1,
                  attn_ = -1, o_ = -1, ffn_ = -1;
};

}  // namespace flick
