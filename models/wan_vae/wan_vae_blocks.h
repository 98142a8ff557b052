// Building blocks of the Wan2.1 causal 3D VAE (wan/modules/vae.py and
// demo_utils/vae_block3.py of Matrix-Game 2.0), streaming over time with an
// explicit per-convolution feature cache.
//
// Activations live channels-last: [T, H, W, C] buffers (C contiguous), passed
// around as [1, C, T, H, W] views of them, the layout oneDNN's convolutions
// read and write in place (plain NCDHW would cost a reorder in and out of
// every convolution).
//
// Every 3-tap causal convolution keeps the last 2 frames of its input; a
// fresh cache holds 2 zero frames, so "zero front padding" and "prepend the
// cached frames" are one code path:
//   reference: cache None  -> pad 2 zeros;  cache [a] -> [a, x], pad 1 zero;
//              cache [a,b] -> [a, b, x];  new cache = last 2 of [old..., x]
//   here:      padded = [cache0, cache1, x];  new cache = last 2 of padded
// (a 1-frame reference cache [a] is this cache [0, a]: same convolution input).
// The producer of a convolution's input writes straight into frames [2, 2+T)
// of its padded buffer (CausalConv3d::padded), which is shared scratch; only
// the 2 cached frames are the convolution's own memory.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "models/wan_vae/wan_vae_kernels.h"
#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"
#include "runtime/weights/weight_store.h"

namespace flick {

// The Wan2.1 latent normalisation (z = (mu - mean) / std), 16 channels.
inline constexpr float kWanVaeMean[16] = {
    -0.7571f, -0.7089f, -0.9113f, 0.1075f,  -0.1745f, 0.9653f,  -0.1517f, 1.5508f,
    0.4134f,  -0.0715f, 0.5517f,  -0.3632f, -0.1922f, -0.9497f, 0.2503f,  -0.2921f};
inline constexpr float kWanVaeStd[16] = {2.8184f, 1.4541f, 2.3275f, 2.6558f, 1.2196f, 1.7708f,
                                         2.6052f, 2.0743f, 3.2687f, 2.1526f, 2.8652f, 1.5579f,
                                         1.6382f, 1.1253f, 2.8251f, 1.9160f};

// The latent normalisation constants a component computes with, rounded as
// the reference rounds them in that component's precision.
struct WanVaeLatentScale {
  float mean[16] = {};
  float inv_std[16] = {};
};

namespace wan_vae {

// How a component's Precision maps onto arithmetic.
struct Numerics {
  DType act = DType::F32;           // activation storage (F32 or BF16)
  Precision conv = Precision::F32;  // convolutions
  // Weights, biases and norm scales as the reference casts them for its
  // reduced-precision runs: fp32 -> fp16 -> bf16 (a value below fp16's normal
  // range keeps fewer bits). Every later cast of the reference (the decoder's
  // bf16 -> fp16) is exact on these values.
  bool ref_weights = false;
  NormRounding norm = NormRounding::PerOp;

  static Numerics f32() { return {}; }
};

// num for a convolution of the raw residual stream (a residual block's
// shortcut, the upsamplers' convs): INT8 becomes BF16. INT8 convolutions
// quantize their input with one scale per call, which suits the RMS-normed
// SiLU outputs the residual blocks' own convs read, not the residual sums,
// whose range grows block by block with a few large outliers (measured on
// the full-size synthetic decode: see bench/RESULTS.md, "Wan VAE").
Numerics normalized_only(const Numerics& num);

// The convolutions' precision of an encoder / decoder run at `precision`:
// `conv` (default: precision), INT8 only with BF16 activations. `what`
// names the model in the error.
Expected<Precision> conv_precision(std::string_view what, Precision precision,
                                   std::optional<Precision> conv);

// The value the reference's weight casts leave: bf16(fp16(v)).
float ref_weight_value(float v);

// A reusable buffer: grows on demand, so a streaming run allocates only while
// its shapes grow (the first two latents) and never after.
class Scratch {
 public:
  Tensor get(DType dtype, const Shape& shape);
  // A [1, C, T, H, W] view of a channels-last [T, H, W, C] buffer.
  Tensor channels_last(DType dtype, int64_t c, int64_t t, int64_t h, int64_t w);

 private:
  OwnedTensor buf_;
};

// [1, C, T, H, W] view of the channels-last buffer at data.
Tensor channels_last_view(void* data, DType dtype, int64_t c, int64_t t, int64_t h, int64_t w);
// A [1, C, T, H, W] view of one dense channels-last buffer.
bool is_channels_last(const Tensor& x);
// Frames [start, start + len) of a channels-last x as a view of its own
// (unlike x.slice, the batch stride is that of a dense tensor: oneDNN takes
// a size-1 dim's odd stride for a non-dense layout and falls back to its
// reference convolution).
Tensor frames(const Tensor& x, int64_t start, int64_t len);
// The first frame of a channels-last x from which every frame is bitwise
// equal to the last one (T - 1 when the last two differ; one frame compare
// then, usually ending at its first bytes). `known` >= 0: the caller knows
// frames [known, T) are equal; only the frames before it are compared.
int64_t steady_from(const Tensor& x, int64_t known = -1);

// Scratch shared by the layers of one encoder / decoder, used one layer at a
// time: `pad` holds a convolution's padded input, the others a layer's
// intermediates (see each forward for which).
struct Workspace {
  Scratch pad, mid, aux, up;
  Scratch acc, sums;  // attention (its scores use pad and mid)
  void release() { *this = Workspace(); }
};

// The layer list of an encoder's `downsamples` / decoder's `upsamples`: layers
// numbered 0..n-1, each a residual block or a resampler (with `time_conv` when
// it also resamples time). `kind` names the resampler in errors.
struct ResampleLayers {
  int64_t count = 0;
  int64_t spatial = 0;
  int64_t temporal = 0;
};
Expected<ResampleLayers> scan_resample_layers(const WeightView& list, std::string_view kind);

// CausalConv3d (kernel kt x k x k, stride 1, "same" spatial padding, causal in
// time) with its feature cache. kt = 1 convolutions keep no cache.
// Weights: `<prefix>.weight` [O, I, kt, k, k], `<prefix>.bias` [O].
class CausalConv3d {
 public:
  static Expected<CausalConv3d> load(const WeightView& v, std::string_view prefix, Backend& be,
                                     const Numerics& num);
  // Also a 2-D conv over every frame: weight [O, I, k, k].
  static Expected<CausalConv3d> load_2d(const WeightView& v, std::string_view prefix, Backend& be,
                                        const Numerics& num);

  int64_t in_channels() const { return cin_; }
  int64_t out_channels() const { return cout_; }

  // kt = 3: the padded input [1, I, 2 + T, H, W] (channels-last, in `pad`,
  // of the activation dtype of the numerics it was loaded with); the caller
  // writes the T input frames to frames [2, 2 + T), then run()s.
  Tensor padded(Scratch& pad, int64_t t, int64_t h, int64_t w) const;
  // Fills frames [0, 2) of a padded() buffer from the cache, convolves it
  // into y [1, O, T, H, W] and keeps its last 2 frames as the next cache.
  // With reuse_steady_frames: `body_from` >= 0 says the caller knows the T
  // input frames from that one on are equal (fewer frame compares); returns
  // the frame of y from which its frames are known equal (T - 1 otherwise).
  int64_t run(Backend& be, const Tensor& padded, Tensor& y, int64_t body_from = -1);
  // Any x [1, I, T, H, W]: kt = 1 convolves it directly, kt = 3 copies it
  // into a padded buffer in `pad` first.
  // Returns as run().
  int64_t forward(Backend& be, const Tensor& x, Tensor& y, Scratch& pad, int64_t x_from = -1);
  // With `on`, run() and forward() convolve only up to the first output frame
  // of a constant tail of the input (steady_from) and copy it into the rest:
  // output frame i reads input frames i .. i + kt - 1, so the outputs whose
  // windows lie in that tail are the same bits (each frame is convolved
  // alike whatever the call's frame count; tests/models/
  // test_wan_vae_steady.cpp). The encoder's conditioning video (an image,
  // then zero frames) has such tails in every early layer. y must be
  // channels-last.
  void reuse_steady_frames(bool on) { reuse_steady_ = on; }
  // A 64-bit checksum of the stream state (the cached frames, older first;
  // 0 for a fresh or cacheless convolution): equal states give the same
  // outputs for the same next input.
  uint64_t state_checksum() const;
  // Back to 2 zero frames (a new video). Frees the cache: the next call
  // allocates it for its own size.
  void reset() {
    cache_ = OwnedTensor();
    cache_zero_ = true;
    newest_ = 1;
  }

 private:
  std::unique_ptr<PackedConv> conv_;
  int64_t cin_ = 0, cout_ = 0, kt_ = 1;
  DType act_ = DType::F32;
  // [2, H, W, I] channels-last, allocated on the first call: the last two
  // input frames, the later one in slot newest_. A 1-frame call replaces
  // only the earlier one (one frame copied out instead of two).
  OwnedTensor cache_;
  int newest_ = 1;
  bool cache_zero_ = true;
  bool reuse_steady_ = false;
};

// RMS_norm over channels: F.normalize(x, dim=1) * sqrt(C) * gamma (the eps
// 1e-12 clamps the norm), optionally followed by SiLU; rounded as
// Numerics::norm says. Weight `<prefix>.gamma` [C, 1, 1, 1] (or [C, 1, 1]
// for images).
class ChannelRmsNorm {
 public:
  static Expected<ChannelRmsNorm> load(const WeightView& v, std::string_view prefix, int64_t c,
                                       int trailing_ones, const Numerics& num);
  // x, y: channels-last [1, C, T, H, W] views of the same shape and dtype
  // (y may be x). The backend's normalize_l2.
  void forward(Backend& be, const Tensor& x, Tensor& y, bool silu) const;

 private:
  OwnedTensor gamma_;  // [C] F32
  NormRounding rounding_ = NormRounding::PerOp;
};

// ResidualBlock: [RMS, SiLU, Conv3, RMS, SiLU, Conv3](x) + shortcut(x), the
// shortcut a 1^3 conv when the channel count changes. Prefix `<i>.`: keys
// residual.{0,2,3,6}.*, shortcut.*. Workspace: pad, mid.
class ResidualBlock {
 public:
  static Expected<ResidualBlock> load(const WeightView& v, Backend& be, const Numerics& num);
  int64_t in_channels() const { return conv1_.in_channels(); }
  int64_t out_channels() const { return conv2_.out_channels(); }
  // x: [1, I, T, H, W] -> y: [1, O, T, H, W], channels-last; y must not alias
  // x or the workspace.
  void forward(Backend& be, const Tensor& x, Tensor& y, Workspace& ws);
  void reset();
  // CausalConv3d::reuse_steady_frames for its convolutions; the norms and
  // the residual add likewise stop at the first frame of their input's
  // constant tail (per pixel, so equal frames give equal outputs).
  void reuse_steady_frames(bool on);
  // Its convolutions' CausalConv3d::state_checksum, combined.
  uint64_t state_checksum() const;

 private:
  ChannelRmsNorm norm1_, norm2_;
  CausalConv3d conv1_, conv2_;
  std::unique_ptr<CausalConv3d> shortcut_;
  bool reuse_steady_ = false;
};

// The middle AttentionBlock: per frame, RMS over channels, 1x1 to_qkv,
// single-head attention over the H*W positions (scale 1/sqrt(C)), 1x1 proj,
// residual. Keys norm.gamma [C,1,1], to_qkv.{weight [3C,C,1,1], bias},
// proj.{weight [C,C,1,1], bias}. The attention runs as two matmuls around a
// softmax (what PyTorch's CPU flash attention computes for one key block: P
// rounded to the activation dtype before P @ V), which the backend runs on
// its GEMM units. Workspace: pad, mid, aux, up, acc, sums.
class AttentionBlock {
 public:
  static Expected<AttentionBlock> load(const WeightView& v, Backend& be, const Numerics& num);
  int64_t channels() const { return c_; }
  // x: [1, C, T, H, W] -> y, channels-last (y may not alias x).
  void forward(Backend& be, const Tensor& x, Tensor& y, Workspace& ws);

 private:
  int64_t c_ = 0;
  ChannelRmsNorm norm_;
  CausalConv3d qkv_, proj_;  // 1x1 convs as kt = 1 causal convs
};

// Up2d / Up3d (Resample 'upsample2d' / 'upsample3d'): [time_conv], nearest x2
// over H, W, 3x3 conv C -> C/2. Up3d's time_conv (3-tap, C -> 2C) doubles the
// frame count (channels [0:C] frame 2t, [C:2C] frame 2t+1), except on the very
// first latent of a video ('Rep': skipped, one frame out); the next call sees
// a zero cache, as the reference's zero front padding.
// The upsample and the 3x3 conv run as one 2x2 conv of the frame itself with
// 4 x C/2 outputs, one set per output phase (row and column parity): a
// nearest-upsampled pixel's 3x3 neighbourhood covers only 2x2 source pixels,
// so each phase's 9 taps fold into 4 (weights summed in fp32 at load),
// 4/9 of the FLOPs, and no upsampled frame is ever written. Workspace: pad,
// aux, up.
class Upsample {
 public:
  // The phase weights of the 3x3 conv: w [O, I, 3, 3] F32 -> [4 O, I, 1, 2, 2]
  // F32 for a padding-1 conv of the source frame whose output pixel (i + py,
  // j + px), channels [p O, (p + 1) O) with p = 2 py + px, is the upsampled
  // conv's pixel (2i + py, 2j + px) (interleave_upsample_phases).
  static OwnedTensor phase_weights(const Tensor& w);

  static Expected<Upsample> load(const WeightView& v, Backend& be, const Numerics& num);
  bool temporal() const { return time_conv_ != nullptr; }
  int64_t in_channels() const { return c_; }
  int64_t out_channels() const { return out_; }
  int64_t out_frames(int64_t t) const { return temporal() && !first_ ? 2 * t : t; }
  void forward(Backend& be, const Tensor& x, Tensor& y, Workspace& ws);
  void reset();

 private:
  int64_t c_ = 0, out_ = 0;
  std::unique_ptr<CausalConv3d> time_conv_;
  // [4 out, C, 1, 2, 2], padding 1: phase 2 py + px in outputs [p out, (p + 1) out).
  std::unique_ptr<PackedConv> phases_;
  bool first_ = true;
};

// Down2d / Down3d (Resample 'downsample2d' / 'downsample3d'): zero pad one
// column right and one row bottom, 3x3 conv stride 2 (C -> C); Down3d then
// halves time with a (3, 1, 1) stride-2 conv over [last frame of the previous
// chunk, x]. The first chunk of a video (1 frame) skips it and only remembers
// its frame. Keys resample.1.{weight [C, C, 3, 3], bias},
// time_conv.{weight [C, C, 3, 1, 1], bias}. Both convs read the raw residual
// stream, so num.conv INT8 runs them as BF16 (normalized_only), as Upsample's.
// Workspace: pad, aux.
class Downsample {
 public:
  static Expected<Downsample> load(const WeightView& v, Backend& be, const Numerics& num);
  bool temporal() const { return time_conv_ != nullptr; }
  int64_t channels() const { return c_; }
  // Frames out for t frames in (t odd after the first chunk: t = 1 + 2k).
  int64_t out_frames(int64_t t) const { return temporal() && !first_ ? (t + 1 - 3) / 2 + 1 : t; }
  // x: [1, C, T, H, W] (H, W even) -> y: [1, C, T', H/2, W/2], channels-last.
  void forward(Backend& be, const Tensor& x, Tensor& y, Workspace& ws);
  void reset() {
    first_ = true;
    last_ = OwnedTensor();
  }
  // The 3x3 conv only up to the first frame of x's constant tail, copied
  // into the rest (as CausalConv3d::reuse_steady_frames; per frame, so the
  // outputs of equal frames are equal).
  void reuse_steady_frames(bool on) { reuse_steady_ = on; }
  // Of the remembered last frame (0 before the first chunk or without
  // time_conv), as CausalConv3d::state_checksum.
  uint64_t state_checksum() const;

 private:
  int64_t c_ = 0;
  std::unique_ptr<PackedConv> conv_, time_conv_;
  bool first_ = true;
  bool reuse_steady_ = false;
  OwnedTensor last_;  // [1, H/2, W/2, C]: the previous chunk's last frame
};

}  // namespace wan_vae
}  // namespace flick
