// The `matrix-game-2` kind: Matrix-Game 2.0 (models/pipelines/matrix_game.h),
// a start image and an action track to a video.
//
// [[pipeline]] (flick.toml)
//   mode      = "universal"            # universal | gta_drive | templerun
//   weights   = "/var/lib/flick/models/matrix-game-2"
//   precision = "int8"                 # bf16 (default) | int8 | fp8 | f32 (parity runs)
//   vae_precision = "int8"             # VAE convs: bf16 (default) | int8 (not with f32)
//   backend   = "cpu"                  # cpu (cuda: no pipeline runs on it yet)
//   width = 640, height = 352          # multiples of 16
//
// Job
//   [input]
//   image         = "/srv/render/in/forest.png"   # PNG or JPEG under an input root
//   seed          = 42                            # default 0
//   latent_frames = 15                            # a multiple of 3: 15 latents -> 57 frames
//   [actions]                                     # optional: standing still without it
//   keyboard = [["w", 24], ["w+a", 12], ["", 21]] # run-length segments over video frames
//   mouse    = [[0.0, 0.0, 30], [0.0, 0.1, 27]]   # [pitch, yaw, frames]
//   # file = "/srv/render/in/forest-actions.csv"  # or one CSV row per frame
#include <fcntl.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>

#include "jobs/config.h"
#include "jobs/fs.h"
#include "jobs/pipeline_registry.h"
#include "models/pipelines/matrix_game.h"
#include "models/pipelines/mg2_actions.h"
#include "models/pipelines/mg2_overlay.h"
#include "runtime/file_util.h"
#include "runtime/profile_backend.h"

namespace flick {
namespace {

// The DiT's RoPE table has 1024 latent positions (spec §5); the largest
// multiple of 3 below it. 1023 latents are 4089 video frames.
constexpr int64_t kMaxLatentFrames = 1023;

std::string frames_rule(int64_t latents) {
  return "latent_frames = " + std::to_string(latents) + " gives 1 + 4 x " +
         std::to_string(latents - 1) + " = " + std::to_string(mg2_video_frames(latents)) +
         " video frames";
}

// An error at an element of an array ("actions.keyboard[2]").
void element_error(TableReader& t, const toml::value& v, const std::string& key,
                   const std::string& what, const std::string& comment,
                   std::vector<std::string> hints = {}) {
  t.diagnostics().error_at(v, key, key + ": " + what, comment, std::move(hints));
}

std::optional<int64_t> segment_frames(TableReader& t, const toml::value& v,
                                      const std::string& key) {
  if (!v.is_integer() || v.as_integer() < 1 ||
      v.as_integer() > mg2_video_frames(kMaxLatentFrames)) {
    element_error(t, v, key,
                  "expected a frame count (an integer >= 1), got " +
                      (v.is_integer() ? std::to_string(v.as_integer()) : toml_type_words(v.type())),
                  "expected a frame count");
    return std::nullopt;
  }
  return v.as_integer();
}

std::optional<double> segment_number(TableReader& t, const toml::value& v, const std::string& key) {
  if (v.is_integer()) return static_cast<double>(v.as_integer());
  if (v.is_floating()) return v.as_floating();
  element_error(t, v, key, std::string("expected a number, got ") + toml_type_words(v.type()),
                "expected a number");
  return std::nullopt;
}

// `keyboard = [["w", 24], ...]`; nullopt after reporting every bad segment.
std::optional<std::vector<Mg2KeySegment>> read_keyboard(TableReader& actions,
                                                        const Mg2ModeSpec& mode) {
  const toml::value* v = actions.value("keyboard");
  const std::string key = actions.key_path("keyboard");
  const std::string shape = "an array of [keys, frames] segments, e.g. [[\"w\", 24], [\"\", 9]]";
  if (!v->is_array()) {
    element_error(actions, *v, key, "expected " + shape + ", got " + toml_type_words(v->type()),
                  "expected " + shape);
    return std::nullopt;
  }
  std::vector<Mg2KeySegment> out;
  bool ok = true;
  size_t i = 0;
  for (const toml::value& e : v->as_array()) {
    const std::string element = key + "[" + std::to_string(i++) + "]";
    if (!e.is_array() || e.as_array().size() != 2 || !e.as_array()[0].is_string()) {
      element_error(actions, e, element, "expected a [keys, frames] pair like [\"w+a\", 12]",
                    "expected [\"keys\", frames]",
                    {std::string(mode.name) + " keys: " + mg2_key_list(mode) +
                     " (join with '+'; \"\" = none)"});
      ok = false;
      continue;
    }
    const toml::value& combo = e.as_array()[0];
    Expected<uint32_t> pressed = parse_mg2_keys(mode, combo.as_string().str);
    if (!pressed.ok()) {
      element_error(actions, combo, element, pressed.status().message(), "not a valid key set");
      ok = false;
    }
    const std::optional<int64_t> frames = segment_frames(actions, e.as_array()[1], element);
    ok &= frames.has_value();
    if (ok) out.push_back({*pressed, *frames});
  }
  if (!ok) return std::nullopt;
  return out;
}

// `mouse = [[pitch, yaw, frames], ...]`.
std::optional<std::vector<Mg2MouseSegment>> read_mouse(TableReader& actions,
                                                       const Mg2ModeSpec& mode) {
  const toml::value* v = actions.value("mouse");
  const std::string key = actions.key_path("mouse");
  if (!mode.mouse) {
    element_error(actions, *v, key, std::string(mode.name) + " has no mouse input (keyboard only)",
                  "not used by " + std::string(mode.name));
    return std::nullopt;
  }
  const std::string shape = "an array of [pitch, yaw, frames] segments, e.g. [[0.0, 0.1, 12]]";
  if (!v->is_array()) {
    element_error(actions, *v, key, "expected " + shape + ", got " + toml_type_words(v->type()),
                  "expected " + shape);
    return std::nullopt;
  }
  std::vector<Mg2MouseSegment> out;
  bool ok = true;
  size_t i = 0;
  for (const toml::value& e : v->as_array()) {
    const std::string element = key + "[" + std::to_string(i++) + "]";
    if (!e.is_array() || e.as_array().size() != 3) {
      element_error(actions, e, element,
                    "expected a [pitch, yaw, frames] triple like [0.0, 0.1, 12]",
                    "expected [pitch, yaw, frames]");
      ok = false;
      continue;
    }
    const auto& a = e.as_array();
    const std::optional<double> pitch = segment_number(actions, a[0], element);
    const std::optional<double> yaw = segment_number(actions, a[1], element);
    const std::optional<int64_t> frames = segment_frames(actions, a[2], element);
    if (!pitch || !yaw || !frames) {
      ok = false;
      continue;
    }
    if (Status s = check_mg2_mouse(mode, *pitch, *yaw); !s.ok()) {
      element_error(actions, e, element, s.message(), "out of range");
      ok = false;
      continue;
    }
    out.push_back({*pitch, *yaw, *frames});
  }
  if (!ok) return std::nullopt;
  return out;
}

// Opened beneath its input root, no symlink followed (they were, and their
// targets checked, by resolve_input).
Expected<std::string> read_input_file(const std::string& canonical, const std::vector<Root>& roots,
                                      int64_t limit, const std::string& what) {
  FLICK_ASSIGN_OR_RETURN(fs::Fd fd, open_input(canonical, roots, what));
  bool over = false;
  FLICK_ASSIGN_OR_RETURN(std::string text, fs::read_limited(fd.get(), limit, &over, canonical));
  if (over) {
    return invalid_input(canonical + " is larger than " + std::to_string(limit) + " bytes");
  }
  return text;
}

// The start image, opened beneath its input root and read through that
// descriptor only.
Expected<Frame> read_start_image(const std::string& canonical, const std::vector<Root>& roots,
                                 const std::string& what, const Mg2Options& options) {
  FLICK_ASSIGN_OR_RETURN(fs::Fd fd, open_input(canonical, roots, what));
  FLICK_ASSIGN_OR_RETURN(std::vector<uint8_t> file, read_fd(fd.get(), canonical));
  return prepare_mg2_image(file, canonical, options.width, options.height);
}

// [actions] into tracks of `frames` rows (0 when latent_frames was invalid:
// then only what does not depend on the length is checked).
std::optional<Mg2Tracks> read_actions(TableReader& job, const Mg2ModeSpec& mode, int64_t frames,
                                      int64_t latents, const DaemonConfig& config) {
  std::optional<TableReader> actions = job.table("actions", Need::kOptional);
  if (!actions) {
    if (job.has("actions")) return std::nullopt;  // not a table: reported
    return mg2_idle_tracks(mode, frames);
  }
  const auto file = actions->string("file", Need::kOptional,
                                    "a CSV file (one row per video frame) under an input root");
  std::optional<std::vector<Mg2KeySegment>> keyboard;
  std::optional<std::vector<Mg2MouseSegment>> mouse;
  bool ok = !actions->has("file") || file.has_value();
  if (actions->has("keyboard")) ok &= (keyboard = read_keyboard(*actions, mode)).has_value();
  if (actions->has("mouse")) ok &= (mouse = read_mouse(*actions, mode)).has_value();
  // Known even when absent, for the did-you-mean of a misspelt one.
  actions->value("keyboard");
  actions->value("mouse");
  actions->check_unknown_keys();
  if (file && (actions->has("keyboard") || actions->has("mouse"))) {
    actions->error("file",
                   "give the actions either as a CSV file or as keyboard/mouse segments, "
                   "not both",
                   "file and segments both given");
    ok = false;
  }
  if (!ok || frames == 0) return std::nullopt;

  if (file) {
    const std::string key = actions->key_path("file");
    Expected<std::string> canonical = resolve_input(*file, config.input_roots, key);
    Expected<std::string> text =
        canonical.ok() ? read_input_file(*canonical, config.input_roots, kMg2MaxCsvBytes, key)
                       : canonical.status();
    if (!text.ok()) {
      actions->error("file", text.status().message(), "this file",
                     {"input_roots in " + config.file + ": " + describe_roots(config.input_roots)},
                     text.status().code());
      return std::nullopt;
    }
    Expected<Mg2Tracks> tracks = parse_mg2_actions_csv(mode, *text, frames, *canonical);
    if (!tracks.ok()) {
      actions->error("file", tracks.status().message(), "bad action file", {frames_rule(latents)});
      return std::nullopt;
    }
    return std::move(*tracks);
  }

  Mg2Tracks tracks = mg2_idle_tracks(mode, frames);
  if (keyboard) {
    Expected<std::vector<float>> k = expand_mg2_keyboard(mode, *keyboard, frames);
    if (!k.ok()) {
      actions->error("keyboard", k.status().message(), "wrong total length",
                     {frames_rule(latents)});
      ok = false;
    } else {
      tracks.keyboard = std::move(*k);
    }
  }
  if (mouse) {
    Expected<std::vector<float>> m = expand_mg2_mouse(*mouse, frames);
    if (!m.ok()) {
      actions->error("mouse", m.status().message(), "wrong total length", {frames_rule(latents)});
      ok = false;
    } else {
      tracks.mouse = std::move(*m);
    }
  }
  if (!ok) return std::nullopt;
  return tracks;
}

class Mg2Job : public PreparedJob {
 public:
  Mg2Job(const std::unique_ptr<Mg2Pipeline>& pipeline, ProfileBackend* profiler,
         const Mg2ModeSpec& mode, Mg2Input input, std::string image_path)
      : pipeline_(pipeline),
        profiler_(profiler),
        mode_(mode),
        input_(std::move(input)),
        image_path_(std::move(image_path)) {}

  std::string summary() const override {
    return "matrix-game-2 " + std::string(mode_.name) + ": " +
           std::to_string(mg2_video_frames(input_.latent_frames)) + " frames (" +
           std::to_string(input_.latent_frames) + " latents) from " + image_path_ + ", seed " +
           std::to_string(input_.seed);
  }

  Status run(FrameSink& sink, const RunContext& ctx) override {
    if (pipeline_ == nullptr) return unavailable("the matrix-game-2 pipeline is not loaded");
    if (profiler_ == nullptr) return pipeline_->run(input_, sink, ctx, ctx.tap);
    const ProfileStats before = profiler_->stats();
    Status s = pipeline_->run(input_, sink, ctx, ctx.tap);
    std::fputs(profiler_->stats().minus(before).table("matrix-game-2 job: " + summary()).c_str(),
               stderr);
    return s;
  }

  FrameAnnotator overlay() const override {
    Mg2Tracks tracks;
    tracks.frames = mg2_video_frames(input_.latent_frames);
    tracks.keyboard = input_.keyboard;
    tracks.mouse = input_.mouse;
    auto drawer = std::make_shared<const Mg2Overlay>(mode_, std::move(tracks));
    return [drawer](int64_t index, Frame& frame) { drawer->draw(index, frame); };
  }

  std::vector<std::pair<std::string, std::string>> status_details() const override {
    std::vector<std::pair<std::string, std::string>> out = {{"mode", std::string(mode_.name)}};
    if (pipeline_ != nullptr) out.emplace_back("precision", pipeline_->precision_summary());
    return out;
  }

 private:
  const std::unique_ptr<Mg2Pipeline>& pipeline_;  // the instance's; null until loaded
  ProfileBackend* profiler_;                      // FLICK_PROFILE=1, else null
  const Mg2ModeSpec& mode_;
  Mg2Input input_;
  std::string image_path_;
};

class Mg2Instance : public PipelineInstance {
 public:
  explicit Mg2Instance(Mg2Options options) : options_(std::move(options)) {}

  Status load() override {
    if (pipeline_ != nullptr) return ok_status();
    backend_ = profile_if_enabled(make_cpu_backend());
    Mg2Options o = options_;
    o.plan_cache = loading_plan_cache();  // [daemon].plan_cache
    FLICK_ASSIGN_OR_RETURN(pipeline_, Mg2Pipeline::load(o, *backend_));
    return ok_status();
  }

  std::unique_ptr<PreparedJob> prepare(TableReader& job,
                                       const DaemonConfig& config) const override {
    const Mg2ModeSpec& mode = *find_mg2_mode_by_enum(options_.mode);
    std::optional<TableReader> input = job.table("input", Need::kRequired);
    if (!input) {
      if (job.has("actions")) job.value("actions");  // not checked without [input]
      return nullptr;
    }
    const auto image =
        input->string("image", Need::kRequired, "a PNG or JPEG file under an input root");
    const auto seed = input->integer("seed", Need::kOptional, 0, INT64_MAX);
    const auto latents = input->integer("latent_frames", Need::kRequired, 3, kMaxLatentFrames);
    input->check_unknown_keys();
    bool ok = image && (seed || !input->has("seed")) && latents;
    if (latents && *latents % kMg2FramesPerBlock != 0) {
      input->error("latent_frames",
                   "expected a multiple of " + std::to_string(kMg2FramesPerBlock) +
                       " (the model makes 3 latent frames per block), got " +
                       std::to_string(*latents),
                   "not a multiple of 3",
                   {"the nearest: " + std::to_string(*latents / 3 * 3) + " or " +
                    std::to_string(*latents / 3 * 3 + 3)});
      ok = false;
    }
    const int64_t n = latents && *latents % kMg2FramesPerBlock == 0 ? *latents : 0;
    std::optional<Mg2Tracks> tracks =
        read_actions(job, mode, n > 0 ? mg2_video_frames(n) : 0, n, config);
    ok &= tracks.has_value();

    Mg2Input in;
    std::string image_path;
    if (image) {
      const std::vector<std::string> hints = {"input_roots in " + config.file + ": " +
                                              describe_roots(config.input_roots)};
      Expected<std::string> canonical =
          resolve_input(*image, config.input_roots, input->key_path("image"));
      if (!canonical.ok()) {
        input->error("image", canonical.status().message(), "this image", hints,
                     canonical.status().code());
        return nullptr;
      }
      Expected<Frame> frame =
          read_start_image(*canonical, config.input_roots, input->key_path("image"), options_);
      if (!frame.ok()) {
        input->error("image", frame.status().message(), "this image", {}, frame.status().code());
        return nullptr;
      }
      in.image = std::move(*frame);
      image_path = *canonical;
    }
    if (!ok || !image) return nullptr;
    in.seed = static_cast<uint64_t>(seed.value_or(0));
    in.latent_frames = *latents;
    in.keyboard = std::move(tracks->keyboard);
    in.mouse = std::move(tracks->mouse);
    // The pipeline's own checks, as a last word (everything above should
    // already have caught what they would find).
    if (Status s = validate_mg2_input(options_, in); !s.ok()) {
      job.diagnostics().error_at(input->toml(), input->path(), s.message(), "this job");
      return nullptr;
    }
    return std::make_unique<Mg2Job>(pipeline_, backend_ ? as_profiler(*backend_) : nullptr, mode,
                                    std::move(in), std::move(image_path));
  }

 private:
  static const Mg2ModeSpec* find_mg2_mode_by_enum(Mg2Mode m) {
    for (const Mg2ModeSpec& s : mg2_modes()) {
      if (s.mode == m) return &s;
    }
    FLICK_CHECK(false, "unknown Mg2Mode");
    return nullptr;
  }

  Mg2Options options_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Mg2Pipeline> pipeline_;
};

}  // namespace

std::unique_ptr<PipelineInstance> create_matrix_game_pipeline(TableReader& entry) {
  Mg2Options o;
  bool ok = true;
  if (const auto mode = entry.string("mode", Need::kRequired,
                                     "a Matrix-Game 2.0 mode (" + mg2_mode_names() + ")")) {
    if (const Mg2ModeSpec* spec = find_mg2_mode(*mode)) {
      o.mode = spec->mode;
    } else {
      entry.error("mode",
                  "unknown mode \"" + *mode + "\" (expected one of " + mg2_mode_names() + ")",
                  "not a Matrix-Game 2.0 mode");
      ok = false;
    }
  } else {
    ok = false;
  }
  if (const auto weights = entry.string(
          "weights", Need::kRequired,
          "the directory of a Skywork/Matrix-Game-2.0 download (or of flick synth output)")) {
    Expected<std::string> normal = normalize_absolute(*weights, entry.key_path("weights"));
    if (!normal.ok()) {
      entry.error("weights", normal.status().message(), "expected an absolute path");
      ok = false;
    } else {
      o.weights = *normal;
    }
  } else {
    ok = false;
  }
  if (entry.has("precision")) {
    constexpr Precision kPrecisions[] = {Precision::BF16, Precision::INT8, Precision::FP8,
                                         Precision::F32};
    const auto p = entry.choice("precision", Need::kOptional, {"bf16", "int8", "fp8", "f32"});
    if (p) {
      o.precision = kPrecisions[*p];
    } else {
      ok = false;
    }
  }
  if (entry.has("vae_precision")) {
    const auto p = entry.choice("vae_precision", Need::kOptional, {"bf16", "int8"});
    if (p && *p == 1 && o.precision == Precision::F32) {
      entry.error("vae_precision", "int8 VAE convolutions need a reduced-precision pipeline",
                  "precision = \"f32\" runs the VAE in fp32", {"drop vae_precision"});
      ok = false;
    } else if (p) {
      o.vae_precision = *p == 1 ? Precision::INT8 : Precision::BF16;
    } else {
      ok = false;
    }
  }
  ok &= read_backend_key(entry);
  for (const auto& [key, value] : {std::pair{"width", &o.width}, std::pair{"height", &o.height}}) {
    if (!entry.has(key)) continue;
    const auto v = entry.integer(key, Need::kOptional, 16, 4096);
    if (v && *v % 16 != 0) {
      entry.error(key,
                  "expected a multiple of 16 (VAE 8x and DiT patch 2x), got " + std::to_string(*v),
                  "not a multiple of 16");
    }
    ok &= v && *v % 16 == 0;
    if (v) *value = static_cast<int>(*v);
  }
  if (!ok) return nullptr;
  return std::make_unique<Mg2Instance>(std::move(o));
}

}  // namespace flick
