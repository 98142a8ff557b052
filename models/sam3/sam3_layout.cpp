#include "models/sam3/sam3_layout.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

namespace flick {
namespace {

// Appends tensors in the reference modules' registration order.
class LayoutBuilder {
 public:
  explicit LayoutBuilder(Sam3Layout& out) : out_(out) {}

  void f32(const std::string& name, std::vector<int64_t> shape) {
    out_.push_back({name, "F32", std::move(shape)});
  }
  // nn.Linear / nn.Conv2d.
  void linear(const std::string& p, int64_t out, int64_t in, bool bias = true) {
    f32(p + "weight", {out, in});
    if (bias) f32(p + "bias", {out});
  }
  void conv(const std::string& p, int64_t out, int64_t in_per_group, int64_t kh, int64_t kw,
            bool bias = true) {
    f32(p + "weight", {out, in_per_group, kh, kw});
    if (bias) f32(p + "bias", {out});
  }
  // nn.ConvTranspose2d: weight [in, out, k, k], bias [out].
  void conv_transpose(const std::string& p, int64_t in, int64_t out, int64_t k) {
    f32(p + "weight", {in, out, k, k});
    f32(p + "bias", {out});
  }
  void norm(const std::string& p, int64_t c) {  // LayerNorm / GroupNorm affine
    f32(p + "weight", {c});
    f32(p + "bias", {c});
  }
  void batch_norm(const std::string& p, int64_t c) {
    norm(p, c);
    f32(p + "running_mean", {c});
    f32(p + "running_var", {c});
    out_.push_back({p + "num_batches_tracked", "I64", {}});
  }
  // RepViT Conv2d_BN: conv without bias ("c.") + BatchNorm ("bn.").
  void conv_bn(const std::string& p, int64_t out, int64_t in_per_group, int64_t k) {
    conv(p + "c.", out, in_per_group, k, k, false);
    batch_norm(p + "bn.", out);
  }
  // nn.MultiheadAttention (packed in_proj).
  void mha(const std::string& p, int64_t d) {
    f32(p + "in_proj_weight", {3 * d, d});
    f32(p + "in_proj_bias", {3 * d});
    linear(p + "out_proj.", d, d);
  }
  // sam3 model_misc.MLP: layers.i = Linear(dims[i] -> dims[i+1]).
  void mlp(const std::string& p, const std::vector<int64_t>& dims) {
    for (size_t i = 0; i + 1 < dims.size(); ++i)
      linear(p + "layers." + std::to_string(i) + ".", dims[i + 1], dims[i]);
  }

 private:
  Sam3Layout& out_;
};

// _make_divisible(v, 8) of repvit.py and timm's make_divisible(v, 8, round_limit=0).
int64_t make_divisible8(double v, double round_limit) {
  int64_t nv = std::max<int64_t>(8, static_cast<int64_t>(v + 4.0) / 8 * 8);
  if (static_cast<double>(nv) < round_limit * v) nv += 8;
  return nv;
}

struct Variant {
  const char* name;
  // The cfg rows of repvit.py repvit_m*() ([3, 2, c, use_se, use_hs, s]):
  // channels, "+" where use_se; a row is stride 2 where the channels change.
  // The rows commented out in repvit_m2_3 are not built and not listed.
  const char* rows;
};

constexpr Variant kVariants[] = {
    {"m0_9",
     "48+ 48 48 96 96+ 96 96 192 192+ 192 192+ 192 192+ 192 192+ 192 192+ 192 192+ 192 192+ 192 "
     "192 384 384+ 384"},
    {"m1_1",
     "64+ 64 64 128 128+ 128 128 256 256+ 256 256+ 256 256+ 256 256+ 256 256+ 256 256+ 256 256 "
     "512 512+ 512"},
    {"m2_3",
     "80+ 80 80+ 80 80+ 80 80 160 160+ 160 160+ 160 160+ 160 160 320 320+ 320 320+ 320 320+ 320 "
     "320+ 320 320+ 320 320+ 320 320+ 320 320+ 320 320+ 320 320+ 320 320+ 320 320+ 320 320+ 320 "
     "320+ 320 320+ 320 320+ 320 320+ 320 320 640 640+ 640"},
};

RepVitConfig from_rows(const Variant& v) {
  std::vector<std::pair<int64_t, bool>> rows;
  for (const char* p = v.rows; *p;) {
    char* end = nullptr;
    const int64_t ch = std::strtoll(p, &end, 10);
    p = end;
    const bool se = *p == '+';
    if (se) ++p;
    while (*p == ' ') ++p;
    rows.emplace_back(ch, se);
  }
  RepVitConfig c;
  c.name = v.name;
  c.stem = make_divisible8(static_cast<double>(rows.front().first), 0.9);  // RepViT.__init__
  c.embed_dim = 1024;
  int64_t in = c.stem;
  for (const auto& [ch, se] : rows) {
    RepVitBlockConfig b;
    b.in = in;
    b.out = make_divisible8(static_cast<double>(ch), 0.9);
    b.stride = (b.out == in) ? 1 : 2;
    // timm SEModule(in, rd_ratio=0.25): make_divisible(in / 4, 8, round_limit=0).
    b.se = se ? make_divisible8(static_cast<double>(in) * 0.25, 0.0) : 0;
    c.blocks.push_back(b);
    in = b.out;
  }
  return c;
}

// The shape of `name` under `v`, or an error naming it.
Expected<std::vector<int64_t>> shape_of(const WeightView& v, const std::string& name, int rank) {
  const TensorInfo* info = v.info(name);
  if (!info) return not_found(v.full_name(name) + ": missing");
  if (rank >= 0 && static_cast<int>(info->shape.size()) != rank)
    return invalid_input(v.full_name(name) + ": expected a " + std::to_string(rank) +
                         "-d tensor, file has " + shape_str(info->shape));
  return info->shape;
}

}  // namespace

// ---------------------------------------------------------------- RepViT

Expected<RepVitConfig> RepVitConfig::named(std::string_view name) {
  std::string n(name);
  for (char& ch : n)
    if (ch == '.') ch = '_';
  for (const Variant& v : kVariants)
    if (n == v.name) return from_rows(v);
  return invalid_input("unknown RepViT variant '" + std::string(name) +
                       "' (known: m0_9, m1_1, m2_3)");
}

Expected<RepVitConfig> RepVitConfig::detect(const WeightView& model) {
  const WeightView f = model.sub("backbone.model.features");
  RepVitConfig c;
  FLICK_ASSIGN_OR_RETURN(auto s0, shape_of(f, "0.0.c.weight", 4));
  FLICK_ASSIGN_OR_RETURN(auto s2, shape_of(f, "0.2.c.weight", 4));
  if (s0[1] != 3 || s0[2] != 3 || s2[1] != s0[0] || s2[2] != 3)
    return invalid_input(f.full_name("0.2.c.weight") + ": stem shapes " + shape_str(s0) + ", " +
                         shape_str(s2) + " are not conv3x3 3->c/2->c");
  c.stem = s2[0];
  int64_t in = c.stem;
  for (int i = 1;; ++i) {
    const WeightView b = f.sub(std::to_string(i));
    if (b.names().empty()) break;
    RepVitBlockConfig bc;
    bc.in = in;
    if (b.has("token_mixer.0.conv.c.weight")) {  // RepVGGDW: stride 1
      bc.stride = 1;
      bc.out = in;
    } else {
      FLICK_ASSIGN_OR_RETURN(auto pw, shape_of(b, "token_mixer.2.c.weight", 4));
      bc.stride = 2;
      bc.out = pw[0];
    }
    if (b.has("token_mixer.1.fc1.weight")) {
      FLICK_ASSIGN_OR_RETURN(auto se, shape_of(b, "token_mixer.1.fc1.weight", 4));
      bc.se = se[0];
    }
    c.blocks.push_back(bc);
    in = bc.out;
  }
  if (c.blocks.empty()) return not_found(f.full_name("1") + ".*: no RepViT blocks");
  FLICK_ASSIGN_OR_RETURN(auto h0, shape_of(model, "head.0.weight", 4));
  c.embed_dim = h0[0];
  c.name = "custom";
  for (const Variant& v : kVariants) {
    RepVitConfig k = from_rows(v);
    bool same = k.stem == c.stem && k.blocks.size() == c.blocks.size();
    for (size_t i = 0; same && i < k.blocks.size(); ++i)
      same = k.blocks[i].in == c.blocks[i].in && k.blocks[i].out == c.blocks[i].out &&
             k.blocks[i].stride == c.blocks[i].stride && k.blocks[i].se == c.blocks[i].se;
    if (same) c.name = v.name;
  }
  return c;
}

Sam3Layout RepVitConfig::layout(const std::string& prefix) const {
  Sam3Layout out;
  LayoutBuilder l(out);
  const std::string f = prefix + "backbone.model.features.";
  l.conv_bn(f + "0.0.", stem / 2, 3, 3);
  l.conv_bn(f + "0.2.", stem, stem / 2, 3);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const RepVitBlockConfig& b = blocks[i];
    const std::string p = f + std::to_string(i + 1) + ".";
    if (b.stride == 1) {
      l.conv_bn(p + "token_mixer.0.conv.", b.in, 1, 3);
      l.conv(p + "token_mixer.0.conv1.", b.in, 1, 1, 1);
      l.batch_norm(p + "token_mixer.0.bn.", b.in);
    } else {
      l.conv_bn(p + "token_mixer.0.", b.in, 1, 3);
    }
    if (b.se) {
      l.conv(p + "token_mixer.1.fc1.", b.se, b.in, 1, 1);
      l.conv(p + "token_mixer.1.fc2.", b.in, b.se, 1, 1);
    }
    if (b.stride == 2) l.conv_bn(p + "token_mixer.2.", b.out, b.in, 1);
    l.conv_bn(p + "channel_mixer.m.0.", 2 * b.out, b.out, 1);
    l.conv_bn(p + "channel_mixer.m.2.", b.out, 2 * b.out, 1);
  }
  l.conv(prefix + "head.0.", embed_dim, out_channels(), 1, 1, false);
  l.batch_norm(prefix + "head.1.", embed_dim);
  l.conv(prefix + "head.3.", embed_dim, embed_dim, 3, 3);
  return out;
}

// ---------------------------------------------------------------- MobileCLIP

Expected<MobileClipTextConfig> MobileClipTextConfig::named(std::string_view name) {
  // model_builder.py _create_student_text_encoder.
  MobileClipTextConfig c;
  c.vocab = 49408;
  c.dim = 512;
  c.context = 77;
  c.heads = 8;
  c.ffn = 2048;
  c.out_dim = 256;
  if (name == "s0" || name == "S0") {
    c.name = "s0";
    c.layers = 4;
    c.repmixer_ends = true;
  } else if (name == "s1" || name == "S1") {
    c.name = "s1";
    c.layers = 12;
  } else {
    return invalid_input("unknown MobileCLIP text variant '" + std::string(name) +
                         "' (known: s0, s1)");
  }
  return c;
}

Expected<MobileClipTextConfig> MobileClipTextConfig::detect(const WeightView& text) {
  MobileClipTextConfig c;
  const WeightView e = text.sub("encoder");
  FLICK_ASSIGN_OR_RETURN(auto emb, shape_of(e, "embedding_layer.weight", 2));
  c.vocab = emb[0];
  c.dim = emb[1];
  FLICK_ASSIGN_OR_RETURN(auto pos, shape_of(e, "positional_embedding.pos_embed.pos_embed", 4));
  if (pos[0] != 1 || pos[1] != 1 || pos[3] != c.dim)
    return invalid_input(e.full_name("positional_embedding.pos_embed.pos_embed") +
                         ": expected [1, 1, context, " + std::to_string(c.dim) + "], file has " +
                         shape_str(pos));
  c.context = pos[2];
  FLICK_ASSIGN_OR_RETURN(auto proj, shape_of(text, "projector.weight", 2));
  c.out_dim = proj[0];
  const WeightView t = e.sub("transformer");
  const std::vector<std::string> kids = t.children();
  if (kids.empty()) return not_found(t.full_name("0") + ".*: no text transformer layers");
  c.repmixer_ends = t.has("0.token_mixer.mixer.rbr_conv.0.conv.weight");
  const int64_t n = static_cast<int64_t>(kids.size());
  c.layers = c.repmixer_ends ? n - 2 : n;
  c.name = c.repmixer_ends ? "s0" : "s1";
  const std::string first = c.repmixer_ends ? "1" : "0";
  FLICK_ASSIGN_OR_RETURN(auto ffn, shape_of(t, first + ".pre_norm_ffn.1.weight", 2));
  c.ffn = ffn[0];
  if (c.repmixer_ends) {
    FLICK_ASSIGN_OR_RETURN(auto k, shape_of(t, "0.token_mixer.mixer.rbr_conv.0.conv.weight", 4));
    c.repmixer_kernel = k[3];
  }
  // No shape carries the head count: _create_student_text_encoder uses 8
  // heads at width 512 and 12 at width 768 (head size 64).
  if (c.dim % 64 != 0)
    return invalid_input(e.full_name("embedding_layer.weight") + ": width " +
                         std::to_string(c.dim) + " is not a multiple of the head size 64");
  c.heads = c.dim / 64;
  return c;
}

Sam3Layout MobileClipTextConfig::layout(const std::string& prefix) const {
  Sam3Layout out;
  LayoutBuilder l(out);
  const std::string e = prefix + "encoder.";
  l.f32(e + "projection_layer", {dim, dim});  // unused on the SAM3 path
  l.f32(e + "embedding_layer.weight", {vocab, dim});
  l.f32(e + "positional_embedding.pos_embed.pos_embed", {1, 1, context, dim});
  auto repmixer = [&](const std::string& p) {
    l.f32(p + "layer_scale", {dim, 1, 1});
    l.f32(p + "token_mixer.layer_scale", {dim, 1, 1});
    l.batch_norm(p + "token_mixer.norm.rbr_skip.", dim);
    l.batch_norm(p + "token_mixer.mixer.rbr_skip.", dim);
    l.conv(p + "token_mixer.mixer.rbr_conv.0.conv.", dim, 1, 1, repmixer_kernel, false);
    l.batch_norm(p + "token_mixer.mixer.rbr_conv.0.bn.", dim);
    l.conv(p + "convffn.conv.conv.", dim, 1, 1, repmixer_kernel, false);
    l.batch_norm(p + "convffn.conv.bn.", dim);
    l.conv(p + "convffn.fc1.", ffn, dim, 1, 1);
    l.conv(p + "convffn.fc2.", dim, ffn, 1, 1);
  };
  int idx = 0;
  if (repmixer_ends) repmixer(e + "transformer." + std::to_string(idx++) + ".");
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = e + "transformer." + std::to_string(idx++) + ".";
    l.norm(p + "pre_norm_mha.0.", dim);
    l.linear(p + "pre_norm_mha.1.qkv_proj.", 3 * dim, dim);
    l.linear(p + "pre_norm_mha.1.out_proj.", dim, dim);
    l.norm(p + "pre_norm_ffn.0.", dim);
    l.linear(p + "pre_norm_ffn.1.", ffn, dim);
    l.linear(p + "pre_norm_ffn.4.", dim, ffn);
  }
  if (repmixer_ends) repmixer(e + "transformer." + std::to_string(idx++) + ".");
  l.norm(e + "final_layer_norm.", dim);
  l.linear(prefix + "projector.", out_dim, dim);
  return out;
}

// ---------------------------------------------------------------- SAM3 head

Expected<Sam3HeadConfig> Sam3HeadConfig::detect(const WeightView& detector) {
  Sam3HeadConfig c;
  FLICK_ASSIGN_OR_RETURN(auto q, shape_of(detector, "transformer.decoder.query_embed.weight", 2));
  c.queries = q[0];
  c.d_model = q[1];
  FLICK_ASSIGN_OR_RETURN(auto f,
                         shape_of(detector, "transformer.encoder.layers.0.linear1.weight", 2));
  c.ffn = f[0];
  FLICK_ASSIGN_OR_RETURN(auto t,
                         shape_of(detector, "backbone.vision_backbone.convs.2.conv_1x1.weight", 4));
  c.trunk_dim = t[1];
  c.encoder_layers =
      static_cast<int64_t>(detector.sub("transformer.encoder.layers").children().size());
  c.decoder_layers =
      static_cast<int64_t>(detector.sub("transformer.decoder.layers").children().size());
  c.geometry_layers =
      static_cast<int64_t>(detector.sub("geometry_encoder.encode").children().size());
  if (c.encoder_layers == 0 || c.decoder_layers == 0 || c.geometry_layers == 0)
    return not_found(detector.full_name("transformer") +
                     ": no fusion encoder, decoder or geometry encoder layers");
  return c;
}

Sam3Layout Sam3HeadConfig::neck_layout(const std::string& prefix) const {
  // necks.py Sam3DualViTDetNeck, scale_factors [4, 2, 1, 0.5]: level 3 (0.5x)
  // holds a max-pool (no tensors) before its 1x1 and 3x3.
  Sam3Layout out;
  LayoutBuilder l(out);
  const int64_t d = d_model, t = trunk_dim;
  const std::string p = prefix + "backbone.vision_backbone.convs.";
  l.conv_transpose(p + "0.dconv_2x2_0.", t, t / 2, 2);
  l.conv_transpose(p + "0.dconv_2x2_1.", t / 2, t / 4, 2);
  l.conv(p + "0.conv_1x1.", d, t / 4, 1, 1);
  l.conv(p + "0.conv_3x3.", d, d, 3, 3);
  l.conv_transpose(p + "1.dconv_2x2.", t, t / 2, 2);
  l.conv(p + "1.conv_1x1.", d, t / 2, 1, 1);
  l.conv(p + "1.conv_3x3.", d, d, 3, 3);
  for (const char* lvl : {"2.", "3."}) {
    l.conv(p + lvl + "conv_1x1.", d, t, 1, 1);
    l.conv(p + lvl + "conv_3x3.", d, d, 3, 3);
  }
  return out;
}

Sam3Layout Sam3HeadConfig::head_layout(const std::string& prefix) const {
  Sam3Layout out;
  LayoutBuilder l(out);
  const int64_t d = d_model;
  auto encoder_layer = [&](const std::string& p) {  // encoder.py TransformerEncoderLayer
    l.mha(p + "self_attn.", d);
    l.mha(p + "cross_attn_image.", d);
    l.linear(p + "linear1.", ffn, d);
    l.linear(p + "linear2.", d, ffn);
    l.norm(p + "norm1.", d);
    l.norm(p + "norm2.", d);
    l.norm(p + "norm3.", d);
  };
  // geometry_encoders.py SequenceGeometryEncoder
  const std::string g = prefix + "geometry_encoder.";
  l.f32(g + "label_embed.weight", {2, d});
  l.f32(g + "cls_embed.weight", {1, d});
  l.linear(g + "points_direct_project.", d, 2);
  l.linear(g + "points_pool_project.", d, d);
  l.linear(g + "points_pos_enc_project.", d, d);
  l.linear(g + "boxes_direct_project.", d, 4);
  l.conv(g + "boxes_pool_project.", d, d, 7, 7);
  l.linear(g + "boxes_pos_enc_project.", d, d + 2);
  l.linear(g + "final_proj.", d, d);
  l.norm(g + "norm.", d);
  l.norm(g + "img_pre_norm.", d);
  for (int64_t i = 0; i < geometry_layers; ++i)
    encoder_layer(g + "encode." + std::to_string(i) + ".");
  l.norm(g + "encode_norm.", d);
  // encoder.py TransformerEncoderFusion
  for (int64_t i = 0; i < encoder_layers; ++i)
    encoder_layer(prefix + "transformer.encoder.layers." + std::to_string(i) + ".");
  // decoder.py TransformerDecoder
  const std::string dec = prefix + "transformer.decoder.";
  for (int64_t i = 0; i < decoder_layers; ++i) {
    const std::string p = dec + "layers." + std::to_string(i) + ".";
    l.mha(p + "cross_attn.", d);
    l.norm(p + "norm1.", d);
    l.mha(p + "ca_text.", d);
    l.norm(p + "catext_norm.", d);
    l.mha(p + "self_attn.", d);
    l.norm(p + "norm2.", d);
    l.linear(p + "linear1.", ffn, d);
    l.linear(p + "linear2.", d, ffn);
    l.norm(p + "norm3.", d);
  }
  l.norm(dec + "norm.", d);
  l.mlp(dec + "bbox_embed.", {d, d, d, 4});
  l.f32(dec + "query_embed.weight", {queries, d});
  l.f32(dec + "reference_points.weight", {queries, 4});
  const int64_t heads = 8;  // boxRPB emits one bias per attention head
  l.mlp(dec + "boxRPB_embed_x.", {2, d, heads});
  l.mlp(dec + "boxRPB_embed_y.", {2, d, heads});
  l.f32(dec + "presence_token.weight", {1, d});
  l.mlp(dec + "presence_token_head.", {d, d, d, 1});
  l.norm(dec + "presence_token_out_norm.", d);
  l.mlp(dec + "ref_point_head.", {2 * d, d, d});
  // maskformer_segmentation.py UniversalSegmentationHead
  const std::string s = prefix + "segmentation_head.";
  for (int i = 0; i < 3; ++i)
    l.conv(s + "pixel_decoder.conv_layers." + std::to_string(i) + ".", d, d, 3, 3);
  for (int i = 0; i < 3; ++i) l.norm(s + "pixel_decoder.norms." + std::to_string(i) + ".", d);
  l.mlp(s + "mask_predictor.mask_embed.", {d, d, d, d});
  l.mha(s + "cross_attend_prompt.", d);
  l.norm(s + "cross_attn_norm.", d);
  l.conv(s + "semantic_seg_head.", 1, d, 1, 1);
  l.conv(s + "instance_seg_head.", d, d, 1, 1);
  // model_misc.py DotProductScoring
  const std::string sc = prefix + "dot_prod_scoring.";
  l.mlp(sc + "prompt_mlp.", {d, ffn, d});
  l.norm(sc + "prompt_mlp.out_norm.", d);
  l.linear(sc + "prompt_proj.", d, d);
  l.linear(sc + "hs_proj.", d, d);
  return out;
}

Sam3Layout sam3_image_layout(const RepVitConfig& trunk, const MobileClipTextConfig& text,
                             const Sam3HeadConfig& head, const std::string& prefix) {
  Sam3Layout out = trunk.layout(prefix + "backbone.vision_backbone.trunk.model.");
  Sam3Layout n = head.neck_layout(prefix);
  out.insert(out.end(), n.begin(), n.end());
  Sam3Layout t = text.layout(prefix + "backbone.language_backbone.");
  out.insert(out.end(), t.begin(), t.end());
  Sam3Layout h = head.head_layout(prefix);
  out.insert(out.end(), h.begin(), h.end());
  return out;
}

}  // namespace flick
