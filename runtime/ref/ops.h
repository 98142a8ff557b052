// The scalar reference of every op: plain loops in fp32 (fp64 where that is
// what makes it an oracle), any strides. Slow by design; never on a hot path.
#pragma once

#include "runtime/op_list.h"

namespace flick::ref {
FLICK_OP_LIST(FLICK_DECLARE_OP)

// attention / attention_int8's argument checks (`op` names the op in the
// errors): q, k, v, out [B, L, H, D], k and v alike, out like q, the masks'
// shapes and dtypes.
void check_attention_args(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const AttentionParams& p);
// The checks of a separable bias (AttentionParams::bias_y / bias_x) against
// B, H, Lq and Lk, shared by the backends; returns its grid width W, or 0
// without one.
int64_t check_separable_bias(const char* op, const AttentionParams& p, int64_t B, int64_t H,
                             int64_t Lq, int64_t Lk);
// The additive bias of (b, h, query i, key j): p.bias, or the separable
// bias_y + bias_x (their sum rounded to fp32); 0 without one.
float attention_bias(const AttentionParams& p, int64_t b, int64_t h, int64_t i, int64_t j);
// Number of keys query row i may see under block-causal masking (cb > 0):
// key j is visible iff floor(j / cb) <= floor((i + Lk - Lq) / cb); lk when
// cb <= 0.
int64_t causal_key_end(int64_t i, int64_t lq, int64_t lk, int64_t cb);

// concat's checks and walk over the parts of y, each part written by
// copy_part: the CPU backend passes its fast copy.
void concat_with(std::span<const Tensor> xs, int dim, Tensor& y,
                 void (*copy_part)(const Tensor& x, Tensor& y));
}  // namespace flick::ref
