// The `framepack-i2v` kind: FramePack image-to-video (models/pipelines/framepack.h),
// a start image and a prompt to a 30 fps video of 36 n + 1 frames.
//
// [[pipeline]] (flick.toml)
//   weights   = "/var/lib/flick/models/framepack"  # the download layout below
//   precision = "bf16"                 # bf16 (default) | f32 (parity runs) | fp8 | int8:
//                                      # fp8 / int8 quantize the DiT's block linears and the
//                                      # LLaMA's linears (int8: a CPU with AVX-512 VNNI / AMX)
//   variant   = "original"             # the jobs' default: original | f1 (match the transformer)
//   resolution = 640                   # the released bucket list (the only one)
//   # buckets = [[32, 48], [48, 32]]   # or an explicit (h, w) list, multiples of 16
//   prompt_cache = "/var/cache/flick/framepack"  # prompt encodings on disk (safe to delete)
//   vae_tiling = false                 # FramePack's low-VRAM spatially tiled VAE
//   keep_dit_loaded = true             # false: DiT loaded per job, never beside the text encoders
//   backend   = "cpu"
//   # Component folders, each defaulting to <weights>/<key>:
//   # transformer, text_encoder, text_encoder_2, tokenizer, tokenizer_2, vae, image_encoder
//
//   <weights>/transformer/     lllyasviel/FramePackI2V_HY (variant original) or
//                              lllyasviel/FramePack_F1_I2V_HY_20250503 (variant f1);
//                              `transformer` may also name one .safetensors file
//                              (Kijai's FramePackI2V_HY_fp8_e4m3fn.safetensors, with
//                              precision = "fp8")
//   <weights>/text_encoder/, text_encoder_2/, tokenizer/, tokenizer_2/, vae/
//                              the same folders of hunyuanvideo-community/HunyuanVideo
//   <weights>/image_encoder/   lllyasviel/flux_redux_bfl image_encoder
//
// Job
//   [input]
//   image   = "/srv/render/in/girl.png"   # PNG or JPEG under an input root
//   prompt  = "The girl dances gracefully, with clear movements, full of charm."
//   seconds = 5                # 1 .. 120: round(seconds * 30 / 36) sections of 36 frames
//   seed    = 31337            # default 31337 (the demo's)
//   steps   = 25               # 1 .. 100
//   distilled_guidance = 10.0  # gs, 1 .. 32
//   variant = "original"       # default: the pipeline's
//   teacache = false           # the demo's TeaCache (on there): ~2x faster, lossy
//   # end_image: FramePack @ 97fe5db has no end frame (refused, with that reason)
#include <cmath>
#include <cstdio>

#include "io/image_preprocess.h"
#include "jobs/config.h"
#include "jobs/fs.h"
#include "jobs/pipeline_registry.h"
#include "models/pipelines/framepack.h"
#include "runtime/file_util.h"
#include "runtime/profile_backend.h"

namespace flick {
namespace {

constexpr const char* kComponents[] = {"transformer", "text_encoder", "text_encoder_2", "tokenizer",
                                       "tokenizer_2", "vae",          "image_encoder"};

Expected<Frame> read_image(const std::string& canonical, const std::vector<Root>& roots,
                           const std::string& what) {
  FLICK_ASSIGN_OR_RETURN(fs::Fd fd, open_input(canonical, roots, what));
  FLICK_ASSIGN_OR_RETURN(std::vector<uint8_t> file, read_fd(fd.get(), canonical));
  return decode_image_rgb(file, canonical);
}

class FramePackJob : public PreparedJob {
 public:
  FramePackJob(const std::unique_ptr<FramePackPipeline>& pipeline, ProfileBackend* profiler,
               FramePackInput input, std::string image_path)
      : pipeline_(pipeline),
        profiler_(profiler),
        input_(std::move(input)),
        image_path_(std::move(image_path)) {}

  std::string summary() const override {
    const int64_t n = framepack_section_count(input_.seconds);
    return "framepack-i2v " + std::string(framepack_variant_name(input_.variant)) + ": " +
           std::to_string(framepack_video_frames(n)) + " frames (" + std::to_string(n) +
           (n == 1 ? " section, " : " sections, ") + std::to_string(input_.steps) +
           " steps) from " + image_path_ + ", seed " + std::to_string(input_.seed);
  }

  Status run(FrameSink& sink, const RunContext& ctx) override {
    if (pipeline_ == nullptr) return unavailable("the framepack-i2v pipeline is not loaded");
    if (profiler_ == nullptr) return pipeline_->run(input_, sink, ctx);
    const ProfileStats before = profiler_->stats();
    Status s = pipeline_->run(input_, sink, ctx);
    std::fputs(profiler_->stats().minus(before).table("framepack-i2v job: " + summary()).c_str(),
               stderr);
    return s;
  }

  std::vector<std::pair<std::string, std::string>> status_details() const override {
    std::vector<std::pair<std::string, std::string>> out = {
        {"variant", std::string(framepack_variant_name(input_.variant))},
        {"sections", std::to_string(framepack_section_count(input_.seconds))},
        {"teacache", input_.teacache ? "on" : "off"}};
    if (pipeline_ != nullptr) out.emplace_back("precision", pipeline_->precision_summary());
    return out;
  }

 private:
  const std::unique_ptr<FramePackPipeline>& pipeline_;  // the instance's; null until loaded
  ProfileBackend* profiler_;                            // FLICK_PROFILE=1, else null
  FramePackInput input_;
  std::string image_path_;
};

class FramePackInstance : public PipelineInstance {
 public:
  FramePackInstance(FramePackOptions options, FramePackVariant variant)
      : options_(std::move(options)), variant_(variant) {}

  Status load() override {
    if (pipeline_ != nullptr) return ok_status();
    backend_ = profile_if_enabled(make_cpu_backend());
    FramePackOptions o = options_;
    o.plan_cache = loading_plan_cache();  // [daemon].plan_cache
    FLICK_ASSIGN_OR_RETURN(pipeline_, FramePackPipeline::load(o, *backend_));
    return ok_status();
  }

  std::unique_ptr<PreparedJob> prepare(TableReader& job,
                                       const DaemonConfig& config) const override {
    std::optional<TableReader> input = job.table("input", Need::kRequired);
    if (!input) return nullptr;
    const auto image =
        input->string("image", Need::kRequired, "a PNG or JPEG file under an input root");
    const auto prompt = input->string("prompt", Need::kRequired, "the text prompt");
    const auto seconds = input->number("seconds", Need::kOptional, 1, kFramePackMaxSeconds);
    const auto seed = input->integer("seed", Need::kOptional, 0, INT64_MAX);
    const auto steps = input->integer("steps", Need::kOptional, 1, 100);
    const auto gs = input->number("distilled_guidance", Need::kOptional, 1, 32);
    const auto variant = input->choice("variant", Need::kOptional, {"original", "f1"});
    const auto teacache = input->boolean("teacache", Need::kOptional);
    bool ok = image && prompt && (seconds || !input->has("seconds")) &&
              (seed || !input->has("seed")) && (steps || !input->has("steps")) &&
              (gs || !input->has("distilled_guidance")) && (variant || !input->has("variant")) &&
              (teacache || !input->has("teacache"));
    if (input->has("end_image")) {
      input->value("end_image");
      input->error("end_image",
                   "FramePack @ 97fe5db (the reference flick reproduces) has no end frame: "
                   "demo_gradio.py conditions on the start image only",
                   "not supported", {"remove end_image"});
      ok = false;
    }
    input->check_unknown_keys();

    FramePackInput in;
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
      Expected<Frame> frame = read_image(*canonical, config.input_roots, input->key_path("image"));
      if (!frame.ok()) {
        input->error("image", frame.status().message(), "this image", {}, frame.status().code());
        return nullptr;
      }
      in.image = std::move(*frame);
      image_path = *canonical;
    }
    if (!ok) return nullptr;
    in.prompt = *prompt;
    in.seconds = seconds.value_or(5.0);
    in.seed = static_cast<uint64_t>(seed.value_or(31337));
    in.steps = static_cast<int>(steps.value_or(25));
    in.distilled_guidance = gs.value_or(10.0);
    in.teacache = teacache.value_or(false);
    in.variant =
        variant ? (*variant == 1 ? FramePackVariant::kF1 : FramePackVariant::kOriginal) : variant_;
    if (Status s = validate_framepack_input(options_, in); !s.ok()) {
      job.diagnostics().error_at(input->toml(), input->path(), s.message(), "this job");
      return nullptr;
    }
    return std::make_unique<FramePackJob>(pipeline_, backend_ ? as_profiler(*backend_) : nullptr,
                                          std::move(in), std::move(image_path));
  }

 private:
  FramePackOptions options_;
  FramePackVariant variant_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<FramePackPipeline> pipeline_;
};

std::optional<std::string> absolute_path(TableReader& entry, const char* key, Need need,
                                         const std::string& expected) {
  const auto v = entry.string(key, need, expected);
  if (!v) return std::nullopt;
  Expected<std::string> normal = normalize_absolute(*v, entry.key_path(key));
  if (!normal.ok()) {
    entry.error(key, normal.status().message(), "expected an absolute path");
    return std::nullopt;
  }
  return *normal;
}

}  // namespace

std::unique_ptr<PipelineInstance> create_framepack_pipeline(TableReader& entry) {
  FramePackOptions o;
  bool ok = true;
  if (const auto w = absolute_path(entry, "weights", Need::kRequired,
                                   "the FramePack weights folder (transformer/, text_encoder/, "
                                   "text_encoder_2/, tokenizer/, tokenizer_2/, vae/, "
                                   "image_encoder/)")) {
    o.paths.weights = *w;
  } else {
    ok = false;
  }
  std::string* fields[] = {&o.paths.transformer,  &o.paths.text_encoder, &o.paths.text_encoder_2,
                           &o.paths.tokenizer,    &o.paths.tokenizer_2,  &o.paths.vae,
                           &o.paths.image_encoder};
  for (size_t i = 0; i < std::size(kComponents); ++i) {
    if (!entry.has(kComponents[i])) {
      entry.value(kComponents[i]);  // known, for the did-you-mean of a misspelt one
      continue;
    }
    const auto p = absolute_path(entry, kComponents[i], Need::kOptional,
                                 std::string("the ") + kComponents[i] + " folder");
    if (p) {
      *fields[i] = *p;
    } else {
      ok = false;
    }
  }
  if (entry.has("precision")) {
    const auto p = entry.choice("precision", Need::kOptional, {"bf16", "f32", "fp8", "int8"});
    if (p) {
      constexpr Precision kChoice[] = {Precision::BF16, Precision::F32, Precision::FP8,
                                       Precision::INT8};
      o.precision = kChoice[*p];
    } else {
      ok = false;
    }
  }
  FramePackVariant variant = FramePackVariant::kOriginal;
  if (entry.has("variant")) {
    const auto v = entry.choice("variant", Need::kOptional, {"original", "f1"});
    if (v) {
      variant = *v == 1 ? FramePackVariant::kF1 : FramePackVariant::kOriginal;
    } else {
      ok = false;
    }
  }
  if (entry.has("resolution")) {
    const auto r = entry.integer("resolution", Need::kOptional, 1, 4096);
    if (r && *r != 640) {
      entry.error("resolution",
                  "FramePack has one bucket list, for resolution 640 (bucket_tools.py); got " +
                      std::to_string(*r),
                  "not 640", {"give other sizes as buckets = [[h, w], ...]"});
    }
    ok &= r && *r == 640;
  }
  if (entry.has("buckets")) {
    const toml::value* v = entry.value("buckets");
    bool good = v->is_array() && !v->as_array().empty();
    if (good) {
      for (const toml::value& b : v->as_array()) {
        const bool pair = b.is_array() && b.as_array().size() == 2 &&
                          b.as_array()[0].is_integer() && b.as_array()[1].is_integer();
        const int64_t bh = pair ? b.as_array()[0].as_integer() : 0;
        const int64_t bw = pair ? b.as_array()[1].as_integer() : 0;
        if (!pair || bh < 16 || bw < 16 || bh > 4096 || bw > 4096 || bh % 16 || bw % 16) {
          good = false;
          break;
        }
        o.buckets.push_back({static_cast<int>(bh), static_cast<int>(bw)});
      }
    }
    if (!good) {
      entry.error("buckets",
                  "expected a non-empty array of [height, width] pairs, each a multiple of 16 "
                  "from 16 to 4096",
                  "not a bucket list", {"e.g. buckets = [[416, 960], [608, 640]]"});
      ok = false;
    }
  }
  if (entry.has("resolution") && entry.has("buckets")) {
    entry.error("buckets", "give either resolution or buckets, not both", "both given");
    ok = false;
  }
  if (entry.has("prompt_cache")) {
    if (const auto p = absolute_path(entry, "prompt_cache", Need::kOptional,
                                     "a folder for cached prompt encodings")) {
      o.prompt_cache = *p;
    } else {
      ok = false;
    }
  }
  if (entry.has("vae_tiling")) {
    const auto t = entry.boolean("vae_tiling", Need::kOptional);
    if (t) {
      o.vae_spatial_tiling = *t;
    } else {
      ok = false;
    }
  }
  if (entry.has("keep_dit_loaded")) {
    const auto k = entry.boolean("keep_dit_loaded", Need::kOptional);
    if (k) {
      o.keep_dit_loaded = *k;
    } else {
      ok = false;
    }
  }
  ok &= read_backend_key(entry);
  if (!ok) return nullptr;
  return std::make_unique<FramePackInstance>(std::move(o), variant);
}

}  // namespace flick
