// AutoencoderKLHunyuanVideo (diffusers 0.33.1), as FramePack uses it
// (diffusers_helper/hunyuan.py vae_encode / vae_decode):
//
//   encode(x)    moments = quant_conv(encoder(x))           // [1, 2L, t, h, w]
//                (_encode AKHV:782-796: temporally tiled above 16 frames,
//                spatially tiled in low-VRAM mode)
//   start_latent(x) = posterior mean * scaling_factor         // spec 1.3
//                FramePack draws latent_dist.sample() from the global torch
//                RNG [P] (not reproducible from the seed); flick takes the
//                mean (the sample's expectation) and documents the deviation.
//   decode(z)    vae.decode(z) (_decode AKHV:829-847): the temporally tiled
//                decode whenever z has more than min_frames / 4 = 4 latent
//                frames (always on), spatially tiled tiles in low-VRAM mode
//   decode_latents(latents) = decode(latents / scaling_factor)  // vae_decode
//
// x: [1, 3, T, H, W] pixels in [-1, 1]; z: [1, L, t, h, w]. Results F32.
// Precision F32 or BF16 (hunyuan_vae_common.h: Numerics).
#pragma once

#include <optional>

#include "models/hunyuan_vae/hunyuan_vae_config.h"
#include "models/hunyuan_vae/hunyuan_vae_decoder.h"
#include "models/hunyuan_vae/hunyuan_vae_encoder.h"
#include "models/hunyuan_vae/hunyuan_vae_tiling.h"

namespace flick {

class HunyuanVae {
 public:
  using Tap = hunyuan_vae::Tap;

  // root: the view holding encoder.*, decoder.*, quant_conv.*,
  // post_quant_conv.*; the halves cfg.has_encoder / has_decoder say.
  static Expected<HunyuanVae> load(const WeightView& root, const HunyuanVaeConfig& cfg,
                                   Backend& backend, Precision precision);

  const HunyuanVaeConfig& config() const { return cfg_; }
  void set_tiling(const HunyuanVaeTiling& t) { tiling_ = t; }
  const HunyuanVaeTiling& tiling() const { return tiling_; }

  // The posterior's parameters (mean, logvar) [1, 2L, (T-1)/4+1, H/8, W/8].
  // Taps (untiled pass only): the encoder's, then "moments".
  Expected<OwnedTensor> encode(const Tensor& x, const Tap& tap = {});
  // The posterior mean [1, L, ...] (DiagonalGaussianDistribution.mode()).
  Expected<OwnedTensor> posterior_mean(const Tensor& x);
  // FramePack's start latent: posterior mean * scaling_factor.
  Expected<OwnedTensor> start_latent(const Tensor& x);

  // vae.decode(z).sample: [1, 3, 4 (t - 1) + 1, 8 h, 8 w], not clamped.
  // Taps (untiled pass only): "post_quant_conv", then the decoder's.
  Expected<OwnedTensor> decode(const Tensor& z, const Tap& tap = {});
  // FramePack's vae_decode: decode(latents / scaling_factor).
  Expected<OwnedTensor> decode_latents(const Tensor& latents);

 private:
  HunyuanVae() = default;
  // One untiled pass (both in the activation dtype).
  OwnedTensor encode_pass(const Tensor& x, const Tap& tap);
  OwnedTensor decode_pass(const Tensor& z, const Tap& tap);
  OwnedTensor encode_spatial_tiles(const Tensor& x);   // tiled_encode
  OwnedTensor encode_temporal_tiles(const Tensor& x);  // _temporal_tiled_encode
  OwnedTensor decode_spatial_tiles(const Tensor& z);   // tiled_decode
  OwnedTensor decode_temporal_tiles(const Tensor& z);  // _temporal_tiled_decode

  HunyuanVaeConfig cfg_;
  HunyuanVaeTiling tiling_;
  Backend* be_ = nullptr;
  hunyuan_vae::Numerics num_;
  std::optional<hunyuan_vae::Encoder> encoder_;
  std::optional<hunyuan_vae::Decoder> decoder_;
  hunyuan_vae::CausalConv3d quant_conv_, post_quant_conv_;
};

}  // namespace flick
