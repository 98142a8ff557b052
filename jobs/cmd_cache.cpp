// flick cache [list|clear]: the plan cache (runtime/plan_cache.h) the
// pipelines fill at load. The directory is --dir, else [daemon].plan_cache of
// --config, else /var/cache/flick (the config's default).
//
//   list   one line per entry: age, size, file, and with --keys its key
//          (source identity, precision and shapes, ISA, oneDNN version);
//          unreadable entries are marked (the next load rebuilds them)
//   clear  removes every entry (safe at any time: loads rebuild what they
//          miss; a running daemon keeps the entries it has mapped)
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>

#include "jobs/cli.h"
#include "jobs/config.h"
#include "runtime/plan_cache.h"

namespace flick {
namespace {

struct CacheOptions {
  std::string dir;
  std::string config;
  bool keys = false;
};

std::string human_bytes(int64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string human_age(int64_t seconds) {
  if (seconds < 0) seconds = 0;
  if (seconds < 120) return std::to_string(seconds) + "s";
  if (seconds < 2 * 3600) return std::to_string(seconds / 60) + "m";
  if (seconds < 2 * 86400) return std::to_string(seconds / 3600) + "h";
  return std::to_string(seconds / 86400) + "d";
}

// --dir, else the config's plan_cache (an unreadable --config is an error,
// an absent default config is not: the default directory then).
Expected<std::string> cache_dir(const CacheOptions& o) {
  if (!o.dir.empty()) return o.dir;
  const bool explicit_config = !o.config.empty();
  const std::string path = explicit_config ? o.config : kDefaultConfigPath;
  Expected<DaemonConfig> c = load_config(path, /*spool_override=*/"/nonexistent-spool-unused");
  if (c.ok()) return c->plan_cache;
  if (explicit_config || c.status().code() != StatusCode::kNotFound) return c.status();
  return DaemonConfig().plan_cache;
}

Status run_list(const CacheOptions& o) {
  FLICK_ASSIGN_OR_RETURN(std::string dir, cache_dir(o));
  PlanCache cache(dir);
  FLICK_ASSIGN_OR_RETURN(std::vector<PlanEntryInfo> entries, cache.list());
  int64_t total = 0;
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  for (const PlanEntryInfo& e : entries) {
    total += e.bytes;
    std::printf("%6s %10s  %s%s\n", human_age(now - e.mtime_s).c_str(),
                human_bytes(e.bytes).c_str(), e.file.c_str(),
                e.problem.empty() ? "" : ("  [" + e.problem + ": rebuilt on next load]").c_str());
    if (o.keys && !e.key.empty()) {
      size_t start = 0;
      while (start < e.key.size()) {
        const size_t end = e.key.find('\n', start);
        std::printf("         %s\n", e.key.substr(start, end - start).c_str());
        if (end == std::string::npos) break;
        start = end + 1;
      }
    }
  }
  std::printf("%s: %zu entr%s, %s\n", dir.c_str(), entries.size(),
              entries.size() == 1 ? "y" : "ies", human_bytes(total).c_str());
  std::fflush(stdout);
  return ok_status();
}

Status run_clear(const CacheOptions& o) {
  FLICK_ASSIGN_OR_RETURN(std::string dir, cache_dir(o));
  FLICK_ASSIGN_OR_RETURN(int64_t removed, PlanCache(dir).clear());
  std::printf("%s: removed %lld entr%s\n", dir.c_str(), static_cast<long long>(removed),
              removed == 1 ? "y" : "ies");
  std::fflush(stdout);
  return ok_status();
}

}  // namespace

void register_cache(CLI::App& app, CliContext& ctx) {
  auto opt = std::make_shared<CacheOptions>();
  CLI::App* cmd = app.add_subcommand(
      "cache", "List or clear the plan cache (weights prepared at load, kept for the next start)");
  cmd->require_subcommand(0, 1);
  CLI::App* list = cmd->add_subcommand("list", "list the entries (the default)");
  list->add_flag("--keys", opt->keys, "print each entry's key");
  CLI::App* clear = cmd->add_subcommand("clear", "remove every entry");
  // Before or after the subcommand: `flick cache --dir D clear` or `flick cache clear --dir D`.
  for (CLI::App* c : {cmd, list, clear}) {
    c->add_option("--dir", opt->dir, "cache directory (default: [daemon].plan_cache)");
    c->add_option("--config", opt->config, "daemon config file to read plan_cache from");
  }
  cmd->callback([opt, &ctx, cmd, clear] {
    ctx.finish(cmd->got_subcommand(clear) ? run_clear(*opt) : run_list(*opt));
  });
}

}  // namespace flick
