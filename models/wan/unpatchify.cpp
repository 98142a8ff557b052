#include "models/wan/unpatchify.h"

#include <string>

#include "runtime/status.h"

namespace flick::wan {

void unpatchify(Backend& be, const Tensor& tokens, int64_t frames, int64_t h, int64_t w,
                Tensor& out) {
  const int64_t n = frames * h * w * kPatchDim;
  FLICK_CHECK(frames > 0 && h > 0 && w > 0 && tokens.numel() == n && out.numel() == n &&
                  tokens.is_contiguous() && out.is_contiguous() && tokens.dtype == out.dtype,
              "unpatchify: tokens " + tokens.str() + " out " + out.str() + " for " +
                  std::to_string(frames) + " x " + std::to_string(h) + " x " + std::to_string(w));
  // tokens as [F, h, w, q, r, c], read in out's order [c, F, h, q, w, r].
  const Tensor from =
      tokens.reshape({frames, h, w, kPatchH, kPatchW, kLatentChannels}).permute({5, 0, 1, 3, 2, 4});
  Tensor to = out.reshape({kLatentChannels, frames, h, kPatchH, w, kPatchW});
  be.copy(from, to);
}

}  // namespace flick::wan
