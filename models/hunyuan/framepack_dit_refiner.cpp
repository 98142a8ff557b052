#include "models/hunyuan/framepack_dit_refiner.h"

#include <string>

namespace flick::hunyuan {

Expected<DitTokenRefiner> DitTokenRefiner::load(const WeightView& v, const FramePackDitConfig& c,
                                                const DitRun& run) {
  DitTokenRefiner m;
  m.cfg_ = c;
  m.run_ = run;
  const int64_t d = c.dim;
  FLICK_ASSIGN_OR_RETURN(m.temb_, DitTimeTextEmbed::load(v.sub("time_text_embed"), d, c.text_dim,
                                                         /*guidance=*/false, run));
  FLICK_ASSIGN_OR_RETURN(m.proj_in_, load_dit_linear(v, "proj_in", d, c.text_dim, run, run.kept()));
  const WeightView blocks = v.sub("token_refiner.refiner_blocks");
  for (int64_t i = 0; i < c.refiner_layers; ++i) {
    const WeightView b = blocks.sub(std::to_string(i));
    Block& k = m.blocks_.emplace_back();
    auto lin = [&](const char* name, int64_t n, int64_t in) {
      return load_dit_linear(b, name, n, in, run, run.kept());
    };
    FLICK_ASSIGN_OR_RETURN(k.norm1_w, load_dit_param(b, "norm1.weight", {d}, run, m.owned_));
    FLICK_ASSIGN_OR_RETURN(k.norm1_b, load_dit_param(b, "norm1.bias", {d}, run, m.owned_));
    FLICK_ASSIGN_OR_RETURN(k.norm2_w, load_dit_param(b, "norm2.weight", {d}, run, m.owned_));
    FLICK_ASSIGN_OR_RETURN(k.norm2_b, load_dit_param(b, "norm2.bias", {d}, run, m.owned_));
    FLICK_ASSIGN_OR_RETURN(k.q, lin("attn.to_q", d, d));
    FLICK_ASSIGN_OR_RETURN(k.k, lin("attn.to_k", d, d));
    FLICK_ASSIGN_OR_RETURN(k.v, lin("attn.to_v", d, d));
    FLICK_ASSIGN_OR_RETURN(k.o, lin("attn.to_out.0", d, d));
    FLICK_ASSIGN_OR_RETURN(k.ff1, lin("ff.net.0.proj", c.refiner_mlp_dim, d));
    FLICK_ASSIGN_OR_RETURN(k.ff2, lin("ff.net.2", d, c.refiner_mlp_dim));
    FLICK_ASSIGN_OR_RETURN(k.gates, lin("norm_out.linear", 2 * d, d));
  }
  return m;
}

void DitTokenRefiner::forward(const Tensor& text, float t, Tensor& out, const DitTap& tap) const {
  Backend& be = *run_.be;
  const FramePackDitConfig& c = cfg_;
  const int64_t n = text.dim(0), d = c.dim;
  const DType act = run_.act();

  // Masked mean over the valid tokens: an fp32 sum / n, then the activation dtype.
  OwnedTensor pooled(act, {1, c.text_dim});
  be.reduce(text, 0, ReduceOp::Mean, pooled.t);
  OwnedTensor temb(act, {1, d}), temb_silu(act, {1, d});
  temb_.forward(t, std::nullopt, pooled.t, temb.t);
  run_.tap(tap, "refiner_temb", temb.t);
  be.silu(temb.t, temb_silu.t);

  Tensor h = out;  // [n, D]
  be.linear(text, *proj_in_, h, Activation::None);
  run_.tap(tap, "refiner_proj_in", h);

  OwnedTensor norm(act, {n, d}), q(act, {n, d}), k(act, {n, d}), v(act, {n, d}), attn(act, {n, d}),
      o(act, {n, d}), ff(act, {n, c.refiner_mlp_dim}), gates(act, {1, 2 * d});
  const Shape heads{1, n, c.heads, c.head_dim};
  for (const Block& b : blocks_) {
    be.linear(temb_silu.t, *b.gates, gates.t, Activation::None);
    const Tensor g_msa = gates.t.slice(1, 0, d), g_mlp = gates.t.slice(1, d, d);
    be.layer_norm(h, b.norm1_w, b.norm1_b, FramePackDitConfig::kEps, norm.t);
    be.linear(norm.t, *b.q, q.t, Activation::None);
    be.linear(norm.t, *b.k, k.t, Activation::None);
    be.linear(norm.t, *b.v, v.t, Activation::None);
    Tensor attn4 = attn.t.reshape(heads);
    be.attention(q.t.reshape(heads), k.t.reshape(heads), v.t.reshape(heads), attn4,
                 AttentionParams{});
    be.linear(attn.t, *b.o, o.t, Activation::None);
    dit_gated_add(run_, h, o.t, g_msa);
    be.layer_norm(h, b.norm2_w, b.norm2_b, FramePackDitConfig::kEps, norm.t);
    dit_linear_act(run_, norm.t, *b.ff1, ff.t, Activation::Silu);
    be.linear(ff.t, *b.ff2, o.t, Activation::None);
    dit_gated_add(run_, h, o.t, g_mlp);
  }
  run_.tap(tap, "refined", h);
}

}  // namespace flick::hunyuan
