// io/label_png (16-bit label maps) and FrameSink::write_side_file of the
// output sink (how sam3-segment writes them beside the frames).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "io/image.h"
#include "io/label_png.h"
#include "io/output_sink.h"
#include "io_test_util.h"

namespace flick {
namespace {

using testing::noise_frame;
using testing::TempDir;

std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(LabelPng, ReadsPillowsSixteenBitPng) {
  // Written by Pillow from known ids (tools/gen_label_png_fixture.py).
  const std::string dir = std::string(FLICK_TEST_DATA) + "/io/";
  const std::vector<uint8_t> png = slurp(dir + "label16.png");
  const std::vector<uint8_t> raw = slurp(dir + "label16.u16");
  auto m = decode_label_png(png.data(), png.size(), "label16.png");
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->width, 7);
  ASSERT_EQ(m->height, 4);
  ASSERT_EQ(raw.size(), 2 * m->ids.size());
  for (size_t i = 0; i < m->ids.size(); ++i) {
    EXPECT_EQ(m->ids[i], raw[2 * i] | raw[2 * i + 1] << 8) << i;
  }
}

TEST(LabelPng, RoundTripsEveryIdAndReadsAsItsHighByteInRgb) {
  LabelMap m;
  m.width = 300;
  m.height = 220;
  for (int i = 0; i < m.width * m.height; ++i) m.ids.push_back(static_cast<uint16_t>(i * 7919));
  std::vector<uint8_t> png;
  ASSERT_TRUE(encode_label_png(m, 6, &png).ok());
  auto back = decode_label_png(png.data(), png.size(), "mem");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->ids, m.ids);
  // flick's general PNG reader (Pillow's convert("RGB") rule: the high byte
  // of 16-bit samples, gray copied to R, G, B) is a second decoder.
  auto rgb = decode_png(png.data(), png.size(), "mem");
  ASSERT_TRUE(rgb.ok()) << rgb.status().message();
  for (size_t i = 0; i < m.ids.size(); ++i) {
    ASSERT_EQ(rgb->rgb[3 * i], m.ids[i] >> 8) << i;
    ASSERT_EQ(rgb->rgb[3 * i + 2], m.ids[i] >> 8) << i;
  }
}

TEST(LabelPng, RefusesOtherPngs) {
  const std::vector<uint8_t> gray8 = slurp(std::string(FLICK_TEST_DATA) + "/io/gray8.png");
  auto m = decode_label_png(gray8.data(), gray8.size(), "gray8.png");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("gray8.png: not a non-interlaced 16-bit"), std::string::npos)
      << m.status().message();
  std::vector<uint8_t> cut(gray8.begin(), gray8.begin() + 40);
  EXPECT_FALSE(decode_label_png(cut.data(), cut.size(), "cut").ok());
}

TEST(OutputSinkSideFiles, ContentAndOutputs) {
  TempDir dir;
  OutputSpec spec;
  spec.frames.format = FrameFormat::Png;
  auto sink = make_output_sink(spec, dir.path());
  ASSERT_TRUE(sink.ok());
  ASSERT_TRUE((*sink)->begin(8, 8, 10, 1).ok());
  const std::string text = "{\"frame\": 0}\n";
  ASSERT_TRUE((*sink)->write_side_file("detections.jsonl", text.data(), text.size()).ok());
  const Frame f = noise_frame(8, 8, 3);
  ASSERT_TRUE((*sink)->write(f.view()).ok());
  ASSERT_TRUE((*sink)->finish().ok());
  const std::vector<uint8_t> got = slurp(dir.file("detections.jsonl"));
  EXPECT_EQ(std::string(got.begin(), got.end()), text);
  std::vector<std::string> names;
  for (const OutputFile& o : (*sink)->outputs()) names.push_back(o.name);
  EXPECT_EQ(names, (std::vector<std::string>{"detections.jsonl", "frame_000000.png"}));
  std::vector<std::string> entries = dir.entries();
  std::sort(entries.begin(), entries.end());
  EXPECT_EQ(entries, (std::vector<std::string>{"detections.jsonl", "frame_000000.png"}));
}

// A sink that writes side files only, begun for `frames` 8 x 8 frames.
std::unique_ptr<FrameSink> side_only_sink(const TempDir& dir, int frames) {
  OutputSpec spec;
  spec.frames.format = FrameFormat::None;
  auto sink = make_output_sink(spec, dir.path());
  if (!sink.ok() || !(*sink)->begin(8, 8, 10, frames).ok()) return nullptr;
  return std::move(*sink);
}

TEST(OutputSinkSideFiles, AppendedFileAppearsWholeAtFinish) {
  TempDir dir;
  std::unique_ptr<FrameSink> sink = side_only_sink(dir, 3);
  ASSERT_TRUE(sink);
  std::string want;
  for (int k = 0; k < 3; ++k) {
    const std::string line = "{\"frame\": " + std::to_string(k) + "}\n";
    want += line;
    ASSERT_TRUE(sink->append_side_file("d.jsonl", line.data(), line.size()).ok());
    ASSERT_TRUE(sink->write_side_file("label_" + std::to_string(k) + ".png", "x", 1).ok());
    // Not there under its name until finish (a temporary beside it).
    EXPECT_FALSE(std::filesystem::exists(dir.file("d.jsonl")));
  }
  ASSERT_TRUE(sink->finish().ok());
  const std::vector<uint8_t> got = slurp(dir.file("d.jsonl"));
  EXPECT_EQ(std::string(got.begin(), got.end()), want);
  std::vector<std::string> names;
  for (const OutputFile& o : sink->outputs())
    names.push_back(o.name + ":" + std::to_string(o.bytes));
  EXPECT_EQ(names, (std::vector<std::string>{"label_0.png:1", "label_1.png:1", "label_2.png:1",
                                             "d.jsonl:" + std::to_string(want.size())}));
  std::vector<std::string> entries = dir.entries();
  std::sort(entries.begin(), entries.end());
  EXPECT_EQ(entries, (std::vector<std::string>{"d.jsonl", "label_0.png", "label_1.png",
                                               "label_2.png"}));  // no temporary left
}

TEST(OutputSinkSideFiles, WholeFileWriteOfAnAppendedNameIsAnError) {
  TempDir dir;
  std::unique_ptr<FrameSink> sink = side_only_sink(dir, 1);
  ASSERT_TRUE(sink);
  ASSERT_TRUE(sink->append_side_file("d.jsonl", "ab\n", 3).ok());
  EXPECT_FALSE(sink->write_side_file("d.jsonl", "x", 1).ok());
}

TEST(OutputSinkSideFiles, UnfinishedAppendLeavesNothing) {
  TempDir dir;
  {
    std::unique_ptr<FrameSink> sink = side_only_sink(dir, 2);
    ASSERT_TRUE(sink);
    ASSERT_TRUE(sink->append_side_file("d.jsonl", "ab\n", 3).ok());
    EXPECT_EQ(dir.entries().size(), 1u);  // the temporary
  }                                       // stopped before finish
  EXPECT_TRUE(dir.entries().empty());
}

TEST(OutputSinkSideFiles, BadNamesAreErrors) {
  for (const bool append : {false, true})
    for (const std::string bad : {"../x", "a/b", "", "v.mkv"}) {
      TempDir dir;
      OutputSpec spec;
      VideoSpec v;
      v.file = "v.mkv";
      v.codec = "ffv1";
      spec.video = v;
      auto sink = make_output_sink(spec, dir.path());
      ASSERT_TRUE(sink.ok());
      ASSERT_TRUE((*sink)->begin(8, 8, 10, 1).ok());
      const Status s =
          append ? (*sink)->append_side_file(bad, "a", 1) : (*sink)->write_side_file(bad, "a", 1);
      EXPECT_FALSE(s.ok()) << bad << (append ? " (append)" : "");
    }
}

}  // namespace
}  // namespace flick
