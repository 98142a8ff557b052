// models/pipelines/sam3_tracks: id association across frames, label maps,
// the JSON line (its RLE against the masks), the overlay drawing.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "io/coco_rle.h"
#include "models/pipelines/sam3_tracks.h"

namespace flick {
namespace {

constexpr int kW = 40, kH = 30;

Sam3Object rect(int prompt, int x0, int y0, int x1, int y1, float score = 0.9f) {
  Sam3Object o;
  o.prompt = prompt;
  o.score = score;
  std::vector<uint8_t> full(kW * kH, 0);
  for (int y = y0; y < y1; ++y) {
    for (int x = x0; x < x1; ++x) full[y * kW + x] = 1;
  }
  o.mask = boxed_mask_from_bytes(full.data(), kW, kH, kW);
  o.box_xyxy = {float(x0), float(y0), float(x1), float(y1)};
  return o;
}

std::vector<int64_t> ids_of(const std::vector<Sam3Object>& objs) {
  std::vector<int64_t> out;
  for (const auto& o : objs) out.push_back(o.id);
  return out;
}

std::vector<int64_t> step(Sam3Tracker& t, std::vector<Sam3Object> objs) {
  EXPECT_TRUE(t.assign(objs).ok());
  return ids_of(objs);
}

TEST(Sam3MaskIou, CountsPixels) {
  // 10x10 and the same shifted by 5 columns: 50 shared of 150.
  EXPECT_DOUBLE_EQ(boxed_mask_iou(rect(0, 0, 0, 10, 10).mask, rect(0, 5, 0, 15, 10).mask),
                   50.0 / 150);
  EXPECT_DOUBLE_EQ(boxed_mask_iou(rect(0, 0, 0, 0, 0).mask, rect(0, 0, 0, 0, 0).mask), 0);
}

TEST(Sam3Tracker, KeepsIdsOfMovingObjects) {
  Sam3Tracker t;
  // Two objects moving 2 px per frame in opposite directions, listed in a
  // different order on odd frames: ids follow the masks, not the order.
  for (int f = 0; f < 6; ++f) {
    Sam3Object a = rect(0, 2 + 2 * f, 2, 12 + 2 * f, 12);
    Sam3Object b = rect(0, 28 - 2 * f, 15, 38 - 2 * f, 28);
    if (f % 2 == 0) {
      EXPECT_EQ(step(t, {a, b}), (std::vector<int64_t>{1, 2})) << f;
    } else {
      EXPECT_EQ(step(t, {b, a}), (std::vector<int64_t>{2, 1})) << f;
    }
  }
  EXPECT_EQ(t.ids_issued(), 2);
}

TEST(Sam3Tracker, NewIdsAreNeverReused) {
  Sam3TrackerOptions o;
  o.max_missed = 1;
  Sam3Tracker t(o);
  EXPECT_EQ(step(t, {rect(0, 0, 0, 10, 10)}), (std::vector<int64_t>{1}));
  EXPECT_EQ(step(t, {}), (std::vector<int64_t>{}));  // missed once: remembered
  EXPECT_EQ(step(t, {rect(0, 1, 0, 11, 10)}), (std::vector<int64_t>{1}));
  EXPECT_EQ(step(t, {}), (std::vector<int64_t>{}));
  EXPECT_EQ(step(t, {}), (std::vector<int64_t>{}));  // missed twice: forgotten
  EXPECT_EQ(step(t, {rect(0, 1, 0, 11, 10)}), (std::vector<int64_t>{2}));
  // Another object in the same place under another prompt: its own id.
  EXPECT_EQ(step(t, {rect(0, 1, 0, 11, 10), rect(1, 1, 0, 11, 10)}), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.ids_issued(), 3);
}

TEST(Sam3Tracker, GreedyHighestIouFirstAndMinimumIou) {
  Sam3Tracker t;
  ASSERT_EQ(step(t, {rect(0, 0, 0, 10, 10)}), (std::vector<int64_t>{1}));
  // Two candidates for object 1: IoU 0.6 (shift 2.5 -> 60/100... use 4 px:
  // 60/140 = 0.43) and IoU 0.82 (shift 1: 90/110); the better one wins, the
  // other is new.
  EXPECT_EQ(step(t, {rect(0, 4, 0, 14, 10), rect(0, 1, 0, 11, 10)}), (std::vector<int64_t>{2, 1}));
  // Below min_iou (0.3): shift 6 gives 40/160 = 0.25 against object 1's
  // last mask [1, 11), and 0.43 against object 2's [4, 14) -> 2.
  EXPECT_EQ(step(t, {rect(0, 8, 0, 18, 10)}), (std::vector<int64_t>{2}));
  EXPECT_EQ(step(t, {rect(0, 30, 20, 40, 30)}), (std::vector<int64_t>{3}));
}

TEST(Sam3LabelMap, HigherScoreWinsOverlaps) {
  std::vector<Sam3Object> objs = {rect(0, 0, 0, 20, 20, 0.6f), rect(1, 10, 10, 30, 30, 0.9f),
                                  rect(0, 5, 5, 15, 15, 0.7f)};
  objs[0].id = 5;
  objs[1].id = 300;
  objs[2].id = 65535;
  auto m = sam3_label_map(objs, kW, kH);
  ASSERT_TRUE(m.ok()) << m.status().message();
  auto at = [&](int x, int y) { return m->ids[y * kW + x]; };
  EXPECT_EQ(at(0, 0), 5);
  EXPECT_EQ(at(7, 7), 65535);  // 0.7 over 0.6
  EXPECT_EQ(at(12, 12), 300);  // 0.9 over both
  EXPECT_EQ(at(25, 25), 300);
  EXPECT_EQ(at(35, 5), 0);
  objs[0].id = 65536;
  EXPECT_FALSE(sam3_label_map(objs, kW, kH).ok());
}

TEST(Sam3JsonLine, ParsesAndItsRleDecodesToTheMask) {
  std::vector<Sam3Object> objs = {rect(1, 3, 4, 17, 9, 0.75f), rect(0, 20, 10, 21, 30, 0.5f)};
  objs[0].id = 7;
  objs[1].id = 8;
  const std::vector<std::string> prompts = {"red car", "person \"quoted\""};
  const std::string line = sam3_json_line(4, 12, objs, prompts, kW, kH);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["frame"], 4);
  EXPECT_EQ(j["source_frame"], 12);
  EXPECT_EQ(j["width"], kW);
  EXPECT_EQ(j["height"], kH);
  ASSERT_EQ(j["objects"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto& o = j["objects"][i];
    EXPECT_EQ(o["id"], objs[i].id);
    EXPECT_EQ(o["prompt"], prompts[objs[i].prompt]);
    EXPECT_EQ(o["prompt_index"], objs[i].prompt);
    EXPECT_FLOAT_EQ(o["score"].get<float>(), objs[i].score);
    EXPECT_EQ(o["box"].get<std::vector<float>>(),
              std::vector<float>(objs[i].box_xyxy.begin(), objs[i].box_xyxy.end()));
    EXPECT_EQ(o["rle"]["size"], (std::vector<int>{kH, kW}));
    auto rle = coco_rle_from_string(o["rle"]["counts"].get<std::string>(), kH, kW);
    ASSERT_TRUE(rle.ok()) << rle.status().message();
    EXPECT_EQ(coco_rle_decode(*rle), boxed_mask_full(objs[i].mask));
    EXPECT_EQ(o["area"], i == 0 ? 14 * 5 : 20);
  }
  // A frame without detections is still a line.
  EXPECT_EQ(nlohmann::json::parse(sam3_json_line(0, 0, {}, prompts, kW, kH))["objects"].size(), 0u);
}

TEST(Sam3Overlay, TintsMasksAndOutlinesBoxes) {
  Frame f{kW * 4, kH * 4, std::vector<uint8_t>(size_t(kW) * kH * 48, 100)};
  Sam3Object o;
  o.prompt = 0;
  o.id = 3;
  o.score = 0.5f;
  std::vector<uint8_t> full(size_t(f.width) * f.height, 0);
  for (int y = 60; y < 100; ++y) {
    for (int x = 40; x < 120; ++x) full[y * f.width + x] = 1;
  }
  o.mask = boxed_mask_from_bytes(full.data(), f.width, f.height, f.width);
  o.box_xyxy = {40, 60, 120, 100};
  draw_sam3_overlay(f, {o}, {"dog"});
  const Rgb c = sam3_id_color(3);
  auto px = [&](int x, int y) { return &f.rgb[(size_t(y) * f.width + x) * 3]; };
  // Inside the mask, away from the outline: round(c * 0.45 + 100 * 0.55).
  const uint8_t* in = px(80, 80);
  EXPECT_EQ(in[0], std::lround(c.r * 0.45 + 100 * 0.55));
  EXPECT_EQ(in[1], std::lround(c.g * 0.45 + 100 * 0.55));
  EXPECT_EQ(in[2], std::lround(c.b * 0.45 + 100 * 0.55));
  // On the box outline: the id's colour.
  EXPECT_EQ(px(40, 80)[0], c.r);
  EXPECT_EQ(px(119, 80)[1], c.g);
  // Far from everything: untouched.
  EXPECT_EQ(px(150, 5)[0], 100);
  EXPECT_EQ(px(5, 115)[2], 100);
  // The label plate above the box (9 px high at this size: text 7 + 2 x 1
  // padding) darkens what it covers: black at alpha 0.6; its padding row
  // holds no text.
  EXPECT_EQ(px(41, 51)[0], 40);
  EXPECT_EQ(px(41, 50)[0], 100);
  // Different ids, different colours.
  const Rgb c4 = sam3_id_color(4);
  EXPECT_FALSE(c4.r == c.r && c4.g == c.g && c4.b == c.b);
}

}  // namespace
}  // namespace flick
