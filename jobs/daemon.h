// flick serve (the daemon) and flick drain (process the queue, then exit).
#pragma once

#include <string>

namespace flick {

struct DaemonOptions {
  std::string config_path;
  std::string spool_override;
  // drain: no inotify, exit when nothing is left that can run now.
  bool drain = false;
};

// Returns the process exit status. serve: 0 after SIGTERM/SIGINT, 65 for an
// invalid config, 75 when the spool cannot be used, 1 otherwise. drain: 0
// when every job it took ended done; else 1 if any failed, 65 if any was
// quarantined, 75 if any was requeued or it was interrupted.
int run_daemon(const DaemonOptions& options);

}  // namespace flick
