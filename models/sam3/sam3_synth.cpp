#include "models/sam3/sam3_synth.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <sstream>

#include "runtime/random.h"
#include "runtime/weights/pth_writer.h"
#include "runtime/weights/stored_type.h"

namespace flick {
namespace {

// The tracker's tensors in the released file (build_tracker(), under "tracker."),
// from tests/data/sam3/keys_efficient_sam3_repvit-m0_9_mobileclip_s1.txt.gz:
// "name dtype d0,d1,..." per line. Never read by the image path.
constexpr const char* kTrackerTable = R"(
maskmem_tpos_enc F32 7,1,1,64
no_mem_embed F32 1,1,256
no_mem_pos_enc F32 1,1,256
no_obj_ptr F32 1,256
no_obj_embed_spatial F32 1,64
mask_downsample.weight F32 1,1,4,4
mask_downsample.bias F32 1
transformer.encoder.layers.0.self_attn.q_proj.weight F32 256,256
transformer.encoder.layers.0.self_attn.q_proj.bias F32 256
transformer.encoder.layers.0.self_attn.k_proj.weight F32 256,256
transformer.encoder.layers.0.self_attn.k_proj.bias F32 256
transformer.encoder.layers.0.self_attn.v_proj.weight F32 256,256
transformer.encoder.layers.0.self_attn.v_proj.bias F32 256
transformer.encoder.layers.0.self_attn.out_proj.weight F32 256,256
transformer.encoder.layers.0.self_attn.out_proj.bias F32 256
transformer.encoder.layers.0.cross_attn_image.q_proj.weight F32 256,256
transformer.encoder.layers.0.cross_attn_image.q_proj.bias F32 256
transformer.encoder.layers.0.cross_attn_image.k_proj.weight F32 256,64
transformer.encoder.layers.0.cross_attn_image.k_proj.bias F32 256
transformer.encoder.layers.0.cross_attn_image.v_proj.weight F32 256,64
transformer.encoder.layers.0.cross_attn_image.v_proj.bias F32 256
transformer.encoder.layers.0.cross_attn_image.out_proj.weight F32 256,256
transformer.encoder.layers.0.cross_attn_image.out_proj.bias F32 256
transformer.encoder.layers.0.linear1.weight F32 2048,256
transformer.encoder.layers.0.linear1.bias F32 2048
transformer.encoder.layers.0.linear2.weight F32 256,2048
transformer.encoder.layers.0.linear2.bias F32 256
transformer.encoder.layers.0.norm1.weight F32 256
transformer.encoder.layers.0.norm1.bias F32 256
transformer.encoder.layers.0.norm2.weight F32 256
transformer.encoder.layers.0.norm2.bias F32 256
transformer.encoder.layers.0.norm3.weight F32 256
transformer.encoder.layers.0.norm3.bias F32 256
transformer.encoder.layers.1.self_attn.q_proj.weight F32 256,256
transformer.encoder.layers.1.self_attn.q_proj.bias F32 256
transformer.encoder.layers.1.self_attn.k_proj.weight F32 256,256
transformer.encoder.layers.1.self_attn.k_proj.bias F32 256
transformer.encoder.layers.1.self_attn.v_proj.weight F32 256,256
transformer.encoder.layers.1.self_attn.v_proj.bias F32 256
transformer.encoder.layers.1.self_attn.out_proj.weight F32 256,256
transformer.encoder.layers.1.self_attn.out_proj.bias F32 256
transformer.encoder.layers.1.cross_attn_image.q_proj.weight F32 256,256
transformer.encoder.layers.1.cross_attn_image.q_proj.bias F32 256
transformer.encoder.layers.1.cross_attn_image.k_proj.weight F32 256,64
transformer.encoder.layers.1.cross_attn_image.k_proj.bias F32 256
transformer.encoder.layers.1.cross_attn_image.v_proj.weight F32 256,64
transformer.encoder.layers.1.cross_attn_image.v_proj.bias F32 256
transformer.encoder.layers.1.cross_attn_image.out_proj.weight F32 256,256
transformer.encoder.layers.1.cross_attn_image.out_proj.bias F32 256
transformer.encoder.layers.1.linear1.weight F32 2048,256
transformer.encoder.layers.1.linear1.bias F32 2048
transformer.encoder.layers.1.linear2.weight F32 256,2048
transformer.encoder.layers.1.linear2.bias F32 256
transformer.encoder.layers.1.norm1.weight F32 256
transformer.encoder.layers.1.norm1.bias F32 256
transformer.encoder.layers.1.norm2.weight F32 256
transformer.encoder.layers.1.norm2.bias F32 256
transformer.encoder.layers.1.norm3.weight F32 256
transformer.encoder.layers.1.norm3.bias F32 256
transformer.encoder.layers.2.self_attn.q_proj.weight F32 256,256
transformer.encoder.layers.2.self_attn.q_proj.bias F32 256
transformer.encoder.layers.2.self_attn.k_proj.weight F32 256,256
transformer.encoder.layers.2.self_attn.k_proj.bias F32 256
transformer.encoder.layers.2.self_attn.v_proj.weight F32 256,256
transformer.encoder.layers.2.self_attn.v_proj.bias F32 256
transformer.encoder.layers.2.self_attn.out_proj.weight F32 256,256
transformer.encoder.layers.2.self_attn.out_proj.bias F32 256
transformer.encoder.layers.2.cross_attn_image.q_proj.weight F32 256,256
transformer.encoder.layers.2.cross_attn_image.q_proj.bias F32 256
transformer.encoder.layers.2.cross_attn_image.k_proj.weight F32 256,64
transformer.encoder.layers.2.cross_attn_image.k_proj.bias F32 256
transformer.encoder.layers.2.cross_attn_image.v_proj.weight F32 256,64
transformer.encoder.layers.2.cross_attn_image.v_proj.bias F32 256
transformer.encoder.layers.2.cross_attn_image.out_proj.weight F32 256,256
transformer.encoder.layers.2.cross_attn_image.out_proj.bias F32 256
transformer.encoder.layers.2.linear1.weight F32 2048,256
transformer.encoder.layers.2.linear1.bias F32 2048
transformer.encoder.layers.2.linear2.weight F32 256,2048
transformer.encoder.layers.2.linear2.bias F32 256
transformer.encoder.layers.2.norm1.weight F32 256
transformer.encoder.layers.2.norm1.bias F32 256
transformer.encoder.layers.2.norm2.weight F32 256
transformer.encoder.layers.2.norm2.bias F32 256
transformer.encoder.layers.2.norm3.weight F32 256
transformer.encoder.layers.2.norm3.bias F32 256
transformer.encoder.layers.3.self_attn.q_proj.weight F32 256,256
transformer.encoder.layers.3.self_attn.q_proj.bias F32 256
transformer.encoder.layers.3.self_attn.k_proj.weight F32 256,256
transformer.encoder.layers.3.self_attn.k_proj.bias F32 256
transformer.encoder.layers.3.self_attn.v_proj.weight F32 256,256
transformer.encoder.layers.3.self_attn.v_proj.bias F32 256
transformer.encoder.layers.3.self_attn.out_proj.weight F32 256,256
transformer.encoder.layers.3.self_attn.out_proj.bias F32 256
transformer.encoder.layers.3.cross_attn_image.q_proj.weight F32 256,256
transformer.encoder.layers.3.cross_attn_image.q_proj.bias F32 256
transformer.encoder.layers.3.cross_attn_image.k_proj.weight F32 256,64
transformer.encoder.layers.3.cross_attn_image.k_proj.bias F32 256
transformer.encoder.layers.3.cross_attn_image.v_proj.weight F32 256,64
transformer.encoder.layers.3.cross_attn_image.v_proj.bias F32 256
transformer.encoder.layers.3.cross_attn_image.out_proj.weight F32 256,256
transformer.encoder.layers.3.cross_attn_image.out_proj.bias F32 256
transformer.encoder.layers.3.linear1.weight F32 2048,256
transformer.encoder.layers.3.linear1.bias F32 2048
transformer.encoder.layers.3.linear2.weight F32 256,2048
transformer.encoder.layers.3.linear2.bias F32 256
transformer.encoder.layers.3.norm1.weight F32 256
transformer.encoder.layers.3.norm1.bias F32 256
transformer.encoder.layers.3.norm2.weight F32 256
transformer.encoder.layers.3.norm2.bias F32 256
transformer.encoder.layers.3.norm3.weight F32 256
transformer.encoder.layers.3.norm3.bias F32 256
transformer.encoder.norm.weight F32 256
transformer.encoder.norm.bias F32 256
maskmem_backbone.mask_downsampler.encoder.0.weight F32 4,1,3,3
maskmem_backbone.mask_downsampler.encoder.0.bias F32 4
maskmem_backbone.mask_downsampler.encoder.1.weight F32 4
maskmem_backbone.mask_downsampler.encoder.1.bias F32 4
maskmem_backbone.mask_downsampler.encoder.3.weight F32 16,4,3,3
maskmem_backbone.mask_downsampler.encoder.3.bias F32 16
maskmem_backbone.mask_downsampler.encoder.4.weight F32 16
maskmem_backbone.mask_downsampler.encoder.4.bias F32 16
maskmem_backbone.mask_downsampler.encoder.6.weight F32 64,16,3,3
maskmem_backbone.mask_downsampler.encoder.6.bias F32 64
maskmem_backbone.mask_downsampler.encoder.7.weight F32 64
maskmem_backbone.mask_downsampler.encoder.7.bias F32 64
maskmem_backbone.mask_downsampler.encoder.9.weight F32 256,64,3,3
maskmem_backbone.mask_downsampler.encoder.9.bias F32 256
maskmem_backbone.mask_downsampler.encoder.10.weight F32 256
maskmem_backbone.mask_downsampler.encoder.10.bias F32 256
maskmem_backbone.mask_downsampler.encoder.12.weight F32 256,256,1,1
maskmem_backbone.mask_downsampler.encoder.12.bias F32 256
maskmem_backbone.pix_feat_proj.weight F32 256,256,1,1
maskmem_backbone.pix_feat_proj.bias F32 256
maskmem_backbone.fuser.layers.0.gamma F32 256
maskmem_backbone.fuser.layers.0.dwconv.weight F32 256,1,7,7
maskmem_backbone.fuser.layers.0.dwconv.bias F32 256
maskmem_backbone.fuser.layers.0.norm.weight F32 256
maskmem_backbone.fuser.layers.0.norm.bias F32 256
maskmem_backbone.fuser.layers.0.pwconv1.weight F32 1024,256
maskmem_backbone.fuser.layers.0.pwconv1.bias F32 1024
maskmem_backbone.fuser.layers.0.pwconv2.weight F32 256,1024
maskmem_backbone.fuser.layers.0.pwconv2.bias F32 256
maskmem_backbone.fuser.layers.1.gamma F32 256
maskmem_backbone.fuser.layers.1.dwconv.weight F32 256,1,7,7
maskmem_backbone.fuser.layers.1.dwconv.bias F32 256
maskmem_backbone.fuser.layers.1.norm.weight F32 256
maskmem_backbone.fuser.layers.1.norm.bias F32 256
maskmem_backbone.fuser.layers.1.pwconv1.weight F32 1024,256
maskmem_backbone.fuser.layers.1.pwconv1.bias F32 1024
maskmem_backbone.fuser.layers.1.pwconv2.weight F32 256,1024
maskmem_backbone.fuser.layers.1.pwconv2.bias F32 256
maskmem_backbone.out_proj.weight F32 64,256,1,1
maskmem_backbone.out_proj.bias F32 64
sam_prompt_encoder.pe_layer.positional_encoding_gaussian_matrix F32 2,128
sam_prompt_encoder.point_embeddings.0.weight F32 1,256
sam_prompt_encoder.point_embeddings.1.weight F32 1,256
sam_prompt_encoder.point_embeddings.2.weight F32 1,256
sam_prompt_encoder.point_embeddings.3.weight F32 1,256
sam_prompt_encoder.not_a_point_embed.weight F32 1,256
sam_prompt_encoder.mask_downscaling.0.weight F32 4,1,2,2
sam_prompt_encoder.mask_downscaling.0.bias F32 4
sam_prompt_encoder.mask_downscaling.1.weight F32 4
sam_prompt_encoder.mask_downscaling.1.bias F32 4
sam_prompt_encoder.mask_downscaling.3.weight F32 16,4,2,2
sam_prompt_encoder.mask_downscaling.3.bias F32 16
sam_prompt_encoder.mask_downscaling.4.weight F32 16
sam_prompt_encoder.mask_downscaling.4.bias F32 16
sam_prompt_encoder.mask_downscaling.6.weight F32 256,16,1,1
sam_prompt_encoder.mask_downscaling.6.bias F32 256
sam_prompt_encoder.no_mask_embed.weight F32 1,256
sam_mask_decoder.transformer.layers.0.self_attn.q_proj.weight F32 256,256
sam_mask_decoder.transformer.layers.0.self_attn.q_proj.bias F32 256
sam_mask_decoder.transformer.layers.0.self_attn.k_proj.weight F32 256,256
sam_mask_decoder.transformer.layers.0.self_attn.k_proj.bias F32 256
sam_mask_decoder.transformer.layers.0.self_attn.v_proj.weight F32 256,256
sam_mask_decoder.transformer.layers.0.self_attn.v_proj.bias F32 256
sam_mask_decoder.transformer.layers.0.self_attn.out_proj.weight F32 256,256
sam_mask_decoder.transformer.layers.0.self_attn.out_proj.bias F32 256
sam_mask_decoder.transformer.layers.0.norm1.weight F32 256
sam_mask_decoder.transformer.layers.0.norm1.bias F32 256
sam_mask_decoder.transformer.layers.0.cross_attn_token_to_image.q_proj.weight F32 128,256
sam_mask_decoder.transformer.layers.0.cross_attn_token_to_image.q_proj.bias F32 128
sam_mask_decoder.transformer.layers.0.cross_attn_token_to_image.k_proj.weight F32 128,256
sam_mask_decoder.transformer.layers.0.cross_attn_token_to_image.k_proj.bias F32 128
sam_mask_decoder.transformer.layers.0.cross_attn_token_to_image.v_proj.weight F32 128,256
sam_mask_decoder.transformer.layers.0.cross_attn_token_to_image.v_proj.bias F32 128
sam_mask_decoder.transformer.layers.0.cross_attn_token_to_image.out_proj.weight F32 256,128
sam_mask_decoder.transformer.layers.0.cross_attn_token_to_image.out_proj.bias F32 256
sam_mask_decoder.transformer.layers.0.norm2.weight F32 256
sam_mask_decoder.transformer.layers.0.norm2.bias F32 256
sam_mask_decoder.transformer.layers.0.mlp.lin1.weight F32 2048,256
sam_mask_decoder.transformer.layers.0.mlp.lin1.bias F32 2048
sam_mask_decoder.transformer.layers.0.mlp.lin2.weight F32 256,2048
sam_mask_decoder.transformer.layers.0.mlp.lin2.bias F32 256
sam_mask_decoder.transformer.layers.0.norm3.weight F32 256
sam_mask_decoder.transformer.layers.0.norm3.bias F32 256
sam_mask_decoder.transformer.layers.0.norm4.weight F32 256
sam_mask_decoder.transformer.layers.0.norm4.bias F32 256
sam_mask_decoder.transformer.layers.0.cross_attn_image_to_token.q_proj.weight F32 128,256
sam_mask_decoder.transformer.layers.0.cross_attn_image_to_token.q_proj.bias F32 128
sam_mask_decoder.transformer.layers.0.cross_attn_image_to_token.k_proj.weight F32 128,256
sam_mask_decoder.transformer.layers.0.cross_attn_image_to_token.k_proj.bias F32 128
sam_mask_decoder.transformer.layers.0.cross_attn_image_to_token.v_proj.weight F32 128,256
sam_mask_decoder.transformer.layers.0.cross_attn_image_to_token.v_proj.bias F32 128
sam_mask_decoder.transformer.layers.0.cross_attn_image_to_token.out_proj.weight F32 256,128
sam_mask_decoder.transformer.layers.0.cross_attn_image_to_token.out_proj.bias F32 256
sam_mask_decoder.transformer.layers.1.self_attn.q_proj.weight F32 256,256
sam_mask_decoder.transformer.layers.1.self_attn.q_proj.bias F32 256
sam_mask_decoder.transformer.layers.1.self_attn.k_proj.weight F32 256,256
sam_mask_decoder.transformer.layers.1.self_attn.k_proj.bias F32 256
sam_mask_decoder.transformer.layers.1.self_attn.v_proj.weight F32 256,256
sam_mask_decoder.transformer.layers.1.self_attn.v_proj.bias F32 256
sam_mask_decoder.transformer.layers.1.self_attn.out_proj.weight F32 256,256
sam_mask_decoder.transformer.layers.1.self_attn.out_proj.bias F32 256
sam_mask_decoder.transformer.layers.1.norm1.weight F32 256
sam_mask_decoder.transformer.layers.1.norm1.bias F32 256
sam_mask_decoder.transformer.layers.1.cross_attn_token_to_image.q_proj.weight F32 128,256
sam_mask_decoder.transformer.layers.1.cross_attn_token_to_image.q_proj.bias F32 128
sam_mask_decoder.transformer.layers.1.cross_attn_token_to_image.k_proj.weight F32 128,256
sam_mask_decoder.transformer.layers.1.cross_attn_token_to_image.k_proj.bias F32 128
sam_mask_decoder.transformer.layers.1.cross_attn_token_to_image.v_proj.weight F32 128,256
sam_mask_decoder.transformer.layers.1.cross_attn_token_to_image.v_proj.bias F32 128
sam_mask_decoder.transformer.layers.1.cross_attn_token_to_image.out_proj.weight F32 256,128
sam_mask_decoder.transformer.layers.1.cross_attn_token_to_image.out_proj.bias F32 256
sam_mask_decoder.transformer.layers.1.norm2.weight F32 256
sam_mask_decoder.transformer.layers.1.norm2.bias F32 256
sam_mask_decoder.transformer.layers.1.mlp.lin1.weight F32 2048,256
sam_mask_decoder.transformer.layers.1.mlp.lin1.bias F32 2048
sam_mask_decoder.transformer.layers.1.mlp.lin2.weight F32 256,2048
sam_mask_decoder.transformer.layers.1.mlp.lin2.bias F32 256
sam_mask_decoder.transformer.layers.1.norm3.weight F32 256
sam_mask_decoder.transformer.layers.1.norm3.bias F32 256
sam_mask_decoder.transformer.layers.1.norm4.weight F32 256
sam_mask_decoder.transformer.layers.1.norm4.bias F32 256
sam_mask_decoder.transformer.layers.1.cross_attn_image_to_token.q_proj.weight F32 128,256
sam_mask_decoder.transformer.layers.1.cross_attn_image_to_token.q_proj.bias F32 128
sam_mask_decoder.transformer.layers.1.cross_attn_image_to_token.k_proj.weight F32 128,256
sam_mask_decoder.transformer.layers.1.cross_attn_image_to_token.k_proj.bias F32 128
sam_mask_decoder.transformer.layers.1.cross_attn_image_to_token.v_proj.weight F32 128,256
sam_mask_decoder.transformer.layers.1.cross_attn_image_to_token.v_proj.bias F32 128
sam_mask_decoder.transformer.layers.1.cross_attn_image_to_token.out_proj.weight F32 256,128
sam_mask_decoder.transformer.layers.1.cross_attn_image_to_token.out_proj.bias F32 256
sam_mask_decoder.transformer.final_attn_token_to_image.q_proj.weight F32 128,256
sam_mask_decoder.transformer.final_attn_token_to_image.q_proj.bias F32 128
sam_mask_decoder.transformer.final_attn_token_to_image.k_proj.weight F32 128,256
sam_mask_decoder.transformer.final_attn_token_to_image.k_proj.bias F32 128
sam_mask_decoder.transformer.final_attn_token_to_image.v_proj.weight F32 128,256
sam_mask_decoder.transformer.final_attn_token_to_image.v_proj.bias F32 128
sam_mask_decoder.transformer.final_attn_token_to_image.out_proj.weight F32 256,128
sam_mask_decoder.transformer.final_attn_token_to_image.out_proj.bias F32 256
sam_mask_decoder.transformer.norm_final_attn.weight F32 256
sam_mask_decoder.transformer.norm_final_attn.bias F32 256
sam_mask_decoder.iou_token.weight F32 1,256
sam_mask_decoder.mask_tokens.weight F32 4,256
sam_mask_decoder.obj_score_token.weight F32 1,256
sam_mask_decoder.output_upscaling.0.weight F32 256,64,2,2
sam_mask_decoder.output_upscaling.0.bias F32 64
sam_mask_decoder.output_upscaling.1.weight F32 64
sam_mask_decoder.output_upscaling.1.bias F32 64
sam_mask_decoder.output_upscaling.3.weight F32 64,32,2,2
sam_mask_decoder.output_upscaling.3.bias F32 32
sam_mask_decoder.conv_s0.weight F32 32,256,1,1
sam_mask_decoder.conv_s0.bias F32 32
sam_mask_decoder.conv_s1.weight F32 64,256,1,1
sam_mask_decoder.conv_s1.bias F32 64
sam_mask_decoder.output_hypernetworks_mlps.0.layers.0.weight F32 256,256
sam_mask_decoder.output_hypernetworks_mlps.0.layers.0.bias F32 256
sam_mask_decoder.output_hypernetworks_mlps.0.layers.1.weight F32 256,256
sam_mask_decoder.output_hypernetworks_mlps.0.layers.1.bias F32 256
sam_mask_decoder.output_hypernetworks_mlps.0.layers.2.weight F32 32,256
sam_mask_decoder.output_hypernetworks_mlps.0.layers.2.bias F32 32
sam_mask_decoder.output_hypernetworks_mlps.1.layers.0.weight F32 256,256
sam_mask_decoder.output_hypernetworks_mlps.1.layers.0.bias F32 256
sam_mask_decoder.output_hypernetworks_mlps.1.layers.1.weight F32 256,256
sam_mask_decoder.output_hypernetworks_mlps.1.layers.1.bias F32 256
sam_mask_decoder.output_hypernetworks_mlps.1.layers.2.weight F32 32,256
sam_mask_decoder.output_hypernetworks_mlps.1.layers.2.bias F32 32
sam_mask_decoder.output_hypernetworks_mlps.2.layers.0.weight F32 256,256
sam_mask_decoder.output_hypernetworks_mlps.2.layers.0.bias F32 256
sam_mask_decoder.output_hypernetworks_mlps.2.layers.1.weight F32 256,256
sam_mask_decoder.output_hypernetworks_mlps.2.layers.1.bias F32 256
sam_mask_decoder.output_hypernetworks_mlps.2.layers.2.weight F32 32,256
sam_mask_decoder.output_hypernetworks_mlps.2.layers.2.bias F32 32
sam_mask_decoder.output_hypernetworks_mlps.3.layers.0.weight F32 256,256
sam_mask_decoder.output_hypernetworks_mlps.3.layers.0.bias F32 256
sam_mask_decoder.output_hypernetworks_mlps.3.layers.1.weight F32 256,256
sam_mask_decoder.output_hypernetworks_mlps.3.layers.1.bias F32 256
sam_mask_decoder.output_hypernetworks_mlps.3.layers.2.weight F32 32,256
sam_mask_decoder.output_hypernetworks_mlps.3.layers.2.bias F32 32
sam_mask_decoder.iou_prediction_head.layers.0.weight F32 256,256
sam_mask_decoder.iou_prediction_head.layers.0.bias F32 256
sam_mask_decoder.iou_prediction_head.layers.1.weight F32 256,256
sam_mask_decoder.iou_prediction_head.layers.1.bias F32 256
sam_mask_decoder.iou_prediction_head.layers.2.weight F32 4,256
sam_mask_decoder.iou_prediction_head.layers.2.bias F32 4
sam_mask_decoder.pred_obj_score_head.layers.0.weight F32 256,256
sam_mask_decoder.pred_obj_score_head.layers.0.bias F32 256
sam_mask_decoder.pred_obj_score_head.layers.1.weight F32 256,256
sam_mask_decoder.pred_obj_score_head.layers.1.bias F32 256
sam_mask_decoder.pred_obj_score_head.layers.2.weight F32 1,256
sam_mask_decoder.pred_obj_score_head.layers.2.bias F32 1
obj_ptr_proj.layers.0.weight F32 256,256
obj_ptr_proj.layers.0.bias F32 256
obj_ptr_proj.layers.1.weight F32 256,256
obj_ptr_proj.layers.1.bias F32 256
obj_ptr_proj.layers.2.weight F32 256,256
obj_ptr_proj.layers.2.bias F32 256
obj_ptr_tpos_proj.weight F32 64,256
obj_ptr_tpos_proj.bias F32 64)";

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

void tracker(Sam3Layout& out) {
  std::istringstream in(kTrackerTable);
  std::string name, dtype, dims;
  while (in >> name >> dtype >> dims) {
    std::vector<int64_t> shape;
    std::istringstream d(dims);
    for (std::string v; std::getline(d, v, ',');) shape.push_back(std::stoll(v));
    add(out, "tracker." + name,
        dtype == "C64"   ? "C64"
        : dtype == "I64" ? "I64"
                         : "F32",
        std::move(shape));
  }
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
