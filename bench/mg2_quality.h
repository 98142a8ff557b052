// Quantization quality of the Matrix-Game DiT (`flick bench --quality`, and
// the thresholds of tests/models/test_wan_quant.cpp): every DiT call of the
// golden runs in tests/data/mg2 (pipeline_<mode>.safetensors, the tiny
// checkpoints of tests/data/mg2/weights) is run at BF16 and at another
// precision on the same inputs, and the flows are compared; then the whole
// pipeline (Mg2Pipeline: CLIP, VAE, DiT, sampler, decoder) runs the golden
// job at both precisions and the decoded videos are compared by PSNR.
//
// The inputs of each DiT call come from the goldens, not from the run's own
// sampler, so both precisions see identical inputs at every call; the
// self-attention, mouse and keyboard caches are each run's own (its keys
// and values), so cache effects are part of the comparison. The pipeline
// runs are end to end: there every error feeds the later steps and blocks.
#pragma once

#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "models/pipelines/matrix_game.h"
#include "runtime/backend.h"
#include "runtime/status.h"
#include "runtime/weights/weight_store.h"

namespace flick::bench {

// Head size of the tiny DiT (dim 64, 2 heads): no tensor shape carries it.
inline constexpr int64_t kMg2TinyDitHeadDim = 32;

// The tiny checkpoint of `mode` in the golden directory.
std::string mg2_golden_checkpoint(const std::string& golden_dir, const Mg2ModeSpec& mode);

// The flow (as F32) of every DiT call of `mode`'s golden run, in the
// pipeline's order: per block b, steps k = 0 .. K-1 (input: the initial
// noise, then the reference's re-noised x), then the t = 0 re-run on the
// reference's last x0 that writes clean keys for later blocks. `model` is the
// checkpoint's "model." view (float or pre-quantized); errors name the
// golden or weight tensor.
Expected<std::vector<std::vector<float>>> mg2_dit_flows(const std::string& golden_dir,
                                                        const Mg2ModeSpec& mode,
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

// The u8 video [T, H, W, 3] of the golden job of `mode` (its image, tracks,
// seed 42) from Mg2Pipeline on the weights in `weights_dir` (the golden
// directory's weights/, or a `flick convert` copy of it). vae_precision:
// Mg2Options::vae_precision; tap: Mg2Pipeline::run's.
Expected<std::vector<uint8_t>> mg2_pipeline_video(const std::string& golden_dir,
                                                  const std::string& weights_dir,
                                                  const Mg2ModeSpec& mode, Precision precision,
                                                  Backend& backend,
                                                  Precision vae_precision = Precision::BF16,
                                                  const Mg2Pipeline::Tap& tap = {});

// 10 log10(255^2 / MSE) over two u8 buffers of one size; +inf when equal.
double psnr_u8(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b);

struct Mg2QualityRow {
  std::string mode;
  Precision precision = Precision::BF16;
  FlowAgreement dit;         // flows vs the BF16 DiT
  double video_psnr_db = 0;  // decoded video vs the BF16 pipeline's
};

// Every mode x precision (each against BF16 on the CPU backend).
Expected<std::vector<Mg2QualityRow>> run_mg2_quality(const std::string& golden_dir,
                                                     std::span<const Precision> precisions);
void print_mg2_quality(const std::vector<Mg2QualityRow>& rows, std::FILE* out);

// `flick bench --quality`: every mode at F32, INT8 (where the CPU runs it)
// and FP8 against BF16, DiT flows and videos, printed to stdout. golden_dir empty: the source
// tree's tests/data/mg2.
Status run_quality_report(const std::string& golden_dir);

}  // namespace flick::bench
