// The ActionModule of Matrix-Game 2.0's DiT blocks (spec §6;
// wan/modules/action_module.py), on one call's tokens x [F * S, dim]
// (frame-major, S tokens per latent frame):
//
//   mouse (optional):  z = LN(Lin(GELU_tanh(Lin([x_{f,s}, W_f^mouse]))))
//                      q, k, v = t_qkv(z); q, k = rope(rmsnorm(q, k))
//                      per spatial token, attend over its cached frames
//                      x1 = x + proj_mouse(attn)
//   keyboard:          E = Lin(SiLU(Lin(raw keyboard)))  per raw frame
//                      k, v = keyboard_attn_kv(E[W_f]) (one per frame)
//                      q = mouse_attn_q(x1); q, k = rope(rmsnorm(q, k))
//                      every token attends over the cached keyboard frames
//                      x2 = x1 + proj_keyboard(attn)
//
// W_f = the 12 raw frames [4f - 12, 4f) (action_window.h). The q/k RMSNorm
// ignores its stored weight, as the reference does. Weight names are the
// checkpoint's (`model.blocks.{i}.action_model.` prefix); dims from shapes.
// Precisions and pre-quantized weights as in wan_dit.h (keep list:
// wan_quant.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "models/wan/kv_ring.h"
#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"
#include "runtime/weights/weight_store.h"

namespace flick {

struct WanActionConfig {
  int64_t dim = 0;              // DiT width (1536)
  int64_t heads = 0;            // 16 (head dim fixed at 64)
  int64_t mouse_hidden = 0;     // 1024; 0 without the mouse branch
  int64_t mouse_dim = 0;        // 2
  int64_t keyboard_dim = 0;     // 4 / 2 / 7
  int64_t keyboard_hidden = 0;  // 128
  int64_t attn_width = 0;       // heads * 64 (1024)

  bool has_mouse() const { return mouse_hidden > 0; }
  static Expected<WanActionConfig> detect(const WeightView& action, int64_t dim);
};

class WanActionModule {
 public:
  using Tap = std::function<void(std::string_view name, const Tensor& t)>;

  // frames: latent frames per call; frame_tokens: S; cache_frames: L.
  // share_with: a module that never runs at the same time as this one (an
  // earlier block of the same DiT); with the same configuration, both use
  // one set of activation buffers (~80 MB at 352x640) instead of two.
  static Expected<WanActionModule> load(const WeightView& action, Backend& backend,
                                        Precision precision, int64_t dim, int64_t frames,
                                        int64_t frame_tokens, int64_t cache_frames,
                                        const WanActionModule* share_with = nullptr);

  const WanActionConfig& config() const { return cfg_; }
  void reset_caches();
  // Frees the activation buffers (shared with share_with modules; not the
  // caches) until the next call.
  void release_buffers() { arena_->release(); }

  // x: [F * S, dim] in the activation dtype, updated in place. keyboard:
  // [raw_frames, keyboard_dim], mouse: [raw_frames, mouse_dim] (F32 or BF16;
  // mouse ignored without the mouse branch); start_frame: absolute latent
  // index of the call's first frame. Taps are named "act.<name>".
  Status forward(Tensor& x, const Tensor& keyboard, const Tensor& mouse, int64_t start_frame,
                 const Tap& tap = {});

 private:
  WanActionModule() = default;
  Status load_weights(const WeightView& action);
  void plan();
  // Weight-free RMSNorm over the last 64 values (bf16 arithmetic in bf16).
  void norm(Tensor& x);
  // The action RoPE; x: [B, F, H', 64] contiguous, frame t at latent
  // start_frame + t.
  void rope(Tensor& x, int64_t start_frame);
  // Rolls `ring` to the chunk and writes k/v [B, F, H, 64] into the caches
  // [B, L, H, 64]; returns the attended window [B, win, H, 64] views.
  std::pair<Tensor, Tensor> write_cache(wan::KvRing& ring, OwnedTensor& kc, OwnedTensor& vc,
                                        const Tensor& k, const Tensor& v, int64_t start_frame);

  WanActionConfig cfg_;
  Backend* backend_ = nullptr;
  Precision precision_ = Precision::F32;
  DType act_ = DType::F32;
  int64_t frames_ = 0, frame_tokens_ = 0, cache_frames_ = 0;

  std::vector<OwnedTensor> owned_;
  std::unique_ptr<PackedLinear> mouse_1_, mouse_2_, t_qkv_, proj_mouse_, kb_1_, kb_2_, q_, kv_,
      proj_kb_;
  Tensor mouse_ln_w_, mouse_ln_b_;
  OwnedTensor mk_, mv_, kk_, kv_cache_;  // mouse [S, L, H, 64]; keyboard [1, L, H, 64]
  wan::KvRing mouse_ring_{1}, kb_ring_{1};

  std::shared_ptr<Arena> arena_;  // activations; shared by modules that share_with
  Arena::BufferId m_in_ = -1, m_h_ = -1, m_z_ = -1, m_qkv_ = -1, m_q_ = -1, m_k_ = -1, m_v_ = -1,
                  m_attn_ = -1, m_attn_fs_ = -1, proj_ = -1, kb_track_ = -1, kb_h_ = -1, kb_e_ = -1,
                  kb_win_ = -1, kb_kv_ = -1, kb_k_ = -1, kb_v_ = -1, kb_q_ = -1, kb_attn_ = -1;
};

}  // namespace flick
