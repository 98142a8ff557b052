#include "jobs/config.h"

#include <fcntl.h>

#include "jobs/fs.h"

namespace flick {
namespace {

bool valid_pipeline_name(const std::string& s) {
  if (s.empty() || s.size() > 64 || !std::isalnum(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}

void read_roots(TableReader& daemon, const char* key, std::vector<Root>* out) {
  const auto dirs = daemon.strings(key, Need::kRequired, "absolute paths of existing directories");
  if (!dirs) return;
  if (dirs->empty()) {
    daemon.error(key, "expected at least one directory", "empty");
    return;
  }
  for (const std::string& d : *dirs) {
    Expected<Root> r = make_root(d, daemon.key_path(key));
    if (!r.ok()) {
      daemon.error(key, r.status().message(), "this directory", {}, r.status().code());
      continue;
    }
    out->push_back(std::move(*r));
  }
}

void read_daemon(TableReader& daemon, const std::string& spool_override, DaemonConfig* c) {
  if (const auto spool =
          daemon.string("spool", spool_override.empty() ? Need::kRequired : Need::kOptional,
                        "an absolute path")) {
    Expected<std::string> normal = normalize_absolute(*spool, daemon.key_path("spool"));
    if (!normal.ok()) {
      daemon.error("spool", normal.status().message(), "expected an absolute path");
    } else {
      c->spool = *normal;
    }
  }
  if (!spool_override.empty()) {
    Expected<std::string> normal = normalize_absolute(spool_override, "--spool");
    if (!normal.ok()) {
      daemon.diagnostics().error_in_file("--spool", normal.status().message(), StatusCode::kUsage);
    } else {
      c->spool = *normal;
    }
  }
  read_roots(daemon, "input_roots", &c->input_roots);
  read_roots(daemon, "output_roots", &c->output_roots);
  if (const auto pc = daemon.string("plan_cache", Need::kOptional, "an absolute path")) {
    Expected<std::string> normal = normalize_absolute(*pc, daemon.key_path("plan_cache"));
    if (!normal.ok()) {
      daemon.error("plan_cache", normal.status().message(), "expected an absolute path");
    } else {
      c->plan_cache = *normal;
    }
  }
  if (auto v = daemon.integer("max_attempts", Need::kOptional, 1, 100)) c->max_attempts = int(*v);
  if (auto v = daemon.integer("retry_delay", Need::kOptional, 0, 86400)) c->retry_delay_s = int(*v);
  if (auto v = daemon.integer("rescan_interval", Need::kOptional, 1, 3600)) {
    c->rescan_interval_s = int(*v);
  }
  if (auto v = daemon.integer("max_job_bytes", Need::kOptional, 1024, int64_t{64} << 20)) {
    c->max_job_bytes = *v;
  }
  daemon.check_unknown_keys();
}

void read_pipeline(TableReader& entry, DaemonConfig* c) {
  const auto name = entry.string("name", Need::kRequired, "a pipeline name jobs refer to");
  const auto kind = entry.string("kind", Need::kRequired, "one of " + pipeline_kind_names());
  if (name && !valid_pipeline_name(*name)) {
    entry.error("name",
                "expected 1-64 letters, digits, '-', '_' or '.', starting with a letter or digit",
                "not a valid pipeline name");
  } else if (name && c->find_pipeline(*name) != nullptr) {
    entry.error("name", "pipeline '" + *name + "' is defined twice", "second definition");
  }
  const PipelineKind* k = kind ? find_pipeline_kind(*kind) : nullptr;
  if (kind && k == nullptr) {
    entry.error("kind",
                "unknown or unavailable pipeline kind '" + *kind +
                    "' (this build has: " + pipeline_kind_names() + ")",
                "not available in this build");
  }
  if (k == nullptr) {
    // Without a kind its other keys cannot be checked; do not report them as unknown.
    for (const auto& [key, v] : entry.toml().as_table()) entry.value(key);
    return;
  }
  std::unique_ptr<PipelineInstance> instance = k->create(entry);
  entry.check_unknown_keys();
  if (!name || instance == nullptr) return;
  ConfiguredPipeline p;
  p.name = *name;
  p.kind = std::string(k->name);
  p.table = entry.toml();
  p.instance = std::move(instance);
  c->pipelines.push_back(std::move(p));
}

}  // namespace

const ConfiguredPipeline* DaemonConfig::find_pipeline(const std::string& name) const {
  for (const ConfiguredPipeline& p : pipelines) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::string DaemonConfig::pipeline_names() const {
  std::string out;
  for (const ConfiguredPipeline& p : pipelines) {
    if (!out.empty()) out += ", ";
    out += p.name;
  }
  return out.empty() ? "none" : out;
}

std::optional<DaemonConfig> parse_config(const std::string& text, const std::string& display,
                                         const std::string& spool_override, Diagnostics& diag) {
  std::optional<toml::value> doc = parse_toml(text, diag);
  if (!doc) return std::nullopt;
  DaemonConfig c;
  c.file = display;
  TableReader root(diag, *doc, "");
  if (std::optional<TableReader> daemon = root.table("daemon", Need::kRequired)) {
    read_daemon(*daemon, spool_override, &c);
  }
  std::vector<TableReader> entries = root.tables("pipeline", Need::kRequired);
  for (TableReader& e : entries) read_pipeline(e, &c);
  if (root.has("pipeline") && entries.empty() && diag.ok()) {
    root.error("pipeline", "expected at least one [[pipeline]]", "empty");
  }
  root.check_unknown_keys();
  if (!diag.ok()) return std::nullopt;
  return c;
}

Expected<DaemonConfig> load_config(const std::string& path, const std::string& spool_override) {
  fs::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    const int err = errno;
    Status s = errno_status("reading config", path, err);
    if (err == ENOENT) s = not_found("config file " + path + " does not exist (use --config FILE)");
    return s;
  }
  bool over = false;
  FLICK_ASSIGN_OR_RETURN(std::string text, fs::read_limited(fd.get(), 4 << 20, &over, path));
  if (over) return invalid_input("config file " + path + " is larger than 4 MiB");
  Diagnostics diag(path);
  std::optional<DaemonConfig> c = parse_config(text, path, spool_override, diag);
  if (!c) return diag.status();
  return std::move(*c);
}

namespace {
thread_local const std::string* g_loading_plan_cache = nullptr;
}  // namespace

const std::string& loading_plan_cache() {
  static const std::string kNone;
  return g_loading_plan_cache != nullptr ? *g_loading_plan_cache : kNone;
}

Status load_pipelines(DaemonConfig& config, const DaemonConfig* previous) {
  struct Scope {
    explicit Scope(const std::string* dir) { g_loading_plan_cache = dir; }
    ~Scope() { g_loading_plan_cache = nullptr; }
  } scope(&config.plan_cache);
  for (ConfiguredPipeline& p : config.pipelines) {
    if (p.loaded) continue;
    if (previous != nullptr) {
      const ConfiguredPipeline* old = previous->find_pipeline(p.name);
      if (old != nullptr && old->loaded && old->table == p.table) {
        p.instance = old->instance;
        p.loaded = true;
        continue;
      }
    }
    FLICK_TRY(p.instance->load().with_context("loading pipeline '" + p.name + "'"));
    p.loaded = true;
  }
  return ok_status();
}

}  // namespace flick
