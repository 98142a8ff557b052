// The daemon configuration (/etc/flick/flick.toml): where the spool is, which
// directories jobs may read and write, retry policy, and the pipeline
// instances jobs name. Read as strictly as job files.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "jobs/paths.h"
#include "jobs/pipeline_registry.h"
#include "jobs/toml_reader.h"

namespace flick {

inline constexpr const char* kDefaultConfigPath = "/etc/flick/flick.toml";

struct ConfiguredPipeline {
  std::string name;
  std::string kind;
  toml::value table;  // the [[pipeline]] entry, to reuse a loaded instance on reload
  std::shared_ptr<PipelineInstance> instance;
  bool loaded = false;
};

struct DaemonConfig {
  std::string file;  // where it was read from
  std::string spool;
  std::vector<Root> input_roots;
  std::vector<Root> output_roots;
  // Where pipelines keep weights prepared at load (runtime/plan_cache.h;
  // `flick cache` lists and clears it).
  std::string plan_cache = "/var/cache/flick";
  int max_attempts = 3;
  int retry_delay_s = 30;      // a failed attempt is retried no sooner than this
  int rescan_interval_s = 10;  // full rescan of incoming/ (inotify is only a hint)
  int64_t max_job_bytes = int64_t{1} << 20;
  std::vector<ConfiguredPipeline> pipelines;

  const ConfiguredPipeline* find_pipeline(const std::string& name) const;
  std::string pipeline_names() const;
};

// Parses and validates config text (`display` names it in messages). Roots
// must exist. `spool_override` (--spool) replaces [daemon].spool, which then
// need not be set.
std::optional<DaemonConfig> parse_config(const std::string& text, const std::string& display,
                                         const std::string& spool_override, Diagnostics& diag);

// Reads and parses a config file; the Status carries every formatted error.
Expected<DaemonConfig> load_config(const std::string& path, const std::string& spool_override);

// Loads every pipeline instance not yet loaded; instances whose [[pipeline]]
// entry is unchanged in `previous` are reused (SIGHUP reload).
Status load_pipelines(DaemonConfig& config, const DaemonConfig* previous);

// The plan_cache of the config whose pipelines load_pipelines() is loading on
// this thread (empty outside it): the kinds pass it to their pipelines in
// PipelineInstance::load(), which takes no config.
const std::string& loading_plan_cache();

}  // namespace flick
