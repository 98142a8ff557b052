// The MobileCLIP text encoder as EfficientSAM3 uses it
// (sam3/model/text_encoder_student.py TextStudentEncoder over
// sam3/backbones/mobile_clip.py MobileCLIPTextTransformer, variant "base" =
// MobileCLIP-S1):
//
//   x = embedding[tokens] + pos[:L]                    // [1, L, D]; embed_scale unused
//   layer_i:  x += out_proj(attn(qkv_proj(LN1 x)))      // non-causal, no padding mask
//             x += fc2(gelu(fc1(LN2 x)))                // nn.GELU = erf
//   memory = projector(final_LN(x))                     // [1, L, out_dim]
//
// The reference tokenizes to the full context (77 for the released file)
// and runs every pad token through the unmasked attention, so the output of
// every position depends on the padding: callers pass the whole context.
// The padding mask the decoder needs (True = pad) is tokens == 0.
//
// Config (sam3_layout.h MobileClipTextConfig) is detected from shapes; the
// head count is not in any shape (dim / 64 unless given). The projection_layer
// (512x512) is in the checkpoint but unused on this path.
//
// MobileCLIP-S0 ("mct") puts a RepMixerBlock before and after the transformer
// layers, over the sequence as a [1, D, 1, L] map (mobile_clip.py):
//   x = x + ls1 * (mixer(x) - norm(x))        // RepMixer: mixer = BN(x) + BN(dwconv1xK(x)),
//                                             //           norm = BN(x); K = 11, zero padding
//   x = x + ls2 * fc2(gelu(fc1(BN(dwconv1xK(x)))))   // ConvFFN, 1x1 convs, hidden 4D
// folded at load as the reference's reparameterize() does: the token mixer
// into one depthwise 1xK conv with bias (identity included), the ConvFFN's BN
// into its depthwise conv and ls2 into fc2 (in double, rounded once).
//
// Precision F32 keeps everything fp32. BF16 rounds every parameter to bf16
// and stores activations in bf16; LayerNorm, softmax and the accumulations
// run in fp32 (the reference's LayerNormFP32 computes in fp32 too).
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "models/sam3/sam3_layout.h"
#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"
#include "runtime/weights/weight_store.h"

namespace flick {

class MobileClipText {
 public:
  // Called with each intermediate: "embeddings", "layer{i}", "final_norm",
  // "text_memory" (all [1, L, *]). Views are valid during the call only.
  using Tap = std::function<void(std::string_view name, const Tensor& t)>;

  // `text` is the TextStudentEncoder's prefix ("...language_backbone.").
  // heads = 0: dim / 64, as _create_student_text_encoder configures it.
  static Expected<MobileClipText> load(const WeightView& text, Backend& backend,
                                       Precision precision, int64_t heads = 0);

  const MobileClipTextConfig& config() const { return cfg_; }
  DType activation_dtype() const { return act_; }

  // tokens: I32 [L] with L = config().context (ids < vocab). Returns
  // [1, L, out_dim] in activation_dtype(), a view into the component's arena
  // valid until the next forward().
  Expected<Tensor> forward(const Tensor& tokens, const Tap& tap = {});

 private:
  struct Layer {
    Tensor ln1_w, ln1_b, ln2_w, ln2_b;
    std::unique_ptr<PackedLinear> qkv, out, fc1, fc2;
  };
  struct RepMixer {                             // S0; see the header comment
    std::unique_ptr<PackedConv> token, ffn_dw;  // depthwise 1xK over [1, D, 1, L]
    std::unique_ptr<PackedLinear> fc1, fc2;     // the ConvFFN's 1x1 convs on token rows
  };

  MobileClipText() = default;
  Status load_weights(const WeightView& text);
  Status load_repmixer(const WeightView& block, RepMixer& r);
  void plan();
  // x [L, D] <- RepMixerBlock(x); tap "layer{index}".
  void run_repmixer(const RepMixer& r, Tensor& x);

  MobileClipTextConfig cfg_;
  Backend* backend_ = nullptr;
  Precision precision_ = Precision::F32;
  DType act_ = DType::F32;
  float eps_ = 1e-5f;  // LayerNormFP32 default

  std::vector<OwnedTensor> owned_;
  Tensor embedding_;  // [vocab, D]
  Tensor pos_;        // [context, D]
  Tensor final_w_, final_b_;
  std::vector<Layer> layers_;
  std::vector<RepMixer> repmixers_;  // S0: before and after the layers
  std::unique_ptr<PackedLinear> projector_;

  Arena arena_;
  Arena::BufferId x_ = -1, h_ = -1, qkv_ = -1, attn_ = -1, o_ = -1, mlp_ = -1, out_ = -1;
  Arena::BufferId cm_a_ = -1, cm_b_ = -1, cm_c_ = -1;  // S0: channel-major [1, D, 1, L]
};

}  // namespace flick
