#include "models/sam3/geometry_cls.h"

#include <string>
#include <utility>

#include "runtime/dtype.h"

namespace flick {
namespace {

const DTypeSet kFloat{DType::F32, DType::BF16, DType::F16};

}  // namespace

Expected<GeometryCls> GeometryCls::load(const WeightView& geometry, Backend& backend,
                                        Precision precision, int64_t grid, int64_t heads) {
  GeometryCls m;
  GeometryClsConfig& c = m.cfg_;
  const WeightView layers = geometry.sub("encode");
  c.layers = static_cast<int64_t>(layers.children().size());
  if (c.layers == 0) return not_found(layers.full_name("0") + ".*: no geometry encoder layers");
  const TensorInfo* l1 = layers.sub("0").info("linear1.weight");
  if (!l1 || l1->shape.size() != 2)
    return not_found(layers.sub("0").full_name("linear1.weight") + ": missing or not 2-d");
  c.ffn = l1->shape[0];
  c.d_model = l1->shape[1];
  c.heads = heads;
  c.tokens = grid * grid;
  if (heads < 1 || c.d_model % heads != 0 || grid < 1)
    return invalid_input("SAM3 geometry encoder: width " + std::to_string(c.d_model) + ", " +
                         std::to_string(heads) + " heads, grid " + std::to_string(grid) +
                         " do not fit");
  if (precision != Precision::F32 && precision != Precision::BF16)
    return invalid_input(std::string("SAM3 geometry encoder: precision ") +
                         precision_name(precision) + " is not supported (F32 or BF16)");
  m.backend_ = &backend;
  m.precision_ = precision;
  m.act_ = precision == Precision::F32 ? DType::F32 : DType::BF16;
  FLICK_TRY(m.load_weights(geometry));
  m.plan();
  return m;
}

Status GeometryCls::load_weights(const WeightView& geometry) {
  const GeometryClsConfig& c = cfg_;
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
  auto linear = [&](const WeightView& v, const std::string& p, int64_t n,
                    int64_t k) -> Expected<std::unique_ptr<PackedLinear>> {
    FLICK_ASSIGN_OR_RETURN(Tensor w, v.get(p + ".weight", kFloat, {n, k}));
    FLICK_ASSIGN_OR_RETURN(Tensor b, v.get(p + ".bias", kFloat, {n}));
    return pack(w, b);
  };

  FLICK_ASSIGN_OR_RETURN(cls_embed_, param(geometry, "cls_embed.weight", {1, d}));
  FLICK_ASSIGN_OR_RETURN(final_proj_, linear(geometry, "final_proj", d, d));
  FLICK_ASSIGN_OR_RETURN(norm_w_, param(geometry, "norm.weight", {d}));
  FLICK_ASSIGN_OR_RETURN(norm_b_, param(geometry, "norm.bias", {d}));
  FLICK_ASSIGN_OR_RETURN(encode_norm_w_, param(geometry, "encode_norm.weight", {d}));
  FLICK_ASSIGN_OR_RETURN(encode_norm_b_, param(geometry, "encode_norm.bias", {d}));
  // Point / box / label projections and img_pre_norm only see geometric
  // prompts; a text-only prompt has none.
  for (const char* p :
       {"label_embed.", "points_direct_project.", "points_pool_project.", "points_pos_enc_project.",
        "boxes_direct_project.", "boxes_pool_project.", "boxes_pos_enc_project.", "img_pre_norm."})
    for (const char* t : {"weight", "bias"}) geometry.mark_used(std::string(p) + t);

  for (int64_t i = 0; i < c.layers; ++i) {
    const WeightView v = geometry.sub("encode").sub(std::to_string(i));
    Layer& l = layers_.emplace_back();
    FLICK_ASSIGN_OR_RETURN(Tensor sa_w, v.get("self_attn.in_proj_weight", kFloat, {3 * d, d}));
    FLICK_ASSIGN_OR_RETURN(Tensor sa_b, v.get("self_attn.in_proj_bias", kFloat, {3 * d}));
    l.sa_qkv = pack(sa_w, sa_b);
    FLICK_ASSIGN_OR_RETURN(l.sa_out, linear(v, "self_attn.out_proj", d, d));
    FLICK_ASSIGN_OR_RETURN(Tensor ca_w,
                           v.get("cross_attn_image.in_proj_weight", kFloat, {3 * d, d}));
    FLICK_ASSIGN_OR_RETURN(Tensor ca_b, v.get("cross_attn_image.in_proj_bias", kFloat, {3 * d}));
    l.ca_q = pack(ca_w.slice(0, 0, d), ca_b.slice(0, 0, d));
    l.ca_k = pack(ca_w.slice(0, d, d), ca_b.slice(0, d, d));
    l.ca_v = pack(ca_w.slice(0, 2 * d, d), ca_b.slice(0, 2 * d, d));
    FLICK_ASSIGN_OR_RETURN(l.ca_out, linear(v, "cross_attn_image.out_proj", d, d));
    FLICK_ASSIGN_OR_RETURN(l.fc1, linear(v, "linear1", c.ffn, d));
    FLICK_ASSIGN_OR_RETURN(l.fc2, linear(v, "linear2", d, c.ffn));
    FLICK_ASSIGN_OR_RETURN(l.n1_w, param(v, "norm1.weight", {d}));
    FLICK_ASSIGN_OR_RETURN(l.n1_b, param(v, "norm1.bias", {d}));
    FLICK_ASSIGN_OR_RETURN(l.n2_w, param(v, "norm2.weight", {d}));
    FLICK_ASSIGN_OR_RETURN(l.n2_b, param(v, "norm2.bias", {d}));
    FLICK_ASSIGN_OR_RETURN(l.n3_w, param(v, "norm3.weight", {d}));
    FLICK_ASSIGN_OR_RETURN(l.n3_b, param(v, "norm3.bias", {d}));
  }
  return ok_status();
}

void GeometryCls::plan() {
  const GeometryClsConfig& c = cfg_;
  const int64_t t = c.tokens, d = c.d_model;
  mem_ = arena_.request("geometry.mem", act_, {t, d});
  memp_ = arena_.request("geometry.mem_plus_pos", act_, {t, d});
  k_ = arena_.request("geometry.k", act_, {t, d});
  v_ = arena_.request("geometry.v", act_, {t, d});
  x_ = arena_.request("geometry.x", act_, {1, d});
  h_ = arena_.request("geometry.h", act_, {1, d});
  qkv_ = arena_.request("geometry.qkv", act_, {1, 3 * d});
  q_ = arena_.request("geometry.q", act_, {1, d});
  attn_ = arena_.request("geometry.attn", act_, {1, d});
  o_ = arena_.request("geometry.o", act_, {1, d});
  ffn_ = arena_.request("geometry.ffn", act_, {1, c.ffn});
  arena_.finalize();
}

Expected<Tensor> GeometryCls::forward(const Tensor& image, const Tensor& pos, const Tap& tap) {
  const GeometryClsConfig& c = cfg_;
  const int64_t t = c.tokens, d = c.d_model, hd = d / c.heads;
  const int64_t g = image.ndim() == 4 ? image.dim(2) : 0;
  auto is_float = [](const Tensor& x) { return x.dtype == DType::F32 || x.dtype == DType::BF16; };
  if (image.ndim() != 4 || image.shape != Shape{1, d, g, g} || g * g != t ||
      pos.shape != image.shape || !is_float(image) || !is_float(pos))
    return invalid_input("SAM3 geometry encoder: expected image and pos [1, " + std::to_string(d) +
                         ", g, g] with g*g = " + std::to_string(t) + ", got " + image.str() +
                         " and " + pos.str());
  Backend& be = *backend_;
  auto emit = [&](std::string_view name, const Tensor& v) {
    if (tap) tap(name, v);
  };

  // Seq-first image memory [T, d] and its keys (mem + pos) / values.
  Tensor mem = arena_.get(mem_), memp = arena_.get(memp_);
  be.copy(image.reshape({d, t}).permute({1, 0}), mem);
  be.copy(pos.reshape({d, t}).permute({1, 0}), memp);
  be.add(mem, memp, memp);

  Tensor x = arena_.get(x_), h = arena_.get(h_), qkv = arena_.get(qkv_), q = arena_.get(q_),
         attn = arena_.get(attn_), o = arena_.get(o_), f = arena_.get(ffn_), k = arena_.get(k_),
         v = arena_.get(v_);
  be.linear(cls_embed_, *final_proj_, h, Activation::None);
  be.layer_norm(h, norm_w_, norm_b_, c.eps, x);
  emit("proj", x);

  const Tensor qkv5 = qkv.reshape({1, 1, 3, c.heads, hd});
  Tensor attn4 = attn.reshape({1, 1, c.heads, hd});
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    be.layer_norm(x, l.n1_w, l.n1_b, c.eps, h);
    be.linear(h, *l.sa_qkv, qkv, Activation::None);
    be.attention(qkv5.select(2, 0), qkv5.select(2, 1), qkv5.select(2, 2), attn4, AttentionParams{});
    be.linear(attn, *l.sa_out, o, Activation::None);
    be.add(x, o, x);
    be.layer_norm(x, l.n2_w, l.n2_b, c.eps, h);
    be.linear(h, *l.ca_q, q, Activation::None);
    be.linear(memp, *l.ca_k, k, Activation::None);
    be.linear(mem, *l.ca_v, v, Activation::None);
    be.attention(q.reshape({1, 1, c.heads, hd}), k.reshape({1, t, c.heads, hd}),
                 v.reshape({1, t, c.heads, hd}), attn4, AttentionParams{});
    be.linear(attn, *l.ca_out, o, Activation::None);
    be.add(x, o, x);
    be.layer_norm(x, l.n3_w, l.n3_b, c.eps, h);
    be.linear(h, *l.fc1, f, Activation::Relu);
    be.linear(f, *l.fc2, o, Activation::None);
    be.add(x, o, x);
    emit("layer" + std::to_string(i), x);
  }
  be.layer_norm(x, encode_norm_w_, encode_norm_b_, c.eps, h);
  emit("cls", h);
  return h;
}

}  // namespace flick
