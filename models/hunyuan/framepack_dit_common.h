// What every component of FramePack's packed HunyuanVideo DiT shares
// (framepack_dit.h has the overview): loading a diffusers nn.Linear / Conv3d
// as a packed linear, parameters in the activation dtype, and the elementwise
// chains the reference evaluates op by op.
//
// Precision BF16 reproduces the reference's bf16 module (demo_gradio.py:73,
// transformer.to(bf16)): parameters are bf16, every elementwise op's result
// is a bf16 tensor (rounded once per op, as PyTorch does), LayerNorm /
// RMSNorm statistics and RoPE run in fp32 (dit_common.py patches them so),
// and the output projection runs in fp32 (high_quality_fp32_output_for_inference).
// Precision F32 runs the same graph in fp32 (the parity mode).
//
// Precision INT8 / FP8 quantize the block linears only (the double blocks'
// attention / FFN projections of both streams and modulation linears
// norm1 / norm1_context, the single blocks' q, k, v, proj_mlp, proj_out and
// modulation linear norm.linear): W8A8 with per-channel int8 weights and
// per-token dynamic activation scales, or E4M3 weights (runtime/backend.h
// LinearDesc, as models/wan/wan_quant.h uses them). The modulation linears
// are 3.40 B of the 12.87 B parameters: quantizing them saves 3.4 GB at the
// released size, for a small loss on the tiny golden model (output cosine vs
// bf16 0.99984 -> 0.99980 int8, 0.9981 -> 0.9980 fp8; pipeline frames 51.8 ->
// 51.7 dB int8, 46.4 -> 45.1 dB fp8; tests/framepack_dit, framepack_pipeline).
// Everything else (patch embedders, time / text / guidance embedders, the
// token refiner, the image projection, norm_out and the fp32 proj_out) and
// every elementwise op run exactly as in BF16: `DitRun::kept()`. Per image token
// at the released size the block linears are 12 D^2 MACs per block (x
// stream of a double block: q, k, v, out 4 D^2 + FFN 8 D^2; a single block:
// q, k, v 3 D^2 + proj_mlp 4 D^2 + proj_out 5 D^2), 720 D^2 over the 60
// blocks, against 64 D for the patch embedder and proj_out each: > 99.9 %
// of the per-token linear work. The refiner (on <= 256 text tokens) and the
// image projection (729 tokens) are kept.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"
#include "runtime/weights/weight_store.h"

namespace flick::hunyuan {

// Called with intermediates as they are produced (names as in the golden
// file: "packed", "temb", "double0.x", ...). Views valid during the call.
using DitTap = std::function<void(std::string_view name, const Tensor& t)>;

// The precision a FramePack DiT component runs in, and its activation dtype.
struct DitRun {
  Backend* be = nullptr;
  Precision precision = Precision::F32;

  DType act() const { return precision == Precision::F32 ? DType::F32 : DType::BF16; }
  // The precision of the layers INT8 / FP8 leave alone: BF16 (F32 in an F32 run).
  Precision kept() const { return precision == Precision::F32 ? Precision::F32 : Precision::BF16; }
  bool bf16() const { return act() == DType::BF16; }
  void tap(const DitTap& t, std::string_view name, const Tensor& x) const {
    if (t) t(name, x);
  }
};

// Accepted checkpoint dtypes (the released DiT is bf16; fp32 / fp16 convert).
DTypeSet dit_float_types();

// nn.Linear `<name>.weight` [n, k] + `<name>.bias` [n], packed for
// `precision`. In a bf16 module the bias is a bf16 tensor: an fp32 bias is
// rounded to bf16 first. With round_weight_bf16, an fp32 checkpoint's weight
// is rounded to bf16 even for an F32 pack (the reference's fp32 proj_out is
// the bf16 module's layer upcast).
// The weight may also be F8_E4M3 (Kijai's FramePackI2V_HY_fp8_e4m3fn
// single file: a plain `.to(float8_e4m3fn)` cast, no scale, i.e. scale 1, of
// every weight whose name holds neither "norm" nor "bias": the conversion of
// kijai/ComfyUI-FramePackWrapper PR #13 and tools/framepack_dit_goldens.py),
// optionally with a per-tensor `<name>.scale_weight` F32 [1] or [] (the
// ComfyUI "scaled fp8" form; dequantized weight = w * scale). At FP8 it is
// packed as stored; at any other precision it is dequantized to BF16 first
// (then re-quantized per channel at INT8).
Expected<std::unique_ptr<PackedLinear>> load_dit_linear(const WeightView& v, std::string_view name,
                                                        int64_t n, int64_t k, const DitRun& run,
                                                        Precision precision,
                                                        bool round_weight_bf16 = false);

// nn.Conv3d `<name>` with kernel == stride (a patch embedder) as a linear
// over patches flattened (c, kt, ky, kx), the weight's own layout:
// weight [n, c, kt, kh, kw] (F8_E4M3 as load_dit_linear takes it; always
// run in run.kept()).
Expected<std::unique_ptr<PackedLinear>> load_dit_patch_conv(const WeightView& v,
                                                            std::string_view name, int64_t n,
                                                            int64_t c, int64_t kt, int64_t kh,
                                                            int64_t kw, const DitRun& run);

// The `<linear>.scale_weight` names of an FP8 file that the layout may
// carry beside `<linear>.weight` (see load_dit_linear).
inline constexpr std::string_view kDitFp8ScaleSuffix = ".scale_weight";

// A parameter (norm weight / bias) converted to the activation dtype, owned by `owned`.
Expected<Tensor> load_dit_param(const WeightView& v, std::string_view name, const Shape& shape,
                                const DitRun& run, std::vector<OwnedTensor>& owned);

// y = act(linear(x)). A bf16 module stores the linear's output (rounded)
// before the activation module runs, so in bf16 the activation is a second
// op; in fp32 it is fused (the same values).
void dit_linear_act(const DitRun& run, const Tensor& x, const PackedLinear& w, Tensor& y,
                    Activation act);

// x = x * (1 + scale) + shift in place, one rounding per op as the
// reference's `norm(x) * (1 + scale) + shift`. scale / shift [1, D]
// (broadcast over rows), one_plus a [1, D] scratch.
void dit_modulate(const DitRun& run, Tensor& x, const Tensor& shift, const Tensor& scale,
                  Tensor& one_plus);

// x = x + y * gate (y is overwritten with the rounded product).
void dit_gated_add(const DitRun& run, Tensor& x, Tensor& y, const Tensor& gate);

// diffusers RMSNorm as dit_common.py patches it: bf16(x * rsqrt(mean(x^2) +
// eps)) * bf16(w), rounded after each op. x, y: [..., D], w [D].
void dit_rms_norm(const DitRun& run, const Tensor& x, const Tensor& w, float eps, Tensor& y);

// diffusers Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0):
// [cos(t f_j), sin(t f_j)], f_j = exp(-ln(1e4) j / 128) in fp32 (j < 128),
// then cast to the activation dtype. out: [1, dim].
void dit_timestep_sinusoid(float t, Tensor& out);

}  // namespace flick::hunyuan
