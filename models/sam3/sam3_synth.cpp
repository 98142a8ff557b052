#include "models/sam3/sam3_synth.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>

#include "runtime/random.h"
#include "runtime/weights/pth_writer.h"
#include "runtime/weights/stored_type.h"

namespace flick {
namespace {

int64_t numel(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

void add(Sam3Layout& out, std::string name, const char* dtype, std::vector<int64_t> shape) {
  out.push_back({std::move(name), dtype, std::move(shape)});
}

// The original SAM3 ViT trunk beside the student one (vitdet.py ViT as
// _create_vit_backbone builds it: 1024 wide, 32 blocks, MLP 4736, patch 14,
// a 24x24 (+ cls) position table, RoPE tables as complex buffers), in the
// released file's order.
void vit_trunk(Sam3Layout& out, const std::string& p) {
  const int64_t w = 1024, mlp = 4736;
  add(out, p + "pos_embed", "F32", {1, 577, w});
  add(out, p + "patch_embed.proj.weight", "F32", {w, 3, 14, 14});
  for (int i = 0; i < 32; ++i) {
    const std::string b = p + "blocks." + std::to_string(i) + ".";
    add(out, b + "norm1.weight", "F32", {w});
    add(out, b + "norm1.bias", "F32", {w});
    // Windowed blocks hold 24x24 RoPE tables, the global ones (7, 15, 23, 31) 72x72.
    add(out, b + "attn.freqs_cis", "C64", {i % 8 == 7 ? 5184 : 576, 32});
    add(out, b + "attn.qkv.weight", "F32", {3 * w, w});
    add(out, b + "attn.qkv.bias", "F32", {3 * w});
    add(out, b + "attn.proj.weight", "F32", {w, w});
    add(out, b + "attn.proj.bias", "F32", {w});
    add(out, b + "norm2.weight", "F32", {w});
    add(out, b + "norm2.bias", "F32", {w});
    add(out, b + "mlp.fc1.weight", "F32", {mlp, w});
    add(out, b + "mlp.fc1.bias", "F32", {mlp});
    add(out, b + "mlp.fc2.weight", "F32", {w, mlp});
    add(out, b + "mlp.fc2.bias", "F32", {w});
  }
  add(out, p + "ln_pre.weight", "F32", {w});
  add(out, p + "ln_pre.bias", "F32", {w});
}

void weight_bias(Sam3Layout& out, const std::string& p, std::vector<int64_t> w, int64_t n) {
  add(out, p + ".weight", "F32", std::move(w));
  add(out, p + ".bias", "F32", {n});
}

void linear(Sam3Layout& out, const std::string& p, int64_t n, int64_t k) {
  weight_bias(out, p, {n, k}, n);
}

void norm(Sam3Layout& out, const std::string& p, int64_t n) { weight_bias(out, p, {n}, n); }

// q/k/v/out projections of an attention with `inner` channels inside, queries
// `dim` wide and keys/values `kv` wide.
void attention(Sam3Layout& out, const std::string& p, int64_t dim, int64_t kv, int64_t inner) {
  linear(out, p + ".q_proj", inner, dim);
  linear(out, p + ".k_proj", inner, kv);
  linear(out, p + ".v_proj", inner, kv);
  linear(out, p + ".out_proj", dim, inner);
}

// A torch.nn.Sequential of conv (kernel k) + LayerNorm2d (+ activation) stages:
// conv i sits at index 3 i, its norm at 3 i + 1.
void conv_norm_stages(Sam3Layout& out, const std::string& p, std::vector<int64_t> chans,
                      int64_t k) {
  for (size_t i = 0; i + 1 < chans.size(); ++i) {
    const std::string at = p + "." + std::to_string(3 * i);
    weight_bias(out, at, {chans[i + 1], chans[i], k, k}, chans[i + 1]);
    norm(out, p + "." + std::to_string(3 * i + 1), chans[i + 1]);
  }
}

void mlp(Sam3Layout& out, const std::string& p, std::vector<int64_t> widths) {
  for (size_t i = 0; i + 1 < widths.size(); ++i)
    linear(out, p + ".layers." + std::to_string(i), widths[i + 1], widths[i]);
}

// The tracker's tensors in the released file (build_tracker(), under
// "tracker."), in its order; checked against
// tests/data/sam3/keys_efficient_sam3_repvit-m0_9_mobileclip_s1.txt.gz by
// Sam3Checkpoint tests. Never read by the image path.
void tracker(Sam3Layout& out) {
  const std::string t = "tracker.";
  const int64_t d = 256, mem = 64;
  add(out, t + "maskmem_tpos_enc", "F32", {7, 1, 1, mem});
  add(out, t + "no_mem_embed", "F32", {1, 1, d});
  add(out, t + "no_mem_pos_enc", "F32", {1, 1, d});
  add(out, t + "no_obj_ptr", "F32", {1, d});
  add(out, t + "no_obj_embed_spatial", "F32", {1, mem});
  weight_bias(out, t + "mask_downsample", {1, 1, 4, 4}, 1);
  // Memory attention: 4 layers of self-attention and cross-attention to the
  // 64-wide memory.
  for (int i = 0; i < 4; ++i) {
    const std::string l = t + "transformer.encoder.layers." + std::to_string(i);
    attention(out, l + ".self_attn", d, d, d);
    attention(out, l + ".cross_attn_image", d, mem, d);
    linear(out, l + ".linear1", 2048, d);
    linear(out, l + ".linear2", d, 2048);
    for (const char* n : {".norm1", ".norm2", ".norm3"}) norm(out, l + n, d);
  }
  norm(out, t + "transformer.encoder.norm", d);
  // Memory encoder: mask downsampler (1 -> 4 -> 16 -> 64 -> 256, then a 1x1
  // conv at index 12), projection, 2 ConvNeXt fuser blocks, out projection.
  const std::string mb = t + "maskmem_backbone.";
  conv_norm_stages(out, mb + "mask_downsampler.encoder", {1, 4, 16, 64, d}, 3);
  weight_bias(out, mb + "mask_downsampler.encoder.12", {d, d, 1, 1}, d);
  weight_bias(out, mb + "pix_feat_proj", {d, d, 1, 1}, d);
  for (int i = 0; i < 2; ++i) {
    const std::string l = mb + "fuser.layers." + std::to_string(i);
    add(out, l + ".gamma", "F32", {d});
    weight_bias(out, l + ".dwconv", {d, 1, 7, 7}, d);
    norm(out, l + ".norm", d);
    linear(out, l + ".pwconv1", 4 * d, d);
    linear(out, l + ".pwconv2", d, 4 * d);
  }
  weight_bias(out, mb + "out_proj", {mem, d, 1, 1}, mem);
  // SAM prompt encoder.
  const std::string pe = t + "sam_prompt_encoder.";
  add(out, pe + "pe_layer.positional_encoding_gaussian_matrix", "F32", {2, d / 2});
  for (int i = 0; i < 4; ++i)
    add(out, pe + "point_embeddings." + std::to_string(i) + ".weight", "F32", {1, d});
  add(out, pe + "not_a_point_embed.weight", "F32", {1, d});
  conv_norm_stages(out, pe + "mask_downscaling", {1, 4, 16}, 2);
  weight_bias(out, pe + "mask_downscaling.6", {d, 16, 1, 1}, d);
  add(out, pe + "no_mask_embed.weight", "F32", {1, d});
  // SAM mask decoder: a 2-layer two-way transformer (cross-attention at half width).
  const std::string md = t + "sam_mask_decoder.";
  for (int i = 0; i < 2; ++i) {
    const std::string l = md + "transformer.layers." + std::to_string(i);
    attention(out, l + ".self_attn", d, d, d);
    norm(out, l + ".norm1", d);
    attention(out, l + ".cross_attn_token_to_image", d, d, d / 2);
    norm(out, l + ".norm2", d);
    linear(out, l + ".mlp.lin1", 2048, d);
    linear(out, l + ".mlp.lin2", d, 2048);
    norm(out, l + ".norm3", d);
    norm(out, l + ".norm4", d);
    attention(out, l + ".cross_attn_image_to_token", d, d, d / 2);
  }
  attention(out, md + "transformer.final_attn_token_to_image", d, d, d / 2);
  norm(out, md + "transformer.norm_final_attn", d);
  add(out, md + "iou_token.weight", "F32", {1, d});
  add(out, md + "mask_tokens.weight", "F32", {4, d});
  add(out, md + "obj_score_token.weight", "F32", {1, d});
  // output_upscaling: ConvTranspose2d (weight [in, out, 2, 2]), LayerNorm2d, GELU, ConvTranspose2d.
  weight_bias(out, md + "output_upscaling.0", {d, d / 4, 2, 2}, d / 4);
  norm(out, md + "output_upscaling.1", d / 4);
  weight_bias(out, md + "output_upscaling.3", {d / 4, d / 8, 2, 2}, d / 8);
  weight_bias(out, md + "conv_s0", {d / 8, d, 1, 1}, d / 8);
  weight_bias(out, md + "conv_s1", {d / 4, d, 1, 1}, d / 4);
  for (int i = 0; i < 4; ++i)
    mlp(out, md + "output_hypernetworks_mlps." + std::to_string(i), {d, d, d, d / 8});
  mlp(out, md + "iou_prediction_head", {d, d, d, 4});
  mlp(out, md + "pred_obj_score_head", {d, d, d, 1});
  mlp(out, t + "obj_ptr_proj", {d, d, d, d});
  linear(out, t + "obj_ptr_tpos_proj", mem, d);
}

bool unused_part(std::string_view name) {
  if (name.starts_with("tracker.")) return true;
  constexpr std::string_view vb = "detector.backbone.vision_backbone.";
  if (!name.starts_with(vb)) return false;
  name.remove_prefix(vb.size());
  if (name.starts_with("sam2_convs.")) return true;
  return name.starts_with("trunk.") && !name.starts_with("trunk.model.");
}

}  // namespace

Sam3SynthDims sam3_synth_dims(Sam3SynthSize size) {
  Sam3SynthDims d;
  if (size == Sam3SynthSize::kFull) {
    d.trunk = *RepVitConfig::named("m0_9");
    d.text = *MobileClipTextConfig::named("s1");
    d.text.context = 77;  // the released file's table (errata)
    d.head = Sam3HeadConfig{};
    return d;
  }
  d.trunk.name = "custom";
  d.trunk.stem = 16;
  // Stride 1 with and without SE, three stride-2 blocks: stride 32 overall.
  d.trunk.blocks = {{16, 16, 1, 8},  {16, 32, 2, 0}, {32, 32, 1, 0}, {32, 48, 2, 0},
                    {48, 48, 1, 16}, {48, 64, 2, 0}, {64, 64, 1, 0}};
  d.trunk.embed_dim = 64;
  d.text = *MobileClipTextConfig::named("s1");
  d.text.name = "s1";
  d.text.dim = 64;  // one head of 64 (heads = dim / 64)
  d.text.context = 77;
  d.text.layers = 2;
  d.text.heads = 1;
  d.text.ffn = 128;
  d.head.d_model = 32;  // 8 heads of 4
  d.head.ffn = 64;
  d.head.trunk_dim = 64;
  d.head.encoder_layers = 2;
  d.head.decoder_layers = 2;
  d.head.geometry_layers = 1;
  d.head.queries = 20;
  d.text.out_dim = d.head.d_model;
  return d;
}

Sam3Layout sam3_released_layout(const Sam3SynthDims& dims, bool with_unused) {
  Sam3Layout out = sam3_image_layout(dims.trunk, dims.text, dims.head, "detector.");
  if (!with_unused) return out;
  // After the image model, as the released file orders them: the ViT trunk,
  // the SAM2 neck (a copy of the SAM3 neck's layout), the tracker.
  vit_trunk(out, "detector.backbone.vision_backbone.trunk.");
  Sam3HeadConfig released;  // the unused parts keep the released shapes
  for (Sam3LayoutTensor t : released.neck_layout("detector.")) {
    const size_t at = t.name.find(".convs.");
    t.name.replace(at, 7, ".sam2_convs.");
    out.push_back(std::move(t));
  }
  tracker(out);
  return out;
}

Sam3SynthScale sam3_synth_scale(std::string_view name, const std::vector<int64_t>& shape) {
  auto ends = [&](std::string_view s) { return name.ends_with(s); };
  if (unused_part(name) || ends("num_batches_tracked")) return {0.0, 0.0};
  const bool batch_norm = name.find(".bn.") != std::string_view::npos ||
                          name.find("trunk.model.head.1.") != std::string_view::npos ||
                          name.find(".rbr_skip.") != std::string_view::npos;
  if (ends("running_var")) return {1.0, 0.1};
  if (ends("running_mean")) return {0.0, 0.1};
  if (batch_norm && ends(".weight") && shape.size() == 1) return {0.5, 0.1};
  if (ends(".bias") || ends("in_proj_bias")) return {0.0, 0.02};
  if (shape.size() == 1) return {1.0, 0.1};
  if (ends("reference_points.weight")) return {0.0, 1.0};
  if (ends("embedding_layer.weight") || ends("pos_embed.pos_embed")) return {0.0, 0.02};
  const int64_t fan_in = std::max<int64_t>(1, numel(shape) / std::max<int64_t>(1, shape[0]));
  return {0.0, 1.0 / std::sqrt(static_cast<double>(fan_in))};
}

void sam3_synth_values(uint64_t seed, size_t index, const Sam3LayoutTensor& t, float* out) {
  const int64_t n = numel(t.shape);
  const Sam3SynthScale s = sam3_synth_scale(t.name, t.shape);
  if (s.std == 0.0 && s.offset == 0.0) {
    std::fill(out, out + n, 0.0f);
    return;
  }
  TorchGenerator g(seed + index);
  g.randn(out, n);
  // torch: (randn * std) + offset in fp32 with the Python scalars as floats.
  // The double casts round each step once and keep the compiler from fusing
  // them into an FMA (the products and sums of two floats are exact in double).
  const auto stdf = static_cast<float>(s.std), off = static_cast<float>(s.offset);
  for (int64_t i = 0; i < n; ++i) {
    const auto p = static_cast<float>(static_cast<double>(out[i]) * static_cast<double>(stdf));
    out[i] = static_cast<float>(static_cast<double>(p) + static_cast<double>(off));
  }
}

Status write_sam3_synth(const std::string& path, const Sam3SynthOptions& options) {
  if (std::string_view(path).ends_with(".safetensors"))
    return invalid_input(path +
                         ": synthetic EfficientSAM3 checkpoints are written as .pth "
                         "(torch.save zip), the released format");
  const Sam3Layout layout =
      sam3_released_layout(sam3_synth_dims(options.size), options.with_unused);
  std::vector<StreamedTensor> ts;
  ts.reserve(layout.size());
  for (size_t i = 0; i < layout.size(); ++i) {
    const Sam3LayoutTensor& t = layout[i];
    StreamedTensor s;
    s.name = t.name;
    s.shape = t.shape;
    if (t.dtype != "F32") {
      s.stored = stored_type_by_name(t.dtype);
      if (!s.stored) return internal_error("sam3 synth: no stored type " + t.dtype);
      ts.push_back(std::move(s));  // zeros: a hole
      continue;
    }
    s.dtype = DType::F32;
    const Sam3SynthScale sc = sam3_synth_scale(t.name, t.shape);
    if (sc.std == 0.0 && sc.offset == 0.0) {
      ts.push_back(std::move(s));
      continue;
    }
    // torch.randn's values depend on the whole size (its last block of 16 is
    // redrawn), so the tensor is generated at its first chunk and dropped
    // after its last.
    auto buf = std::make_shared<std::vector<float>>();
    const uint64_t seed = options.seed;
    const uint64_t bytes = static_cast<uint64_t>(numel(t.shape)) * 4;
    s.fill = [buf, seed, i, t, bytes](uint64_t offset, std::span<uint8_t> out) {
      if (buf->empty()) {
        buf->resize(static_cast<size_t>(bytes / 4));
        sam3_synth_values(seed, i, t, buf->data());
      }
      std::memcpy(out.data(), reinterpret_cast<const uint8_t*>(buf->data()) + offset, out.size());
      if (offset + out.size() == bytes) std::vector<float>().swap(*buf);
    };
    ts.push_back(std::move(s));
  }
  // {"model": state_dict}, as the released file (flick reads "model.<name>").
  return write_pth(path, ts, {.wrap_in = "model"});
}

}  // namespace flick
