// The `encode` kind: frames (a glob of PNG/JPEG files, sorted by name, or a
// flick .zst frame archive) to the job's outputs. No weights, no settings.
//
//   [input]
//   frames = "/srv/render/in/shot-12/*.png"   # or ".../shot-12.zst"
//   fps    = 25                               # default 25; an archive's own rate if omitted
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>

#include "jobs/config.h"
#include "jobs/pipeline_registry.h"
#include "models/pipelines/encode.h"

namespace flick {
namespace {

constexpr double kDefaultFps = 25;

class EncodeJob : public PreparedJob {
 public:
  EncodeJob(const EncodePipeline& pipeline, EncodeInput input, std::string source)
      : pipeline_(pipeline), input_(std::move(input)), source_(std::move(source)) {}

  std::string summary() const override {
    if (!input_.archive.empty()) return "encode frame archive " + input_.archive;
    return "encode " + std::to_string(input_.frame_files.size()) + " frames from " + source_;
  }
  Status run(FrameSink& sink, const RunContext& ctx) override {
    return pipeline_.run(input_, sink, ctx);
  }

 private:
  const EncodePipeline& pipeline_;
  EncodeInput input_;
  std::string source_;
};

class EncodeInstance : public PipelineInstance {
 public:
  Status load() override { return ok_status(); }

  std::unique_ptr<PreparedJob> prepare(TableReader& job,
                                       const DaemonConfig& config) const override {
    std::optional<TableReader> input = job.table("input", Need::kRequired);
    if (!input) return nullptr;
    const auto frames =
        input->string("frames", Need::kRequired,
                      "a glob of PNG/JPEG files or a .zst frame archive, under an input root");
    const auto fps = input->number("fps", Need::kOptional, 0, 1000, /*lo_open=*/true);
    input->check_unknown_keys();
    if (!frames || (input->has("fps") && !fps)) return nullptr;

    const std::string key = input->key_path("frames");
    const std::vector<std::string> hints = {"input_roots in " + config.file + ": " +
                                            describe_roots(config.input_roots)};
    EncodeInput in;
    if (!has_glob_chars(*frames) && ends_with_ci(*frames, ".zst")) {
      Expected<std::string> archive = resolve_input(*frames, config.input_roots, key);
      if (!archive.ok()) {
        input->error("frames", archive.status().message(), "this archive", hints,
                     archive.status().code());
        return nullptr;
      }
      in.archive = *archive;
      in.fps = fps.value_or(0);  // 0: the archive's own rate
    } else {
      Expected<std::vector<std::string>> files =
          expand_frame_glob(*frames, config.input_roots, key);
      if (!files.ok()) {
        input->error("frames", files.status().message(), "these frames", hints,
                     files.status().code());
        return nullptr;
      }
      in.frame_files = std::move(*files);
      in.fps = fps.value_or(kDefaultFps);
    }
    // Every file is opened beneath its input root, at validation and again
    // when rendering: a symlink swapped in between fails the open.
    in.open = [roots = config.input_roots, key](const std::string& path) -> Expected<int> {
      FLICK_ASSIGN_OR_RETURN(fs::Fd fd, open_input(path, roots, key));
      return fd.release();
    };
    if (Status s = pipeline_.validate(in); !s.ok()) {
      input->error("frames", s.message(), "these frames", {}, s.code());
      return nullptr;
    }
    return std::make_unique<EncodeJob>(pipeline_, std::move(in), *frames);
  }

 private:
  EncodePipeline pipeline_;
};

}  // namespace

std::unique_ptr<PipelineInstance> create_encode_pipeline(TableReader& entry) {
  // No settings beyond name and kind.
  return std::make_unique<EncodeInstance>();
}

}  // namespace flick
