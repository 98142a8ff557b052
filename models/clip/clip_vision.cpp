#include "models/clip/clip_vision.h"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "runtime/cpu/linear_cache.h"
#include "runtime/dtype.h"
#include "runtime/plan_cache.h"
#include "runtime/ref/matmul_common.h"

namespace flick {
namespace {

std::string dims_str(const TensorInfo& info) { return info.shape_str(); }

// Float dtypes a parameter may be stored in; it is converted at load.
const DTypeSet kFloat{DType::F32, DType::BF16, DType::F16};

}  // namespace

Expected<ClipVisionConfig> ClipVisionConfig::detect(const WeightView& visual, int64_t head_dim) {
  ClipVisionConfig c;
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* cls, visual.require("cls_embedding", 3));
  c.width = cls->shape[2];
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* pe, visual.require("patch_embedding.weight", 4));
  c.patch = pe->shape[2];
  if (pe->shape[3] != c.patch || pe->shape[1] != 3 || pe->shape[0] != c.width)
    return invalid_input(visual.full_name("patch_embedding.weight") + ": expected [" +
                         std::to_string(c.width) + ", 3, p, p], file has " + dims_str(*pe));
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* pos, visual.require("pos_embedding", 3));
  const int64_t patches = pos->shape[1] - 1;
  c.grid = static_cast<int64_t>(
      std::lround(std::sqrt(static_cast<double>(std::max<int64_t>(patches, 0)))));
  if (patches < 1 || c.grid * c.grid != patches)
    return invalid_input(visual.full_name("pos_embedding") +
                         ": expected [1, 1 + g*g, W] (CLS + a square patch grid), file has " +
                         dims_str(*pos));
  c.image_size = c.grid * c.patch;

  const WeightView blocks = visual.sub("transformer");
  const std::vector<std::string> children = blocks.children();
  c.layers = static_cast<int64_t>(children.size());
  for (int64_t i = 0; i < c.layers; ++i)
    if (children[static_cast<size_t>(i)] != std::to_string(i))
      return invalid_input(blocks.full_name(std::to_string(i)) +
                           ": missing (transformer blocks must be numbered 0.." +
                           std::to_string(c.layers - 1) + ")");
  if (c.layers < 2)
    return invalid_input(blocks.prefix() +
                         "*: the tower needs at least 2 blocks (the last is "
                         "skipped), found " +
                         std::to_string(c.layers));
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* fc1, blocks.sub("0").require("mlp.0.weight", 2));
  c.mlp_dim = fc1->shape[0];

  if (head_dim <= 0 || c.width % head_dim != 0)
    return invalid_input(visual.full_name("cls_embedding") + ": width " + std::to_string(c.width) +
                         " is not a multiple of the head size " + std::to_string(head_dim));
  c.head_dim = head_dim;
  c.heads = c.width / head_dim;
  return c;
}

Expected<ClipVision> ClipVision::load(const WeightView& visual, Backend& backend,
                                      Precision precision, int64_t head_dim) {
  ClipVision m;
  FLICK_ASSIGN_OR_RETURN(m.cfg_, ClipVisionConfig::detect(visual, head_dim));
  m.backend_ = &backend;
  m.precision_ = precision;
  m.act_ = precision == Precision::F32 ? DType::F32 : DType::BF16;
  FLICK_TRY(m.load_weights(visual));
  m.plan();
  return m;
}

Status ClipVision::load_weights(const WeightView& visual) {
  const ClipVisionConfig& c = cfg_;
  const int64_t w = c.width;
  const bool bf16 = act_ == DType::BF16;

  // A parameter used elementwise, in the activation dtype. bf16 autocast
  // runs on the bf16-cast module, so the bf16 path rounds every parameter.
  auto param = [&](const WeightView& v, std::string_view name, Shape shape) -> Expected<Tensor> {
    FLICK_ASSIGN_OR_RETURN(Tensor t, v.get(name, kFloat, shape));
    if (t.dtype == act_) {
      borrows_store_ = true;  // a view into the checkpoint
      return t;
    }
    OwnedTensor& o = owned_.emplace_back(act_, t.shape);
    convert(t.dtype, t.data, act_, o.t.data, t.numel());
    return o.t;
  };
  // A linear layer; the packer rounds F32 weights to bf16 for Precision::BF16,
  // the bias is rounded here (the reference's bias is a bf16 parameter too).
  auto linear = [&](const WeightView& v, std::string_view prefix, int64_t n,
                    int64_t k) -> Expected<std::unique_ptr<PackedLinear>> {
    const std::string p(prefix);
    const TensorInfo* info = v.info(p + ".weight");
    const bool cacheable = precision_ == Precision::INT8 && PlanCacheScope::current() != nullptr &&
                           PlanCacheScope::current()->cache() != nullptr && info != nullptr &&
                           info->shape == std::vector<int64_t>{n, k};
    if (cacheable && std::strcmp(backend_->name(), "cpu") == 0) {
      // The CPU backend caches the packed layout (runtime/cpu/linear_cache.h):
      // a hit maps and adopts it, reading neither weight nor bias.
      Expected<std::unique_ptr<PackedLinear>> l = cpu::pack_linear_cached(
          v.full_name(p), precision_, n, k, /*bias=*/true,
          [&]() -> Expected<std::unique_ptr<PackedLinear>> {
            FLICK_ASSIGN_OR_RETURN(Tensor wt, v.get(p + ".weight", kFloat, {n, k}));
            FLICK_ASSIGN_OR_RETURN(Tensor b, param(v, p + ".bias", {n}));
            return backend_->pack_linear({wt, Tensor{}, b, precision_});
          });
      if (l.ok()) {
        v.mark_used(p + ".weight");
        v.mark_used(p + ".bias");
      }
      return l;
    }
    if (cacheable) {
      // Through the plan cache (runtime/plan_cache.h): the int8 weight and
      // scales ref::prepare_weights makes of the fp32 checkpoint weight, so a
      // hit packs the same bytes without reading 4 bytes per weight from the
      // .pth and quantizing them.
      const std::string kind = "int8-linear w I8 [" + std::to_string(n) + ", " + std::to_string(k) +
                               "] scale F32 [" + std::to_string(n) + "]";
      FLICK_ASSIGN_OR_RETURN(
          PlanCached cached,
          PlanCached::get(v.full_name(p), kind, [&]() -> Expected<std::vector<OwnedTensor>> {
            FLICK_ASSIGN_OR_RETURN(Tensor wt, v.get(p + ".weight", kFloat, {n, k}));
            ref::PreparedWeights pw = ref::prepare_weights(wt, Tensor{}, Tensor{}, precision_);
            std::vector<OwnedTensor> out;
            out.push_back(std::move(pw.w));
            out.push_back(std::move(pw.scale));
            return out;
          }));
      if (cached.tensors.size() != 2 || cached.tensors[0].dtype != DType::I8 ||
          cached.tensors[0].shape != Shape{n, k} || cached.tensors[1].dtype != DType::F32 ||
          cached.tensors[1].shape != Shape{n})
        return internal_error("plan cache entry of " + v.full_name(p) + " has the wrong tensors");
      v.mark_used(p + ".weight");  // a hit reads none of it
      FLICK_ASSIGN_OR_RETURN(Tensor b, param(v, p + ".bias", {n}));
      return backend_->pack_linear({cached.tensors[0], cached.tensors[1], b, precision_});
    }
    FLICK_ASSIGN_OR_RETURN(Tensor wt, v.get(p + ".weight", kFloat, {n, k}));
    FLICK_ASSIGN_OR_RETURN(Tensor b, param(v, p + ".bias", {n}));
    return backend_->pack_linear({wt, Tensor{}, b, precision_});
  };

  FLICK_ASSIGN_OR_RETURN(Tensor cls, param(visual, "cls_embedding", {1, 1, w}));
  cls_ = cls.reshape({1, w});
  FLICK_ASSIGN_OR_RETURN(Tensor pos, param(visual, "pos_embedding", {1, c.tokens(), w}));
  pos_ = pos.reshape({c.tokens(), w});
  FLICK_ASSIGN_OR_RETURN(pre_norm_w_, param(visual, "pre_norm.weight", {w}));
  FLICK_ASSIGN_OR_RETURN(pre_norm_b_, param(visual, "pre_norm.bias", {w}));

  // The patch conv (kernel = stride = p, no bias) is a linear layer over
  // patches flattened as (c, ky, kx), the conv weight's own layout.
  FLICK_ASSIGN_OR_RETURN(Tensor pe,
                         visual.get("patch_embedding.weight", kFloat, {w, 3, c.patch, c.patch}));
  // Quantized towers keep it BF16: it sees the raw pixels, K = 3 p^2.
  patch_embed_ = backend_->pack_linear({pe.reshape({w, 3 * c.patch * c.patch}), Tensor{}, Tensor{},
                                        act_ == DType::F32 ? Precision::F32 : Precision::BF16});

  const WeightView transformer = visual.sub("transformer");
  for (int64_t i = 0; i < c.used_layers(); ++i) {
    const WeightView v = transformer.sub(std::to_string(i));
    Block& b = blocks_.emplace_back();
    FLICK_ASSIGN_OR_RETURN(b.norm1_w, param(v, "norm1.weight", {w}));
    FLICK_ASSIGN_OR_RETURN(b.norm1_b, param(v, "norm1.bias", {w}));
    FLICK_ASSIGN_OR_RETURN(b.norm2_w, param(v, "norm2.weight", {w}));
    FLICK_ASSIGN_OR_RETURN(b.norm2_b, param(v, "norm2.bias", {w}));
    FLICK_ASSIGN_OR_RETURN(b.qkv, linear(v, "attn.to_qkv", 3 * w, w));
    FLICK_ASSIGN_OR_RETURN(b.proj, linear(v, "attn.proj", w, w));
    FLICK_ASSIGN_OR_RETURN(b.fc1, linear(v, "mlp.0", c.mlp_dim, w));
    FLICK_ASSIGN_OR_RETURN(b.fc2, linear(v, "mlp.2", w, c.mlp_dim));
  }
  // In the checkpoint but not part of the use_31_block output.
  const WeightView last = transformer.sub(std::to_string(c.layers - 1));
  for (const std::string& n : last.names()) last.mark_used(n);
  for (const char* n : {"post_norm.weight", "post_norm.bias", "head"}) visual.mark_used(n);

  // Normalize(mean, std) on the [0, 1] image. The reference casts mean and
  // std to the image dtype (bf16) before `(x - mean) / std`.
  mean_ = owned_.emplace_back(DType::F32, Shape{3, 1, 1}).t;
  std_inv_ = owned_.emplace_back(DType::F32, Shape{3, 1, 1}).t;
  for (int ch = 0; ch < 3; ++ch) {
    const float m = bf16 ? round_bf16(kClipMean[ch]) : kClipMean[ch];
    const float s = bf16 ? round_bf16(kClipStd[ch]) : kClipStd[ch];
    mean_.ptr<float>()[ch] = -m;
    std_inv_.ptr<float>()[ch] = 1.f / s;
  }
  return ok_status();
}

void ClipVision::plan() {
  const ClipVisionConfig& c = cfg_;
  const int64_t t = c.tokens(), w = c.width;
  pixels_ = arena_.request("clip.pixels", act_, {1, 3, c.image_size, c.image_size});
  patches_ = arena_.request("clip.patches", act_, {c.grid * c.grid, 3 * c.patch * c.patch});
  x_ = arena_.request("clip.x", act_, {t, w});
  h_ = arena_.request("clip.h", act_, {t, w});
  qkv_ = arena_.request("clip.qkv", act_, {t, 3 * w});
  attn_ = arena_.request("clip.attn", act_, {t, w});
  o_ = arena_.request("clip.o", act_, {t, w});
  mlp_ = arena_.request("clip.mlp", act_, {t, c.mlp_dim});
  arena_.finalize();
}

Expected<Tensor> ClipVision::forward(const Tensor& image, const Tap& tap) {
  if (image.ndim() != 4 || image.dim(0) != 1 || image.dim(1) != 3 ||
      (image.dtype != DType::F32 && image.dtype != DType::BF16) || image.dim(2) < 1 ||
      image.dim(3) < 1)
    return invalid_input("CLIP vision tower: expected an F32 or BF16 image [1, 3, H, W], got " +
                         image.str());
  Backend& be = *backend_;
  auto emit = [&](std::string_view name, const Tensor& v) {
    if (tap) tap(name, v);
  };

  // ---- preprocessing: bicubic to S x S, x * 0.5 + 0.5, Normalize ----
  Tensor pixels = arena_.get(pixels_);  // [1, 3, S, S]
  be.resize(image, pixels, ResizeMode::Bicubic, /*align_corners=*/false, /*antialias=*/false);
  be.affine(pixels, 0.5f, 0.5f, pixels);
  be.add(pixels, mean_, pixels);
  be.mul(pixels, std_inv_, pixels);
  emit("pixels", pixels);
  return encode(tap);
}

Expected<Tensor> ClipVision::forward_pixels(const Tensor& pixels, const Tap& tap) {
  Tensor dst = arena_.get(pixels_);
  if (pixels.shape != dst.shape || (pixels.dtype != DType::F32 && pixels.dtype != DType::BF16))
    return invalid_input("CLIP vision tower: expected F32 or BF16 pixels " + dst.shape.str() +
                         ", got " + pixels.str());
  backend_->copy(pixels, dst);
  return encode(tap);
}

Expected<Tensor> ClipVision::encode(const Tap& tap) {
  const ClipVisionConfig& c = cfg_;
  Backend& be = *backend_;
  const int64_t t = c.tokens(), w = c.width, g = c.grid, p = c.patch;
  auto emit = [&](std::string_view name, const Tensor& v) {
    if (tap) tap(name, v);
  };
  const Tensor pixels = arena_.get(pixels_);

  // ---- patch embedding: im2col ([g*g, 3*p*p], rows gy*g + gx) + linear ----
  Tensor patches = arena_.get(patches_);
  const Tensor grid_view =
      pixels.reshape({3, g, p, g, p}).permute({1, 3, 0, 2, 4});  // [g, g, 3, p, p]
  Tensor patches_5d = patches.reshape({g, g, 3, p, p});
  be.copy(grid_view, patches_5d);
  Tensor x = arena_.get(x_);  // [T, W]: row 0 CLS, rows 1.. patches
  Tensor x_patches = x.slice(0, 1, g * g);
  be.linear(patches, *patch_embed_, x_patches, Activation::None);
  emit("patch_embed", x_patches.reshape({1, g * g, w}));
  Tensor x_cls = x.slice(0, 0, 1);
  be.copy(cls_, x_cls);
  be.add(x, pos_, x);
  emit("embed_plus_pos", x.reshape({1, t, w}));
  be.layer_norm(x, pre_norm_w_, pre_norm_b_, c.eps, x);
  emit("pre_norm", x.reshape({1, t, w}));

  // ---- transformer blocks 0 .. layers-2 ----
  Tensor h = arena_.get(h_), qkv = arena_.get(qkv_), attn = arena_.get(attn_), o = arena_.get(o_),
         mlp = arena_.get(mlp_);
  const Tensor qkv5 = qkv.reshape({1, t, 3, c.heads, c.head_dim});  // [1, T, 3, H, D]
  const Tensor q = qkv5.select(2, 0), k = qkv5.select(2, 1), v = qkv5.select(2, 2);
  Tensor attn4 = attn.reshape({1, t, c.heads, c.head_dim});  // [1, T, H, D]
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    const std::string name = "block" + std::to_string(i);
    be.layer_norm(x, b.norm1_w, b.norm1_b, c.eps, h);
    be.linear(h, *b.qkv, qkv, Activation::None);
    be.attention(q, k, v, attn4, AttentionParams{});
    be.linear(attn, *b.proj, o, Activation::None);
    emit(name + ".attn_out", o.reshape({1, t, w}));
    be.add(x, o, x);
    be.layer_norm(x, b.norm2_w, b.norm2_b, c.eps, h);
    // nn.GELU() is the exact (erf) GELU. Under bf16 autocast the reference
    // rounds fc1's output to bf16 before the GELU, so it is fused only in fp32.
    if (act_ == DType::BF16) {
      be.linear(h, *b.fc1, mlp, Activation::None);
      be.gelu(mlp, mlp, /*tanh_approx=*/false);
    } else {
      be.linear(h, *b.fc1, mlp, Activation::GeluErf);
    }
    emit(name + ".mlp_hidden", mlp.reshape({1, t, c.mlp_dim}));
    be.linear(mlp, *b.fc2, o, Activation::None);
    be.add(x, o, x);
    emit(name, x.reshape({1, t, w}));
  }
  return x.reshape({1, t, w});
}

}  // namespace flick
