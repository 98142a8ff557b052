#include "models/hunyuan_vae/hunyuan_vae.h"

#include <string>
#include <utility>
#include <vector>

namespace flick {

using hunyuan_vae::blend;
using hunyuan_vae::frames;

namespace {

OwnedTensor to_f32(Backend& be, const Tensor& x) {
  return hunyuan_vae::contiguous_copy(be, x, DType::F32);
}

Status check_input(const Tensor& x, int64_t channels, const char* what) {
  if (x.ndim() != 5 || x.dim(0) != 1 || x.dim(1) != channels || x.dim(2) < 1 || x.dim(3) < 1 ||
      x.dim(4) < 1 || (x.dtype != DType::F32 && x.dtype != DType::BF16))
    return invalid_input(std::string(what) + ": expected F32 or BF16 [1, " +
                         std::to_string(channels) + ", T, H, W], got " + x.str());
  return Status();
}

// Copies the [.., :rows, :cols] corner of `tile` to y at (.., y0, x0).
void place(Backend& be, const Tensor& tile, Tensor& y, int64_t t0, int64_t y0, int64_t x0,
           int64_t t, int64_t rows, int64_t cols) {
  Tensor dst = y.slice(2, t0, t).slice(3, y0, rows).slice(4, x0, cols);
  be.copy(tile.slice(2, 0, t).slice(3, 0, rows).slice(4, 0, cols), dst);
}

}  // namespace

Expected<HunyuanVae> HunyuanVae::load(const WeightView& root, const HunyuanVaeConfig& cfg,
                                      Backend& backend, Precision precision) {
  if (precision != Precision::F32 && precision != Precision::BF16)
    return invalid_input(std::string("HunyuanVae: precision ") + precision_name(precision) +
                         ": expected F32 or BF16");
  HunyuanVae v;
  v.cfg_ = cfg;
  v.be_ = &backend;
  v.num_ = hunyuan_vae::Numerics::of(precision);
  if (cfg.has_encoder) {
    FLICK_ASSIGN_OR_RETURN(hunyuan_vae::Encoder e,
                           hunyuan_vae::Encoder::load(root.sub("encoder"), cfg, backend, v.num_));
    v.encoder_ = std::move(e);
    FLICK_ASSIGN_OR_RETURN(
        v.quant_conv_, hunyuan_vae::CausalConv3d::load_pointwise(root, "quant_conv", backend,
                                                                 v.num_, 2 * cfg.latent_channels));
  }
  if (cfg.has_decoder) {
    FLICK_ASSIGN_OR_RETURN(hunyuan_vae::Decoder d,
                           hunyuan_vae::Decoder::load(root.sub("decoder"), cfg, backend, v.num_));
    v.decoder_ = std::move(d);
    FLICK_ASSIGN_OR_RETURN(v.post_quant_conv_,
                           hunyuan_vae::CausalConv3d::load_pointwise(
                               root, "post_quant_conv", backend, v.num_, cfg.latent_channels));
  }
  return v;
}

// ---- encode ----

OwnedTensor HunyuanVae::encode_pass(const Tensor& x, const Tap& tap) {
  const OwnedTensor h = encoder_->forward(*be_, x, tap);
  OwnedTensor m = quant_conv_.forward(*be_, h.t);
  hunyuan_vae::tap_if(tap, "moments", m.t);
  return m;
}

// tiled_encode (AKHV:899-947): pixel tiles min x min at stride, each encoded
// whole; latent tiles blended in place row-major (errata 3: a tile blends
// with its above and left neighbours after their own blends), cropped to the
// latent stride, then the whole cropped to H / 8 x W / 8.
OwnedTensor HunyuanVae::encode_spatial_tiles(const Tensor& x) {
  const HunyuanVaeTiling& tl = tiling_;
  const int64_t sr = cfg_.spatial_ratio, hh = x.dim(3), ww = x.dim(4);
  const int64_t lmh = tl.min_height / sr, lmw = tl.min_width / sr;
  const int64_t lsh = tl.stride_height / sr, lsw = tl.stride_width / sr;
  std::vector<std::vector<OwnedTensor>> rows;
  for (int64_t i = 0; i < hh; i += tl.stride_height) {
    std::vector<OwnedTensor>& row = rows.emplace_back();
    for (int64_t j = 0; j < ww; j += tl.stride_width) {
      const Tensor tile = x.slice(3, i, std::min(tl.min_height, hh - i))
                              .slice(4, j, std::min(tl.min_width, ww - j));
      row.push_back(encode_pass(tile, {}));
    }
  }
  const Tensor& first = rows[0][0].t;
  OwnedTensor y(first.dtype, Shape{1, first.dim(1), first.dim(2), hh / sr, ww / sr});
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t c = 0; c < rows[r].size(); ++c) {
      Tensor& tile = rows[r][c].t;
      if (r > 0) blend(*be_, rows[r - 1][c].t, tile, 3, lmh - lsh);
      if (c > 0) blend(*be_, rows[r][c - 1].t, tile, 4, lmw - lsw);
      const int64_t y0 = static_cast<int64_t>(r) * lsh, x0 = static_cast<int64_t>(c) * lsw;
      if (y0 >= y.t.dim(3) || x0 >= y.t.dim(4)) continue;  // cropped away
      place(*be_, tile, y.t, 0, y0, x0, tile.dim(2), std::min({lsh, tile.dim(3), y.t.dim(3) - y0}),
            std::min({lsw, tile.dim(4), y.t.dim(4) - x0}));
    }
  }
  return y;
}

// _temporal_tiled_encode (AKHV:1007-1036): frame tiles [i, i + min + 1) at
// stride, the later ones without their first latent, blended over
// (min - stride) / 4 latents, cropped to stride / 4 (+1 for the first).
OwnedTensor HunyuanVae::encode_temporal_tiles(const Tensor& x) {
  const HunyuanVaeTiling& tl = tiling_;
  const int64_t tr = cfg_.temporal_ratio, t = x.dim(2);
  const int64_t latent_t = (t - 1) / tr + 1;
  const int64_t lmt = tl.min_frames / tr, lst = tl.stride_frames / tr, ext = lmt - lst;
  std::vector<OwnedTensor> row;
  std::vector<Tensor> views;  // row[i] without its first latent for i > 0
  for (int64_t i = 0; i < t; i += tl.stride_frames) {
    const Tensor tile = frames(x, i, std::min(tl.min_frames + 1, t - i));
    const bool spatial = tl.spatial && (x.dim(3) > tl.min_height || x.dim(4) > tl.min_width);
    row.push_back(spatial ? encode_spatial_tiles(tile) : encode_pass(tile, {}));
    const Tensor& m = row.back().t;
    views.push_back(i > 0 ? frames(m, 1, m.dim(2) - 1) : m);
  }
  std::vector<std::pair<size_t, int64_t>> kept;  // (tile, latents kept)
  int64_t total = 0;
  for (size_t i = 0; i < views.size(); ++i) {
    if (i > 0) blend(*be_, views[i - 1], views[i], 2, ext);
    const int64_t n = std::min(views[i].dim(2), i > 0 ? lst : lst + 1);
    kept.emplace_back(i, n);
    total += n;
  }
  const Tensor& v0 = views[0];
  OwnedTensor y(v0.dtype, Shape{1, v0.dim(1), std::min(total, latent_t), v0.dim(3), v0.dim(4)});
  int64_t t0 = 0;
  for (const auto& [i, n] : kept) {
    const int64_t m = std::min(n, y.t.dim(2) - t0);
    if (m > 0) place(*be_, views[i], y.t, t0, 0, 0, m, v0.dim(3), v0.dim(4));
    t0 += n;
  }
  return y;
}

Expected<OwnedTensor> HunyuanVae::encode(const Tensor& x, const Tap& tap) {
  if (!encoder_) return invalid_input("HunyuanVae::encode: the checkpoint has no encoder");
  FLICK_TRY(check_input(x, cfg_.in_channels, "HunyuanVae::encode: x"));
  const HunyuanVaeTiling& tl = tiling_;
  OwnedTensor m;
  if (tl.framewise_encode && x.dim(2) > tl.min_frames) {  // AKHV:785
    m = encode_temporal_tiles(x);
  } else if (tl.spatial && (x.dim(4) > tl.min_width || x.dim(3) > tl.min_height)) {  // :788
    m = encode_spatial_tiles(x);
  } else {
    m = encode_pass(x, tap);
  }
  return to_f32(*be_, m.t);
}

Expected<OwnedTensor> HunyuanVae::posterior_mean(const Tensor& x) {
  FLICK_ASSIGN_OR_RETURN(OwnedTensor m, encode(x));
  OwnedTensor mean(DType::F32, Shape{1, cfg_.latent_channels, m.t.dim(2), m.t.dim(3), m.t.dim(4)});
  be_->copy(m.t.slice(1, 0, cfg_.latent_channels), mean.t);
  return mean;
}

Expected<OwnedTensor> HunyuanVae::start_latent(const Tensor& x) {
  FLICK_ASSIGN_OR_RETURN(OwnedTensor mean, posterior_mean(x));
  be_->affine(mean.t, cfg_.scaling_factor, 0.f, mean.t);  // latents * scaling_factor
  return mean;
}

// ---- decode ----

OwnedTensor HunyuanVae::decode_pass(const Tensor& z, const Tap& tap) {
  const OwnedTensor h = post_quant_conv_.forward(*be_, z);
  hunyuan_vae::tap_if(tap, "post_quant_conv", h.t);
  return decoder_->forward(*be_, h.t, tap);
}

// tiled_decode (AKHV:949-1005): latent tiles min/8 x min/8 at stride/8, each
// decoded whole; pixel tiles blended in place row-major over (min - stride)
// pixels (errata 3), cropped to the stride, the whole cropped to 8h x 8w.
OwnedTensor HunyuanVae::decode_spatial_tiles(const Tensor& z) {
  const HunyuanVaeTiling& tl = tiling_;
  const int64_t sr = cfg_.spatial_ratio, h = z.dim(3), w = z.dim(4);
  const int64_t lmh = tl.min_height / sr, lmw = tl.min_width / sr;
  const int64_t lsh = tl.stride_height / sr, lsw = tl.stride_width / sr;
  std::vector<std::vector<OwnedTensor>> rows;
  for (int64_t i = 0; i < h; i += lsh) {
    std::vector<OwnedTensor>& row = rows.emplace_back();
    for (int64_t j = 0; j < w; j += lsw) {
      const Tensor tile = z.slice(3, i, std::min(lmh, h - i)).slice(4, j, std::min(lmw, w - j));
      row.push_back(decode_pass(tile, {}));
    }
  }
  const Tensor& first = rows[0][0].t;
  OwnedTensor y(first.dtype, Shape{1, first.dim(1), first.dim(2), h * sr, w * sr});
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t c = 0; c < rows[r].size(); ++c) {
      Tensor& tile = rows[r][c].t;
      if (r > 0) blend(*be_, rows[r - 1][c].t, tile, 3, tl.min_height - tl.stride_height);
      if (c > 0) blend(*be_, rows[r][c - 1].t, tile, 4, tl.min_width - tl.stride_width);
      const int64_t y0 = static_cast<int64_t>(r) * tl.stride_height;
      const int64_t x0 = static_cast<int64_t>(c) * tl.stride_width;
      if (y0 >= y.t.dim(3) || x0 >= y.t.dim(4)) continue;
      place(*be_, tile, y.t, 0, y0, x0, tile.dim(2),
            std::min({tl.stride_height, tile.dim(3), y.t.dim(3) - y0}),
            std::min({tl.stride_width, tile.dim(4), y.t.dim(4) - x0}));
    }
  }
  return y;
}

// _temporal_tiled_decode (AKHV:1038-1072): latent tiles [i, i + min/4 + 1)
// at stride/4 (5 latents at 3 by default), each decoded whole (spatially
// tiled when enabled and a side exceeds min/8 latents); every later tile
// drops its first frame and blends its first min - stride (4) frames, in
// place, with the previous tile's last ones (weights k / 4); kept: stride + 1
// frames of tile 0, stride of the others, then 4 (t - 1) + 1 frames in all.
OwnedTensor HunyuanVae::decode_temporal_tiles(const Tensor& z) {
  const HunyuanVaeTiling& tl = tiling_;
  const int64_t sr = cfg_.spatial_ratio, tr = cfg_.temporal_ratio, t = z.dim(2);
  const int64_t sample_t = (t - 1) * tr + 1;
  const int64_t lmh = tl.min_height / sr, lmw = tl.min_width / sr;
  const int64_t lmt = tl.min_frames / tr, lst = tl.stride_frames / tr;
  const int64_t ext = tl.min_frames - tl.stride_frames;
  std::vector<OwnedTensor> row;
  std::vector<Tensor> views;
  for (int64_t i = 0; i < t; i += lst) {
    const Tensor tile = frames(z, i, std::min(lmt + 1, t - i));
    const bool spatial = tl.spatial && (tile.dim(4) > lmw || tile.dim(3) > lmh);
    row.push_back(spatial ? decode_spatial_tiles(tile) : decode_pass(tile, {}));
    const Tensor& d = row.back().t;
    views.push_back(i > 0 ? frames(d, 1, d.dim(2) - 1) : d);
  }
  std::vector<int64_t> kept;
  int64_t total = 0;
  for (size_t i = 0; i < views.size(); ++i) {
    if (i > 0) blend(*be_, views[i - 1], views[i], 2, ext);
    kept.push_back(std::min(views[i].dim(2), i > 0 ? tl.stride_frames : tl.stride_frames + 1));
    total += kept.back();
  }
  const Tensor& v0 = views[0];
  OwnedTensor y(v0.dtype, Shape{1, v0.dim(1), std::min(total, sample_t), v0.dim(3), v0.dim(4)});
  int64_t t0 = 0;
  for (size_t i = 0; i < views.size(); ++i) {
    const int64_t m = std::min(kept[i], y.t.dim(2) - t0);
    if (m > 0) place(*be_, views[i], y.t, t0, 0, 0, m, v0.dim(3), v0.dim(4));
    t0 += kept[i];
  }
  return y;
}

Expected<OwnedTensor> HunyuanVae::decode(const Tensor& z, const Tap& tap) {
  if (!decoder_) return invalid_input("HunyuanVae::decode: the checkpoint has no decoder");
  FLICK_TRY(check_input(z, cfg_.latent_channels, "HunyuanVae::decode: z"));
  const HunyuanVaeTiling& tl = tiling_;
  const int64_t sr = cfg_.spatial_ratio;
  const int64_t lmh = tl.min_height / sr;
  // [P] 0.33.1 computes the width threshold from the stride (AKHV:832).
  const int64_t lmw = tl.stride_width / sr;
  const int64_t lmt = tl.min_frames / cfg_.temporal_ratio;
  OwnedTensor y;
  if (tl.framewise_decode && z.dim(2) > lmt) {  // AKHV:835
    y = decode_temporal_tiles(z);
  } else if (tl.spatial && (z.dim(4) > lmw || z.dim(3) > lmh)) {  // AKHV:838
    y = decode_spatial_tiles(z);
  } else {
    y = decode_pass(z, tap);
  }
  return to_f32(*be_, y.t);
}

Expected<OwnedTensor> HunyuanVae::decode_latents(const Tensor& latents) {
  OwnedTensor z(DType::F32, latents.shape);
  // latents / scaling_factor (vae_decode): as a product with the fp32
  // reciprocal, within 1 ulp of the reference's division.
  be_->affine(latents, 1.f / cfg_.scaling_factor, 0.f, z.t);
  return decode(z.t);
}

}  // namespace flick
