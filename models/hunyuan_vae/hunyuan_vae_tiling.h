// The tiling parameters of AutoencoderKLHunyuanVideo (AKHV:714-730,
// enable_tiling :732-768) and its linear tile blends (blend_v / blend_h /
// blend_t, AKHV:875-897).
#pragma once

#include <cstdint>

#include "models/hunyuan_vae/hunyuan_vae_common.h"

namespace flick {

// Sizes in pixels / frames of the sample (output) space, as the reference's
// tile_sample_* attributes. Defaults are 0.33.1's.
struct HunyuanVaeTiling {
  // enable_tiling(): the spatial tiles of tiled_encode / tiled_decode
  // (FramePack's low-VRAM mode, demo_gradio.py:66-68). Off by default (the
  // high-VRAM mode); the temporal tiles below are always on.
  bool spatial = false;
  int64_t min_height = 256, min_width = 256, min_frames = 16;
  int64_t stride_height = 192, stride_width = 192, stride_frames = 12;
  // use_framewise_{en,de}coding: always true in 0.33.1 (AKHV:709-710).
  bool framewise_encode = true, framewise_decode = true;

  // FramePack's two memory modes (demo_gradio.py:44, :66-68): high VRAM
  // (free memory > 60 GB) keeps the defaults, low VRAM calls enable_tiling()
  // without arguments. [P] Their outputs differ: mirror the mode of the run
  // being reproduced.
  static HunyuanVaeTiling high_vram() { return {}; }
  static HunyuanVaeTiling low_vram() {
    HunyuanVaeTiling t;
    t.spatial = true;
    return t;
  }
};

namespace hunyuan_vae {

// b[..., k, ...] = a[..., n_a - e + k, ...] * (1 - k / e) + b[..., k, ...] * (k / e)
// along `dim` (2: blend_t, 3: blend_v, 4: blend_h) for k < e = min(n_a, n_b,
// extent), in place in b, rounded per op as the reference's (two products
// then a sum, each to b's dtype; the weights k / e are computed in double and
// used as fp32 scalars, as torch's tensor * python-float does).
void blend(Backend& be, const Tensor& a, Tensor& b, int dim, int64_t extent);

}  // namespace hunyuan_vae
}  // namespace flick
