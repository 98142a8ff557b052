// Strict reading of TOML documents (job files, the daemon config, status
// files) into plain structs. Every key is checked: unknown keys, wrong types
// and out-of-range values are errors, each reported with toml11's
// format_error (file, line, column, the offending text) and the dotted key,
// saying what was expected. Reading goes on after an error, so one pass lists
// every problem in a file.
//
// toml11's find_or() is deliberately not used: it returns the default for a
// value of the wrong type, hiding `fps = "25"`.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <toml.hpp>
#include <vector>

#include "runtime/status.h"

namespace flick {

// One problem in a file. line/column are 0 when it has no position (a missing
// key of the root table, an unreadable or oversized file).
struct Diagnostic {
  StatusCode code = StatusCode::kInvalidInput;
  std::string message;  // the full, formatted text
  std::string file;
  int line = 0;
  int column = 0;
  std::string key;  // dotted path ("output.video.crf"); empty for file-level errors
};

class Diagnostics {
 public:
  explicit Diagnostics(std::string file) : file_(std::move(file)) {}

  const std::string& file() const { return file_; }
  bool ok() const { return all_.empty(); }
  const std::vector<Diagnostic>& all() const { return all_; }
  // In file order (errors without a position first).
  const Diagnostic& first() const { return all_.front(); }
  void add(Diagnostic d);

  // An error at a value: formatted by toml11 with the source line underlined.
  void error_at(const toml::value& v, std::string key, const std::string& what,
                const std::string& comment, std::vector<std::string> hints = {},
                StatusCode code = StatusCode::kInvalidInput);
  // An error with no position in the file.
  void error_in_file(std::string key, const std::string& what,
                     StatusCode code = StatusCode::kInvalidInput);
  // A syntax error thrown by toml::parse; `text` is the document, to name
  // the key on the error's line (best effort: a syntax error may have no key).
  void syntax_error(const toml::syntax_error& e, std::string_view text);

  // Every message joined; the code is invalid_input when any error is
  // permanent (retrying cannot fix a file that is also malformed), otherwise
  // the first error's code. Must not be called when ok().
  Status status() const;

 private:
  std::string file_;
  std::vector<Diagnostic> all_;
};

// Parses TOML text. On a syntax error returns nullopt and records it.
std::optional<toml::value> parse_toml(std::string_view text, Diagnostics& diag);

enum class Need { kOptional, kRequired };

// A view of one table of a parsed document that remembers which keys were
// asked for, so check_unknown_keys() can report the rest.
class TableReader {
 public:
  // `path` is the table's dotted key ("" for the root, "output.video").
  TableReader(Diagnostics& diag, const toml::value& table, std::string path);

  bool has(std::string_view key) const;
  // The raw value (marks the key as known); nullptr when absent.
  const toml::value* value(std::string_view key);

  // `expected` completes "expected ...", e.g. "an absolute path".
  std::optional<std::string> string(std::string_view key, Need need, std::string_view expected);
  // One of `choices`; returns its index.
  std::optional<size_t> choice(std::string_view key, Need need,
                               std::initializer_list<std::string_view> choices);
  std::optional<int64_t> integer(std::string_view key, Need need, int64_t lo, int64_t hi);
  // An integer or a float, finite, in [lo, hi] (or (lo, hi] when lo_open).
  std::optional<double> number(std::string_view key, Need need, double lo, double hi,
                               bool lo_open = false);
  std::optional<bool> boolean(std::string_view key, Need need);
  std::optional<std::vector<std::string>> strings(std::string_view key, Need need,
                                                  std::string_view expected);
  // A table ([name] or an inline table).
  std::optional<TableReader> table(std::string_view key, Need need);
  // An array of tables ([[name]]).
  std::vector<TableReader> tables(std::string_view key, Need need);

  // An error about the value of `key` (which must be present).
  void error(std::string_view key, const std::string& what, const std::string& comment,
             std::vector<std::string> hints = {}, StatusCode code = StatusCode::kInvalidInput);
  // Reports every key that no accessor asked for, with a did-you-mean hint.
  void check_unknown_keys();

  std::string key_path(std::string_view key) const;
  const std::string& path() const { return path_; }
  const toml::value& toml() const { return *table_; }
  Diagnostics& diagnostics() const { return *diag_; }

 private:
  void missing(std::string_view key, std::string_view expected);
  void wrong_type(std::string_view key, const toml::value& v, std::string_view expected);

  Diagnostics* diag_;
  const toml::value* table_;
  std::string path_;
  std::vector<std::string> known_;
};

// "a string", "an integer", ... for messages.
const char* toml_type_words(toml::value_t t);

}  // namespace flick
