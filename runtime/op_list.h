// The op list of runtime/backend.h as an X-macro, so the free-function
// namespaces flick::ref and flick::cpu and the Backend adapters over them are
// declared from one place: X(return type, name, (params), (args)).
#pragma once

#include "runtime/backend.h"

#define FLICK_OP_LIST(X)                                                                        \
  X(std::unique_ptr<PackedLinear>, pack_linear, (const LinearDesc& d), (d))                     \
  X(void, linear, (const Tensor& x, const PackedLinear& w, Tensor& y, Activation act),          \
    (x, w, y, act))                                                                             \
  X(void, matmul, (const Tensor& a, const Tensor& b, Tensor& c), (a, b, c))                     \
  X(void, mlp_relu,                                                                             \
    (const Tensor& x, const PackedLinear& l1, const PackedLinear& l2, Tensor& hidden,           \
     Tensor& y),                                                                                \
    (x, l1, l2, hidden, y))                                                                     \
  X(std::unique_ptr<PackedConv>, pack_conv, (const ConvDesc& d), (d))                           \
  X(void, conv, (const Tensor& x, const PackedConv& w, Tensor& y, Activation act),              \
    (x, w, y, act))                                                                             \
  X(void, attention,                                                                            \
    (const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, const AttentionParams& p), \
    (q, k, v, out, p))                                                                          \
  X(void, attention_int8,                                                                       \
    (const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, const AttentionParams& p), \
    (q, k, v, out, p))                                                                          \
  X(bool, attention_int8_pays_off, (), ())                                                      \
  X(void, layer_norm,                                                                           \
    (const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y),           \
    (x, weight, bias, eps, y))                                                                  \
  X(void, rms_norm, (const Tensor& x, const Tensor& weight, float eps, Tensor& y),              \
    (x, weight, eps, y))                                                                        \
  X(void, group_norm,                                                                           \
    (const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, float eps,      \
     Tensor& y, Activation act),                                                                \
    (x, groups, weight, bias, eps, y, act))                                                     \
  X(void, rope, (const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y),             \
    (x, cos, sin, y))                                                                           \
  X(void, gelu, (const Tensor& x, Tensor& y, bool tanh_approx), (x, y, tanh_approx))           \
  X(void, silu, (const Tensor& x, Tensor& y), (x, y))                                           \
  X(void, activation, (const Tensor& x, Tensor& y, Activation act), (x, y, act))                \
  X(void, modulate, (const Tensor& x, const Tensor& shift, const Tensor& scale, Tensor& y),     \
    (x, shift, scale, y))                                                                       \
  X(void, add, (const Tensor& a, const Tensor& b, Tensor& y), (a, b, y))                        \
  X(void, mul, (const Tensor& a, const Tensor& b, Tensor& y), (a, b, y))                        \
  X(void, mul_add, (const Tensor& a, const Tensor& b, const Tensor& c, Tensor& y),              \
    (a, b, c, y))                                                                               \
  X(void, affine, (const Tensor& x, float alpha, float beta, Tensor& y), (x, alpha, beta, y))   \
  X(void, softmax, (const Tensor& x, Tensor& y), (x, y))                                        \
  X(void, upsample_nearest, (const Tensor& x, Tensor& y), (x, y))                               \
  X(void, resize,                                                                               \
    (const Tensor& x, Tensor& y, ResizeMode mode, bool align_corners, bool antialias),          \
    (x, y, mode, align_corners, antialias))                                                     \
  X(void, resize_window,                                                                        \
    (const Tensor& x, Tensor& y, const ResizeWindow& window, ResizeMode mode, bool align_corners, \
     bool antialias),                                                                           \
    (x, y, window, mode, align_corners, antialias))                                             \
  X(void, copy, (const Tensor& x, Tensor& y), (x, y))                                           \
  X(void, concat, (std::span<const Tensor> xs, int dim, Tensor& y), (xs, dim, y))               \
  X(void, reduce, (const Tensor& x, int dim, ReduceOp op, Tensor& y), (x, dim, op, y))          \
  X(void, quantize_rows_int8, (const Tensor& x, Tensor& q, Tensor& scale), (x, q, scale))       \
  X(void, rope_3d, (const Tensor& x, const Rope3dParams& p, Tensor& y), (x, p, y))              \
  X(void, rope_unfused, (const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y),     \
    (x, cos, sin, y))                                                                           \
  X(void, rms_norm_stepwise, (const Tensor& x, float eps, Tensor& y), (x, eps, y))              \
  X(void, mul_add_stepwise, (const Tensor& a, const Tensor& b, const Tensor& c, Tensor& y),     \
    (a, b, c, y))                                                                               \
  X(void, normalize_l2,                                                                         \
    (const Tensor& x, const Tensor& gamma, float scale, NormRounding rounding, Activation act,  \
     Tensor& y),                                                                                \
    (x, gamma, scale, rounding, act, y))                                                        \
  X(void, softmax_parts, (const Tensor& x, float scale, Tensor& p, Tensor& inv_sum),            \
    (x, scale, p, inv_sum))

#define FLICK_DECLARE_OP(ret, name, params, args) ret name params;
