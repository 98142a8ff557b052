// FramePack image-to-video (packed HunyuanVideo; spec ../shared/research/framepack.md,
// reference lllyasviel/FramePack @ 97fe5db demo_gradio.py / demo_gradio_f1.py worker()):
//
//   bucket   = find_nearest_bucket(H, W)                         // ties to the later entry
//   image    = resize_and_center_crop(input, bucket)             // LANCZOS, round-half-even box
//   llama    = LLaMA(template(prompt)).hidden_states[-3][95:]    // [1, n, 4096]   \ once per
//   prompt, pooled   = CLIP-L(prompt).pooler_output                       // [1, 768]       /
//   cached on disk start    = VAE.encode(image / 127.5 - 1).mean * 0.476986      // [1, 16, 1, h,
//   w] siglip   = SigLIP(BICUBIC 384 (image)).last_hidden_state      // [1, 729, 1152] n        =
//   int(max(round(seconds * 30 / (4 lws)), 1))         // sections, half to even per section (a
//   generator seeded once, consumed across sections):
//     x      = UniPC bh1(DiT(noise [1, 16, lws, h, w], clean 1x / 2x / 4x from the history))
//     history latents: "original" prepends (backward in time, the last section also
//                      prepends the start latent), "f1" appends (forward in time)
//     pixels = VAE.decode(the newest 2 lws latents (+1 in the original's last section)) -> fp16
//     video  = soft_append(.., overlap 4 lws - 3) in fp16 [P];  u8 = trunc(clamp(v) * 127.5 +
//     127.5)
//   36 n + 1 frames at 30 fps (lws 9).
//
// Streaming: "f1" writes every frame to the sink as soon as no later section
// can blend into it (all but the newest 4 lws - 3 frames after each section).
// "original" generates the video's end first: a frame is final once a section
// has been appended before it, but the sink takes frames in time order, so
// its frames are held (as uint8) and written after the last section.
//
// Memory (released sizes, 640 bucket): DiT 12.87 B params, LLaMA layers
// 0..29 (6.54 B in linears + the 0.53 B embedding table), SigLIP 0.86 GB,
// VAE 0.5 GB, CLIP-L 0.25 GB; DiT activations ~2 GB (18.5k tokens x 3072,
// MLP 12288); VAE decode of a 5-latent temporal tile ~5 GB bf16 untiled,
// < 1 GB with vae_spatial_tiling; pixels: 106 fp16-valued frames pending
// plus, for "original", the finished video as uint8 (0.17 GB for 5 s,
// 2.1 GB for 60 s). Weights resident per precision (GB):
//
//   precision        DiT    LLaMA 0..29   note
//   bf16 / f32*      25.7   14.1          (*f32: twice that)
//   int8             13.3    7.6          8-bit: the DiT's 12.46 B block-linear
//                                         params (modulation linears included) and
//                                         the LLaMA's 6.54 B linear params; bf16:
//                                         the DiT's 0.31 B refiner, embedders,
//                                         proj_out, and the LLaMA's embedding table
//   fp8 (a backend   13.3    7.6          as int8
//   with fp8 GEMMs)
//   fp8 (CPU)        25.7   14.1          the CPU backend holds E4M3 weights as
//                                         bf16 (runtime/backend.h): fp8 saves disk
//                                         (Kijai's single file), not memory
//
// With keep_dit_loaded = false the text encoders (only on a prompt-cache
// miss) and the DiT are never resident together: int8 samples in
// ~13.3 + 1.4 + 2 + 1 + <= 2 GB (~20 GB) and encodes a new prompt in
// ~7.6 + 0.3 + 1.4 GB; bf16 needs ~32 GB while sampling. The modulation
// linears were kept in bf16 (16.7 GB) until the golden quality tests were
// measured with them quantized (framepack_dit_common.h). Measured at the
// released shapes (bench/RESULTS.md, FramePack; int8, 544x704): prompt stage
// 8.4 GiB, DiT resident 14.9, one DiT call 16.4; the untiled VAE decode
// of a section alone passed 22 GiB (the DiT freed before the last section's
// decode without keep_dit_loaded): on a 24 GB machine vae_spatial_tiling
// is needed at the 640 bucket. With it the whole job (1 section, 37 frames)
// peaked at 16.6 GiB, in the DiT call; its tiled decode at 8.7 GiB.
//
// Deviations from the reference, each documented where it is made: the start
// latent is the posterior mean (the reference samples from the global torch
// RNG, not the seed); the reference's fp16 text encoders / SigLIP / VAE run in
// the pipeline's precision (F32, else BF16), their outputs rounded to the
// reference's dtypes at the same points (pixels to fp16 before the blend).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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

enum class FramePackVariant { kOriginal, kF1 };
std::string_view framepack_variant_name(FramePackVariant v);  // "original" | "f1"
std::optional<FramePackVariant> find_framepack_variant(std::string_view name);

inline constexpr int kFramePackFps = 30;          // save_bcthw_as_mp4(fps=30)
inline constexpr int kFramePackLatentWindow = 9;  // latent_window_size ("should not change")
inline constexpr int kFramePackLatentChannels = 16;

// ---- image preprocessing (spec 1.2) ----
struct FramePackBucket {
  int height = 0, width = 0;
  bool operator==(const FramePackBucket&) const = default;
};
// bucket_tools.py bucket_options[640], (h, w) in the reference's order.
std::span<const FramePackBucket> framepack_buckets_640();
// find_nearest_bucket: the bucket minimising |h * bw - w * bh|, the later one
// on ties (`<=`). buckets must not be empty.
FramePackBucket find_framepack_bucket(int height, int width,
                                      std::span<const FramePackBucket> buckets);
// resize_and_center_crop (utils.py:45-60): unchanged at the target size, else
// scale = max(tw / W, th / H), Pillow LANCZOS to round(W s) x round(H s)
// (Python round: half to even), then Image.crop of the float box
// ((rw - tw) / 2, (rh - th) / 2, (rw + tw) / 2, (rh + th) / 2), whose corners
// Pillow rounds half to even [P].
Frame framepack_resize_and_center_crop(const FrameView& image, int width, int height);

// ---- section schedule (spec 1.4) ----
// int(max(round(seconds * 30 / (lws * 4)), 1)) with Python's round (half to even).
int64_t framepack_section_count(double seconds, int latent_window = kFramePackLatentWindow);
// Frames of a finished video: 4 (lws n + 1) - 3 (36 n + 1 for lws 9).
int64_t framepack_video_frames(int64_t sections, int latent_window = kFramePackLatentWindow);

struct FramePackSection {
  int64_t index = 0;                      // in generation order
  bool last = false;                      // original: latent_padding == 0
  int64_t padding = 0;                    // original: latent_padding (in windows); f1: 0
  std::vector<int64_t> latent_indices;    // lws
  std::vector<int64_t> clean_indices;     // 2: [pre / start, post / 1x]
  std::vector<int64_t> clean_2x_indices;  // 2
  std::vector<int64_t> clean_4x_indices;  // 16
};
// original (demo_gradio.py:187-212): latent_paddings reversed(range(n)), or
// [3] + [2] * (n - 3) + [1, 0] above 4 sections; indices
// arange(1 + p + lws + 1 + 2 + 16) split [1, p, lws, 1, 2, 16].
// f1 (demo_gradio_f1.py:188-228): arange(1 + 16 + 2 + 1 + lws) split
// [1, 16, 2, 1, lws].
std::vector<FramePackSection> framepack_sections(FramePackVariant variant, int64_t sections,
                                                 int latent_window = kFramePackLatentWindow);

// ---- weights ----
// One folder per component, as users download them (FramePack's DiT repo
// plus hunyuanvideo-community/HunyuanVideo and lllyasviel/flux_redux_bfl):
//   <weights>/transformer/     lllyasviel/FramePackI2V_HY (original) or
//                              lllyasviel/FramePack_F1_I2V_HY_20250503 (f1):
//                              config.json, diffusion_pytorch_model*.safetensors[.index.json]
//   <weights>/text_encoder/    HunyuanVideo text_encoder (LLaMA): config.json, model*.safetensors
//   <weights>/text_encoder_2/  HunyuanVideo text_encoder_2 (CLIP-L): config.json, model.safetensors
//   <weights>/tokenizer/       HunyuanVideo tokenizer: tokenizer.json
//   <weights>/tokenizer_2/     HunyuanVideo tokenizer_2: vocab.json, merges.txt
//   <weights>/vae/             HunyuanVideo vae: config.json, diffusion_pytorch_model.safetensors
//   <weights>/image_encoder/   flux_redux_bfl image_encoder (SigLIP): config.json,
//   model.safetensors
// Each path may be given on its own (absolute); empty = <weights>/<default name>.
struct FramePackPaths {
  std::string weights;
  std::string transformer, text_encoder, text_encoder_2, tokenizer, tokenizer_2, vae, image_encoder;
  // The folders with the defaults filled in.
  FramePackPaths resolved() const;
};

struct FramePackOptions {
  FramePackPaths paths;
  // F32 (parity) or BF16: every component (DiT, LLaMA, CLIP-L, SigLIP, VAE).
  // INT8 (W8A8) or FP8 (E4M3 weights): the DiT's block linears and the
  // LLaMA's layer linears; the rest runs in BF16 (framepack_kept_precision).
  Precision precision = Precision::BF16;
  std::vector<FramePackBucket> buckets;  // empty = framepack_buckets_640()
  int latent_window = kFramePackLatentWindow;
  // Where prompt encodings are cached ("" = not on disk). Files are
  // <hash>.fpprompt; deleting them is safe (recomputed on the next use).
  std::string prompt_cache;
  // FramePack's low-VRAM VAE mode (spatially tiled encode / decode; spec 3.3).
  bool vae_spatial_tiling = false;
  // true: the DiT is loaded once (load()) and kept; an uncached prompt then
  // loads the text encoders beside it. false: the DiT is loaded per job,
  // after the text encoders are freed, and freed after the job: the text
  // encoders and the DiT are never in memory together (the lower peak, for
  // memory budgets below their sum; costs one DiT load per job).
  bool keep_dit_loaded = true;
  // Plan cache directory (runtime/plan_cache.h; [daemon].plan_cache): the
  // DiT's linears stored as the backend packs them (quantized at int8 /
  // fp8), so a load after the first maps them instead of reading and
  // quantizing the checkpoint. Empty: no cache.
  std::string plan_cache;
};

struct FramePackInput {
  Frame image;  // RGB8, any size (bucketed and cropped by the pipeline)
  std::string prompt;
  FramePackVariant variant = FramePackVariant::kOriginal;
  double seconds = 5.0;
  uint64_t seed = 31337;
  int steps = 25;
  double distilled_guidance = 10.0;  // gs
  // TeaCache (rel_l1_thresh 0.15, one cache per section): the demo's default,
  // about 2x faster, lossy ("hands and fingers slightly worse"); off = the
  // exact model.
  bool teacache = false;
};

inline constexpr int kFramePackMaxSteps = 200;
inline constexpr double kFramePackMaxSeconds = 120.0;  // the demo's slider range

// The checks run() makes before any compute, without weights (flick validate).
Status validate_framepack_input(const FramePackOptions& options, const FramePackInput& input);

class FramePackPipeline {
 public:
  // Named intermediates for tests: "image" (the bucket image, U8 [H, W, 3]),
  // "llama" [1, n, C], "pooled" [1, C], "start_latent" [1, 16, 1, h, w],
  // "image_embeddings" [1, 729, C], per sampler step k "section{i}.step{k}.x"
  // and ".denoised" (the sampler callback's x and x0), "section{i}.latents"
  // (sample_hunyuan's output [1, 16, lws, h, w]). Views are valid during the
  // call only.
  using Tap = std::function<void(std::string_view name, const Tensor& t)>;

  // Opens every component (config detection, shape checks, tokenizers); the
  // VAE and SigLIP stay loaded, the DiT too with keep_dit_loaded; the text
  // encoders are loaded per job when a prompt is not cached and freed before
  // sampling. Errors name the missing folder or file.
  static Expected<std::unique_ptr<FramePackPipeline>> load(const FramePackOptions& options,
                                                           Backend& backend);
  ~FramePackPipeline();

  const FramePackOptions& options() const;
  std::string precision_summary() const;
  Status validate(const FramePackInput& input) const;

  // One job: frames go to the sink (begin(30 fps, 36 n + 1 frames), write,
  // finish); progress after every section; a stop request ends the run at the
  // next section boundary with interrupted().
  Status run(const FramePackInput& input, FrameSink& sink, const RunContext& ctx,
             const Tap& tap = {});

 private:
  struct Impl;
  explicit FramePackPipeline(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---- pieces of run(), exposed for tests ----
namespace framepack {

// soft_append_bcthw(a, b, overlap) (utils.py:252-263) on fp16 values held as
// floats, [3, T, H, W] planes: [a[:-o], w a[-o:] + (1 - w) b[:o], b[o:]] with
// w = linspace(1, 0, o), every product and sum rounded to fp16 [P].
// a is the earlier part of the video (the original variant calls it with the
// new section first).
std::vector<float> soft_append(const std::vector<float>& a, int64_t ta, const std::vector<float>& b,
                               int64_t tb, int64_t plane, int64_t overlap);
// save_bcthw_as_mp4's conversion of one frame: trunc(clamp(v, -1, 1) * 127.5 + 127.5),
// each op rounded to fp32 [P]. planes: [3, T, H, W], frame t.
// The precision of the components INT8 / FP8 leave alone (CLIP-L, SigLIP,
// the VAE, and the DiT's kept layers): BF16, or F32 in an F32 run.
inline Precision framepack_kept_precision(Precision p) {
  return p == Precision::F32 ? Precision::F32 : Precision::BF16;
}

Frame to_rgb8(const std::vector<float>& planes, int64_t frames, int64_t t, int height, int width);

// Prompt encodings as cached on disk: the LLaMA rows and CLIP pooled output
// (F32 values) under a key naming the prompt and the encoder files.
struct PromptEncoding {
  std::vector<float> llama;  // [tokens, llama_dim]
  int64_t tokens = 0, llama_dim = 0;
  std::vector<float> pooled;  // [pooled_dim]
};
std::string prompt_cache_file(const std::string& dir, const std::string& key);
// nullopt when absent, unreadable, damaged or for another key (then it is
// recomputed and overwritten).
std::optional<PromptEncoding> read_prompt_cache(const std::string& path, const std::string& key);
Status write_prompt_cache(const std::string& path, const std::string& key,
                          const PromptEncoding& enc);

}  // namespace framepack
}  // namespace flick
