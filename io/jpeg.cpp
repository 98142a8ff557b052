#include <turbojpeg.h>

#include <cstring>

#include "io/image.h"
#include "runtime/file_util.h"

namespace flick {
namespace {

// JPEG files larger than this are refused (a 32768^2 4:4:4 q100 image is
// well below it).
constexpr int64_t kMaxJpegBytes = int64_t{1} << 30;

struct TjHandle {
  tjhandle h;
  explicit TjHandle(tjhandle handle) : h(handle) {}
  ~TjHandle() {
    if (h != nullptr) tjDestroy(h);
  }
  TjHandle(const TjHandle&) = delete;
  TjHandle& operator=(const TjHandle&) = delete;
};

std::string tj_message(tjhandle h) {
  return h != nullptr ? tjGetErrorStr2(h) : tjGetErrorStr2(nullptr);
}

struct JpegHeader {
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
};

Expected<JpegHeader> parse_header(tjhandle h, const uint8_t* data, size_t size,
                                  const std::string& name) {
  JpegHeader hdr;
  if (size > static_cast<size_t>(kMaxJpegBytes)) return invalid_input(name + ": JPEG is too large");
  if (tjDecompressHeader3(h, data, static_cast<unsigned long>(size), &hdr.width, &hdr.height,
                          &hdr.subsamp, &hdr.colorspace) != 0) {
    return invalid_input(name + ": invalid JPEG: " + tj_message(h));
  }
  if (hdr.width <= 0 || hdr.height <= 0 || hdr.width > kMaxImageSide ||
      hdr.height > kMaxImageSide || int64_t{hdr.width} * hdr.height > kMaxImagePixels) {
    return invalid_input(name + ": JPEG size " + std::to_string(hdr.width) + "x" +
                         std::to_string(hdr.height) + " is out of range (sides 1.." +
                         std::to_string(kMaxImageSide) + ", at most " +
                         std::to_string(kMaxImagePixels) + " pixels)");
  }
  if (hdr.colorspace == TJCS_CMYK || hdr.colorspace == TJCS_YCCK) {
    return invalid_input(name + ": CMYK JPEGs are not supported; convert to RGB");
  }
  return hdr;
}

}  // namespace

void JpegEncoder::Deleter::operator()(void* handle) const { tjDestroy(handle); }

Expected<JpegEncoder> JpegEncoder::create() {
  tjhandle h = tjInitCompress();
  if (h == nullptr) return internal_error("cannot create a JPEG encoder: " + tj_message(nullptr));
  JpegEncoder enc;
  enc.handle_.reset(h);
  return enc;
}

Status JpegEncoder::encode(const FrameView& f, int quality, std::vector<uint8_t>* out) {
  FLICK_CHECK(f.width > 0 && f.height > 0 && f.stride >= 3 * f.width);
  FLICK_CHECK(quality >= 1 && quality <= 100, "JPEG quality " + std::to_string(quality));
  // tjCompress2 takes a pitch, but only an int one; rows further apart than
  // INT_MAX bytes are not a case worth a second path, so FLICK_CHECK it.
  FLICK_CHECK(f.stride <= INT32_MAX);
  out->resize(tjBufSize(f.width, f.height, TJSAMP_420));
  unsigned char* buf = out->data();
  unsigned long size = out->size();
  if (tjCompress2(handle_.get(), f.rgb, f.width, static_cast<int>(f.stride), f.height, TJPF_RGB,
                  &buf, &size, TJSAMP_420, quality, TJFLAG_NOREALLOC) != 0) {
    return internal_error("JPEG encoding failed: " + tj_message(handle_.get()));
  }
  out->resize(size);
  return ok_status();
}

Expected<Frame> decode_jpeg(const uint8_t* data, size_t size, const std::string& name) {
  TjHandle h(tjInitDecompress());
  if (h.h == nullptr) return internal_error("cannot create a JPEG decoder: " + tj_message(nullptr));
  FLICK_ASSIGN_OR_RETURN(JpegHeader hdr, parse_header(h.h, data, size, name));
  Frame frame;
  frame.width = hdr.width;
  frame.height = hdr.height;
  frame.rgb.resize(size_t{3} * hdr.width * hdr.height);
  // Warnings (truncated or corrupt entropy data) are errors: a frame with a
  // gray bottom half is not what anyone wants encoded. LIMITSCANS refuses a
  // progressive JPEG of more than 500 scans: each scan revisits the whole
  // image, so a 400 kB file of 694 valid scans over 32768x4096 pixels took
  // 40 s of CPU to decode (real encoders write about 10).
  if (tjDecompress2(h.h, data, static_cast<unsigned long>(size), frame.rgb.data(), hdr.width, 0,
                    hdr.height, TJPF_RGB, TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0) {
    return invalid_input(name + ": invalid JPEG: " + tj_message(h.h));
  }
  return frame;
}

Expected<Frame> read_jpeg(const std::string& path) {
  FLICK_ASSIGN_OR_RETURN(auto data, read_file(path, kMaxJpegBytes));
  return decode_jpeg(data.data(), data.size(), path);
}

Expected<ImageInfo> read_jpeg_info(const std::string& path) {
  FLICK_ASSIGN_OR_RETURN(auto data, read_file(path, kMaxJpegBytes));
  return decode_jpeg_info(data.data(), data.size(), path);
}

Expected<ImageInfo> decode_jpeg_info(const uint8_t* data, size_t size, const std::string& name) {
  TjHandle h(tjInitDecompress());
  if (h.h == nullptr) return internal_error("cannot create a JPEG decoder: " + tj_message(nullptr));
  FLICK_ASSIGN_OR_RETURN(JpegHeader hdr, parse_header(h.h, data, size, name));
  return ImageInfo{ImageFormat::kJpeg, hdr.width, hdr.height};
}

Status write_jpeg(const std::string& path, const FrameView& frame, int quality) {
  FLICK_ASSIGN_OR_RETURN(JpegEncoder enc, JpegEncoder::create());
  std::vector<uint8_t> data;
  FLICK_TRY(enc.encode(frame, quality, &data).with_context(path));
  return write_file_atomic(path, data.data(), data.size());
}

}  // namespace flick
