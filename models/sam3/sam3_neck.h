// The SAM3 dual ViTDet neck (sam3/model/necks.py Sam3DualViTDetNeck, SAM3
// half) and its DETR sine position encoding (position_encoding.py
// PositionEmbeddingSine, num_pos_feats = d_model, normalize, T = 1e4), as the
// image path uses them (SAM3VLBackbone scalp=1: the 0.5x level is dropped):
//
//   x: [1, C, g, g] (C = 1024, g = 72)
//   level 0 (4x):  convT2x2 C->C/2, GELU, convT2x2 C/2->C/4, conv1x1 ->d, conv3x3   // [1, d, 4g,
//   4g] level 1 (2x):  convT2x2 C->C/2, conv1x1 ->d, conv3x3                             // [1, d,
//   2g, 2g] level 2 (1x):  conv1x1 C->d, conv3x3                                             // [1,
//   d, g, g] pos(level):    [pos_y(d/2); pos_x(d/2)], pos_a[2j] = sin(a / T^(2j/(d/2))),
//                  pos_a[2j+1] = cos(same), a = (i+1) / (n + 1e-6) * 2 pi          // [1, d, n, n]
//
// A 2x2 stride-2 transposed conv has no overlapping taps, so it runs as one
// 1x1 convolution C -> 4 C' scattered into the 2x-upsampled map; the maps
// between the convolutions are channels-last (no oneDNN reorders). The position encodings are
// constants, computed at load. The 0.5x level's weights are recognised and skipped (scalp=1).
// The 1x1 conv after the last convT of levels 0 and 1 is folded into that
// convT (sam3_neck.cpp, load_weights), which then writes d channels.
//
// Precision F32, BF16 (weights and stored activations rounded to bf16,
// fp32 accumulation; the position encodings are rounded to bf16 as the
// reference's `.to(sam3_x_out.dtype)` does) or INT8 (every convolution INT8,
// runtime/ref/conv_int8.h: weights per output channel, activations per call;
// activations stored bf16 as in BF16). The neck's convs are half the bf16
// image side at 1008^2 (the 3x3 at 288^2 alone 0.2 s on a Zen 4); their
// INT8 error on the goldens: tests/sam3 (Sam3Components.NeckInt8,
// Sam3ImageModelGolden.Int8*AgreesWithTheF32Reference).
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"
#include "runtime/weights/weight_store.h"

namespace flick {

struct Sam3NeckConfig {
  int64_t in_channels = 0;           // C: 1024 (the student head's output)
  int64_t d_model = 0;               // d: 256
  int64_t grid = 0;                  // g: 72 (not in any shape; given at load)
  static constexpr int kLevels = 3;  // 4x, 2x, 1x (scalp=1 drops 0.5x)

  int64_t side(int level) const { return grid * (int64_t{4} >> level); }
};

// The DETR sine encoding of an n x n map, [d, n, n] F32 (d = 2 * feats per axis).
void sam3_sine_position(int64_t d, int64_t n, float* out);

class Sam3Neck {
 public:
  using Tap = std::function<void(std::string_view name, const Tensor& t)>;

  // `vision` is the neck's prefix ("...backbone.vision_backbone."; the
  // levels are under "convs.").
  static Expected<Sam3Neck> load(const WeightView& vision, Backend& backend, Precision precision,
                                 int64_t grid = 72);

  const Sam3NeckConfig& config() const { return cfg_; }
  DType activation_dtype() const { return act_; }
  // The constant position encoding of a level, [1, d, n, n] in activation_dtype().
  const Tensor& position(int level) const { return pos_[static_cast<size_t>(level)].t; }

  // The layout of levels 0 and 1, which only the mask head reads: its
  // pixel decoder's (SegHead::channels_last()). Channels-last by default.
  void set_levels_channels_last(bool yes) { levels_channels_last_ = yes; }

  // x: [1, C, g, g] F32 or BF16. Returns the three levels [1, d, n, n],
  // views into the component's arena valid until the next forward(): levels
  // 0 and 1 channels-last (permuted [1, n, n, d] buffers) unless set
  // otherwise, level 2 plain. Taps "level{i}".
  Expected<std::array<Tensor, Sam3NeckConfig::kLevels>> forward(const Tensor& x,
                                                                const Tap& tap = {});

 private:
  struct ConvT {  // a 2x2 stride-2 ConvTranspose2d as a 1x1 convolution
    int64_t in = 0, out = 0;
    std::unique_ptr<PackedConv> conv;  // [4 out, in, 1, 1], rows (dy, dx, o)
  };

  Sam3Neck() = default;
  Status load_weights(const WeightView& vision);
  void plan();
  // y[1, out, 2h, 2h] = convT(x[1, in, h, h]) with `act` fused.
  void conv_transpose(const Tensor& x, const ConvT& c, Tensor& y, Activation act);

  Sam3NeckConfig cfg_;
  Backend* backend_ = nullptr;
  Precision precision_ = Precision::F32;
  DType act_ = DType::F32;
  bool levels_channels_last_ = true;

  std::vector<OwnedTensor> owned_;
  std::vector<OwnedTensor> pos_;  // per level
  // up4_1_ and up2_ carry their level's 1x1 conv (load_weights); level 2's
  // stays a conv.
  ConvT up4_0_, up4_1_, up2_;
  std::unique_ptr<PackedConv> conv1x1_level2_;
  std::array<std::unique_ptr<PackedConv>, Sam3NeckConfig::kLevels> conv3x3_;

  Arena arena_;
  Arena::BufferId cols_ = -1, up_a_ = -1, mid_ = -1;
  std::array<Arena::BufferId, Sam3NeckConfig::kLevels> out_{-1, -1, -1};
};

}  // namespace flick
