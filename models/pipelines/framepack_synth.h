// Synthetic FramePack weights in the layout of the downloads the
// framepack-i2v kind reads (models/pipelines/framepack.h, FramePackPaths):
// the same folder and file names, tensor names, shapes, dtypes, shard split
// and index files as the released repositories, with deterministic values
// (mg2_synth.h: the value generator and its per-name scales) or zero-filled
// sparse files, and no download. `flick synth --model framepack` writes them.
//
//   <dir>/transformer/     lllyasviel/FramePackI2V_HY (the F1 repo has the same
//                          layout and config): config.json, BF16
//                          diffusion_pytorch_model-0000k-of-0000n.safetensors
//                          (10 GB shards, diffusers' default) + .index.json
//   <dir>/text_encoder/    hunyuanvideo-community/HunyuanVideo (LLaMA-3-8B shapes,
//                          vocab 128320): config.json, F16 model-0000k-of-0000n
//                          (5 GB shards, transformers' default) + index
//   <dir>/text_encoder_2/  CLIP-L text: config.json, F16 model.safetensors
//   <dir>/tokenizer/       tokenizer.json   \ copied from a tokenizer folder
//   <dir>/tokenizer_2/     vocab.json, merges.txt / (tests/data: fixtures, not the
//                                             real vocabularies; see the options)
//   <dir>/vae/             AutoencoderKLHunyuanVideo: config.json, F16
//                          diffusion_pytorch_model.safetensors
//   <dir>/image_encoder/   lllyasviel/flux_redux_bfl SigLIP so400m-patch14-384:
//                          config.json, F16 model.safetensors
//   <dir>/FramePackI2V_HY_fp8_e4m3fn.safetensors   (part "kijai_fp8", not in
//                          "all") Kijai's single file: diffusers names, no config,
//                          F8_E4M3 except the tensors whose names hold "norm" or
//                          "bias" (tools/framepack_dit_goldens.py kijai_fp8()
//                          gives the conversion; no per-tensor scales)
//
// A shard is closed before the tensor that would take it past the limit, in
// state-dict order (huggingface_hub split_torch_state_dict_into_shards); one
// shard is written as the unsharded file name without an index. The tiny size
// has the shapes of the committed tiny fixtures (tests/data/framepack_pipeline/
// weights) with its own values; the full size the released shapes (the tables
// in tests/data/framepack_dit, framepack_full, framepack_text, hunyuan_vae come
// from the reference classes; tests/framepack_full checks both sizes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/clip/clip_text_model.h"
#include "models/hunyuan/framepack_dit_config.h"
#include "models/hunyuan_vae/hunyuan_vae_config.h"
#include "models/llama/llama_text_encoder.h"
#include "models/pipelines/mg2_synth.h"
#include "models/siglip/siglip_vision.h"
#include "runtime/status.h"

namespace flick {

enum class FramePackSynthSize {
  kTiny,  // the tiny fixtures' shapes: DiT 2 x 16 wide, 1 + 1 blocks; LLaMA 32 wide,
          // 4 layers; CLIP 16 wide; SigLIP 16 wide; VAE 8 channels (< 1 MB in all)
  kFull,  // the released shapes: DiT 12.87 B (25.7 GB BF16), LLaMA 7.5 B (15 GB F16),
          // CLIP-L 0.12 B, SigLIP 0.43 B, VAE 0.25 B
};

struct FramePackSynthDims {
  hunyuan::FramePackDitConfig dit;
  llama::LlamaConfig llama;
  clip::ClipTextConfig clip;
  siglip::SiglipVisionConfig siglip;
  HunyuanVaeConfig vae;
};
FramePackSynthDims framepack_synth_dims(FramePackSynthSize size);

// The tensors of each component, in the reference modules' state-dict order,
// with the released files' dtypes (the DiT BF16, the rest F16).
std::vector<LayoutTensor> framepack_llama_layout(const llama::LlamaConfig& c);
std::vector<LayoutTensor> framepack_clip_text_layout(const clip::ClipTextConfig& c);
std::vector<LayoutTensor> framepack_siglip_layout(const siglip::SiglipVisionConfig& c);
std::vector<LayoutTensor> framepack_vae_layout(const HunyuanVaeConfig& c);
std::vector<LayoutTensor> framepack_transformer_layout(const hunyuan::FramePackDitConfig& c);
// Kijai's single file: the transformer layout with its block, embedder and
// projection weights in F8_E4M3.
std::vector<LayoutTensor> framepack_kijai_fp8_layout(const hunyuan::FramePackDitConfig& c);

// The shards of one checkpoint: names of the files and the tensors of each,
// in order. `max_bytes` per shard; file names <stem>-0000k-of-0000n.safetensors,
// or <stem>.safetensors if one shard holds everything.
struct SynthShard {
  std::string file;
  std::vector<LayoutTensor> tensors;
};
std::vector<SynthShard> split_synth_shards(const std::vector<LayoutTensor>& tensors,
                                           const std::string& stem, uint64_t max_bytes);

struct FramePackSynthOptions {
  FramePackSynthSize size = FramePackSynthSize::kTiny;
  uint64_t seed = 0;
  SynthFill fill = SynthFill::kRandom;
  // Double / single transformer blocks (-1: the size's). A full-width
  // transformer with fewer blocks, for benchmarks that must fit in memory.
  int64_t dit_layers = -1, dit_single_layers = -1;
  // Which parts: transformer, text_encoder, text_encoder_2, tokenizer,
  // tokenizer_2, vae, image_encoder, kijai_fp8; empty = all but kijai_fp8.
  std::vector<std::string> parts;
  // A folder holding llama_tokenizer/tokenizer.json and clip_tokenizer/
  // {vocab.json, merges.txt} (the repository's tests/data): copied into
  // tokenizer/ and tokenizer_2/. Required when those parts are written.
  std::string tokenizers;
};

// The part names, for messages ("transformer, text_encoder, ...").
std::string framepack_synth_part_names();

// Writes a weights directory (created if missing). `on_file` hears of every
// checkpoint file once it is complete.
Status write_framepack_synth(const std::string& dir, const FramePackSynthOptions& options,
                             const SynthFileDone& on_file = {});

}  // namespace flick
