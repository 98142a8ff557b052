// flick synth OUT: a synthetic-weight Matrix-Game 2.0 model directory in the
// Hugging Face layout (models/pipelines/mg2_synth.h), deterministic from the
// seed, without a download.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "jobs/cli.h"
#include "models/pipelines/matrix_game.h"
#include "models/pipelines/mg2_synth.h"

namespace flick {
namespace {

struct SynthCliOptions {
  std::string out;
  std::string size = "tiny";
  std::string mode = "all";
  uint64_t seed = 0;
  std::string fill = "random";
};

Status run_synth(const SynthCliOptions& opt) {
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
      "Write a Matrix-Game 2.0 weights directory with synthetic values in the exact layout of "
      "Skywork/Matrix-Game-2.0 (no download)");
  cmd->add_option("out", opt->out, "output directory (created if missing)")->required();
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
  cmd->callback([opt, &ctx] { ctx.finish(run_synth(*opt)); });
}

}  // namespace flick
