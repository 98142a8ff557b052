// Quantization quality of the Matrix-Game DiT (`flick bench --quality`, and
// the thresholds of tests/models/test_wan_quant.cpp): every DiT call of the
// golden runs in tests/data/mg2 (pipeline_<mode>.safetensors, the tiny
// checkpoints of tests/data/mg2/weights) is run at BF16 and at another
// precision on the same inputs, and the flows are compared.
//
// The inputs of each call come from the goldens, not from the run's own
// sampler, so both precisions see identical inputs at every call; the
// self-attention, mouse and keyboard caches are each run's own (its keys
// and values), so cache effects are part of the comparison.
#pragma once

#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/weights/weight_store.h"

namespace flick::bench {

// A golden run: the mode, its tiny DiT checkpoint (relative to the golden
// directory) and its self-attention window in latents.
struct Mg2GoldenMode {
  const char* name;
  const char* checkpoint;
  int64_t local_attn_frames;
};
std::span<const Mg2GoldenMode> mg2_golden_modes();

// Head size of the tiny DiT (dim 64, 2 heads): no tensor shape carries it.
inline constexpr int64_t kMg2TinyDitHeadDim = 32;

// The flow (as F32) of every DiT call of `mode`'s golden run, in the
// pipeline's order: per block b, steps k = 0 .. K-1 (input: the initial
// noise, then the reference's re-noised x), then the t = 0 re-run on the
// reference's last x0 that writes clean keys for later blocks. `model` is the
// checkpoint's "model." view (float or pre-quantized); errors name the
// golden or weight tensor.
Expected<std::vector<std::vector<float>>> mg2_dit_flows(const std::string& golden_dir,
                                                        const Mg2GoldenMode& mode,
                                                        const WeightView& model,
                                                        Precision precision, Backend& backend);

// How close `got` is to `ref`, call by call (same count and sizes):
// cosine similarity and relative L2 distance, in fp64.
struct FlowAgreement {
  int calls = 0;
  double min_cosine = 1;  // worst call
  double cosine = 1;      // all calls' flows as one vector
  double max_rel_l2 = 0;  // worst call, |got - ref| / |ref|
};
FlowAgreement compare_flows(const std::vector<std::vector<float>>& ref,
                            const std::vector<std::vector<float>>& got);

struct Mg2QualityRow {
  std::string mode;
  Precision precision = Precision::BF16;
  FlowAgreement dit;  // flows vs the BF16 DiT
};

// Every mode x precision (each against BF16 on the CPU backend).
Expected<std::vector<Mg2QualityRow>> run_mg2_quality(const std::string& golden_dir,
                                                     std::span<const Precision> precisions);
void print_mg2_quality(const std::vector<Mg2QualityRow>& rows, std::FILE* out);

// `flick bench --quality`: every mode at F32, INT8 (where the CPU runs it)
// and FP8 against BF16, printed to stdout. golden_dir empty: the source
// tree's tests/data/mg2.
Status run_quality_report(const std::string& golden_dir);

}  // namespace flick::bench
