#include "models/sam3/postprocess.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/dtype.h"

namespace flick {
namespace {

float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

// A binary mask's pixel is set where sigmoid(its bilinear logit) > 0.5, and
// that logit is a mean of at most 2 x 2 mask cells with weights >= 0 summing
// to 1 (up to rounding). Where every cell it reads is <= kUnsetLogit its
// logit is <= -1 + 1e-6 (sigmoid 0.27): never set. So only the pixels that
// read a cell above kUnsetLogit are resized, and those exactly as the whole
// plane's resize computes them (Backend::resize_window).
constexpr float kUnsetLogit = -1.f;

// The output pixels [lo, hi) of a bilinear resize (align_corners false) from
// `in` to `out` that read any input cell of [c0, c1): pixel o reads cells
// floor(s) and floor(s) + 1 of s = (o + 0.5) * in / out - 0.5 (clamped to the
// image), so cell c is read for (c - 0.5) * out / in - 0.5 <= o < (c + 1.5) *
// out / in - 0.5; a pixel more each side covers the rounding of s.
struct Span {
  int64_t lo, hi;
};
Span bilinear_reach(int64_t c0, int64_t c1, int64_t in, int64_t out) {
  const double r = static_cast<double>(out) / static_cast<double>(in);
  const auto lo = static_cast<int64_t>(std::floor((static_cast<double>(c0) - 0.5) * r - 0.5)) - 1;
  const auto hi = static_cast<int64_t>(std::ceil((static_cast<double>(c1) + 0.5) * r - 0.5)) + 2;
  return {std::clamp<int64_t>(lo, 0, out), std::clamp<int64_t>(hi, 0, out)};
}

// The box [x0, x1) x [y0, y1) of the cells of a [1, 1, h, w] mask above
// kUnsetLogit (x1 == 0 when none is).
struct CellBox {
  int64_t x0, y0, x1, y1;
};
template <class T>
CellBox cells_above_of(const T* m, int64_t h, int64_t w, int64_t sy, int64_t sx) {
  CellBox b{w, h, 0, 0};
  for (int64_t y = 0; y < h; ++y) {
    const T* row = m + y * sy;
    int64_t first = w, last = -1;
    for (int64_t x = 0; x < w; ++x) {
      float v;
      if constexpr (std::is_same_v<T, uint16_t>)
        v = bf16_to_f32(row[x * sx]);
      else
        v = row[x * sx];
      if (v > kUnsetLogit) first = std::min(first, x), last = x;
    }
    if (last < 0) continue;
    b.x0 = std::min(b.x0, first), b.x1 = std::max(b.x1, last + 1);
    b.y0 = std::min(b.y0, y), b.y1 = y + 1;
  }
  return b;
}
CellBox cells_above(const Tensor& m) {  // m: F32 or BF16 (checked by the caller)
  const int64_t h = m.dim(2), w = m.dim(3), sy = m.stride(2), sx = m.stride(3);
  if (m.dtype == DType::BF16)
    return cells_above_of(static_cast<const uint16_t*>(m.data), h, w, sy, sx);
  return cells_above_of(static_cast<const float*>(m.data), h, w, sy, sx);
}

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
  det.masks.clear();
  det.masks.reserve(static_cast<size_t>(n));
  if (keep_prob) {  // every pixel's probability (the golden tests)
    for (int64_t i = 0; i < n; ++i) {
      const Tensor src = mask_logits.slice(1, rows[static_cast<size_t>(i)], 1);  // [1, 1, h, w]
      Tensor dst = det.mask_prob.t.slice(0, i, 1).reshape({1, 1, height, width});
      backend.resize(src, dst, ResizeMode::Bilinear, /*align_corners=*/false,
                     /*antialias=*/false);
      backend.activation(dst, dst, Activation::Sigmoid);
      det.masks.push_back(boxed_mask_above(dst.ptr<float>(), width, height, width, 0.5f));
    }
    return ok_status();
  }
  // Binary masks: each resized in the window its cells above kUnsetLogit
  // reach (a 4K frame's detection costs its box, not 8.3 M pixels).
  OwnedTensor plane;  // the window being binarised, in a frame-sized buffer reused
  if (n > 0) plane = OwnedTensor(DType::F32, {int64_t{height} * width});
  for (int64_t i = 0; i < n; ++i) {
    const Tensor src = mask_logits.slice(1, rows[static_cast<size_t>(i)], 1);  // [1, 1, h, w]
    const CellBox c = cells_above(src);
    if (c.x1 == 0) {  // no pixel can be set
      BoxedMask& m = det.masks.emplace_back();
      m.width = width;
      m.height = height;
      continue;
    }
    const Span ys = bilinear_reach(c.y0, c.y1, src.dim(2), height);
    const Span xs = bilinear_reach(c.x0, c.x1, src.dim(3), width);
    const int64_t wh = ys.hi - ys.lo, ww = xs.hi - xs.lo;  // >= 1: the box's cells are read
    Tensor win = plane.t.slice(0, 0, wh * ww).reshape({1, 1, wh, ww});
    backend.resize_window(src, win, ResizeWindow{height, width, ys.lo, xs.lo}, ResizeMode::Bilinear,
                          /*align_corners=*/false, /*antialias=*/false);
    backend.activation(win, win, Activation::Sigmoid);
    det.masks.push_back(boxed_mask_above_window(win.ptr<float>(), static_cast<int>(xs.lo),
                                                static_cast<int>(ys.lo), static_cast<int>(ww),
                                                static_cast<int>(wh), ww, width, height, 0.5f));
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
