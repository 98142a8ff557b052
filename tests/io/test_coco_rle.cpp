// io/coco_rle against pycocotools 2.0.11 (tests/data/io/coco_rle.json, made
// by tools/gen_coco_rle_fixtures.py): the counts string, the runs, area and
// toBbox must be identical, and decoding must give the mask back.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "io/coco_rle.h"

namespace flick {
namespace {

struct Case {
  std::string name;
  int h = 0, w = 0;
  std::vector<uint8_t> mask;  // row-major 0 / 1
  std::string counts;
  std::vector<uint32_t> runs;
  int64_t area = 0;
  std::array<double, 4> bbox{};
};

std::vector<Case> load_cases() {
  std::ifstream f(std::string(FLICK_TEST_DATA) + "/io/coco_rle.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  std::vector<Case> out;
  for (const auto& c : j["cases"]) {
    Case k;
    k.name = c["name"];
    k.h = c["h"];
    k.w = c["w"];
    const std::string hex = c["mask"];
    for (size_t i = 0; i < static_cast<size_t>(k.h) * k.w; ++i) {
      const int byte = std::stoi(hex.substr(i / 8 * 2, 2), nullptr, 16);
      k.mask.push_back(static_cast<uint8_t>((byte >> (7 - i % 8)) & 1));  // np.packbits: MSB first
    }
    k.counts = c["counts"];
    k.runs = c["runs"].get<std::vector<uint32_t>>();
    k.area = c["area"];
    k.bbox = c["bbox"].get<std::array<double, 4>>();
    out.push_back(std::move(k));
  }
  return out;
}

TEST(CocoRle, MatchesPycocotools) {
  const std::vector<Case> cases = load_cases();
  ASSERT_EQ(cases.size(), 13u);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    // Nonzero bytes other than 1 count as set.
    std::vector<uint8_t> scaled = c.mask;
    for (auto& v : scaled) v *= 255;
    const CocoRle rle = coco_rle_encode(scaled.data(), c.w, c.h, c.w);
    EXPECT_EQ(rle.counts, c.runs);
    EXPECT_EQ(coco_rle_to_string(rle.counts), c.counts);
    EXPECT_EQ(coco_rle_area(rle), c.area);
    EXPECT_EQ(coco_rle_bbox(rle), c.bbox);
    EXPECT_EQ(coco_rle_decode(rle), c.mask);
    auto parsed = coco_rle_from_string(c.counts, c.h, c.w);
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    EXPECT_EQ(parsed->counts, c.runs);
    EXPECT_EQ(coco_rle_decode(*parsed), c.mask);
  }
}

TEST(CocoRle, EncodesWithARowStride) {
  // A 3x2 mask inside rows of 5 bytes: the padding must not be read.
  const uint8_t rows[] = {1, 0, 1, 9, 9,  //
                          0, 1, 1, 9, 9};
  const CocoRle rle = coco_rle_encode(rows, 3, 2, 5);
  // Column-major: (0,0)=1 (1,0)=0 | (0,1)=0 (1,1)=1 | (0,2)=1 (1,2)=1.
  EXPECT_EQ(rle.counts, (std::vector<uint32_t>{0, 1, 2, 3}));
}

TEST(CocoRle, RefusesHostileStrings) {
  // A character below '0', a number cut off (0x20 set on the last group), a
  // run that makes the total too large, runs that fall short, a negative run.
  EXPECT_FALSE(coco_rle_from_string("0 1", 2, 2).ok());
  EXPECT_FALSE(coco_rle_from_string("P", 2, 2).ok());  // 'P' - 48 = 32: more follows
  EXPECT_FALSE(coco_rle_from_string("5", 2, 2).ok());  // one run of 5 > 4 pixels
  EXPECT_FALSE(coco_rle_from_string("1", 2, 2).ok());  // 1 of 4 pixels
  EXPECT_FALSE(coco_rle_from_string("0004O", 2, 2).ok());
  EXPECT_FALSE(coco_rle_from_string("oooooooooo1", 2, 2).ok());  // a number too long
  auto ok = coco_rle_from_string("04", 2, 2);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->counts, (std::vector<uint32_t>{0, 4}));
}

}  // namespace
}  // namespace flick
