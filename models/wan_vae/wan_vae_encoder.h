// The Wan2.1 VAE encoder of Matrix-Game 2.0 (wan/vae/wanx_vae_src/vae.py:
// Encoder3d + VideoVAE_.encode), chunked over time with feature caches.
//
//   chunks   = [frame 0], [frames 1-4], [5-8], ...        // 1 + 4k frames
//   per chunk: conv1 3 -> D0 (3^3 causal)
//              downsamples: Res blocks, Down2d / Down3d in checkpoint order
//              middle: Res, Attn, Res;  head: RMS, SiLU, conv 3^3 -> 2z
//   mu, _    = conv1(cat(chunks)).chunk(2)                 // 1^3 conv, 2z -> 2z
//   latents  = (mu - mean) * (1 / std)                     // [1, z, 1 + k, h, w]
//
// Weight names are the keys of Wan2.1_VAE.pth (`encoder.*`, `conv1.*`); the
// layer list and channel counts are read from the tensor shapes.
//
// Precision F32 runs everything in fp32 (the `fp32.` goldens). Precision
// BF16 is the reference's bf16 encoder (inference.py L74-77): weights, biases
// and norm scales fp32 -> fp16 -> bf16, the video cast to bf16, bf16
// activations rounded after every op as PyTorch rounds them (the RMS norm's
// |x|, x / |x|, * sqrt(C), * gamma, SiLU each; convolutions accumulate in
// fp32 and round once), latent constants mean = bf16(fp16(mean)) and
// inv_std = bf16(1 / bf16(fp16(std))), z = bf16(bf16(mu - mean) * inv_std).
// The middle attention rounds its probabilities to bf16 before P @ V as
// PyTorch's CPU flash attention does for one block of keys; with more than
// 512 keys (the real 44 x 80 = 3520) PyTorch walks them in blocks of 512
// against a running maximum, which changes which probabilities round which
// way (not reproduced; a bf16-ulp-level difference). On the tiny fixtures
// this is bit-exact up to the middle block and within 0.35 % (rel. L2) of
// the reference's latents after it.
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

struct WanVaeEncoderConfig {
  int64_t z_dim = 0;          // 16 (the head gives 2 z: mu, log_var)
  int64_t dim = 0;            // conv1 output channels: 96
  int64_t out_dim = 0;        // head input channels: 384
  int64_t downsamples = 0;    // entries of encoder.downsamples: 11
  int64_t temporal_down = 0;  // Down3d count: 2 (4x in time)
  int64_t spatial_down = 0;   // Down2d + Down3d count: 3 (8x in space)

  static Expected<WanVaeEncoderConfig> detect(const WeightView& root);
};

class WanVaeEncoder {
 public:
  // Called with intermediates: per chunk i "chunk{i}.conv1",
  // "chunk{i}.down{j}" (after encoder.downsamples.j), "chunk{i}.middle",
  // "chunk{i}.head"; then "conv1_mu_logvar". Views ([1, C, T, H, W] over
  // channels-last memory, in the activation dtype) are valid during the call.
  using Tap = std::function<void(std::string_view name, const Tensor& t)>;

  // root: a view holding `encoder.*` and `conv1.*`. precision: F32 or BF16.
  // conv_precision (default: precision): INT8 with BF16 runs the residual
  // blocks' own convolutions in int8 (as WanVaeDecoder's; see load_weights
  // for the layers kept in BF16 and why).
  static Expected<WanVaeEncoder> load(const WeightView& root, Backend& backend, Precision precision,
                                      std::optional<Precision> conv_precision = std::nullopt);

  const WanVaeEncoderConfig& config() const { return cfg_; }
  // mean and 1 / std of the latent normalisation as this precision uses them.
  const WanVaeLatentScale& latent_scale() const { return scale_; }

  // video: F32 or BF16 [1, 3, 1 + 4k, H, W] in [-1, 1], H and W multiples of
  // 2^spatial_down. Returns the normalised latents F32 [1, z, 1 + k, h, w]
  // (bf16 values under BF16), valid until the next call. Every call is a new
  // video.
  Expected<Tensor> encode(const Tensor& video, const Tap& tap = {});
  // Constant tails (on by default): every convolution computes only up to
  // the first output frame whose input window lies in a run of bitwise-equal
  // frames at the end of its input, and copies that frame into the rest
  // (wan_vae::CausalConv3d::reuse_steady_frames). The conditioning video is
  // an image then zero frames: layer by layer the frames from 3, 7, 11, ...
  // (full rate), 11, 15, 19 (half and quarter rate) on are equal, so the
  // convolution work of a 21 / 57 / 597-frame conditioning drops to 77 / 51 /
  // 8 % (tools/wan_vae_steady_sim.py), with latents equal bit for bit to
  // computing every frame (the latents themselves are equal from latent 29
  // on). Whole chunks too: once the stream state after a chunk (every cached
  // frame, compared by a 64-bit checksum) equals the state after the chunk
  // before, and the next chunk's frames equal the last chunk's, that chunk
  // would give the same output and leave the same state, so its latent is
  // copied (from latent 30 on in Matrix-Game's conditioning; not with a tap,
  // which sees every chunk's intermediates). Off: every frame is computed.
  void set_reuse_steady_frames(bool on);
  // Chunks the last encode copied instead of computing.
  int64_t chunks_reused() const { return chunks_reused_; }
  // Frees the working memory of the last encode (feature caches and
  // intermediates at full resolution, ~1 GB at 352x640) and the tensor it
  // returned; the next encode allocates it again.
  void release_buffers();

 private:
  using Layer = std::variant<wan_vae::ResidualBlock, wan_vae::Downsample>;

  WanVaeEncoder() = default;
  Status load_weights(const WeightView& root);
  void reset();
  // One chunk [1, 3, T, H, W] -> [1, 2z, T', h, w] written to `out`
  // (channels-last).
  void encode_chunk(const Tensor& x, Tensor& out, int64_t index, const Tap& tap);
  // Every layer's state_checksum, combined.
  uint64_t state_checksum() const;

  WanVaeEncoderConfig cfg_;
  Backend* backend_ = nullptr;
  wan_vae::Numerics num_;
  Precision conv_precision_ = Precision::F32;
  WanVaeLatentScale scale_;

  wan_vae::CausalConv3d conv1_, head_conv_, quant_conv_;
  std::vector<Layer> downs_;
  wan_vae::ResidualBlock mid_res0_, mid_res1_;
  wan_vae::AttentionBlock mid_attn_;
  wan_vae::ChannelRmsNorm head_norm_;

  bool reuse_steady_ = true;
  int64_t chunks_reused_ = 0;

  wan_vae::Workspace ws_;
  wan_vae::Scratch a_, b_, moments_, mu_logvar_, latents_;
};

}  // namespace flick
