#include "jobs/status_file.h"

#include <time.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <sstream>

namespace flick {
namespace {

// Length of the valid UTF-8 sequence at s[i], or 0.
size_t utf8_sequence(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  uint32_t cp = 0;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are invalid.
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  return n;
}

std::string format_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

class TomlOut {
 public:
  void comment(const std::string& c) { s_ << "# " << c << "\n"; }
  void header(const std::string& h) { s_ << "\n[" << h << "]\n"; }
  void array_header(const std::string& h) { s_ << "\n[[" << h << "]]\n"; }
  void str(const std::string& k, std::string_view v) { s_ << k << " = " << toml_quote(v) << "\n"; }
  void integer(const std::string& k, int64_t v) { s_ << k << " = " << v << "\n"; }
  void number(const std::string& k, double v) { s_ << k << " = " << format_double(v) << "\n"; }
  void time(const std::string& k, int64_t ns) {
    if (ns > 0) s_ << k << " = " << format_utc(ns) << "\n";
  }
  std::string text() const { return s_.str(); }

 private:
  std::ostringstream s_;
};

// A key as TOML writes it: bare when it can be, quoted otherwise.
std::string bare_key(const std::string& k) {
  const bool bare = !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
  return bare ? k : toml_quote(k);
}

template <typename T>
std::optional<T> get(const toml::value& t, const char* key) {
  if (!t.is_table()) return std::nullopt;
  const auto it = t.as_table().find(key);
  if (it == t.as_table().end()) return std::nullopt;
  try {
    return toml::get<T>(it->second);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

const char* job_state_name(JobState s) {
  switch (s) {
    case JobState::kQueued: return "queued";
    case JobState::kRunning: return "running";
    case JobState::kDone: return "done";
    case JobState::kFailed: return "failed";
    case JobState::kQuarantined: return "quarantined";
  }
  return "queued";
}

std::string toml_quote(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_sequence(s, i);
    if (n == 0) {
      out += "\\uFFFD";
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04X", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  return out + "\"";
}

int64_t unix_now_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

std::string format_utc(int64_t unix_ns) {
  const time_t secs = static_cast<time_t>(unix_ns / 1000000000);
  const int ms = static_cast<int>((unix_ns / 1000000) % 1000);
  tm t;
  gmtime_r(&secs, &t);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", t.tm_year + 1900,
                t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, ms);
  return buf;
}

std::string format_status(const JobStatus& s) {
  TomlOut o;
  o.comment("flick job status (written atomically; in done/, failed/ and quarantine/ it is the");
  o.comment("commit point of the job)");
  o.str("id", s.id);
  o.str("state", job_state_name(s.state));
  o.integer("attempts", s.attempts);
  o.integer("exit_code", s.exit_code);
  if (!s.pipeline.empty()) o.str("pipeline", s.pipeline);
  if (!s.summary.empty()) o.str("summary", s.summary);
  o.str("job_file", s.job_file);
  if (!s.job_sha256.empty()) o.str("job_sha256", s.job_sha256);
  o.time("submitted", s.submitted_ns);
  o.time("started", s.started_ns);
  o.time("finished", s.finished_ns);
  if (!s.host.empty()) o.str("host", s.host);
  if (s.pid != 0) o.integer("pid", s.pid);
  if (!s.output_dir.empty()) o.str("output_dir", s.output_dir);
  o.time("not_before", s.not_before_ns);
  if (s.partial_ino != 0) {
    o.str("partial_dev", std::to_string(s.partial_dev));
    o.str("partial_ino", std::to_string(s.partial_ino));
  }
  if (s.timing) {
    o.header("timing");
    o.number("queued_s", s.timing->queued_s);
    o.number("validate_ms", s.timing->validate_ms);
    o.number("render_ms", s.timing->render_ms);
    o.number("commit_ms", s.timing->commit_ms);
    o.number("total_ms", s.timing->total_ms);
    o.integer("frames", s.timing->frames);
    o.number("fps", s.timing->fps);
    o.number("s_per_frame", s.timing->s_per_frame);
  }
  if (!s.details.empty()) {
    o.header("details");
    for (const auto& [key, value] : s.details) o.str(bare_key(key), value);
  }
  if (s.error) {
    o.header("error");
    o.str("code", status_code_name(s.error->code));
    o.str("file", s.error->file);
    if (s.error->line > 0) {
      o.integer("line", s.error->line);
      o.integer("column", s.error->column);
    }
    if (!s.error->key.empty()) o.str("key", s.error->key);
    o.str("message", s.error->message);
  }
  for (const OutputRecord& r : s.outputs) {
    o.array_header("outputs");
    o.str("path", r.path);
    o.integer("bytes", r.bytes);
    o.str("sha256", r.sha256);
  }
  return o.text();
}

Expected<JobStatus> parse_status(const std::string& text, const std::string& display) {
  Diagnostics diag(display);
  std::optional<toml::value> doc = parse_toml(text, diag);
  if (!doc) return diag.status();
  JobStatus s;
  s.id = get<std::string>(*doc, "id").value_or("");
  const std::string state = get<std::string>(*doc, "state").value_or("");
  bool known_state = false;
  for (JobState js : {JobState::kQueued, JobState::kRunning, JobState::kDone, JobState::kFailed,
                      JobState::kQuarantined}) {
    if (state == job_state_name(js)) {
      s.state = js;
      known_state = true;
    }
  }
  if (!known_state) return invalid_input(display + ": no valid 'state'");
  s.attempts = static_cast<int>(get<int64_t>(*doc, "attempts").value_or(0));
  s.exit_code = static_cast<int>(get<int64_t>(*doc, "exit_code").value_or(0));
  s.pipeline = get<std::string>(*doc, "pipeline").value_or("");
  s.summary = get<std::string>(*doc, "summary").value_or("");
  s.job_file = get<std::string>(*doc, "job_file").value_or("");
  s.job_sha256 = get<std::string>(*doc, "job_sha256").value_or("");
  s.host = get<std::string>(*doc, "host").value_or("");
  s.pid = static_cast<int>(get<int64_t>(*doc, "pid").value_or(0));
  s.output_dir = get<std::string>(*doc, "output_dir").value_or("");
  s.partial_dev =
      std::strtoull(get<std::string>(*doc, "partial_dev").value_or("0").c_str(), nullptr, 10);
  s.partial_ino =
      std::strtoull(get<std::string>(*doc, "partial_ino").value_or("0").c_str(), nullptr, 10);
  if (const auto it = doc->as_table().find("not_before");
      it != doc->as_table().end() && it->second.is_offset_datetime()) {
    const std::chrono::system_clock::time_point t = it->second.as_offset_datetime();
    s.not_before_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }
  if (doc->as_table().count("error")) {
    const toml::value& e = doc->at("error");
    Diagnostic d;
    d.message = get<std::string>(e, "message").value_or("");
    d.file = get<std::string>(e, "file").value_or("");
    d.key = get<std::string>(e, "key").value_or("");
    d.line = static_cast<int>(get<int64_t>(e, "line").value_or(0));
    d.column = static_cast<int>(get<int64_t>(e, "column").value_or(0));
    s.error = d;
  }
  if (doc->as_table().count("details") && doc->at("details").is_table()) {
    for (const auto& [key, v] : doc->at("details").as_table()) {
      if (v.is_string()) s.details.emplace_back(key, v.as_string().str);
    }
    // toml11's tables are unordered: keep the file's order.
    std::sort(s.details.begin(), s.details.end(), [&](const auto& a, const auto& b) {
      const toml::value& t = doc->at("details");
      return t.at(a.first).location().line() < t.at(b.first).location().line();
    });
  }
  if (doc->as_table().count("outputs") && doc->at("outputs").is_array()) {
    for (const toml::value& o : doc->at("outputs").as_array()) {
      OutputRecord r;
      r.path = get<std::string>(o, "path").value_or("");
      r.bytes = get<int64_t>(o, "bytes").value_or(0);
      r.sha256 = get<std::string>(o, "sha256").value_or("");
      s.outputs.push_back(r);
    }
  }
  return s;
}

}  // namespace flick
