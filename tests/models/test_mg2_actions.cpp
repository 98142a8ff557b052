// Action tracks of Matrix-Game 2.0 jobs: run-length segments and CSV files
// against tracks written out by hand, and every kind of bad input.
#include <gtest/gtest.h>

#include "mg2_test_modes.h"
#include "models/pipelines/mg2_actions.h"

namespace flick {
namespace {

using testing::mg2_mode;

std::string message_of(const Status& s) { return s.message(); }
template <typename T>
std::string message_of(const Expected<T>& e) {
  return e.ok() ? "" : e.status().message();
}

#define EXPECT_ERROR_HAS(expr, text)                                           \
  do {                                                                         \
    const auto& r_ = (expr);                                                   \
    EXPECT_FALSE(r_.ok());                                                     \
    EXPECT_NE(message_of(r_).find(text), std::string::npos) << message_of(r_); \
  } while (0)

TEST(Mg2Actions, VideoFramesPerLatents) {
  EXPECT_EQ(mg2_video_frames(3), 9);
  EXPECT_EQ(mg2_video_frames(15), 57);
  EXPECT_EQ(mg2_video_frames(150), 597);  // the reference's default run
}

TEST(Mg2Actions, IdleTracks) {
  const Mg2Tracks u = mg2_idle_tracks(mg2_mode("universal"), 5);
  EXPECT_EQ(u.frames, 5);
  EXPECT_EQ(u.keyboard, std::vector<float>(20, 0.0f));
  EXPECT_EQ(u.mouse, std::vector<float>(10, 0.0f));
  // templerun stands still with its "nomove" channel (0), one-hot.
  const Mg2Tracks t = mg2_idle_tracks(mg2_mode("templerun"), 2);
  EXPECT_EQ(t.keyboard, (std::vector<float>{1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_TRUE(t.mouse.empty());
}

TEST(Mg2Actions, KeyCombos) {
  const Mg2ModeSpec& u = mg2_mode("universal");  // w s a d
  EXPECT_EQ(*parse_mg2_keys(u, ""), 0u);
  EXPECT_EQ(*parse_mg2_keys(u, "w"), 0b0001u);
  EXPECT_EQ(*parse_mg2_keys(u, "w+a"), 0b0101u);
  EXPECT_EQ(*parse_mg2_keys(u, "D + S"), 0b1010u);  // case and spaces do not matter
  EXPECT_ERROR_HAS(parse_mg2_keys(u, "q"), "unknown key \"q\" (universal keys: w, s, a, d)");
  EXPECT_ERROR_HAS(parse_mg2_keys(u, "w+"), "empty key name");
  EXPECT_ERROR_HAS(parse_mg2_keys(u, "w+w"), "named twice");
  EXPECT_ERROR_HAS(parse_mg2_keys(mg2_mode("gta_drive"), "a"), "(gta_drive keys: w, s)");

  const Mg2ModeSpec& t = mg2_mode("templerun");
  EXPECT_EQ(*parse_mg2_keys(t, "nomove"), 1u << 0);
  EXPECT_EQ(*parse_mg2_keys(t, "rightside"), 1u << 6);
  EXPECT_ERROR_HAS(parse_mg2_keys(t, ""), "exactly one key");
  EXPECT_ERROR_HAS(parse_mg2_keys(t, "jump+slide"), "exactly one key");
  EXPECT_ERROR_HAS(parse_mg2_keys(t, "w"),
                   "nomove, jump, slide, turnleft, turnright, leftside, rightside");
}

TEST(Mg2Actions, MouseValues) {
  EXPECT_TRUE(check_mg2_mouse(mg2_mode("universal"), 0.1, -0.1).ok());
  EXPECT_TRUE(check_mg2_mouse(mg2_mode("universal"), -1.0, 1.0).ok());
  EXPECT_ERROR_HAS(check_mg2_mouse(mg2_mode("universal"), 1.5, 0),
                   "pitch must be finite and within");
  EXPECT_ERROR_HAS(check_mg2_mouse(mg2_mode("universal"), 0, std::nan("")), "yaw must be finite");
  EXPECT_ERROR_HAS(check_mg2_mouse(mg2_mode("universal"), 0, INFINITY), "yaw");
  EXPECT_TRUE(check_mg2_mouse(mg2_mode("gta_drive"), 0, -0.1).ok());
  EXPECT_ERROR_HAS(check_mg2_mouse(mg2_mode("gta_drive"), 0.1, 0), "yaw only: pitch must be 0");
  EXPECT_ERROR_HAS(check_mg2_mouse(mg2_mode("templerun"), 0, 0), "templerun has no mouse");
}

TEST(Mg2Actions, ExpandSegments) {
  const Mg2ModeSpec& u = mg2_mode("universal");
  const Mg2KeySegment keys[] = {{0b0001, 2}, {0b0101, 1}, {0, 2}};  // w x2, w+a, nothing x2
  Expected<std::vector<float>> k = expand_mg2_keyboard(u, keys, 5);
  ASSERT_TRUE(k.ok()) << k.status().message();
  EXPECT_EQ(*k, (std::vector<float>{1, 0, 0, 0,  //
                                    1, 0, 0, 0,  //
                                    1, 0, 1, 0,  //
                                    0, 0, 0, 0,  //
                                    0, 0, 0, 0}));
  const Mg2MouseSegment mouse[] = {{0, 0, 3}, {0.1, -0.05, 2}};
  Expected<std::vector<float>> m = expand_mg2_mouse(mouse, 5);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(*m, (std::vector<float>{0, 0, 0, 0, 0, 0, 0.1f, -0.05f, 0.1f, -0.05f}));

  EXPECT_ERROR_HAS(expand_mg2_keyboard(u, keys, 9), "cover 5 video frames, expected 9");
  EXPECT_ERROR_HAS(expand_mg2_mouse(mouse, 4), "cover 5 video frames, expected 4");
  const Mg2KeySegment empty[] = {{0, 0}};
  EXPECT_ERROR_HAS(expand_mg2_keyboard(u, empty, 0), "at least 1 frame");
}

TEST(Mg2Actions, CsvUniversal) {
  // Columns in any order and case; comments and blank lines skipped; CRLF.
  const std::string csv =
      "# walk, then turn\r\n"
      "W,a, S ,d,Yaw,pitch\r\n"
      "1,0,0,0,0,0\r\n"
      "\r\n"
      "1,1,0,0,0.1,-0.05\r\n"
      "0,0,1,1,-1,1\n";
  Expected<Mg2Tracks> t = parse_mg2_actions_csv(mg2_mode("universal"), csv, 3, "a.csv");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->frames, 3);
  EXPECT_EQ(t->keyboard, (std::vector<float>{1, 0, 0, 0,     // w
                                             1, 0, 1, 0,     // w a
                                             0, 1, 0, 1}));  // s d
  EXPECT_EQ(t->mouse, (std::vector<float>{0, 0, -0.05f, 0.1f, 1, -1}));
}

TEST(Mg2Actions, CsvTemplerunAndGta) {
  Expected<Mg2Tracks> t = parse_mg2_actions_csv(
      mg2_mode("templerun"),
      "nomove,jump,slide,turnleft,turnright,leftside,rightside\n0,1,0,0,0,0,0\n1,0,0,0,0,0,0\n", 2,
      "t.csv");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->keyboard, (std::vector<float>{0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_TRUE(t->mouse.empty());

  Expected<Mg2Tracks> g = parse_mg2_actions_csv(
      mg2_mode("gta_drive"), "w,s,pitch,yaw\n1,0,0,0.1\n0,1,0.0,-0.1\n", 2, "g.csv");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->keyboard, (std::vector<float>{1, 0, 0, 1}));
  EXPECT_EQ(g->mouse, (std::vector<float>{0, 0.1f, 0, -0.1f}));
}

TEST(Mg2Actions, CsvErrorsNameLineAndColumn) {
  const Mg2ModeSpec& u = mg2_mode("universal");
  const std::string header = "w,s,a,d,pitch,yaw\n";
  const auto parse = [&](const std::string& text, int64_t frames = 2) {
    return parse_mg2_actions_csv(u, text, frames, "/in/a.csv");
  };
  EXPECT_ERROR_HAS(parse(""), "/in/a.csv: no header row");
  EXPECT_ERROR_HAS(
      parse("w,s,a,d,pitch,yaw,q\n"),
      "/in/a.csv:1: unknown column 'q' for universal (columns: w, s, a, d, pitch, yaw)");
  EXPECT_ERROR_HAS(parse("w,s,a,pitch,yaw\n"), "/in/a.csv:1: the header lacks column(s) d");
  EXPECT_ERROR_HAS(parse("w,s,a,d\n"), "lacks column(s) pitch, yaw");
  EXPECT_ERROR_HAS(parse("w,s,a,d,pitch,yaw,w\n"), "/in/a.csv:1: column 'w' appears twice");
  EXPECT_ERROR_HAS(parse("w,,a,d,pitch,yaw\n"), "empty column name");
  EXPECT_ERROR_HAS(parse(header + "1,0,0,0,0,0\n1,0,0,0\n"), "/in/a.csv:3: 4 fields, expected 6");
  EXPECT_ERROR_HAS(parse(header + "1,0,0,0,0,x\n"),
                   "/in/a.csv:2: column 6 ('yaw'): expected a number, got 'x'");
  EXPECT_ERROR_HAS(parse(header + "# c\n1,0,0,0.5,0,0\n"),
                   "/in/a.csv:3: column 4 ('d'): a key is 0 (up) or 1 (pressed), got 0.5");
  EXPECT_ERROR_HAS(parse(header + "1,0,0,0,0,nan\n"), "/in/a.csv:2: yaw must be finite");
  EXPECT_ERROR_HAS(parse(header + "1,0,0,0,2,0\n"), "/in/a.csv:2: pitch must be finite and within");
  EXPECT_ERROR_HAS(parse(header + "0,0,0,0,0,0\n"), "/in/a.csv: 1 frame rows, expected 2");
  EXPECT_ERROR_HAS(parse(header + "0,0,0,0,0,0\n0,0,0,0,0,0\n0,0,0,0,0,0\n"),
                   "/in/a.csv:4: more than 2 frame rows");

  const Mg2ModeSpec& t = mg2_mode("templerun");
  const std::string theader = "nomove,jump,slide,turnleft,turnright,leftside,rightside\n";
  EXPECT_ERROR_HAS(parse_mg2_actions_csv(t, "nomove,jump,pitch\n", 1, "t.csv"),
                   "t.csv:1: templerun has no mouse input: column 'pitch'");
  EXPECT_ERROR_HAS(parse_mg2_actions_csv(t, theader + "0,1,1,0,0,0,0\n", 1, "t.csv"),
                   "t.csv:2: templerun takes exactly one key per frame (one-hot), got jump, slide");
  EXPECT_ERROR_HAS(parse_mg2_actions_csv(t, theader + "0,0,0,0,0,0,0\n", 1, "t.csv"),
                   "got none (set nomove to 1");
  EXPECT_ERROR_HAS(
      parse_mg2_actions_csv(mg2_mode("gta_drive"), "w,s,pitch,yaw\n1,0,0.1,0\n", 1, "g.csv"),
      "g.csv:2: gta_drive steers with yaw only");

  const std::string huge(kMg2MaxCsvBytes + 1, '#');
  EXPECT_ERROR_HAS(parse(huge), "larger than");
}

}  // namespace
}  // namespace flick
