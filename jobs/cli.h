// Subcommands register themselves on the CLI11 app from their own file; each
// callback leaves its exit status (0, 64, 65, 75, 1: see runtime/status.h
// exit_code) in CliContext.
#pragma once

#include <CLI/CLI.hpp>

#include "runtime/status.h"

namespace flick {

struct CliContext {
  int exit_status = 0;
  // Report a Status on stderr (if not ok) and record its exit code.
  void finish(const Status& s);
};

}  // namespace flick
