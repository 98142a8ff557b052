#include "models/pipelines/matrix_game.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "io/image_preprocess.h"
#include "models/clip/clip_vision.h"
#include "models/wan/flow_sampler.h"
#include "models/wan/sampler_noise.h"
#include "models/wan/unpatchify.h"
#include "models/wan/wan_action.h"
#include "models/wan/wan_dit.h"
#include "models/wan/wan_quant.h"
#include "models/wan_vae/wan_vae_decoder.h"
#include "models/wan_vae/wan_vae_encoder.h"
#include "runtime/dtype.h"
#include "runtime/file_util.h"
#include "runtime/heap.h"
#include "runtime/log.h"
#include "runtime/plan_cache.h"
#include "runtime/profile_backend.h"
#include "runtime/weights/weight_store.h"

namespace flick {
namespace {

constexpr int kStepsUniversal[] = {1000, 666, 333};
constexpr int kStepsTemplerun[] = {1000, 750, 500, 250};
constexpr std::string_view kKeysUniversal[] = {"w", "s", "a", "d"};
constexpr std::string_view kKeysGta[] = {"w", "s"};
constexpr std::string_view kKeysTemplerun[] = {"nomove",    "jump",     "slide",    "turnleft",
                                               "turnright", "leftside", "rightside"};

const Mg2ModeSpec kModes[] = {
    {Mg2Mode::kUniversal, "universal", "base_distilled_model/base_distill.safetensors", 4, true, 6,
     kStepsUniversal, kKeysUniversal},
    {Mg2Mode::kGtaDrive, "gta_drive", "gta_distilled_model/gta_keyboard2dim.safetensors", 2, true,
     4, kStepsUniversal, kKeysGta},
    {Mg2Mode::kTemplerun, "templerun",
     "templerun_distilled_model/templerun_7dim_onlykey.safetensors", 7, false, 6, kStepsTemplerun,
     kKeysTemplerun},
};

constexpr int kLatentChannels = 16;
constexpr int kMaskChannels = 4;  // cond_concat keeps 4 of the mask's channels
constexpr int kVaeStride = 8;     // pixels per latent, each side

const Mg2ModeSpec& spec_of(Mg2Mode mode) {
  for (const Mg2ModeSpec& m : kModes) {
    if (m.mode == mode) return m;
  }
  FLICK_CHECK(false && "unknown Mg2Mode");
  return kModes[0];
}

std::string precision_label(Precision p) {
  std::string s = precision_name(p);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

Status require_file(const std::string& path, const std::string& what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return not_found("Matrix-Game 2.0: " + what + " '" + path + "' does not exist");
  if (!S_ISREG(st.st_mode))
    return invalid_input("Matrix-Game 2.0: " + what + " '" + path + "' is not a regular file");
  return ok_status();
}

// Every tensor of the file must have been read by a component: a stray
// tensor means a wrong or mixed-up checkpoint.
Status check_used(const WeightStore& store, const std::string& path) {
  Status s = store.check_all_used();
  if (s.ok()) return s;
  return Status(s.code(), path + ": " + s.message());
}

// Resident memory, for the load log: "1.23 GiB".
// Resident memory now and its peak so far, for the debug log:
// "1.23 GiB (peak 2.34)".
std::string resident() {
  std::ifstream f("/proc/self/status");
  std::string line;
  double rss = -1, peak = -1;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) rss = std::stod(line.substr(6)) / (1024.0 * 1024.0);
    if (line.rfind("VmHWM:", 0) == 0) peak = std::stod(line.substr(6)) / (1024.0 * 1024.0);
  }
  if (rss < 0 || peak < 0) return "?";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f GiB (peak %.2f)", rss, peak);
  return buf;
}

}  // namespace

std::span<const Mg2ModeSpec> mg2_modes() { return kModes; }

const Mg2ModeSpec* find_mg2_mode(std::string_view name) {
  for (const Mg2ModeSpec& m : kModes) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

std::string mg2_mode_names() {
  std::string out;
  for (const Mg2ModeSpec& m : kModes) {
    if (!out.empty()) out += ", ";
    out += m.name;
  }
  return out;
}

Status validate_mg2_input(const Mg2Options& options, const Mg2Input& input) {
  const Mg2ModeSpec& mode = spec_of(options.mode);
  if (input.image.width != options.width || input.image.height != options.height ||
      input.image.rgb.size() != static_cast<size_t>(3LL * options.width * options.height))
    return invalid_input("start image is " + std::to_string(input.image.width) + "x" +
                         std::to_string(input.image.height) + ", the pipeline runs at " +
                         std::to_string(options.width) + "x" + std::to_string(options.height));
  const int64_t n = input.latent_frames;
  if (n <= 0 || n % kMg2FramesPerBlock != 0 || n > kMg2MaxLatentFrames)
    return invalid_input("latent_frames must be a positive multiple of 3 up to " +
                         std::to_string(kMg2MaxLatentFrames) + ", got " + std::to_string(n));
  const int64_t t = mg2_video_frames(n);
  const size_t kb_want = static_cast<size_t>(t * mode.keyboard_dim);
  if (input.keyboard.size() != kb_want)
    return invalid_input(
        "the keyboard track has " + std::to_string(input.keyboard.size() / mode.keyboard_dim) +
        " frames of " + std::to_string(mode.keyboard_dim) + " keys; " + std::to_string(n) +
        " latent frames need " + std::to_string(t) + " video frames (1 + 4 (N - 1))");
  for (size_t i = 0; i < input.keyboard.size(); ++i) {
    const float v = input.keyboard[i];
    if (v != 0.f && v != 1.f)
      return invalid_input("keyboard value " + std::to_string(v) + " at video frame " +
                           std::to_string(i / mode.keyboard_dim) + " is not 0 or 1");
  }
  if (!mode.mouse) {
    if (!input.mouse.empty())
      return invalid_input("mode " + std::string(mode.name) + " takes no mouse track");
    return ok_status();
  }
  if (input.mouse.size() != static_cast<size_t>(2 * t))
    return invalid_input("the mouse track has " + std::to_string(input.mouse.size() / 2) +
                         " frames; " + std::to_string(n) + " latent frames need " +
                         std::to_string(t));
  for (size_t i = 0; i < input.mouse.size(); ++i) {
    if (!std::isfinite(input.mouse[i]))
      return invalid_input("mouse value at video frame " + std::to_string(i / 2) +
                           " is not finite");
  }
  return ok_status();
}

Expected<Frame> prepare_mg2_image(const std::string& path, int width, int height) {
  FLICK_ASSIGN_OR_RETURN(std::vector<uint8_t> file, read_file(path));
  return prepare_mg2_image(file, path, width, height);
}

Expected<Frame> prepare_mg2_image(const std::vector<uint8_t>& file, const std::string& path,
                                  int width, int height) {
  FLICK_ASSIGN_OR_RETURN(Frame img, decode_image_rgb(file, path));
  Expected<Frame> cropped = center_crop_to_aspect(img.view(), width, height);
  if (!cropped.ok())
    return Status(cropped.status().code(), path + ": " + cropped.status().message());
  return pil_resize(cropped->view(), width, height, PilFilter::kBilinear);
}

struct Mg2Pipeline::Impl {
  Mg2Options opt;
  const Mg2ModeSpec* mode = nullptr;
  Backend* backend = nullptr;
  Precision clip_precision = Precision::BF16;
  Precision vae_precision = Precision::F32;
  DType act = DType::BF16;  // DiT activations, latents and conditioning

  // Stores first: components hold views into them and are destroyed first.
  // (The VAE copies every weight it computes with: its store is closed once
  // loaded, freeing the .pth storages read into memory.)
  WeightStore dit_store, clip_store;
  std::optional<ClipVision> clip;
  std::optional<WanVaeEncoder> encoder;
  std::optional<WanVaeDecoder> decoder;
  std::optional<WanDit> dit;
  std::vector<WanActionModule> actions;

  wan::FlowSchedule schedule = wan::make_flow_schedule();
  std::vector<float> step_t;
  int64_t lh = 0, lw = 0;  // latent grid

  Status load(const Mg2Options& options, Backend& be);
  Status run(const Mg2Input& input, FrameSink& sink, const RunContext& ctx, const Tap& tap);

  // The conditioning of the whole video: [1, 16, N, h, w] in act.
  Expected<OwnedTensor> encode_image(const Tensor& image_chw, int64_t latents, const Tap& tap);
  // cond = cat(mask, img_cond) of block b's frames: [1, 20, 3, h, w]; the
  // same for every step of the block and its re-run.
  void block_cond(int64_t b, const Tensor& img_cond, Tensor& cond);
  // One DiT call on block b (frames [3b, 3b + 3)); with_head = false for the
  // t = 0 context re-run, whose output is unused.
  Status dit_call(int64_t b, const Tensor& x, float t, const Tensor& cond, const Tensor& keyboard,
                  const Tensor& mouse, bool with_head, Tensor* flow);
};

Status Mg2Pipeline::Impl::load(const Mg2Options& options, Backend& be) {
  opt = options;
  mode = &spec_of(options.mode);
  backend = &be;
  if (opt.width <= 0 || opt.height <= 0 || opt.width % 16 != 0 || opt.height % 16 != 0)
    return invalid_input(
        "Matrix-Game 2.0: width and height must be positive multiples of 16, got " +
        std::to_string(opt.width) + "x" + std::to_string(opt.height));
  lh = opt.height / kVaeStride;
  lw = opt.width / kVaeStride;
  const bool f32 = opt.precision == Precision::F32;
  act = f32 ? DType::F32 : DType::BF16;
  // The INT8 pipeline quantizes CLIP's block linears too (W8A8, like the
  // DiT): 0.6 GB less resident for the whole life of the daemon, for a
  // tower that runs once per job. FP8 keeps a BF16 tower (E4M3 weights
  // already cost the most quality; see bench/RESULTS.md).
  clip_precision = f32                                ? Precision::F32
                   : opt.precision == Precision::INT8 ? Precision::INT8
                                                      : Precision::BF16;
  // The reference runs a bf16 encoder and an fp16 decoder; flick's decoder
  // keeps the reference's weights with bf16 activations (AMX convolutions).
  vae_precision = f32 ? Precision::F32 : Precision::BF16;

  const std::filesystem::path dir(opt.weights);
  const std::string clip_path = (dir / kMg2ClipFile).string();
  const std::string vae_path = (dir / kMg2VaeFile).string();
  const std::string dit_path = (dir / mode->checkpoint).string();
  FLICK_TRY(require_file(clip_path, "CLIP checkpoint"));
  FLICK_TRY(require_file(vae_path, "VAE checkpoint"));
  FLICK_TRY(require_file(dit_path, std::string(mode->name) + " DiT checkpoint"));

  FLICK_TRY(check_wan_precision(opt.precision, be, "Matrix-Game 2.0"));
  if (opt.vae_precision != Precision::BF16) {
    if (opt.vae_precision != Precision::INT8 || f32)
      return invalid_input(std::string("Matrix-Game 2.0: vae_precision ") +
                           precision_name(opt.vae_precision) + " with precision " +
                           precision_name(opt.precision) +
                           " is not supported (vae_precision is bf16 or int8, int8 not with f32)");
    FLICK_TRY(check_wan_precision(Precision::INT8, be, "Matrix-Game 2.0 vae_precision"));
  }

  // The plan cache, for the loaders below (wan_quant.h, clip_vision.h). An
  // entry's name holds a hash of its checkpoint's path (two weight
  // directories share a cache without evicting each other); its key holds
  // the file's identity, so a changed checkpoint rebuilds its entries.
  std::optional<PlanCache> plan_cache = open_plan_cache(opt.plan_cache, "Matrix-Game 2.0");
  PlanCacheScope plan_scope(plan_cache ? &*plan_cache : nullptr, plan_cache_platform(be));
  auto plan_source = [&](std::string_view component, const std::string& path) -> Status {
    return plan_scope.set_checkpoint_source("mg2-" + std::string(component), path, {path});
  };

  // ---- CLIP visual tower ----
  FLICK_ASSIGN_OR_RETURN(clip_store, WeightStore::open({clip_path}));
  FLICK_TRY(plan_source("clip", clip_path));
  {
    const int64_t head_dim = opt.clip_head_dim > 0 ? opt.clip_head_dim : 80;
    Expected<ClipVision> c =
        ClipVision::load(clip_store.view("visual"), be, clip_precision, head_dim);
    if (!c.ok()) return Status(c.status().code(), clip_path + ": " + c.status().message());
    clip.emplace(std::move(*c));
    // The text tower and the logit scale ship in the same file; unused here.
    const WeightView root = clip_store.root();
    for (const std::string& n : clip_store.view("textual").names())
      clip_store.view("textual").mark_used(n);
    if (root.has("log_scale")) root.mark_used("log_scale");
    FLICK_TRY(check_used(clip_store, clip_path));
    // The .pth storages are read into memory (2.5 GB of fp32 for ViT-H); a
    // bf16 tower keeps rounded copies of everything, so they can go.
    if (!clip->borrows_store()) clip_store = WeightStore();
    log_debug("Matrix-Game 2.0: CLIP loaded, " + resident() + " resident");
  }

  // ---- VAE encoder and streaming decoder ----
  {
    FLICK_ASSIGN_OR_RETURN(WeightStore vae_store, WeightStore::open({vae_path}));
    FLICK_TRY(plan_source("vae", vae_path));
    const std::optional<Precision> vae_convs =
        opt.vae_precision == Precision::INT8 ? std::optional(Precision::INT8) : std::nullopt;
    Expected<WanVaeEncoder> e = WanVaeEncoder::load(vae_store.root(), be, vae_precision, vae_convs);
    if (!e.ok()) return Status(e.status().code(), vae_path + ": " + e.status().message());
    Expected<WanVaeDecoder> d = WanVaeDecoder::load(vae_store.root(), be, vae_precision, vae_convs);
    if (!d.ok()) return Status(d.status().code(), vae_path + ": " + d.status().message());
    const WanVaeEncoderConfig& ec = e->config();
    const WanVaeDecoderConfig& dc = d->config();
    // The pipeline's frame arithmetic (1 + 4 (N - 1), 8x8 pixels per latent).
    if (ec.z_dim != kLatentChannels || dc.z_dim != kLatentChannels || ec.temporal_down != 2 ||
        dc.temporal_up != 2 || ec.spatial_down != 3 || dc.spatial_up != 3)
      return invalid_input(vae_path +
                           ": expected a VAE with 16 latent channels, 4x time and 8x "
                           "space compression; got z " +
                           std::to_string(ec.z_dim) + "/" + std::to_string(dc.z_dim) +
                           ", temporal steps " + std::to_string(ec.temporal_down) + "/" +
                           std::to_string(dc.temporal_up) + ", spatial steps " +
                           std::to_string(ec.spatial_down) + "/" + std::to_string(dc.spatial_up));
    encoder.emplace(std::move(*e));
    decoder.emplace(std::move(*d));
    FLICK_TRY(check_used(vae_store, vae_path));
    log_debug("Matrix-Game 2.0: VAE loaded, " + resident() + " resident");
  }

  // ---- DiT and its action modules ----
  FLICK_ASSIGN_OR_RETURN(dit_store, WeightStore::open({dit_path}));
  FLICK_TRY(plan_source(std::string(mode->name) + "-dit", dit_path));
  {
    const WeightView model = dit_store.view("model.");
    const int64_t head_dim = opt.dit_head_dim > 0 ? opt.dit_head_dim : 128;
    const WanDitShape shape{lh, lw, kMg2FramesPerBlock, clip->config().tokens(),
                            mode->local_attn_frames};
    Expected<WanDit> d = WanDit::load(model, be, opt.precision, shape, head_dim);
    if (!d.ok()) return Status(d.status().code(), dit_path + ": " + d.status().message());
    log_debug("Matrix-Game 2.0: DiT blocks loaded, " + resident() + " resident");
    const WanDitConfig& c = d->config();
    if (c.in_dim != kLatentChannels + kMaskChannels + kLatentChannels ||
        c.out_dim != kLatentChannels)
      return invalid_input(dit_path +
                           ": expected an image-to-video DiT with 36 input and 16 "
                           "output channels, got " +
                           std::to_string(c.in_dim) + " and " + std::to_string(c.out_dim));
    if (c.clip_dim != clip->config().width)
      return invalid_input(dit_path + ": model.img_emb expects " + std::to_string(c.clip_dim) +
                           "-wide image features, the CLIP tower in " + clip_path + " gives " +
                           std::to_string(clip->config().width));
    if (c.action_blocks <= 0)
      return invalid_input(dit_path +
                           ": no block has an action module (model.blocks.0.action_model.*)");
    for (int64_t i = 0; i < c.action_blocks; ++i) {
      Expected<WanActionModule> a = WanActionModule::load(
          model.sub("blocks." + std::to_string(i) + ".action_model"), be, opt.precision, c.dim,
          kMg2FramesPerBlock, shape.frame_tokens(), shape.local_attn_frames,
          actions.empty() ? nullptr : &actions.front());
      if (!a.ok()) return Status(a.status().code(), dit_path + ": " + a.status().message());
      const WanActionConfig& ac = a->config();
      if (ac.keyboard_dim != mode->keyboard_dim || ac.has_mouse() != mode->mouse)
        return invalid_input(
            dit_path + ": block " + std::to_string(i) + "'s action module takes " +
            std::to_string(ac.keyboard_dim) + " keys " + (ac.has_mouse() ? "and" : "and no") +
            " mouse; mode " + std::string(mode->name) + " has " +
            std::to_string(mode->keyboard_dim) + " keys " + (mode->mouse ? "and" : "and no") +
            " mouse (is this the " + std::string(mode->name) + " checkpoint?)");
      actions.push_back(std::move(*a));
      model.release_pages();
    }
    dit.emplace(std::move(*d));
    FLICK_TRY(check_used(dit_store, dit_path));
    log_debug("Matrix-Game 2.0: DiT loaded, " + resident() + " resident");
  }
  // Every weight is packed; the mapped checkpoints need not stay resident.
  for (const WeightStore* s : {&clip_store, &dit_store}) s->release_pages();
  release_free_heap();
  log_debug("Matrix-Game 2.0: mapped checkpoints released, " + resident() + " resident");
  if (plan_cache) log_info("Matrix-Game 2.0: plan cache " + plan_cache->summary());
  step_t = wan::warped_step_times(schedule, mode->steps);
  return ok_status();
}

Expected<OwnedTensor> Mg2Pipeline::Impl::encode_image(const Tensor& image_chw, int64_t latents,
                                                      const Tap& tap) {
  Backend& be = *backend;
  // The image followed by 4 (N - 1) zero (mid-grey) frames; their latents are
  // not zero (causal context), so the whole video is encoded.
  const int64_t frames = mg2_video_frames(latents);
  OwnedTensor video(image_chw.dtype, {1, 3, frames, opt.height, opt.width});
  std::fill_n(static_cast<uint8_t*>(video.t.data), video.t.nbytes(), uint8_t{0});
  Tensor first = video.t.slice(2, 0, 1);  // [1, 3, 1, H, W]
  be.copy(image_chw.reshape({1, 3, 1, opt.height, opt.width}), first);
  FLICK_ASSIGN_OR_RETURN(Tensor z, encoder->encode(video.t));  // [1, 16, N, h, w] F32
  if (z.shape != Shape({1, kLatentChannels, latents, lh, lw}))
    return internal_error("VAE encoder returned " + z.str());
  OwnedTensor out(act, z.shape);
  be.copy(z, out.t);
  encoder->release_buffers();  // ~1 GB at full size, not needed until the next job
  if (tap) tap("img_cond", out.t);
  return out;
}

void Mg2Pipeline::Impl::block_cond(int64_t b, const Tensor& img_cond, Tensor& cond) {
  Backend& be = *backend;
  const int64_t f = kMg2FramesPerBlock, start = b * f, plane = lh * lw;
  OwnedTensor mask(DType::F32, {1, kMaskChannels, f, lh, lw});  // 1 for latent 0 only
  float* m = mask.t.ptr<float>();
  for (int64_t c = 0; c < kMaskChannels; ++c)
    for (int64_t k = 0; k < f; ++k)
      std::fill_n(m + (c * f + k) * plane, plane, start + k == 0 ? 1.f : 0.f);
  Tensor mask_dst = cond.slice(1, 0, kMaskChannels);
  be.copy(mask.t, mask_dst);
  Tensor img_dst = cond.slice(1, kMaskChannels, kLatentChannels);
  be.copy(img_cond.slice(2, start, f), img_dst);
}

Status Mg2Pipeline::Impl::dit_call(int64_t b, const Tensor& x, float t, const Tensor& cond,
                                   const Tensor& keyboard, const Tensor& mouse, bool with_head,
                                   Tensor* flow) {
  const int64_t f = kMg2FramesPerBlock, start = b * f;
  OwnedTensor times(DType::F32, {f});
  std::fill_n(times.t.ptr<float>(), f, t);
  FLICK_TRY(dit->embed(x, cond, times.t));
  Tensor tokens = dit->tokens();
  const WanDitConfig& c = dit->config();
  for (int64_t i = 0; i < c.layers; ++i) {
    if (i < c.action_blocks) {
      dit->attention(i, start);
      {
        const ProfileScope scope(*backend, "action module");
        FLICK_TRY(actions[static_cast<size_t>(i)].forward(tokens, keyboard, mouse, start));
      }
      dit->feed_forward(i);
    } else {
      dit->block(i, start);
    }
  }
  if (with_head) *flow = dit->head();
  return ok_status();
}

namespace {

// x0 = x - sigma * flow, elementwise over contiguous [16, 3, h, w] tensors.
void to_x0(const Tensor& x, const Tensor& flow, float sigma, Tensor& x0) {
  const size_t n = static_cast<size_t>(x.numel());
  if (x.dtype == DType::BF16) {
    wan::flow_to_x0({x.ptr<uint16_t>(), n}, {flow.ptr<uint16_t>(), n}, sigma,
                    {x0.ptr<uint16_t>(), n});
  } else {
    wan::flow_to_x0({x.ptr<float>(), n}, {flow.ptr<float>(), n}, sigma, {x0.ptr<float>(), n});
  }
}

// out = (1 - sigma) x0 + sigma noise; noise [3, 16, h, w] fp32 (frame-major).
void renoise(const Tensor& x0, const std::vector<float>& noise, float sigma, Tensor& out) {
  const size_t n = static_cast<size_t>(x0.numel());
  if (x0.dtype == DType::BF16) {
    std::vector<uint16_t> nb(noise.size());
    for (size_t i = 0; i < noise.size(); ++i) nb[i] = f32_to_bf16(noise[i]);
    wan::renoise({x0.ptr<uint16_t>(), n}, nb, sigma, kLatentChannels, kMg2FramesPerBlock,
                 {out.ptr<uint16_t>(), n});
  } else {
    wan::renoise({x0.ptr<float>(), n}, noise, sigma, kLatentChannels, kMg2FramesPerBlock,
                 {out.ptr<float>(), n});
  }
}

// Decoder frames [1, T, 3, H, W] F32 in [-1, 1] -> RGB8, as the reference's
// trunc(clip((v + 1) * 127.5, 0, 255)).
void to_rgb8(const Tensor& frames, int64_t index, Frame& out) {
  const int64_t h = frames.dim(3), w = frames.dim(4), plane = h * w;
  out.width = static_cast<int>(w);
  out.height = static_cast<int>(h);
  out.rgb.resize(static_cast<size_t>(3 * plane));
  const float* src = frames.ptr<float>() + index * 3 * plane;
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t i = 0; i < plane; ++i) {
      const float v = std::clamp((src[c * plane + i] + 1.f) * 127.5f, 0.f, 255.f);
      out.rgb[static_cast<size_t>(i * 3 + c)] = static_cast<uint8_t>(v);
    }
}

}  // namespace

Status Mg2Pipeline::Impl::run(const Mg2Input& input, FrameSink& sink, const RunContext& ctx,
                              const Tap& tap) {
  FLICK_TRY(validate_mg2_input(opt, input));
  // Between jobs, the pipeline holds its weights and nothing else.
  struct ReleaseBuffers {
    Impl& p;
    ~ReleaseBuffers() {
      p.encoder->release_buffers();
      p.decoder->release_buffers();
      release_free_heap();
    }
  } release_at_exit{*this};
  // Allocated again on the first DiT call: not resident while the VAE
  // encodes the conditioning, the job's other memory peak.
  dit->release_buffers();
  for (WanActionModule& a : actions) a.release_buffers();
  Backend& be = *backend;
  const int64_t n = input.latent_frames, blocks = n / kMg2FramesPerBlock,
                total = mg2_video_frames(n), f = kMg2FramesPerBlock;

  // ---- conditioning: image, VAE latents, CLIP context ----
  OwnedTensor image(act, {3, opt.height, opt.width});
  to_normalized_chw(input.image.view(), {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}, image.t);
  FLICK_ASSIGN_OR_RETURN(OwnedTensor img_cond, encode_image(image.t, n, tap));
  log_debug("Matrix-Game 2.0: image encoded, " + resident() + " resident");
  FLICK_ASSIGN_OR_RETURN(Tensor visual,
                         clip->forward(image.t.reshape({1, 3, opt.height, opt.width})));
  if (tap) tap("visual_context", visual);
  log_debug("Matrix-Game 2.0: CLIP context, " + resident() + " resident");
  dit->reset_caches();
  for (WanActionModule& a : actions) a.reset_caches();
  FLICK_TRY(dit->set_context(visual));
  decoder->reset();
  if (ctx.stop_requested()) return interrupted("stopped before the first block");

  const int64_t k_dim = mode->keyboard_dim;
  const Tensor keyboard =
      Tensor::view(const_cast<float*>(input.keyboard.data()), DType::F32, Shape{total, k_dim});
  const Tensor mouse = mode->mouse ? Tensor::view(const_cast<float*>(input.mouse.data()),
                                                  DType::F32, Shape{total, 2})
                                   : Tensor{};

  wan::SamplerNoise noise(input.seed, n, lh, lw, f, kLatentChannels);
  const Tensor initial = Tensor::view(const_cast<float*>(noise.initial().data()), DType::F32,
                                      Shape{1, kLatentChannels, n, lh, lw});
  FLICK_TRY(sink.begin(opt.width, opt.height, kMg2Fps, total));
  OwnedTensor x(act, {1, kLatentChannels, f, lh, lw}), x0(act, x.t.shape);
  OwnedTensor cond(act, {1, kMaskChannels + kLatentChannels, f, lh, lw});
  Frame rgb;
  int64_t done = 0;
  const size_t steps = step_t.size();
  for (int64_t b = 0; b < blocks; ++b) {
    if (ctx.stop_requested())
      return interrupted("stopped after " + std::to_string(done) + " of " + std::to_string(total) +
                         " frames");
    const std::string pb = "b" + std::to_string(b) + ".";
    be.copy(initial.slice(2, b * f, f), x.t);
    block_cond(b, img_cond.t, cond.t);
    for (size_t k = 0; k < steps; ++k) {
      const std::string pk = pb + "s" + std::to_string(k) + ".";
      if (tap) tap(pk + "x", x.t);
      Tensor flow;
      FLICK_TRY(dit_call(b, x.t, step_t[k], cond.t, keyboard, mouse, true, &flow));
      if (tap) tap(pk + "flow", flow);
      const float sigma = schedule.sigmas[wan::sigma_index_f64(schedule, step_t[k])];
      to_x0(x.t, flow, sigma, x0.t);
      if (tap) tap(pk + "x0", x0.t);
      if (k + 1 == steps) break;
      const float next = schedule.sigmas[wan::sigma_index_f32(schedule, step_t[k + 1])];
      renoise(x0.t, noise.next_renoise(), next, x.t);
    }
    // The clean re-run at t = 0 leaves this block's clean K/V for later blocks.
    FLICK_TRY(dit_call(b, x0.t, 0.f, cond.t, keyboard, mouse, false, nullptr));

    log_debug("Matrix-Game 2.0: block " + std::to_string(b) + " sampled, " + resident() +
              " resident");
    // The DiT's activations are idle while the VAE decodes: memory peaks at
    // the larger of the two phases' buffers, not at their sum.
    dit->release_buffers();
    for (WanActionModule& a : actions) a.release_buffers();
    if (tap) tap(pb + "latents", x0.t);  // the block's clean latents, into the decoder
    FLICK_ASSIGN_OR_RETURN(Tensor frames, decoder->decode(x0.t));  // [1, T, 3, H, W] F32
    if (tap) tap(pb + "frames", frames);
    for (int64_t i = 0; i < frames.dim(1); ++i) {
      to_rgb8(frames, i, rgb);
      FLICK_TRY(sink.write(rgb.view()));
    }
    done += frames.dim(1);
    decoder->release_scratch();  // idle while the DiT samples the next block
    log_debug("Matrix-Game 2.0: block " + std::to_string(b) + " decoded, " + resident() +
              " resident");
    if (ctx.progress) ctx.progress(done, total);
  }
  if (done != total)
    return internal_error("Matrix-Game 2.0: decoded " + std::to_string(done) +
                          " frames, expected " + std::to_string(total));
  return sink.finish();
}

Mg2Pipeline::Mg2Pipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Mg2Pipeline::~Mg2Pipeline() = default;

Expected<std::unique_ptr<Mg2Pipeline>> Mg2Pipeline::load(const Mg2Options& options,
                                                         Backend& backend) {
  auto impl = std::make_unique<Impl>();
  FLICK_TRY(impl->load(options, backend));
  return std::unique_ptr<Mg2Pipeline>(new Mg2Pipeline(std::move(impl)));
}

const Mg2Options& Mg2Pipeline::options() const { return impl_->opt; }
const Mg2ModeSpec& Mg2Pipeline::mode() const { return *impl_->mode; }

std::string Mg2Pipeline::precision_summary() const {
  return precision_label(impl_->opt.precision) + " DiT, " + precision_label(impl_->clip_precision) +
         " CLIP, " + precision_label(impl_->vae_precision) + " VAE" +
         (impl_->opt.vae_precision == Precision::INT8 ? " (int8 convs)" : "");
}

Status Mg2Pipeline::validate(const Mg2Input& input) const {
  return validate_mg2_input(impl_->opt, input);
}

Status Mg2Pipeline::run(const Mg2Input& input, FrameSink& sink, const RunContext& ctx,
                        const Tap& tap) {
  return impl_->run(input, sink, ctx, tap);
}

}  // namespace flick
