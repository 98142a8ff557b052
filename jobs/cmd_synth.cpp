// flick synth OUT: a synthetic-weight Matrix-Game 2.0 model directory in the
// Hugging Face layout (models/pipelines/mg2_synth.h), or with --model sam3 an
// EfficientSAM3 checkpoint file in the released .pth layout
// (models/sam3/sam3_synth.h), deterministic from the seed, without a
// download.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "jobs/cli.h"
#include "models/pipelines/framepack_synth.h"
#include "models/pipelines/matrix_game.h"
#include "models/pipelines/mg2_synth.h"
#include "models/sam3/sam3_synth.h"

namespace flick {
namespace {

struct SynthCliOptions {
  std::string out;
  std::string model = "mg2";
  std::string size = "tiny";
  std::string mode = "all";
  uint64_t seed = 0;
  std::string fill = "random";
  std::string dit_layers, parts, tokenizers;  // --model framepack
};

// --model framepack: the download layout of the framepack-i2v kind.
Status run_framepack_synth(const SynthCliOptions& opt) {
  if (opt.mode != "all") return usage_error("--mode is for --model mg2 only");
  FramePackSynthOptions o;
  o.size = opt.size == "full" ? FramePackSynthSize::kFull : FramePackSynthSize::kTiny;
  o.seed = opt.seed;
  o.fill = opt.fill == "zeros" ? SynthFill::kZeros : SynthFill::kRandom;
  o.tokenizers = opt.tokenizers;
  if (!opt.dit_layers.empty() && std::sscanf(opt.dit_layers.c_str(), "%" SCNd64 ",%" SCNd64,
                                             &o.dit_layers, &o.dit_single_layers) != 2)
    return usage_error("--dit-layers: expected DOUBLE,SINGLE (e.g. 2,4), got '" + opt.dit_layers +
                       "'");
  for (size_t b = 0; b < opt.parts.size();) {
    const size_t e = std::min(opt.parts.find(',', b), opt.parts.size());
    if (e > b) o.parts.push_back(opt.parts.substr(b, e - b));
    b = e + 1;
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  uint64_t total = 0;
  FLICK_TRY(write_framepack_synth(opt.out, o, [&](const std::string& path, size_t n, uint64_t b) {
    std::printf("%s: %zu tensors, %.1f MB\n", path.c_str(), n, static_cast<double>(b) / 1e6);
    std::fflush(stdout);
    total += b;
  }));
  std::printf("wrote %s synthetic FramePack weights (seed %llu%s): %.1f MB in %.1f s\n",
              opt.size.c_str(), static_cast<unsigned long long>(opt.seed),
              o.fill == SynthFill::kZeros ? ", zero-filled" : "", static_cast<double>(total) / 1e6,
              std::chrono::duration<double>(Clock::now() - start).count());
  return ok_status();
}

Status run_sam3_synth(const SynthCliOptions& opt) {
  if (opt.mode != "all") return usage_error("--mode is for --model mg2 only");
  if (opt.fill != "random") return usage_error("--fill is for --model mg2 only");
  if (opt.out.size() < 4 || opt.out.compare(opt.out.size() - 4, 4, ".pth") != 0) {
    return usage_error(
        "out: --model sam3 writes one checkpoint file: give a name ending in "
        ".pth, got '" +
        opt.out + "'");
  }
  // The file's directory is created if missing, as --model mg2 creates its
  // output directory.
  const std::filesystem::path parent = std::filesystem::path(opt.out).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return io_error("cannot create " + parent.string() + ": " + ec.message());
  Sam3SynthOptions o;
  o.size = opt.size == "full" ? Sam3SynthSize::kFull : Sam3SynthSize::kTiny;
  o.seed = opt.seed;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  FLICK_TRY(write_sam3_synth(opt.out, o));
  std::printf("wrote %s synthetic EfficientSAM3 weights (seed %llu) to %s in %.1f s\n",
              opt.size.c_str(), static_cast<unsigned long long>(opt.seed), opt.out.c_str(),
              std::chrono::duration<double>(Clock::now() - start).count());
  return ok_status();
}

Status run_synth(const SynthCliOptions& opt) {
  if (opt.model == "sam3") return run_sam3_synth(opt);
  if (opt.model == "framepack") return run_framepack_synth(opt);
  Mg2SynthOptions o;
  o.size = opt.size == "full" ? Mg2SynthSize::kFull : Mg2SynthSize::kTiny;
  o.seed = opt.seed;
  o.fill = opt.fill == "zeros" ? SynthFill::kZeros : SynthFill::kRandom;
  if (opt.mode != "all") {
    const Mg2ModeSpec* m = find_mg2_mode(opt.mode);
    if (m == nullptr)
      return usage_error("--mode: unknown mode '" + opt.mode + "' (" + mg2_mode_names() +
                         " or all)");
    o.modes = {m->mode};
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto last = start;
  uint64_t total = 0;
  Status s =
      write_mg2_synth(opt.out, o, [&](const std::string& path, size_t tensors, uint64_t bytes) {
        const auto now = Clock::now();
        std::printf("%s: %zu tensors, %.1f MB (%.1f s)\n", path.c_str(), tensors,
                    static_cast<double>(bytes) / 1e6,
                    std::chrono::duration<double>(now - last).count());
        std::fflush(stdout);
        last = now;
        total += bytes;
      });
  if (!s.ok()) return s;
  std::printf("wrote %s synthetic Matrix-Game 2.0 weights (seed %llu%s): %.1f MB in %.1f s\n",
              opt.size.c_str(), static_cast<unsigned long long>(opt.seed),
              o.fill == SynthFill::kZeros ? ", zero-filled" : "", static_cast<double>(total) / 1e6,
              std::chrono::duration<double>(Clock::now() - start).count());
  return ok_status();
}

}  // namespace

void register_synth(CLI::App& app, CliContext& ctx) {
  auto opt = std::make_shared<SynthCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "synth",
      "Write a Matrix-Game 2.0 weights directory (or, with --model sam3, an EfficientSAM3 "
      "checkpoint; with --model framepack, a FramePack weights folder) with synthetic values in "
      "the exact layout of the released weights (no download)");
  cmd->add_option("out", opt->out,
                  "output directory (created if missing); with --model sam3 the .pth file")
      ->required();
  cmd->add_option(
         "--model", opt->model,
         "mg2: Matrix-Game 2.0 (Skywork/Matrix-Game-2.0 layout); sam3: EfficientSAM3 "
         "(efficient_sam3_repvit-m0_9_mobileclip_s1.pth layout); framepack: the framepack-i2v "
         "weights folder (models/pipelines/framepack_synth.h)")
      ->check(CLI::IsMember({"mg2", "sam3", "framepack"}))
      ->capture_default_str();
  cmd->add_option("--size", opt->size,
                  "tiny: small widths with the real head sizes (about 40 MB, for demos); full: "
                  "the released shapes (about 15 GB)")
      ->check(CLI::IsMember({"tiny", "full"}))
      ->capture_default_str();
  cmd->add_option("--mode", opt->mode,
                  "the DiT checkpoint(s) to write: universal, gta_drive, "
                  "templerun or all")
      ->capture_default_str();
  cmd->add_option("--seed", opt->seed, "seed of the synthetic values")->capture_default_str();
  cmd->add_option("--fill", opt->fill,
                  "random: synthetic values; zeros: all-zero sparse files, written instantly "
                  "(layout and loader tests)")
      ->check(CLI::IsMember({"random", "zeros"}))
      ->capture_default_str();
  cmd->add_option("--dit-layers", opt->dit_layers,
                  "framepack: DOUBLE,SINGLE transformer blocks (a full-width transformer with "
                  "fewer blocks, for benchmarks that must fit in memory)");
  cmd->add_option("--parts", opt->parts,
                  "framepack: comma-separated parts (" + framepack_synth_part_names() +
                      "); default all but kijai_fp8");
  cmd->add_option("--tokenizers", opt->tokenizers,
                  "framepack: a folder with llama_tokenizer/ and clip_tokenizer/ (the "
                  "repository's tests/data: fixture vocabularies) copied to tokenizer/ and "
                  "tokenizer_2/");
  cmd->callback([opt, &ctx] { ctx.finish(run_synth(*opt)); });
}

}  // namespace flick
