#include "models/pipelines/mg2_synth.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "models/wan_vae/wan_vae_encoder.h"
#include "runtime/dtype.h"
#include "runtime/file_util.h"
#include "runtime/threads.h"
#include "runtime/weights/pth_writer.h"
#include "runtime/weights/weight_store.h"

namespace flick {
namespace {

// ---- layout ----

using Shape64 = std::vector<int64_t>;

class LayoutBuilder {
 public:
  LayoutBuilder(DType dtype, std::vector<LayoutTensor>& out) : dtype_(dtype), out_(out) {}
  void add(const std::string& name, Shape64 shape) {
    out_.push_back({name, dtype_, std::move(shape)});
  }
  // nn.Linear / nn.Conv: weight [out, in, k...] and optionally bias [out].
  void linear(const std::string& p, Shape64 weight, bool bias = true) {
    const int64_t n = weight[0];
    add(p + ".weight", std::move(weight));
    if (bias) add(p + ".bias", {n});
  }
  // nn.LayerNorm with affine parameters.
  void layer_norm(const std::string& p, int64_t n) {
    add(p + ".weight", {n});
    add(p + ".bias", {n});
  }

 private:
  DType dtype_;
  std::vector<LayoutTensor>& out_;
};

// wan_vae: the VAE's ResidualBlock (RMS_norm gamma, SiLU, conv, RMS_norm,
// SiLU, dropout, conv; 1x1x1 shortcut when the width changes).
void vae_residual(LayoutBuilder& b, const std::string& p, int64_t in, int64_t out) {
  b.add(p + ".residual.0.gamma", {in, 1, 1, 1});
  b.linear(p + ".residual.2", {out, in, 3, 3, 3});
  b.add(p + ".residual.3.gamma", {out, 1, 1, 1});
  b.linear(p + ".residual.6", {out, out, 3, 3, 3});
  if (in != out) b.linear(p + ".shortcut", {out, in, 1, 1, 1});
}

void vae_attention(LayoutBuilder& b, const std::string& p, int64_t c) {
  b.add(p + ".norm.gamma", {c, 1, 1});
  b.linear(p + ".to_qkv", {3 * c, c, 1, 1});
  b.linear(p + ".proj", {c, c, 1, 1});
}

void vae_middle(LayoutBuilder& b, const std::string& p, int64_t c) {
  vae_residual(b, p + ".0", c, c);
  vae_attention(b, p + ".1", c);
  vae_residual(b, p + ".2", c, c);
}

// Wan2.1 VAE: dim_mult (1, 2, 4, 4), 2 residual blocks per level, time
// downsampling in levels 1 and 2 (Encoder3d / Decoder3d of wanx_vae_src/vae.py).
constexpr int64_t kVaeMult[] = {1, 2, 4, 4};
constexpr bool kVaeTemporalDown[] = {false, true, true};
constexpr int kVaeResBlocks = 2;

void vae_encoder(LayoutBuilder& b, int64_t dim, int64_t z2) {
  std::vector<int64_t> dims = {dim};
  for (int64_t m : kVaeMult) dims.push_back(dim * m);
  b.linear("encoder.conv1", {dims[0], 3, 3, 3, 3});
  int idx = 0;
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    int64_t in = dims[i];
    const int64_t out = dims[i + 1];
    for (int r = 0; r < kVaeResBlocks; ++r) {
      vae_residual(b, "encoder.downsamples." + std::to_string(idx++), in, out);
      in = out;
    }
    if (i + 2 < dims.size()) {  // Resample(out, downsample2d / downsample3d)
      const std::string p = "encoder.downsamples." + std::to_string(idx++);
      b.linear(p + ".resample.1", {out, out, 3, 3});
      if (kVaeTemporalDown[i]) b.linear(p + ".time_conv", {out, out, 3, 1, 1});
    }
  }
  const int64_t top = dims.back();
  vae_middle(b, "encoder.middle", top);
  b.add("encoder.head.0.gamma", {top, 1, 1, 1});
  b.linear("encoder.head.2", {z2, top, 3, 3, 3});
}

void vae_decoder(LayoutBuilder& b, int64_t dim, int64_t z) {
  // dims = dim * [4, 4, 4, 2, 1]; levels 1-3 start from half the previous
  // width (the Resample before them halves the channels).
  std::vector<int64_t> dims = {dim * kVaeMult[3]};
  for (int i = 3; i >= 0; --i) dims.push_back(dim * kVaeMult[i]);
  b.linear("decoder.conv1", {dims[0], z, 3, 3, 3});
  vae_middle(b, "decoder.middle", dims[0]);
  int idx = 0;
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    int64_t in = i >= 1 ? dims[i] / 2 : dims[i];
    const int64_t out = dims[i + 1];
    for (int r = 0; r < kVaeResBlocks + 1; ++r) {
      vae_residual(b, "decoder.upsamples." + std::to_string(idx++), in, out);
      in = out;
    }
    if (i + 2 < dims.size()) {  // Resample(out, upsample3d / upsample2d)
      const std::string p = "decoder.upsamples." + std::to_string(idx++);
      b.linear(p + ".resample.1", {out / 2, out, 3, 3});
      if (kVaeTemporalDown[2 - i]) b.linear(p + ".time_conv", {out * 2, out, 3, 1, 1});
    }
  }
  const int64_t last = dims.back();
  b.add("decoder.head.0.gamma", {last, 1, 1, 1});
  b.linear("decoder.head.2", {3, last, 3, 3, 3});
}

// ---- values ----

uint64_t mix64(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

uint64_t tensor_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return mix64(h ^ mix64(seed + kGolden));
}

// g = (sum of four 16-bit uniforms - 131070) / sigma, sigma^2 = 4 (2^32 - 1)
// / 12 (mean and variance of the sum). A value is fma(centred sum, a, offset)
// in double with a = std / sigma, rounded once to fp32: the centring is exact
// and the fused multiply-add has one rounding however the compiler schedules
// it, so every build writes the same bits.
struct Affine {
  double a = 0, offset = 0;
};
Affine affine(const SynthScale& s) {
  return {s.std / std::sqrt(4.0 * (65536.0 * 65536.0 - 1.0) / 12.0), s.offset};
}

inline float value_at(uint64_t key, uint64_t i, Affine f) {
  const uint64_t z = mix64(key + (i + 1) * kGolden);
  const auto centred =
      static_cast<int32_t>((z & 0xffff) + ((z >> 16) & 0xffff) + ((z >> 32) & 0xffff) + (z >> 48)) -
      131070;
  return static_cast<float>(std::fma(static_cast<double>(centred), f.a, f.offset));
}

// Elements [first, first + n) as fp32; a tight loop the compiler vectorises.
void values(uint64_t key, uint64_t first, int64_t n, Affine f, float* out) {
  for (int64_t k = 0; k < n; ++k) out[k] = value_at(key, first + static_cast<uint64_t>(k), f);
}

// The bytes of one tensor, generated chunk by chunk on every thread.
std::function<void(uint64_t, std::span<uint8_t>)> value_filler(uint64_t seed,
                                                               const LayoutTensor& t) {
  const uint64_t key = tensor_key(seed, t.name);
  const Affine f = affine(mg2_synth_scale(t.name, t.shape));
  const DType dtype = t.dtype;
  return [key, f, dtype](uint64_t offset, std::span<uint8_t> out) {
    const size_t esize = dtype_size(dtype);
    const uint64_t first = offset / esize;
    const auto n = static_cast<int64_t>(out.size() / esize);
    uint8_t* dst = out.data();
    // Threads only for large chunks: a parallel region costs more than a
    // small tensor's values.
    parallel_for(
        n,
        [&](int64_t begin, int64_t end) {
          constexpr int64_t kBlock = 4096;
          float tmp[kBlock];
          for (int64_t k = begin; k < end; k += kBlock) {
            const int64_t m = std::min(kBlock, end - k);
            values(key, first + static_cast<uint64_t>(k), m, f, tmp);
            uint8_t* d = dst + static_cast<size_t>(k) * esize;
            if (dtype == DType::BF16) {
              uint16_t bits[kBlock];
              for (int64_t j = 0; j < m; ++j) bits[j] = f32_to_bf16(tmp[j]);
              std::memcpy(d, bits, static_cast<size_t>(m) * 2);
            } else {
              convert(DType::F32, tmp, dtype, d, m);
            }
          }
        },
        int64_t{1} << 20);
  };
}

std::vector<StreamedTensor> streamed(const std::vector<LayoutTensor>& tensors, uint64_t seed,
                                     SynthFill fill) {
  std::vector<StreamedTensor> out;
  out.reserve(tensors.size());
  for (const LayoutTensor& t : tensors)
    out.push_back(
        {t.name, t.dtype, t.shape, fill == SynthFill::kRandom ? value_filler(seed, t) : nullptr});
  return out;
}

// safetensors, streamed: the header (layout as write_safetensors: largest
// elements first, then by name; padded with spaces to 8 bytes), then each
// tensor chunk by chunk. All-zero tensors stay holes.
Status write_safetensors_streamed(const std::string& path,
                                  const std::vector<StreamedTensor>& tensors) {
  std::vector<const StreamedTensor*> order;
  for (const StreamedTensor& t : tensors) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(),
                   [](const StreamedTensor* a, const StreamedTensor* b) {
                     if (dtype_size(a->dtype) != dtype_size(b->dtype))
                       return dtype_size(a->dtype) > dtype_size(b->dtype);
                     return a->name < b->name;
                   });
  nlohmann::json header = nlohmann::json::object();
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
  for (const StreamedTensor* t : order) {
    const auto n = t->nbytes();
    if (!n) return invalid_input(path + ": tensor '" + t->name + "': invalid shape");
    if (header.contains(t->name))
      return invalid_input(path + ": tensor '" + t->name + "' appears twice");
    header[t->name] = {{"dtype", std::string(dtype_name(t->dtype))},
                       {"shape", t->shape},
                       {"data_offsets", {total, total + *n}}};
    offsets.push_back(total);
    total += *n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i)
    prefix[static_cast<size_t>(i)] = static_cast<char>(text.size() >> (8 * i));
  prefix += text;

  FLICK_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::create(path));
  FLICK_TRY(out.pwrite(prefix.data(), prefix.size(), 0));
  const uint64_t data_start = prefix.size();
  constexpr size_t kChunk = 8u << 20;
  HostBuffer buf;
  uint64_t end = data_start;  // end of the bytes written so far
  for (size_t k = 0; k < order.size(); ++k) {
    const StreamedTensor& t = *order[k];
    if (!t.fill) continue;
    const uint64_t size = *t.nbytes();
    if (buf.size() == 0 && size > 0) buf = HostBuffer(kChunk);
    for (uint64_t pos = 0; pos < size;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, size - pos));
      auto* p = static_cast<uint8_t*>(buf.data());
      t.fill(pos, {p, n});
      FLICK_TRY(out.pwrite(p, n, static_cast<int64_t>(data_start + offsets[k] + pos)));
      pos += n;
    }
    end = data_start + offsets[k] + size;
  }
  if (end < data_start + total) {  // trailing holes: the file still needs its full length
    const uint8_t zero = 0;
    FLICK_TRY(out.pwrite(&zero, 1, static_cast<int64_t>(data_start + total - 1)));
  }
  FLICK_TRY(out.commit());
  return fsync_dir(parent_dir(path));
}

// ---- detection and comparison ----

Expected<ClipTextDims> detect_text(const WeightView& root) {
  const WeightView t = root.sub("textual");
  ClipTextDims d;
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* tok, t.require("token_embedding.weight", 2));
  d.vocab = tok->shape[0];
  d.width = tok->shape[1];
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* pos, t.require("pos_embedding.weight", 2));
  d.positions = pos->shape[0];
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* type, t.require("type_embedding.weight", 2));
  d.types = type->shape[0];
  d.layers = static_cast<int64_t>(t.sub("blocks").children().size());
  if (d.layers > 0) {
    FLICK_ASSIGN_OR_RETURN(const TensorInfo* f, t.sub("blocks.0").require("ffn.0.weight", 2));
    d.ffn_dim = f->shape[0];
  }
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* head, root.sub("visual").require("head", 2));
  d.embed_dim = head->shape[1];
  return d;
}

std::string describe(const LayoutTensor& t) {
  return std::string(dtype_name(t.dtype)) + " " + shape_str(t.shape);
}

// One line per difference between a file and its expected layout.
std::vector<std::string> compare(const WeightStore& store, const std::vector<LayoutTensor>& want) {
  std::vector<std::string> problems;
  std::set<std::string> expected;
  for (const LayoutTensor& t : want) {
    expected.insert(t.name);
    const TensorInfo* info = store.info(t.name);
    if (info == nullptr) {
      problems.push_back(t.name + ": missing (expected " + describe(t) + ")");
    } else if (info->shape != t.shape) {
      problems.push_back(t.name + ": expected shape " + shape_str(t.shape) + ", file has " +
                         info->shape_str());
    } else if (!info->type->dtype || !dtype_is_float(*info->type->dtype) || info->type->bits < 16) {
      problems.push_back(t.name + ": dtype " + std::string(info->type->name) +
                         ", expected F32, BF16 or F16");
    }
  }
  for (const std::string& name : store.names())
    if (!expected.count(name))
      problems.push_back(name + ": not a tensor of the Matrix-Game 2.0 layout");
  return problems;
}

Status problems_status(const std::string& path, const std::vector<std::string>& problems) {
  if (problems.empty()) return ok_status();
  if (problems.size() == 1) return invalid_input(path + ": " + problems[0]);
  constexpr size_t kShown = 20;
  std::string msg = path + ": " + std::to_string(problems.size()) +
                    " tensors do not match the Matrix-Game 2.0 layout:";
  for (size_t i = 0; i < problems.size() && i < kShown; ++i) msg += "\n  " + problems[i];
  if (problems.size() > kShown)
    msg += "\n  ... and " + std::to_string(problems.size() - kShown) + " more";
  return invalid_input(msg);
}

Status with_file(const Status& s, const std::string& path) {
  return s.ok() ? s : Status(s.code(), path + ": " + s.message());
}

}  // namespace

Mg2Dims mg2_synth_dims(Mg2SynthSize size) {
  Mg2Dims d;
  const bool full = size == Mg2SynthSize::kFull;
  WanDitConfig& c = d.dit;
  c.dim = full ? 1536 : 256;
  c.ffn_dim = full ? 8960 : 512;
  c.head_dim = 128;
  c.heads = c.dim / c.head_dim;
  c.layers = full ? 30 : 4;
  c.in_dim = 36;
  c.out_dim = 16;
  c.freq_dim = 256;
  c.action_blocks = full ? 15 : 2;
  WanActionConfig& a = d.action;
  a.dim = c.dim;
  a.heads = full ? 16 : 2;
  a.attn_width = a.heads * 64;
  a.mouse_hidden = full ? 1024 : 128;
  a.mouse_dim = 2;
  a.keyboard_hidden = full ? 128 : 32;
  d.vae_dim = full ? 96 : 16;
  d.vae_z_dim = 16;
  ClipVisionConfig& v = d.clip;
  v.width = full ? 1280 : 160;
  v.head_dim = 80;
  v.heads = v.width / v.head_dim;
  v.layers = full ? 32 : 3;
  v.mlp_dim = 4 * v.width;
  v.patch = 14;
  v.grid = 16;
  v.image_size = v.grid * v.patch;
  c.clip_dim = v.width;
  ClipTextDims& t = d.text;
  t.vocab = full ? 250002 : 1000;
  t.width = full ? 1024 : 64;
  t.layers = full ? 24 : 1;
  t.ffn_dim = 4 * t.width;
  t.positions = 514;
  t.types = 1;
  t.embed_dim = full ? 1024 : 64;
  return d;
}

std::vector<LayoutTensor> mg2_dit_layout(const Mg2Dims& d, const Mg2ModeSpec& mode) {
  std::vector<LayoutTensor> out;
  LayoutBuilder b(DType::BF16, out);
  const WanDitConfig& c = d.dit;
  const WanActionConfig& a = d.action;
  const int64_t dim = c.dim, win = 12;  // the action window: 12 raw frames
  b.linear("model.patch_embedding", {dim, c.in_dim, 1, 2, 2});
  b.linear("model.time_embedding.0", {dim, c.freq_dim});
  b.linear("model.time_embedding.2", {dim, dim});
  b.linear("model.time_projection.1", {6 * dim, dim});
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "model.blocks." + std::to_string(i) + ".";
    b.add(p + "modulation", {1, 6, dim});
    if (i < c.action_blocks) {
      const std::string m = p + "action_model.";
      b.linear(m + "keyboard_embed.0", {a.keyboard_hidden, mode.keyboard_dim});
      b.linear(m + "keyboard_embed.2", {a.keyboard_hidden, a.keyboard_hidden});
      if (mode.mouse) {
        b.linear(m + "mouse_mlp.0", {a.mouse_hidden, dim + win * a.mouse_dim});
        b.linear(m + "mouse_mlp.2", {a.mouse_hidden, a.mouse_hidden});
        b.layer_norm(m + "mouse_mlp.3", a.mouse_hidden);
        b.linear(m + "t_qkv", {3 * a.attn_width, a.mouse_hidden}, false);
        b.add(m + "img_attn_q_norm.weight", {64});
        b.add(m + "img_attn_k_norm.weight", {64});
        b.linear(m + "proj_mouse", {dim, a.attn_width}, false);
      }
      b.add(m + "key_attn_q_norm.weight", {64});
      b.add(m + "key_attn_k_norm.weight", {64});
      b.linear(m + "mouse_attn_q", {a.attn_width, dim}, false);
      b.linear(m + "keyboard_attn_kv", {2 * a.attn_width, win * a.keyboard_hidden}, false);
      b.linear(m + "proj_keyboard", {dim, a.attn_width}, false);
    }
    for (const char* attn : {"self_attn.", "cross_attn."}) {
      for (const char* x : {"q", "k", "v", "o"}) b.linear(p + attn + x, {dim, dim});
      b.add(p + attn + "norm_q.weight", {dim});
      b.add(p + attn + "norm_k.weight", {dim});
      if (std::string_view(attn) == "self_attn.") b.layer_norm(p + "norm3", dim);
    }
    b.linear(p + "ffn.0", {c.ffn_dim, dim});
    b.linear(p + "ffn.2", {dim, c.ffn_dim});
  }
  b.add("model.head.modulation", {1, 2, dim});
  b.linear("model.head.head", {4 * c.out_dim, dim});
  b.layer_norm("model.img_emb.proj.0", c.clip_dim);
  b.linear("model.img_emb.proj.1", {c.clip_dim, c.clip_dim});
  b.linear("model.img_emb.proj.3", {dim, c.clip_dim});
  b.layer_norm("model.img_emb.proj.4", dim);
  return out;
}

std::vector<LayoutTensor> mg2_vae_layout(const Mg2Dims& d) {
  std::vector<LayoutTensor> out;
  LayoutBuilder b(DType::F32, out);
  vae_encoder(b, d.vae_dim, 2 * d.vae_z_dim);
  b.linear("conv1", {2 * d.vae_z_dim, 2 * d.vae_z_dim, 1, 1, 1});
  b.linear("conv2", {d.vae_z_dim, d.vae_z_dim, 1, 1, 1});
  vae_decoder(b, d.vae_dim, d.vae_z_dim);
  return out;
}

std::vector<LayoutTensor> mg2_clip_layout(const Mg2Dims& d) {
  std::vector<LayoutTensor> out;
  LayoutBuilder b(DType::F32, out);
  const ClipVisionConfig& v = d.clip;
  const ClipTextDims& t = d.text;
  const int64_t w = v.width;
  b.add("log_scale", {});
  // VisionTransformer: its own parameters first, then its submodules.
  b.add("visual.cls_embedding", {1, 1, w});
  b.add("visual.pos_embedding", {1, v.grid * v.grid + 1, w});
  b.add("visual.head", {w, t.embed_dim});
  b.add("visual.patch_embedding.weight", {w, 3, v.patch, v.patch});
  b.layer_norm("visual.pre_norm", w);
  for (int64_t i = 0; i < v.layers; ++i) {
    const std::string p = "visual.transformer." + std::to_string(i) + ".";
    b.layer_norm(p + "norm1", w);
    b.linear(p + "attn.to_qkv", {3 * w, w});
    b.linear(p + "attn.proj", {w, w});
    b.layer_norm(p + "norm2", w);
    b.linear(p + "mlp.0", {v.mlp_dim, w});
    b.linear(p + "mlp.2", {w, v.mlp_dim});
  }
  b.layer_norm("visual.post_norm", w);
  // XLMRobertaWithHead.
  b.add("textual.token_embedding.weight", {t.vocab, t.width});
  b.add("textual.type_embedding.weight", {t.types, t.width});
  b.add("textual.pos_embedding.weight", {t.positions, t.width});
  for (int64_t i = 0; i < t.layers; ++i) {
    const std::string p = "textual.blocks." + std::to_string(i) + ".";
    for (const char* x : {"q", "k", "v", "o"}) b.linear(p + "attn." + x, {t.width, t.width});
    b.layer_norm(p + "norm1", t.width);
    b.linear(p + "ffn.0", {t.ffn_dim, t.width});
    b.linear(p + "ffn.2", {t.width, t.ffn_dim});
    b.layer_norm(p + "norm2", t.width);
  }
  b.layer_norm("textual.norm", t.width);
  const int64_t mid = (t.width + t.embed_dim) / 2;
  b.linear("textual.head.0", {mid, t.width}, false);
  b.linear("textual.head.2", {t.embed_dim, mid}, false);
  return out;
}

SynthScale mg2_synth_scale(std::string_view name, const std::vector<int64_t>& shape) {
  auto ends = [&](std::string_view s) { return name.ends_with(s); };
  if (ends("log_scale")) return {std::log(1.0 / 0.07), 0.0};
  if (ends(".bias")) return {0.0, 0.02};
  if (ends("modulation"))
    return {0.0, 1.0 / std::sqrt(static_cast<double>(shape.empty() ? 1 : shape.back()))};
  if (ends(".gamma") || (shape.size() == 1 && ends(".weight"))) return {1.0, 0.1};
  if ((ends("embedding") || ends("embedding.weight") || ends("visual.head")) &&
      name.find("patch_embedding") == std::string_view::npos)
    return {0.0, 0.02};
  const int64_t fan_in = shape.size() > 1 ? std::accumulate(shape.begin() + 1, shape.end(),
                                                            int64_t{1}, std::multiplies<>())
                                          : 1;
  return {0.0, 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(fan_in, 1)))};
}

float mg2_synth_value(uint64_t seed, std::string_view name, const SynthScale& scale, uint64_t i) {
  return value_at(tensor_key(seed, name), i, affine(scale));
}

Status write_synth_checkpoint(const std::string& path, const std::vector<LayoutTensor>& tensors,
                              uint64_t seed, SynthFill fill) {
  const std::vector<StreamedTensor> st = streamed(tensors, seed, fill);
  if (std::string_view(path).ends_with(".safetensors")) return write_safetensors_streamed(path, st);
  return write_pth(path, st);
}

Status write_mg2_synth(const std::string& dir, const Mg2SynthOptions& options,
                       const SynthFileDone& on_file) {
  const Mg2Dims dims = mg2_synth_dims(options.size);
  struct File {
    std::string rel;
    std::vector<LayoutTensor> tensors;
  };
  std::vector<File> files;
  for (const Mg2ModeSpec& m : mg2_modes())
    if (std::find(options.modes.begin(), options.modes.end(), m.mode) != options.modes.end())
      files.push_back({std::string(m.checkpoint), mg2_dit_layout(dims, m)});
  files.push_back({std::string(kMg2VaeFile), mg2_vae_layout(dims)});
  files.push_back({std::string(kMg2ClipFile), mg2_clip_layout(dims)});

  for (const File& f : files) {
    const std::filesystem::path path = std::filesystem::path(dir) / f.rel;
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec) return io_error("cannot create " + path.parent_path().string() + ": " + ec.message());
    FLICK_TRY(write_synth_checkpoint(path.string(), f.tensors, options.seed, options.fill));
    if (on_file) {
      const auto size = std::filesystem::file_size(path, ec);
      on_file(path.string(), f.tensors.size(), ec ? 0 : size);
    }
  }
  return ok_status();
}

Status check_mg2_layout(const std::string& dir, const Mg2ModeSpec& mode, int64_t dit_head_dim,
                        int64_t clip_head_dim) {
  const std::filesystem::path root(dir);
  const std::string dit_path = (root / mode.checkpoint).string();
  const std::string vae_path = (root / kMg2VaeFile).string();
  const std::string clip_path = (root / kMg2ClipFile).string();
  FLICK_ASSIGN_OR_RETURN(WeightStore dit, WeightStore::open({dit_path}));
  FLICK_ASSIGN_OR_RETURN(WeightStore vae, WeightStore::open({vae_path}));
  FLICK_ASSIGN_OR_RETURN(WeightStore clip, WeightStore::open({clip_path}));

  Mg2Dims d;
  const WeightView model = dit.view("model.");
  auto dc = WanDitConfig::detect(model, dit_head_dim > 0 ? dit_head_dim : 128);
  FLICK_TRY(with_file(dc.status(), dit_path));
  d.dit = *dc;
  if (d.dit.action_blocks > 0) {
    auto ac = WanActionConfig::detect(model.sub("blocks.0.action_model"), d.dit.dim);
    FLICK_TRY(with_file(ac.status(), dit_path));
    d.action = *ac;
  }
  auto ec = WanVaeEncoderConfig::detect(vae.root());
  FLICK_TRY(with_file(ec.status(), vae_path));
  d.vae_dim = ec->dim;
  d.vae_z_dim = ec->z_dim;
  auto cc = ClipVisionConfig::detect(clip.view("visual"), clip_head_dim > 0 ? clip_head_dim : 80);
  FLICK_TRY(with_file(cc.status(), clip_path));
  d.clip = *cc;
  auto tc = detect_text(clip.root());
  FLICK_TRY(with_file(tc.status(), clip_path));
  d.text = *tc;

  // The mode's keyboard width and mouse branch as the checkpoint has them,
  // so a checkpoint of another mode shows as that, not as many tensors.
  Mg2ModeSpec as_stored = mode;
  if (d.dit.action_blocks > 0) {
    as_stored.keyboard_dim = static_cast<int>(d.action.keyboard_dim);
    as_stored.mouse = d.action.has_mouse();
    if (as_stored.keyboard_dim != mode.keyboard_dim || as_stored.mouse != mode.mouse)
      return invalid_input(dit_path + ": the action modules take " +
                           std::to_string(as_stored.keyboard_dim) + " keys " +
                           (as_stored.mouse ? "and" : "and no") + " mouse; mode " +
                           std::string(mode.name) + " has " + std::to_string(mode.keyboard_dim) +
                           " keys " + (mode.mouse ? "and" : "and no") + " mouse");
  }
  std::vector<Status> errors = {
      problems_status(dit_path, compare(dit, mg2_dit_layout(d, as_stored))),
      problems_status(vae_path, compare(vae, mg2_vae_layout(d))),
      problems_status(clip_path, compare(clip, mg2_clip_layout(d))),
  };
  std::string msg;
  for (const Status& s : errors)
    if (!s.ok()) msg += (msg.empty() ? "" : "\n") + s.message();
  return msg.empty() ? ok_status() : invalid_input(msg);
}

}  // namespace flick
