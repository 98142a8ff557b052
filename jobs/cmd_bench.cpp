// `flick bench`: measures this machine's peak rates, then runs the benchmark
// groups and prints one table row per case with its share of the peak.
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/bench_attention.h"
#include "bench/bench_framepack.h"
#include "bench/bench_io.h"
#include "bench/bench_matmul.h"
#include "bench/bench_mg2.h"
#include "bench/bench_sam3.h"
#include "bench/bench_vae.h"
#include "bench/mg2_quality.h"
#include "bench/peak.h"
#include "jobs/cli.h"
#include "runtime/threads.h"

namespace flick {
namespace {

using bench::BenchOptions;
using bench::BenchResult;
using bench::Peaks;

using BenchGroup = std::function<std::vector<BenchResult>(const Peaks&, const BenchOptions&)>;

// Adding a group is one line here.
const std::vector<std::pair<const char*, BenchGroup>>& groups() {
  static const std::vector<std::pair<const char*, BenchGroup>> all = {
      {"matmul", bench::run_matmul_benches},
      {"conv", bench::run_conv_benches},
      {"attention", bench::run_attention_benches},
      {"vae", bench::run_vae_benches},
      {"io", [](const Peaks&, const BenchOptions& o) { return bench::run_io_benches(o); }},
      {"mg2", bench::run_mg2_benches},
      {"sam3", bench::run_sam3_benches},
      {"framepack", bench::run_framepack_benches},
  };
  return all;
}

// Timings on a machine that is busy with other work are low and noisy: the
// 1-minute load average before and after says how busy it was.
double load_average() {
  double load = -1;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1;
    std::fclose(f);
  }
  return load;
}

void print_peaks(const Peaks& p) {
  std::printf("peaks on %d threads (independent accumulator chains, no memory traffic):\n",
              num_threads());
  std::printf("  f32 FMA          %8.0f GFLOPS\n", p.f32_gflops);
  std::printf("  bf16 vdpbf16ps   %8.0f GFLOPS\n", p.bf16_gflops);
  std::printf("  int8 vpdpbusd    %8.0f GOPS\n", p.int8_gops);
  if (p.amx_bf16_gflops > 0) {
    std::printf("  bf16 AMX         %8.0f GFLOPS\n", p.amx_bf16_gflops);
    std::printf("  int8 AMX         %8.0f GOPS\n", p.amx_int8_gops);
  }
}

void print_row(const BenchResult& r) {
  char pct[16] = "";
  if (r.peak_pct > 0) std::snprintf(pct, sizeof pct, "%5.1f%%", r.peak_pct);
  std::printf("%-46s %10.3f %9.0f %-7s %7s  %s\n", r.name.c_str(), r.seconds * 1e3, r.rate,
              r.unit.c_str(), pct, r.detail.c_str());
  std::fflush(stdout);
}

Status run_bench(const BenchOptions& options) {
  if (options.quality) return bench::run_quality_report(options.quality_data);
  std::printf("load average before: %.2f (%d threads)\n", load_average(), num_threads());
  if (options.cpu_clock) {
    std::printf("timing with the thread CPU clock (peaks, linear, conv)%s\n",
                num_threads() > 1 ? "; with more than one thread the OpenMP workers' time is "
                                    "not counted: set OMP_NUM_THREADS=1"
                                  : "");
  }
  const Peaks peaks = bench::measure_peaks(options);
  print_peaks(peaks);
  std::printf("\n%-46s %10s %9s %-7s %7s  %s\n", "case", "ms", "rate", "unit", "peak", "detail");
  for (const auto& [name, run] : groups()) {
    for (const BenchResult& r : run(peaks, options)) print_row(r);
  }
  std::printf("load average after: %.2f\n", load_average());
  return ok_status();
}

}  // namespace

void register_bench(CLI::App& app, CliContext& ctx) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Measure this machine's peak rates and the speed of flick's kernels");
  cmd->add_flag("--quick", options->quick, "Fewer repetitions, skip the largest shapes");
  cmd->add_option("--filter", options->filter, "Run only cases whose name contains this");
  cmd->add_option("--mg2-weights", options->mg2_weights,
                  "A `flick synth --size full` directory for the mg2 benchmarks (which run only "
                  "when --filter names them: mg2, mg2.int8, ...)");
  cmd->add_option("--sam3-weights", options->sam3_weights,
                  "An EfficientSAM3 checkpoint (.pth, released layout) for the sam3 benchmarks "
                  "(which run only when --filter names them: sam3, sam3.bf16, ...)");
  cmd->add_option("--framepack-weights", options->framepack_weights,
                  "A folder with a FramePack transformer/ (flick synth --model framepack --size "
                  "full --dit-layers 2,4) for the framepack benchmarks (which run only when "
                  "--filter names them: framepack, framepack.int8)");
  cmd->add_option("--plan-cache", options->plan_cache,
                  "Open the framepack benchmarks' DiT through this plan cache directory: their "
                  "load row is then a cold load (empty directory) or a warm one");
  cmd->add_flag("--load-only", options->load_only,
                "framepack benchmarks: time the DiT's load only (with --plan-cache: a cold or "
                "warm load), without a call");
  cmd->add_flag("--cpu-clock", options->cpu_clock,
                "Time peaks, linear and conv with the thread's CPU clock: steadier on a busy "
                "machine; use with OMP_NUM_THREADS=1");
  cmd->add_flag("--window-peaks", options->window_peaks,
                "Re-measure the matching peak between a case's repetitions and report the case "
                "against the best of those (for hosts whose throughput changes during a run)");
  cmd->add_flag("--quality", options->quality,
                "Instead of speed: cosine of the Matrix-Game DiT's outputs at f32 / int8 / fp8 "
                "against bf16 on the golden fixtures (tests/data/mg2)");
  cmd->add_option("--quality-data", options->quality_data,
                  "The golden fixture directory for --quality (default: the source tree's)");
  cmd->callback([&ctx, options] { ctx.finish(run_bench(*options)); });
}

}  // namespace flick
