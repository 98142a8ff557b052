// The CLIP-L text model as FramePack uses it (HunyuanVideo's `text_encoder_2`,
// transformers 4.46.2 CLIPTextModel; FramePack diffusers_helper/hunyuan.py:47-56):
//
//   ids    = tokenizer_2(prompt, padding="max_length", max_length=77, truncation=True)
//   x      = token_embedding[ids] + position_embedding[0 .. L-1]     // [L, W]
//   per layer (pre-LN, causal self-attention):
//            x += out_proj(attn(q_proj h, k_proj h, v_proj h)),  h = layer_norm1(x)
//            x += fc2(quick_gelu(fc1 h)),                         h = layer_norm2(x)
//   last   = final_layer_norm(x)                                   // [L, W]
//   pooled = last[eos_index(ids)]                                  // [W]
//
// FramePack keeps only `pooler_output` (no text_projection). The pooled row
// is picked as CLIPTextTransformer.forward does (modeling_clip.py:966-985):
// with the legacy config eos_token_id == 2 (openai/clip-vit-large-patch14 and
// HunyuanVideo's text_encoder_2) it is input_ids.argmax(-1), the first
// occurrence of the largest id, i.e. the first <|endoftext|> (49407, the
// largest id; the padding is <|endoftext|> too); otherwise the first position
// holding eos_token_id (0 when there is none, as argmax of all-false).
// Attention is causal and the pooled row is the first EOS, so the rows after
// it do not change the pooled output; forward() still runs every id it is
// given, so last_hidden matches the reference's last_hidden_state.
//
// Weight names are the checkpoint's (`text_model.` of a CLIPTextModel file).
// The config comes from tensor shapes, plus the config.json keys no shape
// carries: num_attention_heads, hidden_act ("quick_gelu" or "gelu"),
// layer_norm_eps, eos_token_id.
//
// Precision BF16 reproduces a bf16 module (from_pretrained(torch_dtype=bf16)):
// every parameter rounded to bf16, every activation tensor stored in bf16
// (quick_gelu's 1.702 x, sigmoid and product each rounded), LayerNorm and
// attention computed in fp32 inside. F32 keeps fp32. The released model runs
// in fp16 (demo_gradio.py:50), which flick does not emulate: bf16 is flick's
// production dtype.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"
#include "runtime/weights/weight_store.h"

namespace flick::clip {

struct ClipTextConfig {
  int64_t vocab = 0;         // 49408
  int64_t width = 0;         // W: 768
  int64_t positions = 0;     // max_position_embeddings: 77
  int64_t layers = 0;        // 12
  int64_t heads = 0;         // 12 (config.json)
  int64_t head_dim = 0;      // 64
  int64_t intermediate = 0;  // 3072
  bool quick_gelu = true;    // hidden_act "quick_gelu" (x * sigmoid(1.702 x)); else exact GELU
  float eps = 1e-5f;         // layer_norm_eps
  int64_t eos_token_id = 2;  // config.json; 2 = the legacy argmax pooling

  // Reads config.json and checks it against the shapes under `text_model`
  // (the view holding embeddings / encoder / final_layer_norm). Errors name
  // the key or the tensor.
  static Expected<ClipTextConfig> detect(const WeightView& text_model,
                                         const std::string& config_path);
};

// The view holding embeddings.*: `text_model.` of a CLIPTextModel file, or
// the root of a file saved without it.
WeightView clip_text_model_view(const WeightStore& store);

// The row whose final-LN state is pooler_output (see the header comment).
int64_t clip_pooled_index(std::span<const int32_t> ids, int64_t eos_token_id);

class ClipTextModel {
 public:
  // Every intermediate as it is produced: "embed", "layer{i}" ([1, L, W]).
  using Tap = std::function<void(std::string_view name, const Tensor& t)>;

  struct Output {
    Tensor last_hidden;  // [1, L, W], final_layer_norm applied
    Tensor pooled;       // [1, W]: last_hidden's row pooled_index
    int64_t pooled_index = 0;
  };

  // precision: F32, BF16, or INT8 / FP8 for the layer linears (the rest BF16).
  static Expected<ClipTextModel> load(const WeightView& text_model, const ClipTextConfig& config,
                                      Backend& backend, Precision precision);

  const ClipTextConfig& config() const { return cfg_; }
  DType activation_dtype() const { return act_; }

  // ids: 1 .. positions token ids below vocab (FramePack: the 77 padded ids
  // of ClipTokenizer::encode_padded); an error names the first bad one.
  // Views into the component's arena, valid until the next forward().
  Expected<Output> forward(std::span<const int32_t> ids, const Tap& tap = {});

 private:
  struct Layer {
    Tensor ln1_w, ln1_b, ln2_w, ln2_b;  // [W], activation dtype
    std::unique_ptr<PackedLinear> qkv, out, fc1, fc2;
  };

  ClipTextModel() = default;
  Status load_weights(const WeightView& text_model);
  void plan();

  ClipTextConfig cfg_;
  Backend* backend_ = nullptr;
  Precision precision_ = Precision::F32;
  DType act_ = DType::F32;

  Tensor token_embedding_;  // [V, W] as stored; rows are converted as they are gathered
  std::vector<OwnedTensor> owned_;
  Tensor pos_;  // [P, W], activation dtype
  Tensor final_w_, final_b_;
  std::vector<Layer> layers_;

  Arena arena_;
  Arena::BufferId x_ = -1, h_ = -1, qkv_ = -1, attn_ = -1, o_ = -1, mlp_ = -1, gate_ = -1,
                  last_ = -1;
};

}  // namespace flick::clip
