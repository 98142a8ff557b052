// Benchmarks run by `flick bench`: each measures a rate and prints it beside
// this machine's peak, measured at the start of the run.
#pragma once

#include <string>
#include <vector>

namespace flick::bench {

// Peak rates measured with dependent-free FMA / vdpbf16ps / vpdpbusd loops on
// all threads (GFLOPS or GOPS).
struct Peaks {
  double f32_gflops = 0;
  double bf16_gflops = 0;
  double int8_gops = 0;
};

struct BenchOptions {
  bool quick = false;  // fewer repetitions, smaller shapes where noted
  std::string filter;  // run cases whose name contains this
};

struct BenchResult {
  std::string name;     // "matmul int8 2640x1536x8960"
  double seconds = 0;   // best of the repetitions
  double rate = 0;      // GFLOPS / GOPS
  std::string unit;     // "GFLOPS", "GOPS", "frames/s", ...
  double peak_pct = 0;  // rate / the matching peak, 0 when not applicable
};

}  // namespace flick::bench
