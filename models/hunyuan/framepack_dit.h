// FramePack's packed HunyuanVideo DiT (HunyuanVideoTransformer3DModelPacked,
// lllyasviel/FramePack @ 97fe5db diffusers_helper/models/hunyuan_video_packed.py,
// spec section 2), one call for B = 1 as demo_gradio.py makes it:
//
//   x, rope = pack(noisy, clean 1x / 2x / 4x)           framepack_dit_packing.h, _rope.h
//   temb    = time_text_embed(t, g, CLIP pooled)         framepack_dit_embed.h
//   text    = context_embedder(LLaMA states, t)          framepack_dit_refiner.h
//   ctx     = [image_projection(SigLIP) ; text]          framepack_dit_image_proj.h
//             (the reference crops the padded context to 729 + n_valid and
//              attends without a mask, :924-937)
//   x, ctx  = double blocks                              framepack_dit_double.h
//   [x; ctx]= single blocks                              framepack_dit_single.h
//   out     = head(x[-T*h*w:])                           framepack_dit_head.h
//
// Weight names are the checkpoint's (diffusers module paths, no prefix); the
// config comes from shapes plus config.json (framepack_dit_config.h). The
// checkpoint is checked against the full layout before anything is read:
// the error lists every missing, mis-shaped or unexpected tensor.
// Precision F32 is the parity mode; BF16 reproduces the reference's bf16
// module with its rounding points (framepack_dit_common.h) and the fp32
// output projection; INT8 (W8A8) and FP8 (E4M3 weights) quantize the block
// linears only (framepack_dit_common.h says which and why). TeaCache is optional (it wraps the
// block loop, framepack_dit_teacache.h; off for parity). Buffers are allocated per call (no arena
// yet: the zeroing is ~1 % of a block's GEMM time at D = 3072).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/hunyuan/framepack_dit_common.h"
#include "models/hunyuan/framepack_dit_config.h"
#include "models/hunyuan/framepack_dit_double.h"
#include "models/hunyuan/framepack_dit_embed.h"
#include "models/hunyuan/framepack_dit_head.h"
#include "models/hunyuan/framepack_dit_image_proj.h"
#include "models/hunyuan/framepack_dit_packing.h"
#include "models/hunyuan/framepack_dit_refiner.h"
#include "models/hunyuan/framepack_dit_single.h"
#include "models/hunyuan/framepack_dit_teacache.h"

namespace flick::hunyuan {

struct FramePackDitInputs {
  DitPackInputs latents;    // noisy [1, 16, T, H, W] + the clean streams
  float timestep = 0.f;     // the sampler's bf16(sigma * 1000)
  float guidance = 0.f;     // distilled guidance: bf16(gs * 1000), 9984 for gs 10
  Tensor text;              // [1, n_valid, text_dim]: the LLaMA states of the valid
                            // (mask = 1) tokens only, n_valid >= 1
  Tensor pooled;            // [1, pooled_dim]: CLIP-L pooler_output
  Tensor image_embeddings;  // [1, Ti, image_dim]: SigLIP last_hidden_state (729 tokens)
};

class FramePackDit {
 public:
  // `model` = the checkpoint root (x_embedder.*, transformer_blocks.*, ...).
  static Expected<FramePackDit> load(const WeightView& model, const FramePackDitConfig& config,
                                     Backend& backend, Precision precision);

  const FramePackDitConfig& config() const { return cfg_; }
  Precision precision() const { return run_.precision; }

  // The velocity prediction, F32 [1, 16, T, H, W]. Inputs may be F32 or BF16
  // (cast to the activation dtype as the reference's `.to(dtype)` does); in
  // BF16 the timestep and guidance are rounded to bf16 (the reference's
  // tensors are bf16). Taps: see framepack_dit_*.h ("packed", "temb",
  // "refined", "image_proj", "double<i>.x", "single<i>.ctx", "norm_out", ...).
  // With a TeaCache (one per section, see framepack_dit_teacache.h) a call
  // may reuse the previous full call's block residual instead of running
  // the blocks; null = the exact model (the parity mode).
  Expected<OwnedTensor> forward(const FramePackDitInputs& in, const DitTap& tap = {},
                                DitTeaCache* teacache = nullptr) const;

 private:
  FramePackDitConfig cfg_;
  DitRun run_;
  DitPatchEmbedders embed_;
  DitTimeTextEmbed temb_;
  DitTokenRefiner refiner_;
  DitImageProjection image_proj_;
  std::vector<DitDoubleBlock> double_;
  std::vector<DitSingleBlock> single_;
  DitOutputHead head_;
};

// A diffusers transformer folder opened and loaded: config.json plus
// diffusion_pytorch_model.safetensors(.index.json); the store stays with the
// model (views of it may back packed weights). Every tensor of the folder
// must be used.
struct FramePackDitModel {
  WeightStore store;
  FramePackDit dit;
};
// The checkpoint and config.json of a DiT at `path`: a diffusers folder
// (framepack_dit_weights_path, <path>/config.json) or a single .safetensors
// file (config = `config_json` if given, else a config.json beside the
// file if there is one, else "": the released model's, see
// FramePackDitConfig::detect).
struct FramePackDitFiles {
  std::string weights, config;
};
Expected<FramePackDitFiles> framepack_dit_files(const std::string& path,
                                                const std::string& config_json = "");

// `folder` may also be a single .safetensors file (Kijai's
// FramePackI2V_HY_fp8_e4m3fn.safetensors: diffusers names, F8_E4M3 linear
// weights, see load_dit_linear); its config.json is `config_json` if given,
// else a config.json beside the file if there is one, else the released
// model's (framepack_dit_config.h).
Expected<FramePackDitModel> open_framepack_dit(const std::string& folder, Backend& backend,
                                               Precision precision,
                                               const std::string& config_json = "");

}  // namespace flick::hunyuan
