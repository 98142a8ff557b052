#include "models/hunyuan_vae/hunyuan_vae_sampling.h"

#include <string>
#include <utility>

namespace flick::hunyuan_vae {
namespace {

int64_t log2_exact(int64_t v) {
  int64_t n = 0;
  while ((int64_t{1} << n) < v) ++n;
  return (int64_t{1} << n) == v ? n : -1;
}

}  // namespace

Expected<Resample> encoder_resample(int64_t i, int64_t levels, int64_t spatial_ratio,
                                    int64_t temporal_ratio) {
  const int64_t ns = log2_exact(spatial_ratio), nt = log2_exact(temporal_ratio);
  if (ns < 0)
    return invalid_input("spatial_compression_ratio " + std::to_string(spatial_ratio) +
                         ": expected a power of 2");
  const bool last = i == levels - 1;
  Resample r;
  r.spatial = i < ns;  // int(np.log2(ratio)) (AKHV:443)
  if (temporal_ratio == 4) {
    r.temporal = i >= levels - 1 - nt && !last;  // AKHV:446-450
  } else if (temporal_ratio == 8) {
    r.temporal = i < nt;  // AKHV:451-453
  } else {
    return invalid_input("temporal_compression_ratio " + std::to_string(temporal_ratio) +
                         ": the encoder supports 4 or 8");
  }
  return r;
}

Expected<Resample> decoder_resample(int64_t i, int64_t levels, int64_t spatial_ratio,
                                    int64_t temporal_ratio) {
  if (temporal_ratio != 4)
    return invalid_input("temporal_compression_ratio " + std::to_string(temporal_ratio) +
                         ": the decoder supports 4 (AKHV:580)");
  return encoder_resample(i, levels, spatial_ratio, temporal_ratio);  // AKHV:574-579, same rules
}

Expected<DownBlock> DownBlock::load(const WeightView& v, Backend& be, const Numerics& num,
                                    int64_t in, int64_t out, int64_t resnets, int64_t groups,
                                    Resample rs) {
  DownBlock b;
  for (int64_t i = 0; i < resnets; ++i) {
    FLICK_ASSIGN_OR_RETURN(ResnetBlock r,
                           ResnetBlock::load(v.sub("resnets." + std::to_string(i)), be, num,
                                             i == 0 ? in : out, out, groups));
    b.resnets_.push_back(std::move(r));
  }
  if (v.has("resnets." + std::to_string(resnets) + ".conv1.conv.weight"))
    return invalid_input(v.full_name("resnets." + std::to_string(resnets)) +
                         ": unexpected (layers_per_block is " + std::to_string(resnets) + ")");
  if (rs.any()) {
    FLICK_ASSIGN_OR_RETURN(CausalConv3d c, CausalConv3d::load(v, "downsamplers.0.conv", be, num,
                                                              out, out, rs.factors()));
    b.down_ = std::make_unique<CausalConv3d>(std::move(c));
  } else if (v.has("downsamplers.0.conv.conv.weight")) {
    return invalid_input(v.full_name("downsamplers.0.conv.conv.weight") +
                         ": unexpected (this level does not downsample)");
  }
  return b;
}

OwnedTensor DownBlock::forward(Backend& be, const Tensor& x, const Tap& tap,
                               std::string_view prefix) const {
  OwnedTensor h = resnets_[0].forward(be, x);
  tap_if(tap, std::string(prefix) + "res0", h.t);
  for (size_t i = 1; i < resnets_.size(); ++i) h = resnets_[i].forward(be, h.t);
  if (down_) h = down_->forward(be, h.t);
  return h;
}

OwnedTensor upsample_causal(Backend& be, const Tensor& x, int64_t ft, int64_t fs) {
  const int64_t c = x.dim(1), t = x.dim(2), h = x.dim(3), w = x.dim(4);
  OwnedTensor y(x.dtype, Shape{1, c, 1 + ft * (t - 1), fs * h, fs * w});
  Tensor first = frames(y.t, 0, 1);
  be.upsample_nearest(frames(x, 0, 1), first);
  if (t > 1) {
    Tensor rest = frames(y.t, 1, ft * (t - 1));
    be.upsample_nearest(frames(x, 1, t - 1), rest);
  }
  return y;
}

Expected<UpBlock> UpBlock::load(const WeightView& v, Backend& be, const Numerics& num, int64_t in,
                                int64_t out, int64_t resnets, int64_t groups, Resample rs) {
  UpBlock b;
  b.rs_ = rs;
  for (int64_t i = 0; i < resnets; ++i) {
    FLICK_ASSIGN_OR_RETURN(ResnetBlock r,
                           ResnetBlock::load(v.sub("resnets." + std::to_string(i)), be, num,
                                             i == 0 ? in : out, out, groups));
    b.resnets_.push_back(std::move(r));
  }
  if (v.has("resnets." + std::to_string(resnets) + ".conv1.conv.weight"))
    return invalid_input(v.full_name("resnets." + std::to_string(resnets)) +
                         ": unexpected (layers_per_block + 1 is " + std::to_string(resnets) + ")");
  if (rs.any()) {
    FLICK_ASSIGN_OR_RETURN(CausalConv3d c,
                           CausalConv3d::load(v, "upsamplers.0.conv", be, num, out, out));
    b.up_conv_ = std::make_unique<CausalConv3d>(std::move(c));
  } else if (v.has("upsamplers.0.conv.conv.weight")) {
    return invalid_input(v.full_name("upsamplers.0.conv.conv.weight") +
                         ": unexpected (this level does not upsample)");
  }
  return b;
}

OwnedTensor UpBlock::forward(Backend& be, const Tensor& x, const Tap& tap,
                             std::string_view prefix) const {
  OwnedTensor h = resnets_[0].forward(be, x);
  tap_if(tap, std::string(prefix) + "res0", h.t);
  for (size_t i = 1; i < resnets_.size(); ++i) h = resnets_[i].forward(be, h.t);
  if (up_conv_) {
    const std::array<int64_t, 3> f = rs_.factors();
    const OwnedTensor u = upsample_causal(be, h.t, f[0], f[1]);
    h = up_conv_->forward(be, u.t);
    tap_if(tap, std::string(prefix) + "upsample", h.t);
  }
  return h;
}

}  // namespace flick::hunyuan_vae
