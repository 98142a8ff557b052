// The double-stream block of FramePack's DiT (HunyuanVideoTransformerBlock,
// hunyuan_video_packed.py:608-680, attention processor :143-186):
//
//   (s1, sc1, g1, s2, sc2, g2) = norm1.linear(SiLU(temb)); c_* from norm1_context
//   nx = LN(x)(1 + sc1) + s1;  nc = LN(c)(1 + c_sc1) + c_s1
//   q, k, v = to_q/k/v(nx) -> heads, RMSNorm(q), RMSNorm(k) (norm_q/k), RoPE
//   qc, kc, vc = add_q/k/v_proj(nc) -> heads, RMSNorm (norm_added_q/k), no RoPE
//   A = SDPA([q; qc], [k; kc], [v; vc])            (no mask: B = 1 crop)
//   x += to_out.0(A_x) * g1;   c += to_add_out(A_c) * c_g1
//   x += ff(LN(x)(1 + sc2) + s2) * g2;  c += ff_context(...) * c_g2
//   ff = Linear(D -> mlp) -> GELU(tanh) -> Linear(mlp -> D)
//
// LN is non-affine with eps 1e-6; every op rounds in bf16 (framepack_dit_common.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/hunyuan/framepack_dit_common.h"
#include "models/hunyuan/framepack_dit_config.h"

namespace flick::hunyuan {

// Applies the DiT's RoPE to q / k rows: x [n, heads * head_dim] (contiguous
// rows), cos / sin F32 [n, head_dim / 2]; in place.
void dit_apply_rope(const DitRun& run, const FramePackDitConfig& c, Tensor& x, const Tensor& cos,
                    const Tensor& sin);

class DitDoubleBlock {
 public:
  // `v` = `transformer_blocks.<i>`.
  static Expected<DitDoubleBlock> load(const WeightView& v, const FramePackDitConfig& c,
                                       const DitRun& run);
  // x [Nx, D] (image tokens), ctx [Nc, D] updated in place; temb_silu =
  // SiLU(temb) [1, D]; cos / sin: the image tokens' RoPE. Taps `<prefix>x`,
  // `<prefix>ctx` and, with detail, `norm1`, `attn_x`, `attn_ctx`, `ff`.
  void forward(Tensor& x, Tensor& ctx, const Tensor& temb_silu, const Tensor& cos,
               const Tensor& sin, const std::string& prefix, const DitTap& tap) const;
  // norm1(x, temb)[0] alone: LN(x)(1 + scale_msa) + shift_msa, [Nx, D] (TeaCache's probe).
  void modulated_input(const Tensor& x, const Tensor& temb_silu, Tensor& out) const;

 private:
  struct Stream {  // the image (x) or context (c) half
    std::unique_ptr<PackedLinear> mod, q, k, v, out, ff1, ff2;
    Tensor norm_q, norm_k;
  };
  // One stream's feed-forward half: x += ff(LN(x)(1 + scale) + shift) * gate.
  void feed_forward(const Stream& s, Tensor& x, const Tensor& mod, Tensor& one_plus,
                    Tensor* ff_tap) const;

  FramePackDitConfig cfg_;
  DitRun run_;
  std::vector<OwnedTensor> owned_;
  Stream x_, c_;
};

}  // namespace flick::hunyuan
