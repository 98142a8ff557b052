#include "models/hunyuan/framepack_dit_single.h"

#include "models/hunyuan/framepack_dit_double.h"

namespace flick::hunyuan {

Expected<DitSingleBlock> DitSingleBlock::load(const WeightView& v, const FramePackDitConfig& c,
                                              const DitRun& run) {
  DitSingleBlock m;
  m.cfg_ = c;
  m.run_ = run;
  const int64_t d = c.dim;
  auto lin = [&](const char* name, int64_t n, int64_t in) {
    return load_dit_linear(v, name, n, in, run, run.precision);
  };
  // The modulation linear is quantized too (framepack_dit_common.h).
  FLICK_ASSIGN_OR_RETURN(m.mod_, lin("norm.linear", 3 * d, d));
  FLICK_ASSIGN_OR_RETURN(m.q_, lin("attn.to_q", d, d));
  FLICK_ASSIGN_OR_RETURN(m.k_, lin("attn.to_k", d, d));
  FLICK_ASSIGN_OR_RETURN(m.v_, lin("attn.to_v", d, d));
  FLICK_ASSIGN_OR_RETURN(m.mlp_, lin("proj_mlp", c.mlp_dim, d));
  FLICK_ASSIGN_OR_RETURN(m.out_, lin("proj_out", d, d + c.mlp_dim));
  FLICK_ASSIGN_OR_RETURN(m.norm_q_,
                         load_dit_param(v, "attn.norm_q.weight", {c.head_dim}, run, m.owned_));
  FLICK_ASSIGN_OR_RETURN(m.norm_k_,
                         load_dit_param(v, "attn.norm_k.weight", {c.head_dim}, run, m.owned_));
  return m;
}

void DitSingleBlock::forward(Tensor& h, int64_t nx, const Tensor& temb_silu, const Tensor& cos,
                             const Tensor& sin, const std::string& prefix,
                             const DitTap& tap) const {
  Backend& be = *run_.be;
  const FramePackDitConfig& c = cfg_;
  const int64_t n = h.dim(0), d = c.dim;
  const DType act = run_.act();
  auto emit = [&](const char* name, const Tensor& t) { run_.tap(tap, prefix + name, t); };

  OwnedTensor mod(act, {1, 3 * d}), one_plus(act, {1, d});  // shift, scale, gate
  be.linear(temb_silu, *mod_, mod.t, Activation::None);
  OwnedTensor norm(act, {n, d});
  be.layer_norm(h, Tensor{}, Tensor{}, FramePackDitConfig::kEps, norm.t);
  dit_modulate(run_, norm.t, mod.t.slice(1, 0, d), mod.t.slice(1, d, d), one_plus.t);

  // [attention | mlp] side by side: proj_out's input (torch.cat(dim=2)).
  OwnedTensor cat(act, {n, d + c.mlp_dim});
  Tensor mlp = cat.t.slice(1, d, c.mlp_dim);
  be.linear(norm.t, *mlp_, mlp, Activation::None);
  emit("mlp", mlp);
  be.activation(mlp, mlp, Activation::GeluTanh);  // of the rounded linear output

  OwnedTensor q(act, {n, d}), k(act, {n, d}), v(act, {n, d}), a(act, {n, d});
  be.linear(norm.t, *q_, q.t, Activation::None);
  be.linear(norm.t, *k_, k.t, Activation::None);
  be.linear(norm.t, *v_, v.t, Activation::None);
  const Shape ph{n, c.heads, c.head_dim};
  Tensor q3 = q.t.reshape(ph), k3 = k.t.reshape(ph);
  dit_rms_norm(run_, q3, norm_q_, FramePackDitConfig::kEps, q3);
  dit_rms_norm(run_, k3, norm_k_, FramePackDitConfig::kEps, k3);
  Tensor qx = q.t.slice(0, 0, nx), kx = k.t.slice(0, 0, nx);
  dit_apply_rope(run_, c, qx, cos, sin);
  dit_apply_rope(run_, c, kx, cos, sin);
  const Shape heads{1, n, c.heads, c.head_dim};
  Tensor a4 = a.t.reshape(heads);
  be.attention(q.t.reshape(heads), k.t.reshape(heads), v.t.reshape(heads), a4, AttentionParams{});
  emit("attn_x", a.t.slice(0, 0, nx));
  Tensor cat_a = cat.t.slice(1, 0, d);
  be.copy(a.t, cat_a);

  OwnedTensor o(act, {n, d});
  be.linear(cat.t, *out_, o.t, Activation::None);
  dit_gated_add(run_, h, o.t, mod.t.slice(1, 2 * d, d));  // gate * proj_out(...) + residual
  emit("x", h.slice(0, 0, nx));
  emit("ctx", h.slice(0, nx, n - nx));
}

}  // namespace flick::hunyuan
