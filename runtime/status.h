// Status and Expected<T>: how everything user input can reach reports errors.
// Invariant violations (programmer bugs) use FLICK_CHECK, which aborts with
// file:line. Nothing throws across the jobs/ API.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace flick {

// The code decides how a batch system should react (see exit_code()).
enum class StatusCode {
  kOk = 0,
  kInvalidInput,  // bad job, config or file content: permanent, do not retry
  kNotFound,      // a named file or tensor does not exist: permanent
  kUsage,         // wrong command line
  kIoError,       // read/write failure, disk full: worth retrying
  kUnavailable,   // device or resource temporarily unavailable: retry
  kInterrupted,   // stopped by a signal: retry
  kInternal,      // anything else
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefix context ("reading model.safetensors: ...") while propagating.
  Status with_context(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }
inline Status invalid_input(std::string m) { return {StatusCode::kInvalidInput, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status usage_error(std::string m) { return {StatusCode::kUsage, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status interrupted(std::string m) { return {StatusCode::kInterrupted, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// io_error with strerror(errno) and the path appended.
Status errno_status(const std::string& what, const std::string& path, int err);

// The process exit status batch systems act on: 0 done, 64 usage, 65 invalid
// job or input (permanent), 75 temporary failure, 1 anything else.
int exit_code(const Status& s);
const char* status_code_name(StatusCode c);

template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}
  Expected(Status status) : v_(std::move(status)) {
    if (std::get<Status>(v_).ok()) {
      std::fprintf(stderr, "Expected constructed from an ok Status\n");
      std::abort();
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);

}  // namespace flick

// Programmer-error check: aborts with file:line. Never use for user input.
#define FLICK_CHECK(cond, ...)                                                    \
  do {                                                                            \
    if (!(cond)) ::flick::check_failed(__FILE__, __LINE__, #cond, std::string{__VA_ARGS__}); \
  } while (0)

#define FLICK_CONCAT_INNER(a, b) a##b
#define FLICK_CONCAT(a, b) FLICK_CONCAT_INNER(a, b)

// Propagate a non-ok Status.
#define FLICK_TRY(expr)                            \
  do {                                             \
    ::flick::Status flick_status_ = (expr);        \
    if (!flick_status_.ok()) return flick_status_; \
  } while (0)

// FLICK_ASSIGN_OR_RETURN(auto x, make_x()): unwrap an Expected or return its Status.
#define FLICK_ASSIGN_OR_RETURN(lhs, expr)                              \
  auto FLICK_CONCAT(flick_expected_, __LINE__) = (expr);               \
  if (!FLICK_CONCAT(flick_expected_, __LINE__).ok())                   \
    return FLICK_CONCAT(flick_expected_, __LINE__).status();           \
  lhs = std::move(FLICK_CONCAT(flick_expected_, __LINE__)).value()
