#include "models/wan/wan_action.h"

#include <cstring>
#include <string>
#include <utility>

#include "models/wan/action_rope.h"
#include "models/wan/action_window.h"
#include "models/wan/wan_quant.h"
#include "runtime/dtype.h"
#include "runtime/profile_backend.h"

namespace flick {
namespace {

constexpr int64_t kHd = wan::kActionHeadDim;  // 64
constexpr float kNormEps = 1e-6f;
constexpr float kLnEps = 1e-5f;
const DTypeSet kFloat{DType::F32, DType::BF16, DType::F16};

}  // namespace

Expected<WanActionConfig> WanActionConfig::detect(const WeightView& action, int64_t dim) {
  WanActionConfig c;
  c.dim = dim;
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* q, action.require("mouse_attn_q.weight", 2));
  c.attn_width = q->shape[0];
  if (q->shape[1] != dim || c.attn_width % kHd != 0)
    return invalid_input(action.full_name("mouse_attn_q.weight") + ": expected [H * 64, " +
                         std::to_string(dim) + "], file has " + q->shape_str());
  c.heads = c.attn_width / kHd;
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* e, action.require("keyboard_embed.0.weight", 2));
  c.keyboard_hidden = e->shape[0];
  c.keyboard_dim = e->shape[1];
  if (action.has("mouse_mlp.0.weight")) {
    FLICK_ASSIGN_OR_RETURN(const TensorInfo* m, action.require("mouse_mlp.0.weight", 2));
    c.mouse_hidden = m->shape[0];
    const int64_t extra = m->shape[1] - dim;
    if (extra <= 0 || extra % wan::kActionWindowFrames != 0)
      return invalid_input(action.full_name("mouse_mlp.0.weight") + ": input width " +
                           std::to_string(m->shape[1]) + " is not dim + 12 * mouse_dim");
    c.mouse_dim = extra / wan::kActionWindowFrames;
  }
  return c;
}

Expected<WanActionModule> WanActionModule::load(const WeightView& action, Backend& backend,
                                                Precision precision, int64_t dim, int64_t frames,
                                                int64_t frame_tokens, int64_t cache_frames,
                                                const WanActionModule* share_with) {
  FLICK_TRY(check_wan_precision(precision, backend, "Wan action module"));
  WanActionModule m;
  FLICK_ASSIGN_OR_RETURN(m.cfg_, WanActionConfig::detect(action, dim));
  m.backend_ = &backend;
  m.precision_ = precision;
  m.act_ = wan_activation_dtype(precision);
  m.frames_ = frames;
  m.frame_tokens_ = frame_tokens;
  m.cache_frames_ = cache_frames;
  FLICK_TRY(m.load_weights(action));
  m.plan();
  if (share_with != nullptr && share_with->arena_->same_plan(*m.arena_)) {
    m.arena_ = share_with->arena_;
  } else {
    m.arena_->finalize();
  }
  m.reset_caches();
  return m;
}

Status WanActionModule::load_weights(const WeightView& a) {
  const WanActionConfig& c = cfg_;
  auto param = [&](std::string_view name, Shape shape) -> Expected<Tensor> {
    FLICK_ASSIGN_OR_RETURN(Tensor t, a.get(name, kFloat, shape));
    if (t.dtype == act_) return t;
    OwnedTensor& o = owned_.emplace_back(act_, t.shape);
    convert(t.dtype, t.data, act_, o.t.data, t.numel());
    return o.t;
  };
  // Quantized or BF16 by the table of wan_quant.h.
  auto linear = [&](std::string_view layer, int64_t n, int64_t k,
                    bool bias) -> Expected<std::unique_ptr<PackedLinear>> {
    return load_wan_linear(a, layer, Shape{n, k}, bias, precision_, *backend_);
  };
  const int64_t win = wan::kActionWindowFrames;
  if (c.has_mouse()) {
    FLICK_ASSIGN_OR_RETURN(mouse_1_,
                           linear("mouse_mlp.0", c.mouse_hidden, c.dim + win * c.mouse_dim, true));
    FLICK_ASSIGN_OR_RETURN(mouse_2_, linear("mouse_mlp.2", c.mouse_hidden, c.mouse_hidden, true));
    FLICK_ASSIGN_OR_RETURN(mouse_ln_w_, param("mouse_mlp.3.weight", {c.mouse_hidden}));
    FLICK_ASSIGN_OR_RETURN(mouse_ln_b_, param("mouse_mlp.3.bias", {c.mouse_hidden}));
    FLICK_ASSIGN_OR_RETURN(t_qkv_, linear("t_qkv", 3 * c.attn_width, c.mouse_hidden, false));
    FLICK_ASSIGN_OR_RETURN(proj_mouse_, linear("proj_mouse", c.dim, c.attn_width, false));
    // Stored but ignored by the reference's RMSNorm.
    for (const char* n : {"img_attn_q_norm.weight", "img_attn_k_norm.weight"}) a.mark_used(n);
  }
  FLICK_ASSIGN_OR_RETURN(kb_1_,
                         linear("keyboard_embed.0", c.keyboard_hidden, c.keyboard_dim, true));
  FLICK_ASSIGN_OR_RETURN(kb_2_,
                         linear("keyboard_embed.2", c.keyboard_hidden, c.keyboard_hidden, true));
  FLICK_ASSIGN_OR_RETURN(q_, linear("mouse_attn_q", c.attn_width, c.dim, false));
  FLICK_ASSIGN_OR_RETURN(
      kv_, linear("keyboard_attn_kv", 2 * c.attn_width, win * c.keyboard_hidden, false));
  FLICK_ASSIGN_OR_RETURN(proj_kb_, linear("proj_keyboard", c.dim, c.attn_width, false));
  for (const char* n : {"key_attn_q_norm.weight", "key_attn_k_norm.weight"}) a.mark_used(n);
  return ok_status();
}

void WanActionModule::plan() {
  arena_ = std::make_shared<Arena>();
  const WanActionConfig& c = cfg_;
  const int64_t f = frames_, s = frame_tokens_, n = f * s, h = c.heads,
                win = wan::kActionWindowFrames;
  if (c.has_mouse()) {
    m_in_ = arena_->request("act.mouse_in", act_, {s, f, c.dim + win * c.mouse_dim});
    m_h_ = arena_->request("act.mouse_h", act_, {n, c.mouse_hidden});
    m_z_ = arena_->request("act.mouse_z", act_, {n, c.mouse_hidden});
    m_qkv_ = arena_->request("act.mouse_qkv", act_, {s, f, 3, h, kHd});
    m_q_ = arena_->request("act.mouse_q", act_, {s, f, h, kHd});
    m_k_ = arena_->request("act.mouse_k", act_, {s, f, h, kHd});
    m_v_ = arena_->request("act.mouse_v", act_, {s, f, h, kHd});
    m_attn_ = arena_->request("act.mouse_attn", act_, {s, f, h, kHd});
    m_attn_fs_ = arena_->request("act.mouse_attn_fs", act_, {f, s, h, kHd});
  }
  proj_ = arena_->request("act.proj", act_, {n, c.dim});
  kb_track_ = arena_->request("act.kb_track", act_, {f * win, c.keyboard_dim});
  kb_h_ = arena_->request("act.kb_h", act_, {f * win, c.keyboard_hidden});
  kb_e_ = arena_->request("act.kb_e", act_, {f * win, c.keyboard_hidden});
  kb_kv_ = arena_->request("act.kb_kv", act_, {f, 2, h, kHd});
  kb_k_ = arena_->request("act.kb_k", act_, {1, f, h, kHd});
  kb_v_ = arena_->request("act.kb_v", act_, {1, f, h, kHd});
  kb_q_ = arena_->request("act.kb_q", act_, {f, s, h, kHd});
  kb_attn_ = arena_->request("act.kb_attn", act_, {f, s, h, kHd});
}

void WanActionModule::reset_caches() {
  const WanActionConfig& c = cfg_;
  if (c.has_mouse()) {
    mk_ = OwnedTensor(act_, {frame_tokens_, cache_frames_, c.heads, kHd});
    mv_ = OwnedTensor(act_, {frame_tokens_, cache_frames_, c.heads, kHd});
  }
  kk_ = OwnedTensor(act_, {1, cache_frames_, c.heads, kHd});
  kv_cache_ = OwnedTensor(act_, {1, cache_frames_, c.heads, kHd});
  mouse_ring_ = wan::KvRing(cache_frames_);
  kb_ring_ = wan::KvRing(cache_frames_);
}

void WanActionModule::norm(Tensor& x) {
  Tensor rows = x.reshape({x.numel() / kHd, kHd});
  if (act_ == DType::BF16) {
    // The reference's bf16 arithmetic, every op rounded.
    backend_->rms_norm_stepwise(rows, kNormEps, rows);
  } else {
    backend_->rms_norm(rows, Tensor{}, kNormEps, rows);
  }
}

void WanActionModule::rope(Tensor& x, int64_t start_frame) {
  const int64_t f = x.dim(1);
  // rot(x0, x1) = (-x1, x0) with equal cos/sin on both lanes of a pair is
  // the interleaved rotation of the backend's rope ops.
  std::vector<float> cos, sin;
  wan::action_rope_pair_tables(f, start_frame, cos, sin);
  const Tensor ct = Tensor::view(cos.data(), DType::F32, Shape{f, kHd / 2});
  const Tensor st = Tensor::view(sin.data(), DType::F32, Shape{f, kHd / 2});
  if (act_ == DType::BF16) {
    // x * cos + rotate(x) * sin as the reference's fp32 ops, then bf16.
    backend_->rope_unfused(x, ct, st, x);
  } else {
    backend_->rope(x, ct, st, x);
  }
}

std::pair<Tensor, Tensor> WanActionModule::write_cache(wan::KvRing& ring, OwnedTensor& kc,
                                                       OwnedTensor& vc, const Tensor& k,
                                                       const Tensor& v, int64_t start_frame) {
  const int64_t f = k.dim(1), b = kc.t.dim(0), l = kc.t.dim(1);
  const wan::KvRingStep step = ring.advance(start_frame + f, f);
  const size_t row = static_cast<size_t>(cfg_.heads * kHd) * dtype_size(act_);
  if (step.rolled > 0) {
    const ProfileScope scope(*backend_, "action.kv_roll");
    for (OwnedTensor* cache : {&kc, &vc}) {
      auto* base = static_cast<char*>(cache->t.data);
      for (int64_t i = 0; i < b; ++i) {  // left shift within each sequence
        char* seq = base + static_cast<size_t>(i * l) * row;
        std::memmove(seq, seq + static_cast<size_t>(step.evicted) * row,
                     static_cast<size_t>(step.rolled) * row);
      }
    }
  }
  Tensor kw = kc.t.slice(1, step.write_begin, f), vw = vc.t.slice(1, step.write_begin, f);
  backend_->copy(k, kw);
  backend_->copy(v, vw);
  const int64_t win = step.attend_end - step.attend_begin;
  return {kc.t.slice(1, step.attend_begin, win), vc.t.slice(1, step.attend_begin, win)};
}

Status WanActionModule::forward(Tensor& x, const Tensor& keyboard, const Tensor& mouse,
                                int64_t start_frame, const Tap& tap) {
  const WanActionConfig& c = cfg_;
  const int64_t f = frames_, s = frame_tokens_, n = f * s, h = c.heads,
                win = wan::kActionWindowFrames;
  FLICK_CHECK(x.shape == Shape({n, c.dim}) && x.dtype == act_ && x.is_contiguous());
  auto is_float = [](const Tensor& t) { return t.dtype == DType::F32 || t.dtype == DType::BF16; };
  if (keyboard.ndim() != 2 || keyboard.dim(1) != c.keyboard_dim || !is_float(keyboard))
    return invalid_input("action module: expected a keyboard track [frames, " +
                         std::to_string(c.keyboard_dim) + "], got " + keyboard.str());
  if (c.has_mouse() && (mouse.ndim() != 2 || mouse.dim(1) != c.mouse_dim || !is_float(mouse)))
    return invalid_input("action module: expected a mouse track [frames, " +
                         std::to_string(c.mouse_dim) + "], got " + mouse.str());
  Backend& be = *backend_;
  auto emit = [&](std::string_view name, const Tensor& v) {
    if (tap) tap("act." + std::string(name), v);
  };
  // Raw windows of every latent of the call, in F32: [F, 12 * C].
  auto windows = [&](const Tensor& track, int64_t channels) -> Expected<std::vector<float>> {
    const ProfileScope scope(be, "action.windows");
    std::vector<float> all(static_cast<size_t>(track.numel()));
    OwnedTensor tf(DType::F32, track.shape);
    be.copy(track, tf.t);
    std::copy(tf.t.ptr<float>(), tf.t.ptr<float>() + track.numel(), all.begin());
    std::vector<float> out(static_cast<size_t>(f * win * channels));
    for (int64_t t = 0; t < f; ++t)
      FLICK_TRY(wan::gather_action_window<float>(
          all, channels, start_frame + t,
          std::span<float>(out).subspan(static_cast<size_t>(t * win * channels),
                                        static_cast<size_t>(win * channels))));
    return out;
  };
  // Both windows first: a bad track fails before any state changes.
  FLICK_ASSIGN_OR_RETURN(std::vector<float> kw, windows(keyboard, c.keyboard_dim));
  std::vector<float> mw;
  if (c.has_mouse()) {
    FLICK_ASSIGN_OR_RETURN(mw, windows(mouse, c.mouse_dim));
  }
  Tensor proj = arena_->get(proj_);
  const Tensor x_fs = x.reshape({f, s, c.dim});

  // ---- mouse branch ----
  if (c.has_mouse()) {
    const int64_t mwidth = win * c.mouse_dim;
    Tensor in = arena_->get(m_in_);  // [S, F, dim + 12 * mouse_dim]
    Tensor in_x = in.slice(2, 0, c.dim);
    be.copy(x_fs.permute({1, 0, 2}), in_x);
    // The same [F, 12 * mouse_dim] windows beside every token: one copy from
    // a view repeating them along S (stride 0).
    Tensor mw_t = Tensor::view(mw.data(), DType::F32, Shape{1, f, mwidth});
    mw_t.shape[0] = s;
    mw_t.strides[0] = 0;
    Tensor in_m = in.slice(2, c.dim, mwidth);
    be.copy(mw_t, in_m);
    emit("mouse_in", in);
    Tensor in2 = in.reshape({n, c.dim + mwidth}), hid = arena_->get(m_h_), z = arena_->get(m_z_);
    // GELU of the bf16-rounded linear output, as the reference computes it.
    be.linear(in2, *mouse_1_, hid, Activation::RoundGeluTanh);
    be.linear(hid, *mouse_2_, z, Activation::None);
    be.layer_norm(z, mouse_ln_w_, mouse_ln_b_, kLnEps, z);
    emit("mouse_mlp", z.reshape({s, f, c.mouse_hidden}));
    Tensor qkv = arena_->get(m_qkv_);  // [S, F, 3, H, 64]
    Tensor qkv2 = qkv.reshape({n, 3 * c.attn_width});
    be.linear(z, *t_qkv_, qkv2, Activation::None);
    Tensor q = arena_->get(m_q_), k = arena_->get(m_k_), v = arena_->get(m_v_);
    be.copy(qkv.select(2, 0), q);
    be.copy(qkv.select(2, 1), k);
    be.copy(qkv.select(2, 2), v);
    for (auto [t, name] : {std::pair{&q, "q"}, std::pair{&k, "k"}}) {
      norm(*t);
      emit(std::string("mouse_") + name + "_norm", *t);
      rope(*t, start_frame);
      emit(std::string("mouse_") + name + "_rope", *t);
    }
    auto [kwin, vwin] = write_cache(mouse_ring_, mk_, mv_, k, v, start_frame);
    emit("mouse_kwin", kwin);
    emit("mouse_vwin", vwin);
    Tensor attn = arena_->get(m_attn_);  // [S, F, H, 64]
    be.attention(q, kwin, vwin, attn, AttentionParams{});
    emit("mouse_attn", attn);
    Tensor attn_fs = arena_->get(m_attn_fs_);
    be.copy(attn.permute({1, 0, 2, 3}), attn_fs);
    be.linear(attn_fs.reshape({n, c.attn_width}), *proj_mouse_, proj, Activation::None);
    emit("mouse_proj", proj.reshape({1, n, c.dim}));
    be.add(x, proj, x);
  }

  // ---- keyboard branch ----
  Tensor track = arena_->get(kb_track_);  // [F * 12, Kd] time-major windows
  be.copy(Tensor::view(kw.data(), DType::F32, track.shape), track);
  // The embedding is per raw frame, so embedding the gathered windows equals
  // gathering the embedded track.
  Tensor eh = arena_->get(kb_h_), e = arena_->get(kb_e_);
  if (act_ == DType::BF16) {
    be.linear(track, *kb_1_, eh, Activation::None);
    be.silu(eh, eh);
  } else {
    be.linear(track, *kb_1_, eh, Activation::Silu);
  }
  be.linear(eh, *kb_2_, e, Activation::None);
  const Tensor window = e.reshape({f, win * c.keyboard_hidden});
  emit("kb_window", window.reshape({1, f, win * c.keyboard_hidden}));
  Tensor kvt = arena_->get(kb_kv_);  // [F, 2, H, 64]
  Tensor kv2 = kvt.reshape({f, 2 * c.attn_width});
  be.linear(window, *kv_, kv2, Activation::None);
  emit("kb_kv", kv2.reshape({1, f, 2 * c.attn_width}));
  Tensor k = arena_->get(kb_k_), v = arena_->get(kb_v_);
  Tensor k3 = k.reshape({f, h, kHd}), v3 = v.reshape({f, h, kHd});
  be.copy(kvt.select(1, 0), k3);
  be.copy(kvt.select(1, 1), v3);
  norm(k);
  emit("kb_k_norm", k);
  rope(k, start_frame);
  emit("kb_k_rope", k);

  emit("kb_q_in", x.reshape({1, n, c.dim}));
  Tensor q = arena_->get(kb_q_);  // [F, S, H, 64]
  Tensor q2 = q.reshape({n, c.attn_width});
  be.linear(x, *q_, q2, Activation::None);
  norm(q);
  emit("kb_q_norm", q.reshape({1, n, h, kHd}));
  Tensor q4 = q.reshape({1, f, s * h, kHd});  // every token of frame t at position t
  rope(q4, start_frame);
  emit("kb_q_rope", q.permute({1, 0, 2, 3}));

  auto [kwin, vwin] = write_cache(kb_ring_, kk_, kv_cache_, k, v, start_frame);
  emit("kb_kwin", kwin);
  emit("kb_vwin", vwin);
  Tensor attn = arena_->get(kb_attn_);  // [F, S, H, 64]
  Tensor attn4 = attn.reshape({1, n, h, kHd});
  be.attention(q.reshape({1, n, h, kHd}), kwin, vwin, attn4, AttentionParams{});
  emit("kb_attn", attn.permute({1, 0, 2, 3}));
  be.linear(attn.reshape({n, c.attn_width}), *proj_kb_, proj, Activation::None);
  emit("kb_proj", proj.reshape({1, n, c.dim}));
  be.add(x, proj, x);
  return ok_status();
}

}  // namespace flick
