#include <gtest/gtest.h>
#include <zstd.h>

#include <fstream>

#include "runtime/file_util.h"
#include "io/frame_archive.h"
#include "io_test_util.h"

namespace flick {
namespace {

using testing::noise_frame;
using testing::smooth_frame;
using testing::TempDir;

uint32_t le32(const uint8_t* p) { return p[0] | p[1] << 8 | p[2] << 16 | uint32_t(p[3]) << 24; }

std::vector<Frame> make_frames(int n, int w, int h) {
  std::vector<Frame> frames;
  for (int i = 0; i < n; ++i)
    frames.push_back(i % 2 ? noise_frame(w, h, i) : smooth_frame(w, h, i));
  return frames;
}

std::string write_archive(const TempDir& dir, const std::vector<Frame>& frames, double fps = 24) {
  const std::string path = dir.file("frames.zst");
  auto w = FrameArchiveWriter::create(path, frames[0].width, frames[0].height, fps, 3);
  EXPECT_TRUE(w.ok()) << w.status().message();
  for (const Frame& f : frames) EXPECT_TRUE((*w)->write(f.view()).ok());
  EXPECT_TRUE((*w)->finish().ok());
  return path;
}

std::vector<uint8_t> bytes_of(const std::string& path) { return *read_file(path); }

void write_bytes(const std::string& path, const std::vector<uint8_t>& data) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(data.data()), data.size());
}

TEST(FrameArchive, RoundTripAndRandomAccess) {
  TempDir dir;
  const auto frames = make_frames(9, 31, 17);
  const std::string path = write_archive(dir, frames, 29.97);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"frames.zst"});  // no temporaries left

  auto r = FrameArchiveReader::open(path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->info().width, 31);
  EXPECT_EQ(r->info().height, 17);
  EXPECT_EQ(r->info().fps, 29.97);
  EXPECT_EQ(r->info().frame_count, 9);
  Frame out;
  for (int i : {7, 2, 8, 0, 2, 5}) {
    ASSERT_TRUE(r->read_frame(i, &out).ok());
    EXPECT_EQ(out.width, 31);
    EXPECT_EQ(out.rgb, frames[i].rgb) << "frame " << i;
  }
  EXPECT_FALSE(r->read_frame(9, &out).ok());
  EXPECT_FALSE(r->read_frame(-1, &out).ok());
}

// Independent oracle: zstd's own decoder walks the file as a sequence of
// frames (skipping skippable ones) and must yield the raw frames back to
// back, which is what `zstd -d` on the archive prints.
TEST(FrameArchive, PlainZstdDecodesTheConcatenatedFrames) {
  TempDir dir;
  const auto frames = make_frames(4, 20, 10);
  const auto file = bytes_of(write_archive(dir, frames));
  std::vector<uint8_t> expected;
  for (const Frame& f : frames) expected.insert(expected.end(), f.rgb.begin(), f.rgb.end());
  std::vector<uint8_t> out(expected.size() + 16);
  const size_t n = ZSTD_decompress(out.data(), out.size(), file.data(), file.size());
  ASSERT_FALSE(ZSTD_isError(n)) << ZSTD_getErrorName(n);
  out.resize(n);
  EXPECT_EQ(out, expected);
}

// The seek table as zstd_seekable_compression_format.md lays it out, parsed
// here by hand from the end of the file.
TEST(FrameArchive, SeekTableFollowsTheSeekableFormat) {
  TempDir dir;
  const auto frames = make_frames(3, 8, 6);
  const auto file = bytes_of(write_archive(dir, frames));
  const uint8_t* footer = file.data() + file.size() - 9;
  EXPECT_EQ(le32(footer + 5), 0x8F92EAB1u);  // Seekable_Magic_Number
  const uint32_t n = le32(footer);
  EXPECT_EQ(n, 4u);            // the header frame + 3 video frames
  EXPECT_EQ(footer[4], 0x80);  // Checksum_Flag, reserved bits 0
  const size_t table = file.size() - 8 - (n * 12 + 9);
  EXPECT_EQ(le32(&file[table]), 0x184D2A5Eu);  // Skippable_Magic_Number
  EXPECT_EQ(le32(&file[table + 4]), n * 12 + 9);
  size_t offset = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint8_t* e = &file[table + 8 + 12 * i];
    const uint32_t csize = le32(e), dsize = le32(e + 4);
    // Each entry covers exactly one zstd (or skippable) frame.
    EXPECT_EQ(ZSTD_findFrameCompressedSize(&file[offset], file.size() - offset), csize);
    if (i == 0) {
      EXPECT_EQ(dsize, 0u);
      EXPECT_EQ(le32(&file[offset]) & 0xFFFFFFF0u, 0x184D2A50u);  // a skippable frame
      // The checksum of no content: zstd's own frame checksum of empty input.
      std::vector<uint8_t> empty(64);
      ZSTD_CCtx* c = ZSTD_createCCtx();
      ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1);
      const size_t m = ZSTD_compress2(c, empty.data(), empty.size(), nullptr, 0);
      ZSTD_freeCCtx(c);
      EXPECT_EQ(le32(e + 8), le32(&empty[m - 4]));
    } else {
      EXPECT_EQ(dsize, frames[i - 1].rgb.size());
      EXPECT_EQ(ZSTD_getFrameContentSize(&file[offset], csize), dsize);
    }
    offset += csize;
  }
  EXPECT_EQ(offset, table);
}

TEST(FrameArchive, StridedFramesArePacked) {
  TempDir dir;
  const Frame big = noise_frame(12, 5, 3);
  const std::string path = dir.file("s.zst");
  auto w = FrameArchiveWriter::create(path, 7, 5, 25, 1);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->write(FrameView{7, 5, 36, big.rgb.data()}).ok());
  EXPECT_FALSE((*w)->write(FrameView{6, 5, 36, big.rgb.data()}).ok());  // wrong size
  ASSERT_TRUE((*w)->finish().ok());
  auto r = FrameArchiveReader::open(path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  Frame out;
  ASSERT_TRUE(r->read_frame(0, &out).ok());
  for (int y = 0; y < 5; ++y) {
    for (int x = 0; x < 21; ++x) ASSERT_EQ(out.rgb[y * 21 + x], big.rgb[y * 36 + x]);
  }
}

class CorruptArchive : public ::testing::Test {
 protected:
  void SetUp() override {
    frames_ = make_frames(5, 16, 8);
    good_ = bytes_of(write_archive(dir_, frames_));
  }
  // Writes `data` and returns the error from opening and reading every frame.
  Status check(const std::vector<uint8_t>& data) {
    const std::string path = dir_.file("bad.zst");
    write_bytes(path, data);
    auto r = FrameArchiveReader::open(path);
    if (!r.ok()) return r.status();
    Frame out;
    for (int64_t i = 0; i < r->info().frame_count; ++i) FLICK_TRY(r->read_frame(i, &out));
    return ok_status();
  }
  static bool mentions(const Status& s, const std::string& text) {
    return s.message().find(text) != std::string::npos &&
           s.message().find("bad.zst") != std::string::npos;
  }

  TempDir dir_;
  std::vector<Frame> frames_;
  std::vector<uint8_t> good_;
};

TEST_F(CorruptArchive, IntactArchiveReads) { EXPECT_TRUE(check(good_).ok()); }

TEST_F(CorruptArchive, TruncatedTail) {
  for (size_t cut : {size_t{1}, size_t{9}, size_t{40}, good_.size() / 2}) {
    auto data = good_;
    data.resize(data.size() - cut);
    Status s = check(data);
    ASSERT_FALSE(s.ok()) << "cut " << cut;
    EXPECT_EQ(s.code(), StatusCode::kInvalidInput);
    EXPECT_TRUE(mentions(s, "seek table")) << s.message();
  }
}

TEST_F(CorruptArchive, EmptyAndTinyFiles) {
  EXPECT_TRUE(mentions(check({}), "too short"));
  EXPECT_TRUE(mentions(check({1, 2, 3}), "too short"));
}

TEST_F(CorruptArchive, BytesRemovedFromTheMiddle) {
  auto data = good_;
  data.erase(data.begin() + 100, data.begin() + 110);
  Status s = check(data);
  EXPECT_TRUE(mentions(s, "add up")) << s.message();
}

TEST_F(CorruptArchive, FlippedFrameByte) {
  // A byte inside frame 2's compressed data: zstd either fails to decode it
  // or the content checksum no longer matches.
  const uint8_t* t = good_.data() + good_.size() - 9 - 6 * 12;  // the 6 entries
  size_t offset = 0;
  for (int i = 0; i < 3; ++i) offset += le32(t + 12 * i);  // header, frame 0, frame 1
  auto data = good_;
  data[offset + le32(t + 12 * 3) / 2] ^= 0x20;
  Status s = check(data);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(mentions(s, "frame 2")) << s.message();
}

TEST_F(CorruptArchive, HeaderDamage) {
  auto data = good_;
  data[8] = 'X';  // "FLKZ" magic
  EXPECT_TRUE(mentions(check(data), "not a flick frame archive"));
  data = good_;
  data[12] = 9;  // version
  EXPECT_TRUE(mentions(check(data), "version"));
  data = good_;
  data[40] = 4;  // frame count 5 -> 4
  EXPECT_TRUE(mentions(check(data), "header says 4 frames"));
}

TEST_F(CorruptArchive, SeekTableDamage) {
  auto data = good_;
  data[data.size() - 5] = 0x84;  // a reserved descriptor bit
  EXPECT_TRUE(mentions(check(data), "reserved"));
  data = good_;
  data[data.size() - 9] = 200;  // frame count larger than the table
  EXPECT_FALSE(check(data).ok());
  data = good_;
  const size_t entry1 = data.size() - 9 - 5 * 12;  // frame 0's entry
  data[entry1 + 4] ^= 1;                           // its decompressed size
  EXPECT_TRUE(mentions(check(data), "frame 0"));
}

// Any single damaged byte either makes open/read fail or leaves every frame
// intact (e.g. a changed fps or an equivalent zstd header field): corrupt
// pixels never come out silently.
TEST_F(CorruptArchive, NoSilentCorruptionFromAnyByteFlip) {
  uint32_t s = 99;
  int detected = 0;
  for (int trial = 0; trial < 400; ++trial) {
    s = s * 1664525u + 1013904223u;
    const size_t pos = trial < int(good_.size()) && trial < 64 ? trial : s % good_.size();
    auto data = good_;
    data[pos] ^= static_cast<uint8_t>(1u << (s >> 29));
    const std::string path = dir_.file("flip.zst");
    write_bytes(path, data);
    auto r = FrameArchiveReader::open(path);
    if (!r.ok()) {
      ++detected;
      continue;
    }
    Frame out;
    for (int64_t i = 0; i < r->info().frame_count; ++i) {
      Status st = r->read_frame(i, &out);
      if (!st.ok()) {
        ++detected;
        break;
      }
      ASSERT_EQ(out.rgb, frames_[i].rgb) << "flip at byte " << pos << " went unnoticed";
    }
  }
  EXPECT_GT(detected, 300);
}

TEST(FrameArchive, RejectsBadParameters) {
  TempDir dir;
  EXPECT_FALSE(FrameArchiveWriter::create(dir.file("a.zst"), 0, 4, 25, 3).ok());
  EXPECT_FALSE(FrameArchiveWriter::create(dir.file("a.zst"), 4, 4, 0, 3).ok());
  EXPECT_FALSE(FrameArchiveWriter::create(dir.file("a.zst"), 4, 4, 25, 99).ok());
  EXPECT_TRUE(dir.entries().empty());
  auto missing = FrameArchiveReader::open(dir.file("none.zst"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace flick
