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

constexpr size_t kMaxFrames = 1000000;
constexpr double kDefaultFps = 25;

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

bool ends_with_ci(const std::string& s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  for (size_t i = 0; i < suffix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[s.size() - suffix.size() + i])) != suffix[i]) {
      return false;
    }
  }
  return true;
}

// Expands `pattern` (absolute, lexically under an input root) into the
// canonical paths of its matches, sorted by name, each checked against the
// roots.
Expected<std::vector<std::string>> expand_frames(const std::string& pattern,
                                                 const std::vector<Root>& roots,
                                                 const std::string& what) {
  FLICK_ASSIGN_OR_RETURN(std::string normal, normalize_absolute(pattern, what));
  // The part before the first wildcard must lie under a root, so the glob
  // never even lists directories outside them.
  const std::string fixed = normal.substr(0, normal.rfind('/', normal.find_first_of("*?[")));
  bool under_root = false;
  for (const Root& r : roots) {
    under_root |= is_within(fixed, r.configured) || is_within(fixed, r.canonical);
  }
  if (!under_root) {
    return invalid_input(what + ": '" + normal + "' is outside the input roots (" +
                         describe_roots(roots) + ")");
  }
  glob_t g{};
  const int rc = ::glob(normal.c_str(), GLOB_NOSORT, nullptr, &g);
  std::vector<std::string> matches;
  if (rc == 0) matches.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  ::globfree(&g);
  if (rc == GLOB_NOMATCH) return not_found(what + ": no file matches '" + normal + "'");
  if (rc != 0) return io_error(what + ": cannot expand '" + normal + "'");
  if (matches.size() > kMaxFrames) {
    return invalid_input(what + ": '" + normal + "' matches " + std::to_string(matches.size()) +
                         " files, more than " + std::to_string(kMaxFrames));
  }
  std::sort(matches.begin(), matches.end());  // by name, bytewise: not locale-dependent
  std::vector<std::string> out;
  out.reserve(matches.size());
  for (const std::string& m : matches) {
    if (!ends_with_ci(m, ".png") && !ends_with_ci(m, ".jpg") && !ends_with_ci(m, ".jpeg")) {
      return invalid_input(what + ": '" + m + "' is not a .png, .jpg or .jpeg file");
    }
    FLICK_ASSIGN_OR_RETURN(std::string canonical, resolve_input(m, roots, what));
    struct stat st;
    if (::stat(canonical.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return invalid_input(what + ": '" + m + "' is not a regular file");
    }
    out.push_back(std::move(canonical));
  }
  return out;
}

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
      Expected<std::vector<std::string>> files = expand_frames(*frames, config.input_roots, key);
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
