// The backend interface: the op set every model is written against. Each op
// has a scalar reference in runtime/ref (the oracle of every test) and a fast
// implementation in runtime/cpu (oneDNN + own AVX-512 kernels).
//
// Conventions:
//  - Inputs and outputs are Tensor views owned by the caller (arena); ops never
//    allocate on the hot path. Outputs are written, never resized.
//  - Float ops accept F32 or BF16 inputs/outputs (mixed is fine) and compute
//    in fp32; a BF16 output is rounded once, at the store, as PyTorch does.
//  - Shapes are checked with FLICK_CHECK: a mismatch is a programmer bug,
//    because pipelines validate jobs against their fixed shapes before compute.
//  - Broadcasting follows PyTorch rules over trailing-aligned dims.
#pragma once

#include <array>
#include <memory>
#include <span>
#include <string>

#include "runtime/tensor.h"

namespace flick {

// Precision a linear/conv layer runs in.
enum class Precision { F32, BF16, INT8, FP8 };
const char* precision_name(Precision p);

// Activation fused after bias in linear/conv.
//   RoundGeluTanh (linear only): round the pre-activation to the output
//   dtype first, then GELU-tanh, as PyTorch computes a bf16 nn.Linear
//   followed by GELU (the linear's output is a bf16 tensor). Equal to
//   GeluTanh for F32 outputs.
//   Relu, Sigmoid: max(x, 0) and 1 / (1 + e^-x) (the SqueezeExcite gates of
//   RepViT, the ReLU FFNs of SAM3).
enum class Activation { None, GeluErf, GeluTanh, Silu, RoundGeluTanh, Relu, Sigmoid };

// A linear layer's weight, prepared once at load for one backend.
//   w:        [N, K] (PyTorch nn.Linear layout) in F32, BF16, F16, I8 or F8_E4M3
//   w_scale:  for I8 / F8_E4M3 weights: F32 [N] (per output channel) or [1]
//             (per tensor); dequantized weight = w * scale. Empty otherwise.
//   bias:     F32 or BF16 [N], or empty.
// precision: the compute precision. INT8 = W8A8: int8 weights with per-channel
// scales, activations quantized per token (row) dynamically, i32 accumulation.
// FP8 = E4M3 weights; the CPU converts them at pack time (to BF16). The CUDA
// backend runs them W8A8 where K and N are multiples of 16: activations
// quantized per row to E4M3 (scale max|x| / 448), an FP8 GEMM, the scales
// applied after it (runtime/cuda/cuda_backend.cu).
struct LinearDesc {
  Tensor w;
  Tensor w_scale;
  Tensor bias;
  Precision precision = Precision::BF16;
};

class PackedLinear {
 public:
  virtual ~PackedLinear() = default;
  virtual int64_t in_features() const = 0;   // K
  virtual int64_t out_features() const = 0;  // N
  virtual Precision precision() const = 0;
};

// Convolution over NCHW (2d) or NCDHW (3d) activations.
//   w: [O, I/groups, kh, kw] or [O, I/groups, kd, kh, kw]; bias [O] or empty.
// Padding is symmetric zero padding per spatial dim (the VAE's causal temporal
// padding is done by the caller, who passes padding[0] = 0 for time).
struct ConvDesc {
  Tensor w;
  Tensor w_scale;  // as LinearDesc, for I8 / F8_E4M3 weights
  Tensor bias;
  int spatial_dims = 2;  // 2 or 3
  std::array<int64_t, 3> stride{1, 1, 1};
  std::array<int64_t, 3> padding{0, 0, 0};
  std::array<int64_t, 3> dilation{1, 1, 1};
  int64_t groups = 1;
  Precision precision = Precision::BF16;
};

class PackedConv {
 public:
  virtual ~PackedConv() = default;
  virtual const ConvDesc& desc() const = 0;
  // Whether calls on channels-last activations ([N, C, *] views with C
  // innermost) are this convolution's cheapest layout, so a model keeping
  // its maps so converts nothing around it. False where the kernel reads
  // another layout that plain NCHW reaches faster (the CPU backend's
  // Winograd kernels: a blocked layout). Either layout gives the same result.
  virtual bool prefers_channels_last() const { return true; }
};

// Attention over [B, L, H, D] views (the layout of a [B, L, H*D] projection
// reshaped), q: Lq, k/v: Lk, same H (no GQA) and D. out: [B, Lq, H, D].
// Masks combine (all that are set apply):
//   bias:        additive F32 [B or 1, H or 1, Lq, Lk]
//   bias_y / bias_x: the same as two separable parts (see AttentionParams)
//   key_padding: U8 [B, Lk], 0 = masked out
//   causal_block > 0: query i (at absolute position i + Lk - Lq) sees key j
//                iff j / causal_block <= (i + Lk - Lq) / causal_block
//                (block-causal over frames; causal_block = 1 is plain causal).
// A query row whose keys are all masked produces zeros.
// out may alias q (each query row is read before its output is written) but
// must not overlap k or v.
struct AttentionParams {
  float scale = 0.f;  // 0 = 1/sqrt(D)
  Tensor bias;
  // A bias over keys that form a grid of rows of W (EfficientSAM3's boxRPB),
  // given by its two parts instead of [B, H, Lq, Lk]: key j = y * W + x gets
  // bias_y[b, h, i, y] + bias_x[b, h, i, x], that sum rounded to fp32 as a
  // materialised bias_y + bias_x would be. F32 [B|1, H|1, Lq, Lk / W] and
  // [B|1, H|1, Lq, W], last dims contiguous; not with `bias`.
  Tensor bias_y, bias_x;
  Tensor key_padding;
  int64_t causal_block = 0;
};

enum class ResizeMode { Nearest, Bilinear, Bicubic };

// Where Backend::resize_window's output sits in the full resize result
// [N, C, out_h, out_w]: its first row y0 and first column x0.
struct ResizeWindow {
  int64_t out_h = 0, out_w = 0;
  int64_t y0 = 0, x0 = 0;
};

enum class ReduceOp { Sum, Mean, Max, Min };

// ---- ops that evaluate a PyTorch op chain with the chain's own rounding ----
// (bit-exact with the reference modules of Matrix-Game 2.0; see Backend.)

// The 3-D rotary embedding of Wan (and other video DiTs): tokens of a
// frames x h x w grid, frame-major (token = (f * h + i) * w + j); each head's
// head_dim / 2 interleaved pairs split into a temporal, a height and a width
// block of pairs[0], pairs[1], pairs[2] pairs. Pair j of axis block a at
// position pos_a (start[a] + f, i or j) turns by the f64 angle
// pos_a * (1 / theta^(2j / (2 * pairs[a]))).
struct Rope3dParams {
  std::array<int64_t, 3> grid{1, 1, 1};   // frames, h, w
  std::array<int64_t, 3> start{0, 0, 0};  // first position per axis
  std::array<int, 3> pairs{0, 0, 0};      // sums to head_dim / 2
  double theta = 10000.0;
};

// Where a normalisation rounds (normalize_l2).
//   PerOp: after every op, to y's dtype, as PyTorch evaluates the op chain in
//          that dtype (F32: plain fp32 arithmetic).
//   Once:  fp32 throughout, one rounding at the store.
enum class NormRounding { PerOp, Once };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // ---- matmul family ----
  virtual std::unique_ptr<PackedLinear> pack_linear(const LinearDesc& d) = 0;
  // y[M, N] = act(x[M, K] @ W^T + bias). x, y: F32 or BF16, rows may be strided.
  virtual void linear(const Tensor& x, const PackedLinear& w, Tensor& y,
                      Activation act = Activation::None) = 0;
  // Plain batched matmul c[b] = a[b] @ b[b] (+ c if accumulate), F32/BF16,
  // a: [Bt, M, K], b: [Bt, K, N], c: [Bt, M, N], any strides.
  virtual void matmul(const Tensor& a, const Tensor& b, Tensor& c) = 0;
  // y[M, N] = l2(relu(l1(x))): linear(x, l1, hidden, Relu) then
  // linear(hidden, l2, y), hidden [M, H] the caller's scratch, its dtype
  // where the hidden values round. A backend may keep the hidden values
  // out of memory (CPU: for K <= 4 inputs and N <= 16 outputs, the DETR
  // decoder's boxRPB MLP, 2 -> 256 -> 8); hidden's contents are then
  // unspecified.
  virtual void mlp_relu(const Tensor& x, const PackedLinear& l1, const PackedLinear& l2,
                        Tensor& hidden, Tensor& y) = 0;

  virtual std::unique_ptr<PackedConv> pack_conv(const ConvDesc& d) = 0;
  // x: [N, C, H, W] or [N, C, D, H, W]; y has the output shape.
  virtual void conv(const Tensor& x, const PackedConv& w, Tensor& y,
                    Activation act = Activation::None) = 0;

  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                         const AttentionParams& p) = 0;
  // attention with INT8 Q.K^T (SageAttention-style), same arguments, masks and
  // contract: K is smoothed by subtracting its mean over all Lk keys (per
  // batch, head and dim; the mean taken in double, rounded to fp32, the
  // difference in fp32) - a per-query constant shift of the scores, which
  // leaves the softmax unchanged - then each row (token) of Q and of the
  // smoothed K is quantized to symmetric INT8: s = max|x| / 127, q =
  // round_half_even(x * (127 / max|x|)) (an all-zero row: s = 0). Scores are
  // the exact integer dot times s_q s_k scale; the softmax is fp32, and the
  // P.V product takes P and V rounded to bf16 with fp32 accumulation.
  virtual void attention_int8(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                              const AttentionParams& p) = 0;
  // Whether attention_int8 runs faster than attention for the DiT's shapes on
  // this backend and host: models take attention_int8 for precision INT8
  // only where it does (the reference: true, it has no speed to lose).
  virtual bool attention_int8_pays_off() = 0;

  // ---- normalisation (over the last dim unless stated) ----
  // weight/bias may be empty (no affine). eps as in the module.
  virtual void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                          Tensor& y) = 0;
  // y = x / sqrt(mean(x^2) + eps) * weight. For per-head RMS norm, pass a
  // [..., H, D] view: the norm is over D.
  virtual void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) = 0;
  // x: [N, C, *spatial]; groups divide C; weight/bias [C] or empty. Then
  // y = act(y) as the activation op would apply it to the stored y (the
  // norm's output rounds to y's dtype first): the VAE's GroupNorm + SiLU and
  // the SAM3 pixel decoder's GroupNorm + ReLU in one pass over y.
  virtual void group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias,
                          float eps, Tensor& y, Activation act = Activation::None) = 0;

  // ---- position / activations / elementwise ----
  // x, y: [B, L, H, D]; cos/sin: F32 [L, D/2]. Interleaved pairs:
  // (x[2i], x[2i+1]) -> (x0*c - x1*s, x0*s + x1*c).
  virtual void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) = 0;
  virtual void gelu(const Tensor& x, Tensor& y, bool tanh_approx) = 0;
  virtual void silu(const Tensor& x, Tensor& y) = 0;
  // y = act(x) elementwise, same shape (any strides), for the activations
  // no linear / conv precedes (e.g. ReLU after a GroupNorm). RoundGeluTanh
  // rounds x to y's dtype first, as the linear epilogue does.
  virtual void activation(const Tensor& x, Tensor& y, Activation act) = 0;
  // y = x * (1 + scale) + shift; shift/scale broadcast against x.
  virtual void modulate(const Tensor& x, const Tensor& shift, const Tensor& scale, Tensor& y) = 0;
  virtual void add(const Tensor& a, const Tensor& b, Tensor& y) = 0;  // broadcast
  virtual void mul(const Tensor& a, const Tensor& b, Tensor& y) = 0;  // broadcast
  // y = a + b * c (gated residual), broadcast.
  virtual void mul_add(const Tensor& a, const Tensor& b, const Tensor& c, Tensor& y) = 0;
  // y = x * alpha + beta.
  virtual void affine(const Tensor& x, float alpha, float beta, Tensor& y) = 0;
  virtual void softmax(const Tensor& x, Tensor& y) = 0;  // last dim

  // ---- resampling ----
  // x: [N, C, H, W] or [N, C, D, H, W]; integer scale factors per spatial dim
  // given by y's shape.
  virtual void upsample_nearest(const Tensor& x, Tensor& y) = 0;
  // torch.nn.functional.interpolate over [N, C, H, W] to y's H, W.
  // antialias as in PyTorch (bilinear/bicubic only, for downscaling).
  virtual void resize(const Tensor& x, Tensor& y, ResizeMode mode, bool align_corners,
                      bool antialias) = 0;
  // resize into a window of its result: y [N, C, h, w] receives rows
  // [y0, y0 + h) and columns [x0, x0 + w) of the [N, C, out_h, out_w] tensor
  // resize would write, bit for bit, at the cost of the window only (a
  // detection's mask region of a 4K frame instead of the whole frame).
  virtual void resize_window(const Tensor& x, Tensor& y, const ResizeWindow& window,
                             ResizeMode mode, bool align_corners, bool antialias) = 0;

  // ---- data movement ----
  // Copy any strided view into y (same shape), converting dtype with the
  // PyTorch rules of runtime/dtype.h. Covers transpose (copy a permuted view)
  // and slice (copy a sliced view).
  virtual void copy(const Tensor& x, Tensor& y) = 0;
  // Concatenate along dim into y.
  virtual void concat(std::span<const Tensor> xs, int dim, Tensor& y) = 0;
  // Reduce dim `dim` (y has that dim of size 1).
  virtual void reduce(const Tensor& x, int dim, ReduceOp op, Tensor& y) = 0;

  // ---- quantization ----
  // Per-row (token) dynamic symmetric int8: scale[m] = max|x[m,:]| / 127,
  // q = clamp(round_half_even(x / scale), -127, 127). x: [M, K] F32/BF16,
  // q: I8 [M, K], scale: F32 [M]. A zero row gets scale 1 and q = 0.
  virtual void quantize_rows_int8(const Tensor& x, Tensor& q, Tensor& scale) = 0;

  // ---- op chains rounded as PyTorch rounds them (bit-exact goldens) ----
  // Wan's 3-D RoPE (Rope3dParams): x, y [tokens, H, D] with tokens the
  // grid's product, D = 2 * sum(pairs), F32 or BF16, y may alias x. cos/sin
  // and the complex product in f64 (torch's complex128 multiply: re = a c - b s,
  // im = b c + a s, two products and one add each, no FMA), rounded once.
  virtual void rope_3d(const Tensor& x, const Rope3dParams& p, Tensor& y) = 0;
  // rope (same shapes and table) evaluated as PyTorch's x * cos +
  // rotate(x) * sin over an F32 table: each product and the sum rounded to
  // fp32 (no FMA, no wider intermediate), then the store rounds to y's dtype.
  virtual void rope_unfused(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) = 0;
  // Weight-free RMS norm over the last dim, x * rsqrt(mean(x^2) + eps), every
  // op rounded to y's dtype as PyTorch computes it on a tensor of that dtype
  // (x^2 rounded, mean accumulated in fp32 in order and rounded, + eps
  // rounded, rsqrt as 1 / sqrt with the root rounded first, the product
  // rounded). x, y: same shape and dtype, y may alias x.
  virtual void rms_norm_stepwise(const Tensor& x, float eps, Tensor& y) = 0;
  // y = a + b * c (broadcast, as mul_add) with the product rounded to y's
  // dtype before the sum: PyTorch's separate mul and add. y may alias a or b.
  virtual void mul_add_stepwise(const Tensor& a, const Tensor& b, const Tensor& c, Tensor& y) = 0;
  // y = act(x / max(|x|_2, 1e-12) * scale * gamma) over the last dim (C):
  // F.normalize(x, dim=C) * scale * gamma, then act (None or Silu), rounded
  // per `rounding`. x, y contiguous, same shape and dtype (F32 or BF16), y may
  // alias x; gamma F32 [C].
  virtual void normalize_l2(const Tensor& x, const Tensor& gamma, float scale,
                            NormRounding rounding, Activation act, Tensor& y) = 0;
  // The parts of a softmax over the last dim as a flash attention block
  // keeps them: p = exp(x * scale - max(x * scale)) (the scaling and the
  // shift rounded to fp32) stored in p's dtype, inv_sum[r] = 1 / the fp32 sum
  // of the unrounded exps. x: F32 [.., L], contiguous; p: same shape, F32
  // (may be x) or BF16; inv_sum: F32 with x's shape less the last dim.
  // Normalising the product (p v) by inv_sum (mul) gives the attention.
  virtual void softmax_parts(const Tensor& x, float scale, Tensor& p, Tensor& inv_sum) = 0;
};

// The scalar oracle (runtime/ref) and the fast CPU backend (runtime/cpu).
std::unique_ptr<Backend> make_ref_backend();
std::unique_ptr<Backend> make_cpu_backend();

// The CUDA backend (runtime/cuda), a module built with -DFLICK_CUDA=ON and
// loaded on first use, so flick starts without the CUDA libraries:
// $FLICK_CUDA_MODULE if set, else libflick_cuda.so next to the executable,
// else on the library path. An unavailable() Status says what is missing (the
// module, a library it needs, the driver, a GPU). Its ops take tensors in
// device memory (Device::CUDA).
Expected<std::unique_ptr<Backend>> load_cuda_backend();
// The module's entry point (extern "C"): fills *out or writes the reason
// into err; kBackendModuleAbi guards against a module of another build.
inline constexpr int kBackendModuleAbi = 1;
using CudaBackendEntry = int (*)(int abi, Backend** out, char* err, size_t err_len);
inline constexpr const char* kCudaBackendEntry = "flick_cuda_backend_create";

}  // namespace flick
