#include "models/hunyuan/framepack_dit_head.h"

namespace flick::hunyuan {

Expected<DitOutputHead> DitOutputHead::load(const WeightView& v, const FramePackDitConfig& c,
                                            const DitRun& run) {
  DitOutputHead m;
  m.cfg_ = c;
  m.run_ = run;
  FLICK_ASSIGN_OR_RETURN(m.mod_,
                         load_dit_linear(v, "norm_out.linear", 2 * c.dim, c.dim, run, run.kept()));
  // The bf16 module's proj_out upcast to fp32 at the first call (:1021-1024):
  // bf16 values, fp32 maths.
  FLICK_ASSIGN_OR_RETURN(m.proj_, load_dit_linear(v, "proj_out", c.out_channels * 4, c.dim, run,
                                                  Precision::F32, /*round_weight_bf16=*/true));
  return m;
}

OwnedTensor DitOutputHead::forward(const Tensor& x, const Tensor& temb_silu, int64_t frames,
                                   int64_t h, int64_t w, const DitTap& tap) const {
  Backend& be = *run_.be;
  const int64_t n = x.dim(0), d = cfg_.dim, co = cfg_.out_channels;
  FLICK_CHECK(n == frames * h * w, "head: token count");
  const DType act = run_.act();
  OwnedTensor mod(act, {1, 2 * d}), one_plus(act, {1, d}), y(act, {n, d});
  be.linear(temb_silu, *mod_, mod.t, Activation::None);
  be.layer_norm(x, Tensor{}, Tensor{}, FramePackDitConfig::kEps, y.t);
  dit_modulate(run_, y.t, /*shift=*/mod.t.slice(1, d, d), /*scale=*/mod.t.slice(1, 0, d),
               one_plus.t);
  run_.tap(tap, "norm_out", y.t);
  OwnedTensor y32(DType::F32, {n, d}), out(DType::F32, {n, co * 4});
  be.copy(y.t, y32.t);
  be.linear(y32.t, *proj_, out.t, Activation::None);
  // [t, y, x, c, ph, pw] -> [c, t, y, ph, x, pw] (einops rearrange, :1026).
  OwnedTensor video(DType::F32, {1, co, frames, 2 * h, 2 * w});
  Tensor dst = video.t.reshape({co, frames, h, 2, w, 2});
  be.copy(out.t.reshape({frames, h, w, co, 2, 2}).permute({3, 0, 1, 4, 2, 5}), dst);
  return video;
}

}  // namespace flick::hunyuan
