#include "models/wan_vae/wan_vae_blocks.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace flick::wan_vae {
namespace {

const DTypeSet kFloat{DType::F32, DType::BF16, DType::F16};

// A weight or bias in any float dtype; the conv packer converts it.
Expected<Tensor> get_float(const WeightView& v, const std::string& name, const Shape& shape) {
  return v.get(name, kFloat, shape);
}

}  // namespace

Tensor Scratch::get(DType dtype, const Shape& shape) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  if (buf_.t.empty() || buf_.t.nbytes() < bytes)
    buf_ = OwnedTensor(DType::U8, Shape{static_cast<int64_t>(bytes)});
  return Tensor::view(buf_.t.data, dtype, shape);
}

Expected<const TensorInfo*> require(const WeightView& v, std::string_view name, int ndim) {
  const TensorInfo* info = v.info(name);
  if (info == nullptr) return not_found(v.full_name(name) + ": missing from the checkpoint");
  if (static_cast<int>(info->shape.size()) != ndim)
    return invalid_input(v.full_name(name) + ": expected " + std::to_string(ndim) +
                         " dimensions, file has " + info->shape_str());
  return info;
}

// ---- CausalConv3d ----

Expected<CausalConv3d> CausalConv3d::load(const WeightView& v, std::string_view prefix, Backend& be,
                                          Precision precision) {
  const std::string p(prefix);
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* info, require(v, p + ".weight", 5));
  const std::vector<int64_t>& s = info->shape;
  if (s[2] != 1 && s[2] != 3)
    return invalid_input(v.full_name(p + ".weight") +
                         ": temporal kernel must be 1 or 3, file has " + info->shape_str());
  if (s[3] != s[4] || s[3] % 2 != 1)
    return invalid_input(v.full_name(p + ".weight") +
                         ": expected an odd square spatial kernel, file has " + info->shape_str());
  CausalConv3d c;
  c.cout_ = s[0];
  c.cin_ = s[1];
  c.kt_ = s[2];
  FLICK_ASSIGN_OR_RETURN(Tensor w,
                         get_float(v, p + ".weight", Shape{s[0], s[1], s[2], s[3], s[4]}));
  FLICK_ASSIGN_OR_RETURN(Tensor b, get_float(v, p + ".bias", Shape{s[0]}));
  ConvDesc d;
  d.w = w;
  d.bias = b;
  d.spatial_dims = 3;
  d.padding = {0, s[3] / 2, s[4] / 2};
  d.precision = precision;
  c.conv_ = be.pack_conv(d);
  return c;
}

Expected<CausalConv3d> CausalConv3d::load_2d(const WeightView& v, std::string_view prefix,
                                             Backend& be, Precision precision) {
  const std::string p(prefix);
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* info, require(v, p + ".weight", 4));
  const std::vector<int64_t>& s = info->shape;
  if (s[2] != s[3] || s[2] % 2 != 1)
    return invalid_input(v.full_name(p + ".weight") + ": expected an odd square kernel, file has " +
                         info->shape_str());
  CausalConv3d c;
  c.cout_ = s[0];
  c.cin_ = s[1];
  FLICK_ASSIGN_OR_RETURN(Tensor w, get_float(v, p + ".weight", Shape{s[0], s[1], s[2], s[3]}));
  FLICK_ASSIGN_OR_RETURN(Tensor b, get_float(v, p + ".bias", Shape{s[0]}));
  // A per-frame 2-D conv is a 3-D conv with a 1-frame kernel.
  ConvDesc d;
  d.w = w.reshape({s[0], s[1], 1, s[2], s[3]});
  d.bias = b;
  d.spatial_dims = 3;
  d.padding = {0, s[2] / 2, s[3] / 2};
  d.precision = precision;
  c.conv_ = be.pack_conv(d);
  return c;
}

void CausalConv3d::reset() {
  if (!cache_.t.empty() && !cache_zero_) std::memset(cache_.t.data, 0, cache_.t.nbytes());
  cache_zero_ = true;
}

void CausalConv3d::forward(Backend& be, const Tensor& x, Tensor& y) {
  FLICK_CHECK(x.ndim() == 5 && x.dim(1) == cin_ && y.ndim() == 5 && y.dim(1) == cout_ &&
                  y.dim(2) == x.dim(2),
              "CausalConv3d: x " + x.str() + " y " + y.str());
  if (kt_ == 1) {
    be.conv(x, *conv_, y, Activation::None);
    return;
  }
  const int64_t t = x.dim(2), h = x.dim(3), w = x.dim(4);
  const Shape cache_shape{1, cin_, 2, h, w};
  if (cache_.t.empty() || cache_.t.shape != cache_shape || cache_.t.dtype != x.dtype) {
    FLICK_CHECK(cache_zero_, "CausalConv3d: input size changed mid-stream: " + x.str());
    cache_ = OwnedTensor(x.dtype, cache_shape);
    std::memset(cache_.t.data, 0, cache_.t.nbytes());
  }
  // [1, I, 2 + T, H, W] = [cache, x]
  Tensor padded = padded_.get(x.dtype, Shape{1, cin_, 2 + t, h, w});
  Tensor front = padded.slice(2, 0, 2), back = padded.slice(2, 2, t);
  be.copy(cache_.t, front);
  be.copy(x, back);
  be.conv(padded, *conv_, y, Activation::None);
  be.copy(padded.slice(2, t, 2), cache_.t);
  cache_zero_ = false;
}

// ---- ChannelRmsNorm ----

Expected<ChannelRmsNorm> ChannelRmsNorm::load(const WeightView& v, std::string_view prefix,
                                              int64_t c, int trailing_ones) {
  const std::string name = std::string(prefix) + ".gamma";
  std::vector<int64_t> dims{c};
  for (int i = 0; i < trailing_ones; ++i) dims.push_back(1);
  ChannelRmsNorm n;
  FLICK_ASSIGN_OR_RETURN(Tensor g, v.get(name, DType::F32, Shape::from_vector(dims)));
  n.gamma_ = g.reshape({c});
  n.eps_ = 1e-24f / static_cast<float>(c);
  return n;
}

void ChannelRmsNorm::forward(Backend& be, const Tensor& x, Tensor& y) const {
  // The norm runs over C as the (strided) last dim of an NDHWC view.
  const Tensor xv = x.permute({0, 2, 3, 4, 1});
  Tensor yv = y.permute({0, 2, 3, 4, 1});
  be.rms_norm(xv, gamma_, eps_, yv);
}

// ---- ResidualBlock ----

Expected<ResidualBlock> ResidualBlock::load(const WeightView& v, Backend& be, Precision precision) {
  ResidualBlock r;
  FLICK_ASSIGN_OR_RETURN(r.conv1_, CausalConv3d::load(v, "residual.2", be, precision));
  FLICK_ASSIGN_OR_RETURN(r.conv2_, CausalConv3d::load(v, "residual.6", be, precision));
  const int64_t in = r.conv1_.in_channels(), out = r.conv1_.out_channels();
  if (r.conv2_.in_channels() != out || r.conv2_.out_channels() != out)
    return invalid_input(v.full_name("residual.6.weight") + ": expected " + std::to_string(out) +
                         " -> " + std::to_string(out) + " channels");
  FLICK_ASSIGN_OR_RETURN(r.norm1_, ChannelRmsNorm::load(v, "residual.0", in, 3));
  FLICK_ASSIGN_OR_RETURN(r.norm2_, ChannelRmsNorm::load(v, "residual.3", out, 3));
  if (in != out) {
    FLICK_ASSIGN_OR_RETURN(CausalConv3d s, CausalConv3d::load(v, "shortcut", be, precision));
    if (s.in_channels() != in || s.out_channels() != out)
      return invalid_input(v.full_name("shortcut.weight") + ": expected " + std::to_string(in) +
                           " -> " + std::to_string(out) + " channels");
    r.shortcut_ = std::make_unique<CausalConv3d>(std::move(s));
  } else if (v.has("shortcut.weight")) {
    return invalid_input(v.full_name("shortcut.weight") +
                         ": unexpected (the block keeps its channel count)");
  }
  return r;
}

void ResidualBlock::reset() {
  conv1_.reset();
  conv2_.reset();
}

void ResidualBlock::forward(Backend& be, const Tensor& x, Tensor& y) {
  const int64_t t = x.dim(2), hh = x.dim(3), ww = x.dim(4);
  Tensor h = h_.get(x.dtype, Shape{1, in_channels(), t, hh, ww});
  Tensor h2 = h2_.get(x.dtype, Shape{1, out_channels(), t, hh, ww});
  norm1_.forward(be, x, h);
  be.silu(h, h);
  conv1_.forward(be, h, h2);
  norm2_.forward(be, h2, h2);
  be.silu(h2, h2);
  conv2_.forward(be, h2, y);  // y = residual
  if (shortcut_) {
    Tensor s = h_.get(x.dtype, Shape{1, out_channels(), t, hh, ww});
    shortcut_->forward(be, x, s);
    be.add(y, s, y);
  } else {
    be.add(y, x, y);
  }
}

// ---- AttentionBlock ----

Expected<AttentionBlock> AttentionBlock::load(const WeightView& v, Backend& be,
                                              Precision precision) {
  AttentionBlock a;
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* qkv, require(v, "to_qkv.weight", 4));
  const int64_t c = qkv->shape[1];
  a.c_ = c;
  if (qkv->shape[0] != 3 * c || qkv->shape[2] != 1 || qkv->shape[3] != 1)
    return invalid_input(v.full_name("to_qkv.weight") + ": expected [3C, C, 1, 1], file has " +
                         qkv->shape_str());
  FLICK_ASSIGN_OR_RETURN(a.norm_, ChannelRmsNorm::load(v, "norm", c, 2));
  FLICK_ASSIGN_OR_RETURN(a.qkv_, CausalConv3d::load_2d(v, "to_qkv", be, precision));
  FLICK_TRY(v.get("proj.weight", kFloat, Shape{c, c, 1, 1}).status());  // 1x1, C -> C
  FLICK_ASSIGN_OR_RETURN(a.proj_, CausalConv3d::load_2d(v, "proj", be, precision));
  return a;
}

void AttentionBlock::forward(Backend& be, const Tensor& x, Tensor& y) {
  const int64_t c = c_, t = x.dim(2), hh = x.dim(3), ww = x.dim(4), l = hh * ww;
  Tensor h = h_.get(x.dtype, x.shape);
  norm_.forward(be, x, h);
  Tensor qkv = qkv_buf_.get(x.dtype, Shape{1, 3 * c, t, hh, ww});
  qkv_.forward(be, h, qkv);
  // [3, C, T, L, 1] -> q/k/v [T, L, 1, C]: one head of width C per frame.
  const Tensor qkv5 = qkv.reshape({3, c, t, l, 1});
  const Tensor q = qkv5.select(0, 0).permute({1, 2, 3, 0});
  const Tensor k = qkv5.select(0, 1).permute({1, 2, 3, 0});
  const Tensor v = qkv5.select(0, 2).permute({1, 2, 3, 0});
  Tensor o = attn_.get(x.dtype, Shape{t, l, 1, c});
  be.attention(q, k, v, o, AttentionParams{});
  // [T, H, W, C] read as a channels-last [1, C, T, H, W].
  const Tensor o5 = o.reshape({1, t, hh, ww, c}).permute({0, 4, 1, 2, 3});
  proj_.forward(be, o5, y);
  be.add(y, x, y);
}

// ---- Upsample ----

Expected<Upsample> Upsample::load(const WeightView& v, Backend& be, Precision precision) {
  Upsample u;
  FLICK_ASSIGN_OR_RETURN(u.conv_, CausalConv3d::load_2d(v, "resample.1", be, precision));
  u.c_ = u.conv_.in_channels();
  if (v.has("time_conv.weight")) {
    FLICK_ASSIGN_OR_RETURN(CausalConv3d tc, CausalConv3d::load(v, "time_conv", be, precision));
    if (tc.in_channels() != u.c_ || tc.out_channels() != 2 * u.c_)
      return invalid_input(v.full_name("time_conv.weight") + ": expected " + std::to_string(u.c_) +
                           " -> " + std::to_string(2 * u.c_) + " channels, 3 x 1 x 1");
    u.time_conv_ = std::make_unique<CausalConv3d>(std::move(tc));
  }
  return u;
}

void Upsample::reset() {
  first_ = true;
  if (time_conv_) time_conv_->reset();
}

void Upsample::forward(Backend& be, const Tensor& x, Tensor& y) {
  const int64_t c = c_, t = x.dim(2), hh = x.dim(3), ww = x.dim(4);
  Tensor frames = x;
  if (time_conv_) {
    if (first_) {
      first_ = false;  // 'Rep': the first latent keeps its single frame
    } else {
      Tensor tc = tc_.get(x.dtype, Shape{1, 2 * c, t, hh, ww});
      time_conv_->forward(be, x, tc);
      // [1, 2, C, T, H, W] -> [1, C, T, 2, H, W]: frame 2t + s = channels s*C..
      frames = frames_.get(x.dtype, Shape{1, c, 2 * t, hh, ww});
      Tensor dst = frames.reshape({1, c, t, 2, hh * ww});
      be.copy(tc.reshape({1, 2, c, t, hh * ww}).permute({0, 2, 3, 1, 4}), dst);
    }
  }
  const int64_t tf = frames.dim(2);
  Tensor up = up_.get(x.dtype, Shape{1, c, tf, 2 * hh, 2 * ww});
  be.upsample_nearest(frames, up);
  conv_.forward(be, up, y);
}

// ---- Downsample ----

Expected<Downsample> Downsample::load(const WeightView& v, Backend& be, Precision precision) {
  Downsample d;
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* info, require(v, "resample.1.weight", 4));
  const int64_t c = info->shape[1];
  d.c_ = c;
  FLICK_ASSIGN_OR_RETURN(Tensor w, get_float(v, "resample.1.weight", Shape{c, c, 3, 3}));
  FLICK_ASSIGN_OR_RETURN(Tensor b, get_float(v, "resample.1.bias", Shape{c}));
  ConvDesc cd;
  cd.w = w.reshape({c, c, 1, 3, 3});  // per frame
  cd.bias = b;
  cd.spatial_dims = 3;
  cd.stride = {1, 2, 2};
  cd.precision = precision;
  d.conv_ = be.pack_conv(cd);
  if (v.has("time_conv.weight")) {
    FLICK_ASSIGN_OR_RETURN(Tensor tw, get_float(v, "time_conv.weight", Shape{c, c, 3, 1, 1}));
    FLICK_ASSIGN_OR_RETURN(Tensor tb, get_float(v, "time_conv.bias", Shape{c}));
    ConvDesc td;
    td.w = tw;
    td.bias = tb;
    td.spatial_dims = 3;
    td.stride = {2, 1, 1};
    td.precision = precision;
    d.time_conv_ = be.pack_conv(td);
  }
  return d;
}

void Downsample::forward(Backend& be, const Tensor& x, Tensor& y) {
  const int64_t c = c_, t = x.dim(2), h = x.dim(3), w = x.dim(4);
  FLICK_CHECK(x.dim(1) == c && h % 2 == 0 && w % 2 == 0, "Downsample: x " + x.str());
  // ZeroPad2d((0, 1, 0, 1)): [1, C, T, H + 1, W + 1], zeros right and bottom.
  Tensor padded = padded_.get(x.dtype, Shape{1, c, t, h + 1, w + 1});
  std::memset(padded.data, 0, padded.nbytes());
  Tensor interior = padded.slice(3, 0, h).slice(4, 0, w);
  be.copy(x, interior);
  if (!time_conv_) {
    be.conv(padded, *conv_, y, Activation::None);
    return;
  }
  const Shape frame{1, c, 1, h / 2, w / 2};
  if (first_) {
    be.conv(padded, *conv_, y, Activation::None);
    last_ = OwnedTensor(x.dtype, frame);
    be.copy(y.slice(2, t - 1, 1), last_.t);
    first_ = false;
    return;
  }
  // [1, C, 1 + T, H/2, W/2] = [previous last frame, conv(x)]
  Tensor joined = joined_.get(x.dtype, Shape{1, c, 1 + t, h / 2, w / 2});
  Tensor body = joined.slice(2, 1, t), head = joined.slice(2, 0, 1);
  be.conv(padded, *conv_, body, Activation::None);
  be.copy(last_.t, head);
  be.conv(joined, *time_conv_, y, Activation::None);
  be.copy(joined.slice(2, t, 1), last_.t);
}

Expected<ResampleLayers> scan_resample_layers(const WeightView& list, std::string_view kind) {
  ResampleLayers r;
  const std::vector<std::string> children = list.children();
  r.count = static_cast<int64_t>(children.size());
  for (int64_t i = 0; i < r.count; ++i) {
    const std::string idx = std::to_string(i);
    if (std::find(children.begin(), children.end(), idx) == children.end())
      return invalid_input(list.full_name(idx) + ": missing (" + std::string(kind) +
                           " layers must be numbered 0.." + std::to_string(r.count - 1) + ")");
    const WeightView l = list.sub(idx);
    if (l.has("resample.1.weight")) {
      ++r.spatial;
      if (l.has("time_conv.weight")) ++r.temporal;
    } else if (!l.has("residual.2.weight")) {
      return invalid_input(l.prefix() + "*: neither a residual block nor a" +
                           (kind.front() == 'u' ? "n " : " ") + std::string(kind) + "r");
    }
  }
  return r;
}

}  // namespace flick::wan_vae
