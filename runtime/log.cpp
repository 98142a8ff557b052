#include "runtime/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace flick {
namespace {

std::atomic<int> g_max_level{static_cast<int>(LogLevel::kInfo)};

// journald is the reader when stderr is the stream named by JOURNAL_STREAM
// ("<dev>:<ino>"): systemd sets it for services.
bool stderr_is_journal() {
  static const bool is_journal = [] {
    return std::getenv("JOURNAL_STREAM") != nullptr && !isatty(STDERR_FILENO);
  }();
  return is_journal;
}

const char* level_word(LogLevel l) {
  switch (l) {
    case LogLevel::kError: return "error: ";
    case LogLevel::kWarning: return "warning: ";
    case LogLevel::kInfo: return "";
    case LogLevel::kDebug: return "debug: ";
  }
  return "";
}

}  // namespace

void log_set_level(LogLevel max_level) { g_max_level = static_cast<int>(max_level); }

void log_line(LogLevel level, const std::string& message) {
  if (static_cast<int>(level) > g_max_level.load()) return;
  if (stderr_is_journal()) {
    std::fprintf(stderr, "<%d>%s\n", static_cast<int>(level), message.c_str());
  } else {
    std::fprintf(stderr, "flick: %s%s\n", level_word(level), message.c_str());
  }
}

}  // namespace flick
