#include "models/hunyuan/framepack_dit_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "models/config_json.h"
#include "runtime/file_util.h"

namespace flick::hunyuan {
namespace {

using Json = nlohmann::json;

// Children of a numbered list ("transformer_blocks"): their count, or an
// error naming the first gap.
Expected<int64_t> count_blocks(const WeightView& list) {
  const std::vector<std::string> children = list.children();
  const auto n = static_cast<int64_t>(children.size());
  for (int64_t i = 0; i < n; ++i)
    if (children[static_cast<size_t>(i)] != std::to_string(i))
      return invalid_input(list.full_name(std::to_string(i)) +
                           ": missing (blocks must be numbered 0.." + std::to_string(n - 1) + ")");
  return n;
}

Expected<int64_t> json_int(const Json& j, const char* key, const std::string& path,
                           int64_t fallback) {
  if (!j.contains(key)) return fallback;
  if (!j[key].is_number_integer() || j[key].get<int64_t>() <= 0)
    return invalid_input(path + ": " + key + ": expected a positive integer, got " + j[key].dump());
  return j[key].get<int64_t>();
}

}  // namespace

Expected<FramePackDitConfig> FramePackDitConfig::detect(const WeightView& model,
                                                        const std::string& config_path) {
  // No config.json (a single-file checkpoint such as Kijai's): the released
  // defaults, still checked against the shapes.
  Json j = Json::object();
  if (!config_path.empty()) {
    FLICK_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, read_file(config_path, 1 << 20));
    j = Json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
      return invalid_input(config_path + ": not a JSON object (a diffusers config.json)");
  }
  FramePackDitConfig c;

  FLICK_ASSIGN_OR_RETURN(const TensorInfo* xe, model.require("x_embedder.proj.weight", 5));
  c.dim = xe->shape[0];
  c.in_channels = xe->shape[1];
  if (xe->shape[2] != kPatchT || xe->shape[3] != kPatch || xe->shape[4] != kPatch)
    return invalid_input(model.full_name("x_embedder.proj.weight") +
                         ": expected a (1, 2, 2) patch [D, C, 1, 2, 2], file has " +
                         xe->shape_str());
  // The clean-latent embedders take 16-channel latents (hunyuan_video_packed.py:710-712).
  if (c.in_channels != 16)
    return invalid_input(model.full_name("x_embedder.proj.weight") +
                         ": expected 16 latent channels, file has " + xe->shape_str());
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* po, model.require("proj_out.weight", 2));
  if (po->shape[0] % (kPatch * kPatch * kPatchT) != 0)
    return invalid_input(model.full_name("proj_out.weight") +
                         ": rows must be out_channels * 4, file has " + po->shape_str());
  c.out_channels = po->shape[0] / (kPatch * kPatch * kPatchT);
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* pin,
                         model.require("context_embedder.proj_in.weight", 2));
  c.text_dim = pin->shape[1];
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* pooled,
                         model.require("time_text_embed.text_embedder.linear_1.weight", 2));
  c.pooled_dim = pooled->shape[1];
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* up, model.require("image_projection.up.weight", 2));
  c.image_dim = up->shape[1];

  FLICK_ASSIGN_OR_RETURN(c.layers, count_blocks(model.sub("transformer_blocks")));
  FLICK_ASSIGN_OR_RETURN(c.single_layers, count_blocks(model.sub("single_transformer_blocks")));
  FLICK_ASSIGN_OR_RETURN(c.refiner_layers,
                         count_blocks(model.sub("context_embedder.token_refiner.refiner_blocks")));
  if (c.layers < 1 && c.single_layers < 1)
    return not_found(model.full_name("transformer_blocks") + "*: no transformer blocks");
  if (c.refiner_layers < 1)
    return not_found(model.full_name("context_embedder.token_refiner.refiner_blocks") +
                     "*: no token refiner blocks");
  const std::string ff = c.layers > 0 ? "transformer_blocks.0.ff.net.0.proj.weight"
                                      : "single_transformer_blocks.0.proj_mlp.weight";
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* f1, model.require(ff, 2));
  c.mlp_dim = f1->shape[0];
  FLICK_ASSIGN_OR_RETURN(
      const TensorInfo* rf,
      model.require("context_embedder.token_refiner.refiner_blocks.0.ff.net.0.proj.weight", 2));
  c.refiner_mlp_dim = rf->shape[0];

  // The fields no shape carries (class defaults when absent, :728-750).
  FLICK_ASSIGN_OR_RETURN(c.heads, json_int(j, "num_attention_heads", config_path, 24));
  if (c.dim % c.heads != 0)
    return invalid_input(config_path + ": num_attention_heads " + std::to_string(c.heads) +
                         " does not divide the width " + std::to_string(c.dim) + " of " +
                         model.full_name("x_embedder.proj.weight"));
  c.head_dim = c.dim / c.heads;
  FLICK_ASSIGN_OR_RETURN(const int64_t hd,
                         json_int(j, "attention_head_dim", config_path, c.head_dim));
  if (hd != c.head_dim)
    return invalid_input(config_path + ": attention_head_dim is " + std::to_string(hd) +
                         " but the checkpoint's width / num_attention_heads is " +
                         std::to_string(c.head_dim));
  if (j.contains("rope_theta")) {
    if (!j["rope_theta"].is_number() || !(j["rope_theta"].get<double>() > 0))
      return invalid_input(config_path + ": rope_theta: expected a positive number, got " +
                           j["rope_theta"].dump());
    c.rope_theta = j["rope_theta"].get<double>();
  }
  if (j.contains("rope_axes_dim")) {
    const Json& a = j["rope_axes_dim"];
    if (!a.is_array() || a.size() != 3 || !std::all_of(a.begin(), a.end(), [](const Json& x) {
          return x.is_number_integer() && x.get<int64_t>() > 0 && x.get<int64_t>() % 2 == 0;
        }))
      return invalid_input(config_path +
                           ": rope_axes_dim: expected 3 positive even integers, got " + a.dump());
    for (size_t i = 0; i < 3; ++i) c.rope_axes[i] = a[i].get<int64_t>();
  }
  if (c.rope_axes[0] + c.rope_axes[1] + c.rope_axes[2] != c.head_dim)
    return invalid_input(config_path + ": rope_axes_dim sums to " +
                         std::to_string(c.rope_axes[0] + c.rope_axes[1] + c.rope_axes[2]) +
                         ", the head size is " + std::to_string(c.head_dim));
  // Shape-carried fields config.json also states must agree with the shapes.
  FLICK_TRY(check_config_matches_shapes(j, config_path,
                                        {{"in_channels", c.in_channels},
                                         {"out_channels", c.out_channels},
                                         {"num_layers", c.layers},
                                         {"num_single_layers", c.single_layers},
                                         {"num_refiner_layers", c.refiner_layers},
                                         {"text_embed_dim", c.text_dim},
                                         {"pooled_projection_dim", c.pooled_dim},
                                         {"image_proj_dim", c.image_dim},
                                         {"patch_size", kPatch},
                                         {"patch_size_t", kPatchT}}));
  for (const char* key : {"guidance_embeds", "has_image_proj", "has_clean_x_embedder"})
    if (j.contains(key) && j[key] != true)
      return invalid_input(config_path + ": " + key + ": FramePack's model has it (expected true)");
  if (j.contains("qk_norm") && j["qk_norm"] != "rms_norm")
    return invalid_input(config_path + ": qk_norm: expected \"rms_norm\", got " +
                         j["qk_norm"].dump());
  return c;
}

std::vector<DitTensorSpec> framepack_dit_layout(const FramePackDitConfig& c) {
  std::vector<DitTensorSpec> out;
  const int64_t d = c.dim, hd = c.head_dim;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    out.push_back({std::move(name), std::move(shape)});
  };
  auto linear = [&](const std::string& name, int64_t n, int64_t k) {
    add(name + ".weight", {n, k});
    add(name + ".bias", {n});
  };
  auto mlp2 = [&](const std::string& name, int64_t in) {  // TimestepEmbedding / PixArt proj
    linear(name + ".linear_1", d, in);
    linear(name + ".linear_2", d, d);
  };
  add("x_embedder.proj.weight", {d, c.in_channels, 1, 2, 2});
  add("x_embedder.proj.bias", {d});
  const std::string ce = "context_embedder.";
  mlp2(ce + "time_text_embed.timestep_embedder", FramePackDitConfig::kFreqDim);
  mlp2(ce + "time_text_embed.text_embedder", c.text_dim);
  linear(ce + "proj_in", d, c.text_dim);
  for (int64_t i = 0; i < c.refiner_layers; ++i) {
    const std::string p = ce + "token_refiner.refiner_blocks." + std::to_string(i) + ".";
    add(p + "norm1.weight", {d});
    add(p + "norm1.bias", {d});
    for (const char* n : {"to_q", "to_k", "to_v", "to_out.0"}) linear(p + "attn." + n, d, d);
    add(p + "norm2.weight", {d});
    add(p + "norm2.bias", {d});
    linear(p + "ff.net.0.proj", c.refiner_mlp_dim, d);
    linear(p + "ff.net.2", d, c.refiner_mlp_dim);
    linear(p + "norm_out.linear", 2 * d, d);
  }
  mlp2("time_text_embed.timestep_embedder", FramePackDitConfig::kFreqDim);
  mlp2("time_text_embed.guidance_embedder", FramePackDitConfig::kFreqDim);
  mlp2("time_text_embed.text_embedder", c.pooled_dim);
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "transformer_blocks." + std::to_string(i) + ".";
    linear(p + "norm1.linear", 6 * d, d);
    linear(p + "norm1_context.linear", 6 * d, d);
    add(p + "attn.norm_q.weight", {hd});
    add(p + "attn.norm_k.weight", {hd});
    for (const char* n : {"to_q", "to_k", "to_v", "add_k_proj", "add_v_proj", "add_q_proj",
                          "to_out.0", "to_add_out"})
      linear(p + "attn." + n, d, d);
    add(p + "attn.norm_added_q.weight", {hd});
    add(p + "attn.norm_added_k.weight", {hd});
    for (const char* ff : {"ff", "ff_context"}) {
      linear(p + ff + ".net.0.proj", c.mlp_dim, d);
      linear(p + ff + ".net.2", d, c.mlp_dim);
    }
  }
  for (int64_t i = 0; i < c.single_layers; ++i) {
    const std::string p = "single_transformer_blocks." + std::to_string(i) + ".";
    add(p + "attn.norm_q.weight", {hd});
    add(p + "attn.norm_k.weight", {hd});
    for (const char* n : {"to_q", "to_k", "to_v"}) linear(p + "attn." + n, d, d);
    linear(p + "norm.linear", 3 * d, d);
    linear(p + "proj_mlp", c.mlp_dim, d);
    linear(p + "proj_out", d, d + c.mlp_dim);
  }
  linear("norm_out.linear", 2 * d, d);
  linear("proj_out", c.out_channels * 4, d);
  linear("image_projection.up", 3 * d, c.image_dim);
  linear("image_projection.down", d, 3 * d);
  add("clean_x_embedder.proj.weight", {d, 16, 1, 2, 2});
  add("clean_x_embedder.proj.bias", {d});
  add("clean_x_embedder.proj_2x.weight", {d, 16, 2, 4, 4});
  add("clean_x_embedder.proj_2x.bias", {d});
  add("clean_x_embedder.proj_4x.weight", {d, 16, 4, 8, 8});
  add("clean_x_embedder.proj_4x.bias", {d});
  return out;
}

Status check_framepack_dit_layout(const WeightView& model, const FramePackDitConfig& c) {
  std::vector<std::string> problems;
  std::set<std::string> expected;
  for (const DitTensorSpec& t : framepack_dit_layout(c)) {
    expected.insert(t.name);
    const TensorInfo* info = model.info(t.name);
    if (info == nullptr)
      problems.push_back(model.full_name(t.name) + ": missing (expected " + shape_str(t.shape) +
                         ")");
    else if (info->shape != t.shape)
      problems.push_back(model.full_name(t.name) + ": expected shape " + shape_str(t.shape) +
                         ", file has " + info->shape_str());
  }
  // An FP8 file (Kijai's layout) may scale a linear's weight per tensor
  // (framepack_dit_common.h, load_dit_linear).
  const std::string scale_suffix = ".scale_weight";
  auto fp8_scale = [&](const std::string& n) {
    return n.size() > scale_suffix.size() &&
           n.compare(n.size() - scale_suffix.size(), scale_suffix.size(), scale_suffix) == 0 &&
           expected.count(n.substr(0, n.size() - scale_suffix.size()) + ".weight");
  };
  for (const std::string& n : model.names())
    if (!expected.count(n) && !fp8_scale(n))
      problems.push_back(model.full_name(n) + ": unexpected tensor");
  if (problems.empty()) return ok_status();
  std::string msg = "FramePack DiT checkpoint: " + std::to_string(problems.size()) +
                    " tensor(s) do not match the layout of the detected config:";
  constexpr size_t kShown = 40;
  for (size_t i = 0; i < problems.size() && i < kShown; ++i) msg += "\n  " + problems[i];
  if (problems.size() > kShown)
    msg += "\n  ... and " + std::to_string(problems.size() - kShown) + " more";
  return invalid_input(msg);
}

Expected<std::string> framepack_dit_weights_path(const std::string& folder) {
  namespace fs = std::filesystem;
  for (const char* name :
       {"diffusion_pytorch_model.safetensors.index.json", "diffusion_pytorch_model.safetensors"}) {
    const fs::path p = fs::path(folder) / name;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return not_found(folder +
                   ": no diffusion_pytorch_model.safetensors.index.json or "
                   "diffusion_pytorch_model.safetensors (a diffusers transformer folder)");
}

}  // namespace flick::hunyuan
