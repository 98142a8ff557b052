#include "models/sam3/seg_head.h"

#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "runtime/dtype.h"

namespace flick {
namespace {

const DTypeSet kFloat{DType::F32, DType::BF16, DType::F16};

// up = level + nearest-upsample(prev) (F.interpolate to level's size, then
// the add: sam3 PixelDecoder.forward). At exactly twice prev's size, one
// broadcast add over 6-d views: up and level as [1, C, H, 2, W, 2], prev as
// [1, C, H, 1, W, 1], so the upsampled map is never written (it was a full
// write and read of a 288^2 x 256 map a prompt). Channels-last maps only:
// their runs are the C channels, while NCHW ones would broadcast prev along
// runs of 2.
void add_upsampled2x(Backend& be, const Tensor& level, const Tensor& prev, Tensor& up) {
  const int64_t n = prev.dim(0), c = prev.dim(1), h = prev.dim(2), w = prev.dim(3);
  const bool channels_last = level.stride(1) == 1 && prev.stride(1) == 1 && up.stride(1) == 1;
  if (!channels_last || level.dim(2) != 2 * h || level.dim(3) != 2 * w) {
    be.upsample_nearest(prev, up);
    be.add(level, up, up);
    return;
  }
  auto split = [&](const Tensor& t) {  // [N, C, 2H, 2W] -> [N, C, H, 2, W, 2]
    Tensor v = t;
    v.shape = Shape{n, c, h, 2, w, 2};
    v.strides = {t.stride(0), t.stride(1),     2 * t.stride(2),
                 t.stride(2), 2 * t.stride(3), t.stride(3)};
    return v;
  };
  Tensor p = prev;  // [N, C, H, W] -> [N, C, H, 1, W, 1]
  p.shape = Shape{n, c, h, 1, w, 1};
  p.strides = {prev.stride(0), prev.stride(1), prev.stride(2), 0, prev.stride(3), 0};
  Tensor u = split(up);
  be.add(split(level), p, u);
}

}  // namespace

Expected<SegHead> SegHead::load(const WeightView& head, Backend& backend, Precision precision,
                                int64_t grid, int64_t queries, int64_t max_prompt, int64_t heads) {
  SegHead m;
  SegHeadConfig& c = m.cfg_;
  const TensorInfo* inst = head.info("instance_seg_head.weight");
  if (!inst || inst->shape.size() != 4)
    return not_found(head.full_name("instance_seg_head.weight") + ": missing or not 4-d");
  c.d_model = inst->shape[1];
  c.heads = heads;
  c.grid = grid;
  c.queries = queries;
  c.max_prompt = max_prompt;
  if (heads < 1 || c.d_model % heads != 0 || c.d_model % c.groups != 0 || grid < 1 || queries < 1 ||
      max_prompt < 1)
    return invalid_input("SAM3 mask head: width " + std::to_string(c.d_model) + ", " +
                         std::to_string(heads) + " heads, grid " + std::to_string(grid) +
                         ", queries " + std::to_string(queries) + " do not fit");
  // INT8: the prompt cross-attention's linears W8A8; the pixel decoder's
  // convolutions and the mask embedding MLP stay bf16.
  if (precision != Precision::F32 && precision != Precision::BF16 && precision != Precision::INT8)
    return invalid_input(std::string("SAM3 mask head: precision ") + precision_name(precision) +
                         " is not supported (F32, BF16 or INT8)");
  m.backend_ = &backend;
  m.precision_ = precision;
  m.act_ = precision == Precision::F32 ? DType::F32 : DType::BF16;
  FLICK_TRY(m.load_weights(head));
  m.channels_last_ = m.conv_[0]->prefers_channels_last() && m.conv_[1]->prefers_channels_last();
  m.plan();
  return m;
}

Status SegHead::load_weights(const WeightView& head) {
  const SegHeadConfig& c = cfg_;
  const int64_t d = c.d_model;
  auto param = [&](const std::string& name, Shape shape) -> Expected<Tensor> {
    FLICK_ASSIGN_OR_RETURN(Tensor t, head.get(name, kFloat, shape));
    if (t.dtype == act_) return t;
    OwnedTensor& o = owned_.emplace_back(act_, t.shape);
    convert(t.dtype, t.data, act_, o.t.data, t.numel());
    return o.t;
  };
  const Precision dense = precision_ == Precision::INT8 ? Precision::BF16 : precision_;
  auto pack = [&](const Tensor& w, const Tensor& b) {
    return backend_->pack_linear({w, Tensor{}, b, precision_});
  };
  auto conv = [&](const std::string& p, int64_t k) -> Expected<std::unique_ptr<PackedConv>> {
    FLICK_ASSIGN_OR_RETURN(Tensor w, head.get(p + ".weight", kFloat, {d, d, k, k}));
    FLICK_ASSIGN_OR_RETURN(Tensor b, head.get(p + ".bias", kFloat, {d}));
    ConvDesc desc;
    desc.w = w;
    desc.bias = b;
    desc.padding = {k / 2, k / 2, 0};
    desc.precision = dense;
    return backend_->pack_conv(desc);
  };

  FLICK_ASSIGN_OR_RETURN(ln_w_, param("cross_attn_norm.weight", {d}));
  FLICK_ASSIGN_OR_RETURN(ln_b_, param("cross_attn_norm.bias", {d}));
  FLICK_ASSIGN_OR_RETURN(Tensor w,
                         head.get("cross_attend_prompt.in_proj_weight", kFloat, {3 * d, d}));
  FLICK_ASSIGN_OR_RETURN(Tensor b, head.get("cross_attend_prompt.in_proj_bias", kFloat, {3 * d}));
  ca_q_ = pack(w.slice(0, 0, d), b.slice(0, 0, d));
  ca_kv_ = pack(w.slice(0, d, 2 * d), b.slice(0, d, 2 * d));
  FLICK_ASSIGN_OR_RETURN(Tensor ow,
                         head.get("cross_attend_prompt.out_proj.weight", kFloat, {d, d}));
  FLICK_ASSIGN_OR_RETURN(Tensor ob, head.get("cross_attend_prompt.out_proj.bias", kFloat, {d}));
  ca_out_ = pack(ow, ob);
  for (int i = 0; i < 2; ++i) {
    const std::string n = std::to_string(i);
    FLICK_ASSIGN_OR_RETURN(conv_[static_cast<size_t>(i)],
                           conv("pixel_decoder.conv_layers." + n, 3));
    FLICK_ASSIGN_OR_RETURN(gn_w_[static_cast<size_t>(i)],
                           param("pixel_decoder.norms." + n + ".weight", {d}));
    FLICK_ASSIGN_OR_RETURN(gn_b_[static_cast<size_t>(i)],
                           param("pixel_decoder.norms." + n + ".bias", {d}));
  }
  // Built, never run: the third pixel-decoder stage (scalp=1 leaves two finer
  // levels) and the semantic head (its output is unused by the image path).
  for (const char* n : {"pixel_decoder.conv_layers.2.weight", "pixel_decoder.conv_layers.2.bias",
                        "pixel_decoder.norms.2.weight", "pixel_decoder.norms.2.bias",
                        "semantic_seg_head.weight", "semantic_seg_head.bias"})
    head.mark_used(n);
  // The instance head (1x1 conv W_i, b_i) is folded into the mask-embed
  // MLP's last layer (W_2, b_2), exactly in real arithmetic:
  //   masks = emb . (W_i x + b_i) with emb = W_2 a + b_2
  //         = (W_i^T W_2 a + W_i^T b_2) . x + (W_2^T b_i) . a + b_2 . b_i,
  // so the [Q, d] x [d, 16T] product reads the pixel decoder's output
  // directly: no d x d convolution over the 16T = 82944 mask pixels (10.9
  // GFLOP at 1008^2, plus two layout passes of 85 MB each). The folded
  // weights are summed in double and rounded once. F32 only: in BF16 the
  // folded embeddings, rounded to bf16, moved the mask logits further from
  // the fp32 reference (1008^2 golden, mean error 1.0e-2 -> 1.3e-2 of the
  // largest logit, INT8 max 5.0e-2 -> 5.4e-2), so there the head runs as
  // the reference does.
  FLICK_ASSIGN_OR_RETURN(Tensor iw, head.get("instance_seg_head.weight", kFloat, {d, d, 1, 1}));
  FLICK_ASSIGN_OR_RETURN(Tensor ib, head.get("instance_seg_head.bias", kFloat, {d}));
  Tensor lw[3], lb[3];
  for (int i = 0; i < 3; ++i) {
    const std::string p = "mask_predictor.mask_embed.layers." + std::to_string(i);
    FLICK_ASSIGN_OR_RETURN(lw[i], head.get(p + ".weight", kFloat, {d, d}));
    FLICK_ASSIGN_OR_RETURN(lb[i], head.get(p + ".bias", kFloat, {d}));
  }
  const bool fold = precision_ == Precision::F32;
  for (int i = 0; i < (fold ? 2 : 3); ++i)
    mask_embed_.push_back(backend_->pack_linear({lw[i], Tensor{}, lb[i], dense}));
  if (!fold) {
    ConvDesc desc;
    desc.w = iw;
    desc.bias = ib;
    desc.precision = dense;
    instance_ = backend_->pack_conv(desc);
    return ok_status();
  }
  auto at = [](const Tensor& t, int64_t i, int64_t j) {
    return static_cast<double>(load_as_f32(t.dtype, t.data, i * t.stride(0) + j * t.stride(1)));
  };
  std::vector<float> fw(static_cast<size_t>(d * d)), fb(static_cast<size_t>(d)),
      sw(static_cast<size_t>(d));
  double sb = 0;
  for (int64_t o = 0; o < d; ++o) sb += at(lb[2], o, 0) * at(ib, o, 0);
  for (int64_t i = 0; i < d; ++i) {
    double bias = 0, s = 0;
    for (int64_t o = 0; o < d; ++o) {
      bias += at(iw, o, i) * at(lb[2], o, 0);
      s += at(lw[2], o, i) * at(ib, o, 0);  // (W_2^T b_i)[i]
    }
    fb[static_cast<size_t>(i)] = static_cast<float>(bias);
    sw[static_cast<size_t>(i)] = static_cast<float>(s);
    for (int64_t k = 0; k < d; ++k) {
      double acc = 0;
      for (int64_t o = 0; o < d; ++o) acc += at(iw, o, i) * at(lw[2], o, k);
      fw[static_cast<size_t>(i * d + k)] = static_cast<float>(acc);
    }
  }
  auto owned = [&](const std::vector<float>& v, Shape shape) {
    OwnedTensor& o = owned_.emplace_back(DType::F32, shape);
    std::copy(v.begin(), v.end(), o.t.ptr<float>());
    return o.t;
  };
  const Tensor fold_w = owned(fw, {d, d}), fold_b = owned(fb, {d});
  mask_embed_.push_back(backend_->pack_linear({fold_w, Tensor{}, fold_b, dense}));
  const Tensor bias_w = owned(sw, {1, d}), bias_b = owned({static_cast<float>(sb)}, {1});
  mask_bias_ = backend_->pack_linear({bias_w, Tensor{}, bias_b, dense});
  return ok_status();
}

void SegHead::plan() {
  const SegHeadConfig& c = cfg_;
  const int64_t d = c.d_model, g = c.grid, t = g * g, p = c.max_prompt, q = c.queries;
  mem_ = arena_.request("seg.mem", act_, {t, d});
  h_ = arena_.request("seg.h", act_, {t, d});
  q_ = arena_.request("seg.q", act_, {t, d});
  kv_ = arena_.request("seg.prompt_kv", act_, {p, 2 * d});
  attn_ = arena_.request("seg.attn", act_, {t, d});
  o_ = arena_.request("seg.o", act_, {t, d});
  prompt_ = arena_.request("seg.prompt", act_, {p, d});
  valid_ = arena_.request("seg.prompt_valid", DType::U8, {1, p});
  // The pixel decoder's maps, in the layout its convolutions prefer
  // (channels_last(): [1, n, n, d] buffers, else [1, d, n, n]; see map()).
  auto map_shape = [&](int64_t n) {
    return channels_last_ ? Shape{1, n, n, d} : Shape{1, d, n, n};
  };
  if (!channels_last_) img_ = arena_.request("seg.image", act_, map_shape(g));
  up1_ = arena_.request("seg.up1", act_, map_shape(2 * g));
  p1_ = arena_.request("seg.p1", act_, map_shape(2 * g));
  up0_ = arena_.request("seg.up0", act_, map_shape(4 * g));
  p0_ = arena_.request("seg.p0", act_, map_shape(4 * g));
  // The rows of a query subset, F32 whatever hs_last's float type: the copy
  // is exact, and the mask-embed MLP rounds its input as it would hs_last's.
  hs_ = arena_.request("seg.hs_rows", DType::F32, {q, d});
  qa_ = arena_.request("seg.mask_embed_a", act_, {q, d});
  qb_ = arena_.request("seg.mask_embed_b", act_, {q, d});
  emb_ = arena_.request("seg.mask_embed", act_, {q, d});
  if (instance_) {
    inst_ = arena_.request("seg.instance", act_, map_shape(4 * g));
  } else {
    mask_bias_out_ = arena_.request("seg.mask_bias", act_, {q, 1});
  }
  masks_ = arena_.request("seg.masks", act_, {1, q, 4 * g, 4 * g});
  arena_.finalize();
}

Tensor SegHead::map(Arena::BufferId id) {
  Tensor t = arena_.get(id);
  return channels_last_ ? t.permute({0, 3, 1, 2}) : t;
}

Tensor SegHead::columns(Arena::BufferId id) {
  const int64_t d = cfg_.d_model, pixels = 16 * cfg_.grid * cfg_.grid;
  Tensor t = arena_.get(id);
  return channels_last_ ? t.reshape({1, pixels, d}).permute({0, 2, 1}) : t.reshape({1, d, pixels});
}

Expected<Tensor> SegHead::forward(const Tensor& level0, const Tensor& level1, const Tensor& memory,
                                  const Tensor& prompt, const Tensor& prompt_valid,
                                  const Tensor& hs_last) {
  std::vector<int64_t> all(static_cast<size_t>(cfg_.queries));
  std::iota(all.begin(), all.end(), int64_t{0});
  return forward(level0, level1, memory, prompt, prompt_valid, hs_last, all);
}

Expected<Tensor> SegHead::forward(const Tensor& level0, const Tensor& level1, const Tensor& memory,
                                  const Tensor& prompt, const Tensor& prompt_valid,
                                  const Tensor& hs_last, std::span<const int64_t> queries) {
  const SegHeadConfig& c = cfg_;
  const int64_t d = c.d_model, g = c.grid, t = g * g, nq = c.queries;
  auto is_float = [](const Tensor& x) { return x.dtype == DType::F32 || x.dtype == DType::BF16; };
  if (level0.shape != Shape{1, d, 4 * g, 4 * g} || level1.shape != Shape{1, d, 2 * g, 2 * g} ||
      memory.shape != Shape{1, t, d} || hs_last.shape != Shape{nq, d} || !is_float(level0) ||
      !is_float(level1) || !is_float(memory) || !is_float(hs_last))
    return invalid_input(
        "SAM3 mask head: expected levels [1, d, 4g, 4g] / [1, d, 2g, 2g], memory [1, " +
        std::to_string(t) + ", " + std::to_string(d) + "], hs [" + std::to_string(nq) + ", " +
        std::to_string(d) + "]; got " + level0.str() + ", " + level1.str() + ", " + memory.str() +
        ", " + hs_last.str());
  const int64_t np = prompt.ndim() == 2 ? prompt.dim(0) : 0;
  if (prompt.ndim() != 2 || prompt.dim(1) != d || np < 1 || np > c.max_prompt ||
      !is_float(prompt) || prompt_valid.dtype != DType::U8 || prompt_valid.shape != Shape{np})
    return invalid_input("SAM3 mask head: expected a prompt [P <= " + std::to_string(c.max_prompt) +
                         ", " + std::to_string(d) + "] and U8 validity [P], got " + prompt.str() +
                         " and " + prompt_valid.str());
  const int64_t n = static_cast<int64_t>(queries.size());
  bool in_range = n >= 1 && n <= nq, identity = n == nq;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t q = queries[static_cast<size_t>(i)];
    in_range = in_range && q >= 0 && q < nq;
    identity = identity && q == i;
  }
  if (!in_range)
    return invalid_input("SAM3 mask head: " + std::to_string(n) +
                         " queries asked for; expected 1 to " + std::to_string(nq) +
                         " indices below " + std::to_string(nq));
  if (identity) return run(level0, level1, memory, prompt, prompt_valid, hs_last);
  Tensor rows = arena_.get(hs_).slice(0, 0, n);  // [n, d]
  for (int64_t i = 0; i < n; ++i) {
    Tensor row = rows.slice(0, i, 1);
    backend_->copy(hs_last.slice(0, queries[static_cast<size_t>(i)], 1), row);
  }
  return run(level0, level1, memory, prompt, prompt_valid, rows);
}

Tensor SegHead::run(const Tensor& level0, const Tensor& level1, const Tensor& memory,
                    const Tensor& prompt, const Tensor& prompt_valid, const Tensor& hs) {
  const SegHeadConfig& c = cfg_;
  const int64_t d = c.d_model, g = c.grid, t = g * g, nh = c.heads, hd = d / nh, n = hs.dim(0);
  const int64_t np = prompt.dim(0);
  Backend& be = *backend_;

  // ---- prompt-conditioned memory: mem + CA(LN mem, prompt) ----
  Tensor mem = arena_.get(mem_), h = arena_.get(h_), q = arena_.get(q_), attn = arena_.get(attn_),
         o = arena_.get(o_);
  be.copy(memory.reshape({t, d}), mem);
  Tensor pr = arena_.get(prompt_).slice(0, 0, np);
  be.copy(prompt, pr);
  Tensor valid = arena_.get(valid_).slice(1, 0, np);
  be.copy(prompt_valid.reshape({1, np}), valid);
  Tensor kv = arena_.get(kv_).slice(0, 0, np);
  be.layer_norm(mem, ln_w_, ln_b_, c.eps, h);
  be.linear(h, *ca_q_, q, Activation::None);
  be.linear(pr, *ca_kv_, kv, Activation::None);
  const Tensor kv5 = kv.reshape({1, np, 2, nh, hd});
  AttentionParams params;
  params.key_padding = valid;
  Tensor attn4 = attn.reshape({1, t, nh, hd});
  be.attention(q.reshape({1, t, nh, hd}), kv5.select(2, 0), kv5.select(2, 1), attn4, params);
  be.linear(attn, *ca_out_, o, Activation::None);
  be.add(mem, o, mem);

  // ---- pixel decoder: [T, d] is the [1, d, g, g] map channels-last (else
  // transposed into img_); two nearest-up + add stages ----
  const Tensor* levels[2] = {&level1, &level0};
  const Arena::BufferId ups[2] = {up1_, up0_}, outs[2] = {p1_, p0_};
  Tensor prev = mem.reshape({1, g, g, d}).permute({0, 3, 1, 2});
  if (!channels_last_) {
    Tensor img = map(img_);
    be.copy(prev, img);
    prev = img;
  }
  for (int i = 0; i < 2; ++i) {
    Tensor up = map(ups[i]);
    add_upsampled2x(be, *levels[i], prev, up);
    Tensor y = map(outs[i]);
    be.conv(up, *conv_[static_cast<size_t>(i)], y, Activation::None);
    // relu(GroupNorm(8)): the norm writes back into `up` (free again).
    be.group_norm(y, c.groups, gn_w_[static_cast<size_t>(i)], gn_b_[static_cast<size_t>(i)], c.eps,
                  up, Activation::Relu);
    prev = up;
  }

  // ---- per-query masks (F32: the folded instance embedding, load_weights) ----
  Tensor a = arena_.get(qa_).slice(0, 0, n), b = arena_.get(qb_).slice(0, 0, n),
         emb = arena_.get(emb_).slice(0, 0, n);  // [n, d]
  be.linear(hs, *mask_embed_[0], a, Activation::Relu);
  be.linear(a, *mask_embed_[1], b, Activation::Relu);
  be.linear(b, *mask_embed_[2], emb, Activation::None);  // F32: W_i^T (W_2 b + b_2)
  Tensor masks = arena_.get(masks_).slice(1, 0, n);      // [1, n, 4g, 4g]
  Tensor masks3 = masks.reshape({1, n, 16 * t});
  if (instance_) {
    Tensor inst = map(inst_);  // [1, d, 4g, 4g]
    be.conv(prev, *instance_, inst, Activation::None);
    be.matmul(emb.reshape({1, n, d}), columns(inst_), masks3);
  } else {
    Tensor bias = arena_.get(mask_bias_out_).slice(0, 0, n);
    be.linear(b, *mask_bias_, bias, Activation::None);  // [n, 1]: emb . b_i
    be.matmul(emb.reshape({1, n, d}), columns(ups[1]), masks3);
    be.add(masks3, bias.reshape({1, n, 1}), masks3);
  }
  return masks;
}

}  // namespace flick
