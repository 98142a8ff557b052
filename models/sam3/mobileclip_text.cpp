#include "models/sam3/mobileclip_text.h"

#include <string>
#include <utility>

#include "runtime/dtype.h"

namespace flick {
namespace {

const DTypeSet kFloat{DType::F32, DType::BF16, DType::F16};

}  // namespace

Expected<MobileClipText> MobileClipText::load(const WeightView& text, Backend& backend,
                                              Precision precision, int64_t heads) {
  MobileClipText m;
  FLICK_ASSIGN_OR_RETURN(m.cfg_, MobileClipTextConfig::detect(text));
  if (m.cfg_.repmixer_ends)
    return invalid_input(text.full_name("encoder.transformer.0") +
                         ": MobileCLIP-S0 (RepMixer) text encoders are not supported yet; "
                         "use a MobileCLIP-S1 checkpoint");
  if (heads > 0) {
    if (m.cfg_.dim % heads != 0)
      return invalid_input("MobileCLIP text encoder: width " + std::to_string(m.cfg_.dim) +
                           " is not divisible by " + std::to_string(heads) + " heads");
    m.cfg_.heads = heads;
  }
  if (precision != Precision::F32 && precision != Precision::BF16)
    return invalid_input(std::string("MobileCLIP text encoder: precision ") +
                         precision_name(precision) + " is not supported (F32 or BF16)");
  m.backend_ = &backend;
  m.precision_ = precision;
  m.act_ = precision == Precision::F32 ? DType::F32 : DType::BF16;
  FLICK_TRY(m.load_weights(text));
  m.plan();
  return m;
}

Status MobileClipText::load_weights(const WeightView& text) {
  const MobileClipTextConfig& c = cfg_;
  const int64_t d = c.dim;
  // Elementwise parameters in the activation dtype (views when already so).
  auto param = [&](const WeightView& v, std::string_view name, Shape shape) -> Expected<Tensor> {
    FLICK_ASSIGN_OR_RETURN(Tensor t, v.get(name, kFloat, shape));
    if (t.dtype == act_) return t;
    OwnedTensor& o = owned_.emplace_back(act_, t.shape);
    convert(t.dtype, t.data, act_, o.t.data, t.numel());
    return o.t;
  };
  auto linear = [&](const WeightView& v, const std::string& p, int64_t n,
                    int64_t k) -> Expected<std::unique_ptr<PackedLinear>> {
    FLICK_ASSIGN_OR_RETURN(Tensor w, v.get(p + ".weight", kFloat, {n, k}));
    FLICK_ASSIGN_OR_RETURN(Tensor b, param(v, p + ".bias", {n}));
    return backend_->pack_linear({w, Tensor{}, b, precision_});
  };

  const WeightView e = text.sub("encoder");
  FLICK_ASSIGN_OR_RETURN(embedding_, param(e, "embedding_layer.weight", {c.vocab, d}));
  FLICK_ASSIGN_OR_RETURN(
      Tensor pos, param(e, "positional_embedding.pos_embed.pos_embed", {1, 1, c.context, d}));
  pos_ = pos.reshape({c.context, d});
  e.mark_used("projection_layer");  // only for the pooled CLIP embedding
  const WeightView t = e.sub("transformer");
  for (int64_t i = 0; i < c.layers; ++i) {
    const WeightView v = t.sub(std::to_string(i));
    Layer& l = layers_.emplace_back();
    FLICK_ASSIGN_OR_RETURN(l.ln1_w, param(v, "pre_norm_mha.0.weight", {d}));
    FLICK_ASSIGN_OR_RETURN(l.ln1_b, param(v, "pre_norm_mha.0.bias", {d}));
    FLICK_ASSIGN_OR_RETURN(l.qkv, linear(v, "pre_norm_mha.1.qkv_proj", 3 * d, d));
    FLICK_ASSIGN_OR_RETURN(l.out, linear(v, "pre_norm_mha.1.out_proj", d, d));
    FLICK_ASSIGN_OR_RETURN(l.ln2_w, param(v, "pre_norm_ffn.0.weight", {d}));
    FLICK_ASSIGN_OR_RETURN(l.ln2_b, param(v, "pre_norm_ffn.0.bias", {d}));
    FLICK_ASSIGN_OR_RETURN(l.fc1, linear(v, "pre_norm_ffn.1", c.ffn, d));
    FLICK_ASSIGN_OR_RETURN(l.fc2, linear(v, "pre_norm_ffn.4", d, c.ffn));
  }
  FLICK_ASSIGN_OR_RETURN(final_w_, param(e, "final_layer_norm.weight", {d}));
  FLICK_ASSIGN_OR_RETURN(final_b_, param(e, "final_layer_norm.bias", {d}));
  FLICK_ASSIGN_OR_RETURN(projector_, linear(text, "projector", c.out_dim, d));
  return ok_status();
}

void MobileClipText::plan() {
  const MobileClipTextConfig& c = cfg_;
  const int64_t l = c.context, d = c.dim;
  x_ = arena_.request("mobileclip.x", act_, {l, d});
  h_ = arena_.request("mobileclip.h", act_, {l, d});
  qkv_ = arena_.request("mobileclip.qkv", act_, {l, 3 * d});
  attn_ = arena_.request("mobileclip.attn", act_, {l, d});
  o_ = arena_.request("mobileclip.o", act_, {l, d});
  mlp_ = arena_.request("mobileclip.mlp", act_, {l, c.ffn});
  out_ = arena_.request("mobileclip.out", act_, {l, c.out_dim});
  arena_.finalize();
}

Expected<Tensor> MobileClipText::forward(const Tensor& tokens, const Tap& tap) {
  const MobileClipTextConfig& c = cfg_;
  const int64_t l = c.context, d = c.dim, hd = d / c.heads;
  if (tokens.dtype != DType::I32 || tokens.ndim() != 1 || tokens.dim(0) != l ||
      !tokens.is_contiguous())
    return invalid_input("MobileCLIP text encoder: expected I32 tokens [" + std::to_string(l) +
                         "] (the full context), got " + tokens.str());
  const int32_t* ids = tokens.ptr<int32_t>();
  for (int64_t i = 0; i < l; ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab)
      return invalid_input("MobileCLIP text encoder: token " + std::to_string(ids[i]) +
                           " at position " + std::to_string(i) + " is outside the vocabulary of " +
                           std::to_string(c.vocab));
  Backend& be = *backend_;
  auto emit = [&](std::string_view name, const Tensor& v) {
    if (tap) tap(name, v.reshape({1, v.dim(0), v.dim(1)}));
  };

  // ---- forward_embedding: token rows + learned positions ----
  Tensor x = arena_.get(x_);  // [L, D]
  for (int64_t i = 0; i < l; ++i) {
    Tensor row = x.slice(0, i, 1);
    be.copy(embedding_.slice(0, ids[i], 1), row);
  }
  be.add(x, pos_, x);
  emit("embeddings", x);

  // ---- pre-norm transformer layers (mobile_clip.py TransformerEncoder) ----
  Tensor h = arena_.get(h_), qkv = arena_.get(qkv_), attn = arena_.get(attn_), o = arena_.get(o_),
         mlp = arena_.get(mlp_);
  // qkv_proj(x).reshape(b, S, 3, H, D): q, k, v each [1, L, H, hd].
  const Tensor qkv5 = qkv.reshape({1, l, 3, c.heads, hd});
  const Tensor q = qkv5.select(2, 0), k = qkv5.select(2, 1), v = qkv5.select(2, 2);
  Tensor attn4 = attn.reshape({1, l, c.heads, hd});
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& ly = layers_[i];
    be.layer_norm(x, ly.ln1_w, ly.ln1_b, eps_, h);
    be.linear(h, *ly.qkv, qkv, Activation::None);
    // Softmax(q * hd^-0.5 @ k^T) @ v: causal_masking=False and the
    // TextStudentEncoder passes no key_padding_mask (mobile_clip.py
    // encode_text), so every pad token is attended to.
    be.attention(q, k, v, attn4, AttentionParams{});
    be.linear(attn, *ly.out, o, Activation::None);
    be.add(x, o, x);
    be.layer_norm(x, ly.ln2_w, ly.ln2_b, eps_, h);
    if (act_ == DType::BF16) {  // the bf16 hidden state is rounded before the GELU
      be.linear(h, *ly.fc1, mlp, Activation::None);
      be.gelu(mlp, mlp, /*tanh_approx=*/false);
    } else {
      be.linear(h, *ly.fc1, mlp, Activation::GeluErf);
    }
    be.linear(mlp, *ly.fc2, o, Activation::None);
    be.add(x, o, x);
    emit("layer" + std::to_string(i), x);
  }
  be.layer_norm(x, final_w_, final_b_, eps_, h);
  emit("final_norm", h);
  Tensor out = arena_.get(out_);  // [L, out_dim]
  be.linear(h, *projector_, out, Activation::None);
  emit("text_memory", out);
  return out.reshape({1, l, c.out_dim});
}

}  // namespace flick
