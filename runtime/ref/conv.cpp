// Reference convolution: direct loops over NCHW / NCDHW with the rounding
// points of the linear reference (F32 exact inputs, BF16/FP8 activations
// rounded to bf16, products accumulated in double; FP8 scale per output
// channel on the accumulator), then + bias, activation, one store rounding.
// 2-d convolutions run as 3-d ones with a depth of 1.
#include <vector>

#include "runtime/ref/conv_int8.h"
#include "runtime/ref/matmul_common.h"
#include "runtime/ref/ops.h"

namespace flick::ref {
namespace {

class RefConv final : public PackedConv {
 public:
  RefConv(const ConvDesc& d, PreparedWeights w) : desc_(d), w_(std::move(w)) {
    // The descriptor keeps views of our own copies, never of the caller's.
    desc_.w = w_.w.t.reshape(d.w.shape);
    desc_.w_scale = w_.has_scale() ? w_.scale.t : Tensor{};
    desc_.bias = w_.has_bias() ? w_.bias.t : Tensor{};
  }
  const ConvDesc& desc() const override { return desc_; }
  const PreparedWeights& weights() const { return w_; }

 private:
  ConvDesc desc_;
  PreparedWeights w_;
};

// Geometry of one conv call with 2-d problems lifted to 3-d.
struct Geometry {
  int64_t n, c, o, groups;
  std::array<int64_t, 3> in, out, k, stride, pad, dil;
};

Geometry geometry(const Tensor& x, const ConvDesc& d, const Tensor& y) {
  const int sd = d.spatial_dims;
  FLICK_CHECK(sd == 2 || sd == 3, "conv spatial_dims must be 2 or 3");
  FLICK_CHECK(x.ndim() == sd + 2 && y.ndim() == sd + 2 && d.w.ndim() == sd + 2,
              "conv ranks: x " + x.str() + ", w " + d.w.str() + ", y " + y.str());
  Geometry g{};
  g.n = x.dim(0);
  g.c = x.dim(1);
  g.o = d.w.dim(0);
  g.groups = d.groups;
  const int off = 3 - sd;  // 2-d: depth 1, kernel 1, no padding
  for (int i = 0; i < 3; ++i) {
    const bool lifted = i < off;
    const int s = i - off;
    g.in[i] = lifted ? 1 : x.dim(2 + s);
    g.out[i] = lifted ? 1 : y.dim(2 + s);
    g.k[i] = lifted ? 1 : d.w.dim(2 + s);
    g.stride[i] = lifted ? 1 : d.stride[static_cast<size_t>(s)];
    g.pad[i] = lifted ? 0 : d.padding[static_cast<size_t>(s)];
    g.dil[i] = lifted ? 1 : d.dilation[static_cast<size_t>(s)];
    const int64_t expect = (g.in[i] + 2 * g.pad[i] - g.dil[i] * (g.k[i] - 1) - 1) / g.stride[i] + 1;
    FLICK_CHECK(g.out[i] == expect, "conv output size mismatch: x " + x.str() + ", y " + y.str());
  }
  FLICK_CHECK(
      g.groups >= 1 && g.c % g.groups == 0 && g.o % g.groups == 0 && d.w.dim(1) == g.c / g.groups &&
          y.dim(0) == g.n && y.dim(1) == g.o,
      "conv channels: x " + x.str() + ", w " + d.w.str() + ", groups " + std::to_string(g.groups));
  return g;
}

}  // namespace

std::unique_ptr<PackedConv> pack_conv(const ConvDesc& d) {
  if (d.precision == Precision::INT8) return pack_conv_int8(d);  // conv_int8.cpp
  FLICK_CHECK(d.w.ndim() == d.spatial_dims + 2, "conv weight rank: " + d.w.str());
  return std::make_unique<RefConv>(d, prepare_weights(d.w, d.w_scale, d.bias, d.precision));
}

void conv(const Tensor& x, const PackedConv& packed, Tensor& y, Activation act) {
  if (is_conv_int8(packed)) return conv_int8(x, packed, y, act);
  const auto* rc = dynamic_cast<const RefConv*>(&packed);
  FLICK_CHECK(rc != nullptr, "weights were packed by another backend");
  const ConvDesc& d = rc->desc();
  const PreparedWeights& w = rc->weights();
  const Geometry g = geometry(x, d, y);
  const bool round_x = w.precision != Precision::F32;
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  const int64_t kvol = g.k[0] * g.k[1] * g.k[2];
  const int sd = d.spatial_dims;

  // x as fp32 (rounded to bf16 where the precision says so), [N, C, D, H, W].
  const int64_t plane = g.in[0] * g.in[1] * g.in[2];
  std::vector<float> xs(static_cast<size_t>(g.n * g.c * plane));
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t ch = 0; ch < g.c; ++ch)
      for (int64_t i = 0; i < plane; ++i) {
        const int64_t zd = i / (g.in[1] * g.in[2]), zh = i / g.in[2] % g.in[1], zw = i % g.in[2];
        const void* p = sd == 3 ? x.at({b, ch, zd, zh, zw}) : x.at({b, ch, zh, zw});
        const float v = load_as_f32(x.dtype, p, 0);
        xs[static_cast<size_t>((b * g.c + ch) * plane + i)] = round_x ? round_bf16(v) : v;
      }
  auto weight = [&](int64_t o, int64_t j) {
    return w.precision == Precision::F32 ? w.w.t.ptr<float>()[o * w.k() + j]
                                         : bf16_to_f32(w.w.t.ptr<uint16_t>()[o * w.k() + j]);
  };

  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t o = 0; o < g.o; ++o) {
      const int64_t grp = o / og;
      for (int64_t od = 0; od < g.out[0]; ++od)
        for (int64_t oh = 0; oh < g.out[1]; ++oh)
          for (int64_t ow = 0; ow < g.out[2]; ++ow) {
            double acc = 0;
            for (int64_t ci = 0; ci < cg; ++ci)
              for (int64_t kd = 0; kd < g.k[0]; ++kd)
                for (int64_t kh = 0; kh < g.k[1]; ++kh)
                  for (int64_t kw = 0; kw < g.k[2]; ++kw) {
                    const int64_t zd = od * g.stride[0] - g.pad[0] + kd * g.dil[0];
                    const int64_t zh = oh * g.stride[1] - g.pad[1] + kh * g.dil[1];
                    const int64_t zw = ow * g.stride[2] - g.pad[2] + kw * g.dil[2];
                    if (zd < 0 || zd >= g.in[0] || zh < 0 || zh >= g.in[1] || zw < 0 ||
                        zw >= g.in[2])
                      continue;
                    const int64_t ch = grp * cg + ci;
                    const float xv = xs[static_cast<size_t>(
                        ((b * g.c + ch) * g.in[0] + zd) * g.in[1] * g.in[2] + zh * g.in[2] + zw)];
                    acc += static_cast<double>(xv) *
                           weight(o, ci * kvol + (kd * g.k[1] + kh) * g.k[2] + kw);
                  }
            float v = static_cast<float>(acc);
            if (w.has_scale()) v *= w.scale.t.ptr<float>()[o];
            if (w.has_bias()) v += w.bias.t.ptr<float>()[o];
            void* p = sd == 3 ? y.at({b, o, od, oh, ow}) : y.at({b, o, oh, ow});
            store_from_f32(y.dtype, p, 0, static_cast<float>(activate(v, act, y.dtype)));
          }
    }
}

}  // namespace flick::ref
