// Logger: plain lines on stderr; under systemd (JOURNAL_STREAM set) each line
// gets a <N> priority prefix that journald turns into PRIORITY=.
#pragma once

#include <string>

namespace flick {

enum class LogLevel { kError = 3, kWarning = 4, kInfo = 6, kDebug = 7 };

void log_set_level(LogLevel max_level);
void log_line(LogLevel level, const std::string& message);
inline void log_error(const std::string& m) { log_line(LogLevel::kError, m); }
inline void log_warning(const std::string& m) { log_line(LogLevel::kWarning, m); }
inline void log_info(const std::string& m) { log_line(LogLevel::kInfo, m); }
inline void log_debug(const std::string& m) { log_line(LogLevel::kDebug, m); }

}  // namespace flick
