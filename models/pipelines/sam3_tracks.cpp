#include "models/pipelines/sam3_tracks.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>

namespace flick {
Status Sam3Tracker::assign(std::vector<Sam3Object>& objects) {
  const int64_t frame = frame_++;
  // Forget what was not seen for too long.
  std::erase_if(tracks_,
                [&](const Track& t) { return frame - t.last_seen > options_.max_missed + 1; });
  struct Pair {
    double iou;
    int64_t id;
    size_t track, det;
  };
  std::vector<Pair> pairs;
  for (size_t t = 0; t < tracks_.size(); ++t) {
    for (size_t d = 0; d < objects.size(); ++d) {
      const Track& tr = tracks_[t];
      if (tr.prompt != objects[d].prompt) continue;
      const double iou = boxed_mask_iou(tr.mask, objects[d].mask);
      if (iou >= options_.min_iou && iou > 0) pairs.push_back({iou, tr.id, t, d});
    }
  }
  std::sort(pairs.begin(), pairs.end(), [](const Pair& a, const Pair& b) {
    if (a.iou != b.iou) return a.iou > b.iou;
    if (a.id != b.id) return a.id < b.id;
    return a.det < b.det;
  });
  std::vector<bool> track_used(tracks_.size()), det_used(objects.size());
  for (const Pair& p : pairs) {
    if (track_used[p.track] || det_used[p.det]) continue;
    track_used[p.track] = det_used[p.det] = true;
    objects[p.det].id = p.id;
  }
  for (size_t d = 0; d < objects.size(); ++d) {
    if (det_used[d]) continue;
    if (next_id_ > kMaxLabelId) {
      return invalid_input("more than " + std::to_string(kMaxLabelId) +
                           " object ids: the 16-bit label PNGs cannot hold more");
    }
    objects[d].id = next_id_++;
    tracks_.push_back({objects[d].id, objects[d].prompt, frame, {}});
    track_used.push_back(true);
    det_used[d] = true;
  }
  // The matched and new objects' masks become their tracks' latest.
  for (size_t d = 0; d < objects.size(); ++d) {
    for (Track& t : tracks_) {
      if (t.id != objects[d].id) continue;
      t.last_seen = frame;
      t.mask = objects[d].mask;
    }
  }
  return ok_status();
}

Expected<LabelMap> sam3_label_map(const std::vector<Sam3Object>& objects, int width, int height) {
  LabelMap m;
  m.width = width;
  m.height = height;
  m.ids.assign(static_cast<size_t>(width) * height, 0);
  std::vector<size_t> order(objects.size());
  std::iota(order.begin(), order.end(), 0);
  // Lowest score first, so the highest is drawn last and wins.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return objects[a].score < objects[b].score; });
  for (size_t i : order) {
    const Sam3Object& o = objects[i];
    if (o.id <= 0 || o.id > kMaxLabelId) {
      return internal_error("object id " + std::to_string(o.id) + " outside 1.." +
                            std::to_string(kMaxLabelId));
    }
    const BoxedMask& mask = o.mask;
    if (mask.width != width || mask.height != height) {
      return internal_error("object mask size does not match the frame");
    }
    for (int y = mask.y0; y < mask.y1; ++y)
      for (int x = mask.x0; x < mask.x1; ++x)
        if (mask.at(x, y))
          m.ids[static_cast<size_t>(y) * static_cast<size_t>(width) + static_cast<size_t>(x)] =
              static_cast<uint16_t>(o.id);
  }
  return m;
}

std::string sam3_json_line(int64_t frame, int64_t source_frame,
                           const std::vector<Sam3Object>& objects,
                           const std::vector<std::string>& prompts, int width, int height) {
  nlohmann::ordered_json line;
  line["frame"] = frame;
  line["source_frame"] = source_frame;
  line["width"] = width;
  line["height"] = height;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const Sam3Object& o : objects) {
    const CocoRle rle = coco_rle_encode(o.mask);
    nlohmann::ordered_json j;
    j["id"] = o.id;
    j["prompt"] = prompts.at(static_cast<size_t>(o.prompt));
    j["prompt_index"] = o.prompt;
    j["score"] = o.score;
    j["box"] = {o.box_xyxy[0], o.box_xyxy[1], o.box_xyxy[2], o.box_xyxy[3]};
    j["area"] = coco_rle_area(rle);
    j["rle"] = {{"size", {rle.height, rle.width}}, {"counts", coco_rle_to_string(rle.counts)}};
    list.push_back(std::move(j));
  }
  line["objects"] = std::move(list);
  // Prompts are the user's text: invalid UTF-8 is replaced, never thrown on.
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Rgb sam3_id_color(int64_t id) {
  // Golden-angle hues at full saturation, so neighbouring ids differ.
  const double h = std::fmod(static_cast<double>(id) * 137.50776405, 360.0) / 60.0;
  const double x = 1 - std::fabs(std::fmod(h, 2.0) - 1);
  double r = 0, g = 0, b = 0;
  switch (static_cast<int>(h)) {
    case 0: r = 1, g = x; break;
    case 1: r = x, g = 1; break;
    case 2: g = 1, b = x; break;
    case 3: g = x, b = 1; break;
    case 4: r = x, b = 1; break;
    default: r = 1, b = x; break;
  }
  auto c = [](double v) { return static_cast<uint8_t>(std::lround(40 + 215 * v)); };
  return {c(r), c(g), c(b)};
}

void draw_sam3_overlay(Frame& frame, const std::vector<Sam3Object>& objects,
                       const std::vector<std::string>& prompts) {
  constexpr float kTint = 0.45f;
  const int line = std::max(1, std::min(frame.width, frame.height) / 200);
  const int scale = std::max(1, std::min(frame.width, frame.height) / 300);
  for (const Sam3Object& o : objects) {
    const BoxedMask& mask = o.mask;
    if (mask.width != frame.width || mask.height != frame.height) continue;
    const Rgb c = sam3_id_color(o.id);
    for (int y = mask.y0; y < mask.y1; ++y)
      for (int x = mask.x0; x < mask.x1; ++x)
        if (mask.at(x, y)) blend_pixel(frame, x, y, c, kTint);
  }
  // Boxes and labels over every mask.
  for (const Sam3Object& o : objects) {
    const Rgb c = sam3_id_color(o.id);
    const int x0 = static_cast<int>(std::floor(o.box_xyxy[0]));
    const int y0 = static_cast<int>(std::floor(o.box_xyxy[1]));
    const int x1 = static_cast<int>(std::ceil(o.box_xyxy[2]));
    const int y1 = static_cast<int>(std::ceil(o.box_xyxy[3]));
    const int w = std::max(1, x1 - x0), h = std::max(1, y1 - y0);
    fill_rounded_rect(frame, x0, y0, w, line, 0, c, 1);
    fill_rounded_rect(frame, x0, y1 - line, w, line, 0, c, 1);
    fill_rounded_rect(frame, x0, y0, line, h, 0, c, 1);
    fill_rounded_rect(frame, x1 - line, y0, line, h, 0, c, 1);
    char score[16];
    std::snprintf(score, sizeof score, "%.2f", o.score);
    const std::string label =
        prompts.at(static_cast<size_t>(o.prompt)) + " " + std::to_string(o.id) + " " + score;
    const int pad = scale;
    const int tw = text_width(label, scale) + 2 * pad, th = text_height(scale) + 2 * pad;
    const int ty = y0 - th >= 0 ? y0 - th : y0;  // above the box, or inside when at the top
    fill_rounded_rect(frame, x0, ty, tw, th, 0, {0, 0, 0}, 0.6f);
    draw_text(frame, x0 + pad, ty + pad, label, scale, c);
  }
}

}  // namespace flick
