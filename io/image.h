// PNG (libpng) and JPEG (TurboJPEG) still images as RGB8 frames.
//
// Reading converts whatever the file holds to RGB8 the way Pillow's
// Image.convert("RGB") does: palette and gray are expanded, alpha is dropped
// (not composited), 16-bit samples keep their high byte, gamma chunks are
// ignored. Every error names the file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/frame.h"
#include "runtime/status.h"

namespace flick {

enum class ImageFormat { kPng, kJpeg };

struct ImageInfo {
  ImageFormat format = ImageFormat::kPng;
  int width = 0;
  int height = 0;
};

// Larger images are refused from their header, before any allocation.
inline constexpr int kMaxImageSide = 32768;
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 27;  // 400 MB as RGB8

// --- PNG ---------------------------------------------------------------------

// Encodes RGB8 into `out` (cleared first) with the Sub filter at the given
// zlib level (0: stored; 1: fastest, run-length matching; up to 9: smallest).
Status encode_png(const FrameView& frame, int zlib_level, std::vector<uint8_t>* out);
// `name` is only used in error messages.
Expected<Frame> decode_png(const uint8_t* data, size_t size, const std::string& name);
Expected<Frame> read_png(const std::string& path);
Expected<ImageInfo> read_png_info(const std::string& path);
// The header of the PNG open on `fd` (read from its start; the descriptor
// stays open and its offset is not used).
Expected<ImageInfo> read_png_info_fd(int fd, const std::string& name);
// tmp -> fsync -> rename.
Status write_png(const std::string& path, const FrameView& frame, int zlib_level);

// --- JPEG --------------------------------------------------------------------

// Holds a TurboJPEG compressor (one per thread; reuse it across frames).
class JpegEncoder {
 public:
  static Expected<JpegEncoder> create();
  // 4:2:0 chroma subsampling, quality 1..100; `out` is resized to the result.
  Status encode(const FrameView& frame, int quality, std::vector<uint8_t>* out);

 private:
  struct Deleter {
    void operator()(void* handle) const;
  };
  std::unique_ptr<void, Deleter> handle_;
  std::vector<uint8_t> packed_;  // a tightly packed copy when stride != 3 * width
};

Expected<Frame> decode_jpeg(const uint8_t* data, size_t size, const std::string& name);
Expected<Frame> read_jpeg(const std::string& path);
Expected<ImageInfo> read_jpeg_info(const std::string& path);
Expected<ImageInfo> decode_jpeg_info(const uint8_t* data, size_t size, const std::string& name);
Status write_jpeg(const std::string& path, const FrameView& frame, int quality);

// --- Either ------------------------------------------------------------------

// Detects PNG / JPEG by signature (not by extension).
Expected<Frame> read_image(const std::string& path);
// Width and height from the header, without decoding the pixels.
Expected<ImageInfo> read_image_info(const std::string& path);
// The same for a file already open (callers that confine where a file may
// be open it themselves, then read only through the descriptor); `name`
// is for messages, the descriptor stays open.
Expected<Frame> read_image_fd(int fd, const std::string& name);
Expected<ImageInfo> read_image_info_fd(int fd, const std::string& name);

}  // namespace flick
