#include "models/sam3/mobileclip_text.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "runtime/dtype.h"

namespace flick {
namespace {

const DTypeSet kFloat{DType::F32, DType::BF16, DType::F16};
constexpr double kBnEps = 1e-5;  // nn.BatchNorm2d default (every RepMixer BN)

std::vector<double> doubles(const Tensor& t) {
  std::vector<float> f(static_cast<size_t>(t.numel()));
  convert(t.dtype, t.data, DType::F32, f.data(), t.numel());
  return {f.begin(), f.end()};
}

// An eval BatchNorm2d as y = s * x + t per channel.
struct BnAffine {
  std::vector<double> s, t;
};
Expected<BnAffine> bn_affine(const WeightView& v, const std::string& bn, int64_t c) {
  FLICK_ASSIGN_OR_RETURN(Tensor g, v.get(bn + "weight", kFloat, {c}));
  FLICK_ASSIGN_OR_RETURN(Tensor beta, v.get(bn + "bias", kFloat, {c}));
  FLICK_ASSIGN_OR_RETURN(Tensor mean, v.get(bn + "running_mean", kFloat, {c}));
  FLICK_ASSIGN_OR_RETURN(Tensor var, v.get(bn + "running_var", kFloat, {c}));
  v.mark_used(bn + "num_batches_tracked");
  const std::vector<double> gd = doubles(g), bd = doubles(beta), md = doubles(mean),
                            vd = doubles(var);
  BnAffine a;
  for (size_t i = 0; i < static_cast<size_t>(c); ++i) {
    a.s.push_back(gd[i] / std::sqrt(vd[i] + kBnEps));
    a.t.push_back(bd[i] - md[i] * a.s.back());
  }
  return a;
}

}  // namespace

Expected<MobileClipText> MobileClipText::load(const WeightView& text, Backend& backend,
                                              Precision precision, int64_t heads) {
  MobileClipText m;
  FLICK_ASSIGN_OR_RETURN(m.cfg_, MobileClipTextConfig::detect(text));
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
  // S0: transformer.0 and transformer.{layers + 1} are RepMixer blocks.
  const int64_t first = c.repmixer_ends ? 1 : 0;
  if (c.repmixer_ends) {
    repmixers_.resize(2);
    FLICK_TRY(load_repmixer(t.sub("0"), repmixers_[0]));
    FLICK_TRY(load_repmixer(t.sub(std::to_string(c.layers + 1)), repmixers_[1]));
  }
  for (int64_t i = 0; i < c.layers; ++i) {
    const WeightView v = t.sub(std::to_string(first + i));
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

Status MobileClipText::load_repmixer(const WeightView& v, RepMixer& r) {
  const int64_t d = cfg_.dim, k = cfg_.repmixer_kernel, m = k / 2;
  auto pack_dw = [&](const std::vector<double>& w, const std::vector<double>& b) {
    OwnedTensor& wt = owned_.emplace_back(DType::F32, Shape{d, 1, 1, k});
    OwnedTensor& bt = owned_.emplace_back(DType::F32, Shape{d});
    for (size_t i = 0; i < w.size(); ++i) wt.t.ptr<float>()[i] = static_cast<float>(w[i]);
    for (size_t i = 0; i < b.size(); ++i) bt.t.ptr<float>()[i] = static_cast<float>(b[i]);
    ConvDesc desc;
    desc.w = wt.t;
    desc.bias = bt.t;
    desc.padding = {0, m, 0};  // (0, K // 2)
    desc.groups = d;
    desc.precision = precision_;
    return backend_->pack_conv(desc);
  };
  // RepMixer.reparameterize: w = id + ls1 * (w_mixer - w_norm), b = ls1 * (b_mixer - b_norm),
  // the mixer = its skip BN (an identity kernel) + its BN-folded depthwise conv.
  FLICK_ASSIGN_OR_RETURN(Tensor ls1t, v.get("token_mixer.layer_scale", kFloat, {d, 1, 1}));
  FLICK_ASSIGN_OR_RETURN(Tensor wct,
                         v.get("token_mixer.mixer.rbr_conv.0.conv.weight", kFloat, {d, 1, 1, k}));
  FLICK_ASSIGN_OR_RETURN(BnAffine conv_bn, bn_affine(v, "token_mixer.mixer.rbr_conv.0.bn.", d));
  FLICK_ASSIGN_OR_RETURN(BnAffine mix_skip, bn_affine(v, "token_mixer.mixer.rbr_skip.", d));
  FLICK_ASSIGN_OR_RETURN(BnAffine norm_skip, bn_affine(v, "token_mixer.norm.rbr_skip.", d));
  const std::vector<double> ls1 = doubles(ls1t), wc = doubles(wct);
  std::vector<double> w(static_cast<size_t>(d * k)), b(static_cast<size_t>(d));
  for (size_t c = 0; c < static_cast<size_t>(d); ++c) {
    for (size_t j = 0; j < static_cast<size_t>(k); ++j) {
      double mixer = wc[c * k + j] * conv_bn.s[c];
      if (j == static_cast<size_t>(m)) mixer += mix_skip.s[c] - norm_skip.s[c];
      w[c * k + j] = (j == static_cast<size_t>(m) ? 1.0 : 0.0) + ls1[c] * mixer;
    }
    b[c] = ls1[c] * (conv_bn.t[c] + mix_skip.t[c] - norm_skip.t[c]);
  }
  r.token = pack_dw(w, b);
  // ConvFFN: BN(dwconv(x)) folded, then fc1, GELU, fc2 (x ls2, the block's layer scale).
  FLICK_ASSIGN_OR_RETURN(Tensor wft, v.get("convffn.conv.conv.weight", kFloat, {d, 1, 1, k}));
  FLICK_ASSIGN_OR_RETURN(BnAffine ffn_bn, bn_affine(v, "convffn.conv.bn.", d));
  const std::vector<double> wf = doubles(wft);
  for (size_t c = 0; c < static_cast<size_t>(d); ++c) {
    for (size_t j = 0; j < static_cast<size_t>(k); ++j) w[c * k + j] = wf[c * k + j] * ffn_bn.s[c];
    b[c] = ffn_bn.t[c];
  }
  r.ffn_dw = pack_dw(w, b);
  const int64_t hidden = cfg_.ffn;  // dim * mlp_ratio 4 (the layout checks it equals ffn)
  FLICK_ASSIGN_OR_RETURN(Tensor w1, v.get("convffn.fc1.weight", kFloat, {hidden, d, 1, 1}));
  FLICK_ASSIGN_OR_RETURN(Tensor b1, v.get("convffn.fc1.bias", kFloat, {hidden}));
  r.fc1 = backend_->pack_linear({w1.reshape({hidden, d}), Tensor{}, b1, precision_});
  FLICK_ASSIGN_OR_RETURN(Tensor ls2t, v.get("layer_scale", kFloat, {d, 1, 1}));
  FLICK_ASSIGN_OR_RETURN(Tensor w2t, v.get("convffn.fc2.weight", kFloat, {d, hidden, 1, 1}));
  FLICK_ASSIGN_OR_RETURN(Tensor b2t, v.get("convffn.fc2.bias", kFloat, {d}));
  const std::vector<double> ls2 = doubles(ls2t), w2 = doubles(w2t), b2 = doubles(b2t);
  OwnedTensor& w2o = owned_.emplace_back(DType::F32, Shape{d, hidden});
  OwnedTensor& b2o = owned_.emplace_back(DType::F32, Shape{d});
  for (size_t c = 0; c < static_cast<size_t>(d); ++c) {
    for (size_t j = 0; j < static_cast<size_t>(hidden); ++j)
      w2o.t.ptr<float>()[c * hidden + j] = static_cast<float>(w2[c * hidden + j] * ls2[c]);
    b2o.t.ptr<float>()[c] = static_cast<float>(b2[c] * ls2[c]);
  }
  r.fc2 = backend_->pack_linear({w2o.t, Tensor{}, b2o.t, precision_});
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
  if (c.repmixer_ends) {
    cm_a_ = arena_.request("mobileclip.cm_a", act_, {1, d, 1, l});
    cm_b_ = arena_.request("mobileclip.cm_b", act_, {1, d, 1, l});
    cm_c_ = arena_.request("mobileclip.cm_c", act_, {1, d, 1, l});
  }
  arena_.finalize();
}

void MobileClipText::run_repmixer(const RepMixer& r, Tensor& x) {
  // RepMixerBlock.forward: [1, L, D] -> [1, D, 1, L] and back.
  Backend& be = *backend_;
  const int64_t l = cfg_.context, d = cfg_.dim;
  Tensor a = arena_.get(cm_a_), b = arena_.get(cm_b_), cb = arena_.get(cm_c_);
  Tensor a2 = a.reshape({d, l});
  be.copy(x.permute({1, 0}), a2);               // a tiled transpose
  be.conv(a, *r.token, b, Activation::None);    // the token mixer, [1, D, 1, L]
  be.conv(b, *r.ffn_dw, cb, Activation::None);  // ConvFFN's BN(dwconv)
  Tensor h = arena_.get(h_), o = arena_.get(o_), mlp = arena_.get(mlp_);
  be.copy(b.reshape({d, l}).permute({1, 0}), x);  // x = token mixer output, [L, D]
  be.copy(cb.reshape({d, l}).permute({1, 0}), h);
  if (act_ == DType::BF16) {  // as the transformer's FFN: round, then GELU
    be.linear(h, *r.fc1, mlp, Activation::None);
    be.gelu(mlp, mlp, /*tanh_approx=*/false);
  } else {
    be.linear(h, *r.fc1, mlp, Activation::GeluErf);
  }
  be.linear(mlp, *r.fc2, o, Activation::None);  // ls2 folded
  be.add(x, o, x);
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
  // Tap names follow the reference's module list (S0: layer0 and layer{N+1}
  // are the RepMixer blocks).
  const size_t first = repmixers_.empty() ? 0 : 1;
  if (!repmixers_.empty()) {
    run_repmixer(repmixers_[0], x);
    emit("layer0", x);
  }
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
    emit("layer" + std::to_string(first + i), x);
  }
  if (!repmixers_.empty()) {
    run_repmixer(repmixers_[1], x);
    emit("layer" + std::to_string(first + layers_.size()), x);
  }
  be.layer_norm(x, final_w_, final_b_, eps_, h);
  emit("final_norm", h);
  Tensor out = arena_.get(out_);  // [L, out_dim]
  be.linear(h, *projector_, out, Activation::None);
  emit("text_memory", out);
  return out.reshape({1, l, c.out_dim});
}

}  // namespace flick
