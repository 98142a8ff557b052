#include "models/sam3/postprocess.h"

#include <cmath>
#include <string>
#include <vector>

namespace flick {
namespace {

float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

}  // namespace

Expected<Sam3Detections> sam3_select(const Tensor& logits, float presence_logit,
                                     const Tensor& boxes, float threshold, int width, int height) {
  const int64_t nq = logits.ndim() == 1 ? logits.dim(0) : 0;
  if (logits.dtype != DType::F32 || nq < 1 || !logits.is_contiguous() ||
      boxes.dtype != DType::F32 || boxes.shape != Shape{nq, 4} || !boxes.is_contiguous())
    return invalid_input(
        "SAM3 post-processing: expected F32 logits [Q] and F32 boxes [Q, 4]; got " + logits.str() +
        ", " + boxes.str());
  if (!(threshold >= 0.f && threshold < 1.f))
    return invalid_input("SAM3 post-processing: threshold " + std::to_string(threshold) +
                         " is outside [0, 1)");
  if (width < 1 || height < 1)
    return invalid_input("SAM3 post-processing: frame size " + std::to_string(width) + "x" +
                         std::to_string(height) + " is empty");

  Sam3Detections det;
  const float presence = sigmoid(presence_logit);
  const float* l = logits.ptr<float>();
  const float* b = boxes.ptr<float>();
  const float w = static_cast<float>(width), h = static_cast<float>(height);
  for (int64_t q = 0; q < nq; ++q) {
    const float prob = sigmoid(l[q]) * presence;
    if (!(prob > threshold)) continue;
    det.query.push_back(q);
    det.score.push_back(prob);
    const float* r = b + q * 4;  // box_ops.box_cxcywh_to_xyxy, then * scale_fct
    det.box_xyxy.push_back({(r[0] - 0.5f * r[2]) * w, (r[1] - 0.5f * r[3]) * h,
                            (r[0] + 0.5f * r[2]) * w, (r[1] + 0.5f * r[3]) * h});
  }
  return det;
}

Status sam3_attach_masks(Backend& backend, const Tensor& mask_logits,
                         const std::vector<int64_t>& rows, int width, int height,
                         Sam3MaskOutput output, Sam3Detections& det) {
  const int64_t n = static_cast<int64_t>(det.query.size());
  const int64_t nr = mask_logits.ndim() == 4 ? mask_logits.dim(1) : 0;
  bool rows_ok = rows.size() == det.query.size();
  for (const int64_t r : rows) rows_ok = rows_ok && r >= 0 && r < nr;
  if (mask_logits.ndim() != 4 || mask_logits.dim(0) != 1 || !rows_ok ||
      (mask_logits.dtype != DType::F32 && mask_logits.dtype != DType::BF16))
    return invalid_input(
        "SAM3 post-processing: expected mask logits [1, R, h, w] (F32 or BF16) "
        "and a row below R for each of the " +
        std::to_string(n) + " detections; got " + mask_logits.str() + " and " +
        std::to_string(rows.size()) + " rows");
  if (width < 1 || height < 1)
    return invalid_input("SAM3 post-processing: frame size " + std::to_string(width) + "x" +
                         std::to_string(height) + " is empty");
  const bool keep_prob = output == Sam3MaskOutput::kProbabilities;
  if (keep_prob) det.mask_prob = OwnedTensor(DType::F32, {n, height, width});
  OwnedTensor plane;  // [1, 1, H, W]: the mask being binarised, reused
  if (!keep_prob && n > 0) plane = OwnedTensor(DType::F32, {1, 1, height, width});
  det.masks.clear();
  det.masks.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const Tensor src = mask_logits.slice(1, rows[static_cast<size_t>(i)], 1);  // [1, 1, h, w]
    Tensor dst =
        keep_prob ? det.mask_prob.t.slice(0, i, 1).reshape({1, 1, height, width}) : plane.t;
    backend.resize(src, dst, ResizeMode::Bilinear, /*align_corners=*/false, /*antialias=*/false);
    backend.activation(dst, dst, Activation::Sigmoid);
    det.masks.push_back(boxed_mask_above(dst.ptr<float>(), width, height, width, 0.5f));
  }
  return ok_status();
}

Expected<Sam3Detections> sam3_postprocess(Backend& backend, const Tensor& logits,
                                          float presence_logit, const Tensor& boxes,
                                          const Tensor& mask_logits, float threshold, int width,
                                          int height, Sam3MaskOutput output) {
  const int64_t nq = logits.ndim() == 1 ? logits.dim(0) : 0;
  if (mask_logits.ndim() != 4 || mask_logits.dim(1) != nq)
    return invalid_input("SAM3 post-processing: expected mask logits [1, Q, h, w] for " +
                         std::to_string(nq) + " queries; got " + mask_logits.str());
  FLICK_ASSIGN_OR_RETURN(Sam3Detections det,
                         sam3_select(logits, presence_logit, boxes, threshold, width, height));
  FLICK_TRY(sam3_attach_masks(backend, mask_logits, det.query, width, height, output, det));
  return det;
}

}  // namespace flick
