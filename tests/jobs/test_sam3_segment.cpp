// models/pipelines/sam3_segment: the frame loop (sources, every_n, label
// PNGs, detections.jsonl, overlay state, progress, stop, taps) over a fake
// model whose detections are known: each 4-connected region of a prompt's
// colour ("red", "blue") is one detection. The real model is tested in
// tests/sam3 and end to end in tests/integration/test_sam3_segment.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/coco_rle.h"
#include "io/frame_archive.h"
#include "io/image.h"
#include "io/label_png.h"
#include "io/video.h"
#include "jobs_test_util.h"
#include "models/pipelines/sam3_segment.h"

namespace flick {
namespace {

using testing::ScratchDir;

constexpr int kW = 64, kH = 48;

bool is_color(const uint8_t* p, std::string_view prompt) {
  if (prompt == "red") return p[0] > 128 && p[1] < 128 && p[2] < 128;
  if (prompt == "blue") return p[2] > 128 && p[0] < 128 && p[1] < 128;
  return false;
}

class FakeModel : public Sam3FrameModel {
 public:
  Status encode_image(const FrameView& f, const Tap& tap) override {
    frame_ = Frame{f.width, f.height, {}};
    for (int y = 0; y < f.height; ++y) {
      frame_.rgb.insert(frame_.rgb.end(), f.rgb + y * f.stride, f.rgb + y * f.stride + 3 * f.width);
    }
    ++encodes;
    if (tap) {
      float v = static_cast<float>(encodes);
      tap("pixels", Tensor::view(&v, DType::F32, {1}));
    }
    return ok_status();
  }

  Expected<Sam3Detections> detect(std::string_view prompt, float threshold,
                                  const Tap& tap) override {
    const int w = frame_.width, h = frame_.height;
    std::vector<int> comp(size_t(w) * h, -1);
    std::vector<std::vector<int>> regions;
    for (int i = 0; i < w * h; ++i) {
      if (comp[i] >= 0 || !is_color(&frame_.rgb[3 * size_t(i)], prompt)) continue;
      const int c = static_cast<int>(regions.size());
      regions.emplace_back();
      std::vector<int> stack = {i};
      comp[i] = c;
      while (!stack.empty()) {
        const int p = stack.back();
        stack.pop_back();
        regions[c].push_back(p);
        const int x = p % w, y = p / w;
        const int nb[4][2] = {{x - 1, y}, {x + 1, y}, {x, y - 1}, {x, y + 1}};
        for (const auto& n : nb) {
          if (n[0] < 0 || n[1] < 0 || n[0] >= w || n[1] >= h) continue;
          const int q = n[1] * w + n[0];
          if (comp[q] < 0 && is_color(&frame_.rgb[3 * size_t(q)], prompt)) {
            comp[q] = c;
            stack.push_back(q);
          }
        }
      }
    }
    Sam3Detections d;
    std::vector<size_t> kept;
    for (size_t r = 0; r < regions.size(); ++r) {
      const float score = 0.9f - 0.2f * static_cast<float>(r);
      if (score > threshold) kept.push_back(r);
    }
    for (size_t k = 0; k < kept.size(); ++k) {
      const auto& reg = regions[kept[k]];
      std::vector<uint8_t> full(size_t(w) * h, 0);
      float x0 = w, y0 = h, x1 = 0, y1 = 0;
      for (int p : reg) {
        full[size_t(p)] = 1;
        x0 = std::min<float>(x0, p % w);
        y0 = std::min<float>(y0, p / w);
        x1 = std::max<float>(x1, p % w + 1);
        y1 = std::max<float>(y1, p / w + 1);
      }
      d.masks.push_back(boxed_mask_from_bytes(full.data(), w, h, w));
      d.query.push_back(static_cast<int64_t>(kept[k]));
      d.score.push_back(0.9f - 0.2f * static_cast<float>(kept[k]));
      d.box_xyxy.push_back({x0, y0, x1, y1});
    }
    if (tap) tap("scores", Tensor::view(d.score.data(), DType::F32, {int64_t(d.score.size())}));
    return d;
  }

  int encodes = 0;

 private:
  Frame frame_;
};

// Source frame t: red squares A (moving right) and B (moving down), a blue
// square C standing still, on grey.
Frame scene(int t) {
  Frame f{kW, kH, std::vector<uint8_t>(size_t(kW) * kH * 3, 90)};
  auto square = [&](int x0, int y0, int s, uint8_t r, uint8_t g, uint8_t b) {
    for (int y = y0; y < y0 + s; ++y) {
      for (int x = x0; x < x0 + s; ++x) {
        uint8_t* p = &f.rgb[(size_t(y) * kW + x) * 3];
        p[0] = r, p[1] = g, p[2] = b;
      }
    }
  };
  square(2 + t, 4, 10, 220, 30, 30);  // A
  square(40, 2 + t, 8, 200, 20, 40);  // B
  square(20, 30, 12, 20, 30, 230);    // C
  return f;
}

class RecordingSink : public FrameSink {
 public:
  Status begin(int w, int h, double f, int64_t t) override {
    width = w, height = h, fps = f, total = t;
    return ok_status();
  }
  Status write(const FrameView& f) override {
    Frame copy{f.width, f.height, {}};
    for (int y = 0; y < f.height; ++y) {
      copy.rgb.insert(copy.rgb.end(), f.rgb + y * f.stride, f.rgb + y * f.stride + 3 * f.width);
    }
    frames.push_back(std::move(copy));
    order.push_back("frame");
    return ok_status();
  }
  Status finish() override {
    ++finishes;
    return ok_status();
  }
  Status write_side_file(const std::string& name, const void* data, size_t size) override {
    side[name] = std::string(static_cast<const char*>(data), size);
    order.push_back(name);
    return ok_status();
  }
  Status append_side_file(const std::string& name, const void* data, size_t size) override {
    EXPECT_EQ(finishes, 0) << "append after finish";
    side[name].append(static_cast<const char*>(data), size);
    order.push_back("+" + name);
    return ok_status();
  }
  int width = 0, height = 0, finishes = 0;
  double fps = 0;
  int64_t total = 0;
  std::vector<Frame> frames;
  std::map<std::string, std::string> side;
  std::vector<std::string> order;  // side files by name, "+name" appends, "frame" writes
};

std::vector<std::string> write_scene_files(const ScratchDir& dir, int n) {
  std::vector<std::string> files;
  for (int t = 0; t < n; ++t) {
    char name[32];
    std::snprintf(name, sizeof name, "f%03d.png", t);
    files.push_back(dir / name);
    EXPECT_TRUE(write_png(files.back(), scene(t).view(), 1).ok());
  }
  return files;
}

LabelMap label(const RecordingSink& sink, int64_t k) {
  const std::string& png = sink.side.at(sam3_label_file_name(k));
  auto m = decode_label_png(reinterpret_cast<const uint8_t*>(png.data()), png.size(), "label");
  EXPECT_TRUE(m.ok()) << m.status().message();
  return *m;
}

// Checks everything a run over scene(0), scene(step), ... must give.
void check_scene_outputs(const RecordingSink& sink, int64_t frames, int step) {
  ASSERT_EQ(sink.finishes, 1);
  ASSERT_EQ(static_cast<int64_t>(sink.frames.size()), frames);
  std::istringstream lines(sink.side.at(kSam3DetectionsName));
  std::string line;
  std::map<int64_t, std::string> prompt_of;
  int64_t k = 0;
  for (; std::getline(lines, line); ++k) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["frame"], k);
    EXPECT_EQ(j["source_frame"], k * step);
    EXPECT_EQ(sink.frames[k].rgb, scene(static_cast<int>(k * step)).rgb) << "frame " << k;
    const LabelMap m = label(sink, k);
    ASSERT_EQ(j["objects"].size(), 3u);
    for (const auto& o : j["objects"]) {
      const int64_t id = o["id"];
      auto rle = coco_rle_from_string(o["rle"]["counts"].get<std::string>(), kH, kW);
      ASSERT_TRUE(rle.ok());
      const std::vector<uint8_t> mask = coco_rle_decode(*rle);
      for (size_t p = 0; p < mask.size(); ++p) {
        ASSERT_EQ(mask[p] != 0, m.ids[p] == id) << "frame " << k << " id " << id << " pixel " << p;
      }
      // Ids stay with their prompt.
      auto [it, fresh] = prompt_of.emplace(id, o["prompt"]);
      EXPECT_EQ(it->second, o["prompt"]);
    }
    // Object A's top-left pixel (source t: x = 2 + t, y = 4) keeps one id,
    // likewise B (40, 2 + t) and C (20, 30). At t = 0 B comes first in the
    // fake's scan order (row 2 before row 4), from t = 2 on A does: the ids
    // follow the masks, not the order.
    const int t = static_cast<int>(k * step);
    EXPECT_EQ(m.ids[4 * kW + 2 + t], 2) << k;
    EXPECT_EQ(m.ids[(2 + t) * kW + 40], 1) << k;
    EXPECT_EQ(m.ids[30 * kW + 20], 3) << k;  // C: blue, after both reds
    EXPECT_EQ(m.ids[0], 0);
  }
  EXPECT_EQ(k, frames);
  EXPECT_EQ(prompt_of.size(), 3u);
}

Sam3SegmentInput base_input() {
  Sam3SegmentInput in;
  in.prompts = {"red", "blue"};
  in.threshold = 0.5f;
  return in;
}

TEST(Sam3Segment, FileGlobEveryNthFrame) {
  ScratchDir dir;
  Sam3SegmentInput in = base_input();
  in.frame_files = write_scene_files(dir, 9);
  in.every_n = 2;
  ASSERT_TRUE(validate_sam3_segment_input(in).ok());
  FakeModel model;
  RecordingSink sink;
  auto overlay = std::make_shared<Sam3OverlayState>();
  std::vector<std::pair<int64_t, int64_t>> progress;
  RunContext ctx;
  ctx.progress = [&](int64_t d, int64_t t) { progress.emplace_back(d, t); };
  Sam3SegmentStats stats;
  Status s = run_sam3_segment(model, in, sink, ctx, overlay, {}, &stats);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(sink.width, kW);
  EXPECT_EQ(sink.height, kH);
  EXPECT_DOUBLE_EQ(sink.fps, 12.5);  // 25 / every_n
  EXPECT_EQ(sink.total, 5);
  EXPECT_EQ(model.encodes, 5);  // once per processed frame, not per prompt
  check_scene_outputs(sink, 5, 2);
  EXPECT_EQ(progress.back(), (std::pair<int64_t, int64_t>{5, 5}));
  EXPECT_EQ(progress.size(), 5u);
  EXPECT_EQ(stats.frames, 5);
  EXPECT_EQ(stats.detections, 15);
  EXPECT_EQ(stats.ids, 3);
  // The overlay state holds the last frame's objects.
  EXPECT_EQ(overlay->frame, 4);
  EXPECT_EQ(overlay->objects.size(), 3u);
  // Per frame: its label PNG, its line of detections.jsonl, the frame.
  const std::string append = "+" + std::string(kSam3DetectionsName);
  ASSERT_EQ(sink.order.size(), 15u);
  for (size_t k = 0; k < 5; ++k) {
    EXPECT_EQ(sink.order[3 * k], sam3_label_file_name(int64_t(k)));
    EXPECT_EQ(sink.order[3 * k + 1], append);
    EXPECT_EQ(sink.order[3 * k + 2], "frame");
  }
}

TEST(Sam3Segment, VideoAndArchiveGiveTheSameAsFiles) {
  ScratchDir dir;
  std::vector<Frame> frames;
  for (int t = 0; t < 7; ++t) frames.push_back(scene(t));
  VideoSpec spec;
  spec.file = "in.mkv";
  spec.codec = "ffv1";  // lossless: the colours stay what the fake model keys on
  spec.fps = 30;
  {
    auto w = VideoWriter::create(dir / "in.mkv", spec, kW, kH);
    ASSERT_TRUE(w.ok());
    for (const Frame& f : frames) ASSERT_TRUE((*w)->write(f.view()).ok());
    ASSERT_TRUE((*w)->finish().ok());
    auto a = FrameArchiveWriter::create(dir / "in.zst", kW, kH, 30, 3);
    ASSERT_TRUE(a.ok());
    for (const Frame& f : frames) ASSERT_TRUE((*a)->write(f.view()).ok());
    ASSERT_TRUE((*a)->finish().ok());
  }
  for (const char* which : {"video", "archive"}) {
    SCOPED_TRACE(which);
    Sam3SegmentInput in = base_input();
    (std::string(which) == "video" ? in.video : in.archive) =
        dir / (std::string(which) == "video" ? "in.mkv" : "in.zst");
    in.every_n = 3;
    ASSERT_TRUE(validate_sam3_segment_input(in).ok());
    FakeModel model;
    RecordingSink sink;
    Status s = run_sam3_segment(model, in, sink, {}, nullptr);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_DOUBLE_EQ(sink.fps, 10);   // 30 / 3
    check_scene_outputs(sink, 3, 3);  // source frames 0, 3, 6
  }
}

TEST(Sam3Segment, StopsBetweenFrames) {
  ScratchDir dir;
  Sam3SegmentInput in = base_input();
  in.frame_files = write_scene_files(dir, 4);
  std::atomic<bool> stop{false};
  RunContext ctx;
  ctx.stop = &stop;
  ctx.progress = [&](int64_t done, int64_t) {
    if (done == 2) stop = true;
  };
  FakeModel model;
  RecordingSink sink;
  Status s = run_sam3_segment(model, in, sink, ctx, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInterrupted);
  EXPECT_EQ(sink.frames.size(), 2u);
  EXPECT_EQ(sink.finishes, 0);
  EXPECT_EQ(model.encodes, 2);
}

TEST(Sam3Segment, TapsTheFirstFramesWithFrameAndPromptNames) {
  ScratchDir dir;
  Sam3SegmentInput in = base_input();
  in.frame_files = write_scene_files(dir, 4);
  FakeModel model;
  RecordingSink sink;
  std::vector<std::string> names;
  auto tap = [&](std::string_view name, const Tensor&) { names.emplace_back(name); };
  ASSERT_TRUE(run_sam3_segment(model, in, sink, {}, nullptr, tap).ok());
  EXPECT_EQ(names, (std::vector<std::string>{"f0.pixels", "f0.p0.scores", "f0.p1.scores",
                                             "f1.pixels", "f1.p0.scores", "f1.p1.scores"}));
}

TEST(Sam3Segment, ThresholdDropsDetections) {
  // Scores are 0.9, 0.7 for the two red regions: 0.8 keeps only the first.
  ScratchDir dir;
  Sam3SegmentInput in = base_input();
  in.frame_files = write_scene_files(dir, 1);
  in.threshold = 0.8f;
  FakeModel model;
  RecordingSink sink;
  ASSERT_TRUE(run_sam3_segment(model, in, sink, {}, nullptr).ok());
  const auto j = nlohmann::json::parse(sink.side.at(kSam3DetectionsName));
  ASSERT_EQ(j["objects"].size(), 2u);
  EXPECT_EQ(j["objects"][0]["prompt"], "red");
  EXPECT_EQ(j["objects"][1]["prompt"], "blue");
}

TEST(Sam3Segment, ValidationNamesTheProblem) {
  ScratchDir dir;
  const std::vector<std::string> files = write_scene_files(dir, 2);
  auto message = [&](auto edit) {
    Sam3SegmentInput in = base_input();
    in.frame_files = files;
    edit(in);
    Status s = validate_sam3_segment_input(in);
    EXPECT_FALSE(s.ok());
    return s.message();
  };
  EXPECT_NE(message([](auto& in) { in.prompts.clear(); }).find("input.prompts is empty"),
            std::string::npos);
  EXPECT_NE(message([](auto& in) {
              in.prompts = {"red", "  "};
            }).find("input.prompts[1] is empty"),
            std::string::npos);
  EXPECT_NE(message([](auto& in) { in.prompts = {std::string(300, 'a')}; }).find("300 bytes"),
            std::string::npos);
  EXPECT_NE(message([](auto& in) { in.threshold = 1; }).find("input.threshold"), std::string::npos);
  EXPECT_NE(message([](auto& in) { in.threshold = -0.1f; }).find("input.threshold"),
            std::string::npos);
  EXPECT_NE(message([](auto& in) { in.every_n = 0; }).find("every_n must be >= 1"),
            std::string::npos);
  // A frame of another size, a video that is not one.
  ASSERT_TRUE(write_png(dir / "odd.png", Frame{8, 8, std::vector<uint8_t>(192)}.view(), 1).ok());
  EXPECT_NE(
      message([&](auto& in) { in.frame_files.push_back(dir / "odd.png"); }).find(dir / "odd.png"),
      std::string::npos);
  testing::write_text(dir / "bad.mp4", "not a video at all");
  EXPECT_NE(message([&](auto& in) {
              in.frame_files.clear();
              in.video = dir / "bad.mp4";
            }).find(dir / "bad.mp4"),
            std::string::npos);
}

}  // namespace
}  // namespace flick
