#include "models/hunyuan_vae/hunyuan_vae_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "runtime/file_util.h"

namespace flick {
namespace {

using Json = nlohmann::json;

Expected<double> number(const Json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || !j[key].is_number())
    return invalid_input(path + ": " + key + ": expected a number");
  const double v = j[key].get<double>();
  if (!(v > 0) || !std::isfinite(v))
    return invalid_input(path + ": " + key + ": expected a positive number, got " + j[key].dump());
  return v;
}

// A config.json value that the shapes also give must agree with them.
Status agree(const Json& j, const char* key, const Json& from_shapes, const std::string& path) {
  if (j.contains(key) && j[key] != from_shapes)
    return invalid_input(path + ": " + key + " is " + j[key].dump() +
                         " but the checkpoint's shapes give " + from_shapes.dump());
  return Status();
}

}  // namespace

Expected<HunyuanVaeConfig> HunyuanVaeConfig::detect(const WeightView& root,
                                                    const std::string& config_path) {
  FLICK_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, read_file(config_path, 1 << 20));
  const Json j = Json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return invalid_input(config_path + ": not a JSON object (a diffusers config.json)");
  HunyuanVaeConfig c;
  FLICK_ASSIGN_OR_RETURN(double groups, number(j, "norm_num_groups", config_path));
  FLICK_ASSIGN_OR_RETURN(double scale, number(j, "scaling_factor", config_path));
  FLICK_ASSIGN_OR_RETURN(double sr, number(j, "spatial_compression_ratio", config_path));
  FLICK_ASSIGN_OR_RETURN(double tr, number(j, "temporal_compression_ratio", config_path));
  c.norm_groups = static_cast<int64_t>(groups);
  c.scaling_factor = static_cast<float>(scale);
  c.spatial_ratio = static_cast<int64_t>(sr);
  c.temporal_ratio = static_cast<int64_t>(tr);
  if (j.contains("act_fn") && j["act_fn"] != "silu")
    return invalid_input(config_path + ": act_fn: expected \"silu\", got " + j["act_fn"].dump());
  for (const auto& [key, type] : {std::pair{"down_block_types", "HunyuanVideoDownBlock3D"},
                                  std::pair{"up_block_types", "HunyuanVideoUpBlock3D"}}) {
    if (!j.contains(key)) continue;
    for (const Json& t : j[key])
      if (t != type)
        return invalid_input(config_path + ": " + key + ": unsupported " + t.dump() +
                             " (expected \"" + type + "\")");
  }

  c.has_encoder = root.has("encoder.conv_in.conv.weight");
  c.has_decoder = root.has("decoder.conv_in.conv.weight");
  if (!c.has_encoder && !c.has_decoder)
    return invalid_input(root.full_name("encoder.conv_in.conv.weight") + " / " +
                         root.full_name("decoder.conv_in.conv.weight") +
                         ": no such tensor (neither an encoder nor a decoder)");
  // block_out_channels: the encoder's down blocks (resnets.0.conv2 output),
  // else the decoder's up blocks in reverse.
  const bool enc = c.has_encoder;
  const WeightView blocks = root.sub(enc ? "encoder.down_blocks" : "decoder.up_blocks");
  const int64_t levels = static_cast<int64_t>(blocks.children().size());
  if (levels == 0) return invalid_input(blocks.prefix() + "*: no blocks");
  c.block_out_channels.resize(static_cast<size_t>(levels));
  for (int64_t i = 0; i < levels; ++i) {
    FLICK_ASSIGN_OR_RETURN(const TensorInfo* w,
                           blocks.require(std::to_string(i) + ".resnets.0.conv2.conv.weight", 5));
    c.block_out_channels[static_cast<size_t>(enc ? i : levels - 1 - i)] = w->shape[0];
  }
  c.layers_per_block =
      static_cast<int64_t>(blocks.sub("0.resnets").children().size()) - (enc ? 0 : 1);
  const WeightView half = root.sub(enc ? "encoder" : "decoder");
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* in, half.require("conv_in.conv.weight", 5));
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* out, half.require("conv_out.conv.weight", 5));
  if (enc) {
    c.in_channels = in->shape[1];
    if (out->shape[0] % 2 != 0)
      return invalid_input(half.full_name("conv_out.conv.weight") +
                           ": expected 2 x latent_channels outputs (mean, logvar), file has " +
                           out->shape_str());
    c.latent_channels = out->shape[0] / 2;
    if (c.has_decoder) {
      FLICK_ASSIGN_OR_RETURN(const TensorInfo* dout,
                             root.require("decoder.conv_out.conv.weight", 5));
      c.out_channels = dout->shape[0];
    } else if (j.contains("out_channels")) {
      FLICK_ASSIGN_OR_RETURN(double oc, number(j, "out_channels", config_path));
      c.out_channels = static_cast<int64_t>(oc);
    }
  } else {
    c.latent_channels = in->shape[1];
    c.out_channels = out->shape[0];
    if (j.contains("in_channels")) {
      FLICK_ASSIGN_OR_RETURN(double ic, number(j, "in_channels", config_path));
      c.in_channels = static_cast<int64_t>(ic);
    }
  }
  c.mid_attention = half.has("mid_block.attentions.0.to_q.weight");
  FLICK_TRY(agree(j, "block_out_channels", Json(c.block_out_channels), config_path));
  FLICK_TRY(agree(j, "latent_channels", Json(c.latent_channels), config_path));
  FLICK_TRY(agree(j, "layers_per_block", Json(c.layers_per_block), config_path));
  FLICK_TRY(agree(j, "in_channels", Json(c.in_channels), config_path));
  FLICK_TRY(agree(j, "out_channels", Json(c.out_channels), config_path));
  FLICK_TRY(agree(j, "mid_block_add_attention", Json(c.mid_attention), config_path));
  return c;
}

}  // namespace flick
