// An op profiler: a Backend decorator that times every op call (wall clock,
// steady_clock) and accumulates calls, seconds and - for linear, matmul,
// attention and conv - the FLOPs (int8 ops for INT8 layers) per op name.
// Model code may time heavy work that is not a backend op with a
// ProfileScope, which costs one dynamic_cast when profiling is off.
//
// Enabled by FLICK_PROFILE=1 where flick builds the backend of a pipeline
// (flick bench mg2, the daemon's matrix-game jobs): without it the backend is
// not wrapped at all. Single-threaded use, like every Backend: ops are issued
// by one thread (they parallelise inside).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/op_list.h"

namespace flick {

struct ProfileEntry {
  int64_t calls = 0;
  double seconds = 0;    // exclusive: a section's time excludes the ops and sections it encloses
  double inclusive = 0;  // a section's whole time; an op's, as seconds
  double flops = 0;      // 0 for ops without a FLOP count
};

// Accumulated entries by name, and the wall time they were collected over.
struct ProfileStats {
  std::map<std::string, ProfileEntry, std::less<>> entries;
  std::chrono::steady_clock::time_point since;
  std::chrono::steady_clock::time_point until;

  // What was added between `earlier` (a snapshot of the same profiler) and this.
  ProfileStats minus(const ProfileStats& earlier) const;
  // A table (op, calls, seconds, ms/call, % of the wall time, GFLOP/s, and a
  // section's inclusive seconds), the slowest first, with the wall time not
  // spent in any op or section.
  std::string table(std::string_view title) const;
};

class ProfileBackend final : public Backend {
 public:
  explicit ProfileBackend(std::unique_ptr<Backend> inner);

  // The inner backend's name: code that checks for "cpu" sees through the wrapper.
  const char* name() const override { return inner_->name(); }

#define FLICK_PROFILE_DECLARE(ret, name, params, args) ret name params override;
  FLICK_OP_LIST(FLICK_PROFILE_DECLARE)
#undef FLICK_PROFILE_DECLARE

  // A snapshot of everything recorded since construction (or reset()).
  ProfileStats stats() const;
  void reset();

  // Section bookkeeping for ProfileScope.
  void begin_section();
  void end_section(std::string_view name, double seconds);

 private:
  // Times fn() and records it under name with `flops`.
  template <class Fn>
  auto timed(std::string_view name, double flops, Fn&& fn);
  void record(std::string_view name, double seconds, double inclusive, double flops);

  std::unique_ptr<Backend> inner_;
  ProfileStats stats_;
  // Time of the ops / sections inside each open section (innermost last).
  std::vector<double> open_;
};

// FLICK_PROFILE is set to something other than "" or "0".
bool profiling_enabled();
// `backend` wrapped in a ProfileBackend when profiling_enabled(), else as is.
std::unique_ptr<Backend> profile_if_enabled(std::unique_ptr<Backend> backend);
// The profiler if `backend` is one, else nullptr.
ProfileBackend* as_profiler(Backend& backend);

// Times the enclosing scope as the section `name` of backend's profiler (a
// no-op when backend is not a ProfileBackend). Backend ops called inside are
// recorded as ops and subtracted from the section's time.
class ProfileScope {
 public:
  ProfileScope(Backend& backend, const char* name);
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  ProfileBackend* profiler_;
  const char* name_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace flick
