// libpng reports errors by longjmp. The functions that call setjmp below own
// no C++ objects with destructors (everything they touch lives in the caller),
// and no exception ever crosses libpng's C frames.
#include <png.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <new>

#include "io/image.h"
#include "runtime/file_util.h"

namespace flick {
namespace {

struct PngError {
  char message[256] = "unknown libpng error";
};

void on_png_error(png_structp png, png_const_charp msg) {
  auto* err = static_cast<PngError*>(png_get_error_ptr(png));
  std::snprintf(err->message, sizeof(err->message), "%s", msg);
  png_longjmp(png, 1);
}

void on_png_warning(png_structp, png_const_charp) {}

// --- writing ---

struct PngWriteTarget {
  std::vector<uint8_t>* out;
  bool out_of_memory;
};

void on_png_write(png_structp png, png_bytep data, png_size_t size) {
  auto* target = static_cast<PngWriteTarget*>(png_get_io_ptr(png));
  try {
    target->out->insert(target->out->end(), data, data + size);
  } catch (const std::bad_alloc&) {
    target->out_of_memory = true;
    png_error(png, "out of memory");
  }
}

void on_png_flush(png_structp) {}

// Returns false with err->message set on failure.
bool png_encode_impl(const FrameView& f, int level, PngWriteTarget* target, PngError* err) {
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, err, on_png_error, on_png_warning);
  if (png == nullptr) {
    std::snprintf(err->message, sizeof(err->message), "cannot create a PNG writer");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, target, on_png_write, on_png_flush);
  // Sub is one subtraction per byte and, on rendered frames, compresses as
  // well as libpng's adaptive choice among all five filters at a fraction of
  // its cost. At level 1, Z_RLE (runs of the previous byte only) was measured
  // 2x faster than zlib's level-1 matcher on 640x352 frames and gave smaller
  // files after the Sub filter; higher levels use zlib's normal matcher.
  png_set_filter(png, PNG_FILTER_TYPE_BASE, level == 0 ? PNG_FILTER_NONE : PNG_FILTER_SUB);
  png_set_compression_level(png, level);
  if (level == 1) png_set_compression_strategy(png, Z_RLE);
  png_set_IHDR(png, info, static_cast<png_uint_32>(f.width), static_cast<png_uint_32>(f.height), 8,
               PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_BASE,
               PNG_FILTER_TYPE_BASE);
  png_write_info(png, info);
  for (int y = 0; y < f.height; ++y) {
    png_write_row(png, f.rgb + y * f.stride);
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

// --- reading ---

struct PngSource {
  FILE* file = nullptr;           // either a file ...
  const uint8_t* data = nullptr;  // ... or memory
  size_t size = 0;
  size_t pos = 0;
};

void on_png_read(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (src->file != nullptr) {
    if (std::fread(out, 1, n, src->file) != n) png_error(png, "file is truncated");
    return;
  }
  if (src->size - src->pos < n) png_error(png, "data is truncated");
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

// Everything png_decode_impl fills lives here, owned by its caller.
struct PngReadTarget {
  ImageInfo info;
  bool header_only = false;
  Frame* frame = nullptr;
  std::vector<png_bytep>* rows = nullptr;
};

// Sizes the caller's frame and row pointers (never called under longjmp).
png_bytepp prepare_rows(PngReadTarget* t, png_uint_32 width, png_uint_32 height) {
  t->frame->width = static_cast<int>(width);
  t->frame->height = static_cast<int>(height);
  t->frame->rgb.resize(size_t{3} * width * height);
  t->rows->resize(height);
  for (png_uint_32 y = 0; y < height; ++y)
    (*t->rows)[y] = t->frame->rgb.data() + size_t{3} * width * y;
  return t->rows->data();
}

bool png_decode_impl(PngSource* src, PngReadTarget* target, PngError* err) {
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, err, on_png_error, on_png_warning);
  if (png == nullptr) {
    std::snprintf(err->message, sizeof(err->message), "cannot create a PNG reader");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, src, on_png_read);
  png_set_user_limits(png, kMaxImageSide, kMaxImageSide);
  // libpng reads each variable-length ancillary chunk it knows (text, EXIF,
  // ICC profile, ...) whole into memory before checking it, and its chunk
  // size limit is only a warning when reading: a 200-byte file whose iTXt
  // chunk claimed 2 GB made it allocate 2 GB (found by fuzz_png). flick uses
  // none of them (it reads the orientation metadata itself,
  // image_orientation.cpp, and applies no ICC profile, as Pillow's
  // convert("RGB")), so they are skipped unread, like unknown chunks.
  static constexpr png_byte kSkipped[] = "iCCP\0iTXt\0tEXt\0zTXt\0eXIf\0sPLT\0pCAL\0sCAL";
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, kSkipped, sizeof(kSkipped) / 5);
  png_read_info(png, info);
  const png_uint_32 width = png_get_image_width(png, info);
  const png_uint_32 height = png_get_image_height(png, info);
  target->info = {ImageFormat::kPng, static_cast<int>(width), static_cast<int>(height)};
  if (int64_t{width} * height > kMaxImagePixels) {
    std::snprintf(err->message, sizeof(err->message), "%ux%u pixels is too large", width, height);
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  if (target->header_only) {
    png_destroy_read_struct(&png, &info, nullptr);
    return true;
  }

  const int color_type = png_get_color_type(png, info);
  const int bit_depth = png_get_bit_depth(png, info);
  // Same result as Pillow's convert("RGB"): expand palette / gray / low bit
  // depths, keep the high byte of 16-bit samples, drop alpha.
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (bit_depth == 16) png_set_strip_16(png);
  if (!(color_type & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(png);
  if ((color_type & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS)) {
    png_set_strip_alpha(png);
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8 ||
      png_get_rowbytes(png, info) != 3 * static_cast<size_t>(width)) {
    std::snprintf(err->message, sizeof(err->message), "unsupported PNG layout (color type %d)",
                  color_type);
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_read_image(png, prepare_rows(target, width, height));
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

// header_only: fills *info and returns an empty frame.
Expected<Frame> decode_from(PngSource* src, const std::string& name, bool header_only,
                            ImageInfo* info) {
  Frame frame;
  std::vector<png_bytep> rows;
  PngReadTarget target;
  target.header_only = header_only;
  target.frame = &frame;
  target.rows = &rows;
  PngError err;
  if (!png_decode_impl(src, &target, &err)) {
    return invalid_input(name + ": invalid PNG: " + err.message);
  }
  if (info != nullptr) *info = target.info;
  return frame;
}

Expected<Frame> decode_png_file(const std::string& path, bool header_only, ImageInfo* info) {
  FILE* f = std::fopen(path.c_str(), "rbe");
  if (f == nullptr) return errno_status("cannot open", path, errno);
  PngSource src;
  src.file = f;
  auto frame = decode_from(&src, path, header_only, info);
  std::fclose(f);
  return frame;
}

}  // namespace

Status encode_png(const FrameView& frame, int zlib_level, std::vector<uint8_t>* out) {
  FLICK_CHECK(frame.width > 0 && frame.height > 0 && frame.stride >= 3 * frame.width);
  FLICK_CHECK(zlib_level >= 0 && zlib_level <= 9, "zlib level " + std::to_string(zlib_level));
  out->clear();
  PngWriteTarget target{out, false};
  PngError err;
  if (!png_encode_impl(frame, zlib_level, &target, &err)) {
    return internal_error(std::string("PNG encoding failed: ") + err.message);
  }
  return ok_status();
}

Expected<Frame> decode_png(const uint8_t* data, size_t size, const std::string& name) {
  PngSource src;
  src.data = data;
  src.size = size;
  return decode_from(&src, name, false, nullptr);
}

Expected<Frame> read_png(const std::string& path) { return decode_png_file(path, false, nullptr); }

Expected<ImageInfo> read_png_info_fd(int fd, const std::string& name) {
  // A stream of its own (dup: fclose must not close the caller's
  // descriptor) reading from the start.
  const int copy = ::dup(fd);
  if (copy < 0) return errno_status("cannot duplicate the descriptor of", name, errno);
  FILE* f = ::fdopen(copy, "rb");
  if (f == nullptr) {
    const int err = errno;
    ::close(copy);
    return errno_status("cannot open", name, err);
  }
  ImageInfo info;
  Expected<Frame> frame = invalid_input(name + ": cannot seek");
  if (std::fseek(f, 0, SEEK_SET) == 0) {
    PngSource src;
    src.file = f;
    frame = decode_from(&src, name, true, &info);
  }
  std::fclose(f);
  if (!frame.ok()) return frame.status();
  return info;
}

Expected<ImageInfo> read_png_info(const std::string& path) {
  ImageInfo info;
  auto frame = decode_png_file(path, true, &info);
  if (!frame.ok()) return frame.status();
  return info;
}

Status write_png(const std::string& path, const FrameView& frame, int zlib_level) {
  std::vector<uint8_t> data;
  FLICK_TRY(encode_png(frame, zlib_level, &data).with_context(path));
  return write_file_atomic(path, data.data(), data.size());
}

}  // namespace flick
