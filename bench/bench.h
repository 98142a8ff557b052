// Benchmarks run by `flick bench`: each measures a rate and prints it beside
// this machine's peak, measured at the start of the run.
#pragma once

#include <string>
#include <vector>

namespace flick::bench {

// Peak rates measured with dependent-free FMA / vdpbf16ps / vpdpbusd loops on
// all threads (GFLOPS or GOPS); bench/peak.h. 0 where the CPU lacks the ISA.
struct Peaks {
  double f32_gflops = 0;
  double bf16_gflops = 0;
  double int8_gops = 0;
  // AMX tile units (Intel Sapphire Rapids and later): tdpbf16ps / tdpbssd.
  // oneDNN uses them for bf16 and int8 GEMMs and convolutions when present.
  double amx_bf16_gflops = 0;
  double amx_int8_gops = 0;
};

struct BenchOptions {
  bool quick = false;  // fewer repetitions, smaller shapes where noted
  std::string filter;  // run cases whose name contains this
  // Time with the calling thread's CPU clock instead of the wall clock:
  // robust on a machine shared with other work, meaningful with one thread
  // (OMP_NUM_THREADS=1), where the calling thread does all the work.
  bool cpu_clock = false;
  // Re-measure the matching peak between a case's repetitions and compare the
  // case with the best of those (time_best in bench/peak.h) instead of the
  // peak taken at the start of the run.
  bool window_peaks = false;
  // `--quality`: instead of speed, the quantization quality report of
  // mg2_quality.h on the Matrix-Game golden fixtures in quality_data (empty:
  // the source tree's tests/data/mg2).
  bool quality = false;
  std::string quality_data;
  // A `flick synth --size full` directory for the mg2 benchmarks (empty: one
  // is written to $TMPDIR and removed afterwards).
  std::string mg2_weights;
  // An EfficientSAM3 checkpoint in the released layout for the sam3
  // benchmarks (empty: a full-size synthetic one is written to $TMPDIR).
  std::string sam3_weights;
  // A folder holding a FramePack transformer/ (`flick synth --model framepack
  // --size full --dit-layers 2,4`) for the framepack benchmarks (empty: one is
  // written to $TMPDIR).
  std::string framepack_weights;
  // `--plan-cache DIR`: the framepack benchmarks open the DiT through this
  // plan cache (runtime/plan_cache.h), so their "load" row times a cold load
  // (an empty directory) or a warm one.
  std::string plan_cache;
  // `--load-only`: the framepack benchmarks time the DiT's load and stop (a
  // call of the released 20 + 40 blocks takes ~40 minutes on 2 cores).
  bool load_only = false;
};

// The clock benchmarks time with, in seconds: steady wall clock, or the
// calling thread's CPU time under options.cpu_clock.
double bench_now(const BenchOptions& options);

struct BenchResult {
  std::string name;     // "matmul int8 2640x1536x8960"
  double seconds = 0;   // best of the repetitions
  double rate = 0;      // GFLOPS / GOPS
  std::string unit;     // "GFLOPS", "GOPS", "frames/s", ...
  double peak_pct = 0;  // rate / the matching peak, 0 when not applicable
  std::string detail;   // e.g. the oneDNN implementation that ran
};

// A pipeline-level row: `seconds` per item, the rate in items per minute.
inline BenchResult per_minute_row(const std::string& name, double seconds,
                                  const std::string& detail) {
  BenchResult r;
  r.name = name;
  r.seconds = seconds;
  r.rate = seconds > 0 ? 60.0 / seconds : 0;
  r.unit = "per min";
  r.detail = detail;
  return r;
}

// A row for a case that could not run, saying why.
inline BenchResult failed_row(const std::string& name, const std::string& why) {
  BenchResult r;
  r.name = name;
  r.detail = "failed: " + why;
  return r;
}

}  // namespace flick::bench
