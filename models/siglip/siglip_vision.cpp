#include "models/siglip/siglip_vision.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "models/config_json.h"
#include "models/siglip/pil_resample.h"
#include "runtime/dtype.h"
#include "runtime/file_util.h"

namespace flick::siglip {
namespace {

using Json = nlohmann::json;

// Float dtypes a parameter may be stored in (the release is fp16); converted at load.
const DTypeSet kFloat{DType::F32, DType::BF16, DType::F16};

// FLUX.1-Redux feature_extractor/preprocessor_config.json: rescale_factor
// 0.00392156862745098 (the double nearest 1/255), image_mean = image_std = 0.5.
constexpr double kRescale = 0.00392156862745098;
constexpr float kMean = 0.5f, kStd = 0.5f;

}  // namespace

WeightView siglip_vision_model_view(const WeightStore& store) {
  if (store.has("vision_model.embeddings.patch_embedding.weight"))
    return store.view("vision_model.");
  return store.root();
}

Status siglip_preprocess(const uint8_t* rgb, int64_t height, int64_t width, Tensor& pixels) {
  if (pixels.dtype != DType::F32 || pixels.shape != Shape({1, 3, height, width}) ||
      !pixels.is_contiguous())
    return invalid_input("siglip_preprocess: expected contiguous F32 pixels [1, 3, " +
                         std::to_string(height) + ", " + std::to_string(width) + "], got " +
                         pixels.str());
  float* out = pixels.ptr<float>();
  const int64_t plane = height * width;
  for (int64_t i = 0; i < plane; ++i)
    for (int64_t c = 0; c < 3; ++c) {
      // image_transforms.py rescale(): image.astype(float64) * scale, then
      // astype(float32); normalize(): (image - mean) / std in float32.
      const auto x = static_cast<float>(static_cast<double>(rgb[i * 3 + c]) * kRescale);
      out[c * plane + i] = (x - kMean) / kStd;
    }
  return ok_status();
}

Expected<SiglipVisionConfig> SiglipVisionConfig::detect(const WeightView& vision_model,
                                                        const std::string& config_path) {
  FLICK_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, read_file(config_path, 1 << 20));
  const Json j = Json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return invalid_input(config_path + ": not a JSON object (a transformers config.json)");
  // A full SiglipConfig nests the vision part.
  const Json& t =
      j.contains("vision_config") && j["vision_config"].is_object() ? j["vision_config"] : j;
  SiglipVisionConfig c;
  if (!t.contains("num_attention_heads") || !t["num_attention_heads"].is_number_integer() ||
      t["num_attention_heads"].get<int64_t>() < 1)
    return invalid_input(config_path + ": num_attention_heads: expected a positive integer");
  c.heads = t["num_attention_heads"].get<int64_t>();
  // SiglipVisionConfig's defaults for keys a config.json may omit.
  const std::string act = t.value("hidden_act", std::string("gelu_pytorch_tanh"));
  if (act != "gelu_pytorch_tanh" && act != "gelu")
    return invalid_input(config_path +
                         ": hidden_act: expected \"gelu_pytorch_tanh\" or \"gelu\", got \"" + act +
                         "\"");
  c.gelu_tanh = act == "gelu_pytorch_tanh";
  if (t.contains("layer_norm_eps")) {
    if (!t["layer_norm_eps"].is_number() || !(t["layer_norm_eps"].get<double>() > 0))
      return invalid_input(config_path + ": layer_norm_eps: expected a positive number");
    c.eps = static_cast<float>(t["layer_norm_eps"].get<double>());
  }
  c.image_size = 224;
  if (t.contains("image_size")) {
    if (!t["image_size"].is_number_integer() || t["image_size"].get<int64_t>() < 1)
      return invalid_input(config_path + ": image_size: expected a positive integer");
    c.image_size = t["image_size"].get<int64_t>();
  }

  const WeightView emb = vision_model.sub("embeddings");
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* pe, emb.require("patch_embedding.weight", 4));
  c.width = pe->shape[0];
  c.patch = pe->shape[2];
  if (pe->shape[1] != 3 || pe->shape[3] != c.patch)
    return invalid_input(emb.full_name("patch_embedding.weight") +
                         ": expected [W, 3, p, p], file has " + pe->shape_str());
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* pos, emb.require("position_embedding.weight", 2));
  // SiglipVisionEmbeddings: num_patches = (image_size // patch_size) ** 2.
  c.grid = c.image_size / c.patch;
  if (pos->shape[0] != c.tokens() || pos->shape[1] != c.width)
    return invalid_input(emb.full_name("position_embedding.weight") + ": expected [" +
                         std::to_string(c.tokens()) + ", " + std::to_string(c.width) + "] ((" +
                         std::to_string(c.image_size) + " / " + std::to_string(c.patch) +
                         ")^2 patches), file has " + pos->shape_str());
  if (c.width % c.heads != 0)
    return invalid_input(config_path + ": num_attention_heads " + std::to_string(c.heads) +
                         " does not divide the width " + std::to_string(c.width) + " of " +
                         emb.full_name("patch_embedding.weight"));
  c.head_dim = c.width / c.heads;
  const WeightView layers = vision_model.sub("encoder").sub("layers");
  const std::vector<std::string> children = layers.children();
  c.layers = static_cast<int64_t>(children.size());
  if (c.layers == 0) return not_found(layers.prefix() + "*: no encoder layers in the checkpoint");
  for (int64_t i = 0; i < c.layers; ++i)
    if (children[static_cast<size_t>(i)] != std::to_string(i))
      return invalid_input(layers.full_name(std::to_string(i)) +
                           ": missing (layers must be numbered 0.." + std::to_string(c.layers - 1) +
                           ")");
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* fc1, layers.sub("0").require("mlp.fc1.weight", 2));
  c.intermediate = fc1->shape[0];
  FLICK_TRY(check_config_matches_shapes(t, config_path,
                                        {{"hidden_size", c.width},
                                         {"num_hidden_layers", c.layers},
                                         {"intermediate_size", c.intermediate},
                                         {"patch_size", c.patch}}));
  return c;
}

Expected<SiglipVision> SiglipVision::load(const WeightView& vision_model,
                                          const SiglipVisionConfig& config, Backend& backend,
                                          Precision precision) {
  SiglipVision m;
  m.cfg_ = config;
  m.backend_ = &backend;
  m.precision_ = precision;
  m.act_ = precision == Precision::F32 ? DType::F32 : DType::BF16;
  FLICK_TRY(m.load_weights(vision_model));
  m.plan();
  return m;
}

Status SiglipVision::load_weights(const WeightView& vision_model) {
  const SiglipVisionConfig& c = cfg_;
  const int64_t w = c.width, p = c.patch;
  auto param = [&](const WeightView& v, std::string_view name, Shape shape) -> Expected<Tensor> {
    FLICK_ASSIGN_OR_RETURN(Tensor t, v.get(name, kFloat, shape));
    OwnedTensor& o = owned_.emplace_back(act_, t.shape);
    convert(t.dtype, t.data, act_, o.t.data, t.numel());
    return o.t;
  };
  // Row blocks [n, k] stacked into one [parts * n, k] weight (q, k, v as one
  // GEMM: the same dot product per output column). The packer copies and
  // rounds the weight; the bias (a bf16 parameter in the bf16 reference) is
  // rounded here.
  // `shape` is the stored weight's ([n, k], or the conv's [W, 3, p, p]).
  auto linear = [&](const WeightView& v, std::vector<std::string> prefixes, int64_t n, int64_t k,
                    Precision precision,
                    std::optional<Shape> shape = {}) -> Expected<std::unique_ptr<PackedLinear>> {
    const auto parts = static_cast<int64_t>(prefixes.size());
    OwnedTensor weight(DType::F32, Shape{parts * n, k});
    OwnedTensor& bias = owned_.emplace_back(act_, Shape{parts * n});
    for (int64_t i = 0; i < parts; ++i) {
      const std::string& name = prefixes[static_cast<size_t>(i)];
      FLICK_ASSIGN_OR_RETURN(Tensor wt,
                             v.get(name + ".weight", kFloat, shape.value_or(Shape{n, k})));
      FLICK_ASSIGN_OR_RETURN(Tensor b, v.get(name + ".bias", kFloat, {n}));
      convert(wt.dtype, wt.data, DType::F32, weight.t.ptr<float>() + i * n * k, n * k);
      convert(b.dtype, b.data, act_, static_cast<uint8_t*>(bias.t.data) + i * n * dtype_size(act_),
              n);
    }
    return backend_->pack_linear({weight.t, Tensor{}, bias.t, precision});
  };

  const WeightView emb = vision_model.sub("embeddings");
  // The conv (kernel = stride = p, "valid") is a linear layer over patches
  // flattened as (c, ky, kx), the conv weight's own layout. It sees the raw
  // pixels: quantized towers keep it BF16.
  FLICK_ASSIGN_OR_RETURN(patch_embed_, linear(emb, {"patch_embedding"}, w, 3 * p * p,
                                              act_ == DType::F32 ? Precision::F32 : Precision::BF16,
                                              Shape{w, 3, p, p}));
  FLICK_ASSIGN_OR_RETURN(pos_, param(emb, "position_embedding.weight", {c.tokens(), w}));
  emb.mark_used("position_ids");  // a buffer some older files carry
  const WeightView layers = vision_model.sub("encoder").sub("layers");
  for (int64_t i = 0; i < c.layers; ++i) {
    const WeightView v = layers.sub(std::to_string(i));
    Layer& l = layers_.emplace_back();
    FLICK_ASSIGN_OR_RETURN(l.ln1_w, param(v, "layer_norm1.weight", {w}));
    FLICK_ASSIGN_OR_RETURN(l.ln1_b, param(v, "layer_norm1.bias", {w}));
    FLICK_ASSIGN_OR_RETURN(l.ln2_w, param(v, "layer_norm2.weight", {w}));
    FLICK_ASSIGN_OR_RETURN(l.ln2_b, param(v, "layer_norm2.bias", {w}));
    FLICK_ASSIGN_OR_RETURN(
        l.qkv,
        linear(v, {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}, w, w, precision_));
    FLICK_ASSIGN_OR_RETURN(l.out, linear(v, {"self_attn.out_proj"}, w, w, precision_));
    FLICK_ASSIGN_OR_RETURN(l.fc1, linear(v, {"mlp.fc1"}, c.intermediate, w, precision_));
    FLICK_ASSIGN_OR_RETURN(l.fc2, linear(v, {"mlp.fc2"}, w, c.intermediate, precision_));
    vision_model.release_pages();  // packed: the mapped layer need not stay resident
  }
  FLICK_ASSIGN_OR_RETURN(post_w_, param(vision_model, "post_layernorm.weight", {w}));
  FLICK_ASSIGN_OR_RETURN(post_b_, param(vision_model, "post_layernorm.bias", {w}));
  // The attention-pooling head: in the checkpoint, not used by FramePack.
  const WeightView head = vision_model.sub("head");
  for (const std::string& n : head.names()) head.mark_used(n);
  return ok_status();
}

void SiglipVision::plan() {
  const SiglipVisionConfig& c = cfg_;
  const int64_t t = c.tokens(), w = c.width, s = c.image_size;
  rgb_pixels_ = arena_.request("siglip.rgb_pixels", DType::F32, {1, 3, s, s});
  pixels_ = arena_.request("siglip.pixels", act_, {1, 3, s, s});
  patches_ = arena_.request("siglip.patches", act_, {t, 3 * c.patch * c.patch});
  x_ = arena_.request("siglip.x", act_, {t, w});
  h_ = arena_.request("siglip.h", act_, {t, w});
  qkv_ = arena_.request("siglip.qkv", act_, {t, 3 * w});
  attn_ = arena_.request("siglip.attn", act_, {t, w});
  o_ = arena_.request("siglip.o", act_, {t, w});
  mlp_ = arena_.request("siglip.mlp", act_, {t, c.intermediate});
  arena_.finalize();
}

Expected<Tensor> SiglipVision::forward_rgb(const uint8_t* rgb, int64_t height, int64_t width,
                                           const Tap& tap) {
  const int64_t s = cfg_.image_size;
  if (height < 1 || width < 1)
    return invalid_input("SigLIP: empty image " + std::to_string(width) + "x" +
                         std::to_string(height));
  Tensor pixels = arena_.get(rgb_pixels_);
  const std::span<const uint8_t> image(rgb, static_cast<size_t>(height * width * 3));
  // SiglipImageProcessor.resize: PIL BICUBIC to size x size (aspect not kept).
  FLICK_ASSIGN_OR_RETURN(std::vector<uint8_t> resized,
                         pil_resize_rgb(image, width, height, s, s, PilFilter::Bicubic));
  FLICK_TRY(siglip_preprocess(resized.data(), s, s, pixels));
  return forward(pixels, tap);
}

Expected<Tensor> SiglipVision::forward(const Tensor& pixels_in, const Tap& tap) {
  const SiglipVisionConfig& c = cfg_;
  const int64_t t = c.tokens(), w = c.width, g = c.grid, p = c.patch, s = c.image_size;
  Tensor pixels = arena_.get(pixels_);  // [1, 3, S, S]
  if (pixels_in.shape != pixels.shape ||
      (pixels_in.dtype != DType::F32 && pixels_in.dtype != DType::BF16))
    return invalid_input("SigLIP: expected F32 or BF16 pixels " + pixels.shape.str() + ", got " +
                         pixels_in.str());
  Backend& be = *backend_;
  auto emit = [&](std::string_view name, const Tensor& v) {
    if (tap) tap(name, v.reshape({1, t, v.dim(1)}));
  };
  // The module's input cast (pixel_values.to(dtype) in the reference).
  be.copy(pixels_in, pixels);

  // ---- patch embedding: im2col of the g x g patches (a "valid" conv skips
  // the last S - g*p rows and columns), rows gy*g + gx, columns (c, ky, kx) ----
  Tensor grid_view = pixels;  // [g, g, 3, p, p] over [1, 3, S, S]
  grid_view.shape = Shape{g, g, 3, p, p};
  grid_view.strides = {};
  grid_view.strides[0] = p * s;
  grid_view.strides[1] = p;
  grid_view.strides[2] = s * s;
  grid_view.strides[3] = s;
  grid_view.strides[4] = 1;
  Tensor patches = arena_.get(patches_);
  Tensor patches_5d = patches.reshape({g, g, 3, p, p});
  be.copy(grid_view, patches_5d);
  Tensor x = arena_.get(x_);  // [T, W]
  be.linear(patches, *patch_embed_, x, Activation::None);
  be.add(x, pos_, x);
  emit("embed", x);

  Tensor h = arena_.get(h_), qkv = arena_.get(qkv_), attn = arena_.get(attn_), o = arena_.get(o_),
         mlp = arena_.get(mlp_);
  const Tensor qkv5 = qkv.reshape({1, t, 3, c.heads, c.head_dim});  // [1, T, 3, H, D]
  const Tensor q = qkv5.select(2, 0), k = qkv5.select(2, 1), v = qkv5.select(2, 2);
  Tensor attn4 = attn.reshape({1, t, c.heads, c.head_dim});  // [1, T, H, D]
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    be.layer_norm(x, l.ln1_w, l.ln1_b, c.eps, h);
    be.linear(h, *l.qkv, qkv, Activation::None);
    be.attention(q, k, v, attn4, AttentionParams{});  // no mask, scale head_dim^-0.5
    be.linear(attn, *l.out, o, Activation::None);
    be.add(x, o, x);
    be.layer_norm(x, l.ln2_w, l.ln2_b, c.eps, h);
    if (c.gelu_tanh) {
      // RoundGeluTanh rounds fc1's output to the activation dtype before the
      // GELU, as a bf16 nn.Linear followed by GELU does (same as GeluTanh in fp32).
      be.linear(h, *l.fc1, mlp, Activation::RoundGeluTanh);
    } else if (act_ == DType::BF16) {
      be.linear(h, *l.fc1, mlp, Activation::None);
      be.gelu(mlp, mlp, /*tanh_approx=*/false);
    } else {
      be.linear(h, *l.fc1, mlp, Activation::GeluErf);
    }
    be.linear(mlp, *l.fc2, o, Activation::None);
    be.add(x, o, x);
    emit("layer" + std::to_string(i), x);
  }
  be.layer_norm(x, post_w_, post_b_, c.eps, x);
  return x.reshape({1, t, w});
}

}  // namespace flick::siglip
