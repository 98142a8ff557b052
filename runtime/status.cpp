#include "runtime/status.h"

#include <cstring>

namespace flick {

Status errno_status(const std::string& what, const std::string& path, int err) {
  StatusCode code = StatusCode::kIoError;
  if (err == ENOENT) code = StatusCode::kNotFound;
  return Status(code, what + " " + path + ": " + std::strerror(err));
}

int exit_code(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return 0;
    case StatusCode::kUsage: return 64;
    case StatusCode::kInvalidInput:
    case StatusCode::kNotFound: return 65;
    case StatusCode::kIoError:
    case StatusCode::kUnavailable:
    case StatusCode::kInterrupted: return 75;
    case StatusCode::kInternal: return 1;
  }
  return 1;
}

const char* status_code_name(StatusCode c) {
  switch (c) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidInput: return "invalid_input";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kUsage: return "usage";
    case StatusCode::kIoError: return "io_error";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kInterrupted: return "interrupted";
    case StatusCode::kInternal: return "internal";
  }
  return "internal";
}

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "flick: internal error at %s:%d: check failed: %s%s%s\n", file, line, cond,
               msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace flick
