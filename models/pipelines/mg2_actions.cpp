#include "models/pipelines/mg2_actions.h"

#include <bit>
#include <charconv>
#include <cmath>
#include <optional>
#include <sstream>

namespace flick {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

bool equal_ci(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

// Index of `name` among the mode's keys, or -1.
int key_index(const Mg2ModeSpec& mode, std::string_view name) {
  for (size_t k = 0; k < mode.keys.size(); ++k) {
    if (equal_ci(mode.keys[k], name)) return static_cast<int>(k);
  }
  return -1;
}

// "\"w+a\"". (Built by appending: GCC 12 warns falsely on "\"" + std::string.)
std::string quoted(std::string_view s) {
  std::string q = "\"";
  q.append(s);
  q += '"';
  return q;
}

std::string format_value(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

bool is_templerun(const Mg2ModeSpec& mode) { return mode.mode == Mg2Mode::kTemplerun; }

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (size_t i = 0;;) {
    const size_t j = s.find(sep, i);
    out.push_back(s.substr(i, j == std::string_view::npos ? std::string_view::npos : j - i));
    if (j == std::string_view::npos) return out;
    i = j + 1;
  }
}

std::optional<double> parse_number(std::string_view field) {
  double v = 0;
  const char* end = field.data() + field.size();
  const auto [ptr, ec] = std::from_chars(field.data(), end, v);
  if (ec != std::errc() || ptr != end || field.empty()) return std::nullopt;
  return v;
}

std::string names_of(const Mg2ModeSpec& mode, uint32_t pressed) {
  std::string out;
  for (size_t k = 0; k < mode.keys.size(); ++k) {
    if ((pressed >> k) & 1u) out += (out.empty() ? "" : ", ") + std::string(mode.keys[k]);
  }
  return out;
}

// Columns of a CSV action file: for each header position, the keyboard
// channel (0..K-1), kPitch or kYaw (-1: no such column).
constexpr int kPitch = -2, kYaw = -3;

}  // namespace

std::string mg2_key_list(const Mg2ModeSpec& mode) {
  std::string out;
  for (std::string_view k : mode.keys) {
    if (!out.empty()) out += ", ";
    out += k;
  }
  return out;
}

Mg2Tracks mg2_idle_tracks(const Mg2ModeSpec& mode, int64_t frames) {
  Mg2Tracks t;
  t.frames = frames;
  t.keyboard.assign(static_cast<size_t>(frames * mode.keyboard_dim), 0.0f);
  if (is_templerun(mode)) {
    const int idle = key_index(mode, "nomove");
    FLICK_CHECK(idle >= 0, "templerun has no nomove key");
    for (int64_t f = 0; f < frames; ++f) t.keyboard[f * mode.keyboard_dim + idle] = 1.0f;
  }
  if (mode.mouse) t.mouse.assign(static_cast<size_t>(frames * 2), 0.0f);
  return t;
}

Expected<uint32_t> parse_mg2_keys(const Mg2ModeSpec& mode, std::string_view combo) {
  FLICK_CHECK(mode.keys.size() == static_cast<size_t>(mode.keyboard_dim) && mode.keys.size() <= 32);
  const std::string valid =
      std::string("(") + std::string(mode.name) + " keys: " + mg2_key_list(mode) + ")";
  uint32_t pressed = 0;
  if (!trim(combo).empty()) {
    for (std::string_view part : split(combo, '+')) {
      const std::string_view name = trim(part);
      if (name.empty()) {
        return invalid_input(quoted(combo) + " has an empty key name; join key names with '+' " +
                             valid);
      }
      const int k = key_index(mode, name);
      if (k < 0) {
        return invalid_input(std::string("unknown key ") + quoted(name) + " " + valid);
      }
      if ((pressed >> k) & 1u) {
        return invalid_input(std::string("key ") + quoted(name) + " is named twice in " +
                             quoted(combo));
      }
      pressed |= 1u << k;
    }
  }
  if (is_templerun(mode) && std::popcount(pressed) != 1) {
    return invalid_input(
        std::string("templerun takes exactly one key per segment (one-hot), got ") + quoted(combo) +
        "; use \"nomove\" to stand still " + valid);
  }
  return pressed;
}

Status check_mg2_mouse(const Mg2ModeSpec& mode, double pitch, double yaw) {
  if (!mode.mouse) {
    return invalid_input(std::string(mode.name) + " has no mouse input (keyboard only)");
  }
  for (const auto& [name, v] : {std::pair{"pitch", pitch}, std::pair{"yaw", yaw}}) {
    if (!std::isfinite(v) || std::fabs(v) > kMg2MaxMouse) {
      return invalid_input(std::string(name) + " must be finite and within ±" +
                           format_value(kMg2MaxMouse) + ", got " + format_value(v) +
                           " (the reference moves the camera by ±0.1 per frame)");
    }
  }
  if (mode.mode == Mg2Mode::kGtaDrive && pitch != 0) {
    return invalid_input("gta_drive steers with yaw only: pitch must be 0, got " +
                         format_value(pitch) + " (the model was trained with [0, ±0.1])");
  }
  return ok_status();
}

Expected<std::vector<float>> expand_mg2_keyboard(const Mg2ModeSpec& mode,
                                                 std::span<const Mg2KeySegment> segments,
                                                 int64_t frames) {
  const int64_t k_dim = mode.keyboard_dim;
  int64_t total = 0;
  for (const Mg2KeySegment& s : segments) {
    if (s.frames < 1) return invalid_input("a segment must last at least 1 frame");
    total += s.frames;
  }
  if (total != frames) {
    return invalid_input("the segments cover " + std::to_string(total) +
                         " video frames, expected " + std::to_string(frames));
  }
  std::vector<float> track(static_cast<size_t>(frames * k_dim), 0.0f);
  int64_t f = 0;
  for (const Mg2KeySegment& s : segments) {
    for (int64_t end = f + s.frames; f < end; ++f) {
      for (int64_t k = 0; k < k_dim; ++k) track[f * k_dim + k] = float((s.pressed >> k) & 1u);
    }
  }
  return track;
}

Expected<std::vector<float>> expand_mg2_mouse(std::span<const Mg2MouseSegment> segments,
                                              int64_t frames) {
  int64_t total = 0;
  for (const Mg2MouseSegment& s : segments) {
    if (s.frames < 1) return invalid_input("a segment must last at least 1 frame");
    total += s.frames;
  }
  if (total != frames) {
    return invalid_input("the segments cover " + std::to_string(total) +
                         " video frames, expected " + std::to_string(frames));
  }
  std::vector<float> track(static_cast<size_t>(frames * 2));
  int64_t f = 0;
  for (const Mg2MouseSegment& s : segments) {
    for (int64_t end = f + s.frames; f < end; ++f) {
      track[f * 2] = static_cast<float>(s.pitch);
      track[f * 2 + 1] = static_cast<float>(s.yaw);
    }
  }
  return track;
}

Expected<Mg2Tracks> parse_mg2_actions_csv(const Mg2ModeSpec& mode, std::string_view text,
                                          int64_t frames, const std::string& display) {
  if (static_cast<int64_t>(text.size()) > kMg2MaxCsvBytes) {
    return invalid_input(display + ": larger than " + std::to_string(kMg2MaxCsvBytes) + " bytes");
  }
  const auto at = [&](size_t line, const std::string& what) {
    return invalid_input(display + ":" + std::to_string(line) + ": " + what);
  };
  std::string expected_columns = mg2_key_list(mode);
  if (mode.mouse) expected_columns += ", pitch, yaw";

  Mg2Tracks t;
  t.frames = frames;
  t.keyboard.assign(static_cast<size_t>(frames * mode.keyboard_dim), 0.0f);
  if (mode.mouse) t.mouse.assign(static_cast<size_t>(frames * 2), 0.0f);

  std::vector<int> columns;  // empty until the header is read
  std::vector<std::string_view> names;
  int64_t row = 0;
  size_t line_no = 0;
  for (std::string_view line : split(text, '\n')) {
    ++line_no;
    const std::string_view content = trim(line);
    if (content.empty() || content.front() == '#') continue;
    std::vector<std::string_view> fields = split(content, ',');
    for (std::string_view& f : fields) f = trim(f);

    if (columns.empty()) {  // the header
      uint32_t seen_keys = 0;
      bool seen_pitch = false, seen_yaw = false;
      for (std::string_view name : fields) {
        int c = key_index(mode, name);
        if (c < 0 && (equal_ci(name, "pitch") || equal_ci(name, "yaw"))) {
          if (!mode.mouse) {
            return at(line_no, std::string(mode.name) + " has no mouse input: column '" +
                                   std::string(name) +
                                   "' is not allowed (columns: " + expected_columns + ")");
          }
          c = equal_ci(name, "pitch") ? kPitch : kYaw;
        }
        if (c == -1 && name.empty()) {
          return at(line_no,
                    "the header has an empty column name (columns: " + expected_columns + ")");
        }
        if (c == -1) {
          return at(line_no, "unknown column '" + std::string(name) + "' for " +
                                 std::string(mode.name) + " (columns: " + expected_columns + ")");
        }
        bool& seen = c == kPitch ? seen_pitch : seen_yaw;
        const bool twice = c >= 0 ? ((seen_keys >> c) & 1u) != 0 : seen;
        if (twice) return at(line_no, "column '" + std::string(name) + "' appears twice");
        if (c >= 0) {
          seen_keys |= 1u << c;
        } else {
          seen = true;
        }
        columns.push_back(c);
        names.push_back(name);
      }
      std::string missing;
      for (size_t k = 0; k < mode.keys.size(); ++k) {
        if (((seen_keys >> k) & 1u) == 0)
          missing += (missing.empty() ? "" : ", ") + std::string(mode.keys[k]);
      }
      if (mode.mouse && !seen_pitch) missing += missing.empty() ? "pitch" : ", pitch";
      if (mode.mouse && !seen_yaw) missing += missing.empty() ? "yaw" : ", yaw";
      if (!missing.empty()) {
        return at(line_no, "the header lacks column(s) " + missing + " (" + std::string(mode.name) +
                               " needs: " + expected_columns + ")");
      }
      continue;
    }

    if (row >= frames) {
      return at(line_no, "more than " + std::to_string(frames) +
                             " frame rows (expected exactly one row per video frame)");
    }
    if (fields.size() != columns.size()) {
      return at(line_no, std::to_string(fields.size()) + " fields, expected " +
                             std::to_string(columns.size()) + " (as in the header)");
    }
    float* keys = &t.keyboard[row * mode.keyboard_dim];
    double pitch = 0, yaw = 0;
    for (size_t i = 0; i < fields.size(); ++i) {
      const std::string column =
          "column " + std::to_string(i + 1) + " ('" + std::string(names[i]) + "')";
      const std::optional<double> v = parse_number(fields[i]);
      if (!v) {
        return at(line_no, column + ": expected a number, got '" + std::string(fields[i]) + "'");
      }
      if (columns[i] >= 0) {
        if (*v != 0 && *v != 1) {
          return at(line_no,
                    column + ": a key is 0 (up) or 1 (pressed), got " + std::string(fields[i]));
        }
        keys[columns[i]] = static_cast<float>(*v);
      } else {
        (columns[i] == kPitch ? pitch : yaw) = *v;
      }
    }
    if (mode.mouse) {
      if (Status s = check_mg2_mouse(mode, pitch, yaw); !s.ok()) return at(line_no, s.message());
      t.mouse[row * 2] = static_cast<float>(pitch);
      t.mouse[row * 2 + 1] = static_cast<float>(yaw);
    }
    if (is_templerun(mode)) {
      uint32_t pressed = 0;
      for (int k = 0; k < mode.keyboard_dim; ++k) pressed |= keys[k] != 0 ? 1u << k : 0u;
      if (std::popcount(pressed) != 1) {
        return at(line_no, "templerun takes exactly one key per frame (one-hot), got " +
                               (pressed == 0 ? std::string("none (set nomove to 1 to stand still)")
                                             : names_of(mode, pressed)));
      }
    }
    ++row;
  }
  if (columns.empty()) {
    return invalid_input(display + ": no header row (expected the columns " + expected_columns +
                         ")");
  }
  if (row != frames) {
    return invalid_input(display + ": " + std::to_string(row) + " frame rows, expected " +
                         std::to_string(frames) + " (one per video frame)");
  }
  return t;
}

}  // namespace flick
