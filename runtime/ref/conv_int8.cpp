// Reference INT8 convolution: the activation quantization of conv_int8.h on
// every element of x, then the integer convolution evaluated by the float
// reference convolution on integer-valued operands (q - zero_point and the
// int8 weights as F32: every product and partial sum is an integer below
// 2^53, so its double accumulator is exact), then the epilogue.
#include "runtime/ref/conv_int8.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/ref/matmul_common.h"
#include "runtime/ref/ops.h"

namespace flick::ref {
namespace {

class RefConvInt8 final : public PackedConv {
 public:
  RefConvInt8(const ConvDesc& d, PreparedWeights w) : desc_(d), w_(std::move(w)) {
    // The int8 weights as F32 values, no bias: the accumulator convolution.
    OwnedTensor wf(DType::F32, d.w.shape);
    const int8_t* q = w_.w.t.ptr<int8_t>();
    for (int64_t i = 0; i < wf.t.numel(); ++i) wf.t.ptr<float>()[i] = q[i];
    ConvDesc acc = d;
    acc.w = wf.t;
    acc.w_scale = Tensor{};
    acc.bias = Tensor{};
    acc.precision = Precision::F32;
    acc_ = pack_conv(acc);
    desc_.w = w_.w.t.reshape(d.w.shape);
    desc_.w_scale = w_.scale.t;
    desc_.bias = w_.has_bias() ? w_.bias.t : Tensor{};
  }
  const ConvDesc& desc() const override { return desc_; }
  const PreparedWeights& weights() const { return w_; }
  const PackedConv& acc() const { return *acc_; }

 private:
  ConvDesc desc_;
  PreparedWeights w_;
  std::unique_ptr<PackedConv> acc_;
};

// Element i (logical row-major order) of t: its offset in elements.
int64_t offset_of(const Tensor& t, int64_t i, int64_t* channel) {
  int64_t off = 0;
  for (int d = t.ndim() - 1; d >= 0; --d) {
    const int64_t idx = i % t.dim(d);
    if (d == 1) *channel = idx;
    off += idx * t.stride(d);
    i /= t.dim(d);
  }
  return off;
}

}  // namespace

ConvInt8Act conv_int8_act() {
  // U8: most inputs of the Wan VAE's INT8 convs are SiLU outputs (>= -0.28),
  // which S8's symmetric range spends half its codes on. Measured with
  // tests/models/test_wan_vae_int8.cpp (Zen 4): full-width decode against
  // BF16 46.5 dB with U8 vs 43.1 dB with S8; the encoder's latents 0.0124 vs
  // 0.0172 rel L2 from fp32 (BF16 0.0091). The CPU backend handles the zero
  // point itself (explicit padding, folded into the bias: conv_int8.cpp),
  // not through oneDNN's src zero point, which 2.6's AMX int8 conv gets
  // wrong on padded 3-d inputs.
  return ConvInt8Act::U8;
}

ConvInt8Quant conv_int8_quant(float min, float max, ConvInt8Act act) {
  ConvInt8Quant p;
  if (act == ConvInt8Act::S8) {
    const float amax = std::max(std::fabs(min), std::fabs(max));
    if (amax == 0.f) return p;
    p.scale = amax / 127.f;
    p.inv_scale = 127.f / amax;
    return p;
  }
  p.lo = 0;
  p.hi = 255;
  const float lo = std::min(min, 0.f), hi = std::max(max, 0.f);
  if (hi - lo == 0.f) return p;
  p.scale = (hi - lo) / 255.f;
  p.inv_scale = 255.f / (hi - lo);
  p.zero_point = static_cast<int32_t>(std::clamp(std::nearbyint(-lo * p.inv_scale), 0.f, 255.f));
  return p;
}

int32_t conv_int8_q(float x, const ConvInt8Quant& p) {
  // nearbyint in the default mode: half to even, as the vector kernels.
  const auto r = static_cast<int32_t>(std::nearbyint(x * p.inv_scale));
  return std::clamp(r + p.zero_point, p.lo, p.hi);
}

std::unique_ptr<PackedConv> pack_conv_int8(const ConvDesc& d) {
  FLICK_CHECK(d.precision == Precision::INT8, "pack_conv_int8: precision must be INT8");
  FLICK_CHECK(d.w.ndim() == d.spatial_dims + 2, "conv weight rank: " + d.w.str());
  return std::make_unique<RefConvInt8>(d, prepare_weights(d.w, d.w_scale, d.bias, d.precision));
}

bool is_conv_int8(const PackedConv& w) { return dynamic_cast<const RefConvInt8*>(&w) != nullptr; }

void conv_int8(const Tensor& x, const PackedConv& packed, Tensor& y, Activation act) {
  const auto* rc = dynamic_cast<const RefConvInt8*>(&packed);
  FLICK_CHECK(rc != nullptr, "weights were packed by another backend");
  const PreparedWeights& w = rc->weights();
  const int64_t n = x.numel();
  std::vector<float> xs(static_cast<size_t>(n));
  int64_t ch = 0;
  float mn = 0.f, mx = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    xs[static_cast<size_t>(i)] = load_as_f32(x.dtype, x.data, offset_of(x, i, &ch));
    mn = i == 0 ? xs[0] : std::min(mn, xs[static_cast<size_t>(i)]);
    mx = i == 0 ? xs[0] : std::max(mx, xs[static_cast<size_t>(i)]);
  }
  const ConvInt8Quant p = conv_int8_quant(mn, mx, conv_int8_act());
  OwnedTensor xq(DType::F32, x.shape);  // q - zero_point, contiguous
  for (int64_t i = 0; i < n; ++i)
    xq.t.ptr<float>()[i] =
        static_cast<float>(conv_int8_q(xs[static_cast<size_t>(i)], p) - p.zero_point);
  OwnedTensor acc(DType::F32, y.shape);
  conv(xq.t, rc->acc(), acc.t, Activation::None);
  for (int64_t i = 0; i < y.numel(); ++i) {
    int64_t o = 0;
    const int64_t off = offset_of(y, i, &o);
    const float s = p.scale * w.scale.t.ptr<float>()[o];
    float v = acc.t.ptr<float>()[i] * s;
    if (w.has_bias()) v += w.bias.t.ptr<float>()[o];
    store_from_f32(y.dtype, y.data, off, static_cast<float>(activate(v, act, y.dtype)));
  }
}

}  // namespace flick::ref
