// The streaming Wan2.1 VAE decoder of Matrix-Game 2.0
// (demo_utils/vae_block3.py: VAEDecoderWrapper + VAEDecoder3d).
//
//   z      = latents / (1 / std) + mean                     // [1, 16, N, h, w]
//   x      = conv2(z)                                       // 1^3 conv, 16 -> 16
//   for each latent i (one at a time, caches persist across calls):
//     x_i  = conv1(x[:, :, i])                              // 16 -> D0, 3^3 causal
//     x_i  = middle: Res, Attn, Res
//     x_i  = upsamples: Res blocks, Up3d / Up2d in checkpoint order
//     out  = head: RMS, SiLU, conv 3^3 -> 3
//   frames = clamp(cat(out), -1, 1)                         // [1, T, 3, 8h, 8w]
//
// Latent 0 of a video gives 1 frame, every later latent 4 (each Up3d skips its
// time conv on the first latent of a video). Weight names are the keys of
// Wan2.1_VAE.pth (`decoder.*`, `conv2.*`); the layer list and channel counts
// are read from the tensor shapes.
//
// Precision F32 runs everything in fp32 (the `fp32.` goldens).
//
// Precision BF16 stands in for the reference's fp16 decoder (the backend has
// no F16 activations; bf16 is what AMX / oneDNN convolve fastest):
//   - weights, biases and norm scales as the reference has them,
//     fp16(bf16(fp16(w))) = bf16(fp16(w)) (inference.py L61, L71, L72);
//   - the latent de-normalisation exactly as the reference's fp16 arithmetic
//     (mean, std in fp16, inv_std = 1/std in fp16, z / inv_std + mean, each
//     op rounded to fp16), conv2 and conv1 (at latent size, 0.02 % of the
//     work) in fp32 on those values, conv2's output rounded to fp16 as the
//     reference's;
//   - every later activation bf16 (3 mantissa bits fewer than fp16), the
//     RMS norms in fp32 with one rounding (NormRounding::Once), convolution
//     accumulators fp32, the head's output fp32 before the clamp.
// On the tiny fixtures (2-8 channel norms) this is 0.06-0.09 relative L2 from
// the reference's frames, under twice the reference's own distance to fp32;
// at the real widths (synthetic weights) 1.3 % from fp32 (tests in
// tests/models/test_wan_vae.cpp: WanVaeDecoderBf16, WanVaeFullWidth).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <variant>
#include <vector>

#include "models/wan_vae/wan_vae_blocks.h"
#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"
#include "runtime/weights/weight_store.h"

namespace flick {

struct WanVaeDecoderConfig {
  int64_t z_dim = 0;        // 16
  int64_t dim = 0;          // conv1 output channels: 384
  int64_t out_dim = 0;      // head input channels: 96
  int64_t upsamples = 0;    // entries of decoder.upsamples: 15
  int64_t temporal_up = 0;  // Up3d count: 2 (4x in time)
  int64_t spatial_up = 0;   // Up2d + Up3d count: 3 (8x in space)

  static Expected<WanVaeDecoderConfig> detect(const WeightView& root);
};

class WanVaeDecoder {
 public:
  // Called with intermediates: "conv2" (per call), and per latent i of the
  // call "l{i}.conv1", "l{i}.middle", "l{i}.up{j}" (after decoder.upsamples.j).
  // The layers after the last temporal upsample run one frame at a time;
  // where a latent gives several frames, their taps are per frame:
  // "l{i}.up{j}.f{k}". Views ([1, C, T, H, W] over channels-last memory, in
  // the activation dtype) are valid during the call only.
  using Tap = std::function<void(std::string_view name, const Tensor& t)>;

  // root: a view holding `decoder.*` and `conv2.*`. precision: F32 or BF16.
  // conv_precision (default: precision): INT8 with BF16 runs the residual
  // blocks' own convolutions in int8 (Precision::INT8 convs: per-channel
  // weights, one dynamic activation scale per call) and everything else as
  // BF16; see load_weights for the layers kept in BF16 and why.
  static Expected<WanVaeDecoder> load(const WeightView& root, Backend& backend, Precision precision,
                                      std::optional<Precision> conv_precision = std::nullopt);

  const WanVaeDecoderConfig& config() const { return cfg_; }
  // mean and 1 / std of the latent normalisation as this precision uses them.
  const WanVaeLatentScale& latent_scale() const { return scale_; }

  // Decodes the next latents of the current video. latents: F32 or BF16
  // [1, z, N, h, w], normalised. Returns F32 [1, T, 3, 8h, 8w] clamped to
  // [-1, 1], T = 4N (+1 - 4 on the first call of a video); valid until the
  // next call.
  Expected<Tensor> decode(const Tensor& latents, const Tap& tap = {});
  // Starts a new video: clears every feature cache.
  void reset();
  // Frees the intermediates (not the feature caches: the video goes on) and
  // the last returned frames; the next decode allocates them again. For the
  // time between two decodes of a long video.
  void release_scratch();
  // reset() and release_scratch(): holds nothing but the weights.
  void release_buffers();

 private:
  using Layer = std::variant<wan_vae::ResidualBlock, wan_vae::Upsample>;

  WanVaeDecoder() = default;
  Status load_weights(const WeightView& root);
  int64_t frames_out(int64_t t) const;
  // One latent [1, z, 1, h, w] (channels-last F32) -> frames [1, 3, T, H, W]
  // written to `out` (F32, any strides).
  void decode_latent(const Tensor& x, Tensor& out, int64_t index, const Tap& tap);

  WanVaeDecoderConfig cfg_;
  Backend* backend_ = nullptr;
  Precision precision_ = Precision::F32;
  Precision conv_precision_ = Precision::F32;  // the residual / upsampling convs
  wan_vae::Numerics num_;
  bool first_ = true;
  int64_t h_ = 0, w_ = 0;  // latent size of the current video
  WanVaeLatentScale scale_;

  wan_vae::CausalConv3d conv2_, conv1_, head_conv_;
  wan_vae::ResidualBlock mid_res0_, mid_res1_;
  wan_vae::AttentionBlock mid_attn_;
  std::vector<Layer> ups_;
  wan_vae::ChannelRmsNorm head_norm_;

  wan_vae::Workspace ws_;
  wan_vae::Scratch z_, zc_, a_, b_, c_, out_;
};

}  // namespace flick
