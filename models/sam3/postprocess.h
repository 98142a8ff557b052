// EfficientSAM3 post-processing (sam3/model/sam3_image_processor.py
// Sam3Processor._forward_grounding), from the last decoder layer's outputs to
// detections on the original frame:
//
//   prob  = sigmoid(logit) * sigmoid(presence)        // supervise_joint_box_scores=False
//   keep  = prob > threshold                          // strict; no NMS
//   box   = cxcywh_to_xyxy(ref) * [W, H, W, H]        // pixels
//   mask  = sigmoid(bilinear(mask_logits, H x W, align_corners=False))   // no antialias
//   binary mask = mask > 0.5
//
// (The processor stores the sigmoid as "masks_logits": errata A8.) Only the
// kept queries' masks are resized, one at a time into one frame-sized plane,
// and kept binary, boxed (io/boxed_mask.h); the probabilities themselves
// ([N, H, W] floats: 737 MB for 200 queries at 1280x720) only on request.
// The outputs are data-dependent in size and are returned in owned buffers.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "io/boxed_mask.h"
#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace flick {

struct Sam3Detections {
  std::vector<int64_t> query;                  // kept query indices, ascending
  std::vector<float> score;                    // prob of each kept query
  std::vector<std::array<float, 4>> box_xyxy;  // pixels, x0 y0 x1 y1
  std::vector<BoxedMask> masks;                // binary masks (prob > 0.5) at the frame's size
  OwnedTensor mask_prob;  // F32 [N, H, W], sigmoid of the upsampled logits: with kProbabilities
};

enum class Sam3MaskOutput {
  kBinary,         // masks only
  kProbabilities,  // masks and mask_prob
};

// Which queries' mask logits a prompt computes (Sam3ImageModel::detect).
enum class Sam3Masks {
  kKept,        // the kept queries' only: the detections are the same
  kEveryQuery,  // all Q, as the reference does (benchmarks against it)
};

// logits: F32 [Q] (the scoring's last layer), presence_logit: the decoder's
// last presence logit, boxes: F32 [Q, 4] cxcywh in [0, 1] (the last refined
// references), mask_logits: [1, Q, h, w] (F32 or BF16). width / height: the
// original frame. threshold in [0, 1).
Expected<Sam3Detections> sam3_postprocess(Backend& backend, const Tensor& logits,
                                          float presence_logit, const Tensor& boxes,
                                          const Tensor& mask_logits, float threshold, int width,
                                          int height,
                                          Sam3MaskOutput output = Sam3MaskOutput::kBinary);

// sam3_postprocess in two steps, so that a caller computes mask logits only
// for the queries kept (the pixel decoder and the mask product are a fifth
// of a prompt's time and are not needed where nothing passes the threshold):
//  - sam3_select: query, score and box_xyxy of the kept queries (no masks);
//  - sam3_attach_masks: masks (and mask_prob) of det's queries, the mask of
//    det.query[i] being row rows[i] of mask_logits [1, R, h, w].
Expected<Sam3Detections> sam3_select(const Tensor& logits, float presence_logit,
                                     const Tensor& boxes, float threshold, int width, int height);
Status sam3_attach_masks(Backend& backend, const Tensor& mask_logits,
                         const std::vector<int64_t>& rows, int width, int height,
                         Sam3MaskOutput output, Sam3Detections& det);

}  // namespace flick
