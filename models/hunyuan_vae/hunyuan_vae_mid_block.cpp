#include "models/hunyuan_vae/hunyuan_vae_mid_block.h"

#include <cstring>
#include <string>
#include <utility>

namespace flick::hunyuan_vae {

Expected<MidAttention> MidAttention::load(const WeightView& v, Backend& be, const Numerics& num,
                                          int64_t c, int64_t groups) {
  MidAttention a;
  a.c_ = c;
  a.act_ = num.act;
  FLICK_ASSIGN_OR_RETURN(a.norm_, GroupNorm::load(v, "group_norm", c, groups, num));
  OwnedTensor w(DType::F32, Shape{3 * c, c}), b(DType::F32, Shape{3 * c});
  const char* names[3] = {"to_q", "to_k", "to_v"};
  for (int i = 0; i < 3; ++i) {
    FLICK_ASSIGN_OR_RETURN(OwnedTensor wi,
                           load_f32(v, std::string(names[i]) + ".weight", Shape{c, c}));
    FLICK_ASSIGN_OR_RETURN(OwnedTensor bi, load_f32(v, std::string(names[i]) + ".bias", Shape{c}));
    std::memcpy(w.t.ptr<float>() + i * c * c, wi.t.data, wi.t.nbytes());
    std::memcpy(b.t.ptr<float>() + i * c, bi.t.data, bi.t.nbytes());
  }
  LinearDesc d;
  d.w = w.t;
  d.bias = b.t;
  d.precision = num.conv;
  a.qkv_ = be.pack_linear(d);
  FLICK_ASSIGN_OR_RETURN(OwnedTensor ow, load_f32(v, "to_out.0.weight", Shape{c, c}));
  FLICK_ASSIGN_OR_RETURN(OwnedTensor ob, load_f32(v, "to_out.0.bias", Shape{c}));
  d.w = ow.t;
  d.bias = ob.t;
  a.out_ = be.pack_linear(d);
  return a;
}

OwnedTensor MidAttention::forward(Backend& be, const Tensor& x) const {
  const int64_t c = c_, t = x.dim(2), hw = x.dim(3) * x.dim(4), l = t * hw;
  FLICK_CHECK(x.ndim() == 5 && x.dim(1) == c && x.is_contiguous(), "MidAttention: x " + x.str());
  // GroupNorm over [1, C, L] (AKHV's attn.group_norm(hidden_states.transpose(1, 2))),
  // then the [L, C] token rows the projections read.
  const OwnedTensor n = norm_.forward(be, x, /*silu=*/false);
  OwnedTensor rows(act_, Shape{l, c});
  be.copy(n.t.reshape({c, l}).permute({1, 0}), rows.t);
  OwnedTensor qkv(act_, Shape{l, 3 * c});
  be.linear(rows.t, *qkv_, qkv.t);
  const Tensor qkv4 = qkv.t.reshape({1, l, 1, 3 * c});
  OwnedTensor o(act_, Shape{1, l, 1, c});
  AttentionParams p;
  p.causal_block = hw;  // frame-causal: key frame <= query frame (AKHV:36-46)
  be.attention(qkv4.slice(3, 0, c), qkv4.slice(3, c, c), qkv4.slice(3, 2 * c, c), o.t, p);
  // to_out.0 (into `rows`, free again), residual add back in [1, C, T, H, W].
  be.linear(o.t.reshape({l, c}), *out_, rows.t);
  OwnedTensor y(act_, x.shape);
  Tensor y3 = y.t.reshape({c, l});
  be.add(rows.t.permute({1, 0}), x.reshape({c, l}),
         y3);  // to_out + residual (attention_processor.py)
  return y;
}

Expected<MidBlock> MidBlock::load(const WeightView& v, Backend& be, const Numerics& num, int64_t c,
                                  int64_t groups, bool attention) {
  MidBlock m;
  for (int i = 0; i < 2; ++i) {
    FLICK_ASSIGN_OR_RETURN(ResnetBlock r, ResnetBlock::load(v.sub("resnets." + std::to_string(i)),
                                                            be, num, c, c, groups));
    m.resnets_.push_back(std::move(r));
  }
  if (attention) {
    FLICK_ASSIGN_OR_RETURN(MidAttention a,
                           MidAttention::load(v.sub("attentions.0"), be, num, c, groups));
    m.attentions_.push_back(std::move(a));
  } else if (v.has("attentions.0.to_q.weight")) {
    return invalid_input(v.full_name("attentions.0.to_q.weight") +
                         ": unexpected (mid_block_add_attention is false)");
  }
  return m;
}

OwnedTensor MidBlock::forward(Backend& be, const Tensor& x, const Tap& tap,
                              std::string_view prefix) const {
  const std::string p(prefix);
  OwnedTensor h = resnets_[0].forward(be, x);
  tap_if(tap, p + "res0", h.t);
  if (!attentions_.empty()) {
    h = attentions_[0].forward(be, h.t);
    const int64_t c = h.t.dim(1), l = h.t.numel() / c;
    tap_if(tap, p + "attn", h.t.reshape({1, c, l}).permute({0, 2, 1}));
  }
  return resnets_[1].forward(be, h.t);
}

}  // namespace flick::hunyuan_vae
