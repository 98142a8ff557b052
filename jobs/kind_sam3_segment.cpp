// The `sam3-segment` kind: EfficientSAM3 text-prompted concept segmentation
// of frames or a video (models/pipelines/sam3_segment.h), object ids kept
// across frames.
//
// [[pipeline]] (flick.toml)
//   weights    = "/var/lib/flick/models/efficient_sam3_repvit-m0_9_mobileclip_s1.pth"
//                                    # .pth as released, or .safetensors with its keys
//   precision  = "f32"               # f32 (default) | bf16 | int8
//   backend    = "cpu"               # cpu (cuda: not in this build)
//   image_size = 1008                # the model's square input side, a multiple of 14
//   vocab      = "/path/bpe_simple_vocab_16e6.txt.gz"   # optional (see sam3_image_model.h)
//
// Job
//   [input]
//   frames    = "/srv/render/in/shot/*.png"   # a PNG/JPEG glob or a .zst frame archive, or
//   video     = "/srv/render/in/shot.mp4"     # a video file (exactly one of the two)
//   prompts   = ["person", "red car"]         # text prompts, 1..64
//   threshold = 0.5                           # [0, 1); 0 keeps every query
//   every_n   = 1                             # process source frames 0, n, 2n, ...
//   fps       = 25                            # optional: the source's rate
// Outputs ([output] as for every job, plus): label_%06d.png (16-bit, pixel =
// object id), detections.jsonl; the overlay video tints masks per id.
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>

#include "io/frame_archive.h"
#include "io/image.h"
#include "jobs/config.h"
#include "jobs/fs.h"
#include "jobs/pipeline_registry.h"
#include "models/pipelines/sam3_segment.h"
#include "models/sam3/sam3_image_model.h"
#include "runtime/profile_backend.h"

namespace flick {
namespace {

// Masks are kept at the frame's size, one float plane per kept query, so
// the frame size is bounded: 4K UHD.
constexpr int kMaxSide = 4096;
constexpr int64_t kMaxPixels = int64_t{3840} * 2160;
constexpr int64_t kMaxImageSize = 4032;  // 4 x 1008

// Sam3ImageModel as the frame loop sees it.
class ImageModelAdapter : public Sam3FrameModel {
 public:
  explicit ImageModelAdapter(Sam3ImageModel& model) : model_(model) {}
  Status encode_image(const FrameView& frame, const Tap& tap) override {
    return model_.encode_image(frame, tap);
  }
  Expected<Sam3Detections> detect(std::string_view prompt, float threshold,
                                  const Tap& tap) override {
    return model_.detect(prompt, threshold, tap);
  }

 private:
  Sam3ImageModel& model_;
};

class Sam3Job : public PreparedJob {
 public:
  Sam3Job(const std::unique_ptr<Sam3ImageModel>& model, Sam3SegmentInput input, std::string source)
      : model_(model),
        input_(std::move(input)),
        source_(std::move(source)),
        overlay_(std::make_shared<Sam3OverlayState>()) {}

  std::string summary() const override {
    std::string prompts;
    for (const std::string& p : input_.prompts)
      prompts += (prompts.empty() ? "\"" : ", \"") + p + "\"";
    return "sam3-segment " + prompts + " in " + source_ +
           (input_.every_n > 1 ? " (every " + std::to_string(input_.every_n) + " frames)" : "") +
           ", threshold " + std::to_string(input_.threshold).substr(0, 4);
  }

  Status run(FrameSink& sink, const RunContext& ctx) override {
    if (model_ == nullptr) return unavailable("the sam3-segment model is not loaded");
    ImageModelAdapter adapter(*model_);
    return run_sam3_segment(adapter, input_, sink, ctx, overlay_, ctx.tap, &stats_);
  }

  FrameAnnotator overlay() const override { return sam3_overlay_annotator(overlay_); }
  bool writes_own_files() const override { return true; }  // label PNGs, detections.jsonl

  std::vector<std::pair<std::string, std::string>> status_details() const override {
    std::vector<std::pair<std::string, std::string>> out = {
        {"frames", std::to_string(stats_.frames)},
        {"detections", std::to_string(stats_.detections)},
        {"object_ids", std::to_string(stats_.ids)}};
    if (model_ != nullptr) out.emplace_back("precision", model_->precision_summary());
    return out;
  }

 private:
  const std::unique_ptr<Sam3ImageModel>& model_;  // the instance's; null until loaded
  Sam3SegmentInput input_;
  std::string source_;
  std::shared_ptr<Sam3OverlayState> overlay_;
  Sam3SegmentStats stats_;
};

class Sam3Instance : public PipelineInstance {
 public:
  explicit Sam3Instance(Sam3Options options) : options_(std::move(options)) {}

  Status load() override {
    if (model_ != nullptr) return ok_status();
    backend_ = profile_if_enabled(make_cpu_backend());
    FLICK_ASSIGN_OR_RETURN(model_, Sam3ImageModel::load(options_, *backend_));
    return ok_status();
  }

  std::unique_ptr<PreparedJob> prepare(TableReader& job,
                                       const DaemonConfig& config) const override {
    std::optional<TableReader> input = job.table("input", Need::kRequired);
    if (!input) return nullptr;
    const auto frames =
        input->string("frames", Need::kOptional,
                      "a glob of PNG/JPEG files or a .zst frame archive, under an input root");
    const auto video = input->string("video", Need::kOptional, "a video file under an input root");
    std::optional<std::vector<std::string>> prompts = read_prompts(*input);
    const auto threshold = input->number("threshold", Need::kOptional, 0, 1);
    const auto every_n = input->integer("every_n", Need::kOptional, 1, 1000000);
    const auto fps = input->number("fps", Need::kOptional, 0, 1000, /*lo_open=*/true);
    input->check_unknown_keys();
    bool ok = prompts.has_value() && (frames || !input->has("frames")) &&
              (video || !input->has("video")) && (threshold || !input->has("threshold")) &&
              (every_n || !input->has("every_n")) && (fps || !input->has("fps"));
    if (threshold && *threshold >= 1) {
      input->error("threshold",
                   "expected a probability in [0, 1) (detections are kept when prob > "
                   "threshold; 0 keeps every query), got " +
                       std::to_string(*threshold),
                   "must be below 1");
      ok = false;
    }
    if (frames && video) {
      input->error("video", "give either frames or a video, not both", "both given");
      return nullptr;
    }
    if (!frames && !video) {
      if (!input->has("frames") && !input->has("video")) {
        job.diagnostics().error_at(input->toml(), input->path(),
                                   "input: expected `frames` (a PNG/JPEG glob or a .zst frame "
                                   "archive) or `video` (a video file)",
                                   "no frames or video");
      }
      return nullptr;
    }
    if (!ok) return nullptr;

    Sam3SegmentInput in;
    in.prompts = std::move(*prompts);
    in.threshold = static_cast<float>(threshold.value_or(0.5));
    in.every_n = every_n.value_or(1);
    in.fps = fps.value_or(0);
    in.video_limits.max_side = kMaxSide;
    in.video_limits.max_pixels = kMaxPixels;
    const std::string key = input->key_path(frames ? "frames" : "video");
    const std::vector<std::string> hints = {"input_roots in " + config.file + ": " +
                                            describe_roots(config.input_roots)};
    std::string source;
    if (video) {
      Expected<std::string> canonical = resolve_input(*video, config.input_roots, key);
      if (!canonical.ok()) {
        input->error("video", canonical.status().message(), "this video", hints,
                     canonical.status().code());
        return nullptr;
      }
      in.video = source = *canonical;
    } else if (!has_glob_chars(*frames) && ends_with_ci(*frames, ".zst")) {
      Expected<std::string> archive = resolve_input(*frames, config.input_roots, key);
      if (!archive.ok()) {
        input->error("frames", archive.status().message(), "this archive", hints,
                     archive.status().code());
        return nullptr;
      }
      in.archive = source = *archive;
    } else {
      Expected<std::vector<std::string>> files =
          expand_frame_glob(*frames, config.input_roots, key);
      if (!files.ok()) {
        input->error("frames", files.status().message(), "these frames", hints,
                     files.status().code());
        return nullptr;
      }
      in.frame_files = std::move(*files);
      source = std::to_string(in.frame_files.size()) + " frames from " + *frames;
    }
    in.open = [roots = config.input_roots, key](const std::string& path) -> Expected<int> {
      FLICK_ASSIGN_OR_RETURN(fs::Fd fd, open_input(path, roots, key));
      return fd.release();
    };
    const char* source_key = video ? "video" : "frames";
    if (Status s = validate_sam3_segment_input(in); !s.ok()) {
      input->error(source_key, s.message(), video ? "this video" : "these frames", {}, s.code());
      return nullptr;
    }
    if (Status s = check_frame_size(in); !s.ok()) {
      input->error(source_key, s.message(), "too large", {}, s.code());
      return nullptr;
    }
    return std::make_unique<Sam3Job>(model_, std::move(in), std::move(source));
  }

 private:
  // `prompts = ["person", "red car"]`: every element a non-empty string.
  static std::optional<std::vector<std::string>> read_prompts(TableReader& input) {
    const toml::value* v = input.value("prompts");
    const std::string key = input.key_path("prompts");
    if (v == nullptr) {
      input.diagnostics().error_at(input.toml(), key,
                                   key +
                                       ": missing; expected text prompts, e.g. prompts = "
                                       "[\"person\", \"red car\"]",
                                   "no prompts");
      return std::nullopt;
    }
    if (!v->is_array()) {
      input.diagnostics().error_at(
          *v, key,
          key + ": expected an array of text prompts, e.g. [\"person\"], got " +
              toml_type_words(v->type()),
          "expected [\"prompt\", ...]");
      return std::nullopt;
    }
    if (v->as_array().empty()) {
      input.diagnostics().error_at(*v, key, key + ": is empty; give at least one text prompt",
                                   "no prompts");
      return std::nullopt;
    }
    if (v->as_array().size() > kSam3MaxPrompts) {
      input.diagnostics().error_at(*v, key,
                                   key + ": " + std::to_string(v->as_array().size()) +
                                       " prompts, more than " + std::to_string(kSam3MaxPrompts),
                                   "too many prompts");
      return std::nullopt;
    }
    std::vector<std::string> out;
    bool ok = true;
    size_t i = 0;
    for (const toml::value& e : v->as_array()) {
      const std::string element = key + "[" + std::to_string(i++) + "]";
      if (!e.is_string()) {
        input.diagnostics().error_at(
            e, element,
            element + ": expected a text prompt (a string), got " + toml_type_words(e.type()) +
                "; only text prompts are supported (no box or point prompts)",
            "not a text prompt");
        ok = false;
        continue;
      }
      const std::string& s = e.as_string().str;
      if (s.find_first_not_of(" \t\r\n") == std::string::npos) {
        input.diagnostics().error_at(e, element, element + ": is empty", "empty prompt");
        ok = false;
      } else if (s.size() > kSam3MaxPromptBytes) {
        input.diagnostics().error_at(e, element,
                                     element + ": " + std::to_string(s.size()) +
                                         " bytes, more than " + std::to_string(kSam3MaxPromptBytes),
                                     "too long");
        ok = false;
      }
      out.push_back(s);
    }
    if (!ok) return std::nullopt;
    return out;
  }

  // The frames' size against the limits (a video's was checked by its reader).
  static Status check_frame_size(const Sam3SegmentInput& in) {
    if (!in.video.empty()) return ok_status();
    int w = 0, h = 0;
    std::string name;
    if (!in.archive.empty()) {
      FLICK_ASSIGN_OR_RETURN(int fd, in.open(in.archive));
      FLICK_ASSIGN_OR_RETURN(FrameArchiveReader r, FrameArchiveReader::open_fd(fd, in.archive));
      w = r.info().width, h = r.info().height, name = in.archive;
    } else {
      FLICK_ASSIGN_OR_RETURN(int fd, in.open(in.frame_files[0]));
      fs::Fd f(fd);
      FLICK_ASSIGN_OR_RETURN(ImageInfo info, read_image_info_fd(f.get(), in.frame_files[0]));
      w = info.width, h = info.height, name = in.frame_files[0];
    }
    if (w > kMaxSide || h > kMaxSide || int64_t{w} * h > kMaxPixels) {
      return invalid_input(name + " is " + std::to_string(w) + "x" + std::to_string(h) +
                           ", larger than sam3-segment's limit (" + std::to_string(kMaxSide) +
                           " per side, " + std::to_string(kMaxPixels) + " pixels)");
    }
    return ok_status();
  }

  Sam3Options options_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Sam3ImageModel> model_;
};

}  // namespace

std::unique_ptr<PipelineInstance> create_sam3_segment_pipeline(TableReader& entry) {
  Sam3Options o;
  bool ok = true;
  for (const auto& [key, target, what] :
       {std::tuple{"weights", &o.weights,
                   "an EfficientSAM3 checkpoint (.pth as released, or .safetensors; flick synth "
                   "--model sam3 writes one)"},
        std::tuple{"vocab", &o.vocab, "the CLIP BPE vocabulary (bpe_simple_vocab_16e6.txt.gz)"}}) {
    const Need need = std::string_view(key) == "weights" ? Need::kRequired : Need::kOptional;
    const auto v = entry.string(key, need, what);
    if (!v) {
      ok &= need == Need::kOptional && !entry.has(key);
      continue;
    }
    Expected<std::string> normal = normalize_absolute(*v, entry.key_path(key));
    if (!normal.ok()) {
      entry.error(key, normal.status().message(), "expected an absolute path");
      ok = false;
    } else {
      *target = *normal;
    }
  }
  if (entry.has("precision")) {
    constexpr Precision kPrecisions[] = {Precision::F32, Precision::BF16, Precision::INT8};
    const auto p = entry.choice("precision", Need::kOptional, {"f32", "bf16", "int8"});
    if (p) {
      o.precision = kPrecisions[*p];
    } else {
      ok = false;
    }
  }
  ok &= read_backend_key(entry);
  if (entry.has("image_size")) {
    const auto s = entry.integer("image_size", Need::kOptional, 14, kMaxImageSize);
    if (s && *s % 14 != 0) {
      entry.error("image_size",
                  "expected a multiple of 14 (the image grid is image_size / 14), got " +
                      std::to_string(*s),
                  "not a multiple of 14", {"the released models use 1008"});
    }
    ok &= s && *s % 14 == 0;
    if (s) o.image_size = *s;
  }
  if (!ok) return nullptr;
  return std::make_unique<Sam3Instance>(std::move(o));
}

}  // namespace flick
