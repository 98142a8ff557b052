// The down blocks of the encoder and the up blocks of the decoder
// (HunyuanVideoDownBlock3D AKHV:287-347, HunyuanVideoUpBlock3D :350-410) and
// which of them resample time and space (AKHV:446-455, :574-583).
//
// With temporal_compression_ratio 4 and n levels (block_out_channels), level
// i resamples space iff i < log2(spatial ratio), time iff
// i >= n - 1 - log2(temporal ratio) and it is not the last level. The
// released config (4 levels, 8x / 4x): encoder strides (1,2,2), (2,2,2),
// (2,2,2), none; decoder factors (2,2,2), (2,2,2), (1,2,2), none. [P] With
// fewer than 3 levels these rules compress less than the configured ratios
// (which the tiling arithmetic still uses), as the reference does.
//
// DownsampleCausal3D (:124-141): a causal 3^3 conv C -> C with stride
// (st, 2, 2) after the replicate padding: T' = (T - 1) / st + 1.
// UpsampleCausal3D (:82-121): frame 0 nearest-upsampled in space only, the
// other frames nearest (ft, 2, 2), concatenated in time, then a causal 3^3
// conv: T' = 1 + ft (T - 1).
#pragma once

#include <array>
#include <vector>

#include "models/hunyuan_vae/hunyuan_vae_resnet.h"

namespace flick::hunyuan_vae {

struct Resample {
  bool spatial = false, temporal = false;
  bool any() const { return spatial || temporal; }
  // (t, h, w) strides of a downsampler / factors of an upsampler.
  std::array<int64_t, 3> factors() const {
    return {temporal ? 2 : 1, spatial ? 2 : 1, spatial ? 2 : 1};
  }
};
// Level i of `levels` (both the encoder's down block i and the decoder's up
// block i, which the reference computes with the same rules). An error for
// ratios the reference rejects (temporal other than 4 / 8; the decoder only
// has 4).
Expected<Resample> encoder_resample(int64_t i, int64_t levels, int64_t spatial_ratio,
                                    int64_t temporal_ratio);
Expected<Resample> decoder_resample(int64_t i, int64_t levels, int64_t spatial_ratio,
                                    int64_t temporal_ratio);

class DownBlock {
 public:
  // v: "down_blocks.<i>."; resnets: layers_per_block.
  static Expected<DownBlock> load(const WeightView& v, Backend& be, const Numerics& num, int64_t in,
                                  int64_t out, int64_t resnets, int64_t groups, Resample rs);
  // Tap "<prefix>res0" after the first resnet.
  OwnedTensor forward(Backend& be, const Tensor& x, const Tap& tap = {},
                      std::string_view prefix = "") const;

 private:
  std::vector<ResnetBlock> resnets_;
  std::unique_ptr<CausalConv3d> down_;
};

class UpBlock {
 public:
  // v: "up_blocks.<i>."; resnets: layers_per_block + 1.
  static Expected<UpBlock> load(const WeightView& v, Backend& be, const Numerics& num, int64_t in,
                                int64_t out, int64_t resnets, int64_t groups, Resample rs);
  // Taps "<prefix>res0" after the first resnet, "<prefix>upsample" after the
  // upsampler.
  OwnedTensor forward(Backend& be, const Tensor& x, const Tap& tap = {},
                      std::string_view prefix = "") const;

 private:
  std::vector<ResnetBlock> resnets_;
  std::unique_ptr<CausalConv3d> up_conv_;
  Resample rs_;
};

// The nearest upsampling of UpsampleCausal3D: x [1, C, T, H, W] ->
// [1, C, 1 + ft (T - 1), fs H, fs W] (frame 0 only in space).
OwnedTensor upsample_causal(Backend& be, const Tensor& x, int64_t ft, int64_t fs);

}  // namespace flick::hunyuan_vae
