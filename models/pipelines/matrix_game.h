// The Matrix-Game 2.0 pipeline (spec ../shared/research/matrix-game-2.md):
// a start image and a per-frame keyboard/mouse track in, a video out, streamed
// block by block.
//
//   image    [3, H, W] u8 -> (v/255 - 0.5)/0.5                     // [-1, 1]
//   img_cond = VAE.encode(cat(image, zeros[4(N-1)]))                // [16, N, h, w]
//   cond     = cat(mask (1 for latent 0, else 0) x 4, img_cond)     // [20, N, h, w]
//   context  = CLIP(image)                                          // [257, 1280]
//   per block b of 3 latents, steps t_0 > t_1 > ... (warped list):
//     x      = noise[:, 3b : 3b + 3]
//     flow   = DiT(x, t_k, cond, actions, caches);  x0 = x - sigma_k flow
//     x      = (1 - sigma_k+1) x0 + sigma_k+1 noise'               // not after the last step
//     DiT(x0, t = 0)                                                // clean K/V for later blocks
//     frames = VAE.decode_stream(x0)                                // 9 frames for b = 0, then 12
//   u8 = trunc(clip((v + 1) * 127.5, 0, 255))
//
// The pipeline is loaded once for one mode, precision and resolution; every
// job then only brings its image, seed, length and actions. The noise is
// drawn from a CPU torch generator seeded with the job's seed (sampler_noise.h),
// so the reference run on CPU with the same seed sees the same noise.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/frame.h"
#include "io/frame_sink.h"
#include "models/pipelines/pipeline.h"
#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace flick {

enum class Mg2Mode { kUniversal, kGtaDrive, kTemplerun };

// What differs between the three released models (spec §1).
struct Mg2ModeSpec {
  Mg2Mode mode;
  std::string_view name;        // "universal", "gta_drive", "templerun"
  std::string_view checkpoint;  // DiT file, relative to the weights directory
  int keyboard_dim;             // 4 / 2 / 7
  bool mouse;                   // [pitch, yaw] per frame; templerun has none
  int local_attn_frames;        // self-attention window in latent frames: 6 / 4 / 6
  std::span<const int> steps;   // denoising_step_list before warping
  // One name per keyboard channel, in channel order (lower case): universal
  // w s a d, gta_drive w s, templerun nomove jump slide turnleft turnright
  // leftside rightside.
  std::span<const std::string_view> keys;
};

std::span<const Mg2ModeSpec> mg2_modes();
const Mg2ModeSpec* find_mg2_mode(std::string_view name);
// "universal, gta_drive, templerun" for messages.
std::string mg2_mode_names();

inline constexpr std::string_view kMg2VaeFile = "Wan2.1_VAE.pth";
inline constexpr std::string_view kMg2ClipFile =
    "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth";
inline constexpr int kMg2Fps = 12;  // the reference writes its videos at 12 fps
inline constexpr int kMg2FramesPerBlock = 3;
// The DiT's 3-D RoPE table has 1024 time positions (absolute latent index),
// so a video has at most 1023 latents (a multiple of 3): 4089 frames, 5.7 min.
inline constexpr int64_t kMg2MaxLatentFrames = 1023;

// Video frames of a run of `latents` latent frames: 1 + 4 (N - 1).
constexpr int64_t mg2_video_frames(int64_t latents) { return latents <= 0 ? 0 : 4 * latents - 3; }

struct Mg2Options {
  std::string weights;  // a download of Skywork/Matrix-Game-2.0 (or flick synth output)
  Mg2Mode mode = Mg2Mode::kUniversal;
  Precision precision = Precision::BF16;  // the DiT: F32, BF16, INT8, FP8
  // The VAE's convolutions, encoder and decoder: BF16, or INT8 (their
  // conv_precision; not with precision F32).
  Precision vae_precision = Precision::BF16;
  int width = 640, height = 352;  // video size; multiples of 16
  // Head sizes no tensor shape carries: 0 = the released models' (DiT 128,
  // CLIP 80). The tiny test checkpoints set them.
  int64_t dit_head_dim = 0;
  int64_t clip_head_dim = 0;
  // Plan cache directory (runtime/plan_cache.h): INT8 weights quantized at
  // load are kept there and mapped by the next load. Empty: none.
  std::string plan_cache;
};

// One job's inputs, checked by validate() before any compute.
struct Mg2Input {
  Frame image;  // RGB8 at exactly the pipeline's width x height (prepare_mg2_image)
  uint64_t seed = 0;
  int64_t latent_frames = 0;    // a positive multiple of 3
  std::vector<float> keyboard;  // [mg2_video_frames(N), keyboard_dim], row-major
  std::vector<float> mouse;     // [mg2_video_frames(N), 2] ([pitch, yaw]); empty without mouse
};

// The checks of Mg2Pipeline::validate, without loaded weights (flick
// validate): image size, latent count (a positive multiple of 3), track
// lengths (mg2_video_frames(N) rows), values finite, keyboard 0 or 1, no mouse
// track for a mode without mouse. Messages say what was expected.
Status validate_mg2_input(const Mg2Options& options, const Mg2Input& input);

// A start image file (PNG or JPEG) made ready as the reference does it:
// EXIF orientation, centre crop to width:height, Pillow bilinear resize.
// Errors name the file.
Expected<Frame> prepare_mg2_image(const std::string& path, int width, int height);
// The same from the file's bytes (`name` for messages), for callers that
// open the file themselves.
Expected<Frame> prepare_mg2_image(const std::vector<uint8_t>& file, const std::string& name,
                                  int width, int height);

class Mg2Pipeline {
 public:
  // Called with named intermediates (golden tests, FLICK_DUMP): "img_cond"
  // [16, N, h, w], "visual_context" [1, T, C], per block b and step k
  // "b{b}.s{k}.x" (the DiT input), "b{b}.s{k}.flow", "b{b}.s{k}.x0", and
  // "b{b}.latents" (the block's final x0, as it enters the decoder) and
  // "b{b}.frames" [1, T, 3, H, W] (decoder output in [-1, 1]). Views are valid
  // during the call only; every tap is called right after the tensor is made,
  // so they also time the stages (bench/bench_mg2.cpp).
  using Tap = std::function<void(std::string_view name, const Tensor& t)>;

  // Finds the files of `options.mode` under options.weights, detects and
  // checks every hyper-parameter, and prepares the weights for `backend`
  // (which must outlive the pipeline). Errors name the file and tensor.
  static Expected<std::unique_ptr<Mg2Pipeline>> load(const Mg2Options& options, Backend& backend);
  ~Mg2Pipeline();

  const Mg2Options& options() const;
  const Mg2ModeSpec& mode() const;
  // "bf16 DiT, bf16 CLIP, f32 VAE" for status files.
  std::string precision_summary() const;

  // validate_mg2_input with this pipeline's options.
  Status validate(const Mg2Input& input) const;

  // Runs one job: frames go to the sink as each block is decoded (begin with
  // kMg2Fps and mg2_video_frames(N), write, finish); progress after every
  // block; a stop request ends the run at the next block with interrupted().
  Status run(const Mg2Input& input, FrameSink& sink, const RunContext& ctx, const Tap& tap = {});

 private:
  struct Impl;
  explicit Mg2Pipeline(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flick
