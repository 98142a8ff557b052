// A Pipeline is loaded once for fixed shapes, validates a job's inputs against
// them before any compute, then streams frames into a FrameSink, reporting
// progress and checking the stop token between blocks.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <string_view>

#include "io/frame.h"
#include "io/frame_sink.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace flick {

struct RunContext {
  // Set by SIGTERM handling: stop at the next block boundary and return
  // interrupted().
  const std::atomic<bool>* stop = nullptr;
  // Called after each block (and it is where the daemon pings the watchdog).
  std::function<void(int64_t frames_done, int64_t frames_total)> progress;
  // `flick run --dump`: sees the pipeline's named intermediates (views valid
  // during the call only); empty: nothing is tapped.
  std::function<void(std::string_view name, const Tensor& t)> tap;

  bool stop_requested() const { return stop != nullptr && stop->load(); }
};

}  // namespace flick
