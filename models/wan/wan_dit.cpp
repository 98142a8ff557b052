#include "models/wan/wan_dit.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "models/wan/time_embedding.h"
#include "models/wan/unpatchify.h"
#include "models/wan/wan_quant.h"
#include "runtime/dtype.h"
#include "runtime/profile_backend.h"

namespace flick {
namespace {

const DTypeSet kFloat{DType::F32, DType::BF16, DType::F16};

}  // namespace

Expected<WanDitConfig> WanDitConfig::detect(const WeightView& model, int64_t head_dim) {
  WanDitConfig c;
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* pe, model.require("patch_embedding.weight", 5));
  c.dim = pe->shape[0];
  c.in_dim = pe->shape[1];
  if (pe->shape[2] != 1 || pe->shape[3] != wan::kPatchH || pe->shape[4] != wan::kPatchW)
    return invalid_input(model.full_name("patch_embedding.weight") +
                         ": expected a (1, 2, 2) patch [dim, in_dim, 1, 2, 2], file has " +
                         pe->shape_str());
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* te, model.require("time_embedding.0.weight", 2));
  c.freq_dim = te->shape[1];
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* img, model.require("img_emb.proj.1.weight", 2));
  c.clip_dim = img->shape[1];
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* hd, model.require("head.head.weight", 2));
  if (hd->shape[0] % (wan::kPatchH * wan::kPatchW) != 0)
    return invalid_input(model.full_name("head.head.weight") +
                         ": output rows must be out_dim * 4, file has " + hd->shape_str());
  c.out_dim = hd->shape[0] / (wan::kPatchH * wan::kPatchW);
  if (c.out_dim != wan::kLatentChannels || c.in_dim <= c.out_dim)
    return invalid_input(model.full_name("patch_embedding.weight") + ": in_dim " +
                         std::to_string(c.in_dim) + " / out_dim " + std::to_string(c.out_dim) +
                         " do not describe a 16-channel latent model");

  const WeightView blocks = model.sub("blocks");
  const std::vector<std::string> children = blocks.children();
  c.layers = static_cast<int64_t>(children.size());
  if (c.layers < 1)
    return not_found(blocks.prefix() + "*: no transformer blocks in the checkpoint");
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string n = std::to_string(i);
    if (std::find(children.begin(), children.end(), n) == children.end())
      return invalid_input(blocks.full_name(n) + ": missing (blocks must be numbered 0.." +
                           std::to_string(c.layers - 1) + ")");
  }
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* f1, blocks.sub("0").require("ffn.0.weight", 2));
  c.ffn_dim = f1->shape[0];
  // Action modules sit in a prefix of the blocks.
  while (c.action_blocks < c.layers &&
         blocks.sub(std::to_string(c.action_blocks)).has("action_model.proj_keyboard.weight"))
    ++c.action_blocks;

  if (head_dim <= 0 || c.dim % head_dim != 0 || head_dim % 2 != 0)
    return invalid_input(model.full_name("patch_embedding.weight") + ": width " +
                         std::to_string(c.dim) + " is not a multiple of the head size " +
                         std::to_string(head_dim));
  c.head_dim = head_dim;
  c.heads = c.dim / head_dim;
  return c;
}

Expected<WanDit> WanDit::load(const WeightView& model, Backend& backend, Precision precision,
                              const WanDitShape& shape, int64_t head_dim) {
  FLICK_TRY(check_wan_precision(precision, backend, "Wan DiT"));
  if (shape.latent_h <= 0 || shape.latent_w <= 0 || shape.latent_h % 2 != 0 ||
      shape.latent_w % 2 != 0 || shape.frames <= 0 || shape.context_tokens <= 0 ||
      shape.local_attn_frames < shape.frames)
    return invalid_input("Wan DiT: invalid call shape (latent " + std::to_string(shape.latent_h) +
                         "x" + std::to_string(shape.latent_w) + ", " +
                         std::to_string(shape.frames) + " frames, cache " +
                         std::to_string(shape.local_attn_frames) + " frames)");
  WanDit m;
  FLICK_ASSIGN_OR_RETURN(m.cfg_, WanDitConfig::detect(model, head_dim));
  m.shape_ = shape;
  m.backend_ = &backend;
  m.precision_ = precision;
  m.act_ = wan_activation_dtype(precision);
  // INT8 Q.K^T for the self-attention where the backend runs it faster (the
  // cross-attention's 257 keys keep BF16: measured slower in INT8, the
  // quantization of K per call not paid back over so few keys).
  m.int8_attention_ = precision == Precision::INT8 && backend.attention_int8_pays_off();
  m.rope_ = std::make_unique<wan::Rope3d>(static_cast<int>(m.cfg_.head_dim));
  FLICK_TRY(m.load_weights(model));
  m.plan();
  m.reset_caches();
  return m;
}

Status WanDit::load_weights(const WeightView& model) {
  const WanDitConfig& c = cfg_;
  const int64_t d = c.dim;

  // A parameter in the activation dtype (the bf16 module holds bf16 parameters).
  auto param = [&](const WeightView& v, std::string_view name, Shape shape) -> Expected<Tensor> {
    FLICK_ASSIGN_OR_RETURN(Tensor t, v.get(name, kFloat, shape));
    if (t.dtype == act_) return t;
    OwnedTensor& o = owned_.emplace_back(act_, t.shape);
    convert(t.dtype, t.data, act_, o.t.data, t.numel());
    return o.t;
  };
  // Quantized or BF16 by the table of wan_quant.h.
  auto linear = [&](const WeightView& v, std::string_view layer, int64_t n,
                    int64_t k) -> Expected<std::unique_ptr<PackedLinear>> {
    return load_wan_linear(v, layer, Shape{n, k}, /*bias=*/true, precision_, *backend_);
  };

  // Conv3d(in_dim, dim, k = s = (1, 2, 2)) as a linear over patches
  // flattened (c, ky, kx), the conv weight's own layout.
  FLICK_ASSIGN_OR_RETURN(patch_embed_,
                         load_wan_linear(model, "patch_embedding", Shape{d, c.in_dim, 1, 2, 2},
                                         /*bias=*/true, precision_, *backend_));
  FLICK_ASSIGN_OR_RETURN(time_1_, linear(model, "time_embedding.0", d, c.freq_dim));
  FLICK_ASSIGN_OR_RETURN(time_2_, linear(model, "time_embedding.2", d, d));
  FLICK_ASSIGN_OR_RETURN(time_proj_, linear(model, "time_projection.1", 6 * d, d));
  FLICK_ASSIGN_OR_RETURN(img_ln0_w_, param(model, "img_emb.proj.0.weight", {c.clip_dim}));
  FLICK_ASSIGN_OR_RETURN(img_ln0_b_, param(model, "img_emb.proj.0.bias", {c.clip_dim}));
  FLICK_ASSIGN_OR_RETURN(img_1_, linear(model, "img_emb.proj.1", c.clip_dim, c.clip_dim));
  FLICK_ASSIGN_OR_RETURN(img_2_, linear(model, "img_emb.proj.3", d, c.clip_dim));
  FLICK_ASSIGN_OR_RETURN(img_ln4_w_, param(model, "img_emb.proj.4.weight", {d}));
  FLICK_ASSIGN_OR_RETURN(img_ln4_b_, param(model, "img_emb.proj.4.bias", {d}));
  FLICK_ASSIGN_OR_RETURN(Tensor hm, param(model, "head.modulation", {1, 2, d}));
  head_modulation_ = hm.reshape({2, d});
  FLICK_ASSIGN_OR_RETURN(head_, linear(model, "head.head", c.out_dim * 4, d));

  const WeightView all = model.sub("blocks");
  for (int64_t i = 0; i < c.layers; ++i) {
    const WeightView v = all.sub(std::to_string(i));
    Block& b = blocks_.emplace_back();
    FLICK_ASSIGN_OR_RETURN(Tensor mod, param(v, "modulation", {1, 6, d}));
    b.modulation = mod.reshape({6, d});
    static constexpr std::string_view kQkv[] = {"self_attn.q", "self_attn.k", "self_attn.v"};
    FLICK_ASSIGN_OR_RETURN(
        b.sa_qkv, load_wan_linears_fused(v, kQkv, d, d, /*bias=*/true, precision_, *backend_));
    FLICK_ASSIGN_OR_RETURN(b.sa_o, linear(v, "self_attn.o", d, d));
    FLICK_ASSIGN_OR_RETURN(b.sa_norm_q, param(v, "self_attn.norm_q.weight", {d}));
    FLICK_ASSIGN_OR_RETURN(b.sa_norm_k, param(v, "self_attn.norm_k.weight", {d}));
    FLICK_ASSIGN_OR_RETURN(b.norm3_w, param(v, "norm3.weight", {d}));
    FLICK_ASSIGN_OR_RETURN(b.norm3_b, param(v, "norm3.bias", {d}));
    FLICK_ASSIGN_OR_RETURN(b.ca_q, linear(v, "cross_attn.q", d, d));
    FLICK_ASSIGN_OR_RETURN(b.ca_k, linear(v, "cross_attn.k", d, d));
    FLICK_ASSIGN_OR_RETURN(b.ca_v, linear(v, "cross_attn.v", d, d));
    FLICK_ASSIGN_OR_RETURN(b.ca_o, linear(v, "cross_attn.o", d, d));
    FLICK_ASSIGN_OR_RETURN(b.ca_norm_q, param(v, "cross_attn.norm_q.weight", {d}));
    FLICK_ASSIGN_OR_RETURN(b.ca_norm_k, param(v, "cross_attn.norm_k.weight", {d}));
    FLICK_ASSIGN_OR_RETURN(b.ffn1, linear(v, "ffn.0", c.ffn_dim, d));
    FLICK_ASSIGN_OR_RETURN(b.ffn2, linear(v, "ffn.2", d, c.ffn_dim));
    const int64_t cache = shape_.local_attn_frames * shape_.frame_tokens();
    b.k_cache = OwnedTensor(act_, {cache, d});
    b.v_cache = OwnedTensor(act_, {cache, d});
    b.ca_kc = OwnedTensor(act_, {shape_.context_tokens, d});
    b.ca_vc = OwnedTensor(act_, {shape_.context_tokens, d});
    model.release_pages();  // this block is packed (views stay valid)
  }
  return ok_status();
}

void WanDit::plan() {
  const WanDitConfig& c = cfg_;
  const WanDitShape& s = shape_;
  const int64_t n = s.tokens(), d = c.dim, f = s.frames;
  in_ = arena_.request("dit.in", act_, {1, c.in_dim, f, s.latent_h, s.latent_w});
  patches_ = arena_.request("dit.patches", act_, {n, c.in_dim * 4});
  x_ = arena_.request("dit.x", act_, {n, d});
  sin_ = arena_.request("dit.sinusoid", act_, {f, c.freq_dim});
  e_ = arena_.request("dit.e", act_, {f, d});
  e_act_ = arena_.request("dit.e_act", act_, {f, d});
  e0_ = arena_.request("dit.e0", act_, {f, 6 * d});
  mod_ = arena_.request("dit.mod", act_, {f, 6, d});
  hm_ = arena_.request("dit.head_mod", act_, {f, 2, d});
  ctx_in_ = arena_.request("dit.ctx_in", act_, {s.context_tokens, c.clip_dim});
  ctx_h_ = arena_.request("dit.ctx_h", act_, {s.context_tokens, c.clip_dim});
  ctx_ = arena_.request("dit.ctx", act_, {s.context_tokens, d});
  h_ = arena_.request("dit.h", act_, {n, d});
  tmp_ = arena_.request("dit.tmp", act_, {f, 1, d});
  qkv_ = arena_.request("dit.qkv", act_, {n, 3 * d});
  q_ = arena_.request("dit.q", act_, {n, d});
  k_ = arena_.request("dit.k", act_, {n, d});
  attn_ = arena_.request("dit.attn", act_, {n, d});
  o_ = arena_.request("dit.o", act_, {n, d});
  ffn_ = arena_.request("dit.ffn", act_, {n, c.ffn_dim});
  cq_ = arena_.request("dit.ctx_q", act_, {n, d});
  ck_ = arena_.request("dit.ctx_k", act_, {s.context_tokens, d});
  head_out_ = arena_.request("dit.head_out", act_, {n, c.out_dim * 4});
  flow_ = arena_.request("dit.flow", act_, {1, c.out_dim, f, s.latent_h, s.latent_w});
  arena_.finalize();
}

void WanDit::reset_caches() {
  const int64_t cache = shape_.local_attn_frames * shape_.frame_tokens();
  for (Block& b : blocks_) b.ring = wan::KvRing(cache);
}

void WanDit::rms_norm_weighted(const Tensor& x, const Tensor& w, Tensor& y) {
  backend_->rms_norm(x, Tensor{}, cfg_.eps, y);
  backend_->mul(y, w, y);
}

void WanDit::modulated_norm(const Tensor& x, const Tensor& shift, const Tensor& scale, Tensor& y) {
  backend_->layer_norm(x, Tensor{}, Tensor{}, cfg_.eps, y);
  modulate(y, shift, scale);
}

void WanDit::modulate(Tensor& y, const Tensor& shift, const Tensor& scale) {
  Backend& be = *backend_;
  const int64_t f = shape_.frames, ft = shape_.frame_tokens(), d = cfg_.dim;
  // The reference evaluates 1 + scale, the product and the sum as separate
  // bf16 ops, each rounded (the backend's fused modulate rounds once).
  Tensor one_plus = arena_.get(tmp_);  // [F, 1, dim]
  be.affine(scale, 1.f, 1.f, one_plus);
  Tensor y3 = y.reshape({f, ft, d});
  if (act_ == DType::BF16) {  // the mul and add below in one pass, each rounded
    be.mul_add_stepwise(shift, y3, one_plus, y3);
    return;
  }
  be.mul(y3, one_plus, y3);
  be.add(y3, shift, y3);
}

void WanDit::apply_rope(Tensor& x, int64_t start_frame) {
  const int64_t h = shape_.latent_h / 2, w = shape_.latent_w / 2;
  if (act_ == DType::BF16) {
    // The exact path: f64 product, one bf16 rounding.
    Tensor x3 = x.reshape({shape_.tokens(), cfg_.heads, cfg_.head_dim});
    rope_->apply(*backend_, x3, shape_.frames, h, w, start_frame, x3);
    return;
  }
  // fp32: the f64 table rounded to fp32, product in fp32 (the reference's
  // complex128 product rounded to fp32 differs by an fp32 ulp at most).
  std::vector<float> cos, sin;
  rope_->token_tables_f32(shape_.frames, h, w, start_frame, cos, sin);
  const int64_t n = shape_.tokens(), half = cfg_.head_dim / 2;
  const Tensor ct = Tensor::view(cos.data(), DType::F32, Shape{n, half});
  const Tensor st = Tensor::view(sin.data(), DType::F32, Shape{n, half});
  Tensor x4 = x.reshape({1, n, cfg_.heads, cfg_.head_dim});
  backend_->rope(x4, ct, st, x4);
}

Status WanDit::set_context(const Tensor& visual_context, const Tap& tap) {
  const WanDitConfig& c = cfg_;
  const int64_t tc = shape_.context_tokens;
  if (visual_context.ndim() != 3 || visual_context.dim(0) != 1 || visual_context.dim(1) != tc ||
      visual_context.dim(2) != c.clip_dim ||
      (visual_context.dtype != DType::F32 && visual_context.dtype != DType::BF16))
    return invalid_input("Wan DiT: expected an F32 or BF16 visual context [1, " +
                         std::to_string(tc) + ", " + std::to_string(c.clip_dim) + "], got " +
                         visual_context.str());
  Backend& be = *backend_;
  Tensor in = arena_.get(ctx_in_), h = arena_.get(ctx_h_), ctx = arena_.get(ctx_);
  be.copy(visual_context.reshape({tc, c.clip_dim}), in);
  // MLPProj: LN -> Lin -> GELU(erf) -> Lin -> LN.
  be.layer_norm(in, img_ln0_w_, img_ln0_b_, c.img_eps, in);
  if (act_ == DType::BF16) {
    be.linear(in, *img_1_, h, Activation::None);
    be.gelu(h, h, /*tanh_approx=*/false);
  } else {
    be.linear(in, *img_1_, h, Activation::GeluErf);
  }
  be.linear(h, *img_2_, ctx, Activation::None);
  be.layer_norm(ctx, img_ln4_w_, img_ln4_b_, c.img_eps, ctx);
  if (tap) tap("context", ctx.reshape({1, tc, c.dim}));

  // Cross-attention K/V of every block (the reference's crossattn cache).
  Tensor kraw = arena_.get(ck_);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    Block& b = blocks_[i];
    be.linear(ctx, *b.ca_k, kraw, Activation::None);
    rms_norm_weighted(kraw, b.ca_norm_k, b.ca_kc.t);
    be.linear(ctx, *b.ca_v, b.ca_vc.t, Activation::None);
    if (tap) {
      const std::string p = "blk" + std::to_string(i) + ".";
      tap(p + "ca_k", b.ca_kc.t.reshape({1, tc, c.dim}));
      tap(p + "ca_v", b.ca_vc.t.reshape({1, tc, c.dim}));
    }
  }
  return ok_status();
}

Status WanDit::embed(const Tensor& noisy, const Tensor& cond, const Tensor& t, const Tap& tap) {
  const WanDitConfig& c = cfg_;
  const WanDitShape& s = shape_;
  const int64_t f = s.frames, d = c.dim, gh = s.latent_h / 2, gw = s.latent_w / 2;
  const Shape want_noisy{1, c.out_dim, f, s.latent_h, s.latent_w};
  const Shape want_cond{1, c.in_dim - c.out_dim, f, s.latent_h, s.latent_w};
  auto is_float = [](const Tensor& x) { return x.dtype == DType::F32 || x.dtype == DType::BF16; };
  if (noisy.shape != want_noisy || !is_float(noisy))
    return invalid_input("Wan DiT: expected noisy latents " + want_noisy.str() + ", got " +
                         noisy.str());
  if (cond.shape != want_cond || !is_float(cond))
    return invalid_input("Wan DiT: expected conditioning " + want_cond.str() + ", got " +
                         cond.str());
  if (t.shape != Shape{f} || t.dtype != DType::F32)
    return invalid_input("Wan DiT: expected F32 timesteps [" + std::to_string(f) + "], got " +
                         t.str());
  Backend& be = *backend_;
  auto emit = [&](std::string_view name, const Tensor& v) {
    if (tap) tap(name, v);
  };

  // ---- patch embedding: cat(noisy, cond) -> patches (f, i, j | c, ky, kx) -> linear ----
  Tensor in = arena_.get(in_);
  const Tensor parts[2] = {noisy, cond};
  be.concat(parts, 1, in);
  const Tensor grid = in.reshape({c.in_dim, f, gh, 2, gw, 2}).permute({1, 2, 4, 0, 3, 5});
  Tensor patches6 = arena_.get(patches_).reshape({f, gh, gw, c.in_dim, 2, 2});
  be.copy(grid, patches6);
  Tensor x = arena_.get(x_);
  be.linear(arena_.get(patches_), *patch_embed_, x, Activation::None);
  emit("patch_embed", x.reshape({1, s.tokens(), d}));

  // ---- time embedding: sinusoid in f64, cast to the activation dtype ----
  Tensor sin = arena_.get(sin_);
  {
    const std::span<const float> times(t.ptr<float>(), static_cast<size_t>(f));
    if (act_ == DType::BF16) {
      wan::time_sinusoid_bf16(times, static_cast<int>(c.freq_dim),
                              {static_cast<uint16_t*>(sin.data), static_cast<size_t>(sin.numel())});
    } else {
      std::vector<double> row(static_cast<size_t>(c.freq_dim));
      for (int64_t i = 0; i < f; ++i) {
        wan::time_sinusoid_f64(times[static_cast<size_t>(i)], static_cast<int>(c.freq_dim), row);
        for (int64_t j = 0; j < c.freq_dim; ++j)
          sin.ptr<float>()[i * c.freq_dim + j] = static_cast<float>(row[static_cast<size_t>(j)]);
      }
    }
  }
  emit("sinusoid", sin);
  Tensor e = arena_.get(e_), e_act = arena_.get(e_act_), e0 = arena_.get(e0_);
  if (act_ == DType::BF16) {  // the bf16 module rounds the linear output before SiLU
    be.linear(sin, *time_1_, e_act, Activation::None);
    be.silu(e_act, e_act);
  } else {
    be.linear(sin, *time_1_, e_act, Activation::Silu);
  }
  be.linear(e_act, *time_2_, e, Activation::None);
  emit("time_e", e);
  be.silu(e, e_act);
  be.linear(e_act, *time_proj_, e0, Activation::None);
  emit("time_e0", e0);

  // Per-frame modulation of every block is modulation + e0, computed per
  // block; the head's is head.modulation + e.
  Tensor hm = arena_.get(hm_);  // [F, 2, dim]
  be.add(e.reshape({f, 1, d}), head_modulation_, hm);
  return ok_status();
}

void WanDit::block(int64_t i, int64_t start_frame, const Tap& tap) {
  FLICK_CHECK(i >= cfg_.action_blocks && i < cfg_.layers,
              "Wan DiT: block " + std::to_string(i) +
                  " has an action module: run attention(), the module, feed_forward()");
  attention(i, start_frame, tap);
  feed_forward(i, tap);
}

Tensor WanDit::modulation(int64_t i) {
  const int64_t f = shape_.frames, d = cfg_.dim;
  Tensor mod = arena_.get(mod_);  // [F, 6, dim]
  backend_->add(arena_.get(e0_).reshape({f, 6, d}), blocks_[static_cast<size_t>(i)].modulation,
                mod);
  return mod;
}

void WanDit::gated_residual(const Tensor& y, const Tensor& gate) {
  const int64_t f = shape_.frames, ft = shape_.frame_tokens(), d = cfg_.dim;
  Tensor x3 = arena_.get(x_).reshape({f, ft, d});
  Tensor y3 = y.reshape({f, ft, d});
  if (act_ == DType::BF16) {  // the mul and add below in one pass, each rounded
    backend_->mul_add_stepwise(x3, y3, gate, x3);
    return;
  }
  backend_->mul(y3, gate, y3);  // rounds, then the sum rounds
  backend_->add(x3, y3, x3);
}

void WanDit::attention(int64_t i, int64_t start_frame, const Tap& tap) {
  FLICK_CHECK(i >= 0 && i < cfg_.layers, "Wan DiT: no block " + std::to_string(i));
  const WanDitConfig& c = cfg_;
  const WanDitShape& s = shape_;
  const int64_t n = s.tokens(), d = c.dim, f = s.frames, ft = s.frame_tokens();
  Backend& be = *backend_;
  Block& b = blocks_[static_cast<size_t>(i)];
  const std::string p = "blk" + std::to_string(i) + ".";
  auto emit = [&](std::string_view name, const Tensor& v) {
    if (tap) tap(p + std::string(name), v);
  };
  auto emit3 = [&](std::string_view name, const Tensor& v) {  // [n, dim] as [1, n, dim]
    if (tap) tap(p + std::string(name), v.reshape({1, n, v.dim(-1)}));
  };

  // m = modulation + e0: [F, 6, dim], m_k = [F, 1, dim] broadcast over a frame.
  const Tensor mod = modulation(i);
  auto m = [&](int k) { return mod.slice(1, k, 1); };

  Tensor x = arena_.get(x_), h = arena_.get(h_), q = arena_.get(q_), k = arena_.get(k_),
         attn = arena_.get(attn_), o = arena_.get(o_);

  // ---- self attention ----
  modulated_norm(x, m(0), m(1), h);
  emit3("sa_in", h);
  Tensor qkv = arena_.get(qkv_);  // [n, 3 * dim]: q | k | v per token
  be.linear(h, *b.sa_qkv, qkv, Activation::None);
  rms_norm_weighted(qkv.slice(1, 0, d), b.sa_norm_q, q);
  rms_norm_weighted(qkv.slice(1, d, d), b.sa_norm_k, k);
  const Tensor v = qkv.slice(1, 2 * d, d);  // [n, dim], row stride 3 * dim
  emit3("sa_q", q);
  emit3("sa_k", k);
  if (tap) tap(p + "sa_v", qkv.reshape({1, n, 3, d}).select(2, 2));
  apply_rope(q, start_frame);
  apply_rope(k, start_frame);
  const Shape heads4{1, n, c.heads, c.head_dim};
  emit("sa_q_rope", q.reshape(heads4));
  emit("sa_k_rope", k.reshape(heads4));

  const wan::KvRingStep step = b.ring.advance((start_frame + f) * ft, n);
  const size_t row_bytes = static_cast<size_t>(d) * dtype_size(act_);
  if (step.rolled > 0) {  // left shift, overlapping
    const ProfileScope scope(be, "wan.kv_roll");
    for (Tensor* cache : {&b.k_cache.t, &b.v_cache.t}) {
      auto* base = static_cast<char*>(cache->data);
      std::memmove(base, base + step.evicted * row_bytes,
                   static_cast<size_t>(step.rolled) * row_bytes);
    }
  }
  Tensor kw = b.k_cache.t.slice(0, step.write_begin, n),
         vw = b.v_cache.t.slice(0, step.write_begin, n);
  be.copy(k, kw);
  be.copy(v, vw);
  const int64_t win = step.attend_end - step.attend_begin;
  const Tensor kwin =
      b.k_cache.t.slice(0, step.attend_begin, win).reshape({1, win, c.heads, c.head_dim});
  const Tensor vwin =
      b.v_cache.t.slice(0, step.attend_begin, win).reshape({1, win, c.heads, c.head_dim});
  emit("sa_kwin", kwin);
  emit("sa_vwin", vwin);
  Tensor attn4 = attn.reshape(heads4);
  if (int8_attention_)
    be.attention_int8(q.reshape(heads4), kwin, vwin, attn4, AttentionParams{});
  else
    be.attention(q.reshape(heads4), kwin, vwin, attn4, AttentionParams{});
  emit("sa_attn", attn4);
  be.linear(attn, *b.sa_o, o, Activation::None);
  emit3("sa_out", o);
  gated_residual(o, m(2));
  emit3("x_after_sa", x);

  // ---- cross attention on the cached context K/V ----
  be.layer_norm(x, b.norm3_w, b.norm3_b, c.eps, h);
  emit3("ca_in", h);
  Tensor cq = arena_.get(cq_);
  be.linear(h, *b.ca_q, cq, Activation::None);
  rms_norm_weighted(cq, b.ca_norm_q, cq);
  emit3("ca_q", cq);
  const int64_t tc = s.context_tokens;
  be.attention(cq.reshape(heads4), b.ca_kc.t.reshape({1, tc, c.heads, c.head_dim}),
               b.ca_vc.t.reshape({1, tc, c.heads, c.head_dim}), attn4, AttentionParams{});
  be.linear(attn, *b.ca_o, o, Activation::None);
  emit3("ca_out", o);
  be.add(x, o, x);
  emit3("x_after_ca", x);
}

void WanDit::feed_forward(int64_t i, const Tap& tap) {
  FLICK_CHECK(i >= 0 && i < cfg_.layers, "Wan DiT: no block " + std::to_string(i));
  const int64_t n = shape_.tokens();
  Backend& be = *backend_;
  Block& b = blocks_[static_cast<size_t>(i)];
  const std::string p = "blk" + std::to_string(i) + ".";
  auto emit3 = [&](std::string_view name, const Tensor& v) {  // [n, dim] as [1, n, dim]
    if (tap) tap(p + std::string(name), v.reshape({1, n, v.dim(-1)}));
  };
  const Tensor mod = modulation(i);
  auto m = [&](int k) { return mod.slice(1, k, 1); };
  Tensor x = arena_.get(x_), h = arena_.get(h_), o = arena_.get(o_);

  // ---- feed-forward ----
  modulated_norm(x, m(3), m(4), h);
  emit3("ffn_in", h);
  Tensor ffn = arena_.get(ffn_);
  // GELU of the bf16-rounded linear output, as the reference computes it.
  be.linear(h, *b.ffn1, ffn, Activation::RoundGeluTanh);
  be.linear(ffn, *b.ffn2, o, Activation::None);
  emit3("ffn_out", o);
  gated_residual(o, m(5));
  emit3("out", x);
}

Tensor WanDit::head(const Tap& tap) {
  const WanDitConfig& c = cfg_;
  const WanDitShape& s = shape_;
  const int64_t n = s.tokens(), f = s.frames, gh = s.latent_h / 2, gw = s.latent_w / 2;
  Tensor hm = arena_.get(hm_);  // [F, 2, dim]: shift, scale
  Tensor h = arena_.get(h_);
  backend_->layer_norm(arena_.get(x_), Tensor{}, Tensor{}, c.eps, h);
  if (tap) tap("head_norm", h.reshape({1, n, c.dim}));
  modulate(h, hm.slice(1, 0, 1), hm.slice(1, 1, 1));
  Tensor out = arena_.get(head_out_);
  backend_->linear(h, *head_, out, Activation::None);
  if (tap) tap("head_out", out.reshape({1, f, gh * gw, c.out_dim * 4}));
  Tensor flow = arena_.get(flow_);
  wan::unpatchify(*backend_, out, f, gh, gw, flow);
  if (tap) tap("flow", flow);
  return flow;
}

}  // namespace flick
