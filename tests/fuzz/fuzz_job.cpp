// libFuzzer: a job file through the same validation `flick validate` and the
// daemon apply (parse_job: TOML syntax, every key, paths against the roots,
// the kind's own checks: the encode kind's frames and archive, the
// matrix-game-2 kind's start image, actions and CSV file, the sam3-segment
// kind's prompts, frames and video, the framepack-i2v kind's image and
// prompt), against a config declaring an encode pipeline, a matrix-game-2
// pipeline per mode, a sam3-segment and a framepack-i2v pipeline. No
// weights are loaded: validation never needs them.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "jobs/job.h"
#include "runtime/log.h"
#include "tests/fuzz/fuzz_roots.h"

namespace {

const flick::DaemonConfig* g_config = nullptr;

const char* const kConfig = R"(
[daemon]
spool = "/tmp/flick-fuzz-roots/spool"
input_roots = ["/tmp/flick-fuzz-roots/in"]
output_roots = ["/tmp/flick-fuzz-roots/out"]

[[pipeline]]
name = "encode"
kind = "encode"

[[pipeline]]
name = "mg"
kind = "matrix-game-2"
mode = "universal"
weights = "/nonexistent/matrix-game-2"
width = 160
height = 96

[[pipeline]]
name = "drive"
kind = "matrix-game-2"
mode = "gta_drive"
weights = "/nonexistent/matrix-game-2"
width = 64
height = 32

[[pipeline]]
name = "run"
kind = "matrix-game-2"
mode = "templerun"
weights = "/nonexistent/matrix-game-2"
precision = "int8"
width = 32
height = 16

[[pipeline]]
name = "sam3"
kind = "sam3-segment"
weights = "/nonexistent/efficient_sam3_repvit-m0_9_mobileclip_s1.pth"

[[pipeline]]
name = "fp"
kind = "framepack-i2v"
weights = "/nonexistent/framepack"
)";

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  flick::log_set_level(flick::LogLevel::kError);  // orientation warnings would flood the output
  flick::fuzz::make_roots();
  flick::Diagnostics diag("fuzz-flick.toml");
  static std::optional<flick::DaemonConfig> config =
      flick::parse_config(kConfig, "fuzz-flick.toml", "", diag);
  if (!config) {
    std::fprintf(stderr, "%s\n", diag.status().message().c_str());
    std::abort();
  }
  g_config = &*config;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The daemon refuses larger files before parsing (max_job_bytes).
  if (size > size_t(g_config->max_job_bytes)) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  flick::Diagnostics diag("fuzz-job.toml");
  std::optional<flick::Job> job =
      flick::parse_job({"fuzz-job.toml", "fuzz-job", text}, *g_config, diag);
  if (!diag.ok()) {
    // Formatting every error is part of what the daemon does with a bad job.
    if (job || diag.status().message().empty()) std::abort();
    return 0;
  }
  if (!job || !job->prepared || !flick::valid_job_id(job->id)) std::abort();
  (void)job->prepared->summary();
  (void)job->error_at("output.dir", "exists", "exists");
  return 0;
}
