#include "models/wan_vae/wan_vae_encoder.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "runtime/plan_cache.h"

namespace flick {
namespace {

// Chunk i >= 2 (frames 1 + 4 (i - 1) .. + 4) of a contiguous video
// [1, 3, T, H, W] bitwise equal to chunk i - 1.
bool same_as_previous_chunk(const Tensor& video, int64_t i) {
  if (i < 2) return false;
  const size_t frame = static_cast<size_t>(video.dim(3) * video.dim(4)) * dtype_size(video.dtype);
  const int64_t t = video.dim(2), start = 1 + 4 * (i - 1);
  for (int64_t c = 0; c < 3; ++c) {
    const char* base = static_cast<const char*>(video.data) + static_cast<size_t>(c * t) * frame;
    if (std::memcmp(base + start * frame, base + (start - 4) * frame, 4 * frame) != 0) return false;
  }
  return true;
}

}  // namespace

Expected<WanVaeEncoderConfig> WanVaeEncoderConfig::detect(const WeightView& root) {
  WanVaeEncoderConfig c;
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* quant, root.require("conv1.weight", 5));
  if (quant->shape[0] != 32 || quant->shape[1] != 32)
    return invalid_input(root.full_name("conv1.weight") +
                         ": expected [32, 32, 1, 1, 1] (z_dim 16), file has " + quant->shape_str());
  c.z_dim = 16;
  const WeightView enc = root.sub("encoder");
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* conv1, enc.require("conv1.weight", 5));
  c.dim = conv1->shape[0];
  if (conv1->shape[1] != 3)
    return invalid_input(enc.full_name("conv1.weight") + ": expected 3 input channels, file has " +
                         conv1->shape_str());
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* head, enc.require("head.2.weight", 5));
  c.out_dim = head->shape[1];
  if (head->shape[0] != 2 * c.z_dim)
    return invalid_input(enc.full_name("head.2.weight") + ": expected " +
                         std::to_string(2 * c.z_dim) + " output channels, file has " +
                         head->shape_str());
  const WeightView downs = enc.sub("downsamples");
  FLICK_ASSIGN_OR_RETURN(const wan_vae::ResampleLayers layers,
                         wan_vae::scan_resample_layers(downs, "downsample"));
  c.downsamples = layers.count;
  c.spatial_down = layers.spatial;
  c.temporal_down = layers.temporal;
  return c;
}

Expected<WanVaeEncoder> WanVaeEncoder::load(const WeightView& root, Backend& backend,
                                            Precision precision,
                                            std::optional<Precision> conv_precision) {
  WanVaeEncoder e;
  FLICK_ASSIGN_OR_RETURN(e.conv_precision_,
                         wan_vae::conv_precision("Wan VAE encoder", precision, conv_precision));
  if (precision == Precision::F32) {
    e.num_ = wan_vae::Numerics::f32();
    for (int i = 0; i < 16; ++i) {
      e.scale_.mean[i] = kWanVaeMean[i];
      e.scale_.inv_std[i] = 1.f / kWanVaeStd[i];
    }
  } else if (precision == Precision::BF16) {
    e.num_ = {DType::BF16, Precision::BF16, /*ref_weights=*/true, wan_vae::NormRounding::PerOp};
    // WanVAE.to(fp16) then .to(bf16): mean and std are cast twice, and each
    // .to() recomputes scale = 1.0 / std in the new dtype.
    for (int i = 0; i < 16; ++i) {
      e.scale_.mean[i] = wan_vae::ref_weight_value(kWanVaeMean[i]);
      e.scale_.inv_std[i] = round_bf16(1.f / wan_vae::ref_weight_value(kWanVaeStd[i]));
    }
  } else {
    return invalid_input(std::string("Wan VAE encoder: precision ") + precision_name(precision) +
                         " is not supported (F32 or BF16)");
  }
  FLICK_ASSIGN_OR_RETURN(e.cfg_, WanVaeEncoderConfig::detect(root));
  e.backend_ = &backend;
  FLICK_TRY(e.load_weights(root));
  return e;
}

Status WanVaeEncoder::load_weights(const WeightView& root) {
  using namespace wan_vae;
  Backend& be = *backend_;
  const Numerics& num = num_;
  const WeightView enc = root.sub("encoder");
  FLICK_ASSIGN_OR_RETURN(quant_conv_, CausalConv3d::load(root, "conv1", be, num));
  FLICK_ASSIGN_OR_RETURN(conv1_, CausalConv3d::load(enc, "conv1", be, num));
  int64_t ch = cfg_.dim;
  auto check_in = [&](const WeightView& v, int64_t in) -> Status {
    if (in != ch)
      return invalid_input(v.prefix() + "*: takes " + std::to_string(in) +
                           " channels, the previous layer gives " + std::to_string(ch));
    return ok_status();
  };
  // The residual blocks' own convolutions in conv_precision_. With INT8,
  // BF16 stays for: conv1 (3 input channels), the head's conv and the 1x1
  // quant conv (latent size), the middle attention, and the convs of the raw
  // residual stream (the shortcuts and the downsamplers:
  // wan_vae::normalized_only). Measured (Zen 4, 2 threads, `flick bench
  // --filter mg2.cond`, 21 frames at 352x640; latents' rel L2 from the fp32
  // encoder's on full-width synthetic weights, tests/models/
  // test_wan_vae_int8.cpp, where BF16 itself is at 0.0091): with S8
  // activations, the full-resolution blocks in INT8 too took 0.64x the BF16
  // encoder's time at 0.0214, in BF16 0.73x at 0.0172; U8 activations
  // (ref::conv_int8_act) bring INT8 everywhere to 0.0142.
  Numerics body = num;
  body.conv = conv_precision_;
  const WeightView downs = enc.sub("downsamples");
  for (int64_t i = 0; i < cfg_.downsamples; ++i) {
    const WeightView l = downs.sub(std::to_string(i));
    if (l.has("resample.1.weight")) {
      FLICK_ASSIGN_OR_RETURN(Downsample d, Downsample::load(l, be, body));
      FLICK_TRY(check_in(l, d.channels()));
      downs_.emplace_back(std::move(d));
    } else {
      FLICK_ASSIGN_OR_RETURN(ResidualBlock r, ResidualBlock::load(l, be, body));
      FLICK_TRY(check_in(l, r.in_channels()));
      ch = r.out_channels();
      downs_.emplace_back(std::move(r));
    }
  }
  const WeightView mid = enc.sub("middle");
  FLICK_ASSIGN_OR_RETURN(mid_res0_, ResidualBlock::load(mid.sub("0"), be, body));
  FLICK_ASSIGN_OR_RETURN(mid_attn_, AttentionBlock::load(mid.sub("1"), be, num));
  FLICK_ASSIGN_OR_RETURN(mid_res1_, ResidualBlock::load(mid.sub("2"), be, body));
  FLICK_TRY(check_in(mid.sub("0"), mid_res0_.in_channels()));
  FLICK_TRY(check_in(mid.sub("1"), mid_attn_.channels()));
  FLICK_TRY(check_in(mid.sub("2"), mid_res1_.in_channels()));
  FLICK_TRY(check_in(enc.sub("head"), cfg_.out_dim));
  FLICK_ASSIGN_OR_RETURN(head_norm_, ChannelRmsNorm::load(enc, "head.0", ch, 3, num));
  FLICK_ASSIGN_OR_RETURN(head_conv_, CausalConv3d::load(enc, "head.2", be, num));
  set_reuse_steady_frames(true);
  return ok_status();
}

void WanVaeEncoder::set_reuse_steady_frames(bool on) {
  reuse_steady_ = on;
  for (wan_vae::CausalConv3d* c : {&quant_conv_, &conv1_, &head_conv_}) c->reuse_steady_frames(on);
  for (Layer& l : downs_) std::visit([on](auto& layer) { layer.reuse_steady_frames(on); }, l);
  mid_res0_.reuse_steady_frames(on);
  mid_res1_.reuse_steady_frames(on);
}

void WanVaeEncoder::reset() {
  conv1_.reset();
  for (Layer& l : downs_) std::visit([](auto& layer) { layer.reset(); }, l);
  mid_res0_.reset();
  mid_res1_.reset();
  head_conv_.reset();
}

void WanVaeEncoder::release_buffers() {
  reset();
  ws_.release();
  for (wan_vae::Scratch* s : {&a_, &b_, &moments_, &mu_logvar_, &latents_}) *s = wan_vae::Scratch();
}

Expected<Tensor> WanVaeEncoder::encode(const Tensor& video, const Tap& tap) {
  const int64_t scale = int64_t{1} << cfg_.spatial_down;
  if (video.ndim() != 5 || video.dim(0) != 1 || video.dim(1) != 3 || video.dim(2) < 1 ||
      (video.dim(2) - 1) % 4 != 0 || video.dim(3) < scale || video.dim(3) % scale != 0 ||
      video.dim(4) < scale || video.dim(4) % scale != 0 ||
      (video.dtype != DType::F32 && video.dtype != DType::BF16))
    return invalid_input(
        "Wan VAE encoder: expected an F32 or BF16 video [1, 3, 1 + 4k, H, W] "
        "with H, W multiples of " +
        std::to_string(scale) + ", got " + video.str());
  Backend& be = *backend_;
  reset();
  const DType act = num_.act;
  const int64_t z = cfg_.z_dim, n = 1 + (video.dim(2) - 1) / 4;
  const int64_t h = video.dim(3) / scale, w = video.dim(4) / scale;
  Tensor moments = moments_.channels_last(act, 2 * z, n, h, w);
  // Whole-chunk reuse (set_reuse_steady_frames): chunk i is computed from
  // the state the chunks before left and its own frames only, so when the
  // state after chunk i - 1 equals that after i - 2 and chunk i's frames
  // equal chunk i - 1's, chunk i repeats chunk i - 1 exactly, output and
  // state (and so on while the frames stay equal).
  const bool whole_chunks = reuse_steady_ && !tap && video.is_contiguous();
  uint64_t last_state = 0;
  bool steady = false;
  chunks_reused_ = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Tensor chunk = i == 0 ? video.slice(2, 0, 1) : video.slice(2, 1 + 4 * (i - 1), 4);
    Tensor dst = wan_vae::frames(moments, i, 1);
    if (steady && same_as_previous_chunk(video, i)) {
      be.copy(wan_vae::frames(moments, i - 1, 1), dst);
      ++chunks_reused_;
      continue;
    }
    encode_chunk(chunk, dst, i, tap);
    if (!whole_chunks) continue;
    const uint64_t state = state_checksum();
    steady = i >= 2 && state == last_state;
    last_state = state;
  }
  Tensor mu_logvar = mu_logvar_.channels_last(act, 2 * z, n, h, w);
  quant_conv_.forward(be, moments, mu_logvar, ws_.pad);
  if (tap) tap("conv1_mu_logvar", mu_logvar);
  // mu = the first z channels; (mu - mean) * (1 / std), each op rounded to
  // the activation dtype. [N, h, w, 2z] -> [1, z, N, h, w]
  Tensor latents = latents_.get(DType::F32, Shape{1, z, n, h, w});
  float* p = latents.ptr<float>();
  const int64_t plane = n * h * w;
  const bool bf16 = act == DType::BF16;
  for (int64_t i = 0; i < plane; ++i) {
    for (int64_t c = 0; c < z; ++c) {
      const float mu = load_as_f32(act, mu_logvar.data, i * 2 * z + c);
      p[c * plane + i] = bf16 ? round_bf16(round_bf16(mu - scale_.mean[c]) * scale_.inv_std[c])
                              : (mu - scale_.mean[c]) * scale_.inv_std[c];
    }
  }
  return latents;
}

uint64_t WanVaeEncoder::state_checksum() const {
  uint64_t h = 0;
  auto add = [&h](uint64_t v) { h = plan_checksum(&v, sizeof v, h); };
  add(conv1_.state_checksum());
  for (const Layer& l : downs_)
    std::visit([&](const auto& layer) { add(layer.state_checksum()); }, l);
  add(mid_res0_.state_checksum());
  add(mid_res1_.state_checksum());
  add(head_conv_.state_checksum());
  return h;
}

void WanVaeEncoder::encode_chunk(const Tensor& x, Tensor& out, int64_t index, const Tap& tap) {
  Backend& be = *backend_;
  auto emit = [&](std::string_view name, const Tensor& v) {
    if (!tap) return;
    std::string full = "chunk";
    full += std::to_string(index);
    full += '.';
    full += name;
    tap(full, v);
  };
  const DType act = num_.act;
  wan_vae::Scratch* bufs[2] = {&a_, &b_};
  // The video is cast to the activation dtype on its way into conv1's padded input.
  Tensor y = a_.channels_last(act, cfg_.dim, x.dim(2), x.dim(3), x.dim(4));
  conv1_.forward(be, x, y, ws_.pad);
  emit("conv1", y);
  int cur = 0;
  for (size_t j = 0; j < downs_.size(); ++j) {
    const Tensor in = y;
    if (auto* r = std::get_if<wan_vae::ResidualBlock>(&downs_[j])) {
      y = bufs[1 - cur]->channels_last(act, r->out_channels(), in.dim(2), in.dim(3), in.dim(4));
      r->forward(be, in, y, ws_);
    } else {
      auto& d = std::get<wan_vae::Downsample>(downs_[j]);
      y = bufs[1 - cur]->channels_last(act, d.channels(), d.out_frames(in.dim(2)), in.dim(3) / 2,
                                       in.dim(4) / 2);
      d.forward(be, in, y, ws_);
    }
    cur = 1 - cur;
    emit("down" + std::to_string(j), y);
  }
  Tensor other = bufs[1 - cur]->channels_last(act, y.dim(1), y.dim(2), y.dim(3), y.dim(4));
  mid_res0_.forward(be, y, other, ws_);
  mid_attn_.forward(be, other, y, ws_);
  mid_res1_.forward(be, y, other, ws_);
  emit("middle", other);
  // head: RMS, SiLU into the conv's padded input, conv straight into `out`.
  const int64_t t = other.dim(2);
  Tensor p = head_conv_.padded(ws_.pad, t, other.dim(3), other.dim(4));
  Tensor body = wan_vae::frames(p, 2, t);
  head_norm_.forward(be, other, body, /*silu=*/true);
  FLICK_CHECK(
      out.shape == Shape({1, 2 * cfg_.z_dim, t, other.dim(3), other.dim(4)}),
      "Wan VAE encoder: chunk gives " + std::to_string(t) + " frames, expected " + out.shape.str());
  head_conv_.run(be, p, out);
  emit("head", out);
}

}  // namespace flick
