#include "models/hunyuan/framepack_dit_double.h"

#include <tuple>

namespace flick::hunyuan {

void dit_apply_rope(const DitRun& run, const FramePackDitConfig& c, Tensor& x, const Tensor& cos,
                    const Tensor& sin) {
  // apply_rotary_emb_transposed (:99-105): x.float() * cos + rotate(x).float()
  // * sin in fp32, cast back once; pairs are interleaved (x[2j], x[2j+1]).
  Tensor x4 = x.reshape({1, x.dim(0), c.heads, c.head_dim});
  run.be->rope(x4, cos, sin, x4);
}

Expected<DitDoubleBlock> DitDoubleBlock::load(const WeightView& v, const FramePackDitConfig& c,
                                              const DitRun& run) {
  DitDoubleBlock m;
  m.cfg_ = c;
  m.run_ = run;
  const int64_t d = c.dim;
  auto lin = [&](const std::string& name, int64_t n, int64_t in) {
    return load_dit_linear(v, name, n, in, run, run.precision);
  };
  // The modulation linears are quantized too (3.4 B of the 12.9 B parameters;
  // framepack_dit_common.h).
  FLICK_ASSIGN_OR_RETURN(m.x_.mod, lin("norm1.linear", 6 * d, d));
  FLICK_ASSIGN_OR_RETURN(m.c_.mod, lin("norm1_context.linear", 6 * d, d));
  FLICK_ASSIGN_OR_RETURN(m.x_.q, lin("attn.to_q", d, d));
  FLICK_ASSIGN_OR_RETURN(m.x_.k, lin("attn.to_k", d, d));
  FLICK_ASSIGN_OR_RETURN(m.x_.v, lin("attn.to_v", d, d));
  FLICK_ASSIGN_OR_RETURN(m.x_.out, lin("attn.to_out.0", d, d));
  FLICK_ASSIGN_OR_RETURN(m.c_.q, lin("attn.add_q_proj", d, d));
  FLICK_ASSIGN_OR_RETURN(m.c_.k, lin("attn.add_k_proj", d, d));
  FLICK_ASSIGN_OR_RETURN(m.c_.v, lin("attn.add_v_proj", d, d));
  FLICK_ASSIGN_OR_RETURN(m.c_.out, lin("attn.to_add_out", d, d));
  const Shape hd{c.head_dim};
  FLICK_ASSIGN_OR_RETURN(m.x_.norm_q, load_dit_param(v, "attn.norm_q.weight", hd, run, m.owned_));
  FLICK_ASSIGN_OR_RETURN(m.x_.norm_k, load_dit_param(v, "attn.norm_k.weight", hd, run, m.owned_));
  FLICK_ASSIGN_OR_RETURN(m.c_.norm_q,
                         load_dit_param(v, "attn.norm_added_q.weight", hd, run, m.owned_));
  FLICK_ASSIGN_OR_RETURN(m.c_.norm_k,
                         load_dit_param(v, "attn.norm_added_k.weight", hd, run, m.owned_));
  FLICK_ASSIGN_OR_RETURN(m.x_.ff1, lin("ff.net.0.proj", c.mlp_dim, d));
  FLICK_ASSIGN_OR_RETURN(m.x_.ff2, lin("ff.net.2", d, c.mlp_dim));
  FLICK_ASSIGN_OR_RETURN(m.c_.ff1, lin("ff_context.net.0.proj", c.mlp_dim, d));
  FLICK_ASSIGN_OR_RETURN(m.c_.ff2, lin("ff_context.net.2", d, c.mlp_dim));
  return m;
}

void DitDoubleBlock::feed_forward(const Stream& s, Tensor& x, const Tensor& mod, Tensor& one_plus,
                                  Tensor* ff_tap) const {
  Backend& be = *run_.be;
  const int64_t n = x.dim(0), d = cfg_.dim;
  const DType act = run_.act();
  auto m = [&](int k) { return mod.slice(1, k * d, d); };
  OwnedTensor h(act, {n, d}), f(act, {n, cfg_.mlp_dim}), o(act, {n, d});
  be.layer_norm(x, Tensor{}, Tensor{}, FramePackDitConfig::kEps, h.t);
  dit_modulate(run_, h.t, m(3), m(4), one_plus);
  dit_linear_act(run_, h.t, *s.ff1, f.t, Activation::GeluTanh);
  be.linear(f.t, *s.ff2, o.t, Activation::None);
  if (ff_tap != nullptr) be.copy(o.t, *ff_tap);
  dit_gated_add(run_, x, o.t, m(5));  // x + g2 * ff
}

void DitDoubleBlock::modulated_input(const Tensor& x, const Tensor& temb_silu, Tensor& out) const {
  const int64_t d = cfg_.dim;
  OwnedTensor mx(run_.act(), {1, 6 * d}), one_plus(run_.act(), {1, d});
  run_.be->linear(temb_silu, *x_.mod, mx.t, Activation::None);
  run_.be->layer_norm(x, Tensor{}, Tensor{}, FramePackDitConfig::kEps, out);
  dit_modulate(run_, out, mx.t.slice(1, 0, d), mx.t.slice(1, d, d), one_plus.t);
}

void DitDoubleBlock::forward(Tensor& x, Tensor& ctx, const Tensor& temb_silu, const Tensor& cos,
                             const Tensor& sin, const std::string& prefix,
                             const DitTap& tap) const {
  Backend& be = *run_.be;
  const FramePackDitConfig& c = cfg_;
  const int64_t nx = x.dim(0), nc = ctx.dim(0), n = nx + nc, d = c.dim;
  const DType act = run_.act();
  auto emit = [&](const char* name, const Tensor& t) { run_.tap(tap, prefix + name, t); };

  // Modulations [1, 6D]: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp.
  OwnedTensor mx(act, {1, 6 * d}), mc(act, {1, 6 * d}), one_plus(act, {1, d});
  be.linear(temb_silu, *x_.mod, mx.t, Activation::None);
  be.linear(temb_silu, *c_.mod, mc.t, Activation::None);
  auto mxk = [&](int k) { return mx.t.slice(1, k * d, d); };
  auto mck = [&](int k) { return mc.t.slice(1, k * d, d); };

  OwnedTensor hx(act, {nx, d}), hc(act, {nc, d});
  be.layer_norm(x, Tensor{}, Tensor{}, FramePackDitConfig::kEps, hx.t);
  dit_modulate(run_, hx.t, mxk(0), mxk(1), one_plus.t);
  be.layer_norm(ctx, Tensor{}, Tensor{}, FramePackDitConfig::kEps, hc.t);
  dit_modulate(run_, hc.t, mck(0), mck(1), one_plus.t);
  emit("norm1", hx.t);

  // Joint attention over [image; context] rows.
  OwnedTensor q(act, {n, d}), k(act, {n, d}), v(act, {n, d}), a(act, {n, d});
  for (const auto& [s, in, row, rows] :
       {std::tuple{&x_, &hx.t, int64_t{0}, nx}, std::tuple{&c_, &hc.t, nx, nc}}) {
    Tensor qs = q.t.slice(0, row, rows), ks = k.t.slice(0, row, rows), vs = v.t.slice(0, row, rows);
    be.linear(*in, *s->q, qs, Activation::None);
    be.linear(*in, *s->k, ks, Activation::None);
    be.linear(*in, *s->v, vs, Activation::None);
    const Shape ph{rows, c.heads, c.head_dim};
    Tensor q3 = qs.reshape(ph), k3 = ks.reshape(ph);
    dit_rms_norm(run_, q3, s->norm_q, FramePackDitConfig::kEps, q3);
    dit_rms_norm(run_, k3, s->norm_k, FramePackDitConfig::kEps, k3);
  }
  Tensor qx = q.t.slice(0, 0, nx), kx = k.t.slice(0, 0, nx);
  dit_apply_rope(run_, c, qx, cos, sin);
  dit_apply_rope(run_, c, kx, cos, sin);
  const Shape heads{1, n, c.heads, c.head_dim};
  Tensor a4 = a.t.reshape(heads);
  be.attention(q.t.reshape(heads), k.t.reshape(heads), v.t.reshape(heads), a4, AttentionParams{});

  OwnedTensor ox(act, {nx, d}), oc(act, {nc, d});
  be.linear(a.t.slice(0, 0, nx), *x_.out, ox.t, Activation::None);
  be.linear(a.t.slice(0, nx, nc), *c_.out, oc.t, Activation::None);
  emit("attn_x", ox.t);
  emit("attn_ctx", oc.t);
  dit_gated_add(run_, x, ox.t, mxk(2));
  dit_gated_add(run_, ctx, oc.t, mck(2));

  OwnedTensor ff_tap;
  if (tap) ff_tap = OwnedTensor(act, {nx, d});
  feed_forward(x_, x, mx.t, one_plus.t, tap ? &ff_tap.t : nullptr);
  feed_forward(c_, ctx, mc.t, one_plus.t, nullptr);
  if (tap) emit("ff", ff_tap.t);
  emit("x", x);
  emit("ctx", ctx);
}

}  // namespace flick::hunyuan
