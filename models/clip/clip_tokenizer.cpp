#include "models/clip/clip_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "models/clip/clip_text_tables.h"
#include "runtime/file_util.h"

namespace flick::clip {
namespace {

using Json = nlohmann::json;

constexpr int64_t kMaxFileBytes = int64_t{64} << 20;
// Both references keep merges [1, 49152 - 256 - 2 + 1) of the file's lines:
// line 0 is a "#version" header, and CLIP's 49408 ids are 512 byte symbols,
// 48894 merges and two specials.
constexpr size_t kMergeLineEnd = 49152 - 256 - 2 + 1;

// GPT-2's bytes_to_unicode() in its dict order: printable bytes first (they
// map to themselves), then the rest to U+0100 onwards. CLIP's SimpleTokenizer
// numbers its first 256 ids in this order.
struct ByteAlphabet {
  std::array<uint32_t, 256> cp{};    // byte -> code point
  std::array<uint8_t, 256> order{};  // id -> byte
};
ByteAlphabet byte_alphabet() {
  ByteAlphabet a;
  int k = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    if (printable) a.cp[b] = b, a.order[k++] = static_cast<uint8_t>(b);
  }
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    if (!printable) a.cp[b] = next++, a.order[k++] = static_cast<uint8_t>(b);
  }
  return a;
}

void append_utf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

// Decodes UTF-8 (overlong forms, surrogates and values above U+10FFFF are
// invalid, as for Python's strict decoder); nullopt with the bad byte's offset.
std::optional<std::u32string> from_utf8(std::string_view s, size_t* bad) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
    const uint8_t c = b(0);
    size_t n;
    uint32_t v, min;
    if (c < 0x80) {
      out.push_back(c);
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 2, v = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      n = 3, v = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      n = 4, v = c & 0x07, min = 0x10000;
    } else {
      *bad = i;
      return std::nullopt;
    }
    bool ok = i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) {
      ok = (b(k) & 0xC0) == 0x80;
      v = (v << 6) | (b(k) & 0x3F);
    }
    if (!ok || v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
      *bad = i;
      return std::nullopt;
    }
    out.push_back(v);
    i += n;
  }
  return out;
}

// ICU works in UTF-16.
std::u16string to_utf16(std::u32string_view s) {
  std::u16string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c < 0x10000) {
      out.push_back(static_cast<char16_t>(c));
    } else {
      out.push_back(static_cast<char16_t>(0xD800 + ((c - 0x10000) >> 10)));
      out.push_back(static_cast<char16_t>(0xDC00 + ((c - 0x10000) & 0x3FF)));
    }
  }
  return out;
}
std::u32string from_utf16(std::u16string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char32_t c = s[i];
    if (c >= 0xD800 && c < 0xDC00 && i + 1 < s.size() && s[i + 1] >= 0xDC00 && s[i + 1] < 0xE000)
      c = 0x10000 + ((c - 0xD800) << 10) + (s[++i] - 0xDC00);
    out.push_back(c);
  }
  return out;
}

Expected<std::u32string> normalize(std::u32string_view s, bool nfkc) {
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* n = nfkc ? unorm2_getNFKCInstance(&err) : unorm2_getNFCInstance(&err);
  if (U_FAILURE(err)) return internal_error(std::string("ICU normalizer: ") + u_errorName(err));
  const std::u16string src = to_utf16(s);
  std::u16string dst(src.size() * 3 + 16, u'\0');
  int32_t len = unorm2_normalize(
      n, reinterpret_cast<const UChar*>(src.data()), static_cast<int32_t>(src.size()),
      reinterpret_cast<UChar*>(dst.data()), static_cast<int32_t>(dst.size()), &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) {
    err = U_ZERO_ERROR;
    dst.resize(static_cast<size_t>(len));
    len = unorm2_normalize(n, reinterpret_cast<const UChar*>(src.data()),
                           static_cast<int32_t>(src.size()), reinterpret_cast<UChar*>(dst.data()),
                           static_cast<int32_t>(dst.size()), &err);
  }
  if (U_FAILURE(err)) return internal_error(std::string("ICU normalize: ") + u_errorName(err));
  dst.resize(static_cast<size_t>(len));
  return from_utf16(dst);
}

// Python's str.lower(): full (one-to-many) mappings from SpecialCasing,
// locale-free, with the final-sigma rule; ICU's root locale does the same.
Expected<std::u32string> lower(std::u32string_view s) {
  const std::u16string src = to_utf16(s);
  std::u16string dst(src.size() * 3 + 16, u'\0');
  UErrorCode err = U_ZERO_ERROR;
  int32_t len = u_strToLower(reinterpret_cast<UChar*>(dst.data()), static_cast<int32_t>(dst.size()),
                             reinterpret_cast<const UChar*>(src.data()),
                             static_cast<int32_t>(src.size()), "", &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) {
    err = U_ZERO_ERROR;
    dst.resize(static_cast<size_t>(len));
    len = u_strToLower(reinterpret_cast<UChar*>(dst.data()), static_cast<int32_t>(dst.size()),
                       reinterpret_cast<const UChar*>(src.data()), static_cast<int32_t>(src.size()),
                       "", &err);
  }
  if (U_FAILURE(err)) return internal_error(std::string("ICU lower: ") + u_errorName(err));
  dst.resize(static_cast<size_t>(len));
  return from_utf16(dst);
}

const char* find_entity(const detail::HtmlEntity* table, size_t count, const std::string& name) {
  const detail::HtmlEntity* end = table + count;
  const auto* it =
      std::lower_bound(table, end, name, [](const detail::HtmlEntity& e, const std::string& n) {
        return std::strcmp(e.name, n.c_str()) < 0;
      });
  return it != end && name == it->name ? it->value : nullptr;
}

void append_decoded(std::u32string& out, const char* utf8) {
  size_t bad = 0;
  out += *from_utf8(utf8, &bad);  // the generated table is valid UTF-8
}

bool is_ascii_alnum(char32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool is_hex(char32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// Python's html.unescape: the regex
//   &(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)
// and its replacement rules (remapped and dropped numbers, U+FFFD for
// surrogates and values past U+10FFFF, the longest html5 prefix of a name).
std::u32string html_unescape(const std::u32string& s) {
  if (s.find(U'&') == std::u32string::npos) return s;
  std::u32string out;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] != U'&' || i + 1 >= s.size()) {
      out.push_back(s[i++]);
      continue;
    }
    size_t j = i + 1;
    if (s[j] == U'#') {
      const bool hex = j + 1 < s.size() && (s[j + 1] == U'x' || s[j + 1] == U'X');
      size_t k = j + (hex ? 2 : 1);
      const size_t digits = k;
      uint64_t num = 0;
      while (k < s.size() && (hex ? is_hex(s[k]) : (s[k] >= '0' && s[k] <= '9'))) {
        const char32_t c = s[k];
        const uint32_t d = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
        num = std::min<uint64_t>(num * (hex ? 16 : 10) + d, uint64_t{1} << 40);  // saturate
        ++k;
      }
      if (k == digits) {  // "&#" or "&#x" without digits: no reference here
        out.push_back(s[i++]);
        continue;
      }
      if (k < s.size() && s[k] == U';') ++k;
      i = k;
      const auto* refs = detail::kHtmlInvalidCharrefs;
      const auto* refs_end = refs + detail::kHtmlInvalidCharrefCount;
      const auto* r = std::lower_bound(
          refs, refs_end, num, [](const detail::CharRef& a, uint64_t n) { return a.number < n; });
      if (r != refs_end && r->number == num) {
        out.push_back(r->code_point);
      } else if ((num >= 0xD800 && num <= 0xDFFF) || num > 0x10FFFF) {
        out.push_back(0xFFFD);
      } else if (!std::binary_search(
                     detail::kHtmlInvalidCodepoints,
                     detail::kHtmlInvalidCodepoints + detail::kHtmlInvalidCodepointCount,
                     static_cast<uint32_t>(num))) {
        out.push_back(static_cast<char32_t>(num));
      }
      continue;
    }
    // A name: up to 32 characters outside "\t\n\f <&#;", then an optional ';'.
    size_t k = j;
    while (k < s.size() && k - j < 32 &&
           std::u32string_view(U"\t\n\f <&#;").find(s[k]) == std::u32string_view::npos)
      ++k;
    if (k == j) {
      out.push_back(s[i++]);
      continue;
    }
    if (k < s.size() && s[k] == U';') ++k;
    const std::u32string name = s.substr(j, k - j);
    i = k;
    // Entity names are ASCII: only the ASCII head can match.
    size_t ascii = 0;
    while (ascii < name.size() && name[ascii] < 0x80) ++ascii;
    std::string head;
    for (size_t a = 0; a < ascii; ++a) head.push_back(static_cast<char>(name[a]));
    if (ascii == name.size()) {
      if (const char* v = find_entity(detail::kHtml5Entities, detail::kHtml5EntityCount, head)) {
        append_decoded(out, v);
        continue;
      }
    }
    bool found = false;
    for (size_t x = std::min(name.size() - 1, ascii); x >= 2 && x <= name.size() - 1; --x) {
      if (const char* v =
              find_entity(detail::kHtml5Entities, detail::kHtml5EntityCount, head.substr(0, x))) {
        append_decoded(out, v);
        out.append(name, x);
        found = true;
        break;
      }
    }
    if (!found) {
      out.push_back(U'&');
      out += name;
    }
  }
  return out;
}

// ftfy's unescape_html: only "&#?[0-9A-Za-z]{1,24};", html5 names with ';' and
// their upper-cased forms; a numeric reference html.unescape decodes only in
// part is left alone.
std::u32string ftfy_unescape_html(const std::u32string& s) {
  std::u32string out;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] != U'&') {
      out.push_back(s[i++]);
      continue;
    }
    size_t j = i + 1;
    const bool numeric = j < s.size() && s[j] == U'#';
    if (numeric) ++j;
    size_t k = j;
    while (k < s.size() && k - j <= 24 && is_ascii_alnum(s[k])) ++k;
    if (k == j || k - j > 24 || k >= s.size() || s[k] != U';') {
      out.push_back(s[i++]);
      continue;
    }
    const std::u32string match = s.substr(i, k + 1 - i);
    i = k + 1;
    const std::string name = to_utf8(std::u32string_view(match).substr(1));
    const char* v =
        numeric ? nullptr : find_entity(detail::kHtml5Entities, detail::kHtml5EntityCount, name);
    if (!v && !numeric)
      v = find_entity(detail::kFtfyUpperEntities, detail::kFtfyUpperEntityCount, name);
    if (v) {
      append_decoded(out, v);
    } else if (numeric) {
      const std::u32string u = html_unescape(match);
      out += u.find(U';') == std::u32string::npos ? u : match;
    } else {
      out += match;
    }
  }
  return out;
}

char32_t windows_1252(char32_t c) {  // C1 controls, as ftfy's sloppy-windows-1252
  const auto* refs = detail::kHtmlInvalidCharrefs;
  const auto* end = refs + detail::kHtmlInvalidCharrefCount;
  const auto* r =
      std::lower_bound(refs, end, static_cast<uint32_t>(c),
                       [](const detail::CharRef& a, uint32_t n) { return a.number < n; });
  return r != end && r->number == c ? r->code_point : c;
}

// ftfy's fix_character_width: U+3000 -> ' ', and U+FF01..U+FFEF to their NFKC
// forms where those differ.
const std::vector<std::u32string>& width_map() {
  static const std::vector<std::u32string> map = [] {
    std::vector<std::u32string> m(0xFFF0 - 0xFF01);
    for (char32_t c = 0xFF01; c < 0xFFF0; ++c) {
      Expected<std::u32string> n = normalize(std::u32string(1, c), /*nfkc=*/true);
      if (n && *n != std::u32string(1, c)) m[c - 0xFF01] = *n;
    }
    return m;
  }();
  return map;
}

const char32_t* ligature(char32_t c) {
  switch (c) {
    case 0x132: return U"IJ";
    case 0x133: return U"ij";
    case 0x149: return U"\u02bcn";
    case 0x1F1: return U"DZ";
    case 0x1F2: return U"Dz";
    case 0x1F3: return U"dz";
    case 0x1C4: return U"D\u017d";
    case 0x1C5: return U"D\u017e";
    case 0x1C6: return U"d\u017e";
    case 0x1C7: return U"LJ";
    case 0x1C8: return U"Lj";
    case 0x1C9: return U"lj";
    case 0x1CA: return U"NJ";
    case 0x1CB: return U"Nj";
    case 0x1CC: return U"nj";
    case 0xFB00: return U"ff";
    case 0xFB01: return U"fi";
    case 0xFB02: return U"fl";
    case 0xFB03: return U"ffi";
    case 0xFB04: return U"ffl";
    case 0xFB05: return U"\u017ft";
    case 0xFB06: return U"st";
    default: return nullptr;
  }
}

bool is_removed_control(char32_t c) {
  return c <= 0x08 || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F ||
         (c >= 0x206A && c <= 0x206F) || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFC);
}

// One pass of ftfy's character fixers, in fix_and_explain's order (after
// unescape_html and fix_encoding).
std::u32string ftfy_char_fixes(const std::u32string& in) {
  std::u32string t;
  t.reserve(in.size());
  for (char32_t c : in) {  // fix_c1_controls
    t.push_back(c >= 0x80 && c <= 0x9F ? windows_1252(c) : c);
  }
  std::u32string u;
  for (char32_t c : t) {  // fix_latin_ligatures, fix_character_width
    if (const char32_t* l = ligature(c)) {
      u += l;
    } else if (c == 0x3000) {
      u.push_back(U' ');
    } else if (c >= 0xFF01 && c < 0xFFF0 && !width_map()[c - 0xFF01].empty()) {
      u += width_map()[c - 0xFF01];
    } else {
      u.push_back(c);
    }
  }
  t.clear();
  for (size_t i = 0; i < u.size(); ++i) {  // uncurl_quotes, fix_line_breaks
    const char32_t c = u[i];
    if (c == 0x2BC || (c >= 0x2018 && c <= 0x201B)) {
      t.push_back(U'\'');
    } else if (c >= 0x201C && c <= 0x201F) {
      t.push_back(U'"');
    } else if (c == U'\r') {
      if (i + 1 < u.size() && u[i + 1] == U'\n') ++i;
      t.push_back(U'\n');
    } else if (c == 0x2028 || c == 0x2029 || c == 0x85) {
      t.push_back(U'\n');
    } else {
      t.push_back(c);
    }
  }
  u.clear();
  for (size_t i = 0; i < t.size(); ++i) {  // remove_terminal_escapes: \033\[(\d|;)*[a-zA-Z]
    if (t[i] == 0x1B && i + 1 < t.size() && t[i + 1] == U'[') {
      size_t k = i + 2;
      while (k < t.size() &&
             (t[k] == U';' || u_charType(static_cast<UChar32>(t[k])) == U_DECIMAL_DIGIT_NUMBER))
        ++k;
      if (k < t.size() && t[k] < 0x80 && std::isalpha(static_cast<int>(t[k]))) {
        i = k;
        continue;
      }
    }
    u.push_back(t[i]);
  }
  t.clear();
  for (char32_t c : u)  // remove_control_chars
    if (!is_removed_control(c)) t.push_back(c);
  return t;
}

// ftfy.fix_text with its default config, less fix_encoding (see the header).
Expected<std::u32string> ftfy_fix_text(const std::u32string& text) {
  std::u32string out;
  bool unescape = true;  // "auto": off from the first line with a '<' on
  size_t pos = 0;
  while (pos < text.size()) {
    size_t brk = text.find(U'\n', pos);
    brk = brk == std::u32string::npos ? text.size() : brk + 1;
    std::u32string seg = text.substr(pos, brk - pos);
    pos = brk;
    if (seg.find(U'<') != std::u32string::npos) unescape = false;
    while (true) {
      const std::u32string orig = seg;
      if (unescape) seg = ftfy_unescape_html(seg);
      seg = ftfy_char_fixes(seg);
      FLICK_ASSIGN_OR_RETURN(seg, normalize(seg, /*nfkc=*/false));
      if (seg == orig) break;
    }
    out += seg;
  }
  return out;
}

std::string escape_regex(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::strchr("\\^$.|?*+()[]{}", c)) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t pos = 0;
  while (true) {
    const size_t nl = text.find('\n', pos);
    lines.push_back(text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos));
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
  }
  return lines;
}

// Python's str.split() of a merges line: two symbols, else nullopt.
std::optional<std::pair<std::string, std::string>> merge_pair(std::string_view line) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    size_t j = i;
    while (j < line.size() && !std::isspace(static_cast<unsigned char>(line[j]))) ++j;
    if (j > i) parts.emplace_back(line.substr(i, j - i));
    i = j;
  }
  if (parts.size() != 2) return std::nullopt;
  return std::make_pair(parts[0], parts[1]);
}

Expected<std::string> gunzip(const std::vector<uint8_t>& in, const std::string& name) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return internal_error(name + ": zlib init failed");
  z.next_in = const_cast<Bytef*>(in.data());
  z.avail_in = static_cast<uInt>(in.size());
  std::string out;
  std::array<char, 1 << 16> buf;
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(buf.data());
    z.avail_out = buf.size();
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&z);
      return invalid_input(
          name + ": not a valid gzip file (zlib: " + (z.msg ? z.msg : std::to_string(rc)) + ")");
    }
    out.append(buf.data(), buf.size() - z.avail_out);
    if (static_cast<int64_t>(out.size()) > kMaxFileBytes) {
      inflateEnd(&z);
      return invalid_input(name + ": decompresses to more than 64 MiB");
    }
    if (rc != Z_STREAM_END && z.avail_in == 0 && z.avail_out != 0) {
      inflateEnd(&z);
      return invalid_input(name + ": truncated gzip data");
    }
  }
  inflateEnd(&z);
  return out;
}

}  // namespace

struct ClipTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

ClipTokenizer::ClipTokenizer() = default;
ClipTokenizer::ClipTokenizer(ClipTokenizer&&) noexcept = default;
ClipTokenizer& ClipTokenizer::operator=(ClipTokenizer&&) noexcept = default;
ClipTokenizer::~ClipTokenizer() = default;

Expected<ClipTokenizer> ClipTokenizer::load_simple(const std::string& path) {
  FLICK_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, read_file(path, kMaxFileBytes));
  FLICK_ASSIGN_OR_RETURN(std::string text, gunzip(bytes, path));
  return from_simple_merges(text, path);
}

Expected<ClipTokenizer> ClipTokenizer::from_simple_merges(std::string_view text,
                                                          const std::string& name) {
  ClipTokenizer t;
  t.flavor_ = Flavor::kSimple;
  t.sot_ = "<start_of_text>";
  t.eot_ = "<end_of_text>";
  const std::vector<std::string_view> lines = split_lines(text);
  if (lines.size() < 2) return invalid_input(name + ": no merges after the header line");
  std::vector<std::pair<std::string, std::string>> merges;
  for (size_t i = 1; i < std::min(lines.size(), kMergeLineEnd); ++i) {
    auto pair = merge_pair(lines[i]);
    // The reference would add an entry for a blank or odd line and shift
    // every later id; refuse it instead.
    if (!pair)
      return invalid_input(name + ": line " + std::to_string(i + 1) +
                           ": expected two symbols separated by a space");
    merges.push_back(std::move(*pair));
  }
  // Ids: 256 byte symbols, the same with "</w>", one per merge, the specials.
  // A string listed twice keeps its later id, as Python's dict(zip(...)).
  const ByteAlphabet alphabet = byte_alphabet();
  std::vector<std::string> vocab;
  for (int suffix = 0; suffix < 2; ++suffix) {
    for (int k = 0; k < 256; ++k) {
      std::string s;
      append_utf8(s, alphabet.cp[alphabet.order[k]]);
      vocab.push_back(suffix ? s + "</w>" : s);
    }
  }
  for (const auto& [a, b] : merges) vocab.push_back(a + b);
  vocab.push_back(t.sot_);
  vocab.push_back(t.eot_);
  for (size_t id = 0; id < vocab.size(); ++id) t.vocab_[vocab[id]] = static_cast<int32_t>(id);
  t.size_ = static_cast<int32_t>(vocab.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    const auto li = t.vocab_.find(a), ri = t.vocab_.find(b);
    if (li == t.vocab_.end() || ri == t.vocab_.end())
      return invalid_input(name + ": line " + std::to_string(r + 2) + " (\"" + a + " " + b +
                           "\"): a symbol that no earlier merge or byte makes");
    const uint64_t key = bpe_pair_key(li->second, ri->second);
    t.merges_[key] = BpeMerge{static_cast<int32_t>(r), t.vocab_.at(a + b)};  // later rank wins
  }
  t.pad_id_ = 0;  // SimpleTokenizer pads with zeros
  FLICK_TRY(t.finish(name));
  return t;
}

Expected<ClipTokenizer> ClipTokenizer::load_hf(const std::string& vocab_path,
                                               const std::string& merges_path,
                                               const std::string& pad_token) {
  FLICK_ASSIGN_OR_RETURN(std::vector<uint8_t> v, read_file(vocab_path, kMaxFileBytes));
  FLICK_ASSIGN_OR_RETURN(std::vector<uint8_t> m, read_file(merges_path, kMaxFileBytes));
  return from_hf(std::string_view(reinterpret_cast<const char*>(v.data()), v.size()),
                 std::string_view(reinterpret_cast<const char*>(m.data()), m.size()), vocab_path,
                 merges_path, pad_token);
}

namespace {

// A JSON config if the file exists; its "pad_token" (a string, or an
// AddedToken object's "content") when it has one.
Expected<std::optional<Json>> read_config(const std::string& path) {
  if (!std::filesystem::exists(path)) return std::optional<Json>();
  FLICK_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, read_file(path, kMaxFileBytes));
  Json j = Json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid_input(path + ": not a JSON object");
  return std::optional<Json>(std::move(j));
}
Expected<std::optional<std::string>> pad_token_of(const Json& j, const std::string& path) {
  if (!j.contains("pad_token")) return std::optional<std::string>();
  const Json& p = j["pad_token"];
  if (p.is_string()) return std::optional<std::string>(p.get<std::string>());
  if (p.is_object() && p.contains("content") && p["content"].is_string())
    return std::optional<std::string>(p["content"].get<std::string>());
  return invalid_input(path + ": pad_token: expected a string or an object with \"content\"" +
                       (p.is_null() ? " (null: transformers could not pad to max_length)" : ""));
}

}  // namespace

Expected<ClipTokenizer> ClipTokenizer::load_hf_dir(const std::string& dir) {
  const std::string config_path = dir + "/tokenizer_config.json";
  const std::string map_path = dir + "/special_tokens_map.json";
  std::string pad = "<|endoftext|>";
  FLICK_ASSIGN_OR_RETURN(std::optional<Json> config, read_config(config_path));
  if (config) {
    FLICK_ASSIGN_OR_RETURN(std::optional<std::string> p, pad_token_of(*config, config_path));
    if (p) pad = *p;
  }
  if (!config || !config->contains("added_tokens_decoder")) {  // transformers' legacy path
    FLICK_ASSIGN_OR_RETURN(std::optional<Json> map, read_config(map_path));
    if (map) {
      FLICK_ASSIGN_OR_RETURN(std::optional<std::string> p, pad_token_of(*map, map_path));
      if (p) pad = *p;
    }
  }
  return load_hf(dir + "/vocab.json", dir + "/merges.txt", pad);
}

Expected<ClipTokenizer> ClipTokenizer::from_hf(std::string_view vocab_json,
                                               std::string_view merges_text,
                                               const std::string& vocab_name,
                                               const std::string& merges_name,
                                               const std::string& pad_token) {
  ClipTokenizer t;
  t.flavor_ = Flavor::kHf;
  t.sot_ = "<|startoftext|>";
  t.eot_ = "<|endoftext|>";
  const Json doc = Json::parse(vocab_json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object())
    return invalid_input(vocab_name + ": not a JSON object of token -> id");
  int32_t max_id = -1;
  for (const auto& [token, id] : doc.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 30))
      return invalid_input(vocab_name + ": \"" + token + "\": expected a non-negative id");
    t.vocab_[token] = static_cast<int32_t>(id.get<int64_t>());
    max_id = std::max(max_id, static_cast<int32_t>(id.get<int64_t>()));
  }
  t.size_ = max_id + 1;
  // transformers: read().strip().split("\n")[1:48895].
  size_t b = 0, e = merges_text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(merges_text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(merges_text[e - 1]))) --e;
  const std::vector<std::string_view> lines = split_lines(merges_text.substr(b, e - b));
  for (size_t i = 1; i < std::min(lines.size(), kMergeLineEnd); ++i) {
    const auto pair = merge_pair(lines[i]);
    if (!pair)
      return invalid_input(merges_name + ": line " + std::to_string(i + 1) +
                           ": expected two symbols separated by a space");
    const auto li = t.vocab_.find(pair->first), ri = t.vocab_.find(pair->second);
    const auto mi = t.vocab_.find(pair->first + pair->second);
    // transformers would emit <|endoftext|> (its unk) for a missing piece.
    if (li == t.vocab_.end() || ri == t.vocab_.end() || mi == t.vocab_.end())
      return invalid_input(merges_name + ": line " + std::to_string(i + 1) + " (\"" + pair->first +
                           " " + pair->second +
                           "\"): a part or the merged token "
                           "is not in " +
                           vocab_name);
    const uint64_t key = bpe_pair_key(li->second, ri->second);
    t.merges_[key] = BpeMerge{static_cast<int32_t>(i - 1), mi->second};  // later rank wins
  }
  FLICK_TRY(t.finish(vocab_name));
  // transformers would add a pad token missing from the vocabulary as a new
  // id that the text encoder has no embedding for; refuse it.
  const auto pad = t.vocab_.find(pad_token);
  if (pad == t.vocab_.end())
    return invalid_input(vocab_name + ": lacks the pad token \"" + pad_token + "\"");
  t.pad_id_ = pad->second;
  return t;
}

// Byte ids, specials and the split regex, common to both loaders.
Status ClipTokenizer::finish(const std::string& name) {
  const ByteAlphabet alphabet = byte_alphabet();
  byte_ids_.resize(256);
  byte_eow_ids_.resize(256);
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(s, alphabet.cp[b]);
    const auto it = vocab_.find(s), eow = vocab_.find(s + "</w>");
    if (it == vocab_.end() || eow == vocab_.end())
      return invalid_input(name + ": lacks the token of byte " + std::to_string(b) +
                           " (alone or with </w>)");
    byte_ids_[b] = it->second;
    byte_eow_ids_[b] = eow->second;
  }
  for (const std::string* s : {&sot_, &eot_})
    if (!vocab_.count(*s)) return invalid_input(name + ": lacks the special token " + *s);
  sot_id_ = vocab_.at(sot_);
  eot_id_ = vocab_.at(eot_);
  // The reference's \s (Python `regex`) is White_Space; PCRE2's \s also has
  // U+180E, so the class is spelled out. Under IGNORECASE `regex` also keeps
  // U+0345 out of [^\s\p{L}\p{N}] (it case-folds to the letter iota) without
  // letting \p{L} match it: the reference drops it, and so does this.
  const std::string ws =
      R"(\t\n\x{0b}\f\r\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f})"
      R"(\x{205f}\x{3000})";
  const std::string pattern = escape_regex(sot_) + "|" + escape_regex(eot_) +
                              R"(|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^)" + ws +
                              R"(\p{L}\p{N}\x{345}]+)";
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  split_ = std::make_unique<Regex>();
  split_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                               PCRE2_UTF | PCRE2_UCP | PCRE2_CASELESS, &err, &err_offset, nullptr);
  if (!split_->code) return internal_error("CLIP split regex failed to compile");
  pcre2_jit_compile(split_->code, PCRE2_JIT_COMPLETE);  // interpreted if JIT is unavailable
  return ok_status();
}

std::optional<int32_t> ClipTokenizer::token_id(std::string_view token) const {
  const auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

// CLIP's bpe(): merge the lowest-ranked adjacent pair until none is left. The
// reference merges every occurrence of that pair left to right in one step;
// a heap that takes the leftmost of equal ranks first does the same, since a
// merge never creates another instance of its own pair (the merged symbol is
// longer than either part).
void ClipTokenizer::encode_word(std::string_view bytes, std::vector<int32_t>& out) const {
  if (bytes.empty()) return;
  // The last byte carries the end-of-word marker ("</w>").
  std::vector<int32_t> ids(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto b = static_cast<uint8_t>(bytes[i]);
    ids[i] = i + 1 < bytes.size() ? byte_ids_[b] : byte_eow_ids_[b];
  }
  bpe_merge(ids, merges_, out);
}

// re.findall: only the matches count, the text between them is dropped.
Status ClipTokenizer::encode_cleaned(const std::string& text, std::vector<int32_t>& out) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(split_->code, nullptr), &pcre2_match_data_free);
  if (!md) return internal_error("CLIP tokenizer: out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    const int rc =
        pcre2_match(split_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return internal_error("CLIP tokenizer regex failed: " + std::to_string(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const std::string_view piece(text.data() + ov[0], ov[1] - ov[0]);
    pos = std::max<size_t>(ov[1], ov[0] + 1);  // the pattern has no empty match
    // A special matched exactly is one id (the reference's bpe cache); one
    // matched only case-insensitively ("<ſtart_of_text>") is ordinary text.
    if (piece == sot_) {
      out.push_back(sot_id_);
    } else if (piece == eot_) {
      out.push_back(eot_id_);
    } else {
      encode_word(piece, out);
    }
  }
  return ok_status();
}

Expected<std::string> ClipTokenizer::clean_part(std::u32string text) const {
  FLICK_ASSIGN_OR_RETURN(text, ftfy_fix_text(text));
  if (flavor_ == Flavor::kSimple) text = html_unescape(html_unescape(text));
  FLICK_ASSIGN_OR_RETURN(text, lower(text));
  return to_utf8(text);
}

Expected<std::string> ClipTokenizer::clean(std::string_view text) const {
  size_t bad = 0;
  std::optional<std::u32string> u = from_utf8(text, &bad);
  if (!u) return invalid_input("text is not valid UTF-8 at byte " + std::to_string(bad));
  return clean_part(std::move(*u));
}

Expected<std::vector<int32_t>> ClipTokenizer::encode(std::string_view text) const {
  size_t bad = 0;
  std::optional<std::u32string> u = from_utf8(text, &bad);
  if (!u) return invalid_input("text is not valid UTF-8 at byte " + std::to_string(bad));
  std::vector<int32_t> ids;
  if (flavor_ == Flavor::kSimple) {
    FLICK_ASSIGN_OR_RETURN(std::string cleaned, clean_part(std::move(*u)));
    FLICK_TRY(encode_cleaned(cleaned, ids));
    return ids;
  }
  // transformers splits the raw text on its special tokens before cleaning.
  const std::u32string sot = *from_utf8(sot_, &bad), eot = *from_utf8(eot_, &bad);
  size_t start = 0;
  for (size_t i = 0; i < u->size();) {
    const bool is_sot = u->compare(i, sot.size(), sot) == 0;
    const bool is_eot = !is_sot && u->compare(i, eot.size(), eot) == 0;
    if (!is_sot && !is_eot) {
      ++i;
      continue;
    }
    FLICK_ASSIGN_OR_RETURN(std::string part, clean_part(u->substr(start, i - start)));
    FLICK_TRY(encode_cleaned(part, ids));
    ids.push_back(is_sot ? sot_id_ : eot_id_);
    i += is_sot ? sot.size() : eot.size();
    start = i;
  }
  FLICK_ASSIGN_OR_RETURN(std::string part, clean_part(u->substr(start)));
  FLICK_TRY(encode_cleaned(part, ids));
  return ids;
}

Expected<std::vector<int32_t>> ClipTokenizer::encode_padded(std::string_view text,
                                                            int32_t context_length) const {
  if (context_length < 2)
    return invalid_input("context_length " + std::to_string(context_length) +
                         ": must hold the start and end tokens");
  FLICK_ASSIGN_OR_RETURN(std::vector<int32_t> body, encode(text));
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(context_length));
  ids.push_back(sot_id_);
  const size_t keep = std::min(body.size(), static_cast<size_t>(context_length - 2));
  ids.insert(ids.end(), body.begin(), body.begin() + static_cast<ptrdiff_t>(keep));
  ids.push_back(eot_id_);
  ids.resize(static_cast<size_t>(context_length), pad_id_);
  return ids;
}

}  // namespace flick::clip
