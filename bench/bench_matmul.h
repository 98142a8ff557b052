// Linear-layer and convolution benchmarks for `flick bench` (bench/bench.h).
#pragma once

#include <vector>

#include "bench/bench.h"

namespace flick::bench {

// linear at the Matrix-Game / Wan DiT shapes (M x K x N = 2640 tokens x
// 1536 -> 1536 for attention projections, 1536 -> 8960 and 8960 -> 1536 for
// the FFN) in F32 / BF16 / INT8 / FP8 (x and y BF16, F32 for F32), plus the
// per-token activation quantization INT8 runs before its GEMM. Rate =
// 2*M*K*N per call; peak_pct against the peak of the unit the layer ran on
// (AMX when its implementation name says so: flick's AMX GEMM "flick:amx_*"
// or oneDNN's "brg:*amx*"; else FMA / vdpbf16ps / vpdpbusd, which flick's
// "flick:vnni_int8" and "flick:avx512_bf16" GEMMs and oneDNN's others run on).
std::vector<BenchResult> run_matmul_benches(const Peaks& peaks, const BenchOptions& options);

// 3x3x3 convolutions of the Wan VAE decoder (3 input frames -> 1 output
// frame, spatial padding 1) at 384 ch 44x80, 192 ch 176x320, 96 ch 352x640:
// on plain NCDHW tensors (including the reorders into and out of oneDNN's
// blocked layout) and on channels-last views (no reorders).
std::vector<BenchResult> run_conv_benches(const Peaks& peaks, const BenchOptions& options);

}  // namespace flick::bench
