#include "models/wan/unpatchify.h"

#include "runtime/status.h"

namespace flick::wan {

template <typename T>
void unpatchify(std::span<const T> tokens, int64_t frames, int64_t h, int64_t w, std::span<T> out) {
  const size_t n = static_cast<size_t>(frames * h * w * kPatchDim);
  FLICK_CHECK(frames > 0 && h > 0 && w > 0 && tokens.size() == n && out.size() == n);
  const int64_t oh = h * kPatchH, ow = w * kPatchW;
  for (int64_t f = 0; f < frames; ++f) {
    for (int64_t i = 0; i < h; ++i) {
      for (int64_t j = 0; j < w; ++j) {
        const T* tok = tokens.data() + ((f * h + i) * w + j) * kPatchDim;  // [q, r, c]
        for (int q = 0; q < kPatchH; ++q) {
          for (int r = 0; r < kPatchW; ++r) {
            for (int c = 0; c < kLatentChannels; ++c) {
              const int64_t y = 2 * i + q, x = 2 * j + r;
              out[((c * frames + f) * oh + y) * ow + x] =
                  tok[(q * kPatchW + r) * kLatentChannels + c];
            }
          }
        }
      }
    }
  }
}

template void unpatchify<uint16_t>(std::span<const uint16_t>, int64_t, int64_t, int64_t,
                                   std::span<uint16_t>);
template void unpatchify<float>(std::span<const float>, int64_t, int64_t, int64_t,
                                std::span<float>);

}  // namespace flick::wan
