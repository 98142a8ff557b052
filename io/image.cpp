#include "io/image.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace flick {
namespace {

Expected<ImageFormat> sniff_format(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open", path, errno);
  uint8_t head[8] = {};
  ssize_t n = ::read(fd, head, sizeof(head));
  int err = errno;
  ::close(fd);
  if (n < 0) return errno_status("cannot read", path, err);
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (n == 8 && std::memcmp(head, kPng, 8) == 0) return ImageFormat::kPng;
  if (n >= 3 && head[0] == 0xff && head[1] == 0xd8 && head[2] == 0xff) return ImageFormat::kJpeg;
  return invalid_input(path + ": not a PNG or JPEG file");
}

}  // namespace

Expected<Frame> read_image(const std::string& path) {
  FLICK_ASSIGN_OR_RETURN(ImageFormat format, sniff_format(path));
  return format == ImageFormat::kPng ? read_png(path) : read_jpeg(path);
}

Expected<ImageInfo> read_image_info(const std::string& path) {
  FLICK_ASSIGN_OR_RETURN(ImageFormat format, sniff_format(path));
  return format == ImageFormat::kPng ? read_png_info(path) : read_jpeg_info(path);
}

}  // namespace flick
