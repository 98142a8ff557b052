// Input packing of FramePack's DiT (process_input_hidden_states,
// hunyuan_video_packed.py:839-896): the noisy latents and the clean latents
// at three scales become one token sequence with its RoPE tables.
//
//   stream    embedder (Conv3d, kernel = stride)   RoPE
//   noisy     x_embedder.proj        (1, 2, 2)     grid(latent_indices, h, w)
//   clean 1x  clean_x_embedder.proj   (1, 2, 2)     grid(clean_latent_indices)
//   clean 2x  clean_x_embedder.proj_2x (2, 4, 4)    avgpool2(pad(grid(2x indices)))
//   clean 4x  clean_x_embedder.proj_4x (4, 8, 8)    avgpool4(pad(grid(4x indices)))
//
// with h = H/2, w = W/2 of the noisy latents for every stream. The 2x / 4x
// latents are replicate-padded at the end of each dim to a multiple of the
// kernel first (pad_for_3d_conv). Token order: [4x | 2x | 1x | noisy], each
// row-major (t, y, x); the noisy stream is last, so the head keeps the last
// T*h*w tokens. Clean latents are cast to the activation dtype first
// (`clean_latents.to(hidden_states)`).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "models/hunyuan/framepack_dit_common.h"
#include "models/hunyuan/framepack_dit_config.h"
#include "models/hunyuan/framepack_dit_rope.h"

namespace flick::hunyuan {

// One latent stream: [1, 16, T, H, W] (F32 or BF16) and the frame index of
// each of its T frames. An empty tensor = the stream is absent.
struct DitLatentStream {
  Tensor latents;
  std::vector<int64_t> indices;
};

struct DitPackInputs {
  DitLatentStream noisy;  // indices may be empty: 0 .. T-1 (the reference's default)
  DitLatentStream clean, clean_2x, clean_4x;
};

struct DitPacked {
  OwnedTensor x;         // [N, D] activation dtype
  OwnedTensor cos, sin;  // F32 [N, head_dim / 2]
  int64_t noisy_tokens = 0;
  int64_t frames = 0, h = 0, w = 0;  // the noisy patch grid
};

class DitPatchEmbedders {
 public:
  static Expected<DitPatchEmbedders> load(const WeightView& model, const FramePackDitConfig& c,
                                          const DitRun& run);
  // Validates the streams (shapes, index counts, same H x W) and packs them.
  // Taps "packed", "rope_cos", "rope_sin".
  Expected<DitPacked> pack(const DitPackInputs& in, const DitTap& tap = {}) const;

 private:
  // Embeds latents [1, 16, T, H, W] with kernel (kt, k, k), replicate-padded
  // first, into the rows of x.
  void embed(const Tensor& latents, const PackedLinear& proj, int64_t kt, int64_t k,
             Tensor& x) const;

  FramePackDitConfig cfg_;
  DitRun run_;
  std::unique_ptr<PackedLinear> x_, clean_, clean_2x_, clean_4x_;
};

}  // namespace flick::hunyuan
