// Output-writer benchmarks: video encoding and frame files at Matrix-Game's
// frame size (640x352), in frames per second.
#pragma once

#include <vector>

#include "bench/bench.h"

namespace flick::bench {

std::vector<BenchResult> run_io_benches(const BenchOptions& options);

}  // namespace flick::bench
