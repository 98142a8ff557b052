// flick frame archives (.zst): one zstd frame per video frame in the zstd
// seekable format (facebook/zstd contrib/seekable_format), so any frame is read
// without decompressing the others, and plain `zstd -d` yields the raw RGB8
// frames back to back.
//
// Layout (all integers little-endian):
//   skippable frame, magic 0x184D2A50, 40-byte payload (the header):
//     "FLKZ" | version u32 = 1 | width u32 | height u32 | pixel format u32
//     (1 = rgb24) | reserved u32 = 0 | fps f64 | frame count u64
//   one zstd frame per video frame: width*height*3 bytes, content size and
//     XXH64 checksum set
//   seek table skippable frame (magic 0x184D2A5E): one entry per frame above,
//     the header included (decompressed size 0), {compressed u32,
//     decompressed u32, checksum u32}, then the footer {frame count u32,
//     descriptor u8 = 0x80 (checksums present), magic 0x8F92EAB1}.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/frame.h"
#include "runtime/file_util.h"
#include "runtime/status.h"

namespace flick {

struct ArchiveInfo {
  int width = 0;
  int height = 0;
  double fps = 0;
  int64_t frame_count = 0;
};

class FrameArchiveWriter {
 public:
  // Writes to a temporary name beside `path`; finish() renames it into place.
  static Expected<std::unique_ptr<FrameArchiveWriter>> create(const std::string& path, int width,
                                                              int height, double fps,
                                                              int zstd_level);
  ~FrameArchiveWriter();

  Status write(const FrameView& frame);
  // Writes the seek table, fsyncs and renames. The directory is not synced.
  Status finish();

  const std::string& path() const { return file_.path(); }
  int64_t bytes_written() const { return file_.bytes_written(); }

 private:
  struct Entry {
    uint32_t compressed;
    uint32_t decompressed;
    uint32_t checksum;
  };
  FrameArchiveWriter(AtomicFile file, int width, int height, int level);

  AtomicFile file_;
  int width_, height_, level_;
  void* cctx_ = nullptr;  // ZSTD_CCtx
  std::vector<Entry> entries_;
  std::vector<uint8_t> packed_;      // the frame tightly packed when its stride is wider
  std::vector<uint8_t> compressed_;  // reused output buffer
};

class FrameArchiveReader {
 public:
  // Validates the header and the seek table (structure, sizes, offsets) up
  // front; frame data is checked when read (zstd checksums).
  static Expected<FrameArchiveReader> open(const std::string& path);
  // The same for a file already open: the reader takes `fd` over (closes it
  // even on failure); `name` is for messages and path().
  static Expected<FrameArchiveReader> open_fd(int fd, const std::string& name);

  FrameArchiveReader(FrameArchiveReader&& other) noexcept;
  FrameArchiveReader& operator=(FrameArchiveReader&& other) noexcept;
  FrameArchiveReader(const FrameArchiveReader&) = delete;
  FrameArchiveReader& operator=(const FrameArchiveReader&) = delete;
  ~FrameArchiveReader();

  const ArchiveInfo& info() const { return info_; }
  const std::string& path() const { return path_; }
  // Decompresses frame `index` (0-based) only; `out` is reused.
  Status read_frame(int64_t index, Frame* out);

 private:
  FrameArchiveReader() = default;
  void close();

  struct Entry {
    int64_t offset;
    uint32_t compressed;
    uint32_t checksum;
  };
  std::string path_;
  int fd_ = -1;
  void* dctx_ = nullptr;  // ZSTD_DCtx
  ArchiveInfo info_;
  bool has_checksums_ = false;
  std::vector<Entry> frames_;  // video frames only (the header entry is not here)
  std::vector<uint8_t> compressed_;
};

}  // namespace flick
