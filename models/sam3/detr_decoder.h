// The SAM3 DETR decoder (sam3/model/decoder.py TransformerDecoder over
// TransformerDecoderLayer, as model_builder.py _create_transformer_decoder
// configures it) at inference: 200 queries, no DAC (apply_dac = dac and
// self.training), box refinement, boxRPB "log", text cross-attention, a
// presence token. Layers are post-norm (hard-coded in the reference).
//
//   t = [presence; query_embed]                        // [1 + Q, d]
//   ref = sigmoid(reference_points)                    // [Q, 4] cxcywh
//   layer l:
//     qpos = ref_point_head(sine(ref))                 // MLP 2d -> d -> d; sine order y, x, w, h
//     pos  = [0; qpos]                                 // the presence token has no pos
//     t = norm2(t + SA(q = k = t + pos, v = t))
//     t = catext_norm(t + CA(q = t + pos, k = v = prompt, key padding = prompt mask))
//     t = norm1(t + CA(q = t + pos, k = mem + mem_pos, v = mem, bias = boxRPB(ref)))
//     t = norm3(t + linear2(relu(linear1 t)))          // fp32 in the reference
//     hs[l] = norm(t[1:]);  presence[l] = presence_token_head(presence_token_out_norm(t[0]))
//     ref = sigmoid(inverse_sigmoid(ref) + bbox_embed(hs[l]))   (eps 1e-3)
//   refs = [ref_0 .. ref_{L-1}] (the boxes each layer started from)
//
// boxRPB: on the k/H grid, d = coord - box edge (x0, x1 / y0, y1) ->
// sign(8d) log2(|8d| + 1) / 3 -> MLP 2 -> d -> heads, bias[h, q, y*W + x] =
// By[q, y, h] + Bx[q, x, h], handed to the attention as its two parts
// (AttentionParams::bias_y / bias_x); the presence row gets 0. The clamp of the
// presence logits in the reference discards its result: no clamp here.
//
// The per-query box arithmetic (sine embedding of 200 x 4 coordinates, the
// boxRPB log deltas, inverse sigmoid / sigmoid of the refinement) runs on the
// host in fp32, as table generation does elsewhere; every matrix product,
// norm and attention goes through the backend.
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

struct DetrDecoderConfig {
  int64_t d_model = 0;  // 256
  int64_t ffn = 0;      // 2048
  int64_t layers = 0;   // 6
  int64_t queries = 0;  // 200
  int64_t heads = 8;    // boxRPB MLP output width (read from its shape)
  int64_t grid = 0;     // H = W = 72; given at load
  int64_t max_prompt = 0;
  float eps = 1e-5f;
};

struct DetrDecoderOutput {
  Tensor hs;        // [L, Q, d] normed per-layer outputs (activation dtype)
  Tensor refs;      // [L, Q, 4] F32 cxcywh boxes each layer started from
  Tensor presence;  // [L, 1] F32 presence logits
  Tensor last_ref;  // [Q, 4] F32 refined boxes after the last layer (the reference drops them)
};

class DetrDecoder {
 public:
  // Taps "layer{i}.hs" [Q, d], "layer{i}.presence" [1, 1], "layer{i}.ref" [Q, 4].
  using Tap = std::function<void(std::string_view name, const Tensor& t)>;

  // `decoder` is "...transformer.decoder.".
  static Expected<DetrDecoder> load(const WeightView& decoder, Backend& backend,
                                    Precision precision, int64_t grid, int64_t max_prompt);

  const DetrDecoderConfig& config() const { return cfg_; }
  DType activation_dtype() const { return act_; }

  // memory: [1, T, d] (the fusion encoder's), pos: [1, d, g, g] (the image
  // position encoding), prompt [P, d], prompt_valid U8 [P] (1 = real token).
  // The outputs are views into the component's arena, valid until the next
  // forward().
  Expected<DetrDecoderOutput> forward(const Tensor& memory, const Tensor& pos, const Tensor& prompt,
                                      const Tensor& prompt_valid, const Tap& tap = {});

 private:
  struct Mha {
    std::unique_ptr<PackedLinear> q, k, v, qk, out;  // qk: q and k rows together (self-attention)
  };
  struct Layer {
    Mha self_attn, text, image;
    Tensor n1_w, n1_b, n2_w, n2_b, n3_w, n3_b, nt_w, nt_b;
    std::unique_ptr<PackedLinear> fc1, fc2;
  };
  struct Mlp {
    std::vector<std::unique_ptr<PackedLinear>> layers;  // relu between
  };

  DetrDecoder() = default;
  Status load_weights(const WeightView& decoder);
  void plan();
  // y = mlp(x) with ReLU between the layers; tmp holds the hidden rows. With
  // chunk_rows > 0, chunk_rows rows at a time.
  void run_mlp(const Mlp& m, const Tensor& x, Tensor& y, Arena::BufferId tmp_a,
               Arena::BufferId tmp_b, int64_t chunk_rows = 0);
  int64_t rpb_chunk_rows() const;

  DetrDecoderConfig cfg_;
  Backend* backend_ = nullptr;
  Precision precision_ = Precision::F32;
  DType act_ = DType::F32;
  std::vector<OwnedTensor> owned_;
  std::vector<Layer> layers_;
  Tensor query_embed_, presence_token_, norm_w_, norm_b_, pnorm_w_, pnorm_b_;
  std::vector<float> ref_init_;  // sigmoid(reference_points), [Q, 4]
  OwnedTensor zero_pos_, zero_bias_;
  Mlp bbox_, presence_head_, ref_point_head_, rpb_x_, rpb_y_;

  Arena arena_;
  Arena::BufferId t_ = -1, pos_ = -1, tp_ = -1, qk_ = -1, v_ = -1, q_ = -1, attn_ = -1, o_ = -1,
                  ffn_ = -1, mem_ = -1, memp_ = -1, mk_ = -1, mv_ = -1, kv_ = -1, prompt_ = -1,
                  valid_ = -1, sine_ = -1, hid_a_ = -1, hid_b_ = -1, dy_ = -1, dx_ = -1, by_ = -1,
                  bx_ = -1, byc_ = -1, bxc_ = -1, hs_ = -1, refs_ = -1, presence_ = -1,
                  last_ref_ = -1, delta_ = -1, delta_f32_ = -1, plogit_ = -1, plogit_f32_ = -1,
                  pres_n_ = -1;
};

}  // namespace flick
