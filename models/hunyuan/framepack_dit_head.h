// The output head of FramePack's DiT (hunyuan_video_packed.py:1017-1030):
//
//   (scale, shift) = norm_out.linear(SiLU(temb))     // [P] scale first (AdaLayerNormContinuous)
//   y = LN(x)(1 + scale) + shift                     // non-affine LN, eps 1e-6
//   y = y[-T*h*w:]                                    // the noisy tokens (LN is per token:
//                                                     //  cropping first is the same)
//   out = proj_out(fp32(y))                          // [P] fp32 weights and maths
//                                                     //  (high_quality_fp32_output_for_inference)
//   unpatchify: b (t h w) (c ph pw) -> b c t (h ph) (w pw)
#pragma once

#include <memory>

#include "models/hunyuan/framepack_dit_common.h"
#include "models/hunyuan/framepack_dit_config.h"

namespace flick::hunyuan {

class DitOutputHead {
 public:
  // `v` = the checkpoint root (norm_out.linear, proj_out).
  static Expected<DitOutputHead> load(const WeightView& v, const FramePackDitConfig& c,
                                      const DitRun& run);
  // x: the noisy tokens [T*h*w, D]; returns F32 [1, out_channels, T, 2h, 2w].
  // Taps "norm_out" (the modulated LN, before the fp32 cast).
  OwnedTensor forward(const Tensor& x, const Tensor& temb_silu, int64_t frames, int64_t h,
                      int64_t w, const DitTap& tap = {}) const;

 private:
  FramePackDitConfig cfg_;
  DitRun run_;
  std::unique_ptr<PackedLinear> mod_, proj_;
};

}  // namespace flick::hunyuan
