// Start-image preprocessing against fixtures written by the real Pillow 13,
// torchvision 0.29 and torch 2.15 (tools/gen_preprocess_fixtures.py). All
// comparisons are exact: bytes for images, bit patterns for tensors.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "runtime/file_util.h"
#include "io/image.h"
#include "io/image_preprocess.h"
#include "io_test_util.h"
#include "runtime/tensor.h"

namespace flick {
namespace {

using testing::TempDir;

std::string fixture(const std::string& name) {
  return std::string(FLICK_TEST_DATA) + "/io/preprocess/" + name;
}

Frame read_fixture_png(const std::string& name) {
  auto f = read_png(fixture(name));
  EXPECT_TRUE(f.ok()) << f.status().message();
  return f.ok() ? std::move(*f) : Frame{};
}

std::vector<std::string> fixture_lines(const std::string& name) {
  std::ifstream in(fixture(name));
  EXPECT_TRUE(in.good()) << fixture(name);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  }
  return lines;
}

uint64_t fnv1a64(const void* data, size_t n) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(data)[i]) * 0x100000001B3ull;
  return h;
}

// tools/gen_preprocess_fixtures.py synthetic_rgb: 16x16 blocks of hashed
// noise, a wrapping ramp and a 0/255 checkerboard.
Frame synthetic_rgb(int w, int h, uint32_t seed) {
  Frame f{w, h, std::vector<uint8_t>(size_t(3) * w * h)};
  for (uint32_t y = 0; y < uint32_t(h); ++y) {
    for (uint32_t x = 0; x < uint32_t(w); ++x) {
      for (uint32_t c = 0; c < 3; ++c) {
        uint32_t v = x * 0x9E3779B1u + y * 0x85EBCA77u + (c * 0xC2B2AE3Du + seed * 0x27D4EB2Fu);
        v ^= v >> 15;
        v *= 0x2C1B3C6Du;
        v ^= v >> 12;
        v *= 0x297A2D39u;
        v ^= v >> 15;
        const uint32_t noise = v >> 24;
        const uint32_t ramp = (x * 3 + y * 5 + 40 * c) & 255;
        const uint32_t checker = ((x / 4 + y / 4) % 2) * 255;
        const uint32_t block = (x / 16 + y / 16 + c) % 3;
        f.rgb[(size_t(y) * w + x) * 3 + c] = static_cast<uint8_t>(block == 0   ? noise
                                                                  : block == 1 ? ramp
                                                                               : checker);
      }
    }
  }
  return f;
}

// "" if equal, else where the first difference is.
std::string frame_diff(const Frame& got, const Frame& want) {
  if (got.width != want.width || got.height != want.height) {
    return "size " + std::to_string(got.width) + "x" + std::to_string(got.height) + " vs " +
           std::to_string(want.width) + "x" + std::to_string(want.height);
  }
  for (size_t i = 0; i < got.rgb.size(); ++i) {
    if (got.rgb[i] != want.rgb[i]) {
      const size_t px = i / 3;
      return "first difference at x=" + std::to_string(px % got.width) +
             " y=" + std::to_string(px / got.width) + " c=" + std::to_string(i % 3) + ": " +
             std::to_string(got.rgb[i]) + " vs " + std::to_string(want.rgb[i]);
    }
  }
  return "";
}

TEST(Preprocess, SyntheticInputMatchesTheGenerator) {
  EXPECT_EQ(frame_diff(synthetic_rgb(97, 61, 1), read_fixture_png("synthetic_97x61.png")), "");
}

// --- resize -------------------------------------------------------------------

struct NamedFilter {
  const char* name;
  PilFilter filter;
};
constexpr NamedFilter kFilters[] = {{"box", PilFilter::kBox},
                                    {"bilinear", PilFilter::kBilinear},
                                    {"hamming", PilFilter::kHamming},
                                    {"bicubic", PilFilter::kBicubic},
                                    {"lanczos", PilFilter::kLanczos}};

TEST(PilResize, EqualsPillowForEveryFilterAndShape) {
  struct Case {
    int iw, ih, ow, oh;
  };
  // Down, up, mixed, a single axis, a large factor, degenerate sizes, then
  // Pillow 13's pass order: vertical first (31 - 20 > 2 * (30 - 25)), the
  // tie (horizontal first), width up and height down (vertical first).
  const Case cases[] = {{97, 61, 40, 23}, {31, 19, 97, 61},   {97, 61, 30, 90}, {97, 61, 97, 30},
                        {97, 61, 50, 61}, {700, 400, 64, 37}, {13, 7, 1, 1},    {1, 1, 5, 3},
                        {5, 1, 2, 9},     {30, 31, 25, 20},   {30, 30, 25, 20}, {20, 60, 40, 10}};
  for (const Case& k : cases) {
    const Frame src = synthetic_rgb(k.iw, k.ih, 7);
    for (const NamedFilter& f : kFilters) {
      const std::string name = std::string(f.name) + "_" + std::to_string(k.iw) + "x" +
                               std::to_string(k.ih) + "_" + std::to_string(k.ow) + "x" +
                               std::to_string(k.oh) + ".png";
      SCOPED_TRACE(name);
      EXPECT_EQ(frame_diff(pil_resize(src.view(), k.ow, k.oh, f.filter),
                           read_fixture_png("resize/" + name)),
                "");
    }
  }
}

// tools/gen_preprocess_fixtures.py weighted_hash: sum of byte[i] * (2i + 1) *
// 0x9E3779B97F4A7C15 mod 2^64; odd weights, so any single changed byte shows.
uint64_t weighted_hash(const std::vector<uint8_t>& bytes) {
  uint64_t h = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    h += bytes[i] * ((uint64_t{i} * 2 + 1) * 0x9E3779B97F4A7C15ull);
  }
  return h;
}

TEST(PilResize, EqualsPillowOnRandomShapes) {
  const auto lines = fixture_lines("resize_random.txt");
  ASSERT_EQ(lines.size(), 300u);
  int mismatches = 0;
  for (const std::string& line : lines) {
    std::istringstream in(line);
    int iw, ih, ow, oh, f;
    uint32_t seed;
    uint64_t want;
    in >> iw >> ih >> ow >> oh >> f >> seed >> want;
    ASSERT_TRUE(!in.fail() && f >= 0 && f < 5) << line;
    const Frame out = pil_resize(synthetic_rgb(iw, ih, seed).view(), ow, oh, kFilters[f].filter);
    if (weighted_hash(out.rgb) != want) {
      ++mismatches;
      ADD_FAILURE() << kFilters[f].name << " " << iw << "x" << ih << " -> " << ow << "x" << oh;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(PilResize, ReadsStridedViewsAndCopiesEqualSizes) {
  // A 40x30 window of a wider buffer gives what the packed window gives.
  const Frame big = synthetic_rgb(64, 30, 3);
  const Frame packed = crop(big.view(), {10, 0, 50, 30});
  const FrameView window{40, 30, big.view().stride, big.rgb.data() + 3 * 10};
  for (const NamedFilter& f : kFilters) {
    SCOPED_TRACE(f.name);
    EXPECT_EQ(frame_diff(pil_resize(window, 17, 45, f.filter),
                         pil_resize(packed.view(), 17, 45, f.filter)),
              "");
    EXPECT_EQ(frame_diff(pil_resize(window, 40, 30, f.filter), packed), "");
  }
}

// --- the Matrix-Game 2.0 pipeline ----------------------------------------------------

TEST(Mg2Preprocess, CropResizeAndBf16TensorEqualTheReference) {
  const auto lines = fixture_lines("pipeline.txt");
  ASSERT_EQ(lines.size(), 11u);
  const int sample_rows[] = {0, 1, 175, 176, 350, 351};
  for (const std::string& line : lines) {
    std::istringstream in(line);
    std::string name, rgb_hash, bf16_hash;
    int w, h;
    uint32_t seed;
    CropBox want;
    in >> name >> w >> h >> seed >> want.x0 >> want.y0 >> want.x1 >> want.y1 >> rgb_hash >>
        bf16_hash;
    ASSERT_FALSE(in.fail()) << line;
    SCOPED_TRACE(name);
    const Frame src = synthetic_rgb(w, h, seed);

    EXPECT_EQ(center_crop_box(w, h, 640, 352), want);
    auto cropped = center_crop_to_aspect(src.view(), 640, 352);
    ASSERT_TRUE(cropped.ok()) << cropped.status().message();
    ASSERT_EQ(frame_diff(*cropped, crop(src.view(), want)), "");

    const Frame resized = pil_resize(cropped->view(), 640, 352, PilFilter::kBilinear);
    ASSERT_EQ(resized.width, 640);
    ASSERT_EQ(resized.height, 352);
    Frame rows{640, 6, {}};
    for (int r : sample_rows) {
      const uint8_t* p = resized.rgb.data() + size_t(r) * 640 * 3;
      rows.rgb.insert(rows.rgb.end(), p, p + 640 * 3);
    }
    EXPECT_EQ(frame_diff(rows, read_fixture_png("pipeline_" + name + "_rows.png")), "");
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx",
                  static_cast<unsigned long long>(fnv1a64(resized.rgb.data(), resized.rgb.size())));
    EXPECT_EQ(hex, rgb_hash) << "RGB8 resize differs outside the sampled rows";

    OwnedTensor image(DType::BF16, Shape{3, 352, 640});
    to_normalized_chw(resized.view(), {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}, image);
    std::snprintf(hex, sizeof(hex), "%016llx",
                  static_cast<unsigned long long>(fnv1a64(image.t.data, image.t.nbytes())));
    EXPECT_EQ(hex, bf16_hash) << "bf16 tensor differs";
  }
}

TEST(Mg2Preprocess, WholeFilesEqualTheReference) {
  // load_image (JPEG 4:2:0 / RGBA PNG decode, EXIF rotation) through the
  // bf16 tensor, as Matrix-Game-2/inference.py runs it.
  const auto lines = fixture_lines("pipeline_files.txt");
  ASSERT_EQ(lines.size(), 2u);
  for (const std::string& line : lines) {
    std::istringstream in(line);
    std::string file, rgb_hash, bf16_hash;
    in >> file >> rgb_hash >> bf16_hash;
    SCOPED_TRACE(file);
    auto image = load_image_rgb(fixture(file));
    ASSERT_TRUE(image.ok()) << image.status().message();
    auto cropped = center_crop_to_aspect(image->view(), 640, 352);
    ASSERT_TRUE(cropped.ok()) << cropped.status().message();
    const Frame resized = pil_resize(cropped->view(), 640, 352, PilFilter::kBilinear);
    OwnedTensor tensor(DType::BF16, Shape{3, 352, 640});
    to_normalized_chw(resized.view(), {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}, tensor);
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx",
                  static_cast<unsigned long long>(fnv1a64(resized.rgb.data(), resized.rgb.size())));
    EXPECT_EQ(hex, rgb_hash);
    std::snprintf(hex, sizeof(hex), "%016llx",
                  static_cast<unsigned long long>(fnv1a64(tensor.t.data, tensor.t.nbytes())));
    EXPECT_EQ(hex, bf16_hash);
  }
}

TEST(Mg2Preprocess, CropBoxRoundsHalfToEven) {
  // Python's round() of the float box (values from the reference formula):
  // 97x62 keeps 53 rows, box (0, 4.5, 97, 57.5) -> 54 rows.
  EXPECT_EQ(center_crop_box(97, 62, 640, 352), (CropBox{0, 4, 97, 58}));
  // 204x100 and 206x100 keep 181 columns: (11.5, 192.5) -> 180 columns,
  // (12.5, 193.5) -> 182 columns.
  EXPECT_EQ(center_crop_box(204, 100, 640, 352), (CropBox{12, 0, 192, 100}));
  EXPECT_EQ(center_crop_box(206, 100, 640, 352), (CropBox{12, 0, 194, 100}));
}

TEST(Mg2Preprocess, TooThinImagesAreAnError) {
  const Frame thin = synthetic_rgb(1, 40, 1);  // int(1 * 352 / 640) = 0 rows
  auto r = center_crop_to_aspect(thin.view(), 640, 352);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(r.status().message().find("1x40"), std::string::npos) << r.status().message();
}

// --- ToTensor + Normalize ---------------------------------------------------------

TEST(Normalize, EveryByteValueEqualsTorch) {
  const auto lines = fixture_lines("normalize.txt");
  ASSERT_EQ(lines.size(), 12u);  // 2 settings x 3 channels x {f32, bf16}
  const std::map<std::string, std::pair<std::array<float, 3>, std::array<float, 3>>> settings = {
      {"half", {{0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}}},
      {"imagenet", {{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}}}};
  Frame ramp{256, 1, {}};
  for (int v = 0; v < 256; ++v) ramp.rgb.insert(ramp.rgb.end(), 3, static_cast<uint8_t>(v));
  for (const auto& [name, ms] : settings) {
    OwnedTensor f32(DType::F32, Shape{3, 1, 256});
    OwnedTensor bf16(DType::BF16, Shape{3, 1, 256});
    to_normalized_chw(ramp.view(), ms.first, ms.second, f32);
    to_normalized_chw(ramp.view(), ms.first, ms.second, bf16);
    int checked = 0;
    for (const std::string& line : lines) {
      std::istringstream in(line);
      std::string set, kind;
      int c;
      in >> set >> c >> kind;
      if (set != name) continue;
      for (int v = 0; v < 256; ++v) {
        uint32_t bits;
        in >> std::hex >> bits;
        ASSERT_FALSE(in.fail()) << line;
        if (kind == "f32") {
          EXPECT_EQ(f32_bits(f32.t.ptr<float>()[c * 256 + v]), bits)
              << name << " c" << c << " v" << v;
        } else {
          EXPECT_EQ(bf16.t.ptr<uint16_t>()[c * 256 + v], bits) << name << " c" << c << " v" << v;
        }
      }
      ++checked;
    }
    EXPECT_EQ(checked, 6) << name;
  }
}

// --- EXIF / XMP orientation ----------------------------------------------------------

struct ExifCase {
  std::string file;
  std::string pillow;  // "1".."8" or "raises"
};

std::vector<ExifCase> exif_cases() {
  std::vector<ExifCase> cases;
  for (const std::string& line : fixture_lines("exif/expected.txt")) {
    std::istringstream in(line);
    ExifCase c;
    in >> c.file >> c.pillow;
    cases.push_back(c);
  }
  return cases;
}

TEST(Orientation, EqualsPillowOnWellFormedAndMalformedMetadata) {
  const auto cases = exif_cases();
  ASSERT_EQ(cases.size(), 65u);
  for (const ExifCase& c : cases) {
    SCOPED_TRACE(c.file);
    auto data = read_file(fixture("exif/" + c.file));
    ASSERT_TRUE(data.ok()) << data.status().message();
    std::string problem = "stale";
    const int got = image_orientation(data->data(), data->size(), &problem);
    if (c.pillow == "raises") {
      // Pillow fails the whole load; flick keeps the pixels as stored and
      // says why.
      EXPECT_EQ(got, 1);
      EXPECT_FALSE(problem.empty());
    } else {
      EXPECT_EQ(got, std::stoi(c.pillow));
      if (c.file.rfind("ok_", 0) == 0) {
        EXPECT_EQ(problem, "");
      }
    }
  }
}

TEST(Orientation, LoadImageEqualsDiffusersLoadImage) {
  int checked = 0;
  for (const ExifCase& c : exif_cases()) {
    if (c.file.rfind("ok_", 0) != 0) continue;
    SCOPED_TRACE(c.file);
    auto got = load_image_rgb(fixture("exif/" + c.file));
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(frame_diff(*got, read_fixture_png("exif/" + c.file + ".rgb.png")), "");
    ++checked;
  }
  EXPECT_EQ(checked, 35);
}

TEST(Orientation, MalformedFilesStillLoad) {
  for (const ExifCase& c : exif_cases()) {
    if (c.file.rfind("bad_", 0) != 0) continue;
    SCOPED_TRACE(c.file);
    auto got = load_image_rgb(fixture("exif/" + c.file));
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_GT(got->width, 0);
  }
}

TEST(Orientation, ApplyMatchesPillowTransposeAlgebra) {
  const Frame src = synthetic_rgb(5, 3, 2);
  // Inverse pairs: 2, 3, 4, 5, 7 undo themselves; 6 and 8 undo each other.
  const int inverse[9] = {0, 1, 2, 3, 4, 5, 8, 7, 6};
  for (int o = 1; o <= 8; ++o) {
    SCOPED_TRACE(o);
    const Frame once = apply_orientation(src.view(), o);
    EXPECT_EQ(once.width, o >= 5 ? 3 : 5);
    EXPECT_EQ(frame_diff(apply_orientation(once.view(), inverse[o]), src), "");
  }
}

// A TIFF blob with IFD0 = {Orientation = 6, Make (ASCII at an offset)}.
std::vector<uint8_t> valid_tiff() {
  const uint8_t t[] = {
      'I',  'I', 42,  0,   8,   0, 0, 0,               // header: little-endian, IFD0 at 8
      2,    0,                                         // 2 entries
      0x12, 1,   3,   0,   1,   0, 0, 0, 6,  0, 0, 0,  // Orientation SHORT 6 (bytes 10..21)
      0x0F, 1,   2,   0,   6,   0, 0, 0, 38, 0, 0, 0,  // Make ASCII, 6 bytes at 38
      0,    0,   0,   0,                               // no next IFD
      'C',  'a', 'n', 'o', 'n', 0};
  return {std::begin(t), std::end(t)};
}

TEST(ExifOrientation, ReadsAValidBlob) {
  const auto blob = valid_tiff();
  auto r = exif_orientation(blob.data(), blob.size());
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ(**r, 6);
}

TEST(ExifOrientation, TruncationsAndHeaderDamageNeverReadOutOfBounds) {
  const auto blob = valid_tiff();
  for (size_t n = 0; n <= blob.size(); ++n) {
    // An exact-size heap copy, so a sanitizer build sees any overread.
    std::vector<uint8_t> cut(blob.begin(), blob.begin() + n);
    auto r = exif_orientation(cut.data(), cut.size());
    if (n < 8) {
      EXPECT_EQ(r.ok(), n == 0) << n;  // empty: no EXIF; 1..7 bytes: a bad header
    } else {
      ASSERT_TRUE(r.ok()) << n;
      // The orientation entry ends at byte 22 and is inline: from there on
      // it reads, whatever is missing after it.
      EXPECT_EQ(r->has_value(), n >= 22) << n;
      if (r->has_value()) {
        EXPECT_EQ(**r, 6) << n;
      }
    }
  }
  auto bad = blob;
  bad[0] = 'X';
  EXPECT_FALSE(exif_orientation(bad.data(), bad.size()).ok());
}

TEST(ExifOrientation, RandomCorruptionStaysInRange) {
  // Random bytes over a valid blob and a valid JPEG: every answer is a legal
  // orientation (the sanitizer build proves no read leaves the buffer).
  auto jpeg = read_file(fixture("exif/ok_jpeg_after_offset_entry_6.jpg"));
  ASSERT_TRUE(jpeg.ok());
  auto png = read_file(fixture("exif/ok_png_raw_profile_ztxt_5.png"));
  ASSERT_TRUE(png.ok());
  std::mt19937 rng(12345);
  for (const std::vector<uint8_t>& base : {valid_tiff(), *jpeg, *png}) {
    for (int trial = 0; trial < 3000; ++trial) {
      std::vector<uint8_t> m = base;
      const int flips = 1 + static_cast<int>(rng() % 4);
      // Most damage goes into the metadata near the start of the file.
      const size_t span = std::min<size_t>(m.size(), 200);
      for (int i = 0; i < flips; ++i) m[rng() % span] = static_cast<uint8_t>(rng());
      m.resize(m.size() - rng() % std::min<size_t>(m.size(), 64));
      auto r = exif_orientation(m.data(), m.size());
      if (r.ok() && r->has_value()) {
        EXPECT_TRUE(**r >= 1 && **r <= 8);
      }
      const int o = image_orientation(m.data(), m.size());
      EXPECT_TRUE(o >= 1 && o <= 8);
    }
  }
}

TEST(LoadImage, ErrorsNameTheFile) {
  TempDir dir;
  const std::string path = dir.file("not_an_image.png");
  std::ofstream(path) << "hello";
  auto r = load_image_rgb(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
  auto missing = load_image_rgb(dir.file("missing.jpg"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing.jpg"), std::string::npos);
}

}  // namespace
}  // namespace flick
