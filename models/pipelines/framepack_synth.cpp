#include "models/pipelines/framepack_synth.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "runtime/dtype.h"
#include "runtime/file_util.h"

namespace flick {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kParts[] = {"transformer", "text_encoder", "text_encoder_2", "tokenizer",
                                  "tokenizer_2", "vae",          "image_encoder",  "kijai_fp8"};
constexpr uint64_t kGB = 1000ull * 1000 * 1000;  // huggingface_hub's "5GB" is 5e9 bytes

// Appends tensors of one dtype.
class Layout {
 public:
  Layout(DType dtype, std::vector<LayoutTensor>& out) : dtype_(dtype), out_(out) {}
  void add(const std::string& name, std::vector<int64_t> shape) {
    out_.push_back({name, dtype_, std::move(shape)});
  }
  void linear(const std::string& name, int64_t n, int64_t k, bool bias = true) {
    add(name + ".weight", {n, k});
    if (bias) add(name + ".bias", {n});
  }
  void norm(const std::string& name, int64_t n) {  // LayerNorm / GroupNorm
    add(name + ".weight", {n});
    add(name + ".bias", {n});
  }

 private:
  DType dtype_;
  std::vector<LayoutTensor>& out_;
};

// A float config value as its shortest decimal (1e-05, not 9.9999997e-06).
double decimal(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.7g", static_cast<double>(v));
  return std::strtod(buf, nullptr);
}

// The encoder layers of transformers' CLIP and SigLIP (CLIPEncoderLayer,
// SiglipEncoderLayer: the same modules and order).
void encoder_layers(Layout& b, const std::string& prefix, int64_t layers, int64_t w,
                    int64_t intermediate) {
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = prefix + std::to_string(i) + ".";
    for (const char* n : {"k_proj", "v_proj", "q_proj", "out_proj"})
      b.linear(p + "self_attn." + n, w, w);
    b.norm(p + "layer_norm1", w);
    b.linear(p + "mlp.fc1", intermediate, w);
    b.linear(p + "mlp.fc2", w, intermediate);
    b.norm(p + "layer_norm2", w);
  }
}

uint64_t nbytes(const LayoutTensor& t) {
  return std::accumulate(t.shape.begin(), t.shape.end(), uint64_t{1},
                         [](uint64_t a, int64_t d) { return a * static_cast<uint64_t>(d); }) *
         dtype_size(t.dtype);
}

// ---- config.json of each component (the released files' keys) ----

Json transformer_config(const hunyuan::FramePackDitConfig& c) {
  return {{"_class_name", "HunyuanVideoTransformer3DModelPacked"},
          {"_diffusers_version", "0.33.1"},
          {"attention_head_dim", c.head_dim},
          {"guidance_embeds", true},
          {"has_clean_x_embedder", true},
          {"has_image_proj", true},
          {"image_proj_dim", c.image_dim},
          {"in_channels", c.in_channels},
          {"mlp_ratio", static_cast<double>(c.mlp_dim) / static_cast<double>(c.dim)},
          {"num_attention_heads", c.heads},
          {"num_layers", c.layers},
          {"num_refiner_layers", c.refiner_layers},
          {"num_single_layers", c.single_layers},
          {"out_channels", c.out_channels},
          {"patch_size", hunyuan::FramePackDitConfig::kPatch},
          {"patch_size_t", hunyuan::FramePackDitConfig::kPatchT},
          {"pooled_projection_dim", c.pooled_dim},
          {"qk_norm", "rms_norm"},
          {"rope_axes_dim", c.rope_axes},
          {"rope_theta", c.rope_theta},
          {"text_embed_dim", c.text_dim}};
}

Json llama_config(const llama::LlamaConfig& c, bool full) {
  return {{"architectures", {"LlamaModel"}},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          // LLaMA-3's ids; the tiny vocabulary's (tools/llama_goldens.py).
          {"bos_token_id", full ? 128000 : 1},
          {"eos_token_id", full ? 128001 : 2},
          {"head_dim", c.head_dim},
          {"hidden_act", "silu"},
          {"hidden_size", c.hidden},
          {"initializer_range", 0.02},
          {"intermediate_size", c.intermediate},
          {"max_position_embeddings", 8192},
          {"mlp_bias", false},
          {"model_type", "llama"},
          {"num_attention_heads", c.heads},
          {"num_hidden_layers", c.layers},
          {"num_key_value_heads", c.kv_heads},
          {"pretraining_tp", 1},
          {"rms_norm_eps", decimal(c.eps)},
          {"rope_scaling", nullptr},
          {"rope_theta", decimal(c.rope_theta)},
          {"tie_word_embeddings", false},
          {"torch_dtype", "float16"},
          {"use_cache", true},
          {"vocab_size", c.vocab}};
}

Json clip_config(const clip::ClipTextConfig& c) {
  return {{"architectures", {"CLIPTextModel"}},
          {"attention_dropout", 0.0},
          {"bos_token_id", 0},
          {"eos_token_id", c.eos_token_id},
          {"hidden_act", c.quick_gelu ? "quick_gelu" : "gelu"},
          {"hidden_size", c.width},
          {"initializer_factor", 1.0},
          {"initializer_range", 0.02},
          {"intermediate_size", c.intermediate},
          {"layer_norm_eps", decimal(c.eps)},
          {"max_position_embeddings", c.positions},
          {"model_type", "clip_text_model"},
          {"num_attention_heads", c.heads},
          {"num_hidden_layers", c.layers},
          {"pad_token_id", 1},
          {"projection_dim", c.width},
          {"torch_dtype", "float16"},
          {"vocab_size", c.vocab}};
}

Json siglip_config(const siglip::SiglipVisionConfig& c) {
  return {{"architectures", {"SiglipVisionModel"}},
          {"attention_dropout", 0.0},
          {"hidden_act", c.gelu_tanh ? "gelu_pytorch_tanh" : "gelu"},
          {"hidden_size", c.width},
          {"image_size", c.image_size},
          {"intermediate_size", c.intermediate},
          {"layer_norm_eps", decimal(c.eps)},
          {"model_type", "siglip_vision_model"},
          {"num_attention_heads", c.heads},
          {"num_channels", 3},
          {"num_hidden_layers", c.layers},
          {"patch_size", c.patch},
          {"torch_dtype", "float16"}};
}

Json vae_config(const HunyuanVaeConfig& c) {
  const size_t n = c.block_out_channels.size();
  return {{"_class_name", "AutoencoderKLHunyuanVideo"},
          {"_diffusers_version", "0.33.1"},
          {"act_fn", "silu"},
          {"block_out_channels", c.block_out_channels},
          {"down_block_types", std::vector<std::string>(n, "HunyuanVideoDownBlock3D")},
          {"in_channels", c.in_channels},
          {"latent_channels", c.latent_channels},
          {"layers_per_block", c.layers_per_block},
          {"mid_block_add_attention", c.mid_attention},
          {"norm_num_groups", c.norm_groups},
          {"out_channels", c.out_channels},
          {"scaling_factor", decimal(c.scaling_factor)},
          {"spatial_compression_ratio", c.spatial_ratio},
          {"temporal_compression_ratio", c.temporal_ratio},
          {"up_block_types", std::vector<std::string>(n, "HunyuanVideoUpBlock3D")}};
}

Status write_json(const fs::path& path, const Json& j) {
  const std::string text = j.dump(2) + "\n";
  return write_file_atomic(path.string(), text.data(), text.size());
}

Status make_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error("cannot create " + dir.string() + ": " + ec.message());
  return ok_status();
}

Status copy_into(const fs::path& src, const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(src, ec))
    return not_found(src.string() + ": missing (--tokenizers names a folder with " +
                     "llama_tokenizer/ and clip_tokenizer/, such as the repository's tests/data)");
  FLICK_TRY(make_dir(dir));
  fs::copy_file(src, dir / src.filename(), fs::copy_options::overwrite_existing, ec);
  if (ec)
    return io_error("cannot copy " + src.string() + " to " + dir.string() + ": " + ec.message());
  return ok_status();
}

// One checkpoint, sharded as the releases are, with its index when sharded.
Status write_sharded(const fs::path& dir, const std::string& stem,
                     const std::vector<LayoutTensor>& tensors, uint64_t max_bytes,
                     const FramePackSynthOptions& o, const SynthFileDone& on_file) {
  FLICK_TRY(make_dir(dir));
  const std::vector<SynthShard> shards = split_synth_shards(tensors, stem, max_bytes);
  for (const SynthShard& s : shards) {
    const fs::path path = dir / s.file;
    FLICK_TRY(write_synth_checkpoint(path.string(), s.tensors, o.seed, o.fill));
    if (on_file) {
      std::error_code ec;
      const auto size = fs::file_size(path, ec);
      on_file(path.string(), s.tensors.size(), ec ? 0 : size);
    }
  }
  if (shards.size() < 2) return ok_status();
  uint64_t total = 0;
  Json map = Json::object();
  for (const SynthShard& s : shards)
    for (const LayoutTensor& t : s.tensors) {
      map[t.name] = s.file;
      total += nbytes(t);
    }
  return write_json(dir / (stem + ".safetensors.index.json"),
                    {{"metadata", {{"total_size", total}}}, {"weight_map", map}});
}

}  // namespace

FramePackSynthDims framepack_synth_dims(FramePackSynthSize size) {
  FramePackSynthDims d;
  hunyuan::FramePackDitConfig& t = d.dit;
  llama::LlamaConfig& l = d.llama;
  clip::ClipTextConfig& c = d.clip;
  siglip::SiglipVisionConfig& s = d.siglip;
  t.in_channels = t.out_channels = 16;
  t.rope_theta = 256.0;
  l.rope_theta = 500000.f;
  l.eps = 1e-5f;
  c.positions = 77;
  c.quick_gelu = true;
  c.eps = 1e-5f;
  c.eos_token_id = 2;
  s.patch = 14;
  s.grid = 27;
  s.image_size = 384;
  s.gelu_tanh = true;
  s.eps = 1e-6f;
  if (size == FramePackSynthSize::kFull) {
    t.heads = 24, t.head_dim = 128, t.dim = 3072;
    t.layers = 20, t.single_layers = 40, t.refiner_layers = 2;
    t.mlp_dim = t.refiner_mlp_dim = 12288;
    t.text_dim = 4096, t.pooled_dim = 768, t.image_dim = 1152;
    t.rope_axes = {16, 56, 56};
    l.vocab = 128320, l.hidden = 4096, l.layers = 32, l.heads = 32, l.kv_heads = 8;
    l.head_dim = 128, l.intermediate = 14336;
    c.vocab = 49408, c.width = 768, c.layers = 12, c.heads = 12, c.head_dim = 64;
    c.intermediate = 3072;
    s.width = 1152, s.layers = 27, s.heads = 16, s.head_dim = 72, s.intermediate = 4304;
    d.vae.block_out_channels = {128, 256, 512, 512};
    d.vae.layers_per_block = 2;
    d.vae.norm_groups = 32;
  } else {  // tests/data/framepack_pipeline/weights/*/config.json
    t.heads = 2, t.head_dim = 16, t.dim = 32;
    t.layers = 1, t.single_layers = 1, t.refiner_layers = 1;
    t.mlp_dim = t.refiner_mlp_dim = 128;
    t.text_dim = 32, t.pooled_dim = 16, t.image_dim = 16;
    t.rope_axes = {4, 6, 6};
    l.vocab = 689, l.hidden = 32, l.layers = 4, l.heads = 4, l.kv_heads = 2;
    l.head_dim = 8, l.intermediate = 48;
    c.vocab = 3514, c.width = 16, c.layers = 2, c.heads = 2, c.head_dim = 8;
    c.intermediate = 32;
    s.width = 16, s.layers = 2, s.heads = 2, s.head_dim = 8, s.intermediate = 24;
    d.vae.block_out_channels = {8, 8, 8, 8};
    d.vae.layers_per_block = 1;
    d.vae.norm_groups = 2;
  }
  return d;
}

std::vector<LayoutTensor> framepack_llama_layout(const llama::LlamaConfig& c) {
  std::vector<LayoutTensor> out;
  Layout b(DType::F16, out);
  const int64_t h = c.hidden, q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
  b.add("embed_tokens.weight", {c.vocab, h});
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    b.linear(p + "self_attn.q_proj", q, h, false);
    b.linear(p + "self_attn.k_proj", kv, h, false);
    b.linear(p + "self_attn.v_proj", kv, h, false);
    b.linear(p + "self_attn.o_proj", h, q, false);
    b.linear(p + "mlp.gate_proj", c.intermediate, h, false);
    b.linear(p + "mlp.up_proj", c.intermediate, h, false);
    b.linear(p + "mlp.down_proj", h, c.intermediate, false);
    b.add(p + "input_layernorm.weight", {h});
    b.add(p + "post_attention_layernorm.weight", {h});
  }
  b.add("norm.weight", {h});
  return out;
}

std::vector<LayoutTensor> framepack_clip_text_layout(const clip::ClipTextConfig& c) {
  std::vector<LayoutTensor> out;
  Layout b(DType::F16, out);
  const int64_t w = c.width;
  b.add("text_model.embeddings.token_embedding.weight", {c.vocab, w});
  b.add("text_model.embeddings.position_embedding.weight", {c.positions, w});
  encoder_layers(b, "text_model.encoder.layers.", c.layers, w, c.intermediate);
  b.norm("text_model.final_layer_norm", w);
  return out;
}

std::vector<LayoutTensor> framepack_siglip_layout(const siglip::SiglipVisionConfig& c) {
  std::vector<LayoutTensor> out;
  Layout b(DType::F16, out);
  const int64_t w = c.width;
  b.add("vision_model.embeddings.patch_embedding.weight", {w, 3, c.patch, c.patch});
  b.add("vision_model.embeddings.patch_embedding.bias", {w});
  b.add("vision_model.embeddings.position_embedding.weight", {c.grid * c.grid, w});
  encoder_layers(b, "vision_model.encoder.layers.", c.layers, w, c.intermediate);
  b.norm("vision_model.post_layernorm", w);
  // The attention-pooling head (SiglipMultiheadAttentionPoolingHead): unused
  // by FramePack (last_hidden_state), part of the file.
  const std::string h = "vision_model.head.";
  b.add(h + "probe", {1, 1, w});
  b.add(h + "attention.in_proj_weight", {3 * w, w});
  b.add(h + "attention.in_proj_bias", {3 * w});
  b.linear(h + "attention.out_proj", w, w);
  b.norm(h + "layernorm", w);
  b.linear(h + "mlp.fc1", c.intermediate, w);
  b.linear(h + "mlp.fc2", w, c.intermediate);
  return out;
}

std::vector<LayoutTensor> framepack_vae_layout(const HunyuanVaeConfig& c) {
  std::vector<LayoutTensor> out;
  Layout b(DType::F16, out);
  auto conv = [&](const std::string& name, int64_t o, int64_t i, int64_t k) {
    b.add(name + ".conv.weight", {o, i, k, k, k});  // HunyuanVideoCausalConv3d wraps a Conv3d
    b.add(name + ".conv.bias", {o});
  };
  auto resnet = [&](const std::string& p, int64_t in, int64_t o) {
    b.norm(p + "norm1", in);
    conv(p + "conv1", o, in, 3);
    b.norm(p + "norm2", o);
    conv(p + "conv2", o, o, 3);
    if (in != o) conv(p + "conv_shortcut", o, in, 1);
  };
  auto mid = [&](const std::string& p, int64_t ch) {
    if (c.mid_attention) {
      const std::string a = p + "attentions.0.";
      b.norm(a + "group_norm", ch);
      for (const char* n : {"to_q", "to_k", "to_v", "to_out.0"}) b.linear(a + n, ch, ch);
    }
    resnet(p + "resnets.0.", ch, ch);
    resnet(p + "resnets.1.", ch, ch);
  };
  const std::vector<int64_t>& ch = c.block_out_channels;
  const auto n = static_cast<int64_t>(ch.size());
  conv("encoder.conv_in", ch[0], c.in_channels, 3);
  for (int64_t i = 0; i < n; ++i) {
    const std::string p = "encoder.down_blocks." + std::to_string(i) + ".";
    const int64_t o = ch[static_cast<size_t>(i)];
    for (int64_t j = 0; j < c.layers_per_block; ++j)
      resnet(p + "resnets." + std::to_string(j) + ".",
             j == 0 ? ch[static_cast<size_t>(std::max<int64_t>(i - 1, 0))] : o, o);
    if (i + 1 < n) conv(p + "downsamplers.0.conv", o, o, 3);
  }
  mid("encoder.mid_block.", ch.back());
  b.norm("encoder.conv_norm_out", ch.back());
  conv("encoder.conv_out", 2 * c.latent_channels, ch.back(), 3);
  conv("decoder.conv_in", ch.back(), c.latent_channels, 3);
  for (int64_t i = 0; i < n; ++i) {
    const std::string p = "decoder.up_blocks." + std::to_string(i) + ".";
    const int64_t o = ch[static_cast<size_t>(n - 1 - i)];
    const int64_t prev = ch[static_cast<size_t>(n - 1 - std::max<int64_t>(i - 1, 0))];
    for (int64_t j = 0; j <= c.layers_per_block; ++j)
      resnet(p + "resnets." + std::to_string(j) + ".", j == 0 ? prev : o, o);
    if (i + 1 < n) conv(p + "upsamplers.0.conv", o, o, 3);
  }
  mid("decoder.mid_block.", ch.back());
  b.norm("decoder.conv_norm_out", ch[0]);
  conv("decoder.conv_out", c.out_channels, ch[0], 3);
  // Plain Conv3d 1x1x1 (no causal wrapper).
  b.add("quant_conv.weight", {2 * c.latent_channels, 2 * c.latent_channels, 1, 1, 1});
  b.add("quant_conv.bias", {2 * c.latent_channels});
  b.add("post_quant_conv.weight", {c.latent_channels, c.latent_channels, 1, 1, 1});
  b.add("post_quant_conv.bias", {c.latent_channels});
  return out;
}

std::vector<LayoutTensor> framepack_transformer_layout(const hunyuan::FramePackDitConfig& c) {
  std::vector<LayoutTensor> out;
  for (hunyuan::DitTensorSpec& t : hunyuan::framepack_dit_layout(c))
    out.push_back({std::move(t.name), DType::BF16, std::move(t.shape)});
  return out;
}

std::vector<LayoutTensor> framepack_kijai_fp8_layout(const hunyuan::FramePackDitConfig& c) {
  std::vector<LayoutTensor> out = framepack_transformer_layout(c);
  for (LayoutTensor& t : out)
    if (t.name.find("norm") == std::string::npos && t.name.find("bias") == std::string::npos)
      t.dtype = DType::F8_E4M3;
  return out;
}

std::vector<SynthShard> split_synth_shards(const std::vector<LayoutTensor>& tensors,
                                           const std::string& stem, uint64_t max_bytes) {
  std::vector<SynthShard> shards(1);
  uint64_t size = 0;
  for (const LayoutTensor& t : tensors) {
    const uint64_t n = nbytes(t);
    if (!shards.back().tensors.empty() && size + n > max_bytes) {
      shards.emplace_back();
      size = 0;
    }
    shards.back().tensors.push_back(t);
    size += n;
  }
  if (shards.size() == 1) {
    shards[0].file = stem + ".safetensors";
    return shards;
  }
  char buf[64];
  for (size_t i = 0; i < shards.size(); ++i) {
    std::snprintf(buf, sizeof buf, "-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    shards[i].file = stem + buf;
  }
  return shards;
}

std::string framepack_synth_part_names() {
  std::string s;
  for (const char* p : kParts) s += (s.empty() ? "" : ", ") + std::string(p);
  return s;
}

Status write_framepack_synth(const std::string& dir, const FramePackSynthOptions& options,
                             const SynthFileDone& on_file) {
  std::set<std::string> parts(options.parts.begin(), options.parts.end());
  for (const std::string& p : parts)
    if (std::find(std::begin(kParts), std::end(kParts), p) == std::end(kParts))
      return invalid_input("unknown FramePack part '" + p + "' (" + framepack_synth_part_names() +
                           ")");
  if (parts.empty())
    for (const char* p : kParts)
      if (std::string_view(p) != "kijai_fp8") parts.insert(p);
  FramePackSynthDims d = framepack_synth_dims(options.size);
  if (options.dit_layers >= 0) d.dit.layers = options.dit_layers;
  if (options.dit_single_layers >= 0) d.dit.single_layers = options.dit_single_layers;
  if (d.dit.layers + d.dit.single_layers < 1)
    return invalid_input("the transformer needs at least one double or single block");
  const bool full = options.size == FramePackSynthSize::kFull;
  const fs::path root(dir);
  FLICK_TRY(make_dir(root));

  if (parts.count("transformer")) {
    FLICK_TRY(write_sharded(root / "transformer", "diffusion_pytorch_model",
                            framepack_transformer_layout(d.dit), 10 * kGB, options, on_file));
    FLICK_TRY(write_json(root / "transformer/config.json", transformer_config(d.dit)));
  }
  if (parts.count("kijai_fp8"))
    FLICK_TRY(write_sharded(root, "FramePackI2V_HY_fp8_e4m3fn", framepack_kijai_fp8_layout(d.dit),
                            UINT64_MAX, options, on_file));
  if (parts.count("text_encoder")) {
    FLICK_TRY(write_sharded(root / "text_encoder", "model", framepack_llama_layout(d.llama),
                            5 * kGB, options, on_file));
    FLICK_TRY(write_json(root / "text_encoder/config.json", llama_config(d.llama, full)));
  }
  if (parts.count("text_encoder_2")) {
    FLICK_TRY(write_sharded(root / "text_encoder_2", "model", framepack_clip_text_layout(d.clip),
                            UINT64_MAX, options, on_file));
    FLICK_TRY(write_json(root / "text_encoder_2/config.json", clip_config(d.clip)));
  }
  if (parts.count("vae")) {
    FLICK_TRY(write_sharded(root / "vae", "diffusion_pytorch_model", framepack_vae_layout(d.vae),
                            UINT64_MAX, options, on_file));
    FLICK_TRY(write_json(root / "vae/config.json", vae_config(d.vae)));
  }
  if (parts.count("image_encoder")) {
    FLICK_TRY(write_sharded(root / "image_encoder", "model", framepack_siglip_layout(d.siglip),
                            UINT64_MAX, options, on_file));
    FLICK_TRY(write_json(root / "image_encoder/config.json", siglip_config(d.siglip)));
  }
  if (parts.count("tokenizer") || parts.count("tokenizer_2")) {
    if (options.tokenizers.empty())
      return invalid_input(
          "the tokenizer parts need a tokenizer folder (--tokenizers: a folder with "
          "llama_tokenizer/ and clip_tokenizer/, such as the repository's tests/data); or "
          "leave tokenizer and tokenizer_2 out of the parts");
    const fs::path src(options.tokenizers);
    if (parts.count("tokenizer"))
      FLICK_TRY(copy_into(src / "llama_tokenizer/tokenizer.json", root / "tokenizer"));
    if (parts.count("tokenizer_2")) {
      FLICK_TRY(copy_into(src / "clip_tokenizer/vocab.json", root / "tokenizer_2"));
      FLICK_TRY(copy_into(src / "clip_tokenizer/merges.txt", root / "tokenizer_2"));
    }
  }
  return ok_status();
}

}  // namespace flick
