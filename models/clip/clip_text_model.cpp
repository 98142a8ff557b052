#include "models/clip/clip_text_model.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "models/config_json.h"
#include "runtime/dtype.h"
#include "runtime/file_util.h"

namespace flick::clip {
namespace {

using Json = nlohmann::json;

// Float dtypes a parameter may be stored in (the release is fp16); converted at load.
const DTypeSet kFloat{DType::F32, DType::BF16, DType::F16};

// quick_gelu(x) = x * sigmoid(1.702 x) (transformers QuickGELUActivation).
constexpr float kQuickGeluAlpha = 1.702f;

}  // namespace

WeightView clip_text_model_view(const WeightStore& store) {
  if (store.has("text_model.embeddings.token_embedding.weight")) return store.view("text_model.");
  return store.root();
}

int64_t clip_pooled_index(std::span<const int32_t> ids, int64_t eos_token_id) {
  const auto n = static_cast<int64_t>(ids.size());
  if (eos_token_id == 2) {
    // modeling_clip.py:966-976: input_ids.argmax(-1); torch returns the
    // first of equal maxima.
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
      if (ids[i] > ids[best]) best = i;
    return best;
  }
  // modeling_clip.py:978-985: (ids == eos).int().argmax(-1): the first match, else 0.
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] == eos_token_id) return i;
  return 0;
}

Expected<ClipTextConfig> ClipTextConfig::detect(const WeightView& text_model,
                                                const std::string& config_path) {
  FLICK_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, read_file(config_path, 1 << 20));
  const Json j = Json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return invalid_input(config_path + ": not a JSON object (a transformers config.json)");
  // A full CLIPConfig nests the text part.
  const Json& t = j.contains("text_config") && j["text_config"].is_object() ? j["text_config"] : j;
  ClipTextConfig c;
  if (!t.contains("num_attention_heads") || !t["num_attention_heads"].is_number_integer() ||
      t["num_attention_heads"].get<int64_t>() < 1)
    return invalid_input(config_path + ": num_attention_heads: expected a positive integer");
  c.heads = t["num_attention_heads"].get<int64_t>();
  // CLIPTextConfig's defaults for the keys a config.json may omit.
  const std::string act = t.value("hidden_act", std::string("quick_gelu"));
  if (act != "quick_gelu" && act != "gelu")
    return invalid_input(config_path + ": hidden_act: expected \"quick_gelu\" or \"gelu\", got \"" +
                         act + "\"");
  c.quick_gelu = act == "quick_gelu";
  if (t.contains("layer_norm_eps")) {
    if (!t["layer_norm_eps"].is_number() || !(t["layer_norm_eps"].get<double>() > 0))
      return invalid_input(config_path + ": layer_norm_eps: expected a positive number");
    c.eps = static_cast<float>(t["layer_norm_eps"].get<double>());
  }
  c.eos_token_id = 49407;
  if (t.contains("eos_token_id")) {
    if (!t["eos_token_id"].is_number_integer())
      return invalid_input(config_path + ": eos_token_id: expected an integer");
    c.eos_token_id = t["eos_token_id"].get<int64_t>();
  }

  FLICK_ASSIGN_OR_RETURN(const TensorInfo* tok,
                         text_model.require("embeddings.token_embedding.weight", 2));
  c.vocab = tok->shape[0];
  c.width = tok->shape[1];
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* pos,
                         text_model.require("embeddings.position_embedding.weight", 2));
  c.positions = pos->shape[0];
  if (pos->shape[1] != c.width)
    return invalid_input(text_model.full_name("embeddings.position_embedding.weight") +
                         ": expected [P, " + std::to_string(c.width) + "], file has " +
                         pos->shape_str());
  if (c.width % c.heads != 0)
    return invalid_input(config_path + ": num_attention_heads " + std::to_string(c.heads) +
                         " does not divide the width " + std::to_string(c.width) + " of " +
                         text_model.full_name("embeddings.token_embedding.weight"));
  c.head_dim = c.width / c.heads;
  const WeightView layers = text_model.sub("encoder").sub("layers");
  const std::vector<std::string> children = layers.children();
  c.layers = static_cast<int64_t>(children.size());
  if (c.layers == 0) return not_found(layers.prefix() + "*: no encoder layers in the checkpoint");
  for (int64_t i = 0; i < c.layers; ++i)
    if (children[static_cast<size_t>(i)] != std::to_string(i))
      return invalid_input(layers.full_name(std::to_string(i)) +
                           ": missing (layers must be numbered 0.." + std::to_string(c.layers - 1) +
                           ")");
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* fc1, layers.sub("0").require("mlp.fc1.weight", 2));
  c.intermediate = fc1->shape[0];
  FLICK_TRY(check_config_matches_shapes(t, config_path,
                                        {{"vocab_size", c.vocab},
                                         {"hidden_size", c.width},
                                         {"num_hidden_layers", c.layers},
                                         {"intermediate_size", c.intermediate},
                                         {"max_position_embeddings", c.positions}}));
  return c;
}

Expected<ClipTextModel> ClipTextModel::load(const WeightView& text_model,
                                            const ClipTextConfig& config, Backend& backend,
                                            Precision precision) {
  ClipTextModel m;
  m.cfg_ = config;
  m.backend_ = &backend;
  m.precision_ = precision;
  m.act_ = precision == Precision::F32 ? DType::F32 : DType::BF16;
  FLICK_TRY(m.load_weights(text_model));
  m.plan();
  return m;
}

Status ClipTextModel::load_weights(const WeightView& text_model) {
  const ClipTextConfig& c = cfg_;
  const int64_t w = c.width;
  // A parameter used elementwise, converted to the activation dtype.
  auto param = [&](const WeightView& v, std::string_view name, Shape shape) -> Expected<Tensor> {
    FLICK_ASSIGN_OR_RETURN(Tensor t, v.get(name, kFloat, shape));
    OwnedTensor& o = owned_.emplace_back(act_, t.shape);
    convert(t.dtype, t.data, act_, o.t.data, t.numel());
    return o.t;
  };
  // Linear layers given as row blocks [n_i, k] stacked into one [sum n_i, k]
  // weight (q, k and v as one GEMM: the same dot product per output column).
  // The packer copies and rounds the weight; the bias is a bf16 parameter in
  // the bf16 reference, so it is rounded here.
  auto linear = [&](const WeightView& v, std::vector<std::string> prefixes, int64_t n,
                    int64_t k) -> Expected<std::unique_ptr<PackedLinear>> {
    const auto parts = static_cast<int64_t>(prefixes.size());
    OwnedTensor weight(DType::F32, Shape{parts * n, k});
    OwnedTensor& bias = owned_.emplace_back(act_, Shape{parts * n});
    for (int64_t i = 0; i < parts; ++i) {
      const std::string& p = prefixes[static_cast<size_t>(i)];
      FLICK_ASSIGN_OR_RETURN(Tensor wt, v.get(p + ".weight", kFloat, {n, k}));
      FLICK_ASSIGN_OR_RETURN(Tensor b, v.get(p + ".bias", kFloat, {n}));
      convert(wt.dtype, wt.data, DType::F32, weight.t.ptr<float>() + i * n * k, n * k);
      convert(b.dtype, b.data, act_, static_cast<uint8_t*>(bias.t.data) + i * n * dtype_size(act_),
              n);
    }
    return backend_->pack_linear({weight.t, Tensor{}, bias.t, precision_});
  };

  const WeightView emb = text_model.sub("embeddings");
  FLICK_ASSIGN_OR_RETURN(token_embedding_, emb.get("token_embedding.weight", kFloat, {c.vocab, w}));
  FLICK_ASSIGN_OR_RETURN(pos_, param(emb, "position_embedding.weight", {c.positions, w}));
  emb.mark_used("position_ids");  // a buffer some older files carry
  const WeightView layers = text_model.sub("encoder").sub("layers");
  for (int64_t i = 0; i < c.layers; ++i) {
    const WeightView v = layers.sub(std::to_string(i));
    Layer& l = layers_.emplace_back();
    FLICK_ASSIGN_OR_RETURN(l.ln1_w, param(v, "layer_norm1.weight", {w}));
    FLICK_ASSIGN_OR_RETURN(l.ln1_b, param(v, "layer_norm1.bias", {w}));
    FLICK_ASSIGN_OR_RETURN(l.ln2_w, param(v, "layer_norm2.weight", {w}));
    FLICK_ASSIGN_OR_RETURN(l.ln2_b, param(v, "layer_norm2.bias", {w}));
    FLICK_ASSIGN_OR_RETURN(
        l.qkv, linear(v, {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}, w, w));
    FLICK_ASSIGN_OR_RETURN(l.out, linear(v, {"self_attn.out_proj"}, w, w));
    FLICK_ASSIGN_OR_RETURN(l.fc1, linear(v, {"mlp.fc1"}, c.intermediate, w));
    FLICK_ASSIGN_OR_RETURN(l.fc2, linear(v, {"mlp.fc2"}, w, c.intermediate));
  }
  FLICK_ASSIGN_OR_RETURN(final_w_, param(text_model, "final_layer_norm.weight", {w}));
  FLICK_ASSIGN_OR_RETURN(final_b_, param(text_model, "final_layer_norm.bias", {w}));
  return ok_status();
}

void ClipTextModel::plan() {
  const ClipTextConfig& c = cfg_;
  const int64_t n = c.positions, w = c.width;
  x_ = arena_.request("clip_text.x", act_, {n, w});
  h_ = arena_.request("clip_text.h", act_, {n, w});
  qkv_ = arena_.request("clip_text.qkv", act_, {n, 3 * w});
  attn_ = arena_.request("clip_text.attn", act_, {n, w});
  o_ = arena_.request("clip_text.o", act_, {n, w});
  mlp_ = arena_.request("clip_text.mlp", act_, {n, c.intermediate});
  gate_ = arena_.request("clip_text.gate", act_, {n, c.intermediate});
  last_ = arena_.request("clip_text.last", act_, {n, w});
  arena_.finalize();
}

Expected<ClipTextModel::Output> ClipTextModel::forward(std::span<const int32_t> ids,
                                                       const Tap& tap) {
  const ClipTextConfig& c = cfg_;
  const auto n = static_cast<int64_t>(ids.size());
  if (n < 1 || n > c.positions)
    return invalid_input("CLIP text model: " + std::to_string(n) +
                         " tokens, the model takes 1 to " + std::to_string(c.positions));
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab)
      return invalid_input("CLIP text model: token " + std::to_string(i) + " is id " +
                           std::to_string(ids[i]) + ", the vocabulary has " +
                           std::to_string(c.vocab));
  Backend& be = *backend_;
  const int64_t w = c.width;
  auto emit = [&](std::string_view name, const Tensor& t) {
    if (tap) tap(name, t.reshape({1, n, t.dim(1)}));
  };
  Tensor x = arena_.get(x_).slice(0, 0, n);  // [L, W]
  Tensor h = arena_.get(h_).slice(0, 0, n), qkv = arena_.get(qkv_).slice(0, 0, n),
         attn = arena_.get(attn_).slice(0, 0, n), o = arena_.get(o_).slice(0, 0, n),
         mlp = arena_.get(mlp_).slice(0, 0, n), gate = arena_.get(gate_).slice(0, 0, n),
         last = arena_.get(last_).slice(0, 0, n);

  // ---- embeddings: token rows (converted to the activation dtype) + positions ----
  for (int64_t i = 0; i < n; ++i) {
    Tensor dst = x.slice(0, i, 1);
    be.copy(token_embedding_.slice(0, ids[i], 1), dst);
  }
  be.add(x, pos_.slice(0, 0, n), x);
  emit("embed", x);

  const Tensor qkv5 = qkv.reshape({1, n, 3, c.heads, c.head_dim});  // [1, L, 3, H, D]
  const Tensor q = qkv5.select(2, 0), k = qkv5.select(2, 1), v = qkv5.select(2, 2);
  Tensor attn4 = attn.reshape({1, n, c.heads, c.head_dim});  // [1, L, H, D]
  AttentionParams causal;  // _create_4d_causal_attention_mask; scale head_dim^-0.5
  causal.causal_block = 1;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    be.layer_norm(x, l.ln1_w, l.ln1_b, c.eps, h);
    be.linear(h, *l.qkv, qkv, Activation::None);
    be.attention(q, k, v, attn4, causal);
    be.linear(attn, *l.out, o, Activation::None);
    be.add(x, o, x);
    be.layer_norm(x, l.ln2_w, l.ln2_b, c.eps, h);
    if (c.quick_gelu) {
      // x * sigmoid(1.702 x): three tensors, each rounded in a bf16 module.
      be.linear(h, *l.fc1, mlp, Activation::None);
      be.affine(mlp, kQuickGeluAlpha, 0.f, gate);
      be.activation(gate, gate, Activation::Sigmoid);
      be.mul(mlp, gate, mlp);
    } else if (act_ == DType::BF16) {  // fc1's output is rounded before the GELU
      be.linear(h, *l.fc1, mlp, Activation::None);
      be.gelu(mlp, mlp, /*tanh_approx=*/false);
    } else {
      be.linear(h, *l.fc1, mlp, Activation::GeluErf);
    }
    be.linear(mlp, *l.fc2, o, Activation::None);
    be.add(x, o, x);
    emit("layer" + std::to_string(i), x);
  }
  be.layer_norm(x, final_w_, final_b_, c.eps, last);
  Output out;
  out.pooled_index = clip_pooled_index(ids, c.eos_token_id);
  out.last_hidden = last.reshape({1, n, w});
  out.pooled = last.slice(0, out.pooled_index, 1);  // [1, W]
  return out;
}

}  // namespace flick::clip
