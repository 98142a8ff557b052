#include "jobs/cli.h"

#include "runtime/log.h"

namespace flick {

void CliContext::finish(const Status& s) {
  if (!s.ok()) log_error(s.message());
  exit_status = exit_code(s);
}

}  // namespace flick
