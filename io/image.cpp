#include "io/image.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/file_util.h"

namespace flick {
namespace {

Expected<ImageFormat> sniff_format_fd(int fd, const std::string& name) {
  uint8_t head[8] = {};
  const ssize_t n = ::pread(fd, head, sizeof(head), 0);
  if (n < 0) return errno_status("cannot read", name, errno);
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (n == 8 && std::memcmp(head, kPng, 8) == 0) return ImageFormat::kPng;
  if (n >= 3 && head[0] == 0xff && head[1] == 0xd8 && head[2] == 0xff) return ImageFormat::kJpeg;
  return invalid_input(name + ": not a PNG or JPEG file");
}

Expected<ImageFormat> sniff_format(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open", path, errno);
  Expected<ImageFormat> f = sniff_format_fd(fd, path);
  ::close(fd);
  return f;
}

// Whole files, as read_jpeg allows (PNG decoding has its own pixel limits).
constexpr int64_t kMaxImageFileBytes = int64_t{1} << 30;

}  // namespace

Expected<Frame> read_image(const std::string& path) {
  FLICK_ASSIGN_OR_RETURN(ImageFormat format, sniff_format(path));
  return format == ImageFormat::kPng ? read_png(path) : read_jpeg(path);
}

Expected<ImageInfo> read_image_info(const std::string& path) {
  FLICK_ASSIGN_OR_RETURN(ImageFormat format, sniff_format(path));
  return format == ImageFormat::kPng ? read_png_info(path) : read_jpeg_info(path);
}

Expected<Frame> read_image_fd(int fd, const std::string& name) {
  FLICK_ASSIGN_OR_RETURN(ImageFormat format, sniff_format_fd(fd, name));
  FLICK_ASSIGN_OR_RETURN(std::vector<uint8_t> data, read_fd(fd, name, kMaxImageFileBytes));
  return format == ImageFormat::kPng ? decode_png(data.data(), data.size(), name)
                                     : decode_jpeg(data.data(), data.size(), name);
}

Expected<ImageInfo> read_image_info_fd(int fd, const std::string& name) {
  FLICK_ASSIGN_OR_RETURN(ImageFormat format, sniff_format_fd(fd, name));
  if (format == ImageFormat::kPng) return read_png_info_fd(fd, name);
  FLICK_ASSIGN_OR_RETURN(std::vector<uint8_t> data, read_fd(fd, name, kMaxImageFileBytes));
  return decode_jpeg_info(data.data(), data.size(), name);
}

}  // namespace flick
