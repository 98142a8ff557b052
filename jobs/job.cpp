#include "jobs/job.h"

#include <cctype>

#include "io/output_sink.h"

namespace flick {
namespace {

bool plain_file_name(const std::string& s) {
  return !s.empty() && s.size() <= 200 && s[0] != '.' && s.find('/') == std::string::npos;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

VideoSpec parse_video(TableReader& v) {
  VideoSpec spec;
  const auto codec = v.choice("codec", Need::kOptional, {"h264", "ffv1"});
  if (codec) spec.codec = *codec == 0 ? "h264" : "ffv1";
  const char* ext = spec.codec == "h264" ? ".mp4" : ".mkv";
  if (auto file = v.string("file", Need::kRequired, std::string("a file name ending in ") + ext)) {
    if (!plain_file_name(*file)) {
      v.error("file", "expected a plain file name (no '/', not hidden), got \"" + *file + "\"",
              "not a plain file name");
    } else if (!ends_with(*file, ext)) {
      v.error("file", "a " + spec.codec + " video is written as " + ext + ", got \"" + *file + "\"",
              std::string("expected a name ending in ") + ext,
              {"h264 goes in .mp4 (yuv420p, BT.709); ffv1 (lossless) in .mkv"});
    } else {
      spec.file = *file;
    }
  }
  if (auto crf = v.integer("crf", Need::kOptional, 0, 51)) {
    if (spec.codec != "h264") {
      v.error("crf", "crf applies to h264 only (ffv1 is lossless)", "not used by " + spec.codec);
    }
    spec.crf = static_cast<int>(*crf);
  }
  if (auto preset = v.choice("preset", Need::kOptional,
                             {"ultrafast", "superfast", "veryfast", "faster", "fast", "medium",
                              "slow", "slower", "veryslow"})) {
    if (spec.codec != "h264") {
      v.error("preset", "preset applies to h264 only", "not used by " + spec.codec);
    }
    spec.preset = v.value("preset")->as_string().str;
  }
  // 0 = not set: the frame rate the pipeline produces.
  spec.fps = v.number("fps", Need::kOptional, 0, 1000, /*lo_open=*/true).value_or(0);
  v.check_unknown_keys();
  return spec;
}

void parse_frames(TableReader& f, OutputSpec* out) {
  FramesSpec spec;
  const auto format = f.choice("format", Need::kRequired, {"png", "jpeg", "zst", "none"});
  if (format) {
    constexpr FrameFormat kFormats[] = {FrameFormat::Png, FrameFormat::Jpeg, FrameFormat::Zst,
                                        FrameFormat::None};
    spec.format = kFormats[*format];
  }
  if (auto q = f.integer("quality", Need::kOptional, 1, 100)) {
    if (format && spec.format != FrameFormat::Jpeg) {
      f.error("quality", "quality applies to jpeg frames only", "not used here");
    }
    spec.jpeg_quality = static_cast<int>(*q);
  }
  if (auto level = f.integer("level", Need::kOptional, 0, 19)) {
    if (spec.format == FrameFormat::Png && *level <= 9) {
      spec.png_level = static_cast<int>(*level);
    } else if (spec.format == FrameFormat::Zst && *level >= 1) {
      spec.zstd_level = static_cast<int>(*level);
    } else if (format) {
      f.error("level", "level is the zlib level 0-9 of png frames or the zstd level 1-19 of zst",
              spec.format == FrameFormat::Png || spec.format == FrameFormat::Zst
                  ? "out of range for this format"
                  : "not used by this format");
    }
  }
  f.check_unknown_keys();
  out->frames = spec;
}

void parse_output(TableReader& out, const DaemonConfig& config, Job* job) {
  if (auto dir = out.string("dir", Need::kRequired, "an absolute path below an output root")) {
    Expected<OutputDir> resolved =
        resolve_output_dir(*dir, config.output_roots, out.key_path("dir"));
    if (!resolved.ok()) {
      out.error("dir", resolved.status().message(), "output directory refused",
                {"output_roots in " + config.file + ": " + describe_roots(config.output_roots)},
                resolved.status().code());
    } else {
      job->output_dir = std::move(*resolved);
      job->output.dir = job->output_dir.final_path();
    }
  }
  if (auto video = out.table("video", Need::kOptional)) job->output.video = parse_video(*video);
  if (auto overlay = out.table("overlay", Need::kOptional)) {
    job->output.overlay = parse_video(*overlay);
  }
  if (auto frames = out.table("frames", Need::kOptional)) parse_frames(*frames, &job->output);
  if (auto sheet = out.boolean("contact_sheet", Need::kOptional))
    job->output.contact_sheet = *sheet;
  out.check_unknown_keys();
  if (out.diagnostics().ok()) {
    // The writers' own checks (names that would clash, ranges) as a last word.
    if (Status s = validate_output_spec(job->output); !s.ok()) {
      out.diagnostics().error_at(out.toml(), out.path(), s.message(), "these outputs");
    }
  }
}

const toml::value* find_path(const toml::value& doc, const std::string& dotted) {
  const toml::value* v = &doc;
  size_t i = 0;
  while (i <= dotted.size()) {
    const size_t j = std::min(dotted.find('.', i), dotted.size());
    if (!v->is_table()) return nullptr;
    const auto& t = v->as_table();
    const auto it = t.find(dotted.substr(i, j - i));
    if (it == t.end()) return nullptr;
    v = &it->second;
    i = j + 1;
  }
  return v;
}

}  // namespace

bool valid_job_id(const std::string& id) {
  if (id.empty() || id.size() > 128 || !std::isalnum(static_cast<unsigned char>(id[0]))) {
    return false;
  }
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return !ends_with(id, ".status");
}

Diagnostic Job::error_at(const std::string& key, const std::string& what,
                         const std::string& comment, StatusCode code) const {
  Diagnostics d(file);
  const toml::value* v = document ? find_path(*document, key) : nullptr;
  if (v != nullptr) {
    d.error_at(*v, key, key + ": " + what, comment, {}, code);
  } else {
    d.error_in_file(key, key + ": " + what, code);
  }
  return d.first();
}

std::optional<Job> parse_job(const JobSource& src, const DaemonConfig& config, Diagnostics& diag) {
  std::optional<toml::value> doc = parse_toml(src.text, diag);
  if (!doc) return std::nullopt;
  Job job;
  job.file = src.display;
  job.document = std::make_shared<const toml::value>(std::move(*doc));
  TableReader root(diag, *job.document, "");

  if (auto version = root.integer("version", Need::kRequired, INT64_MIN, INT64_MAX)) {
    if (*version != kJobVersion) {
      root.error("version",
                 "unsupported job version " + std::to_string(*version) + " (this flick reads " +
                     std::to_string(kJobVersion) + ")",
                 "expected 1");
    }
  }

  if (auto id = root.string("id", Need::kOptional, "a job id")) {
    if (!valid_job_id(*id)) {
      root.error("id",
                 "expected 1-128 letters, digits, '.', '_' or '-', starting with a letter or "
                 "digit (and not ending in .status), got \"" +
                     *id + "\"",
                 "not a valid job id");
    }
    job.id = *id;
  } else if (!root.has("id")) {
    job.id = src.stem;
    job.id_from_stem = true;
    if (!valid_job_id(job.id)) {
      diag.error_in_file("id", "the file name '" + src.stem +
                                   "' is not a valid job id; set id = \"...\" in the file");
    }
  }

  const ConfiguredPipeline* pipeline = nullptr;
  if (auto name = root.string("pipeline", Need::kRequired,
                              "the name of a [[pipeline]] in " + config.file)) {
    pipeline = config.find_pipeline(*name);
    if (pipeline == nullptr) {
      root.error("pipeline", "unknown pipeline \"" + *name + "\"", "not defined in " + config.file,
                 {config.file + " defines: " + config.pipeline_names()});
    } else {
      job.pipeline = pipeline->name;
      job.kind = pipeline->kind;
      job.instance = pipeline->instance;
    }
  }

  if (auto output = root.table("output", Need::kRequired)) parse_output(*output, config, &job);

  if (pipeline != nullptr) {
    job.prepared = pipeline->instance->prepare(root, config);
    if (job.prepared != nullptr && job.output.overlay && !job.prepared->overlay()) {
      diag.add(job.error_at("output.overlay",
                            "the " + job.kind + " pipeline has nothing to draw an overlay from",
                            "not supported by " + job.kind));
    }
    // Checked after prepare(): whether the kind writes files of its own
    // decides whether an [output] with only `dir` writes anything.
    const OutputSpec& o = job.output;
    const bool writes_something = o.video.has_value() || o.overlay.has_value() ||
                                  o.frames.format != FrameFormat::None || o.contact_sheet ||
                                  (job.prepared != nullptr && job.prepared->writes_own_files());
    if (!writes_something && diag.ok()) {
      diag.add(job.error_at("output",
                            "[output] writes nothing: set video, overlay, frames or contact_sheet",
                            "nothing to write"));
    }
  } else {
    // The kind's tables cannot be checked without a known pipeline.
    for (const auto& [key, v] : job.document->as_table()) root.value(key);
  }
  root.check_unknown_keys();
  if (!diag.ok()) return std::nullopt;
  FLICK_CHECK(job.prepared != nullptr, "prepare() returned nullptr without an error");
  return job;
}

}  // namespace flick
