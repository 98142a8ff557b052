#include "models/wan_vae/wan_vae_decoder.h"

#include <algorithm>
#include <string>
#include <utility>

namespace flick {

Expected<WanVaeDecoderConfig> WanVaeDecoderConfig::detect(const WeightView& root) {
  WanVaeDecoderConfig c;
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* conv2, root.require("conv2.weight", 5));
  c.z_dim = conv2->shape[0];
  if (c.z_dim != 16 || conv2->shape[1] != 16)
    return invalid_input(root.full_name("conv2.weight") +
                         ": expected [16, 16, 1, 1, 1] (z_dim 16), file has " + conv2->shape_str());
  const WeightView dec = root.sub("decoder");
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* conv1, dec.require("conv1.weight", 5));
  c.dim = conv1->shape[0];
  if (conv1->shape[1] != c.z_dim)
    return invalid_input(dec.full_name("conv1.weight") + ": expected " + std::to_string(c.z_dim) +
                         " input channels, file has " + conv1->shape_str());
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* head, dec.require("head.2.weight", 5));
  c.out_dim = head->shape[1];
  if (head->shape[0] != 3)
    return invalid_input(dec.full_name("head.2.weight") +
                         ": expected 3 output channels, file has " + head->shape_str());
  const WeightView ups = dec.sub("upsamples");
  FLICK_ASSIGN_OR_RETURN(const wan_vae::ResampleLayers layers,
                         wan_vae::scan_resample_layers(ups, "upsample"));
  c.upsamples = layers.count;
  c.spatial_up = layers.spatial;
  c.temporal_up = layers.temporal;
  return c;
}

namespace {

float round_f16(float v) { return f16_to_f32(f32_to_f16(v)); }

}  // namespace

Expected<WanVaeDecoder> WanVaeDecoder::load(const WeightView& root, Backend& backend,
                                            Precision precision,
                                            std::optional<Precision> conv_precision) {
  WanVaeDecoder d;
  d.precision_ = precision;
  FLICK_ASSIGN_OR_RETURN(d.conv_precision_,
                         wan_vae::conv_precision("Wan VAE decoder", precision, conv_precision));
  if (precision == Precision::F32) {
    d.num_ = wan_vae::Numerics::f32();
    // fp32: the constants as they are, 1/std in fp32.
    for (int i = 0; i < 16; ++i) {
      d.scale_.mean[i] = kWanVaeMean[i];
      d.scale_.inv_std[i] = 1.f / kWanVaeStd[i];
    }
  } else if (precision == Precision::BF16) {
    d.num_ = {DType::BF16, Precision::BF16, /*ref_weights=*/true, wan_vae::NormRounding::Once};
    // vae_block3.py L159-160 in fp16: mean, std cast to fp16, 1/std in fp16.
    for (int i = 0; i < 16; ++i) {
      d.scale_.mean[i] = round_f16(kWanVaeMean[i]);
      d.scale_.inv_std[i] = round_f16(1.f / round_f16(kWanVaeStd[i]));
    }
  } else {
    return invalid_input(std::string("Wan VAE decoder: precision ") + precision_name(precision) +
                         " is not supported (F32 or BF16)");
  }
  FLICK_ASSIGN_OR_RETURN(d.cfg_, WanVaeDecoderConfig::detect(root));
  d.backend_ = &backend;
  FLICK_TRY(d.load_weights(root));
  return d;
}

Status WanVaeDecoder::load_weights(const WeightView& root) {
  using namespace wan_vae;
  Backend& be = *backend_;
  const Numerics& num = num_;
  // conv2 and conv1 work at latent size: fp32 on the precision's weights.
  Numerics head = num;
  head.act = DType::F32;
  head.conv = Precision::F32;
  const WeightView dec = root.sub("decoder");
  FLICK_ASSIGN_OR_RETURN(conv2_, CausalConv3d::load(root, "conv2", be, head));
  FLICK_ASSIGN_OR_RETURN(conv1_, CausalConv3d::load(dec, "conv1", be, head));
  const WeightView mid = dec.sub("middle");
  // The residual blocks' convolutions in conv_precision_. With INT8 these
  // stay BF16: conv2 / conv1 (fp32 anyway), the middle attention's 1x1
  // qkv / proj (latent size, 0.1 % of the work; its softmax is sharp where
  // an int8 qkv would move the scores most), the head's 96 -> 3 conv (1 % of
  // the conv time, the frames' pixels themselves) and the convs of the raw
  // residual stream (wan_vae::normalized_only). Measured on synthetic
  // full-width weights (tests/models/test_wan_vae_int8.cpp, PSNR against
  // BF16), S8 activations: every residual / upsampling conv INT8 39.2 dB;
  // full-resolution stage BF16 40.3 dB; raw residual stream BF16 as well
  // 43.0 dB; keeping the middle's residual blocks BF16 too added only 0.4 dB
  // (not worth their 2.3x at 384 channels). With U8 activations
  // (ref::conv_int8_act) the full-resolution stage's residual blocks run
  // INT8 too: 45.6 dB here; `flick bench --filter "vae decode"` (Zen 4,
  // 352x640): 0.56x the BF16 decoder's time at 43.3 dB, against 0.72x at
  // 44.0 dB with that stage BF16 (S8 with it BF16: 0.73x, 40.7 dB).
  Numerics body = num;
  body.conv = conv_precision_;
  FLICK_ASSIGN_OR_RETURN(mid_res0_, ResidualBlock::load(mid.sub("0"), be, body));
  FLICK_ASSIGN_OR_RETURN(mid_attn_, AttentionBlock::load(mid.sub("1"), be, num));
  FLICK_ASSIGN_OR_RETURN(mid_res1_, ResidualBlock::load(mid.sub("2"), be, body));
  int64_t ch = cfg_.dim;
  auto check_in = [&](const WeightView& v, int64_t in) -> Status {
    if (in != ch)
      return invalid_input(v.prefix() + "*: takes " + std::to_string(in) +
                           " channels, the previous layer gives " + std::to_string(ch));
    return ok_status();
  };
  FLICK_TRY(check_in(mid.sub("0"), mid_res0_.in_channels()));
  FLICK_TRY(check_in(mid.sub("1"), mid_attn_.channels()));
  FLICK_TRY(check_in(mid.sub("2"), mid_res1_.in_channels()));
  const WeightView ups = dec.sub("upsamples");
  for (int64_t i = 0; i < cfg_.upsamples; ++i) {
    const WeightView l = ups.sub(std::to_string(i));
    if (l.has("resample.1.weight")) {
      FLICK_ASSIGN_OR_RETURN(Upsample u, Upsample::load(l, be, body));
      FLICK_TRY(check_in(l, u.in_channels()));
      ch = u.out_channels();
      ups_.emplace_back(std::move(u));
    } else {
      FLICK_ASSIGN_OR_RETURN(ResidualBlock r, ResidualBlock::load(l, be, body));
      FLICK_TRY(check_in(l, r.in_channels()));
      ch = r.out_channels();
      ups_.emplace_back(std::move(r));
    }
  }
  FLICK_TRY(check_in(dec.sub("head"), cfg_.out_dim));
  FLICK_ASSIGN_OR_RETURN(head_norm_, ChannelRmsNorm::load(dec, "head.0", ch, 3, num));
  FLICK_ASSIGN_OR_RETURN(head_conv_, CausalConv3d::load(dec, "head.2", be, num));
  return ok_status();
}

void WanVaeDecoder::reset() {
  first_ = true;
  conv1_.reset();
  mid_res0_.reset();
  mid_res1_.reset();
  for (Layer& l : ups_) std::visit([](auto& layer) { layer.reset(); }, l);
  head_conv_.reset();
}

void WanVaeDecoder::release_scratch() {
  ws_.release();
  for (wan_vae::Scratch* s : {&z_, &zc_, &a_, &b_, &c_, &out_}) *s = wan_vae::Scratch();
}

void WanVaeDecoder::release_buffers() {
  reset();
  release_scratch();
}

int64_t WanVaeDecoder::frames_out(int64_t t) const { return first_ ? 1 + 4 * (t - 1) : 4 * t; }

Expected<Tensor> WanVaeDecoder::decode(const Tensor& latents, const Tap& tap) {
  const int64_t z = cfg_.z_dim;
  if (latents.ndim() != 5 || latents.dim(0) != 1 || latents.dim(1) != z || latents.dim(2) < 1 ||
      latents.dim(3) < 1 || latents.dim(4) < 1 ||
      (latents.dtype != DType::F32 && latents.dtype != DType::BF16))
    return invalid_input("Wan VAE decoder: expected F32 or BF16 latents [1, 16, N, h, w], got " +
                         latents.str());
  Backend& be = *backend_;
  const int64_t n = latents.dim(2), h = latents.dim(3), w = latents.dim(4);
  // The feature caches hold frames of the video's size.
  if (!first_ && (h != h_ || w != w_))
    return invalid_input("Wan VAE decoder: latents " + latents.str() +
                         " continue a video of latent size " + std::to_string(h_) + " x " +
                         std::to_string(w_) + " (reset() starts a new one)");
  h_ = h;
  w_ = w;
  const int64_t scale = int64_t{1} << cfg_.spatial_up;
  const int64_t hh = h * scale, ww = w * scale, t_total = frames_out(n);

  // ---- de-normalise: z / inv_std + mean, a division as the reference ----
  // [1, z, N, h, w] F32; in BF16 every op rounds to fp16 as the reference's
  // fp16 decoder does (the latents themselves are fp16-exact bf16 values).
  Tensor zt = z_.get(DType::F32, Shape{1, z, n, h, w});
  be.copy(latents, zt);
  float* zp = zt.ptr<float>();
  const int64_t plane = n * h * w;
  const bool half = precision_ == Precision::BF16;
  for (int64_t c = 0; c < z; ++c) {
    for (int64_t i = 0; i < plane; ++i) {
      float& v = zp[c * plane + i];
      v = half ? round_f16(round_f16(round_f16(v) / scale_.inv_std[c]) + scale_.mean[c])
               : v / scale_.inv_std[c] + scale_.mean[c];
    }
  }
  Tensor x = zc_.channels_last(DType::F32, z, n, h, w);
  conv2_.forward(be, zt, x, ws_.pad);
  if (half) {
    float* xp = x.ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) xp[i] = round_f16(xp[i]);
  }
  if (tap) tap("conv2", x);

  Tensor out = out_.get(DType::F32, Shape{1, t_total, 3, hh, ww});
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = first_ ? 1 : 4;
    // [1, 3, T, H, W] view of frames [off, off + t) of the output
    Tensor dst = out.slice(1, off, t).permute({0, 2, 1, 3, 4});
    decode_latent(wan_vae::frames(x, i, 1), dst, i, tap);
    first_ = false;
    off += t;
  }
  float* op = out.ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) op[i] = std::clamp(op[i], -1.f, 1.f);
  return out;
}

void WanVaeDecoder::decode_latent(const Tensor& x, Tensor& out, int64_t index, const Tap& tap) {
  Backend& be = *backend_;
  auto emit = [&](std::string_view name, const Tensor& v) {
    if (!tap) return;
    std::string full = "l";
    full += std::to_string(index);
    full += '.';
    full += name;
    tap(full, v);
  };
  const DType act = num_.act;
  const int64_t h = x.dim(3), w = x.dim(4);
  wan_vae::Scratch* bufs[2] = {&a_, &b_};
  Tensor a = a_.channels_last(act, cfg_.dim, 1, h, w);
  conv1_.forward(be, x, a, ws_.pad);
  emit("conv1", a);
  Tensor b = b_.channels_last(act, cfg_.dim, 1, h, w);
  mid_res0_.forward(be, a, b, ws_);
  mid_attn_.forward(be, b, a, ws_);
  mid_res1_.forward(be, a, b, ws_);
  emit("middle", b);
  // decoder.upsamples.j on `in`, into `buf`.
  auto layer = [&](size_t j, const Tensor& in, wan_vae::Scratch& buf) {
    if (auto* r = std::get_if<wan_vae::ResidualBlock>(&ups_[j])) {
      Tensor y = buf.channels_last(act, r->out_channels(), in.dim(2), in.dim(3), in.dim(4));
      r->forward(be, in, y, ws_);
      return y;
    }
    auto& u = std::get<wan_vae::Upsample>(ups_[j]);
    Tensor y = buf.channels_last(act, u.out_channels(), u.out_frames(in.dim(2)), 2 * in.dim(3),
                                 2 * in.dim(4));
    u.forward(be, in, y, ws_);
    return y;
  };
  // The layers after the last temporal upsample mix no frames but through
  // their causal caches, which see the same inputs in any chunking: they run
  // one frame at a time, so the full-resolution intermediates hold 1 frame
  // instead of 4 (~0.6 GB less at 352x640), with the same arithmetic.
  size_t split = 0;
  for (size_t j = 0; j < ups_.size(); ++j)
    if (const auto* u = std::get_if<wan_vae::Upsample>(&ups_[j]); u != nullptr && u->temporal())
      split = j + 1;
  int cur = 1;  // b holds the middle's output
  Tensor joint = b;
  for (size_t j = 0; j < split; ++j) {
    joint = layer(j, joint, *bufs[1 - cur]);
    cur = 1 - cur;
    emit("up" + std::to_string(j), joint);
  }
  const int64_t t = joint.dim(2);
  FLICK_CHECK(out.dim(2) == t, "Wan VAE decoder: latent gives " + std::to_string(t) +
                                   " frames, expected " + out.shape.str());
  wan_vae::Scratch* frame_bufs[2] = {bufs[1 - cur], &c_};  // not joint's
  for (int64_t f = 0; f < t; ++f) {
    Tensor y = wan_vae::frames(joint, f, 1);
    for (size_t j = split, k = 0; j < ups_.size(); ++j, k = 1 - k) {
      y = layer(j, y, *frame_bufs[k]);
      emit("up" + std::to_string(j) + (t > 1 ? ".f" + std::to_string(f) : ""), y);
    }
    // head: RMS, SiLU into the conv's padded input, conv straight into `out`.
    Tensor p = head_conv_.padded(ws_.pad, 1, y.dim(3), y.dim(4));
    Tensor body = wan_vae::frames(p, 2, 1);
    head_norm_.forward(be, y, body, /*silu=*/true);
    Tensor dst = out.slice(2, f, 1);
    FLICK_CHECK(dst.shape == Shape({1, 3, 1, y.dim(3), y.dim(4)}),
                "Wan VAE decoder: latent gives frames of " + std::to_string(y.dim(3)) + " x " +
                    std::to_string(y.dim(4)) + ", expected " + out.shape.str());
    head_conv_.run(be, p, dst);
  }
}

}  // namespace flick
