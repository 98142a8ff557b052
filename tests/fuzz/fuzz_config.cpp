// libFuzzer: the daemon configuration (/etc/flick/flick.toml) through
// parse_config, as `flick serve`, `drain`, `validate` and SIGHUP reload read
// it: TOML syntax, [daemon] keys and roots, every [[pipeline]] entry and its
// kind's own keys (no pipeline is loaded).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "jobs/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (size_t{4} << 20)) return 0;  // load_config's limit
  const std::string text(reinterpret_cast<const char*>(data), size);
  flick::Diagnostics diag("fuzz-flick.toml");
  std::optional<flick::DaemonConfig> c = flick::parse_config(text, "fuzz-flick.toml", "", diag);
  if (!diag.ok()) {
    if (c || diag.status().message().empty()) std::abort();
    return 0;
  }
  if (!c || c->pipelines.empty() || c->input_roots.empty() || c->output_roots.empty() ||
      c->spool.empty()) {
    std::abort();
  }
  for (const auto& p : c->pipelines) {
    if (!p.instance || c->find_pipeline(p.name) != &p) std::abort();
  }
  (void)c->pipeline_names();
  return 0;
}
