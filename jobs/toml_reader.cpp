#include "jobs/toml_reader.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace flick {
namespace {

std::string quote(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += items[i];
  }
  return out;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string format_number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// The dotted key a line of TOML text assigns or opens ("input.fps" for
// "fps = ..." under "[input]"), or "" when it cannot be told.
std::string key_on_line(std::string_view text, int line) {
  std::vector<std::string_view> lines;
  for (size_t i = 0; i <= text.size();) {
    const size_t j = std::min(text.find('\n', i), text.size());
    lines.push_back(text.substr(i, j - i));
    i = j + 1;
  }
  if (line < 1 || line > static_cast<int>(lines.size())) return "";
  auto header = [](std::string_view l) -> std::optional<std::string> {
    l = trim(l);
    if (l.empty() || l.front() != '[') return std::nullopt;
    // "[", "[[" or "[]" (a header cut short) name no key; never index past the end.
    const size_t open = l.find_first_not_of('[');
    if (open == std::string_view::npos) return std::string();
    const size_t close = l.find(']', open);
    return std::string(
        trim(l.substr(open, close == std::string_view::npos ? close : close - open)));
  };
  const std::string_view at = lines[static_cast<size_t>(line - 1)];
  if (auto h = header(at)) return *h;
  const size_t eq = at.find('=');
  if (eq == std::string_view::npos) return "";
  const std::string_view key = trim(at.substr(0, eq));
  if (key.empty() || key.find_first_of("{}[]") != std::string_view::npos) return "";
  for (int i = line - 2; i >= 0; --i) {
    if (auto h = header(lines[static_cast<size_t>(i)])) return *h + "." + std::string(key);
  }
  return std::string(key);
}

}  // namespace

const char* toml_type_words(toml::value_t t) {
  switch (t) {
    case toml::value_t::boolean: return "a boolean";
    case toml::value_t::integer: return "an integer";
    case toml::value_t::floating: return "a float";
    case toml::value_t::string: return "a string";
    case toml::value_t::offset_datetime:
    case toml::value_t::local_datetime: return "a date-time";
    case toml::value_t::local_date: return "a date";
    case toml::value_t::local_time: return "a time";
    case toml::value_t::array: return "an array";
    case toml::value_t::table: return "a table";
    case toml::value_t::empty: return "nothing";
  }
  return "a value";
}

void Diagnostics::add(Diagnostic d) {
  all_.push_back(std::move(d));
  std::stable_sort(all_.begin(), all_.end(), [](const Diagnostic& a, const Diagnostic& b) {
    return std::pair(a.line, a.column) < std::pair(b.line, b.column);
  });
}

void Diagnostics::error_at(const toml::value& v, std::string key, const std::string& what,
                           const std::string& comment, std::vector<std::string> hints,
                           StatusCode code) {
  Diagnostic d;
  d.code = code;
  d.file = file_;
  const toml::source_location loc = v.location();
  d.line = static_cast<int>(loc.line());
  d.column = static_cast<int>(loc.column());
  d.message = toml::format_error("[error] " + what, v, comment, std::move(hints),
                                 /*colorize=*/false);
  d.key = std::move(key);
  add(std::move(d));
}

void Diagnostics::error_in_file(std::string key, const std::string& what, StatusCode code) {
  Diagnostic d;
  d.code = code;
  d.file = file_;
  d.message = "[error] " + what + "\n --> " + file_;
  d.key = std::move(key);
  add(std::move(d));
}

void Diagnostics::syntax_error(const toml::syntax_error& e, std::string_view text) {
  Diagnostic d;
  d.file = file_;
  d.line = static_cast<int>(e.location().line());
  d.column = static_cast<int>(e.location().column());
  d.message = e.what();
  // toml11 prefixes its internal function name ("[error] toml::parse_array: ...").
  if (const size_t p = d.message.find("[error] toml::"); p == 0) {
    const size_t colon = d.message.find(": ", p);
    if (colon != std::string::npos)
      d.message = "[error] syntax error: " + d.message.substr(colon + 2);
  }
  d.key = key_on_line(text, d.line);
  add(std::move(d));
}

Status Diagnostics::status() const {
  FLICK_CHECK(!all_.empty());
  StatusCode code = all_.front().code;
  for (const Diagnostic& d : all_) {
    if (d.code == StatusCode::kInvalidInput || d.code == StatusCode::kNotFound) {
      code = StatusCode::kInvalidInput;
      break;
    }
  }
  std::vector<std::string> messages;
  for (const Diagnostic& d : all_) messages.push_back(d.message);
  return Status(code, join(messages, "\n"));
}

namespace {

// toml11 parses arrays and inline tables by recursion: a few thousand nested
// '[' overflow the stack (SIGSEGV) before it reports anything. No job or
// config needs more than a few levels, so deeper nesting is refused before
// toml11 sees the text.
constexpr int kMaxNesting = 64;

// The index of the last character of the string starting at text[i] (a
// quote), or text.size() when it is unterminated. *line counts newlines
// inside multi-line strings.
size_t skip_string(std::string_view text, size_t i, int* line) {
  const char q = text[i];
  const bool multi = text.substr(i, 3) == std::string(3, q);
  const bool basic = q == '"';  // escapes; literal strings have none
  for (size_t j = i + (multi ? 3 : 1); j < text.size(); ++j) {
    const char c = text[j];
    if (c == '\n') {
      if (!multi) return j - 1;  // unterminated: the newline is the caller's
      ++*line;
    } else if (basic && c == '\\') {
      if (j + 1 < text.size() && text[j + 1] == '\n') ++*line;
      ++j;
    } else if (c == q) {
      if (!multi) return j;
      size_t run = 0;
      while (j + run < text.size() && text[j + run] == q) ++run;
      if (run >= 3) return j + run - 1;  // up to two quotes before the closing three
      j += run - 1;
    }
  }
  return text.size();
}

// The line where '[' and '{' outside strings and comments first nest deeper
// than kMaxNesting; 0 when they never do.
int line_of_excess_nesting(std::string_view text) {
  int depth = 0, line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
    } else if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      i = skip_string(text, i, &line);
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxNesting) return line;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return 0;
}

}  // namespace

std::optional<toml::value> parse_toml(std::string_view text, Diagnostics& diag) {
  // A TOML document must be valid UTF-8 throughout (TOML 1.0). Checked first,
  // with toml11's own UTF-8 lexer, because toml11 3.7 handles invalid UTF-8
  // in a literal string or quoted key ('...' and triple-quoted) by rewinding
  // a location with an iterator into a different buffer: it reads out of
  // bounds (tests/fuzz found it; TomlReader.InvalidUtf8IsASyntaxError).
  const std::string copy(text);
  if (const std::ptrdiff_t bad = toml::detail::check_utf8_validity(copy); bad >= 0) {
    const std::string_view before = text.substr(0, static_cast<size_t>(bad));
    const size_t line_start = before.rfind('\n') + 1;  // npos + 1 == 0
    Diagnostic d;
    d.file = diag.file();
    d.line = static_cast<int>(std::count(before.begin(), before.end(), '\n')) + 1;
    d.column = static_cast<int>(before.size() - line_start) + 1;
    char byte[8];
    std::snprintf(byte, sizeof(byte), "0x%02x", static_cast<unsigned char>(copy[bad]));
    d.message = "[error] syntax error: invalid UTF-8 (byte " + std::string(byte) + " at line " +
                std::to_string(d.line) + ", column " + std::to_string(d.column) +
                "); a TOML file must be UTF-8\n --> " + diag.file() + ":" + std::to_string(d.line) +
                ":" + std::to_string(d.column);
    d.key = key_on_line(text, d.line);
    diag.add(std::move(d));
    return std::nullopt;
  }
  if (const int line = line_of_excess_nesting(text); line > 0) {
    diag.error_in_file("", "syntax error: arrays and inline tables nested more than " +
                               std::to_string(kMaxNesting) + " deep (line " + std::to_string(line) +
                               ")");
    return std::nullopt;
  }
  std::istringstream in{copy};
  try {
    return toml::parse(in, diag.file());
  } catch (const toml::syntax_error& e) {
    diag.syntax_error(e, text);
  } catch (const std::exception& e) {
    // toml11 reports some malformed input (invalid UTF-8 and the like) with
    // other exception types; never let them escape.
    diag.error_in_file("", std::string("cannot parse: ") + e.what());
  }
  return std::nullopt;
}

TableReader::TableReader(Diagnostics& diag, const toml::value& table, std::string path)
    : diag_(&diag), table_(&table), path_(std::move(path)) {
  FLICK_CHECK(table.is_table());
}

std::string TableReader::key_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

bool TableReader::has(std::string_view key) const {
  return table_->as_table().count(std::string(key)) != 0;
}

const toml::value* TableReader::value(std::string_view key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.emplace_back(key);
  const auto& t = table_->as_table();
  const auto it = t.find(std::string(key));
  return it == t.end() ? nullptr : &it->second;
}

void TableReader::missing(std::string_view key, std::string_view expected) {
  const std::string what = "missing key " + key_path(key) + ": expected " + std::string(expected);
  if (path_.empty()) {
    diag_->error_in_file(key_path(key), what);
  } else {
    diag_->error_at(*table_, key_path(key), what, "'" + std::string(key) + "' is missing here");
  }
}

void TableReader::wrong_type(std::string_view key, const toml::value& v,
                             std::string_view expected) {
  diag_->error_at(
      v, key_path(key),
      key_path(key) + ": expected " + std::string(expected) + ", got " + toml_type_words(v.type()),
      "expected " + std::string(expected));
}

void TableReader::error(std::string_view key, const std::string& what, const std::string& comment,
                        std::vector<std::string> hints, StatusCode code) {
  const toml::value* v = value(key);
  FLICK_CHECK(v != nullptr, "error() on a missing key");
  // Messages from path checks already start with the key.
  const std::string prefix = key_path(key) + ": ";
  const std::string text = what.rfind(prefix, 0) == 0 ? what : prefix + what;
  diag_->error_at(*v, key_path(key), text, comment, std::move(hints), code);
}

std::optional<std::string> TableReader::string(std::string_view key, Need need,
                                               std::string_view expected) {
  const toml::value* v = value(key);
  if (v == nullptr) {
    if (need == Need::kRequired) missing(key, expected);
    return std::nullopt;
  }
  if (!v->is_string()) {
    wrong_type(key, *v, expected);
    return std::nullopt;
  }
  const std::string& s = v->as_string().str;
  if (s.find('\0') != std::string::npos) {
    error(key, "expected " + std::string(expected) + ", got a string containing a NUL character",
          "contains \\u0000");
    return std::nullopt;
  }
  return s;
}

std::optional<size_t> TableReader::choice(std::string_view key, Need need,
                                          std::initializer_list<std::string_view> choices) {
  std::vector<std::string> quoted;
  for (std::string_view c : choices) {
    std::string q = "\"";  // (not "\"" + std::string: GCC 12 warns falsely on that)
    q.append(c);
    q += '"';
    quoted.push_back(std::move(q));
  }
  const std::string expected = "one of " + join(quoted, ", ");
  const std::optional<std::string> s = string(key, need, expected);
  if (!s) return std::nullopt;
  size_t i = 0;
  for (std::string_view c : choices) {
    if (*s == c) return i;
    ++i;
  }
  error(key, "expected " + expected + ", got \"" + *s + "\"", "expected " + expected);
  return std::nullopt;
}

std::optional<int64_t> TableReader::integer(std::string_view key, Need need, int64_t lo,
                                            int64_t hi) {
  const std::string expected = "an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
  const toml::value* v = value(key);
  if (v == nullptr) {
    if (need == Need::kRequired) missing(key, expected);
    return std::nullopt;
  }
  if (!v->is_integer()) {
    wrong_type(key, *v, expected);
    return std::nullopt;
  }
  // toml11 saturates literals beyond int64 to its limits; the range check
  // below rejects those too, as every range here is narrower.
  const int64_t i = v->as_integer();
  if (i < lo || i > hi) {
    error(key, "expected " + expected + ", got " + std::to_string(i), "expected " + expected);
    return std::nullopt;
  }
  return i;
}

std::optional<double> TableReader::number(std::string_view key, Need need, double lo, double hi,
                                          bool lo_open) {
  const std::string expected = "a number in " + std::string(lo_open ? "(" : "[") +
                               format_number(lo) + ", " + format_number(hi) + "]";
  const toml::value* v = value(key);
  if (v == nullptr) {
    if (need == Need::kRequired) missing(key, expected);
    return std::nullopt;
  }
  double d = 0;
  if (v->is_integer()) {
    d = static_cast<double>(v->as_integer());
  } else if (v->is_floating()) {
    d = v->as_floating();
  } else {
    wrong_type(key, *v, expected);
    return std::nullopt;
  }
  const bool in_range = std::isfinite(d) && (lo_open ? d > lo : d >= lo) && d <= hi;
  if (!in_range) {
    error(key, "expected " + expected + ", got " + format_number(d), "expected " + expected);
    return std::nullopt;
  }
  return d;
}

std::optional<bool> TableReader::boolean(std::string_view key, Need need) {
  const toml::value* v = value(key);
  if (v == nullptr) {
    if (need == Need::kRequired) missing(key, "true or false");
    return std::nullopt;
  }
  if (!v->is_boolean()) {
    wrong_type(key, *v, "true or false");
    return std::nullopt;
  }
  return v->as_boolean();
}

std::optional<std::vector<std::string>> TableReader::strings(std::string_view key, Need need,
                                                             std::string_view expected) {
  const std::string what = "an array of strings (" + std::string(expected) + ")";
  const toml::value* v = value(key);
  if (v == nullptr) {
    if (need == Need::kRequired) missing(key, what);
    return std::nullopt;
  }
  if (!v->is_array()) {
    wrong_type(key, *v, what);
    return std::nullopt;
  }
  std::vector<std::string> out;
  bool ok = true;
  size_t i = 0;
  for (const toml::value& e : v->as_array()) {
    const std::string element_key = key_path(key) + "[" + std::to_string(i++) + "]";
    if (!e.is_string()) {
      diag_->error_at(e, element_key,
                      element_key + ": expected " + std::string(expected) + ", got " +
                          toml_type_words(e.type()),
                      "expected a string");
      ok = false;
    } else if (e.as_string().str.find('\0') != std::string::npos) {
      diag_->error_at(e, element_key, element_key + ": contains a NUL character",
                      "contains \\u0000");
      ok = false;
    } else {
      out.push_back(e.as_string().str);
    }
  }
  if (!ok) return std::nullopt;
  return out;
}

std::optional<TableReader> TableReader::table(std::string_view key, Need need) {
  const toml::value* v = value(key);
  if (v == nullptr) {
    if (need == Need::kRequired) missing(key, "a table");
    return std::nullopt;
  }
  if (!v->is_table()) {
    wrong_type(key, *v, "a table");
    return std::nullopt;
  }
  return TableReader(*diag_, *v, key_path(key));
}

std::vector<TableReader> TableReader::tables(std::string_view key, Need need) {
  std::vector<TableReader> out;
  const toml::value* v = value(key);
  if (v == nullptr) {
    if (need == Need::kRequired) missing(key, "an array of tables ([[" + key_path(key) + "]])");
    return out;
  }
  if (!v->is_array()) {
    wrong_type(key, *v, "an array of tables ([[" + key_path(key) + "]])");
    return out;
  }
  size_t i = 0;
  for (const toml::value& e : v->as_array()) {
    const std::string element_key = key_path(key) + "[" + std::to_string(i++) + "]";
    if (!e.is_table()) {
      diag_->error_at(e, element_key,
                      element_key + ": expected a table, got " + toml_type_words(e.type()),
                      "expected a table");
      continue;
    }
    out.emplace_back(*diag_, e, element_key);
  }
  return out;
}

void TableReader::check_unknown_keys() {
  std::vector<std::pair<std::string, const toml::value*>> unknown;
  for (const auto& [k, v] : table_->as_table()) {
    if (std::find(known_.begin(), known_.end(), k) == known_.end()) unknown.emplace_back(k, &v);
  }
  // The table is unordered: report in file order.
  std::sort(unknown.begin(), unknown.end(), [](const auto& a, const auto& b) {
    const auto la = a.second->location(), lb = b.second->location();
    return std::pair(la.line(), la.column()) < std::pair(lb.line(), lb.column());
  });
  for (const auto& [k, v] : unknown) {
    std::vector<std::string> hints;
    std::string best;
    size_t best_distance = 3;  // suggest only close matches
    for (const std::string& known : known_) {
      const size_t dist = edit_distance(k, known);
      if (dist < best_distance) {
        best_distance = dist;
        best = known;
      }
    }
    if (!best.empty()) hints.push_back("did you mean '" + best + "'?");
    std::string where = path_.empty() ? "the top level" : "[" + path_ + "]";
    std::string expected = known_.empty() ? "no keys here" : "one of " + join(known_, ", ");
    diag_->error_at(
        *v, key_path(k),
        "unknown key " + quote(key_path(k)) + " in " + where + " (expected " + expected + ")",
        "unknown key", hints);
  }
}

}  // namespace flick
