// HunyuanVideoCausalConv3d (AKHV:49-79): F.pad(x, (kw/2, kw/2, kh/2, kh/2,
// kt-1, 0), mode="replicate") then an nn.Conv3d without padding of its own,
// any stride. Replicate padding on every axis [P]: the first frame repeats
// kt-1 times in front (not zeros), edge pixels repeat left/right/top/bottom.
// Keys: `<prefix>.conv.weight` [O, I, kt, kh, kw], `<prefix>.conv.bias` [O].
//
// Also the plain 1x1x1 nn.Conv3d of quant_conv / post_quant_conv (keys
// `<prefix>.weight`, `<prefix>.bias`): no padding either way.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>

#include "models/hunyuan_vae/hunyuan_vae_common.h"

namespace flick::hunyuan_vae {

class CausalConv3d {
 public:
  // prefix names the HunyuanVideoCausalConv3d module (its `.conv.*` keys).
  // in / out: the channel counts the architecture expects (-1: any).
  static Expected<CausalConv3d> load(const WeightView& v, std::string_view prefix, Backend& be,
                                     const Numerics& num, int64_t in, int64_t out,
                                     std::array<int64_t, 3> stride = {1, 1, 1});
  // A plain nn.Conv3d with a 1x1x1 kernel (`<prefix>.weight`).
  static Expected<CausalConv3d> load_pointwise(const WeightView& v, std::string_view prefix,
                                               Backend& be, const Numerics& num, int64_t channels);

  int64_t in_channels() const { return cin_; }
  int64_t out_channels() const { return cout_; }

  // x: [1, I, T, H, W] (any float dtype, any strides) -> [1, O, T', H', W']
  // in the activation dtype, T' = (T - 1) / st + 1 (the causal padding adds
  // kt - 1 frames), H' = (H - 1) / sh + 1.
  OwnedTensor forward(Backend& be, const Tensor& x) const;
  // The same, freeing x once it is copied into the padded input: a block-sized
  // buffer less at the convolution's peak (x, padded input, output).
  OwnedTensor forward(Backend& be, OwnedTensor&& x) const;

 private:
  std::unique_ptr<PackedConv> conv_;
  int64_t cin_ = 0, cout_ = 0;
  std::array<int64_t, 3> kernel_{1, 1, 1}, stride_{1, 1, 1};
  DType act_ = DType::F32;
};

// y [1, C, T + kt - 1, H + 2 ph, W + 2 pw] = x [1, C, T, H, W] replicate-padded
// (kt - 1 frames in front, ph / pw on both sides). x and y contiguous, same
// dtype.
void replicate_pad(const Tensor& x, Tensor& y, int64_t pt, int64_t ph, int64_t pw);

}  // namespace flick::hunyuan_vae
