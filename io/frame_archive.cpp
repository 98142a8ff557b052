#include "io/frame_archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

namespace flick {
namespace {

constexpr uint32_t kHeaderFrameMagic = 0x184D2A50;  // first of zstd's skippable range
constexpr uint32_t kSeekTableMagic = 0x184D2A5E;    // the seekable format's skippable frame
constexpr uint32_t kSeekableMagic = 0x8F92EAB1;     // last 4 bytes of the file
constexpr uint8_t kChecksumFlag = 0x80;
constexpr uint8_t kReservedBits = 0x7C;
constexpr char kArchiveMagic[4] = {'F', 'L', 'K', 'Z'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kPixelRgb24 = 1;
constexpr size_t kHeaderPayload = 40;
constexpr size_t kHeaderFrameSize = 8 + kHeaderPayload;
constexpr size_t kFrameCountOffset = 8 + 32;
constexpr size_t kFooterSize = 9;
// The seekable format's limits (zstd 1.5.4 seekable.h).
constexpr int64_t kMaxFrames = 0x8000000;
constexpr int64_t kMaxFrameBytes = 0x40000000;
// Low 32 bits of XXH64 of no bytes (seed 0): the checksum of the header's
// empty decompressed content.
constexpr uint32_t kEmptyChecksum = 0x51D8E999;

void put_le32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_le64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
uint64_t get_le64(const uint8_t* p) { return get_le32(p) | uint64_t{get_le32(p + 4)} << 32; }

Status pread_all(int fd, void* dst, size_t size, int64_t offset, const std::string& path) {
  auto* p = static_cast<uint8_t*>(dst);
  while (size > 0) {
    ssize_t n = ::pread(fd, p, size, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("cannot read", path, errno);
    }
    if (n == 0) return invalid_input(path + ": unexpected end of file (truncated archive)");
    p += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
  return ok_status();
}

int64_t frame_bytes(int width, int height) { return int64_t{3} * width * height; }

}  // namespace

// --- writer ------------------------------------------------------------------

FrameArchiveWriter::FrameArchiveWriter(AtomicFile file, int width, int height, int level)
    : file_(std::move(file)), width_(width), height_(height), level_(level) {}

FrameArchiveWriter::~FrameArchiveWriter() { ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(cctx_)); }

Expected<std::unique_ptr<FrameArchiveWriter>> FrameArchiveWriter::create(const std::string& path,
                                                                         int width, int height,
                                                                         double fps,
                                                                         int zstd_level) {
  if (width <= 0 || height <= 0 || frame_bytes(width, height) > kMaxFrameBytes) {
    return invalid_input(path + ": frame size " + std::to_string(width) + "x" +
                         std::to_string(height) + " is out of range for a frame archive");
  }
  if (!(fps > 0) || !std::isfinite(fps)) {
    return invalid_input(path + ": fps must be positive, got " + std::to_string(fps));
  }
  if (zstd_level < ZSTD_minCLevel() || zstd_level > ZSTD_maxCLevel()) {
    return invalid_input(path + ": zstd level " + std::to_string(zstd_level) + " is out of range");
  }
  FLICK_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::create(path));
  std::unique_ptr<FrameArchiveWriter> w(
      new FrameArchiveWriter(std::move(file), width, height, zstd_level));
  auto* cctx = ZSTD_createCCtx();
  if (cctx == nullptr) return internal_error(path + ": cannot create a zstd compressor");
  w->cctx_ = cctx;
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, zstd_level);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);

  uint8_t header[kHeaderFrameSize] = {};
  put_le32(header, kHeaderFrameMagic);
  put_le32(header + 4, kHeaderPayload);
  std::memcpy(header + 8, kArchiveMagic, 4);
  put_le32(header + 12, kVersion);
  put_le32(header + 16, static_cast<uint32_t>(width));
  put_le32(header + 20, static_cast<uint32_t>(height));
  put_le32(header + 24, kPixelRgb24);
  put_le32(header + 28, 0);
  uint64_t fps_bits;
  std::memcpy(&fps_bits, &fps, 8);
  put_le64(header + 32, fps_bits);
  put_le64(header + kFrameCountOffset, 0);  // patched by finish()
  FLICK_TRY(w->file_.write(header, sizeof(header)));
  w->entries_.push_back({static_cast<uint32_t>(kHeaderFrameSize), 0, kEmptyChecksum});
  return w;
}

Status FrameArchiveWriter::write(const FrameView& f) {
  if (f.width != width_ || f.height != height_) {
    return invalid_input(path() + ": frame " + std::to_string(entries_.size() - 1) + " is " +
                         std::to_string(f.width) + "x" + std::to_string(f.height) +
                         ", the archive holds " + std::to_string(width_) + "x" +
                         std::to_string(height_));
  }
  if (static_cast<int64_t>(entries_.size()) >= kMaxFrames) {
    return invalid_input(path() + ": too many frames for one archive");
  }
  const size_t row = size_t{3} * width_;
  const size_t n = row * height_;
  const uint8_t* src = f.rgb;
  if (f.stride != static_cast<int64_t>(row)) {
    packed_.resize(n);
    for (int y = 0; y < height_; ++y)
      std::memcpy(packed_.data() + row * y, f.rgb + f.stride * y, row);
    src = packed_.data();
  }
  compressed_.resize(ZSTD_compressBound(n));
  size_t size = ZSTD_compress2(static_cast<ZSTD_CCtx*>(cctx_), compressed_.data(),
                               compressed_.size(), src, n);
  if (ZSTD_isError(size)) {
    return internal_error(path() + ": zstd compression failed: " + ZSTD_getErrorName(size));
  }
  // A compressed frame is at most a little larger than its 1 GiB input.
  FLICK_CHECK(size <= UINT32_MAX);
  // With the checksum flag, zstd ends the frame with the low 32 bits of the
  // content's XXH64: exactly the seek table's checksum.
  const uint32_t checksum = get_le32(compressed_.data() + size - 4);
  FLICK_TRY(file_.write(compressed_.data(), size));
  entries_.push_back({static_cast<uint32_t>(size), static_cast<uint32_t>(n), checksum});
  return ok_status();
}

Status FrameArchiveWriter::finish() {
  const size_t entry_bytes = 12;
  const size_t payload = entries_.size() * entry_bytes + kFooterSize;
  std::vector<uint8_t> table(8 + payload);
  put_le32(table.data(), kSeekTableMagic);
  put_le32(table.data() + 4, static_cast<uint32_t>(payload));
  uint8_t* p = table.data() + 8;
  for (const Entry& e : entries_) {
    put_le32(p, e.compressed);
    put_le32(p + 4, e.decompressed);
    put_le32(p + 8, e.checksum);
    p += entry_bytes;
  }
  put_le32(p, static_cast<uint32_t>(entries_.size()));
  p[4] = kChecksumFlag;
  put_le32(p + 5, kSeekableMagic);
  FLICK_TRY(file_.write(table.data(), table.size()));
  uint8_t count[8];
  put_le64(count, entries_.size() - 1);
  FLICK_TRY(file_.pwrite(count, sizeof(count), kFrameCountOffset));
  return file_.commit();
}

// --- reader ------------------------------------------------------------------

FrameArchiveReader::FrameArchiveReader(FrameArchiveReader&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(o.fd_),
      dctx_(o.dctx_),
      info_(o.info_),
      has_checksums_(o.has_checksums_),
      frames_(std::move(o.frames_)),
      compressed_(std::move(o.compressed_)) {
  o.fd_ = -1;
  o.dctx_ = nullptr;
}

FrameArchiveReader& FrameArchiveReader::operator=(FrameArchiveReader&& o) noexcept {
  if (this != &o) {
    close();
    path_ = std::move(o.path_);
    fd_ = o.fd_;
    dctx_ = o.dctx_;
    info_ = o.info_;
    has_checksums_ = o.has_checksums_;
    frames_ = std::move(o.frames_);
    compressed_ = std::move(o.compressed_);
    o.fd_ = -1;
    o.dctx_ = nullptr;
  }
  return *this;
}

FrameArchiveReader::~FrameArchiveReader() { close(); }

void FrameArchiveReader::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ZSTD_freeDCtx(static_cast<ZSTD_DCtx*>(dctx_));
  dctx_ = nullptr;
}

Expected<FrameArchiveReader> FrameArchiveReader::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open", path, errno);
  return open_fd(fd, path);
}

Expected<FrameArchiveReader> FrameArchiveReader::open_fd(int fd, const std::string& path) {
  FrameArchiveReader r;
  r.path_ = path;
  r.fd_ = fd;
  struct stat st;
  if (::fstat(r.fd_, &st) != 0) return errno_status("cannot stat", path, errno);
  if (!S_ISREG(st.st_mode)) return invalid_input(path + " is not a regular file");
  const int64_t file_size = st.st_size;
  auto corrupt = [&](const std::string& what) { return invalid_input(path + ": " + what); };

  const int64_t min_size = kHeaderFrameSize + 8 + 12 + kFooterSize;
  if (file_size < min_size) {
    return corrupt("too short (" + std::to_string(file_size) +
                   " bytes) to be a flick frame archive");
  }
  uint8_t footer[kFooterSize];
  FLICK_TRY(pread_all(r.fd_, footer, kFooterSize, file_size - kFooterSize, path));
  if (get_le32(footer + 5) != kSeekableMagic) {
    return corrupt(
        "no zstd seek table at the end of the file (the archive is truncated, was not "
        "finished, or is not a flick frame archive)");
  }
  const int64_t n_entries = get_le32(footer);
  const uint8_t descriptor = footer[4];
  if (descriptor & kReservedBits) return corrupt("seek table uses reserved descriptor bits");
  if (n_entries < 1 || n_entries > kMaxFrames) {
    return corrupt("seek table lists " + std::to_string(n_entries) + " frames");
  }
  const bool has_checksums = descriptor & kChecksumFlag;
  const int64_t entry_bytes = has_checksums ? 12 : 8;
  const int64_t payload = n_entries * entry_bytes + kFooterSize;
  const int64_t table_start = file_size - 8 - payload;
  if (table_start < static_cast<int64_t>(kHeaderFrameSize)) {
    return corrupt("seek table is larger than the file (corrupt or truncated)");
  }
  std::vector<uint8_t> table(8 + payload);
  FLICK_TRY(pread_all(r.fd_, table.data(), table.size(), table_start, path));
  if (get_le32(table.data()) != kSeekTableMagic || get_le32(table.data() + 4) != payload) {
    return corrupt("seek table frame header is corrupt");
  }

  uint8_t header[kHeaderFrameSize];
  FLICK_TRY(pread_all(r.fd_, header, kHeaderFrameSize, 0, path));
  if (get_le32(header) != kHeaderFrameMagic || get_le32(header + 4) != kHeaderPayload ||
      std::memcmp(header + 8, kArchiveMagic, 4) != 0) {
    return corrupt("not a flick frame archive (no FLKZ header frame)");
  }
  if (get_le32(header + 12) != kVersion) {
    return corrupt("unsupported frame archive version " + std::to_string(get_le32(header + 12)));
  }
  const uint32_t width = get_le32(header + 16);
  const uint32_t height = get_le32(header + 20);
  if (get_le32(header + 24) != kPixelRgb24 || get_le32(header + 28) != 0) {
    return corrupt("unsupported pixel format " + std::to_string(get_le32(header + 24)));
  }
  if (width == 0 || height == 0 || width > 65535 || height > 65535 ||
      frame_bytes(width, height) > kMaxFrameBytes) {
    return corrupt("frame size " + std::to_string(width) + "x" + std::to_string(height) +
                   " is out of range");
  }
  double fps;
  const uint64_t fps_bits = get_le64(header + 32);
  std::memcpy(&fps, &fps_bits, 8);
  if (!(fps > 0) || !std::isfinite(fps))
    return corrupt("fps in the header is not a positive number");
  const uint64_t header_count = get_le64(header + kFrameCountOffset);
  if (header_count != static_cast<uint64_t>(n_entries - 1)) {
    return corrupt("header says " + std::to_string(header_count) + " frames, seek table has " +
                   std::to_string(n_entries - 1));
  }
  r.has_checksums_ = has_checksums;
  r.info_ = {static_cast<int>(width), static_cast<int>(height), fps, n_entries - 1};

  const int64_t expected = frame_bytes(width, height);
  int64_t offset = 0;
  const uint8_t* e = table.data() + 8;
  r.frames_.reserve(n_entries - 1);
  for (int64_t i = 0; i < n_entries; ++i, e += entry_bytes) {
    const uint32_t csize = get_le32(e);
    const uint32_t dsize = get_le32(e + 4);
    if (i == 0) {
      if (csize != kHeaderFrameSize || dsize != 0)
        return corrupt("seek table entry 0 is not the header");
    } else {
      if (dsize != expected || csize == 0) {
        return corrupt("seek table entry for frame " + std::to_string(i - 1) + " is corrupt (" +
                       std::to_string(csize) + " -> " + std::to_string(dsize) +
                       " bytes, expected " + std::to_string(expected) + " decompressed)");
      }
      r.frames_.push_back({offset, csize, has_checksums ? get_le32(e + 8) : 0});
    }
    offset += csize;
  }
  if (offset != table_start) {
    return corrupt("seek table sizes add up to " + std::to_string(offset) +
                   " bytes but the frames take " + std::to_string(table_start) +
                   " (corrupt or truncated archive)");
  }
  r.dctx_ = ZSTD_createDCtx();
  if (r.dctx_ == nullptr) return internal_error(path + ": cannot create a zstd decompressor");
  return r;
}

Status FrameArchiveReader::read_frame(int64_t index, Frame* out) {
  if (index < 0 || index >= info_.frame_count) {
    return invalid_input(path_ + ": frame " + std::to_string(index) + " does not exist (" +
                         std::to_string(info_.frame_count) + " frames)");
  }
  const Entry& e = frames_[index];
  const std::string where = path_ + ": frame " + std::to_string(index);
  compressed_.resize(e.compressed);
  FLICK_TRY(pread_all(fd_, compressed_.data(), e.compressed, e.offset, path_));
  const size_t expected = static_cast<size_t>(frame_bytes(info_.width, info_.height));
  if (ZSTD_findFrameCompressedSize(compressed_.data(), e.compressed) != e.compressed ||
      ZSTD_getFrameContentSize(compressed_.data(), e.compressed) != expected) {
    return invalid_input(where + " is corrupt (not one zstd frame of the expected size)");
  }
  // Frame_Header_Descriptor bit 2: the frame ends with its content checksum,
  // which must be the one the seek table recorded.
  const bool frame_has_checksum = compressed_[4] & 0x04;
  if (has_checksums_ && frame_has_checksum &&
      get_le32(compressed_.data() + e.compressed - 4) != e.checksum) {
    return invalid_input(where + " does not match the seek table checksum (corrupt archive)");
  }
  out->width = info_.width;
  out->height = info_.height;
  out->rgb.resize(expected);
  size_t n = ZSTD_decompressDCtx(static_cast<ZSTD_DCtx*>(dctx_), out->rgb.data(), expected,
                                 compressed_.data(), e.compressed);
  if (ZSTD_isError(n)) {
    return invalid_input(where + " is corrupt (zstd: " + ZSTD_getErrorName(n) + ")");
  }
  if (n != expected) return invalid_input(where + " is corrupt (short frame)");
  return ok_status();
}

}  // namespace flick
