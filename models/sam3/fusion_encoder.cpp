#include "models/sam3/fusion_encoder.h"

#include <algorithm>
#include <string>
#include <utility>

#include "runtime/dtype.h"

namespace flick {
namespace {

const DTypeSet kFloat{DType::F32, DType::BF16, DType::F16};

// The activations forward() and encode_image() take.
bool is_float(const Tensor& x) { return x.dtype == DType::F32 || x.dtype == DType::BF16; }

}  // namespace

Expected<FusionEncoder> FusionEncoder::load(const WeightView& encoder, Backend& backend,
                                            Precision precision, int64_t grid, int64_t max_prompt,
                                            int64_t heads) {
  FusionEncoder m;
  FusionEncoderConfig& c = m.cfg_;
  const WeightView layers = encoder.sub("layers");
  c.layers = static_cast<int64_t>(layers.children().size());
  if (c.layers == 0) return not_found(layers.full_name("0") + ".*: no fusion encoder layers");
  const TensorInfo* l1 = layers.sub("0").info("linear1.weight");
  if (!l1 || l1->shape.size() != 2)
    return not_found(layers.sub("0").full_name("linear1.weight") + ": missing or not 2-d");
  c.ffn = l1->shape[0];
  c.d_model = l1->shape[1];
  c.heads = heads;
  c.tokens = grid * grid;
  c.max_prompt = max_prompt;
  if (heads < 1 || c.d_model % heads != 0 || grid < 1 || max_prompt < 1)
    return invalid_input("SAM3 fusion encoder: width " + std::to_string(c.d_model) + ", " +
                         std::to_string(heads) + " heads, grid " + std::to_string(grid) +
                         ", prompt " + std::to_string(max_prompt) + " do not fit");
  // INT8: every linear W8A8 (per-output-channel weight scales, per-token
  // dynamic activation scales), activations and norms bf16.
  if (precision != Precision::F32 && precision != Precision::BF16 && precision != Precision::INT8)
    return invalid_input(std::string("SAM3 fusion encoder: precision ") +
                         precision_name(precision) + " is not supported (F32, BF16 or INT8)");
  m.backend_ = &backend;
  m.precision_ = precision;
  m.act_ = precision == Precision::F32 ? DType::F32 : DType::BF16;
  FLICK_TRY(m.load_weights(encoder));
  m.plan();
  return m;
}

Status FusionEncoder::load_weights(const WeightView& encoder) {
  const FusionEncoderConfig& c = cfg_;
  const int64_t d = c.d_model;
  auto param = [&](const WeightView& v, const std::string& name, Shape shape) -> Expected<Tensor> {
    FLICK_ASSIGN_OR_RETURN(Tensor t, v.get(name, kFloat, shape));
    if (t.dtype == act_) return t;
    OwnedTensor& o = owned_.emplace_back(act_, t.shape);
    convert(t.dtype, t.data, act_, o.t.data, t.numel());
    return o.t;
  };
  auto pack = [&](const Tensor& w, const Tensor& b) {
    return backend_->pack_linear({w, Tensor{}, b, precision_});
  };
  for (int64_t i = 0; i < c.layers; ++i) {
    const WeightView v = encoder.sub("layers").sub(std::to_string(i));
    Layer& l = layers_.emplace_back();
    // nn.MultiheadAttention: in_proj rows [q; k; v], each [d, d].
    FLICK_ASSIGN_OR_RETURN(Tensor sa_w, v.get("self_attn.in_proj_weight", kFloat, {3 * d, d}));
    FLICK_ASSIGN_OR_RETURN(Tensor sa_b, v.get("self_attn.in_proj_bias", kFloat, {3 * d}));
    l.sa_qk = pack(sa_w.slice(0, 0, 2 * d), sa_b.slice(0, 0, 2 * d));
    l.sa_v = pack(sa_w.slice(0, 2 * d, d), sa_b.slice(0, 2 * d, d));
    FLICK_ASSIGN_OR_RETURN(Tensor sa_ow, v.get("self_attn.out_proj.weight", kFloat, {d, d}));
    FLICK_ASSIGN_OR_RETURN(Tensor sa_ob, v.get("self_attn.out_proj.bias", kFloat, {d}));
    l.sa_out = pack(sa_ow, sa_ob);
    FLICK_ASSIGN_OR_RETURN(Tensor ca_w,
                           v.get("cross_attn_image.in_proj_weight", kFloat, {3 * d, d}));
    FLICK_ASSIGN_OR_RETURN(Tensor ca_b, v.get("cross_attn_image.in_proj_bias", kFloat, {3 * d}));
    l.ca_q = pack(ca_w.slice(0, 0, d), ca_b.slice(0, 0, d));
    l.ca_kv = pack(ca_w.slice(0, d, 2 * d), ca_b.slice(0, d, 2 * d));
    FLICK_ASSIGN_OR_RETURN(Tensor ca_ow, v.get("cross_attn_image.out_proj.weight", kFloat, {d, d}));
    FLICK_ASSIGN_OR_RETURN(Tensor ca_ob, v.get("cross_attn_image.out_proj.bias", kFloat, {d}));
    l.ca_out = pack(ca_ow, ca_ob);
    FLICK_ASSIGN_OR_RETURN(Tensor w1, v.get("linear1.weight", kFloat, {c.ffn, d}));
    FLICK_ASSIGN_OR_RETURN(Tensor b1, v.get("linear1.bias", kFloat, {c.ffn}));
    l.fc1 = pack(w1, b1);
    FLICK_ASSIGN_OR_RETURN(Tensor w2, v.get("linear2.weight", kFloat, {d, c.ffn}));
    FLICK_ASSIGN_OR_RETURN(Tensor b2, v.get("linear2.bias", kFloat, {d}));
    l.fc2 = pack(w2, b2);
    FLICK_ASSIGN_OR_RETURN(l.n1_w, param(v, "norm1.weight", {d}));
    FLICK_ASSIGN_OR_RETURN(l.n1_b, param(v, "norm1.bias", {d}));
    FLICK_ASSIGN_OR_RETURN(l.n2_w, param(v, "norm2.weight", {d}));
    FLICK_ASSIGN_OR_RETURN(l.n2_b, param(v, "norm2.bias", {d}));
    FLICK_ASSIGN_OR_RETURN(l.n3_w, param(v, "norm3.weight", {d}));
    FLICK_ASSIGN_OR_RETURN(l.n3_b, param(v, "norm3.bias", {d}));
  }
  return ok_status();
}

void FusionEncoder::plan() {
  const FusionEncoderConfig& c = cfg_;
  const int64_t t = c.tokens, d = c.d_model, p = c.max_prompt;
  x0_ = arena_.request("fusion.x_after_self0", act_, {t, d});
  x_ = arena_.request("fusion.x", act_, {t, d});
  pos_ = arena_.request("fusion.pos", act_, {t, d});
  h_ = arena_.request("fusion.h", act_, {t, d});
  hp_ = arena_.request("fusion.h_plus_pos", act_, {t, d});
  qk_ = arena_.request("fusion.qk", act_, {t, 2 * d});
  v_ = arena_.request("fusion.v", act_, {t, d});
  attn_ = arena_.request("fusion.attn", act_, {t, d});
  o_ = arena_.request("fusion.o", act_, {t, d});
  ffn_ = arena_.request("fusion.ffn", act_, {ffn_rows(), c.ffn});
  kv_ = arena_.request("fusion.prompt_kv", act_, {p, 2 * d});
  prompt_ = arena_.request("fusion.prompt", act_, {p, d});
  valid_ = arena_.request("fusion.prompt_valid", DType::U8, {1, p});
  arena_.finalize();
}

// F32: the FFN runs on chunks of 256 tokens, so that the [256, 2048] hidden
// (2 MB) stays in the caches between linear1 and linear2 instead of a
// [5184, 2048] one (42 MB) going to memory and back; the rows are
// independent, so the result is the same. BF16 keeps one pass.
int64_t FusionEncoder::ffn_rows() const {
  constexpr int64_t kF32FfnRows = 256;
  return act_ == DType::F32 ? std::min(kF32FfnRows, cfg_.tokens) : cfg_.tokens;
}

Status FusionEncoder::encode_image(const Tensor& image, const Tensor& pos) {
  const FusionEncoderConfig& c = cfg_;
  const int64_t t = c.tokens, d = c.d_model;
  const int64_t g = image.ndim() == 4 ? image.dim(2) : 0;
  if (image.ndim() != 4 || image.shape != Shape{1, d, g, g} || g * g != t ||
      pos.shape != image.shape || !is_float(image) || !is_float(pos))
    return invalid_input("SAM3 fusion encoder: expected image and pos [1, " + std::to_string(d) +
                         ", g, g] with g*g = " + std::to_string(t) + ", got " + image.str() +
                         " and " + pos.str());
  Backend& be = *backend_;
  have_image_ = false;
  // [1, d, g, g] -> [T, d] (src.flatten(2).transpose(1, 2)).
  Tensor x0 = arena_.get(x0_), p = arena_.get(pos_);
  be.copy(image.reshape({d, t}).permute({1, 0}), x0);
  be.copy(pos.reshape({d, t}).permute({1, 0}), p);
  if (!layers_.empty()) self_attention(0, x0);
  have_image_ = true;
  return ok_status();
}

Expected<Tensor> FusionEncoder::forward(const Tensor& image, const Tensor& pos,
                                        const Tensor& prompt, const Tensor& prompt_valid,
                                        const Tap& tap) {
  FLICK_TRY(encode_image(image, pos));
  return forward(prompt, prompt_valid, tap);
}

Expected<Tensor> FusionEncoder::forward(const Tensor& prompt, const Tensor& prompt_valid,
                                        const Tap& tap) {
  const FusionEncoderConfig& c = cfg_;
  const int64_t t = c.tokens, d = c.d_model;
  const int64_t np = prompt.ndim() == 2 ? prompt.dim(0) : 0;
  if (prompt.ndim() != 2 || prompt.dim(1) != d || np < 1 || np > c.max_prompt ||
      !is_float(prompt) || prompt_valid.dtype != DType::U8 || prompt_valid.shape != Shape{np})
    return invalid_input(
        "SAM3 fusion encoder: expected a prompt [P <= " + std::to_string(c.max_prompt) + ", " +
        std::to_string(d) + "] and U8 validity [P], got " + prompt.str() + " and " +
        prompt_valid.str());
  if (!have_image_) return usage_error("SAM3 fusion encoder: forward() before encode_image()");
  Backend& be = *backend_;
  Tensor pr = arena_.get(prompt_).slice(0, 0, np);  // [P, d]
  be.copy(prompt, pr);
  Tensor valid = arena_.get(valid_).slice(1, 0, np);  // [1, P]
  be.copy(prompt_valid.reshape({1, np}), valid);

  Tensor x = arena_.get(x_);  // [T, d]
  be.copy(arena_.get(x0_), x);
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (i > 0) self_attention(i, x);  // layer 0's: encode_image
    cross_attention_and_ffn(i, x, np);
    if (tap) tap("layer" + std::to_string(i), x.reshape({1, t, d}));
  }
  return x.reshape({1, t, d});
}

void FusionEncoder::self_attention(size_t i, Tensor& x) {
  const FusionEncoderConfig& c = cfg_;
  const int64_t t = c.tokens, d = c.d_model, hd = d / c.heads;
  const Layer& l = layers_[i];
  Backend& be = *backend_;
  Tensor h = arena_.get(h_), hp = arena_.get(hp_), qk = arena_.get(qk_), v = arena_.get(v_),
         attn = arena_.get(attn_), o = arena_.get(o_), p = arena_.get(pos_);
  const Tensor qk5 = qk.reshape({1, t, 2, c.heads, hd});
  Tensor attn4 = attn.reshape({1, t, c.heads, hd});
  // q = k = LN1(x) + pos, v = LN1(x) (forward_pre).
  be.layer_norm(x, l.n1_w, l.n1_b, c.eps, h);
  be.add(h, p, hp);
  be.linear(hp, *l.sa_qk, qk, Activation::None);
  be.linear(h, *l.sa_v, v, Activation::None);
  be.attention(qk5.select(2, 0), qk5.select(2, 1), v.reshape({1, t, c.heads, hd}), attn4,
               AttentionParams{});
  be.linear(attn, *l.sa_out, o, Activation::None);
  be.add(x, o, x);
}

void FusionEncoder::cross_attention_and_ffn(size_t i, Tensor& x, int64_t np) {
  const FusionEncoderConfig& c = cfg_;
  const int64_t t = c.tokens, d = c.d_model, hd = d / c.heads;
  const Layer& l = layers_[i];
  Backend& be = *backend_;
  Tensor h = arena_.get(h_), hp = arena_.get(hp_), attn = arena_.get(attn_), o = arena_.get(o_),
         f = arena_.get(ffn_);
  Tensor pr = arena_.get(prompt_).slice(0, 0, np);    // [P, d]
  Tensor valid = arena_.get(valid_).slice(1, 0, np);  // [1, P]
  Tensor kv = arena_.get(kv_).slice(0, 0, np);        // [P, 2d]
  const Tensor kv5 = kv.reshape({1, np, 2, c.heads, hd});
  Tensor attn4 = attn.reshape({1, t, c.heads, hd});
  AttentionParams cross;
  cross.key_padding = valid;
  // Cross-attention to the prompt (no pos on either side); its queries
  // reuse h.
  be.layer_norm(x, l.n2_w, l.n2_b, c.eps, hp);
  be.linear(hp, *l.ca_q, h, Activation::None);
  be.linear(pr, *l.ca_kv, kv, Activation::None);
  be.attention(h.reshape({1, t, c.heads, hd}), kv5.select(2, 0), kv5.select(2, 1), attn4, cross);
  be.linear(attn, *l.ca_out, o, Activation::None);
  be.add(x, o, x);
  // FFN: linear2(relu(linear1(LN3 x))), in chunks of rows (ffn_rows()).
  for (int64_t r = 0; r < t; r += f.dim(0)) {
    const int64_t n = std::min(f.dim(0), t - r);
    Tensor xr = x.slice(0, r, n), hr = h.slice(0, r, n), or_ = o.slice(0, r, n);
    Tensor fr = f.slice(0, 0, n);
    be.layer_norm(xr, l.n3_w, l.n3_b, c.eps, hr);
    be.linear(hr, *l.fc1, fr, Activation::Relu);
    be.linear(fr, *l.fc2, or_, Activation::None);
    be.add(xr, or_, xr);
  }
}

}  // namespace flick
