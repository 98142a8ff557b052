#include "models/sam3/sam3_image_model.h"

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "models/clip/clip_tokenizer.h"
#include "models/sam3/detr_decoder.h"
#include "models/sam3/dot_scoring.h"
#include "models/sam3/fusion_encoder.h"
#include "models/sam3/geometry_cls.h"
#include "models/sam3/mobileclip_text.h"
#include "models/sam3/repvit_trunk.h"
#include "models/sam3/sam3_neck.h"
#include "models/sam3/sam3_preprocess.h"
#include "models/sam3/seg_head.h"
#include "runtime/cpu/onednn_info.h"
#include "runtime/weights/weight_store.h"

namespace flick {
namespace {

constexpr const char* kVocabName = "bpe_simple_vocab_16e6.txt.gz";
// The image side's patch size: the student head resizes the trunk's map to
// S / 14 (72 for 1008), the SAM3 ViT's grid it replaces (model_builder.py
// _create_student_vision_backbone: embed_size=72, img_size=1008).
constexpr int64_t kPatch = 14;

// Sam3Options::vocab, else the first copy found beside the weights, installed
// with flick, or in the source tree; the error names every path tried.
Expected<std::string> find_vocab(const Sam3Options& o) {
  if (!o.vocab.empty()) return o.vocab;
  namespace fs = std::filesystem;
  std::vector<std::string> tried = {
      (fs::path(o.weights).parent_path() / kVocabName).string(),
#ifdef FLICK_SAM3_INSTALLED_DATA
      (fs::path(FLICK_SAM3_INSTALLED_DATA) / kVocabName).string(),
#endif
#ifdef FLICK_SAM3_SOURCE_DATA
      (fs::path(FLICK_SAM3_SOURCE_DATA) / kVocabName).string(),
#endif
  };
  std::error_code ec;
  for (const std::string& p : tried)
    if (fs::is_regular_file(p, ec)) return p;
  std::string msg = std::string("the SAM3 tokenizer vocabulary ") + kVocabName +
                    " was not found (no vocab given); tried:";
  for (const std::string& p : tried) msg += "\n  " + p;
  return not_found(msg);
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

struct Sam3ImageModel::Impl {
  Sam3Options options;
  Backend* backend = nullptr;
  WeightStore store;  // components keep views of some tensors (norm affines, tables)
  Sam3Checkpoint checkpoint;
  std::optional<clip::ClipTokenizer> tokenizer;
  std::optional<RepVitTrunk> trunk;
  std::optional<Sam3Neck> neck;
  std::optional<MobileClipText> text;
  std::optional<GeometryCls> geometry;
  std::optional<FusionEncoder> encoder;
  std::optional<DetrDecoder> decoder;
  std::optional<DotScoring> scoring;
  std::optional<SegHead> seg;

  int64_t grid = 0;     // g: S / 14
  int64_t context = 0;  // text tokens (77 in the released file)
  int64_t d = 0;        // d_model
  DType act = DType::F32;

  OwnedTensor pixels;  // [1, 3, S, S] F32
  // The last encode_image() frame: the neck's levels (views into its arena,
  // valid until its next forward) and the geometry CLS token.
  bool have_frame = false;
  int frame_w = 0, frame_h = 0;
  std::array<Tensor, Sam3NeckConfig::kLevels> levels;
  OwnedTensor cls;  // [1, d]

  struct TextEntry {
    OwnedTensor tokens;  // I32 [L]
    OwnedTensor memory;  // [L, d] (activation dtype)
  };
  std::unordered_map<std::string, TextEntry> text_cache;
  OwnedTensor prompt;        // [L + 1, d]: text tokens, then the geometry CLS
  OwnedTensor prompt_valid;  // U8 [L + 1]: 1 = a real token (the reference's mask negated)

  Expected<const TextEntry*> encode_text(std::string_view prompt_text, const Tap& tap);
};

Sam3ImageModel::Sam3ImageModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Sam3ImageModel::~Sam3ImageModel() = default;

const Sam3Options& Sam3ImageModel::options() const { return impl_->options; }
const Sam3Checkpoint& Sam3ImageModel::checkpoint() const { return impl_->checkpoint; }

std::string Sam3ImageModel::precision_summary() const {
  const Precision p = impl_->options.precision;
  const std::string rest = precision_name(p == Precision::INT8 ? Precision::BF16 : p);
  if (p == Precision::INT8)
    return rest + " trunk, int8 neck, " + rest + " text, int8 decoder, bf16 head";
  return rest + " trunk, " + rest + " text, " + rest + " head";
}

Expected<std::unique_ptr<Sam3ImageModel>> Sam3ImageModel::load(const Sam3Options& options,
                                                               Backend& backend) {
  auto m = std::make_unique<Impl>();
  m->options = options;
  m->backend = &backend;
  const Precision p = options.precision;
  if (p != Precision::F32 && p != Precision::BF16 && p != Precision::INT8)
    return invalid_input(std::string("EfficientSAM3: precision ") + precision_name(p) +
                         " is not supported (f32, bf16, int8)");
  // INT8 quantizes the DETR decoder's attention projections and FFN (W8A8)
  // and the neck's convolutions; everything else runs bf16. The fusion
  // encoder and the mask head accept INT8 too, but the masks do not survive
  // it: on the 224 golden, an INT8 fusion encoder takes the binary-mask IoU
  // against fp32 from 0.99 (bf16) to 0.38-0.55 (the pixel decoder amplifies
  // the memory's per-token quantization error), while the INT8 decoder and
  // neck keep 0.99 (boxes within 2 px). The mask head's convolutions: INT8
  // at the 4x level costs IoU 0.992 -> 0.976 (its input sums the upsampled
  // first stage and the neck's finest level, ranges one scale per tensor
  // fits badly), and the others ran no faster in INT8 on a Zen 4 (their
  // inputs are NCHW: the quantize pass transposes them). Tests:
  // Sam3ImageModelGolden.Int8*AgreesWithTheF32Reference.
  if (p == Precision::INT8 && std::strcmp(backend.name(), "cpu") == 0 &&
      !cpu::cpu_supports(Precision::INT8))
    return invalid_input(
        "EfficientSAM3: precision int8 needs a CPU with AVX-512 VNNI (or AMX); use bf16");
  const Precision dense = p == Precision::INT8 ? Precision::BF16 : p;
  const int64_t s = options.image_size;
  if (s < kPatch || s % kPatch != 0)
    return invalid_input("EfficientSAM3: image_size " + std::to_string(s) +
                         " must be a positive multiple of 14 (1008 for the released models)");
  m->grid = s / kPatch;

  FLICK_ASSIGN_OR_RETURN(m->store, WeightStore::open({options.weights}));
  FLICK_ASSIGN_OR_RETURN(m->checkpoint, Sam3Checkpoint::inspect(m->store));
  const Sam3Checkpoint& c = m->checkpoint;
  FLICK_TRY(m->store.check_all_used());
  m->context = c.text.context;
  m->d = c.head.d_model;
  const int64_t prompt_len = m->context + 1;  // the text tokens + the geometry CLS
  const std::string& det = c.detector_prefix;
  const WeightStore& st = m->store;

  FLICK_ASSIGN_OR_RETURN(std::string vocab, find_vocab(options));
  FLICK_ASSIGN_OR_RETURN(clip::ClipTokenizer tok, clip::ClipTokenizer::load_simple(vocab));
  m->tokenizer.emplace(std::move(tok));

  FLICK_ASSIGN_OR_RETURN(RepVitTrunk trunk,
                         RepVitTrunk::load(st.view(c.trunk_prefix), backend, dense, s, m->grid));
  m->trunk.emplace(std::move(trunk));
  FLICK_ASSIGN_OR_RETURN(Sam3Neck neck, Sam3Neck::load(st.view(det + "backbone.vision_backbone"),
                                                       backend, p, m->grid));
  m->neck.emplace(std::move(neck));
  FLICK_ASSIGN_OR_RETURN(MobileClipText text,
                         MobileClipText::load(st.view(c.text_prefix), backend, dense));
  m->text.emplace(std::move(text));
  FLICK_ASSIGN_OR_RETURN(GeometryCls geometry, GeometryCls::load(st.view(det + "geometry_encoder"),
                                                                 backend, dense, m->grid));
  m->geometry.emplace(std::move(geometry));
  FLICK_ASSIGN_OR_RETURN(FusionEncoder encoder,
                         FusionEncoder::load(st.view(det + "transformer.encoder"), backend, dense,
                                             m->grid, prompt_len));
  m->encoder.emplace(std::move(encoder));
  FLICK_ASSIGN_OR_RETURN(
      DetrDecoder decoder,
      DetrDecoder::load(st.view(det + "transformer.decoder"), backend, p, m->grid, prompt_len));
  m->decoder.emplace(std::move(decoder));
  const DetrDecoderConfig& dc = m->decoder->config();
  FLICK_ASSIGN_OR_RETURN(DotScoring scoring,
                         DotScoring::load(st.view(det + "dot_prod_scoring"), backend, dense,
                                          dc.layers * dc.queries, prompt_len));
  m->scoring.emplace(std::move(scoring));
  FLICK_ASSIGN_OR_RETURN(SegHead seg, SegHead::load(st.view(det + "segmentation_head"), backend,
                                                    dense, m->grid, dc.queries, prompt_len));
  m->seg.emplace(std::move(seg));
  m->neck->set_levels_channels_last(m->seg->channels_last());
  m->store.release_pages();

  m->act = m->encoder->activation_dtype();
  m->pixels = OwnedTensor(DType::F32, {1, 3, s, s});
  m->cls = OwnedTensor(m->act, {1, m->d});
  m->prompt = OwnedTensor(m->act, {prompt_len, m->d});
  m->prompt_valid = OwnedTensor(DType::U8, {prompt_len});
  return std::unique_ptr<Sam3ImageModel>(new Sam3ImageModel(std::move(m)));
}

Status Sam3ImageModel::encode_image(const FrameView& frame, const Tap& tap) {
  Impl& m = *impl_;
  if (frame.width < 1 || frame.height < 1 || frame.rgb == nullptr ||
      frame.stride < int64_t{3} * frame.width)
    return invalid_input("EfficientSAM3: empty or malformed frame (" + std::to_string(frame.width) +
                         "x" + std::to_string(frame.height) + ")");
  m.have_frame = false;
  // The reference's normalised pixels are fp32; the trunk rounds them to its
  // activation type itself.
  sam3_preprocess(frame, m.pixels.t);  // [1, 3, S, S]
  if (tap) tap("pixels", m.pixels.t);
  FLICK_ASSIGN_OR_RETURN(Tensor feat, m.trunk->forward(m.pixels.t));  // [1, 1024, g, g]
  if (tap) tap("trunk", feat);
  FLICK_ASSIGN_OR_RETURN(m.levels, m.neck->forward(feat));  // [1, d, 4g..g, 4g..g]
  if (tap)
    for (int l = 0; l < Sam3NeckConfig::kLevels; ++l)
      tap("neck.level" + std::to_string(l), m.levels[static_cast<size_t>(l)]);
  // The geometry encoder's CLS depends on the image only (an empty box
  // prompt): once per frame, shared by every prompt.
  FLICK_ASSIGN_OR_RETURN(Tensor cls, m.geometry->forward(m.levels[2], m.neck->position(2)));
  m.backend->copy(cls, m.cls.t);  // [1, d]
  // So does the fusion encoder's first self-attention (FusionEncoder::encode_image).
  FLICK_TRY(m.encoder->encode_image(m.levels[2], m.neck->position(2)));
  m.frame_w = frame.width;
  m.frame_h = frame.height;
  m.have_frame = true;
  return ok_status();
}

Expected<const Sam3ImageModel::Impl::TextEntry*> Sam3ImageModel::Impl::encode_text(
    std::string_view prompt_text, const Tap& tap) {
  const std::string key(prompt_text);
  auto it = text_cache.find(key);
  if (it == text_cache.end()) {
    // TextStudentEncoder.forward: tokenize to the full context (SOT, words,
    // EOT, zero padding), run every position through the unmasked encoder.
    FLICK_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                           tokenizer->encode_padded(prompt_text, static_cast<int32_t>(context)));
    TextEntry e;
    e.tokens = OwnedTensor(DType::I32, {context});
    for (int64_t i = 0; i < context; ++i)
      e.tokens.t.ptr<int32_t>()[i] = ids[static_cast<size_t>(i)];
    FLICK_ASSIGN_OR_RETURN(Tensor mem, text->forward(e.tokens.t));  // [1, L, d]
    e.memory = OwnedTensor(act, {context, d});
    backend->copy(mem.reshape({context, d}), e.memory.t);
    it = text_cache.emplace(key, std::move(e)).first;
  }
  if (tap) {
    tap("tokens", it->second.tokens.t);
    tap("text", it->second.memory.t.reshape({1, context, d}));
  }
  return &it->second;
}

Expected<Sam3Detections> Sam3ImageModel::detect(std::string_view prompt, float threshold,
                                                const Tap& tap, Sam3MaskOutput output,
                                                Sam3Masks masks) {
  Impl& m = *impl_;
  if (prompt.empty()) return invalid_input("EfficientSAM3: empty prompt");
  if (!m.have_frame) return usage_error("EfficientSAM3: detect() before encode_image()");
  FLICK_ASSIGN_OR_RETURN(const Impl::TextEntry* text, m.encode_text(prompt, tap));

  // prompt = cat[text memory, geometry CLS] (Sam3Image._encode_prompt); the
  // mask is the tokens' padding (token id 0), the CLS is valid.
  const int64_t L = m.context;
  Tensor text_rows = m.prompt.t.slice(0, 0, L);
  Tensor cls_row = m.prompt.t.slice(0, L, 1);
  m.backend->copy(text->memory.t, text_rows);
  m.backend->copy(m.cls.t, cls_row);
  uint8_t* valid = m.prompt_valid.t.ptr<uint8_t>();
  for (int64_t i = 0; i < L; ++i) valid[i] = text->tokens.t.ptr<int32_t>()[i] != 0 ? 1 : 0;
  valid[L] = 1;
  if (tap) tap("prompt", m.prompt.t);  // [L + 1, d]

  const Tensor& pos = m.neck->position(2);
  FLICK_ASSIGN_OR_RETURN(Tensor memory,
                         m.encoder->forward(m.prompt.t, m.prompt_valid.t));  // [1, T, d]
  if (tap) tap("memory", memory);

  DetrDecoder::Tap dtap;
  if (tap) {
    // "layer{l}.hs" -> "decoder.hs{l}" (and .ref, .presence).
    dtap = [&tap](std::string_view name, const Tensor& t) {
      const size_t dot = name.find('.');
      const std::string_view layer = name.substr(5, dot - 5), what = name.substr(dot + 1);
      tap("decoder." + std::string(what) + std::string(layer), t);
    };
  }
  FLICK_ASSIGN_OR_RETURN(DetrDecoderOutput dec,
                         m.decoder->forward(memory, pos, m.prompt.t, m.prompt_valid.t, dtap));
  const int64_t layers = dec.hs.dim(0), queries = dec.hs.dim(1);

  // Scores of every layer's queries; the image model reports the last
  // layer's (Sam3Image._update_scores_and_boxes, pred_logits[-1]).
  FLICK_ASSIGN_OR_RETURN(Tensor all_logits, m.scoring->forward(dec.hs, m.prompt.t,
                                                               m.prompt_valid.t));  // F32 [L*Q]
  const Tensor logits = all_logits.slice(0, (layers - 1) * queries, queries);       // F32 [Q]
  const float presence = dec.presence.ptr<float>()[layers - 1];
  if (tap) {
    tap("logits", all_logits.reshape({layers, queries}));
    OwnedTensor scores(DType::F32, {queries});  // sigmoid(logit) * sigmoid(presence)
    const float pr = sigmoid(presence);
    for (int64_t q = 0; q < queries; ++q)
      scores.t.ptr<float>()[q] = sigmoid(logits.ptr<float>()[q]) * pr;
    tap("scores", scores.t);
    tap("boxes", dec.last_ref);  // [Q, 4] cxcywh in [0, 1]
  }

  FLICK_ASSIGN_OR_RETURN(Sam3Detections det, sam3_select(logits, presence, dec.last_ref, threshold,
                                                         m.frame_w, m.frame_h));
  // The mask head (a fifth of a prompt's time) runs for the kept queries
  // only, and not at all where none is kept; for every query with a tap (the
  // dump holds every mask) or when asked (benchmarks doing the reference's
  // work). Each kept query's mask is the same either way (SegHead::forward).
  const Tensor hs_last = dec.hs.select(0, layers - 1);  // [Q, d]
  if (tap || masks == Sam3Masks::kEveryQuery) {
    FLICK_ASSIGN_OR_RETURN(Tensor all, m.seg->forward(m.levels[0], m.levels[1], memory, m.prompt.t,
                                                      m.prompt_valid.t, hs_last));
    if (tap) tap("mask_logits", all);  // [1, Q, 4g, 4g]
    FLICK_TRY(sam3_attach_masks(*m.backend, all, det.query, m.frame_w, m.frame_h, output, det));
  } else if (!det.query.empty()) {
    FLICK_ASSIGN_OR_RETURN(Tensor kept, m.seg->forward(m.levels[0], m.levels[1], memory, m.prompt.t,
                                                       m.prompt_valid.t, hs_last, det.query));
    std::vector<int64_t> rows(det.query.size());
    std::iota(rows.begin(), rows.end(), int64_t{0});
    FLICK_TRY(sam3_attach_masks(*m.backend, kept, rows, m.frame_w, m.frame_h, output, det));
  } else if (output == Sam3MaskOutput::kProbabilities) {
    det.mask_prob = OwnedTensor(DType::F32, {0, m.frame_h, m.frame_w});
  }
  return det;
}

}  // namespace flick
