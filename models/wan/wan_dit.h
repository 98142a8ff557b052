// The CausalWanModel DiT of Matrix-Game 2.0 (spec §5; wan/modules/causal_model.py,
// `_forward_inference`). The action module of blocks below action_blocks
// (spec §6) is its own component (wan_action.h); the caller runs it between
// a block's attention() and feed_forward():
//
//   x   = patch_embed(cat(noisy, cond))                   // [F*h*w, dim]
//   e   = Lin(SiLU(Lin(sinusoid(t))))                     // [F, dim]
//   e0  = Lin(SiLU(e))                                    // [F, 6, dim]
//   ctx = LN(Lin(GELU(Lin(LN(visual_context)))))         // [Tc, dim]
//   block: m = modulation + e0;
//          x += SelfAttn(LN1(x)(1 + m1) + m0) * m2        // q/k RMSNorm, 3-D RoPE, KV ring
//          x += CrossAttn(LN3(x), ctx)
//          x += FFN(LN2(x)(1 + m4) + m3) * m5             // GELU tanh
//   head: Lin(LN(x)(1 + hm1) + hm0), hm = head.modulation + e; unpatchify
//
// Weight names are the checkpoint's (`model.` prefix); the config is read from
// tensor shapes, except the head size (128 in the released models), which no
// shape carries. Precision BF16 reproduces the reference's bf16 module (no
// autocast: every elementwise op rounds to bf16, LayerNorm/RMSNorm statistics
// in fp32, sinusoid and RoPE in f64); Precision F32 runs everything in fp32.
// INT8 and FP8 run the big linears quantized (the keep list and the schemes
// are in wan_quant.h) and everything else exactly as BF16, except that INT8
// runs the self-attention on Backend::attention_int8 (INT8 Q.K^T, see
// runtime/backend.h) where the backend says it pays off. Checkpoints may be
// float or pre-quantized by `flick convert` (an I8 / F8_E4M3 `<name>.weight`
// with a F32 `<name>.weight_scale`), which loads without re-quantizing; INT8
// needs AVX-512 VNNI on the CPU backend (load() says so otherwise).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "models/wan/kv_ring.h"
#include "models/wan/rope3d.h"
#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"
#include "runtime/weights/weight_store.h"

namespace flick {

struct WanDitConfig {
  int64_t dim = 0;            // 1536
  int64_t ffn_dim = 0;        // 8960
  int64_t heads = 0;          // 12
  int64_t head_dim = 0;       // 128
  int64_t layers = 0;         // 30
  int64_t in_dim = 0;         // 36: 16 noisy + 4 mask + 16 image latents
  int64_t out_dim = 0;        // 16
  int64_t freq_dim = 0;       // 256
  int64_t clip_dim = 0;       // 1280: the image encoder's width
  int64_t action_blocks = 0;  // blocks 0 .. action_blocks-1 carry an action module (15)
  float eps = 1e-6f;          // LN1/2/3, q/k RMSNorm, head LN
  float img_eps = 1e-5f;      // img_emb LayerNorms

  // Reads the shapes under `model` (a view with the "model." prefix).
  static Expected<WanDitConfig> detect(const WeightView& model, int64_t head_dim = 128);
};

// What one DiT call covers; fixed at load so every buffer is planned once.
struct WanDitShape {
  int64_t latent_h = 0, latent_w = 0;  // latent grid (44 x 80); patch 2 x 2
  int64_t frames = 3;                  // latent frames per call (num_frame_per_block)
  int64_t context_tokens = 257;        // CLIP tokens
  int64_t local_attn_frames = 6;       // self-attention cache, in latent frames

  int64_t frame_tokens() const { return (latent_h / 2) * (latent_w / 2); }
  int64_t tokens() const { return frames * frame_tokens(); }
};

class WanDit {
 public:
  // Called with every intermediate as it is produced, named as in the
  // golden files ("patch_embed", "blk0.sa_q", ...). Views valid during the call.
  using Tap = std::function<void(std::string_view name, const Tensor& t)>;

  static Expected<WanDit> load(const WeightView& model, Backend& backend, Precision precision,
                               const WanDitShape& shape, int64_t head_dim = 128);

  const WanDitConfig& config() const { return cfg_; }
  const WanDitShape& shape() const { return shape_; }
  DType activation_dtype() const { return act_; }

  // Projects the CLIP hidden state [1, Tc, clip_dim] and computes every
  // block's cross-attention K/V (the reference's crossattn cache).
  Status set_context(const Tensor& visual_context, const Tap& tap = {});
  // Empties the self-attention caches (a new video).
  void reset_caches();
  // Frees the activation buffers (not the caches) until the next call: the
  // pipeline calls it while the VAE decodes.
  void release_buffers() { arena_.release(); }

  // Patch and time embeddings of one call: noisy [1, 16, F, H, W], cond
  // [1, in_dim - 16, F, H, W], t F32 [F] (the step time of every frame).
  Status embed(const Tensor& noisy, const Tensor& cond, const Tensor& t, const Tap& tap = {});
  // Block i on the token state; start_frame = absolute latent index of the
  // call's first frame. Blocks below action_blocks need their
  // WanActionModule between attention() and feed_forward(): calling block()
  // on one is a programmer error.
  void block(int64_t i, int64_t start_frame, const Tap& tap = {});
  // The two halves of block i: self attention (writes the KV ring) and cross
  // attention; then the modulated feed-forward.
  void attention(int64_t i, int64_t start_frame, const Tap& tap = {});
  void feed_forward(int64_t i, const Tap& tap = {});
  // Head and unpatchify: returns [1, out_dim, F, H, W] in activation_dtype().
  Tensor head(const Tap& tap = {});

  // The token state [F * h * w, dim] (frame-major), e.g. to start a block
  // from a known input.
  Tensor tokens() const { return arena_.get(x_); }

 private:
  struct Block {
    Tensor modulation;  // [6, dim]
    Tensor sa_norm_q, sa_norm_k, norm3_w, norm3_b, ca_norm_q, ca_norm_k;
    // q, k, v as one linear [3 * dim, dim]: one GEMM, one input quantization.
    std::unique_ptr<PackedLinear> sa_qkv, sa_o, ca_q, ca_k, ca_v, ca_o, ffn1, ffn2;
    OwnedTensor k_cache, v_cache;  // [cache_tokens, dim]
    OwnedTensor ca_kc, ca_vc;      // [Tc, dim]
    wan::KvRing ring{1};
  };

  WanDit() = default;
  Status load_weights(const WeightView& model);
  void plan();
  // WanRMSNorm: bf16(norm_fp32(x)) * w, two roundings in bf16.
  void rms_norm_weighted(const Tensor& x, const Tensor& w, Tensor& y);
  // LN(x) * (1 + scale) + shift, one rounding per op; scale/shift [F, 1, dim].
  void modulated_norm(const Tensor& x, const Tensor& shift, const Tensor& scale, Tensor& y);
  // y = y * (1 + scale) + shift in place, y [tokens, dim].
  void modulate(Tensor& y, const Tensor& shift, const Tensor& scale);
  void apply_rope(Tensor& x, int64_t start_frame);  // x: [tokens, heads, head_dim]
  // modulation + e0 of block i: [F, 6, dim] (rounded once).
  Tensor modulation(int64_t i);
  // x += y * gate (two roundings); y [tokens, dim], gate [F, 1, dim].
  void gated_residual(const Tensor& y, const Tensor& gate);

  WanDitConfig cfg_;
  WanDitShape shape_;
  Backend* backend_ = nullptr;
  Precision precision_ = Precision::F32;
  DType act_ = DType::F32;
  bool int8_attention_ = false;  // self-attention on Backend::attention_int8
  std::unique_ptr<wan::Rope3d> rope_;

  std::vector<OwnedTensor> owned_;
  std::unique_ptr<PackedLinear> patch_embed_, time_1_, time_2_, time_proj_, img_1_, img_2_, head_;
  Tensor img_ln0_w_, img_ln0_b_, img_ln4_w_, img_ln4_b_;
  Tensor head_modulation_;  // [2, dim]
  std::vector<Block> blocks_;

  Arena arena_;
  Arena::BufferId in_ = -1, patches_ = -1, x_ = -1, sin_ = -1, e_ = -1, e_act_ = -1, e0_ = -1,
                  mod_ = -1, hm_ = -1, ctx_in_ = -1, ctx_h_ = -1, ctx_ = -1, h_ = -1, tmp_ = -1,
                  qkv_ = -1, q_ = -1, k_ = -1, attn_ = -1, o_ = -1, ffn_ = -1, cq_ = -1, ck_ = -1,
                  head_out_ = -1, flow_ = -1;
};

}  // namespace flick
