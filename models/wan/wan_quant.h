// Which linear layers of the Matrix-Game DiT (wan_dit.h) and its action
// module (wan_action.h) run quantized at Precision::INT8 / FP8, and the one
// loader both use for a linear weight, float or pre-quantized.
//
// INT8 = W8A8: int8 weights with one scale per output channel, activations
// quantized per token (row) with a dynamic scale inside the backend's linear
// (runtime/cpu/quantize.h, fused with the scale computation), i32
// accumulation. FP8 = E4M3 weights with per-channel (or, from a checkpoint,
// per-tensor) scales; the CPU backend computes them in BF16 on bf16
// activations (runtime/backend.h). Everything outside the quantized linears
// (norms, RoPE, attention, modulation, residuals, the layers of
// kWanKeptLayers) runs on BF16 activations exactly as Precision::BF16 does.
//
// FLOP shares below are of the per-token linear work of one DiT call at the
// released size (2640 tokens; 30 blocks, 15 with an action module):
// 1.41 GMAC per token, of which the quantized layers are 98.3 %.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"
#include "runtime/weights/weight_store.h"

namespace flick {

// A tensor family that stays in BF16 (F32 at Precision::F32) at every
// precision. `pattern` is an fnmatch(3) glob matched against "." + the full
// tensor name, so "*.head.*" matches "model.head.head.weight" but not
// "model.heads.x".
struct WanKeptLayer {
  std::string_view pattern;
  std::string_view why;
};

// The keep list: the DiT loaders, `flick convert` on a Matrix-Game checkpoint
// and the quality report all read it from here.
inline constexpr WanKeptLayer kWanKeptLayers[] = {
    {"*.patch_embedding.*", "sees the raw latents and mask; K = 144, 0.02 % of the FLOPs"},
    {"*.time_embedding.*", "3 rows per call (one per latent); feeds every modulation"},
    {"*.time_projection.*", "3 rows per call; its output is every block's shift/scale/gate"},
    {"*.img_emb.*", "CLIP projection, run once per video on 257 tokens"},
    {"*.head.*", "writes the flow the sampler integrates; 0.007 % of the FLOPs"},
    {"*.modulation", "shift/scale/gate vectors, added to e0: not a matrix"},
    {"*norm*", "norm weights: elementwise scales, not matrices"},
    {"*.bias", "added to the fp32 accumulator in the GEMM epilogue"},
    {"*.action_model.mouse_mlp.0.*",
     "its input row holds 24 raw mouse values beside 1536 hidden values: a per-token int8 "
     "scale set by the hidden state would flatten the mouse signal; 1.7 % of the FLOPs"},
    {"*.action_model.mouse_mlp.3.*", "the mouse MLP's LayerNorm: elementwise"},
    {"*.action_model.keyboard_embed.*", "12 raw frames x 4-7 keys per latent; no FLOP share"},
    {"*.action_model.keyboard_attn_kv.*", "one row per latent frame (3 per call); no FLOP share"},
};

// The entry of kWanKeptLayers that keeps `tensor_name` (a full name such as
// "model.blocks.0.self_attn.q.weight"), or nullptr if it is quantized.
const WanKeptLayer* wan_kept_layer(std::string_view tensor_name);

// The precision the linear whose weight is `weight_name` runs in when the
// model runs in `model`: kept layers BF16 (F32 in an F32 model), the others
// `model`.
Precision wan_layer_precision(std::string_view weight_name, Precision model);

// The activation dtype of a model at `model` precision: F32 for F32, BF16
// for BF16, INT8 and FP8.
DType wan_activation_dtype(Precision model);

// A clear error when `backend` cannot run `model` precision (INT8 on a CPU
// without AVX-512 VNNI); `who` starts the message ("Wan DiT").
Status check_wan_precision(Precision model, const Backend& backend, std::string_view who);

// Loads linear `layer` from `v` and packs it for `backend`:
//   <layer>.weight `weight_shape` ([n, k], or a conv weight [n, ...] packed as
//     [n, numel / n]): F32, BF16 or F16 (quantized at load where the
//     layer runs INT8 / FP8), or I8 / F8_E4M3 with <layer>.weight_scale F32
//     [n] or [1] beside it (a `flick convert` checkpoint: packed as stored
//     when the precision matches, dequantized for kept layers and BF16 / F32
//     models, converted between INT8 and FP8 otherwise);
//   <layer>.bias [n] if `bias`, rounded to the activation dtype first (the
//     reference's module holds a bf16 bias).
// Errors name the tensor.
Expected<std::unique_ptr<PackedLinear>> load_wan_linear(const WeightView& v, std::string_view layer,
                                                        const Shape& weight_shape, bool bias,
                                                        Precision model, Backend& backend);

// Linears that read the same input, each as load_wan_linear loads it
// ([n, k] weights), packed as one whose output row holds theirs side by side
// ([n * layers.size(), k]): one GEMM and, at INT8, one quantization of the
// input instead of one per layer (the self-attention q, k, v). The layers
// must share a keep-list rule and be stored alike (all float, or all
// quantized to one dtype; per-tensor scales are broadcast per channel).
Expected<std::unique_ptr<PackedLinear>> load_wan_linears_fused(
    const WeightView& v, std::span<const std::string_view> layers, int64_t n, int64_t k, bool bias,
    Precision model, Backend& backend);

// Both loaders consult the plan cache of the current PlanCacheScope
// (runtime/plan_cache.h) for INT8 layers whose checkpoint weight is float:
// the entry holds the int8 weight and per-channel scales that
// ref::prepare_weights makes of it, so a hit packs the same bytes without
// reading the float weight (2 bytes per weight) or quantizing it.

// What prepared weights depend on besides the checkpoint, for plan cache
// keys: the backend, the CPU ISA oneDNN runs and oneDNN's version
// ("backend=cpu;isa=0x...;onednn=3.5.3+hash").
std::string plan_cache_platform(const Backend& backend);

}  // namespace flick
