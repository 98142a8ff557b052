// The SAM3 "Transformer Fusion" encoder (sam3/model/encoder.py
// TransformerEncoderFusion over TransformerEncoderLayer, as
// model_builder.py _create_transformer_encoder configures it): image tokens
// attend to themselves and to the prompt (text tokens + geometry CLS).
//
// Every branch of the seed's "cannot be exported" list is resolved here once:
//   pre_norm=True (forward_pre; forward_post is dead code), dac=False (the
//   encoder never sets it), num_feature_levels=1 (no level embed),
//   add_pooled_text_to_img_feat=False, pos_enc_at_attn=True,
//   pos_enc_at_cross_attn_{queries,keys}=False, ReLU FFN, no final norm.
//
//   x = flatten(img)                        // [T, d], T = g*g (5184), rows y*g + x
//   p = flatten(pos)                        // [T, d]
//   layer: h = LN1 x; x += SA(q = k = h + p, v = h)
//          h = LN2 x; x += CA(q = h, k = v = prompt, key padding = prompt mask)
//          h = LN3 x; x += linear2(relu(linear1 h))
//   memory = x                              // [T, d]; the prompt is not updated
//
// Attention is nn.MultiheadAttention (packed in_proj, 8 heads, scale
// 1/sqrt(d/8)). The head count is not in any shape (8 unless given).
//
// Precision F32 or BF16 (weights and stored activations rounded to bf16,
// fp32 accumulation, softmax and LayerNorm in fp32).
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

struct FusionEncoderConfig {
  int64_t d_model = 0;  // 256
  int64_t ffn = 0;      // 2048
  int64_t layers = 0;   // 6
  int64_t heads = 8;
  int64_t tokens = 0;      // T = g*g image tokens (5184); given at load
  int64_t max_prompt = 0;  // prompt tokens planned for (78 = 77 text + 1 CLS)
  float eps = 1e-5f;       // nn.LayerNorm default
};

class FusionEncoder {
 public:
  // Taps "layer{i}" ([1, T, d]).
  using Tap = std::function<void(std::string_view name, const Tensor& t)>;

  // `encoder` is "...transformer.encoder."; grid the image side (72);
  // max_prompt the longest prompt forward() accepts.
  static Expected<FusionEncoder> load(const WeightView& encoder, Backend& backend,
                                      Precision precision, int64_t grid, int64_t max_prompt,
                                      int64_t heads = 8);

  const FusionEncoderConfig& config() const { return cfg_; }
  DType activation_dtype() const { return act_; }

  // The prompt-independent start, once per frame: layer 0's self-attention
  // sees only the image tokens (the prompt enters at its cross-attention),
  // so its result is kept for every prompt of the frame (in bf16, 1/6 of the
  // encoder's self-attention: ~0.1 s per further prompt at 1008^2 on a Zen 4).
  // image, pos: [1, d, g, g] (the neck's 1x level and its position
  // encoding), F32 or BF16.
  Status encode_image(const Tensor& image, const Tensor& pos);
  // The rest for one prompt, from encode_image's state (kept: call again for
  // the next prompt). prompt: [P, d], prompt_valid: U8 [P] (1 = a real
  // token, 0 = padding; the reference's mask is its negation), P <=
  // max_prompt; F32 or BF16. Returns the memory [1, T, d] in
  // activation_dtype(), a view into the component's arena valid until the
  // next forward(). The same arithmetic in the same order as one pass.
  Expected<Tensor> forward(const Tensor& prompt, const Tensor& prompt_valid, const Tap& tap = {});
  // encode_image, then forward.
  Expected<Tensor> forward(const Tensor& image, const Tensor& pos, const Tensor& prompt,
                           const Tensor& prompt_valid, const Tap& tap = {});

 private:
  struct Layer {
    Tensor n1_w, n1_b, n2_w, n2_b, n3_w, n3_b;
    std::unique_ptr<PackedLinear> sa_qk, sa_v, sa_out;  // q,k share an input (h + pos)
    std::unique_ptr<PackedLinear> ca_q, ca_kv, ca_out;
    std::unique_ptr<PackedLinear> fc1, fc2;
  };

  FusionEncoder() = default;
  Status load_weights(const WeightView& encoder);
  void plan();
  int64_t ffn_rows() const;  // rows of the FFN's hidden buffer
  // x += SA(q = k = LN1 x + pos, v = LN1 x) of layer i; x: [T, d].
  void self_attention(size_t i, Tensor& x);
  // x += CA(LN2 x, prompt), then x += FFN(LN3 x) of layer i, for the prompt
  // of np tokens that forward() copied into the arena.
  void cross_attention_and_ffn(size_t i, Tensor& x, int64_t np);

  FusionEncoderConfig cfg_;
  Backend* backend_ = nullptr;
  Precision precision_ = Precision::F32;
  DType act_ = DType::F32;
  std::vector<OwnedTensor> owned_;
  std::vector<Layer> layers_;

  Arena arena_;
  // x0_: the tokens after layer 0's self-attention (encode_image); x_: the
  // prompt's pass.
  Arena::BufferId x0_ = -1, x_ = -1, pos_ = -1, h_ = -1, hp_ = -1, qk_ = -1, v_ = -1, attn_ = -1,
                  o_ = -1, ffn_ = -1, kv_ = -1, prompt_ = -1, valid_ = -1;
  bool have_image_ = false;
};

}  // namespace flick
