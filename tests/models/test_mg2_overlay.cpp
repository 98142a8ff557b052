// The Matrix-Game action overlay, checked on pixels: the colour a pressed or
// released key's box must have (the alpha blend worked out by hand), the
// compass arrow's direction, and that nothing else of the frame changes.
#include <gtest/gtest.h>

#include <cmath>

#include "../io/av_decode.h"
#include "../io/io_test_util.h"
#include "io/output_sink.h"
#include "mg2_test_modes.h"
#include "models/pipelines/mg2_overlay.h"
#include "runtime/backend.h"

namespace flick {
namespace {

using testing::mg2_mode;

constexpr uint8_t kBackground = 100;

Frame grey(int w, int h) {
  Frame f;
  f.width = w;
  f.height = h;
  f.rgb.assign(static_cast<size_t>(w) * h * 3, kBackground);
  return f;
}

Rgb at(const Frame& f, int x, int y) {
  const uint8_t* p = &f.rgb[(static_cast<size_t>(y) * f.width + x) * 3];
  return {p[0], p[1], p[2]};
}

void expect_rgb(const Frame& f, float x, float y, Rgb c, const std::string& what) {
  const Rgb p = at(f, static_cast<int>(x), static_cast<int>(y));
  EXPECT_TRUE(p.r == c.r && p.g == c.g && p.b == c.b)
      << what << " at (" << x << ", " << y << "): got " << int(p.r) << "," << int(p.g) << ","
      << int(p.b) << ", expected " << int(c.r) << "," << int(c.g) << "," << int(c.b);
}

// Over the grey 100 background: pressed 0.8 * (0, 255, 0) + 0.2 * 100,
// released 0.5 * 200 + 0.5 * 100.
constexpr Rgb kPressedOnGrey{20, 224, 20};
constexpr Rgb kReleasedOnGrey{150, 150, 150};
// The compass disc is the released colour; the arrow is blended over it.
constexpr Rgb kArrowOnDisc{30, 234, 30};

const Mg2Overlay::KeyBox& box(const std::vector<Mg2Overlay::KeyBox>& boxes, const char* label) {
  for (const auto& b : boxes) {
    if (b.label == label) return b;
  }
  ADD_FAILURE() << "no box " << label;
  return boxes.front();
}

// A point inside the box, left of its label and clear of the rounded corners.
std::pair<int, int> fill_point(const Mg2Overlay::KeyBox& b) { return {b.x + 3, b.y + b.h / 2}; }

TEST(Mg2Overlay, UniversalLayoutIsWasd) {
  Mg2Overlay o(mg2_mode("universal"), mg2_idle_tracks(mg2_mode("universal"), 1));
  const auto boxes = o.key_boxes(640, 352);
  ASSERT_EQ(boxes.size(), 4u);
  const auto &w = box(boxes, "W"), &a = box(boxes, "A"), &s = box(boxes, "S"), &d = box(boxes, "D");
  EXPECT_EQ(w.channel, 0);
  EXPECT_EQ(s.channel, 1);
  EXPECT_EQ(a.channel, 2);
  EXPECT_EQ(d.channel, 3);
  EXPECT_EQ(w.h, 50);  // the reference's 50 px keys at 352 px
  EXPECT_EQ(w.x, s.x);
  EXPECT_LT(w.y + w.h, s.y);
  EXPECT_EQ(a.y, s.y);
  EXPECT_EQ(d.y, s.y);
  EXPECT_LT(a.x + a.w, s.x);
  EXPECT_LT(s.x + s.w, d.x);
  EXPECT_GT(a.x, 0);
  EXPECT_LT(s.y + s.h, 352);
  const auto c = o.compass(640, 352);
  ASSERT_TRUE(c);
  EXPECT_GT(c->cx - c->radius, d.x + d.w);  // bottom right, clear of the keys
  EXPECT_LT(c->cx + c->radius, 640);
  EXPECT_LT(c->cy + c->radius, 352);
}

TEST(Mg2Overlay, PressedKeysAreGreenAndTheArrowFollowsTheMouse) {
  const Mg2ModeSpec& u = mg2_mode("universal");
  Mg2Tracks t = mg2_idle_tracks(u, 3);
  t.keyboard[0 * 4 + 0] = 1;  // frame 0: w
  t.mouse[0 * 2 + 1] = 0.1f;  // frame 0: yaw right
  t.keyboard[1 * 4 + 2] = 1;  // frame 1: a + d
  t.keyboard[1 * 4 + 3] = 1;
  t.mouse[1 * 2 + 0] = 0.1f;  // frame 1: pitch up
  // frame 2: nothing
  Mg2Overlay o(u, t);
  const auto boxes = o.key_boxes(640, 352);
  const Mg2Overlay::Compass c = *o.compass(640, 352);

  Frame f0 = grey(640, 352);
  o.draw(0, f0);
  for (const char* label : {"W", "A", "S", "D"}) {
    const auto [x, y] = fill_point(box(boxes, label));
    expect_rgb(f0, x, y, std::string(label) == "W" ? kPressedOnGrey : kReleasedOnGrey, label);
  }
  // The label is drawn in black: the W glyph's top-left pixel is set.
  const auto& w = box(boxes, "W");
  expect_rgb(f0, w.x + (w.w - text_width("W", 2)) / 2, w.y + (w.h - text_height(2)) / 2,
             Rgb{0, 0, 0}, "W label");
  expect_rgb(f0, c.cx + c.radius / 2, c.cy, kArrowOnDisc, "arrow, yaw right");
  expect_rgb(f0, c.cx - c.radius / 2, c.cy, kReleasedOnGrey, "disc left of centre");
  expect_rgb(f0, c.cx, c.cy - c.radius / 2, kReleasedOnGrey, "disc above centre");
  expect_rgb(f0, c.cx, c.cy, Rgb{0, 0, 0}, "centre dot");
  expect_rgb(f0, 320, 100, Rgb{kBackground, kBackground, kBackground}, "picture");

  Frame f1 = grey(640, 352);
  o.draw(1, f1);
  for (const char* label : {"W", "A", "S", "D"}) {
    const auto [x, y] = fill_point(box(boxes, label));
    const bool pressed = std::string(label) == "A" || std::string(label) == "D";
    expect_rgb(f1, x, y, pressed ? kPressedOnGrey : kReleasedOnGrey, label);
  }
  expect_rgb(f1, c.cx, c.cy - c.radius / 2, kArrowOnDisc, "arrow, pitch up");
  expect_rgb(f1, c.cx, c.cy + c.radius / 2, kReleasedOnGrey, "disc below centre");
  expect_rgb(f1, c.cx + c.radius / 2, c.cy, kReleasedOnGrey, "disc right of centre");

  // Still mouse: no arrow anywhere on the disc.
  Frame f2 = grey(640, 352);
  o.draw(2, f2);
  for (float angle = 0; angle < 6.28f; angle += 0.5f) {
    expect_rgb(f2, c.cx + std::cos(angle) * c.radius * 0.6f,
               c.cy + std::sin(angle) * c.radius * 0.6f, kReleasedOnGrey, "still disc");
  }
  // Everything outside the key boxes and the compass is untouched.
  Frame plain = grey(640, 352);
  int changed_outside = 0;
  for (int y = 0; y < 352; ++y) {
    for (int x = 0; x < 640; ++x) {
      bool inside = std::hypot(x + 0.5f - c.cx, y + 0.5f - c.cy) <= c.radius + 1;
      for (const auto& b : boxes) inside |= x >= b.x && x < b.x + b.w && y >= b.y && y < b.y + b.h;
      if (!inside) changed_outside += at(f0, x, y).g != at(plain, x, y).g;
    }
  }
  EXPECT_EQ(changed_outside, 0);
}

TEST(Mg2Overlay, ArrowLength) {
  const Mg2ModeSpec& u = mg2_mode("universal");
  Mg2Tracks t = mg2_idle_tracks(u, 3);
  t.mouse = {0.0f, 0.05f, -0.3f, 0.4f, 0, 0};
  Mg2Overlay o(u, t);
  const Mg2Overlay::Compass c{100, 100, 40};
  auto [x0, y0] = o.arrow(0, c);  // half of a full 0.1 move: half of 0.85 r, to the right
  EXPECT_FLOAT_EQ(x0, 0.5f * 0.85f * 40);
  EXPECT_FLOAT_EQ(y0, 0);
  auto [x1, y1] = o.arrow(1, c);  // beyond 0.1: full length, direction (0.4, +0.3 down) / 0.5
  EXPECT_NEAR(x1, 0.8 * 0.85 * 40, 1e-4);
  EXPECT_NEAR(y1, 0.6 * 0.85 * 40, 1e-4);
  auto [x2, y2] = o.arrow(2, c);
  EXPECT_EQ(x2, 0);
  EXPECT_EQ(y2, 0);
}

TEST(Mg2Overlay, TemplerunHasSevenKeysAndNoCompass) {
  const Mg2ModeSpec& t = mg2_mode("templerun");
  Mg2Tracks tracks = mg2_idle_tracks(t, 1);  // nomove
  Mg2Overlay o(t, tracks);
  EXPECT_FALSE(o.compass(640, 352));
  const auto boxes = o.key_boxes(640, 352);
  ASSERT_EQ(boxes.size(), 7u);
  for (size_t i = 0; i < boxes.size(); ++i) {
    for (size_t j = i + 1; j < boxes.size(); ++j) {
      const auto &a = boxes[i], &b = boxes[j];
      const bool apart =
          a.x + a.w <= b.x || b.x + b.w <= a.x || a.y + a.h <= b.y || b.y + b.h <= a.y;
      EXPECT_TRUE(apart) << a.label << " overlaps " << b.label;
    }
    EXPECT_GE(boxes[i].w, text_width(boxes[i].label, 2)) << boxes[i].label;  // the label fits
  }
  Frame f = grey(640, 352);
  o.draw(0, f);
  const auto [ix, iy] = fill_point(box(boxes, "IDLE"));
  expect_rgb(f, ix, iy, kPressedOnGrey, "IDLE");
  const auto [jx, jy] = fill_point(box(boxes, "JUMP"));
  expect_rgb(f, jx, jy, kReleasedOnGrey, "JUMP");
  EXPECT_EQ(box(boxes, "TURN L").channel, 3);
}

TEST(Mg2Overlay, GtaDriveAndTinyFrames) {
  const Mg2ModeSpec& g = mg2_mode("gta_drive");
  Mg2Tracks t = mg2_idle_tracks(g, 1);
  t.keyboard[1] = 1;   // s
  t.mouse[1] = -0.1f;  // steer left
  Mg2Overlay o(g, t);
  const auto boxes = o.key_boxes(640, 352);
  ASSERT_EQ(boxes.size(), 2u);
  EXPECT_EQ(box(boxes, "W").x, box(boxes, "S").x);
  Frame f = grey(640, 352);
  o.draw(0, f);
  const auto [sx, sy] = fill_point(box(boxes, "S"));
  expect_rgb(f, sx, sy, kPressedOnGrey, "S");
  const Mg2Overlay::Compass c = *o.compass(640, 352);
  expect_rgb(f, c.cx - c.radius / 2, c.cy, kArrowOnDisc, "arrow, steering left");

  // The tiny golden size: everything clips to the frame.
  Frame tiny = grey(48, 32);
  o.draw(0, tiny);
  EXPECT_EQ(tiny.rgb.size(), 48u * 32 * 3);
}

// A real (tiny) run through the output sink: the overlay video is the plain
// video with the overlay drawn on each frame, frame for frame (FFV1, so the
// decoded frames are exact).
TEST(Mg2Overlay, OverlayVideoOfAPipelineRun) {
  Mg2Options o;
  o.weights = std::string(FLICK_TEST_DATA) + "/mg2/weights";
  o.mode = Mg2Mode::kUniversal;
  o.precision = Precision::BF16;
  o.width = 48;
  o.height = 32;
  o.dit_head_dim = 32;  // the tiny checkpoints' (tests/data/mg2/README.md)
  o.clip_head_dim = 16;
  std::unique_ptr<Backend> backend = make_cpu_backend();
  Expected<std::unique_ptr<Mg2Pipeline>> pipeline = Mg2Pipeline::load(o, *backend);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status().message();

  const Mg2ModeSpec& u = mg2_mode("universal");
  Mg2Input in;
  in.image = testing::smooth_frame(48, 32, 3);
  in.seed = 5;
  in.latent_frames = 3;
  const Mg2KeySegment keys[] = {{0b0001, 4}, {0b1000, 5}};  // w, then d
  const Mg2MouseSegment mouse[] = {{0, 0.1, 6}, {-0.1, 0, 3}};
  in.keyboard = *expand_mg2_keyboard(u, keys, 9);
  in.mouse = *expand_mg2_mouse(mouse, 9);
  Mg2Tracks tracks{9, in.keyboard, in.mouse};
  const Mg2Overlay overlay(u, tracks);

  testing::TempDir dir;
  OutputSpec spec;
  VideoSpec plain;
  plain.file = "plain.mkv";
  plain.codec = "ffv1";
  spec.video = plain;
  spec.overlay = plain;
  spec.overlay->file = "icon.mkv";
  Expected<std::unique_ptr<FrameSink>> sink =
      make_output_sink(spec, dir.path(), [&overlay](int64_t i, Frame& f) { overlay.draw(i, f); });
  ASSERT_TRUE(sink.ok()) << sink.status().message();
  ASSERT_TRUE((*pipeline)->run(in, **sink, RunContext{}).ok());

  const auto video = testing::decode_video(dir.file("plain.mkv"));
  const auto icon = testing::decode_video(dir.file("icon.mkv"));
  ASSERT_EQ(video.error, "");
  ASSERT_EQ(icon.error, "");
  ASSERT_EQ(video.rgb.size(), 9u);
  ASSERT_EQ(icon.rgb.size(), 9u);
  EXPECT_EQ(av_cmp_q(icon.avg_frame_rate, AVRational{kMg2Fps, 1}), 0);
  for (int i = 0; i < 9; ++i) {
    Frame want = video.rgb[i];
    overlay.draw(i, want);
    EXPECT_EQ(icon.rgb[i].rgb, want.rgb) << "frame " << i;
    EXPECT_NE(icon.rgb[i].rgb, video.rgb[i].rgb) << "frame " << i << " has no overlay";
  }
}

}  // namespace
}  // namespace flick
