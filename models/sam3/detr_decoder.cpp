#include "models/sam3/detr_decoder.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "runtime/dtype.h"

namespace flick {
namespace {

const DTypeSet kFloat{DType::F32, DType::BF16, DType::F16};

// A flat arena buffer viewed as `shape` (its first numel elements).
Tensor view(const Arena& a, Arena::BufferId id, Shape shape) {
  return a.get(id).slice(0, 0, shape.numel()).reshape(shape);
}

float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

// model_misc.py inverse_sigmoid(x, eps=1e-3).
float inverse_sigmoid(float x) {
  x = std::min(std::max(x, 0.f), 1.f);
  const float x1 = std::max(x, 1e-3f), x2 = std::max(1.f - x, 1e-3f);
  return std::log(x1 / x2);
}

}  // namespace

Expected<DetrDecoder> DetrDecoder::load(const WeightView& decoder, Backend& backend,
                                        Precision precision, int64_t grid, int64_t max_prompt) {
  DetrDecoder m;
  DetrDecoderConfig& c = m.cfg_;
  const WeightView layers = decoder.sub("layers");
  c.layers = static_cast<int64_t>(layers.children().size());
  if (c.layers == 0) return not_found(layers.full_name("0") + ".*: no decoder layers");
  const TensorInfo* q = decoder.info("query_embed.weight");
  const TensorInfo* l1 = layers.sub("0").info("linear1.weight");
  const TensorInfo* rpb = decoder.info("boxRPB_embed_x.layers.1.weight");
  if (!q || q->shape.size() != 2)
    return not_found(decoder.full_name("query_embed.weight") + ": missing or not 2-d");
  if (!l1 || l1->shape.size() != 2)
    return not_found(layers.sub("0").full_name("linear1.weight") + ": missing or not 2-d");
  if (!rpb || rpb->shape.size() != 2)
    return not_found(decoder.full_name("boxRPB_embed_x.layers.1.weight") + ": missing or not 2-d");
  c.queries = q->shape[0];
  c.d_model = q->shape[1];
  c.ffn = l1->shape[0];
  c.heads = rpb->shape[0];  // boxRPB emits one bias per cross-attention head
  c.grid = grid;
  c.max_prompt = max_prompt;
  if (c.heads < 1 || c.d_model % c.heads != 0 || c.d_model % 2 != 0 || grid < 1 || max_prompt < 1)
    return invalid_input("SAM3 decoder: width " + std::to_string(c.d_model) + ", " +
                         std::to_string(c.heads) + " heads, grid " + std::to_string(grid) +
                         " do not fit");
  // INT8: the attention projections and the FFN W8A8; the small MLP heads
  // (boxes, presence, query pos, boxRPB) stay bf16 as the peers keep heads.
  if (precision != Precision::F32 && precision != Precision::BF16 && precision != Precision::INT8)
    return invalid_input(std::string("SAM3 decoder: precision ") + precision_name(precision) +
                         " is not supported (F32 or BF16)");
  m.backend_ = &backend;
  m.precision_ = precision;
  m.act_ = precision == Precision::F32 ? DType::F32 : DType::BF16;
  FLICK_TRY(m.load_weights(decoder));
  m.plan();
  return m;
}

Status DetrDecoder::load_weights(const WeightView& decoder) {
  const DetrDecoderConfig& c = cfg_;
  const int64_t d = c.d_model;
  auto param = [&](const WeightView& v, const std::string& name, Shape shape) -> Expected<Tensor> {
    FLICK_ASSIGN_OR_RETURN(Tensor t, v.get(name, kFloat, shape));
    if (t.dtype == act_) return t;
    OwnedTensor& o = owned_.emplace_back(act_, t.shape);
    convert(t.dtype, t.data, act_, o.t.data, t.numel());
    return o.t;
  };
  const Precision head = precision_ == Precision::INT8 ? Precision::BF16 : precision_;
  auto pack = [&](const Tensor& w, const Tensor& b, Precision p) {
    return backend_->pack_linear({w, Tensor{}, b, p});
  };
  auto linear = [&](const WeightView& v, const std::string& p, int64_t n, int64_t k,
                    Precision prec) -> Expected<std::unique_ptr<PackedLinear>> {
    FLICK_ASSIGN_OR_RETURN(Tensor w, v.get(p + ".weight", kFloat, {n, k}));
    FLICK_ASSIGN_OR_RETURN(Tensor b, v.get(p + ".bias", kFloat, {n}));
    return pack(w, b, prec);
  };
  // nn.MultiheadAttention with packed in_proj rows [q; k; v].
  auto mha = [&](const WeightView& v, const std::string& p) -> Expected<Mha> {
    Mha m;
    FLICK_ASSIGN_OR_RETURN(Tensor w, v.get(p + ".in_proj_weight", kFloat, {3 * d, d}));
    FLICK_ASSIGN_OR_RETURN(Tensor b, v.get(p + ".in_proj_bias", kFloat, {3 * d}));
    m.q = pack(w.slice(0, 0, d), b.slice(0, 0, d), precision_);
    m.k = pack(w.slice(0, d, d), b.slice(0, d, d), precision_);
    m.v = pack(w.slice(0, 2 * d, d), b.slice(0, 2 * d, d), precision_);
    m.qk = pack(w.slice(0, 0, 2 * d), b.slice(0, 0, 2 * d), precision_);
    FLICK_ASSIGN_OR_RETURN(m.out, linear(v, p + ".out_proj", d, d, precision_));
    return m;
  };
  auto mlp = [&](const std::string& p, std::vector<int64_t> dims) -> Expected<Mlp> {
    Mlp m;
    for (size_t i = 0; i + 1 < dims.size(); ++i) {
      FLICK_ASSIGN_OR_RETURN(auto lin, linear(decoder, p + ".layers." + std::to_string(i),
                                              dims[i + 1], dims[i], head));
      m.layers.push_back(std::move(lin));
    }
    return m;
  };

  for (int64_t i = 0; i < c.layers; ++i) {
    const WeightView v = decoder.sub("layers").sub(std::to_string(i));
    Layer& l = layers_.emplace_back();
    FLICK_ASSIGN_OR_RETURN(l.image, mha(v, "cross_attn"));
    FLICK_ASSIGN_OR_RETURN(l.text, mha(v, "ca_text"));
    FLICK_ASSIGN_OR_RETURN(l.self_attn, mha(v, "self_attn"));
    FLICK_ASSIGN_OR_RETURN(l.fc1, linear(v, "linear1", c.ffn, d, precision_));
    FLICK_ASSIGN_OR_RETURN(l.fc2, linear(v, "linear2", d, c.ffn, precision_));
    FLICK_ASSIGN_OR_RETURN(l.n1_w, param(v, "norm1.weight", {d}));
    FLICK_ASSIGN_OR_RETURN(l.n1_b, param(v, "norm1.bias", {d}));
    FLICK_ASSIGN_OR_RETURN(l.n2_w, param(v, "norm2.weight", {d}));
    FLICK_ASSIGN_OR_RETURN(l.n2_b, param(v, "norm2.bias", {d}));
    FLICK_ASSIGN_OR_RETURN(l.n3_w, param(v, "norm3.weight", {d}));
    FLICK_ASSIGN_OR_RETURN(l.n3_b, param(v, "norm3.bias", {d}));
    FLICK_ASSIGN_OR_RETURN(l.nt_w, param(v, "catext_norm.weight", {d}));
    FLICK_ASSIGN_OR_RETURN(l.nt_b, param(v, "catext_norm.bias", {d}));
  }
  FLICK_ASSIGN_OR_RETURN(norm_w_, param(decoder, "norm.weight", {d}));
  FLICK_ASSIGN_OR_RETURN(norm_b_, param(decoder, "norm.bias", {d}));
  FLICK_ASSIGN_OR_RETURN(query_embed_, param(decoder, "query_embed.weight", {c.queries, d}));
  FLICK_ASSIGN_OR_RETURN(presence_token_, param(decoder, "presence_token.weight", {1, d}));
  FLICK_ASSIGN_OR_RETURN(pnorm_w_, param(decoder, "presence_token_out_norm.weight", {d}));
  FLICK_ASSIGN_OR_RETURN(pnorm_b_, param(decoder, "presence_token_out_norm.bias", {d}));
  FLICK_ASSIGN_OR_RETURN(bbox_, mlp("bbox_embed", {d, d, d, 4}));
  FLICK_ASSIGN_OR_RETURN(presence_head_, mlp("presence_token_head", {d, d, d, 1}));
  FLICK_ASSIGN_OR_RETURN(ref_point_head_, mlp("ref_point_head", {2 * d, d, d}));
  FLICK_ASSIGN_OR_RETURN(rpb_x_, mlp("boxRPB_embed_x", {2, d, c.heads}));
  FLICK_ASSIGN_OR_RETURN(rpb_y_, mlp("boxRPB_embed_y", {2, d, c.heads}));
  // reference_points.weight.sigmoid(): the boxes the first layer starts from.
  FLICK_ASSIGN_OR_RETURN(Tensor rp, decoder.get("reference_points.weight", kFloat, {c.queries, 4}));
  ref_init_.resize(static_cast<size_t>(c.queries * 4));
  convert(rp.dtype, rp.data, DType::F32, ref_init_.data(), c.queries * 4);
  for (float& r : ref_init_) r = sigmoid(r);
  // Zero rows copied into the planned buffers each forward.
  zero_pos_ = OwnedTensor(act_, {1, d});
  zero_bias_ = OwnedTensor(DType::F32, {1, c.heads, 1, c.grid});
  const std::vector<float> zeros(static_cast<size_t>(std::max(d, zero_bias_.t.numel())), 0.f);
  convert(DType::F32, zeros.data(), act_, zero_pos_.t.data, d);
  convert(DType::F32, zeros.data(), DType::F32, zero_bias_.t.data, zero_bias_.t.numel());
  return ok_status();
}

void DetrDecoder::plan() {
  const DetrDecoderConfig& c = cfg_;
  const int64_t d = c.d_model, n = c.queries + 1, t = c.grid * c.grid, g = c.grid;
  const int64_t p = c.max_prompt, nh = c.heads, L = c.layers;
  t_ = arena_.request("decoder.t", act_, {n, d});
  pos_ = arena_.request("decoder.pos", act_, {n, d});
  tp_ = arena_.request("decoder.t_plus_pos", act_, {n, d});
  qk_ = arena_.request("decoder.qk", act_, {n, 2 * d});
  v_ = arena_.request("decoder.v", act_, {n, d});
  q_ = arena_.request("decoder.q", act_, {n, d});
  attn_ = arena_.request("decoder.attn", act_, {n, d});
  o_ = arena_.request("decoder.o", act_, {n, d});
  ffn_ = arena_.request("decoder.ffn", act_, {n, c.ffn});
  mem_ = arena_.request("decoder.mem", act_, {t, d});
  memp_ = arena_.request("decoder.mem_plus_pos", act_, {t, d});
  mk_ = arena_.request("decoder.mem_k", act_, {t, d});
  mv_ = arena_.request("decoder.mem_v", act_, {t, d});
  kv_ = arena_.request("decoder.prompt_kv", act_, {p, 2 * d});
  prompt_ = arena_.request("decoder.prompt", act_, {p, d});
  valid_ = arena_.request("decoder.prompt_valid", DType::U8, {1, p});
  sine_ = arena_.request("decoder.sine", DType::F32, {c.queries, 2 * d});
  const int64_t rows = c.queries * g;  // boxRPB MLP rows
  hid_a_ = arena_.request("decoder.hidden_a", act_, {std::max(rows, n) * d});
  hid_b_ = arena_.request("decoder.hidden_b", act_, {std::max(rows, n) * d});
  dy_ = arena_.request("decoder.rpb_dy", DType::F32, {rows, 2});
  dx_ = arena_.request("decoder.rpb_dx", DType::F32, {rows, 2});
  by_ = arena_.request("decoder.rpb_by", act_, {rows, nh});
  bx_ = arena_.request("decoder.rpb_bx", act_, {rows, nh});
  // The boxRPB bias as its separable parts (AttentionParams::bias_y / x),
  // [1, nh, 1 + Q, g]: row 0 (presence) zero.
  byc_ = arena_.request("decoder.rpb_by_heads", DType::F32, {1, nh, n, g});
  bxc_ = arena_.request("decoder.rpb_bx_heads", DType::F32, {1, nh, n, g});
  hs_ = arena_.request("decoder.hs", act_, {L, c.queries, d});
  refs_ = arena_.request("decoder.refs", DType::F32, {L, c.queries, 4});
  presence_ = arena_.request("decoder.presence", DType::F32, {L, 1});
  last_ref_ = arena_.request("decoder.last_ref", DType::F32, {c.queries, 4});
  delta_ = arena_.request("decoder.box_delta", act_, {c.queries, 4});
  delta_f32_ = arena_.request("decoder.box_delta_f32", DType::F32, {c.queries, 4});
  plogit_ = arena_.request("decoder.presence_logit", act_, {1, 1});
  plogit_f32_ = arena_.request("decoder.presence_logit_f32", DType::F32, {1, 1});
  pres_n_ = arena_.request("decoder.presence_normed", act_, {1, d});
  arena_.finalize();
}

void DetrDecoder::run_mlp(const Mlp& m, const Tensor& x, Tensor& y, Arena::BufferId tmp_a,
                          Arena::BufferId tmp_b, int64_t chunk_rows) {
  const int64_t rows = x.dim(0), step = chunk_rows > 0 ? chunk_rows : rows;
  for (int64_t r = 0; r < rows; r += step) {
    const int64_t nr = std::min(step, rows - r);
    Tensor in = x.slice(0, r, nr), out = y.slice(0, r, nr);
    if (m.layers.size() == 2) {  // the backend may fuse it (boxRPB's 2 -> 256 -> 8)
      Tensor h = view(arena_, tmp_a, {nr, m.layers[0]->out_features()});
      backend_->mlp_relu(in, *m.layers[0], *m.layers[1], h, out);
      continue;
    }
    for (size_t i = 0; i < m.layers.size(); ++i) {
      const bool last = i + 1 == m.layers.size();
      if (last) {
        backend_->linear(in, *m.layers[i], out, Activation::None);
      } else {
        Tensor h = view(arena_, i % 2 == 0 ? tmp_a : tmp_b, {nr, m.layers[i]->out_features()});
        backend_->linear(in, *m.layers[i], h, Activation::Relu);
        in = h;
      }
    }
  }
}

// boxRPB's MLPs run on chunks of rows whose [rows, d_model] hidden stays in
// a core's L2 (~1 MB; the whole [200 * 72, 256] one is 7-15 MB and went to
// memory and back between the two linears); rows are independent, so the
// result is the same.
int64_t DetrDecoder::rpb_chunk_rows() const {
  constexpr int64_t kHiddenBytes = int64_t(1) << 20;
  return std::max<int64_t>(1, kHiddenBytes / (cfg_.d_model * int64_t(dtype_size(act_))));
}

Expected<DetrDecoderOutput> DetrDecoder::forward(const Tensor& memory, const Tensor& pos,
                                                 const Tensor& prompt, const Tensor& prompt_valid,
                                                 const Tap& tap) {
  const DetrDecoderConfig& c = cfg_;
  const int64_t d = c.d_model, nq = c.queries, n = nq + 1, g = c.grid, t = g * g, nh = c.heads,
                hd = d / nh, half = d / 2;
  auto is_float = [](const Tensor& x) { return x.dtype == DType::F32 || x.dtype == DType::BF16; };
  if (memory.shape != Shape{1, t, d} || pos.shape != Shape{1, d, g, g} || !is_float(memory) ||
      !is_float(pos))
    return invalid_input("SAM3 decoder: expected memory [1, " + std::to_string(t) + ", " +
                         std::to_string(d) + "] and pos [1, " + std::to_string(d) + ", " +
                         std::to_string(g) + ", " + std::to_string(g) + "], got " + memory.str() +
                         " and " + pos.str());
  const int64_t np = prompt.ndim() == 2 ? prompt.dim(0) : 0;
  if (prompt.ndim() != 2 || prompt.dim(1) != d || np < 1 || np > c.max_prompt ||
      !is_float(prompt) || prompt_valid.dtype != DType::U8 || prompt_valid.shape != Shape{np})
    return invalid_input("SAM3 decoder: expected a prompt [P <= " + std::to_string(c.max_prompt) +
                         ", " + std::to_string(d) + "] and U8 validity [P], got " + prompt.str() +
                         " and " + prompt_valid.str());
  Backend& be = *backend_;

  // ---- inputs: image memory and keys, prompt, the [presence; queries] state ----
  Tensor mem = arena_.get(mem_), memp = arena_.get(memp_);  // [T, d]
  be.copy(memory.reshape({t, d}), mem);
  be.copy(pos.reshape({d, t}).permute({1, 0}), memp);
  be.add(mem, memp, memp);  // mem + pos (the image cross-attention keys)
  Tensor pr = arena_.get(prompt_).slice(0, 0, np);
  be.copy(prompt, pr);
  Tensor valid = arena_.get(valid_).slice(1, 0, np);
  be.copy(prompt_valid.reshape({1, np}), valid);
  Tensor x = arena_.get(t_);  // [1 + Q, d]: row 0 presence
  Tensor x_presence = x.slice(0, 0, 1), x_queries = x.slice(0, 1, nq);
  be.copy(presence_token_, x_presence);
  be.copy(query_embed_, x_queries);

  Tensor posb = arena_.get(pos_);  // [1 + Q, d]: the presence token has no pos
  Tensor pos_row0 = posb.slice(0, 0, 1);
  be.copy(zero_pos_.t, pos_row0);
  // The boxRPB bias: bias_y[h, i, y] + bias_x[h, i, x] for key y * g + x;
  // the presence row (i = 0) gets none.
  Tensor byc = arena_.get(byc_), bxc = arena_.get(bxc_);  // [1, nh, 1 + Q, g]
  for (Tensor* part : {&byc, &bxc}) {
    Tensor row0 = part->slice(2, 0, 1);
    be.copy(zero_bias_.t, row0);
  }

  DetrDecoderOutput out;
  out.hs = arena_.get(hs_);
  out.refs = arena_.get(refs_);
  out.presence = arena_.get(presence_);
  out.last_ref = arena_.get(last_ref_);
  std::vector<float> ref = ref_init_;  // [Q, 4] cxcywh

  // gen_sineembed_for_position(ref, d): dim_t = 10000^(2 floor(j/2) / (d/2)).
  std::vector<float> dim_t(static_cast<size_t>(half));
  for (int64_t j = 0; j < half; ++j)
    dim_t[static_cast<size_t>(j)] = static_cast<float>(std::pow(
        10000.0, static_cast<double>(static_cast<float>(2 * (j / 2)) / static_cast<float>(half))));
  const float two_pi = static_cast<float>(2.0 * M_PI);
  const float log2_8 = 3.f;  // np.log2(8)

  const Tensor qk5 = arena_.get(qk_).reshape({1, n, 2, nh, hd});
  Tensor attn4 = arena_.get(attn_).reshape({1, n, nh, hd});
  Tensor tp = arena_.get(tp_), v = arena_.get(v_), q = arena_.get(q_), o = arena_.get(o_),
         attn = arena_.get(attn_), f = arena_.get(ffn_), mk = arena_.get(mk_), mv = arena_.get(mv_);
  Tensor kv = arena_.get(kv_).slice(0, 0, np);
  const Tensor kv5 = kv.reshape({1, np, 2, nh, hd});
  AttentionParams text_params, image_params;
  text_params.key_padding = valid;
  image_params.bias_y = byc;
  image_params.bias_x = bxc;

  for (int64_t li = 0; li < c.layers; ++li) {
    const Layer& l = layers_[static_cast<size_t>(li)];
    const std::string name = "layer" + std::to_string(li);
    float* refs = out.refs.ptr<float>() + li * nq * 4;
    std::copy(ref.begin(), ref.end(), refs);

    // ---- query pos: ref_point_head(sine(ref)), order y, x, w, h ----
    Tensor sine = arena_.get(sine_);  // [Q, 2d] F32
    float* s = sine.ptr<float>();
    for (int64_t qi = 0; qi < nq; ++qi) {
      const float* r = &ref[static_cast<size_t>(qi * 4)];
      const float coord[4] = {r[1], r[0], r[2], r[3]};  // y, x, w, h
      for (int part = 0; part < 4; ++part) {
        const float e = coord[part] * two_pi;
        for (int64_t j = 0; j < half; ++j) {
          const float a = e / dim_t[static_cast<size_t>(j)];
          s[qi * 2 * d + part * half + j] = (j % 2 == 0) ? std::sin(a) : std::cos(a);
        }
      }
    }
    Tensor qpos = posb.slice(0, 1, nq);
    run_mlp(ref_point_head_, sine, qpos, hid_a_, hid_b_);

    // ---- boxRPB bias from the reference boxes ----
    float* dy = arena_.get(dy_).ptr<float>();
    float* dx = arena_.get(dx_).ptr<float>();
    auto log_delta = [&](float delta) {  // sign(8d) log2(|8d| + 1) / log2(8)
      const float v8 = delta * 8.f;
      const float sgn = v8 > 0.f ? 1.f : (v8 < 0.f ? -1.f : 0.f);
      return sgn * std::log2(std::fabs(v8) + 1.f) / log2_8;
    };
    for (int64_t qi = 0; qi < nq; ++qi) {
      const float* r = &ref[static_cast<size_t>(qi * 4)];
      const float x0 = r[0] - 0.5f * r[2], y0 = r[1] - 0.5f * r[3];  // box_cxcywh_to_xyxy
      const float x1 = r[0] + 0.5f * r[2], y1 = r[1] + 0.5f * r[3];
      for (int64_t k = 0; k < g; ++k) {
        const float coord = static_cast<float>(k) / static_cast<float>(g);
        dy[(qi * g + k) * 2 + 0] = log_delta(coord - y0);
        dy[(qi * g + k) * 2 + 1] = log_delta(coord - y1);
        dx[(qi * g + k) * 2 + 0] = log_delta(coord - x0);
        dx[(qi * g + k) * 2 + 1] = log_delta(coord - x1);
      }
    }
    Tensor by = arena_.get(by_), bx = arena_.get(bx_);  // [Q*g, nh]
    run_mlp(rpb_y_, arena_.get(dy_), by, hid_a_, hid_b_, rpb_chunk_rows());
    run_mlp(rpb_x_, arena_.get(dx_), bx, hid_a_, hid_b_, rpb_chunk_rows());
    // The attention adds the two parts per key (AttentionParams::bias_y / x)
    // instead of reading a materialised [1, nh, 1 + Q, T] f32 bias (33 MB,
    // written and read once per layer).
    Tensor byq = byc.select(0, 0).slice(1, 1, nq), bxq = bxc.select(0, 0).slice(1, 1, nq);
    be.copy(by.reshape({nq, g, nh}).permute({2, 0, 1}), byq);  // [nh, Q, g(y)]
    be.copy(bx.reshape({nq, g, nh}).permute({2, 0, 1}), bxq);  // [nh, Q, g(x)]

    // ---- self-attention over [presence; queries] (post-norm) ----
    be.add(x, posb, tp);
    Tensor qk = arena_.get(qk_);
    be.linear(tp, *l.self_attn.qk, qk, Activation::None);
    be.linear(x, *l.self_attn.v, v, Activation::None);
    be.attention(qk5.select(2, 0), qk5.select(2, 1), v.reshape({1, n, nh, hd}), attn4,
                 AttentionParams{});
    be.linear(attn, *l.self_attn.out, o, Activation::None);
    be.add(x, o, x);
    be.layer_norm(x, l.n2_w, l.n2_b, c.eps, x);

    // ---- text cross-attention ----
    be.add(x, posb, tp);
    be.linear(tp, *l.text.q, q, Activation::None);
    Tensor text_k = kv.slice(1, 0, d), text_v = kv.slice(1, d, d);
    be.linear(pr, *l.text.k, text_k, Activation::None);
    be.linear(pr, *l.text.v, text_v, Activation::None);
    be.attention(q.reshape({1, n, nh, hd}), kv5.select(2, 0), kv5.select(2, 1), attn4, text_params);
    be.linear(attn, *l.text.out, o, Activation::None);
    be.add(x, o, x);
    be.layer_norm(x, l.nt_w, l.nt_b, c.eps, x);

    // ---- image cross-attention with the boxRPB bias ----
    be.add(x, posb, tp);
    be.linear(tp, *l.image.q, q, Activation::None);
    be.linear(memp, *l.image.k, mk, Activation::None);
    be.linear(mem, *l.image.v, mv, Activation::None);
    be.attention(q.reshape({1, n, nh, hd}), mk.reshape({1, t, nh, hd}), mv.reshape({1, t, nh, hd}),
                 attn4, image_params);
    be.linear(attn, *l.image.out, o, Activation::None);
    be.add(x, o, x);
    be.layer_norm(x, l.n1_w, l.n1_b, c.eps, x);

    // ---- FFN ----
    be.linear(x, *l.fc1, f, Activation::Relu);
    be.linear(f, *l.fc2, o, Activation::None);
    be.add(x, o, x);
    be.layer_norm(x, l.n3_w, l.n3_b, c.eps, x);

    // ---- outputs: normed queries, presence logit, refined boxes ----
    Tensor hs = out.hs.select(0, li);  // [Q, d]
    be.layer_norm(x.slice(0, 1, nq), norm_w_, norm_b_, c.eps, hs);
    Tensor pres_n = arena_.get(pres_n_);
    be.layer_norm(x.slice(0, 0, 1), pnorm_w_, pnorm_b_, c.eps, pres_n);
    Tensor plogit = arena_.get(plogit_);
    run_mlp(presence_head_, pres_n, plogit, hid_a_, hid_b_);
    Tensor pres = out.presence.slice(0, li, 1);
    be.copy(plogit, pres);
    Tensor delta = arena_.get(delta_), delta_f32 = arena_.get(delta_f32_);
    run_mlp(bbox_, hs, delta, hid_a_, hid_b_);
    be.copy(delta, delta_f32);
    const float* dl = delta_f32.ptr<float>();
    for (size_t i = 0; i < ref.size(); ++i) ref[i] = sigmoid(dl[i] + inverse_sigmoid(ref[i]));
    if (tap) {
      tap(name + ".hs", hs);
      tap(name + ".presence", pres);
      tap(name + ".ref", out.refs.select(0, li));
    }
  }
  std::copy(ref.begin(), ref.end(), out.last_ref.ptr<float>());
  return out;
}

}  // namespace flick
