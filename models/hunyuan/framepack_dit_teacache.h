// TeaCache of FramePack's DiT (hunyuan_video_packed.py:822-830, 950-995),
// the demo's default ("Use TeaCache", demo_gradio.py:218-221): lossy, off
// for parity. State of one section (initialize_teacache(num_steps)), fed one
// call per sampler step (the counter assumes cfg = 1):
//
//   mod = transformer_blocks[0].norm1(x, temb)[0]     // modulated input, image tokens
//   call 0 and call num_steps-1 of a cycle run in full; otherwise
//     rel  = mean|mod - prev| / mean|prev|             // tensors in the run dtype,
//                                                      //  each op rounded, then .item()
//     acc += poly(rel)  (float64; 733.226, -401.132, 67.5869, -3.14988, 0.0961238)
//     run in full iff acc >= rel_l1_thresh (then acc = 0)
//   full run: residual = x_after_all_blocks - x_before; skipped: x += residual
#pragma once

#include <cstdint>

#include "models/hunyuan/framepack_dit_common.h"

namespace flick::hunyuan {

class DitTeaCache {
 public:
  // initialize_teacache(enable_teacache=True, num_steps, rel_l1_thresh).
  explicit DitTeaCache(int64_t num_steps = 25, double rel_l1_thresh = 0.15);

  // Decides one call from its modulated input [Nx, D] (kept for the next
  // call) and advances the counter: true = run the blocks.
  Expected<bool> should_calc(const DitRun& run, const Tensor& modulated);
  // After a full run: residual = x_out - x_in (rounded as the reference's
  // subtraction).
  void store_residual(const DitRun& run, const Tensor& x_out, const Tensor& x_in);
  // A skipped call: x += residual.
  void apply_residual(const DitRun& run, Tensor& x) const;

  double accumulated() const { return acc_; }
  double last_rel_l1() const { return last_rel_; }
  int64_t counter() const { return cnt_; }

 private:
  int64_t num_steps_;
  double thresh_;
  int64_t cnt_ = 0;
  double acc_ = 0, last_rel_ = 0;
  OwnedTensor prev_, residual_;
};

}  // namespace flick::hunyuan
