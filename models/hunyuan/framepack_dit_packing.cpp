#include "models/hunyuan/framepack_dit_packing.h"

#include <numeric>
#include <string>

namespace flick::hunyuan {
namespace {

int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

// A view repeating `src` (size 1 in `dim`) `n` times along dim (stride 0).
Tensor repeat_along(Tensor src, int dim, int64_t n) {
  src.shape[dim] = n;
  src.strides[static_cast<size_t>(dim)] = 0;
  return src;
}

}  // namespace

Expected<DitPatchEmbedders> DitPatchEmbedders::load(const WeightView& model,
                                                    const FramePackDitConfig& c,
                                                    const DitRun& run) {
  DitPatchEmbedders m;
  m.cfg_ = c;
  m.run_ = run;
  const int64_t d = c.dim;
  FLICK_ASSIGN_OR_RETURN(
      m.x_, load_dit_patch_conv(model, "x_embedder.proj", d, c.in_channels, 1, 2, 2, run));
  const WeightView ce = model.sub("clean_x_embedder");
  FLICK_ASSIGN_OR_RETURN(m.clean_, load_dit_patch_conv(ce, "proj", d, 16, 1, 2, 2, run));
  FLICK_ASSIGN_OR_RETURN(m.clean_2x_, load_dit_patch_conv(ce, "proj_2x", d, 16, 2, 4, 4, run));
  FLICK_ASSIGN_OR_RETURN(m.clean_4x_, load_dit_patch_conv(ce, "proj_4x", d, 16, 4, 8, 8, run));
  return m;
}

void DitPatchEmbedders::embed(const Tensor& latents, const PackedLinear& proj, int64_t kt,
                              int64_t k, Tensor& x) const {
  Backend& be = *run_.be;
  const int64_t c = latents.dim(1), t = latents.dim(2), h = latents.dim(3), w = latents.dim(4);
  const int64_t tp = round_up(t, kt), hp = round_up(h, k), wp = round_up(w, k);
  // pad_for_3d_conv (:62-68): replicate at the end of T, H and W, in the
  // activation dtype. Frame-major [Tp, C, Hp, Wp] so that a group of kt
  // frames is one contiguous block.
  OwnedTensor padded(run_.act(), {tp, c, hp, wp});
  Tensor p = padded.t;
  Tensor inner = p.slice(0, 0, t).slice(2, 0, h).slice(3, 0, w);
  be.copy(latents.select(0, 0).permute({1, 0, 2, 3}), inner);  // [T, C, H, W]
  if (wp > w) {
    Tensor dst = p.slice(0, 0, t).slice(2, 0, h).slice(3, w, wp - w);
    be.copy(repeat_along(p.slice(0, 0, t).slice(2, 0, h).slice(3, w - 1, 1), 3, wp - w), dst);
  }
  if (hp > h) {
    Tensor dst = p.slice(0, 0, t).slice(2, h, hp - h);
    be.copy(repeat_along(p.slice(0, 0, t).slice(2, h - 1, 1), 2, hp - h), dst);
  }
  if (tp > t) {
    Tensor dst = p.slice(0, t, tp - t);
    be.copy(repeat_along(p.slice(0, t - 1, 1), 0, tp - t), dst);
  }
  // Patches (t', y', x' | c, kt, ky, kx): the Conv3d weight's layout, so the
  // conv is one linear.
  const int64_t nt = tp / kt, gh = hp / k, gw = wp / k, cols = c * kt * k * k;
  OwnedTensor patches(run_.act(), {nt * gh * gw, cols});
  for (int64_t g = 0; g < nt; ++g) {
    const Tensor grp =
        p.slice(0, g * kt, kt).reshape({kt, c, gh, k, gw, k}).permute({2, 4, 1, 0, 3, 5});
    Tensor dst = patches.t.slice(0, g * gh * gw, gh * gw).reshape({gh, gw, c, kt, k, k});
    be.copy(grp, dst);
  }
  be.linear(patches.t, proj, x, Activation::None);  // [nt*gh*gw, D]
}

Expected<DitPacked> DitPatchEmbedders::pack(const DitPackInputs& in, const DitTap& tap) const {
  const DitLatentStream& noisy = in.noisy;
  auto bad_latents = [](const Tensor& l) {
    return l.ndim() != 5 || l.dim(0) != 1 || l.dim(1) != 16 || l.dim(2) < 1 ||
           (l.dtype != DType::F32 && l.dtype != DType::BF16);
  };
  if (noisy.latents.empty() || bad_latents(noisy.latents) || noisy.latents.dim(3) % 2 != 0 ||
      noisy.latents.dim(4) % 2 != 0 || noisy.latents.dim(3) < 2 || noisy.latents.dim(4) < 2)
    return invalid_input(
        "FramePack DiT: expected F32/BF16 noisy latents [1, 16, T, H, W] with "
        "even H and W, got " +
        noisy.latents.str());
  const int64_t t = noisy.latents.dim(2), hh = noisy.latents.dim(3), ww = noisy.latents.dim(4);
  std::vector<int64_t> noisy_idx = noisy.indices;
  if (noisy_idx.empty()) {  // :850-851
    noisy_idx.resize(static_cast<size_t>(t));
    std::iota(noisy_idx.begin(), noisy_idx.end(), 0);
  }
  if (static_cast<int64_t>(noisy_idx.size()) != t)
    return invalid_input("FramePack DiT: " + std::to_string(noisy_idx.size()) +
                         " latent indices for " + std::to_string(t) + " noisy frames");
  struct Stream {
    const char* name;
    const DitLatentStream* s;
    const PackedLinear* proj;
    int64_t kt, k, pool;
  };
  // Prepend order of the reference: 1x, then 2x, then 4x in front.
  const Stream streams[] = {{"clean_latents_4x", &in.clean_4x, clean_4x_.get(), 4, 8, 4},
                            {"clean_latents_2x", &in.clean_2x, clean_2x_.get(), 2, 4, 2},
                            {"clean_latents", &in.clean, clean_.get(), 1, 2, 1}};
  const int64_t gh = hh / 2, gw = ww / 2;
  int64_t n = t * gh * gw;
  const int64_t noisy_tokens = n;
  for (const Stream& s : streams) {
    if (s.s->latents.empty()) continue;
    const Tensor& l = s.s->latents;
    if (bad_latents(l) || l.dim(3) != hh || l.dim(4) != ww)
      return invalid_input(std::string("FramePack DiT: expected F32/BF16 ") + s.name +
                           " [1, 16, T, " + std::to_string(hh) + ", " + std::to_string(ww) +
                           "] (the noisy latents' H x W), got " + l.str());
    if (static_cast<int64_t>(s.s->indices.size()) != l.dim(2))
      return invalid_input(std::string("FramePack DiT: ") + s.name + " has " +
                           std::to_string(l.dim(2)) + " frames but " +
                           std::to_string(s.s->indices.size()) + " indices");
    n += dit_rope_tokens(l.dim(2), gh, gw, s.pool);
  }

  const FramePackDitConfig& c = cfg_;
  const DitRopeSpec rope{c.rope_axes, c.rope_theta};
  DitPacked out;
  out.x = OwnedTensor(run_.act(), {n, c.dim});
  out.cos = OwnedTensor(DType::F32, {n, c.head_dim / 2});
  out.sin = OwnedTensor(DType::F32, {n, c.head_dim / 2});
  out.noisy_tokens = noisy_tokens;
  out.frames = t;
  out.h = gh;
  out.w = gw;
  int64_t row = 0;
  for (const Stream& s : streams) {
    if (s.s->latents.empty()) continue;
    const Tensor& l = s.s->latents;
    const int64_t rows = dit_rope_tokens(l.dim(2), gh, gw, s.pool);
    Tensor x = out.x.t.slice(0, row, rows), cs = out.cos.t.slice(0, row, rows),
           sn = out.sin.t.slice(0, row, rows);
    embed(l, *s.proj, s.kt, s.k, x);
    dit_rope_tables(rope, s.s->indices, gh, gw, s.pool, cs, sn);
    row += rows;
  }
  Tensor x = out.x.t.slice(0, row, noisy_tokens), cs = out.cos.t.slice(0, row, noisy_tokens),
         sn = out.sin.t.slice(0, row, noisy_tokens);
  embed(noisy.latents, *x_, 1, 2, x);
  dit_rope_tables(rope, noisy_idx, gh, gw, 1, cs, sn);
  run_.tap(tap, "packed", out.x.t);
  run_.tap(tap, "rope_cos", out.cos.t);
  run_.tap(tap, "rope_sin", out.sin.t);
  return out;
}

}  // namespace flick::hunyuan
