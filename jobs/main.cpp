// flick: one binary for the daemon, one-shot jobs, weight tools and benchmarks.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "jobs/cli.h"
#include "jobs/signals.h"
#include "runtime/log.h"

namespace flick {
// Each lives in the file that implements the subcommand.
void register_job_commands(CLI::App& app, CliContext& ctx);  // jobs/commands.cpp
void register_inspect(CLI::App& app, CliContext& ctx);
void register_convert(CLI::App& app, CliContext& ctx);
void register_synth(CLI::App& app, CliContext& ctx);  // jobs/cmd_synth.cpp
void register_bench(CLI::App& app, CliContext& ctx);  // jobs/cmd_bench.cpp
}  // namespace flick

int main(int argc, char** argv) {
  // First: a SIGTERM that arrives while the config or the pipelines load is
  // then held for the command's SignalWatch (a clean stop), never the
  // default action. Commands without a SignalWatch (validate, submit,
  // status, ...) unblock them again as they start, so they stay killable.
  flick::block_stop_signals();
  // FLICK_LOG=debug shows per-stage detail (memory while loading, per block).
  if (const char* level = std::getenv("FLICK_LOG")) {
    const std::string_view l(level);
    if (l == "debug") flick::log_set_level(flick::LogLevel::kDebug);
    if (l == "warning") flick::log_set_level(flick::LogLevel::kWarning);
    if (l == "error") flick::log_set_level(flick::LogLevel::kError);
  }
  CLI::App app{"flick: headless batch renderer for video-generation and vision transformers"};
  app.set_version_flag("--version", "flick 0.1.0");
  app.require_subcommand(1);
  flick::CliContext ctx;
  flick::register_job_commands(app, ctx);
  flick::register_inspect(app, ctx);
  flick::register_convert(app, ctx);
  flick::register_synth(app, ctx);
  flick::register_bench(app, ctx);
  for (CLI::App* sub : app.get_subcommands({})) {
    const std::string& name = sub->get_name();
    if (name != "serve" && name != "drain" && name != "run") {
      sub->preparse_callback([](size_t) { flick::unblock_stop_signals(); });
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 64;  // usage error
  }
  return ctx.exit_status;
}
