// The cuDNN graphs the models make the CUDA backend build, at real shapes:
// the deviceless probe (cudnn_probe.cpp, CI) checks each has an engine
// config on sm_80 / sm_89 / sm_90. Shapes from shared/research/
// cuda-backend.md's probe (Matrix-Game chunk vs window, Wan VAE convs) and
// the models' configs; update when a model adds a shape.
#pragma once

#include <string>
#include <vector>

#include "runtime/cuda/cublaslt_plan.h"
#include "runtime/cuda/cudnn_graph.h"

namespace flick::cuda {

struct ModelSdpa {
  std::string name;
  SdpaShape shape;
};
struct ModelConv {
  std::string name;
  ConvShape shape;
};

inline SdpaShape bshd_sdpa(int64_t h, int64_t s_q, int64_t s_kv, int64_t d) {
  SdpaShape s;
  s.b = 1, s.h = h, s.s_q = s_q, s.s_kv = s_kv, s.d = d;
  s.q_stride = s.o_stride = bshd_strides(h, s_q, d);
  s.kv_stride = bshd_strides(h, s_kv, d);
  return s;
}

// BF16 attention heads of d <= 256 (larger heads, the VAEs' single-head mid
// attention, d = 384 / 512, take the GEMM + softmax fallback).
inline std::vector<ModelSdpa> model_sdpa_shapes() {
  return {
      {"wan-dit mg2 chunk->window h12 d128 1560x4680", bshd_sdpa(12, 1560, 4680, 128)},
      {"wan-dit mg2 self h12 d128 1560x1560", bshd_sdpa(12, 1560, 1560, 128)},
      {"wan-dit cross clip h12 d128 1560x257", bshd_sdpa(12, 1560, 257, 128)},
      {"framepack-dit h24 d128 5376x5376", bshd_sdpa(24, 5376, 5376, 128)},
      {"clip-vision-h h16 d80 257x257", bshd_sdpa(16, 257, 257, 80)},
      {"siglip-so400m h16 d72 729x729", bshd_sdpa(16, 729, 729, 72)},
      {"sam3 h16 d64 5184x5184", bshd_sdpa(16, 5184, 5184, 64)},
  };
}

// Graphs the backend does NOT send to cuDNN's SDPA (head dims over 256 take
// the GEMM + softmax fallback). cuDNN 9.19's heuristics still offer one
// engine config for them without a GPU (the refusal comes at plan
// finalization, which needs one), so the probe only reports their count.
inline std::vector<ModelSdpa> fallback_sdpa_shapes() {
  return {
      {"wan-vae mid attention h1 d384 1560x1560", bshd_sdpa(1, 1560, 1560, 384)},
      {"hunyuan-vae mid attention h1 d512 1600x1600", bshd_sdpa(1, 1600, 1600, 512)},
  };
}
// A control the heuristics must refuse (head dim 12, not a multiple of 8):
// shows that the probe's check can fail at all.
inline ModelSdpa control_refused_sdpa() {
  return {"control: d12 (must be refused)", bshd_sdpa(2, 64, 64, 12)};
}

// conv3d {n, c, d, h, w}, weights {k, c, kd, kh, kw}; NCDHW activations (the
// models' layout) and channels-last weights.
inline ConvShape conv3d(int64_t c_in, int64_t c_out, int64_t k, std::array<int64_t, 3> dhw,
                        std::array<int64_t, 3> pre, std::array<int64_t, 3> post,
                        bool channels_last_x) {
  ConvShape s;
  s.spatial_dims = 3;
  s.x_dims = {1, c_in, dhw[0], dhw[1], dhw[2]};
  s.w_dims = {c_out, c_in, k, k, k};
  s.y_dims = {1, c_out, dhw[0] + pre[0] + post[0] - (k - 1), dhw[1] + pre[1] + post[1] - (k - 1),
              dhw[2] + pre[2] + post[2] - (k - 1)};
  s.x_strides = channels_last_x ? channels_last_strides(s.x_dims) : contiguous_strides(s.x_dims);
  s.y_strides = channels_last_x ? channels_last_strides(s.y_dims) : contiguous_strides(s.y_dims);
  s.w_strides = channels_last_strides(s.w_dims);
  s.pre_pad = {pre[0], pre[1], pre[2]};
  s.post_pad = {post[0], post[1], post[2]};
  s.stride = {1, 1, 1};
  s.dilation = {1, 1, 1};
  return s;
}

inline std::vector<ModelConv> model_conv_shapes() {
  std::vector<ModelConv> v;
  for (bool cl : {true, false}) {
    const std::string lay = cl ? " ndhwc" : " ncdhw";
    // Wan VAE decoder: causal time padding (2, 0), spatial 1.
    v.push_back({"wan-vae 3^3 384->384 @4x60x104" + lay,
                 conv3d(384, 384, 3, {4, 60, 104}, {2, 1, 1}, {0, 1, 1}, cl)});
    v.push_back({"wan-vae 3^3 96->96 @3x480x832" + lay,
                 conv3d(96, 96, 3, {3, 480, 832}, {2, 1, 1}, {0, 1, 1}, cl)});
    v.push_back({"wan-vae 1^3 512->512 @4x60x104" + lay,
                 conv3d(512, 512, 1, {4, 60, 104}, {0, 0, 0}, {0, 0, 0}, cl)});
    // HunyuanVideo VAE: replicate-padded by our functor, then a pad-0 conv.
    v.push_back({"hunyuan-vae 3^3 512->512 @(3+2)x(80+2)x(80+2) pad0" + lay,
                 conv3d(512, 512, 3, {5, 82, 82}, {0, 0, 0}, {0, 0, 0}, cl)});
    v.push_back({"hunyuan-vae 3^3 128->128 @(9+2)x(642)x(642) pad0" + lay,
                 conv3d(128, 128, 3, {11, 642, 642}, {0, 0, 0}, {0, 0, 0}, cl)});
  }
  return v;
}

// The models' linear layers as the backend lays them out for cuBLASLt (TN:
// A = W stored K x N read transposed, B = X stored K x T, D = N x T) with T
// tokens: BF16 into an fp32 result, and INT8 (IMMA) into int32.
struct ModelGemm {
  std::string name;
  int64_t n, k, t;
  bool int8;
};
inline std::vector<ModelGemm> model_gemm_shapes() {
  return {
      {"wan-dit qkv/o 1536x1536 t1560 bf16", 1536, 1536, 1560, false},
      {"wan-dit ffn up 8960x1536 t1560 bf16", 8960, 1536, 1560, false},
      {"wan-dit ffn down 1536x8960 t1560 bf16", 1536, 8960, 1560, false},
      {"wan-dit ffn up 8960x1536 t1560 int8", 8960, 1536, 1560, true},
      {"framepack-dit qkv 3072x3072 t5376 bf16", 3072, 3072, 5376, false},
  };
}
inline Expected<std::unique_ptr<LtDescs>> model_gemm_descs(const ModelGemm& g) {
  const cudaDataType_t ab = g.int8 ? CUDA_R_8I : CUDA_R_16BF;
  return lt_descs({nullptr, ab, true, g.k, g.n, g.k, 0}, {nullptr, ab, false, g.k, g.t, g.k, 0},
                  g.int8 ? CUDA_R_32I : CUDA_R_32F, g.n, g.t, g.n, 0, 1, 32u << 20);
}

}  // namespace flick::cuda
