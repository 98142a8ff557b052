// The LLaMA decoder as HunyuanVideo (and FramePack) use it as a text encoder:
// transformers' LlamaModel run with output_hidden_states=True, of which the
// pipeline keeps hidden_states[-3] (FramePack diffusers_helper/hunyuan.py:39):
// the residual stream after layer L-3, before any final norm. So only layers
// 0 .. L-3 run; the last two layers and `norm` are in the checkpoint and
// skipped.
//
//   x = embed_tokens[ids]                                        // [L, H]
//   per layer:  x += o_proj(attn(rope(q_proj h), rope(k_proj h), v_proj h))
//                    with h = input_layernorm(x), causal, GQA
//               x += down_proj(silu(gate_proj h) * up_proj h)
//                    with h = post_attention_layernorm(x)
//
// Weight names are the checkpoint's (HunyuanVideo's `text_encoder/` is a
// LlamaModel; a LlamaForCausalLM's `model.` prefix and `lm_head` are handled).
// The head count and RoPE base come from config.json; every shape is checked
// against it.
//
// Precision BF16 reproduces a bf16 module loaded with from_pretrained(
// torch_dtype=bf16): every parameter rounded to bf16, activations stored in
// bf16 and rounded where the reference's tensors are (RMSNorm's normalised
// value before the weight; each of RoPE's two products and their sum, with
// cos/sin cast to bf16; RoPE's inv_freq stays fp32). F32 keeps fp32; INT8 /
// FP8 quantize the seven linears of every layer as the backend's pack_linear
// does (INT8 = W8A8: per-channel int8 weights, per-token dynamic activation
// scales; FP8 = E4M3 weights, per channel), everything else as in BF16. The
// embedding table stays as stored (a gather, no GEMM). Quality on the tiny
// golden model: tests/models/test_llama_text_encoder.cpp (LlamaQuant). The
// released LLaMA-3-8B has per-channel activation outliers (the motivation of
// SmoothQuant) that a random tiny model lacks: its W8A8 error is not
// measured by that test.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"
#include "runtime/weights/weight_store.h"

namespace flick::llama {

struct LlamaConfig {
  int64_t vocab = 0;         // 128320 (HunyuanVideo's LLaVA-LLaMA-3)
  int64_t hidden = 0;        // H: 4096
  int64_t layers = 0;        // in the checkpoint: 32
  int64_t heads = 0;         // query heads: 32
  int64_t kv_heads = 0;      // 8 (GQA)
  int64_t head_dim = 0;      // D: 128
  int64_t intermediate = 0;  // 14336
  float rope_theta = 0.f;    // 500000
  float eps = 0.f;           // RMSNorm: 1e-5

  // Reads config.json (`config_path`) and checks it against the shapes under
  // `model` (the view holding embed_tokens / layers / norm). Errors name the
  // key or the tensor.
  static Expected<LlamaConfig> detect(const WeightView& model, const std::string& config_path);
};

// The view holding embed_tokens: the root, or `model.` of a LlamaForCausalLM
// (whose lm_head is then marked as a known extra).
WeightView llama_model_view(const WeightStore& store);

class LlamaTextEncoder {
 public:
  // Every intermediate as it is produced: "embed", "layer{i}" ([1, L, H]).
  using Tap = std::function<void(std::string_view name, const Tensor& t)>;

  // Prepares layers 0 .. run_layers-1 for sequences of up to max_tokens.
  // run_layers = layers - 2 gives hidden_states[-3].
  static Expected<LlamaTextEncoder> load(const WeightView& model, const LlamaConfig& config,
                                         Backend& backend, Precision precision, int64_t max_tokens,
                                         int64_t run_layers);

  const LlamaConfig& config() const { return cfg_; }
  int64_t max_tokens() const { return max_tokens_; }
  DType activation_dtype() const { return act_; }

  // ids: the unpadded token sequence (1 .. max_tokens ids below vocab; an
  // error names the first bad one). Returns the residual stream after the
  // last run layer, [1, L, H] in activation_dtype(), a view into the arena
  // valid until the next forward().
  Expected<Tensor> forward(std::span<const int32_t> ids, const Tap& tap = {});

 private:
  struct Layer {
    Tensor input_norm, post_norm;  // [H], activation dtype
    std::unique_ptr<PackedLinear> q, k, v, o, gate, up, down;
  };

  LlamaTextEncoder() = default;
  Status load_weights(const WeightView& model, int64_t run_layers);
  void make_rope_tables();
  void plan();

  LlamaConfig cfg_;
  Backend* backend_ = nullptr;
  Precision precision_ = Precision::F32;
  DType act_ = DType::F32;
  int64_t max_tokens_ = 0;

  Tensor embed_;  // [V, H] as stored; rows are converted as they are gathered
  std::vector<OwnedTensor> owned_;
  std::vector<Layer> layers_;
  Tensor cos_, sin_;  // F32 [max_tokens, 1, D]: [c, c] and [-s, s]

  Arena arena_;
  Arena::BufferId x_ = -1, h_ = -1, q_ = -1, rot_ = -1, k_ = -1, v_ = -1, kx_ = -1, vx_ = -1,
                  attn_ = -1, o_ = -1, gate_ = -1, up_ = -1;
};

}  // namespace flick::llama
