// libpng reports errors by longjmp: the functions that call setjmp own no C++
// objects with destructors (as in io/png.cpp).
#include "io/label_png.h"

#include <png.h>

#include <cstdio>
#include <cstring>
#include <new>

#include "io/image.h"

namespace flick {
namespace {

struct PngError {
  char message[256] = "unknown libpng error";
};

void on_error(png_structp png, png_const_charp msg) {
  auto* err = static_cast<PngError*>(png_get_error_ptr(png));
  std::snprintf(err->message, sizeof(err->message), "%s", msg);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}

void on_write(png_structp png, png_bytep data, png_size_t size) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  try {
    out->insert(out->end(), data, data + size);
  } catch (const std::bad_alloc&) {
    png_error(png, "out of memory");
  }
}

void on_flush(png_structp) {}

// rows: big-endian 16-bit samples, height pointers.
bool encode_impl(int width, int height, int level, png_bytepp rows, std::vector<uint8_t>* out,
                 PngError* err) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, err, on_error, on_warning);
  if (png == nullptr) return false;
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, out, on_write, on_flush);
  png_set_compression_level(png, level);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 16,
               PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_BASE,
               PNG_FILTER_TYPE_BASE);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

struct Source {
  const uint8_t* data;
  size_t size;
  size_t pos;
};

void on_read(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<Source*>(png_get_io_ptr(png));
  if (src->size - src->pos < n) png_error(png, "data is truncated");
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

struct ReadTarget {
  png_uint_32 width = 0, height = 0;
  int depth = 0, color = 0;
  std::vector<uint8_t>* bytes;
  std::vector<png_bytep>* rows;
};

// Sizes the caller's buffers (never under longjmp: called between libpng
// calls, and only allocates in caller-owned vectors).
png_bytepp size_rows(ReadTarget* t) {
  t->bytes->resize(size_t{2} * t->width * t->height);
  t->rows->resize(t->height);
  for (png_uint_32 y = 0; y < t->height; ++y) {
    (*t->rows)[y] = t->bytes->data() + size_t{2} * t->width * y;
  }
  return t->rows->data();
}

bool decode_impl(Source* src, ReadTarget* t, PngError* err) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, err, on_error, on_warning);
  if (png == nullptr) return false;
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, src, on_read);
  png_set_user_limits(png, kMaxImageSide, kMaxImageSide);
  png_read_info(png, info);
  int interlace = 0;
  png_get_IHDR(png, info, &t->width, &t->height, &t->depth, &t->color, &interlace, nullptr,
               nullptr);
  if (t->depth != 16 || t->color != PNG_COLOR_TYPE_GRAY || interlace != PNG_INTERLACE_NONE ||
      uint64_t{t->width} * t->height > uint64_t(kMaxImagePixels)) {
    png_destroy_read_struct(&png, &info, nullptr);
    return true;  // the caller reports the format
  }
  png_read_image(png, size_rows(t));
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

}  // namespace

Status encode_label_png(const LabelMap& labels, int zlib_level, std::vector<uint8_t>* out) {
  if (labels.width <= 0 || labels.height <= 0 ||
      labels.ids.size() != size_t(labels.width) * labels.height) {
    return internal_error("label map size does not match its ids");
  }
  std::vector<uint8_t> be(labels.ids.size() * 2);
  for (size_t i = 0; i < labels.ids.size(); ++i) {
    be[2 * i] = static_cast<uint8_t>(labels.ids[i] >> 8);
    be[2 * i + 1] = static_cast<uint8_t>(labels.ids[i] & 0xff);
  }
  std::vector<png_bytep> rows(labels.height);
  for (int y = 0; y < labels.height; ++y) rows[y] = be.data() + size_t{2} * labels.width * y;
  out->clear();
  PngError err;
  if (!encode_impl(labels.width, labels.height, zlib_level, rows.data(), out, &err)) {
    return io_error(std::string("encoding a label PNG: ") + err.message);
  }
  return ok_status();
}

Expected<LabelMap> decode_label_png(const uint8_t* data, size_t size, const std::string& name) {
  Source src{data, size, 0};
  std::vector<uint8_t> bytes;
  std::vector<png_bytep> rows;
  ReadTarget t;
  t.bytes = &bytes;
  t.rows = &rows;
  PngError err;
  if (!decode_impl(&src, &t, &err)) return invalid_input(name + ": " + err.message);
  if (t.depth != 16 || t.color != PNG_COLOR_TYPE_GRAY || bytes.empty()) {
    return invalid_input(name + ": not a non-interlaced 16-bit grayscale PNG (bit depth " +
                         std::to_string(t.depth) + ", color type " + std::to_string(t.color) + ")");
  }
  LabelMap m;
  m.width = static_cast<int>(t.width);
  m.height = static_cast<int>(t.height);
  m.ids.resize(size_t(m.width) * m.height);
  for (size_t i = 0; i < m.ids.size(); ++i) {
    m.ids[i] = static_cast<uint16_t>(bytes[2 * i] << 8 | bytes[2 * i + 1]);
  }
  return m;
}

}  // namespace flick
