// Synthetic Matrix-Game 2.0 checkpoints in the exact layout of the Hugging
// Face repo Skywork/Matrix-Game-2.0: the same file names, tensor names,
// shapes, dtypes and state-dict order as the released files (the reference
// key lists are tests/data/mg2/full_keys.json.gz), with deterministic values
// and no download. `flick synth` writes them; the full size is for loader,
// memory and speed tests of the real shapes, the tiny size (real head sizes,
// small widths) for demos and fast end-to-end tests.
//
//   <dir>/base_distilled_model/base_distill.safetensors       universal  BF16, `model.*`
//   <dir>/gta_distilled_model/gta_keyboard2dim.safetensors    gta_drive
//   <dir>/templerun_distilled_model/templerun_7dim_onlykey.safetensors
//   <dir>/Wan2.1_VAE.pth                                      F32 state dict
//   <dir>/models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth
//                                                             F32: visual.*, textual.*, log_scale
//
// Values: element i of tensor `name` is offset + std * g(seed, name, i), g a
// counter-based hash turned into an approximately standard normal number (the
// sum of four 16-bit uniforms, scaled to unit variance; |g| <= 3.47). A
// tensor's values depend only on the seed, its name and its index, not on the
// other tensors or the file. (offset, std) follow tools/mg2_synth_full.py:
// matrices N(0, 1/fan_in), norm weights and VAE gammas 1 + 0.1 g, biases
// 0.02 g, modulation g / sqrt(dim), embeddings 0.02 g, log_scale log(1/0.07).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "models/clip/clip_vision.h"
#include "models/pipelines/matrix_game.h"
#include "models/wan/wan_action.h"
#include "models/wan/wan_dit.h"
#include "runtime/status.h"

namespace flick {

// The XLM-RoBERTa text tower in the CLIP file: unused by the pipeline, part of
// the layout.
struct ClipTextDims {
  int64_t vocab = 0;      // 250002
  int64_t width = 0;      // 1024
  int64_t layers = 0;     // 24
  int64_t ffn_dim = 0;    // 4096
  int64_t positions = 0;  // 514
  int64_t types = 0;      // 1
  int64_t embed_dim = 0;  // 1024: the joint embedding (visual.head, textual.head.2)
};

// Every size the layout depends on. Head counts are not among them (no shape
// carries them); the tiny size keeps the real head sizes (DiT 128, CLIP 80,
// action 64), so it loads with the pipeline's defaults.
struct Mg2Dims {
  // dim, ffn_dim, layers, in_dim, out_dim, freq_dim, clip_dim, action_blocks.
  WanDitConfig dit;
  // attn_width (heads x 64), mouse_hidden, mouse_dim, keyboard_hidden; the
  // keyboard width and the mouse branch come from the mode.
  WanActionConfig action;
  int64_t vae_dim = 0;    // the VAE's base width: channels 1x, 2x, 4x, 4x (96)
  int64_t vae_z_dim = 0;  // 16
  ClipVisionConfig clip;  // width, layers, mlp_dim, patch, grid
  ClipTextDims text;
};

enum class Mg2SynthSize {
  kTiny,  // DiT 256 wide (2 heads), ffn 512, 4 blocks (actions in 0-1); CLIP 160 wide
          // (2 heads), 3 blocks, 224 px; VAE base width 16
  kFull,  // the released shapes: DiT 1536 (12 x 128), 30 blocks; CLIP ViT-H/14 and
          // XLM-R large; VAE 96
};
Mg2Dims mg2_synth_dims(Mg2SynthSize size);

struct LayoutTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};

// The tensors of each file, in the reference modules' state-dict order.
std::vector<LayoutTensor> mg2_dit_layout(const Mg2Dims& d, const Mg2ModeSpec& mode);
std::vector<LayoutTensor> mg2_vae_layout(const Mg2Dims& d);
std::vector<LayoutTensor> mg2_clip_layout(const Mg2Dims& d);

// (offset, std) of a tensor's synthetic values, from its name and shape.
struct SynthScale {
  double offset = 0;
  double std = 0;
};
SynthScale mg2_synth_scale(std::string_view name, const std::vector<int64_t>& shape);
// Element i of tensor `name` before rounding to the file's dtype.
float mg2_synth_value(uint64_t seed, std::string_view name, const SynthScale& scale, uint64_t i);

enum class SynthFill {
  kRandom,  // the values above
  kZeros,   // all zero, written as holes: a sparse file, written instantly (layout tests)
};

// Writes one checkpoint: safetensors if the name ends in .safetensors, else a
// torch.save zip. Streams (one chunk buffer); atomic (temporary file, rename).
Status write_synth_checkpoint(const std::string& path, const std::vector<LayoutTensor>& tensors,
                              uint64_t seed, SynthFill fill);

struct Mg2SynthOptions {
  Mg2SynthSize size = Mg2SynthSize::kTiny;
  std::vector<Mg2Mode> modes = {Mg2Mode::kUniversal, Mg2Mode::kGtaDrive, Mg2Mode::kTemplerun};
  uint64_t seed = 0;
  SynthFill fill = SynthFill::kRandom;
};

// Writes a weights directory (created if missing) in the Hugging Face layout:
// the DiT checkpoint of each mode, the VAE and the CLIP file. `on_file` hears
// of every file once it is complete.
using SynthFileDone = std::function<void(const std::string& path, size_t tensors, uint64_t bytes)>;
Status write_mg2_synth(const std::string& dir, const Mg2SynthOptions& options,
                       const SynthFileDone& on_file = {});

// Checks a weights directory for `mode` (its DiT checkpoint, the VAE, the
// CLIP file) against the layout of the sizes detected from its shapes,
// reading headers only: every tensor that is missing, not part of the layout,
// of another shape or not a float type gives one line naming the tensor and
// its file. Head sizes as in Mg2Options (0: the released models').
Status check_mg2_layout(const std::string& dir, const Mg2ModeSpec& mode, int64_t dit_head_dim = 0,
                        int64_t clip_head_dim = 0);

}  // namespace flick
