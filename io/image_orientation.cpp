#include "io/image_orientation.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace flick {
namespace {

using Bytes = std::string_view;  // a window into the file, never owning

Bytes bytes_of(const uint8_t* p, size_t n) { return {reinterpret_cast<const char*>(p), n}; }

uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

// --- TIFF IFD0 ------------------------------------------------------------------

// Multi-byte reads in the byte order the TIFF header names. Callers check
// bounds against the blob first (user data); the FLICK_CHECK guards that.
struct TiffReader {
  const uint8_t* data;
  size_t size;
  bool big_endian;

  uint64_t get(size_t offset, int nbytes) const {
    FLICK_CHECK(offset <= size && size - offset >= static_cast<size_t>(nbytes));
    uint64_t v = 0;
    for (int i = 0; i < nbytes; ++i) {
      const int shift = 8 * (big_endian ? nbytes - 1 - i : i);
      v |= uint64_t{data[offset + i]} << shift;
    }
    return v;
  }
  uint16_t u16(size_t offset) const { return static_cast<uint16_t>(get(offset, 2)); }
  uint32_t u32(size_t offset) const { return static_cast<uint32_t>(get(offset, 4)); }
};

// Bytes per value of the TIFF field types Pillow's ImageFileDirectory_v2
// loads; 0 for the types it skips (17, 18 and unknown ones).
int tiff_type_size(uint16_t type) {
  switch (type) {
    case 1:
    case 2:
    case 6:
    case 7: return 1;  // BYTE ASCII SBYTE UNDEFINED
    case 3:
    case 8: return 2;  // SHORT SSHORT
    case 4:
    case 9:
    case 11:
    case 13: return 4;  // LONG SLONG FLOAT IFD
    case 5:
    case 10:
    case 12:
    case 16: return 8;  // RATIONAL SRATIONAL DOUBLE LONG8
    default: return 0;
  }
}

// exif_transpose looks the tag's value up in {2: ..., 8: ...}: Python
// compares numbers by value, so 6, 6.0 and the rational 12/2 all select 6;
// bytes (BYTE, UNDEFINED) and strings (ASCII) never match.
int orientation_from_value(const TiffReader& r, uint16_t type, size_t at) {
  double v = 0;
  switch (type) {
    case 3: v = r.u16(at); break;
    case 8: v = static_cast<int16_t>(r.u16(at)); break;
    case 4:
    case 13: v = r.u32(at); break;
    case 9: v = static_cast<int32_t>(r.u32(at)); break;
    case 6: v = static_cast<int8_t>(r.data[at]); break;
    case 16: {
      const uint64_t u = r.get(at, 8);
      if (u > 8) return kOrientationNone;
      v = static_cast<double>(u);
      break;
    }
    case 5:
    case 10: {
      const bool is_signed = type == 10;
      const uint32_t num_bits = r.u32(at), den_bits = r.u32(at + 4);
      const int64_t num = is_signed ? int64_t{static_cast<int32_t>(num_bits)} : num_bits;
      const int64_t den = is_signed ? int64_t{static_cast<int32_t>(den_bits)} : den_bits;
      if (den == 0 || num % den != 0) return kOrientationNone;  // NaN or not an integer
      v = static_cast<double>(num / den);
      break;
    }
    case 11: {
      const uint32_t bits = r.u32(at);
      float f;
      std::memcpy(&f, &bits, 4);
      v = f;
      break;
    }
    case 12: {
      const uint64_t bits = r.get(at, 8);
      std::memcpy(&v, &bits, 8);
      break;
    }
    default: return kOrientationNone;  // BYTE, ASCII, UNDEFINED
  }
  if (v >= 2 && v <= 8 && v == std::floor(v)) return static_cast<int>(v);
  return kOrientationNone;
}

// One "Exif\0\0" prefix or two are stripped (Pillow: ^(Exif\0\0){1,2}).
Bytes strip_exif_prefix(Bytes b) {
  static constexpr Bytes kPrefix{"Exif\0\0", 6};
  for (int i = 0; i < 2 && b.substr(0, 6) == kPrefix; ++i) b.remove_prefix(6);
  return b;
}

// --- XMP ------------------------------------------------------------------------

// Pillow: re.search(r'tiff:Orientation(="|>)([0-9])', xmp).
std::optional<int> xmp_orientation(Bytes xmp) {
  static constexpr Bytes kKey = "tiff:Orientation";
  for (size_t at = xmp.find(kKey); at != Bytes::npos; at = xmp.find(kKey, at + 1)) {
    Bytes rest = xmp.substr(at + kKey.size());
    if (rest.substr(0, 2) == "=\"") {
      rest.remove_prefix(2);
    } else if (rest.substr(0, 1) == ">") {
      rest.remove_prefix(1);
    } else {
      continue;
    }
    if (!rest.empty() && rest[0] >= '0' && rest[0] <= '9') return rest[0] - '0';
  }
  return std::nullopt;
}

// --- metadata blocks of a file ----------------------------------------------------

struct Metadata {
  std::optional<std::string> exif;  // set: the file has an EXIF block (maybe empty)
  std::optional<std::string> xmp;
  std::string problem;  // why a block could not be read
};

void scan_jpeg(const uint8_t* data, size_t size, Metadata* meta) {
  static constexpr Bytes kExif{"Exif\0\0", 6};
  static constexpr Bytes kXmp{"http://ns.adobe.com/xap/1.0/\0", 29};
  size_t pos = 2;  // after SOI
  while (pos < size) {
    if (data[pos] != 0xFF) {  // junk between segments: skip, as Pillow does
      ++pos;
      continue;
    }
    while (pos < size && data[pos] == 0xFF) ++pos;  // fill bytes
    if (pos >= size) return;
    const uint8_t marker = data[pos++];
    if (marker == 0xDA || marker == 0xD9) return;  // SOS / EOI: no metadata after
    if (marker == 0x00 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) continue;
    if (size - pos < 2) return;
    const size_t length = be16(data + pos);
    if (length < 2 || length > size - pos) return;  // the decoder will reject the file
    const Bytes seg = bytes_of(data + pos + 2, length - 2);
    pos += length;
    if (marker != 0xE1) continue;
    if (seg.substr(0, kExif.size()) == kExif) {
      // Pillow 13 appends the payload of every further Exif segment.
      if (meta->exif) {
        meta->exif->append(seg.substr(kExif.size()));
      } else {
        meta->exif.emplace(seg);
      }
    } else if (seg.substr(0, kXmp.size()) == kXmp) {
      meta->xmp.emplace(seg.substr(kXmp.size()));
    }
  }
}

// Inflates a zlib stream as Pillow's _safe_zlib_decompress does: a stream
// that merely ends early gives what it holds; corrupt data, or more than
// `limit` bytes of text, give nullopt.
std::optional<std::string> inflate_text(Bytes in, size_t limit) {
  if (in.size() > UINT32_MAX) return std::nullopt;
  z_stream zs{};
  if (inflateInit(&zs) != Z_OK) return std::nullopt;
  std::string out;
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  int rc = Z_OK;
  while (rc == Z_OK && out.size() <= limit) {
    const size_t have = out.size();
    out.resize(std::min(limit + 1, have + 65536));
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + have);
    zs.avail_out = static_cast<uInt>(out.size() - have);
    rc = inflate(&zs, Z_NO_FLUSH);
    out.resize(out.size() - zs.avail_out);
  }
  inflateEnd(&zs);
  const bool ended = rc == Z_STREAM_END || (rc == Z_BUF_ERROR && zs.avail_in == 0);
  if (!ended || out.size() > limit) return std::nullopt;
  return out;
}

// Pillow: bytes.fromhex("".join(text.split("\n")[3:])). Whitespace may sit
// between bytes; anything else that is not a hex pair is an error.
std::optional<std::string> decode_raw_profile(Bytes text) {
  for (int i = 0; i < 3; ++i) {
    const size_t nl = text.find('\n');
    if (nl == Bytes::npos) return std::string();
    text.remove_prefix(nl + 1);
  }
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '\n' || c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') {
      ++i;
      continue;
    }
    if (i + 1 >= text.size() || hex(c) < 0 || hex(text[i + 1]) < 0) return std::nullopt;
    out.push_back(static_cast<char>(hex(c) << 4 | hex(text[i + 1])));
    i += 2;
  }
  return out;
}

void scan_png(const uint8_t* data, size_t size, Metadata* meta) {
  constexpr size_t kMaxText = size_t{1} << 20;  // Pillow's MAX_TEXT_CHUNK
  static constexpr Bytes kRawProfile = "Raw profile type exif";
  static constexpr Bytes kXmpKey = "XML:com.adobe.xmp";
  std::optional<std::string> raw_profile;
  size_t pos = 8;  // after the signature
  while (size - pos >= 12) {
    const size_t length = be32(data + pos);
    if (length > size - pos - 12) break;
    const uint8_t* type = data + pos + 4;
    const uint8_t* body = data + pos + 8;
    const uint32_t crc = be32(body + length);
    pos += 12 + length;
    if (std::memcmp(type, "IEND", 4) == 0) break;
    const bool exif = std::memcmp(type, "eXIf", 4) == 0;
    const bool text = std::memcmp(type, "tEXt", 4) == 0;
    const bool ztext = std::memcmp(type, "zTXt", 4) == 0;
    const bool itext = std::memcmp(type, "iTXt", 4) == 0;
    if (!exif && !text && !ztext && !itext) continue;
    if (crc != crc32(crc32(0, type, 4), body, static_cast<uInt>(length))) continue;
    const Bytes chunk = bytes_of(body, length);
    if (exif) {
      meta->exif.emplace(chunk);
      continue;
    }
    const size_t nul = chunk.find('\0');
    if (nul == Bytes::npos) continue;
    const Bytes key = chunk.substr(0, nul);
    Bytes rest = chunk.substr(nul + 1);
    std::optional<std::string> value;
    if (text) {
      if (key == "exif") meta->exif.emplace(rest);  // Pillow keeps this key's raw bytes
      if (key == kRawProfile) value.emplace(rest);
    } else if (ztext) {
      if (key != kRawProfile || rest.empty() || rest[0] != 0) continue;
      // A stream zlib cannot inflate reads as empty text, as in Pillow.
      value = inflate_text(rest.substr(1), kMaxText);
      if (!value) value.emplace();
    } else {
      // iTXt: key, compression flag, method, language\0, translated key\0, text.
      if ((key != kRawProfile && key != kXmpKey) || rest.size() < 2) continue;
      const bool compressed = rest[0] != 0;
      const bool deflate = rest[1] == 0;
      rest.remove_prefix(2);
      const size_t lang_end = rest.find('\0');
      if (lang_end == Bytes::npos) continue;
      const size_t tkey_end = rest.find('\0', lang_end + 1);
      if (tkey_end == Bytes::npos) continue;
      rest.remove_prefix(tkey_end + 1);
      if (compressed && !deflate) continue;
      value = compressed ? inflate_text(rest, kMaxText) : std::optional<std::string>(rest);
      if (!value) continue;
      if (key == kXmpKey) {
        meta->xmp = std::move(value);
        continue;
      }
    }
    if (value) raw_profile = std::move(value);
  }
  // An eXIf chunk (or "exif" text) takes precedence over the raw profile.
  if (!meta->exif && raw_profile) {
    meta->exif = decode_raw_profile(*raw_profile);
    if (!meta->exif) {
      meta->exif.emplace();
      meta->problem = "the \"Raw profile type exif\" text is not hexadecimal";
    }
  }
}

}  // namespace

Expected<std::optional<int>> exif_orientation(const uint8_t* exif, size_t size) {
  const Bytes blob = strip_exif_prefix(bytes_of(exif, size));
  if (blob.empty()) return std::optional<int>();
  const auto* p = reinterpret_cast<const uint8_t*>(blob.data());
  const size_t n = blob.size();
  if (n < 8) return invalid_input("EXIF: the TIFF header is truncated");
  // Pillow accepts the two valid TIFF magics and the two with swapped bytes;
  // it cannot read BigTIFF (magic 43) from an 8-byte header.
  const Bytes magic = blob.substr(0, 4);
  const bool big = magic == Bytes("MM\0*", 4) || magic == Bytes("MM*\0", 4);
  const bool little = magic == Bytes("II*\0", 4) || magic == Bytes("II\0*", 4);
  if (!big && !little) return invalid_input("EXIF: not a TIFF header");
  const TiffReader r{p, n, big};

  const size_t ifd = r.u32(4);
  if (ifd > n || n - ifd < 2) return std::optional<int>();  // Pillow: no tags
  const size_t count = r.u16(ifd);
  // Pillow skips an entry whose value is stored at an offset once the sum of
  // such value sizes exceeds the blob, and keeps only a tag's first entry.
  std::vector<bool> seen(65536, false);
  uint64_t total_value_bytes = 0;
  for (size_t i = 0; i < count; ++i) {
    const size_t entry = ifd + 2 + 12 * i;
    if (entry > n || n - entry < 12) break;  // truncated IFD: keep what was read
    const uint16_t tag = r.u16(entry);
    const uint16_t type = r.u16(entry + 2);
    const uint64_t values = r.u32(entry + 4);
    if (seen[tag]) continue;
    const int unit = tiff_type_size(type);
    if (unit == 0) continue;
    const uint64_t bytes = values * static_cast<uint64_t>(unit);
    size_t at = entry + 8;  // values of 4 bytes or less sit in the entry itself
    if (bytes > 4) {
      total_value_bytes += bytes;
      if (total_value_bytes > n) continue;
      const uint64_t offset = r.u32(entry + 8);
      if (offset + bytes > n) break;  // a read past the end ends Pillow's IFD scan
      at = static_cast<size_t>(offset);
    }
    if (bytes == 0) continue;
    seen[tag] = true;
    if (tag == 274) return std::optional<int>(orientation_from_value(r, type, at));
  }
  return std::optional<int>();
}

int image_orientation(const uint8_t* data, size_t size, std::string* problem) {
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  Metadata meta;
  if (size >= 8 && std::memcmp(data, kPng, 8) == 0) {
    scan_png(data, size, &meta);
  } else if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) {
    scan_jpeg(data, size, &meta);
  }
  int orientation = kOrientationNone;
  bool from_exif = false;
  if (meta.exif && meta.problem.empty()) {
    auto tag =
        exif_orientation(reinterpret_cast<const uint8_t*>(meta.exif->data()), meta.exif->size());
    if (!tag.ok()) {
      // Pillow (JPEG) swallows the header error and then skips XMP as well.
      meta.problem = tag.status().message();
    } else if (tag->has_value()) {
      orientation = **tag;
      from_exif = true;
    }
  }
  if (meta.problem.empty() && !from_exif && meta.xmp) {
    const std::optional<int> xmp = xmp_orientation(*meta.xmp);
    if (xmp && *xmp >= 2 && *xmp <= 8) orientation = *xmp;
  }
  if (problem != nullptr) *problem = meta.problem;
  return meta.problem.empty() ? orientation : kOrientationNone;
}

Frame apply_orientation(const FrameView& src, int orientation) {
  FLICK_CHECK(orientation >= 1 && orientation <= 8, "orientation " + std::to_string(orientation));
  FLICK_CHECK(src.width > 0 && src.height > 0 && src.stride >= 3 * src.width);
  const int64_t w = src.width, h = src.height, s = src.stride;
  const bool swap = orientation >= 5;
  // out(x, y) = in at byte offset base + x * dx + y * dy.
  int64_t base = 0, dx = 3, dy = s;
  switch (orientation) {
    case 1: break;
    case 2: base = 3 * (w - 1), dx = -3, dy = s; break;                 // mirror
    case 3: base = (h - 1) * s + 3 * (w - 1), dx = -3, dy = -s; break;  // 180
    case 4: base = (h - 1) * s, dx = 3, dy = -s; break;                 // flip
    case 5: base = 0, dx = s, dy = 3; break;                            // transpose
    case 6: base = (h - 1) * s, dx = -s, dy = 3; break;                 // 90 cw
    case 7: base = (h - 1) * s + 3 * (w - 1), dx = -s, dy = -3; break;  // transverse
    case 8: base = 3 * (w - 1), dx = s, dy = -3; break;                 // 90 ccw
  }
  Frame out;
  out.width = static_cast<int>(swap ? h : w);
  out.height = static_cast<int>(swap ? w : h);
  out.rgb.resize(size_t{3} * out.width * out.height);
  uint8_t* dst = out.rgb.data();
  for (int64_t y = 0; y < out.height; ++y) {
    const uint8_t* row = src.rgb + base + y * dy;
    for (int64_t x = 0; x < out.width; ++x, dst += 3) std::memcpy(dst, row + x * dx, 3);
  }
  return out;
}

}  // namespace flick
