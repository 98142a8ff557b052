#include "models/llama/llama_text_encoder.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "models/config_json.h"
#include "models/wan/wan_quant.h"
#include "runtime/dtype.h"
#include "runtime/file_util.h"

namespace flick::llama {
namespace {

using Json = nlohmann::json;

const DTypeSet kFloat{DType::F32, DType::BF16, DType::F16};

// A positive integer (or number) of config.json, or an error naming the key.
Expected<double> config_number(const Json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || !j[key].is_number())
    return invalid_input(path + ": " + key + ": expected a number");
  const double v = j[key].get<double>();
  if (!(v > 0) || !std::isfinite(v))
    return invalid_input(path + ": " + key + ": expected a positive number, got " + j[key].dump());
  return v;
}

}  // namespace

WeightView llama_model_view(const WeightStore& store) {
  if (store.has("model.embed_tokens.weight")) {
    store.root().mark_used("lm_head.weight");  // LlamaForCausalLM: not used by an encoder
    return store.view("model.");
  }
  return store.root();
}

Expected<LlamaConfig> LlamaConfig::detect(const WeightView& model, const std::string& config_path) {
  FLICK_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, read_file(config_path, 1 << 20));
  const Json j = Json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return invalid_input(config_path + ": not a JSON object (a transformers config.json)");
  LlamaConfig c;
  FLICK_ASSIGN_OR_RETURN(double heads, config_number(j, "num_attention_heads", config_path));
  c.heads = static_cast<int64_t>(heads);
  c.kv_heads = c.heads;  // transformers' default without GQA
  if (j.contains("num_key_value_heads")) {
    FLICK_ASSIGN_OR_RETURN(double kv, config_number(j, "num_key_value_heads", config_path));
    c.kv_heads = static_cast<int64_t>(kv);
  }
  c.rope_theta = 10000.f;
  if (j.contains("rope_theta")) {
    FLICK_ASSIGN_OR_RETURN(double theta, config_number(j, "rope_theta", config_path));
    c.rope_theta = static_cast<float>(theta);
  }
  c.eps = 1e-6f;
  if (j.contains("rms_norm_eps")) {
    FLICK_ASSIGN_OR_RETURN(double eps, config_number(j, "rms_norm_eps", config_path));
    c.eps = static_cast<float>(eps);
  }
  // Scaled RoPE variants (LLaMA 3.1 "llama3", linear, dynamic) change the
  // frequencies; HunyuanVideo's LLaMA-3 has none.
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    return invalid_input(config_path + ": rope_scaling: unsupported (expected null)");
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (j.contains(key) && j[key].is_boolean() && j[key].get<bool>())
      return invalid_input(config_path + ": " + key + ": unsupported (expected false)");
  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    return invalid_input(config_path + ": hidden_act: expected \"silu\", got " +
                         j["hidden_act"].dump());

  FLICK_ASSIGN_OR_RETURN(const TensorInfo* embed, model.require("embed_tokens.weight", 2));
  c.vocab = embed->shape[0];
  c.hidden = embed->shape[1];
  if (c.hidden % c.heads != 0 || c.heads % c.kv_heads != 0)
    return invalid_input(config_path + ": num_attention_heads " + std::to_string(c.heads) +
                         " / num_key_value_heads " + std::to_string(c.kv_heads) +
                         " do not divide the hidden size " + std::to_string(c.hidden) + " of " +
                         model.full_name("embed_tokens.weight"));
  c.head_dim = c.hidden / c.heads;
  if (c.head_dim % 2 != 0)
    return invalid_input(config_path + ": head size " + std::to_string(c.head_dim) +
                         " is odd (RoPE rotates pairs)");
  const WeightView layers = model.sub("layers");
  const std::vector<std::string> children = layers.children();
  c.layers = static_cast<int64_t>(children.size());
  for (int64_t i = 0; i < c.layers; ++i)
    if (children[static_cast<size_t>(i)] != std::to_string(i))
      return invalid_input(layers.full_name(std::to_string(i)) +
                           ": missing (layers must be "
                           "numbered 0.." +
                           std::to_string(c.layers - 1) + ")");
  if (c.layers == 0) return not_found(layers.prefix() + "*: no decoder layers in the checkpoint");
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* gate,
                         layers.sub("0").require("mlp.gate_proj.weight", 2));
  c.intermediate = gate->shape[0];
  FLICK_TRY(check_config_matches_shapes(j, config_path,
                                        {{"vocab_size", c.vocab},
                                         {"hidden_size", c.hidden},
                                         {"num_hidden_layers", c.layers},
                                         {"intermediate_size", c.intermediate}}));
  return c;
}

Expected<LlamaTextEncoder> LlamaTextEncoder::load(const WeightView& model,
                                                  const LlamaConfig& config, Backend& backend,
                                                  Precision precision, int64_t max_tokens,
                                                  int64_t run_layers) {
  if (run_layers < 1 || run_layers > config.layers)
    return invalid_input("LLaMA text encoder: cannot run " + std::to_string(run_layers) + " of " +
                         std::to_string(config.layers) + " layers");
  if (max_tokens < 1) return invalid_input("LLaMA text encoder: max_tokens must be positive");
  // INT8 on the CPU backend needs AVX-512 VNNI / AMX (the check the Wan DiT uses).
  FLICK_TRY(check_wan_precision(precision, backend, "LLaMA text encoder"));
  LlamaTextEncoder m;
  m.cfg_ = config;
  m.backend_ = &backend;
  m.precision_ = precision;
  m.act_ = precision == Precision::F32 ? DType::F32 : DType::BF16;
  m.max_tokens_ = max_tokens;
  FLICK_TRY(m.load_weights(model, run_layers));
  m.make_rope_tables();
  m.plan();
  return m;
}

Status LlamaTextEncoder::load_weights(const WeightView& model, int64_t run_layers) {
  const LlamaConfig& c = cfg_;
  const int64_t h = c.hidden, d = c.head_dim;
  auto param = [&](const WeightView& v, std::string_view name) -> Expected<Tensor> {
    FLICK_ASSIGN_OR_RETURN(Tensor t, v.get(name, kFloat, {h}));
    OwnedTensor& o = owned_.emplace_back(act_, t.shape);
    convert(t.dtype, t.data, act_, o.t.data, t.numel());
    return o.t;
  };
  auto linear = [&](const WeightView& v, std::string_view name, int64_t n,
                    int64_t k) -> Expected<std::unique_ptr<PackedLinear>> {
    FLICK_ASSIGN_OR_RETURN(Tensor w, v.get(std::string(name) + ".weight", kFloat, {n, k}));
    return backend_->pack_linear({w, Tensor{}, Tensor{}, precision_});
  };

  FLICK_ASSIGN_OR_RETURN(embed_, model.get("embed_tokens.weight", kFloat, {c.vocab, h}));
  const WeightView layers = model.sub("layers");
  for (int64_t i = 0; i < run_layers; ++i) {
    const WeightView v = layers.sub(std::to_string(i));
    Layer& l = layers_.emplace_back();
    FLICK_ASSIGN_OR_RETURN(l.input_norm, param(v, "input_layernorm.weight"));
    FLICK_ASSIGN_OR_RETURN(l.post_norm, param(v, "post_attention_layernorm.weight"));
    FLICK_ASSIGN_OR_RETURN(l.q, linear(v, "self_attn.q_proj", c.heads * d, h));
    FLICK_ASSIGN_OR_RETURN(l.k, linear(v, "self_attn.k_proj", c.kv_heads * d, h));
    FLICK_ASSIGN_OR_RETURN(l.v, linear(v, "self_attn.v_proj", c.kv_heads * d, h));
    FLICK_ASSIGN_OR_RETURN(l.o, linear(v, "self_attn.o_proj", h, c.heads * d));
    FLICK_ASSIGN_OR_RETURN(l.gate, linear(v, "mlp.gate_proj", c.intermediate, h));
    FLICK_ASSIGN_OR_RETURN(l.up, linear(v, "mlp.up_proj", c.intermediate, h));
    FLICK_ASSIGN_OR_RETURN(l.down, linear(v, "mlp.down_proj", h, c.intermediate));
    model.release_pages();  // packed: the mapped layer need not stay resident
  }
  // Layers after hidden_states[-3] and the final norm: in the file, not run.
  for (int64_t i = run_layers; i < c.layers; ++i) {
    const WeightView v = layers.sub(std::to_string(i));
    for (const std::string& n : v.names()) v.mark_used(n);
  }
  model.mark_used("norm.weight");
  return ok_status();
}

// transformers' LlamaRotaryEmbedding (default rope type): inv_freq_i =
// 1 / theta^(2i/D) in fp32, angle = position * inv_freq_i in fp32, cos/sin in
// fp32 over the duplicated halves, then cast to the activation dtype
// (LlamaRotaryEmbedding.forward). sin's first half is negated so that
// rotate_half(x) * sin becomes swap_halves(x) * sin_signed.
void LlamaTextEncoder::make_rope_tables() {
  const int64_t d = cfg_.head_dim, half = d / 2;
  cos_ = owned_.emplace_back(DType::F32, Shape{max_tokens_, 1, d}).t;
  sin_ = owned_.emplace_back(DType::F32, Shape{max_tokens_, 1, d}).t;
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(d);
    const float inv_freq = 1.0f / std::pow(cfg_.rope_theta, exponent);
    for (int64_t p = 0; p < max_tokens_; ++p) {
      const float angle = static_cast<float>(p) * inv_freq;
      float cs = std::cos(angle), sn = std::sin(angle);
      if (act_ == DType::BF16) cs = round_bf16(cs), sn = round_bf16(sn);
      float* c = cos_.ptr<float>() + p * d;
      float* s = sin_.ptr<float>() + p * d;
      c[i] = c[i + half] = cs;
      s[i] = -sn;
      s[i + half] = sn;
    }
  }
}

void LlamaTextEncoder::plan() {
  const LlamaConfig& c = cfg_;
  const int64_t n = max_tokens_, d = c.head_dim;
  x_ = arena_.request("llama.x", act_, {n, c.hidden});
  h_ = arena_.request("llama.h", act_, {n, c.hidden});
  q_ = arena_.request("llama.q", act_, {n, c.heads * d});
  rot_ = arena_.request("llama.rot", act_, {n, c.heads * d});
  k_ = arena_.request("llama.k", act_, {n, c.kv_heads * d});
  v_ = arena_.request("llama.v", act_, {n, c.kv_heads * d});
  kx_ = arena_.request("llama.k_heads", act_, {n, c.heads * d});
  vx_ = arena_.request("llama.v_heads", act_, {n, c.heads * d});
  attn_ = arena_.request("llama.attn", act_, {n, c.heads * d});
  o_ = arena_.request("llama.o", act_, {n, c.hidden});
  gate_ = arena_.request("llama.gate", act_, {n, c.intermediate});
  up_ = arena_.request("llama.up", act_, {n, c.intermediate});
  arena_.finalize();
}

Expected<Tensor> LlamaTextEncoder::forward(std::span<const int32_t> ids, const Tap& tap) {
  const LlamaConfig& c = cfg_;
  const auto n = static_cast<int64_t>(ids.size());
  if (n < 1 || n > max_tokens_)
    return invalid_input("LLaMA text encoder: " + std::to_string(n) +
                         " tokens, this pipeline takes 1 to " + std::to_string(max_tokens_));
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab)
      return invalid_input("LLaMA text encoder: token " + std::to_string(i) + " is id " +
                           std::to_string(ids[i]) + ", the vocabulary has " +
                           std::to_string(c.vocab));
  Backend& be = *backend_;
  auto emit = [&](std::string_view name, const Tensor& t) {
    if (tap) tap(name, t.reshape({1, n, t.dim(1)}));
  };
  auto emit_layer = [&](size_t i, const char* what, const Tensor& t) {
    if (tap) emit("layer" + std::to_string(i) + "." + what, t);
  };
  const int64_t d = c.head_dim, group = c.heads / c.kv_heads;
  Tensor x = arena_.get(x_).slice(0, 0, n);  // [L, H]
  Tensor h = arena_.get(h_).slice(0, 0, n), q = arena_.get(q_).slice(0, 0, n),
         k = arena_.get(k_).slice(0, 0, n), v = arena_.get(v_).slice(0, 0, n),
         kx = arena_.get(kx_).slice(0, 0, n), vx = arena_.get(vx_).slice(0, 0, n),
         attn = arena_.get(attn_).slice(0, 0, n), o = arena_.get(o_).slice(0, 0, n),
         gate = arena_.get(gate_).slice(0, 0, n), up = arena_.get(up_).slice(0, 0, n);

  // ---- embedding: gather rows (converted to the activation dtype) ----
  for (int64_t i = 0; i < n; ++i) {
    Tensor dst = x.slice(0, i, 1);
    be.copy(embed_.slice(0, ids[i], 1), dst);
  }
  emit("embed", x);

  const Tensor cos = cos_.slice(0, 0, n), sin = sin_.slice(0, 0, n);  // [L, 1, D]
  const Tensor rot_all = arena_.get(rot_);
  const Tensor rot = rot_all.reshape({rot_all.numel()});
  // apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, each product and
  // the sum rounded to the activation dtype as the reference's tensors are.
  auto rope = [&](Tensor& t, int64_t heads) {  // t: [L, heads * D]
    Tensor t3 = t.reshape({n, heads, d});
    Tensor r3 = rot.slice(0, 0, n * heads * d).reshape({n, heads, d});
    Tensor r_lo = r3.slice(2, 0, d / 2), r_hi = r3.slice(2, d / 2, d / 2);
    be.copy(t3.slice(2, d / 2, d / 2), r_lo);
    be.copy(t3.slice(2, 0, d / 2), r_hi);
    be.mul(r3, sin, r3);
    be.mul(t3, cos, t3);
    be.add(t3, r3, t3);
  };
  Tensor q4 = q.reshape({1, n, c.heads, d});     // [1, L, Hq, D]
  Tensor k4 = k.reshape({1, n, c.kv_heads, d});  // [1, L, Hkv, D]
  Tensor kx4 = kx.reshape({1, n, c.heads, d});   // [1, L, Hq, D]
  Tensor vx4 = vx.reshape({1, n, c.heads, d});
  Tensor attn4 = attn.reshape({1, n, c.heads, d});
  // repeat_kv: query head j reads kv head j / group. A stride-0 view over
  // the group expands k and v to every query head.
  auto expand = [&](const Tensor& kv) {
    Tensor e = kv.reshape({1, n, c.kv_heads, 1, d});
    e.shape = Shape{1, n, c.kv_heads, group, d};
    e.strides[3] = 0;
    return e;
  };
  // LlamaRMSNorm: the normalised value is cast to the activation dtype, then
  // multiplied by the weight (two roundings in bf16, as the reference).
  auto rms_norm = [&](const Tensor& in, const Tensor& weight) {
    be.rms_norm(in, Tensor{}, c.eps, h);
    be.mul(h, weight, h);
  };
  AttentionParams causal;
  causal.causal_block = 1;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    rms_norm(x, l.input_norm);
    emit_layer(i, "norm1", h);
    be.linear(h, *l.q, q, Activation::None);
    be.linear(h, *l.k, k, Activation::None);
    be.linear(h, *l.v, v, Activation::None);
    emit_layer(i, "q", q);
    emit_layer(i, "k", k);
    emit_layer(i, "v", v);
    rope(q, c.heads);
    rope(k, c.kv_heads);
    Tensor kx5 = kx.reshape({1, n, c.kv_heads, group, d}),
           vx5 = vx.reshape({1, n, c.kv_heads, group, d});
    be.copy(expand(k), kx5);
    be.copy(expand(v), vx5);
    be.attention(q4, kx4, vx4, attn4, causal);
    emit_layer(i, "attn", attn);
    be.linear(attn, *l.o, o, Activation::None);
    emit_layer(i, "o", o);
    be.add(x, o, x);
    rms_norm(x, l.post_norm);
    emit_layer(i, "norm2", h);
    // A bf16 module rounds gate_proj's output before the SiLU, so the
    // activation is fused only in fp32.
    if (act_ == DType::BF16) {
      be.linear(h, *l.gate, gate, Activation::None);
      be.silu(gate, gate);
    } else {
      be.linear(h, *l.gate, gate, Activation::Silu);
    }
    be.linear(h, *l.up, up, Activation::None);
    be.mul(gate, up, gate);
    be.linear(gate, *l.down, o, Activation::None);
    emit_layer(i, "mlp", o);
    be.add(x, o, x);
    emit("layer" + std::to_string(i), x);
  }
  return x.reshape({1, n, c.hidden});
}

}  // namespace flick::llama
