#include "models/pipelines/framepack.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include "io/image_preprocess.h"
#include "models/clip/clip_text_model.h"
#include "models/clip/clip_tokenizer.h"
#include "models/hunyuan/framepack_dit.h"
#include "models/hunyuan/prompt_template.h"
#include "models/hunyuan/unipc_sampler.h"
#include "models/hunyuan_vae/hunyuan_vae.h"
#include "models/llama/llama_text_encoder.h"
#include "models/llama/llama_tokenizer.h"
#include "models/siglip/siglip_vision.h"
#include "models/wan/wan_quant.h"
#include "runtime/dtype.h"
#include "runtime/file_util.h"
#include "runtime/log.h"
#include "runtime/plan_cache.h"
#include "runtime/random.h"
#include "runtime/weights/weight_store.h"

namespace flick {
namespace {

namespace fsys = std::filesystem;

constexpr FramePackBucket kBuckets640[] = {
    {416, 960}, {448, 864}, {480, 832}, {512, 768}, {544, 704}, {576, 672}, {608, 640},
    {640, 608}, {672, 576}, {704, 544}, {768, 512}, {832, 480}, {864, 448}, {960, 416},
};
constexpr int kClean2x = 2, kClean4x = 16;
constexpr int kVaeStride = 8;
constexpr float kVaeDivisor = 127.5f;

// Python's round() of a double: half to even (the default rounding mode).
double round_half_even(double v) {
  const int mode = std::fegetround();
  std::fesetround(FE_TONEAREST);
  const double r = std::nearbyint(v);
  std::fesetround(mode);
  return r;
}

// The fp32 result of one op as torch stores it, never fused with the next.
float stored(float v) {
  volatile float s = v;
  return s;
}

float round_f16(float v) { return f16_to_f32(f32_to_f16(v)); }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

Status require_dir(const std::string& path, const std::string& what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return not_found("FramePack: the " + what + " folder '" + path + "' does not exist");
  if (!S_ISDIR(st.st_mode))
    return invalid_input("FramePack: the " + what + " folder '" + path + "' is not a directory");
  return ok_status();
}

Status require_file(const std::string& path, const std::string& what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return not_found("FramePack: " + what + ": '" + path + "' is missing");
  return ok_status();
}

// FLICK_LOG=debug: the resident memory after a stage and the process's peak
// so far (the stages come in rising order of memory: encoders, DiT, VAE),
// for the memory table of framepack.h.
void log_memory(const std::string& stage) {
  long pages = 0, resident = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  char buf[160];
  std::snprintf(buf, sizeof buf, "FramePack: %s: %.2f GiB resident, peak so far %.2f GiB",
                stage.c_str(), static_cast<double>(resident) * ::sysconf(_SC_PAGESIZE) / kGiB,
                static_cast<double>(u.ru_maxrss) * 1024.0 / kGiB);
  log_debug(buf);
}

bool is_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// <folder>/<stem>.safetensors.index.json (sharded) or <folder>/<stem>.safetensors,
// plus config.json.
Expected<std::string> component_weights(const std::string& folder, const std::string& stem,
                                        const std::string& what) {
  FLICK_TRY(require_dir(folder, what));
  FLICK_TRY(require_file(join_path(folder, "config.json"), what + " config"));
  const std::string index = join_path(folder, stem + ".safetensors.index.json");
  if (is_file(index)) return index;
  const std::string single = join_path(folder, stem + ".safetensors");
  if (is_file(single)) return single;
  return not_found("FramePack: the " + what + " folder '" + folder + "' has neither " + stem +
                   ".safetensors nor " + stem + ".safetensors.index.json");
}

// Names, sizes and modification times of a folder's files: what the prompt
// cache key knows of the weights (a replaced file changes it).
std::string folder_identity(const std::string& folder) {
  std::vector<std::string> rows;
  std::error_code ec;
  for (const auto& e : fsys::directory_iterator(folder, ec)) {
    if (!e.is_regular_file(ec)) continue;
    const auto size = e.file_size(ec);
    const auto mtime = e.last_write_time(ec).time_since_epoch().count();
    rows.push_back(e.path().filename().string() + " " + std::to_string(size) + " " +
                   std::to_string(mtime));
  }
  std::sort(rows.begin(), rows.end());
  std::string out = folder + ":";
  for (const std::string& r : rows) out += "\n  " + r;
  return out;
}

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ULL) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

// Latent frames [16, h, w] (c, y, x), stacked into a [1, 16, T, h, w] tensor.
using LatentFrame = std::vector<float>;

OwnedTensor stack_frames(const std::vector<const LatentFrame*>& frames, int64_t h, int64_t w) {
  const int64_t t = static_cast<int64_t>(frames.size()), hw = h * w;
  OwnedTensor out(DType::F32, Shape{1, kFramePackLatentChannels, t, h, w});
  float* o = out.t.ptr<float>();
  for (int64_t c = 0; c < kFramePackLatentChannels; ++c)
    for (int64_t f = 0; f < t; ++f)
      std::memcpy(o + (c * t + f) * hw, frames[f]->data() + c * hw, hw * sizeof(float));
  return out;
}

std::vector<LatentFrame> split_frames(const float* x, int64_t t, int64_t h, int64_t w) {
  const int64_t hw = h * w;
  std::vector<LatentFrame> out(t, LatentFrame(kFramePackLatentChannels * hw));
  for (int64_t c = 0; c < kFramePackLatentChannels; ++c)
    for (int64_t f = 0; f < t; ++f)
      std::memcpy(out[f].data() + c * hw, x + (c * t + f) * hw, hw * sizeof(float));
  return out;
}

std::vector<float> to_host_f32(Backend& be, const Tensor& t) {
  OwnedTensor c(DType::F32, t.shape);
  be.copy(t, c.t);
  return std::vector<float>(c.t.ptr<float>(), c.t.ptr<float>() + t.numel());
}

}  // namespace

std::string_view framepack_variant_name(FramePackVariant v) {
  return v == FramePackVariant::kF1 ? "f1" : "original";
}

std::optional<FramePackVariant> find_framepack_variant(std::string_view name) {
  if (name == "original") return FramePackVariant::kOriginal;
  if (name == "f1") return FramePackVariant::kF1;
  return std::nullopt;
}

std::span<const FramePackBucket> framepack_buckets_640() { return kBuckets640; }

FramePackBucket find_framepack_bucket(int height, int width,
                                      std::span<const FramePackBucket> buckets) {
  FLICK_CHECK(!buckets.empty());
  int64_t best_metric = INT64_MAX;
  FramePackBucket best = buckets.front();
  for (const FramePackBucket& b : buckets) {
    const int64_t metric =
        std::llabs(static_cast<int64_t>(height) * b.width - static_cast<int64_t>(width) * b.height);
    if (metric <= best_metric) {  // bucket_tools.py:25: `<=`, the later bucket wins a tie
      best_metric = metric;
      best = b;
    }
  }
  return best;
}

Frame framepack_resize_and_center_crop(const FrameView& image, int width, int height) {
  if (image.width == width && image.height == height) {
    Frame same{width, height, {}};
    same.rgb.resize(3ULL * width * height);
    for (int y = 0; y < height; ++y)
      std::memcpy(same.rgb.data() + 3LL * width * y, image.rgb + image.stride * y, 3ULL * width);
    return same;
  }
  const double scale = std::max(static_cast<double>(width) / image.width,
                                static_cast<double>(height) / image.height);
  const int rw = static_cast<int>(round_half_even(image.width * scale));
  const int rh = static_cast<int>(round_half_even(image.height * scale));
  const Frame resized = pil_resize(image, rw, rh, PilFilter::kLanczos);
  // Image.crop rounds the float box with round() (utils.py:55-59) [P].
  CropBox box;
  box.x0 = static_cast<int>(round_half_even((rw - width) / 2.0));
  box.y0 = static_cast<int>(round_half_even((rh - height) / 2.0));
  box.x1 = static_cast<int>(round_half_even((rw + width) / 2.0));
  box.y1 = static_cast<int>(round_half_even((rh + height) / 2.0));
  return crop(resized.view(), box);
}

int64_t framepack_section_count(double seconds, int latent_window) {
  const double sections = (seconds * 30) / (latent_window * 4);
  return static_cast<int64_t>(std::max(round_half_even(sections), 1.0));
}

int64_t framepack_video_frames(int64_t sections, int latent_window) {
  return 4 * (latent_window * sections + 1) - 3;
}

std::vector<FramePackSection> framepack_sections(FramePackVariant variant, int64_t sections,
                                                 int latent_window) {
  std::vector<FramePackSection> out;
  const int64_t lws = latent_window;
  auto range = [](int64_t start, int64_t n) {
    std::vector<int64_t> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = start + i;
    return v;
  };
  if (variant == FramePackVariant::kF1) {
    // demo_gradio_f1.py:222-223: [start 0 | 4x 1..16 | 2x 17, 18 | 1x 19 | latents 20..]
    for (int64_t i = 0; i < sections; ++i) {
      FramePackSection s;
      s.index = i;
      s.last = i + 1 == sections;
      s.clean_4x_indices = range(1, kClean4x);
      s.clean_2x_indices = range(1 + kClean4x, kClean2x);
      s.clean_indices = {0, 1 + kClean4x + kClean2x};
      s.latent_indices = range(2 + kClean4x + kClean2x, lws);
      out.push_back(std::move(s));
    }
    return out;
  }
  std::vector<int64_t> paddings;
  if (sections > 4) {  // demo_gradio.py:189-194
    paddings.push_back(3);
    for (int64_t i = 0; i < sections - 3; ++i) paddings.push_back(2);
    paddings.push_back(1);
    paddings.push_back(0);
  } else {
    for (int64_t p = sections - 1; p >= 0; --p) paddings.push_back(p);
  }
  for (size_t i = 0; i < paddings.size(); ++i) {
    FramePackSection s;
    s.index = static_cast<int64_t>(i);
    s.padding = paddings[i];
    s.last = paddings[i] == 0;
    const int64_t p = paddings[i] * lws;
    // arange(1 + p + lws + 1 + 2 + 16) split [1, p, lws, 1, 2, 16] (demo_gradio.py:206-208)
    s.latent_indices = range(1 + p, lws);
    s.clean_indices = {0, 1 + p + lws};
    s.clean_2x_indices = range(2 + p + lws, kClean2x);
    s.clean_4x_indices = range(2 + p + lws + kClean2x, kClean4x);
    out.push_back(std::move(s));
  }
  return out;
}

FramePackPaths FramePackPaths::resolved() const {
  FramePackPaths r = *this;
  for (auto [field, name] :
       {std::pair{&r.transformer, "transformer"}, std::pair{&r.text_encoder, "text_encoder"},
        std::pair{&r.text_encoder_2, "text_encoder_2"}, std::pair{&r.tokenizer, "tokenizer"},
        std::pair{&r.tokenizer_2, "tokenizer_2"}, std::pair{&r.vae, "vae"},
        std::pair{&r.image_encoder, "image_encoder"}}) {
    if (field->empty()) *field = join_path(weights, name);
  }
  return r;
}

Status validate_framepack_input(const FramePackOptions& options, const FramePackInput& input) {
  if (input.image.width < 1 || input.image.height < 1 ||
      input.image.rgb.size() != 3ULL * input.image.width * input.image.height)
    return invalid_input("the start image is empty or not RGB8");
  if (!std::isfinite(input.seconds) || input.seconds <= 0 || input.seconds > kFramePackMaxSeconds)
    return invalid_input("seconds must be in (0, " + std::to_string(int(kFramePackMaxSeconds)) +
                         "], got " + std::to_string(input.seconds));
  if (input.steps < 1 || input.steps > kFramePackMaxSteps)
    return invalid_input("steps must be in 1 .. " + std::to_string(kFramePackMaxSteps) + ", got " +
                         std::to_string(input.steps));
  if (!std::isfinite(input.distilled_guidance) || input.distilled_guidance < 0 ||
      input.distilled_guidance > 100)
    return invalid_input("distilled_guidance must be in 0 .. 100, got " +
                         std::to_string(input.distilled_guidance));
  for (const FramePackBucket& b : options.buckets) {
    if (b.height < 16 || b.width < 16 || b.height % 16 != 0 || b.width % 16 != 0)
      return invalid_input("bucket " + std::to_string(b.height) + "x" + std::to_string(b.width) +
                           " (h x w) is not a multiple of 16 (VAE 8x, DiT patch 2)");
  }
  if (options.latent_window < 1) return invalid_input("latent_window must be >= 1");
  return ok_status();
}

namespace framepack {

std::vector<float> soft_append(const std::vector<float>& a, int64_t ta, const std::vector<float>& b,
                               int64_t tb, int64_t plane, int64_t overlap) {
  FLICK_CHECK(ta >= overlap && tb >= overlap && overlap >= 1);
  FLICK_CHECK(a.size() == static_cast<size_t>(3 * ta * plane) &&
              b.size() == static_cast<size_t>(3 * tb * plane));
  const int64_t t = ta + tb - overlap;
  std::vector<float> out(3 * t * plane);
  // torch.linspace(1, 0, overlap, dtype=float16): 1 - k / (overlap - 1),
  // exact in fp16 for overlap 33 (multiples of 1/32); computed as
  // linspace's fp32 step and rounded for other overlaps.
  std::vector<float> w = hunyuan::torch_linspace(1.f, 0.f, overlap);
  for (float& v : w) v = round_f16(v);
  for (int64_t c = 0; c < 3; ++c) {
    const float* pa = a.data() + c * ta * plane;
    const float* pb = b.data() + c * tb * plane;
    float* po = out.data() + c * t * plane;
    std::memcpy(po, pa, (ta - overlap) * plane * sizeof(float));
    for (int64_t k = 0; k < overlap; ++k) {
      const float wk = w[k], vk = round_f16(stored(1.f - wk));
      const float* xa = pa + (ta - overlap + k) * plane;
      const float* xb = pb + k * plane;
      float* xo = po + (ta - overlap + k) * plane;
      for (int64_t i = 0; i < plane; ++i) {
        // weights * history + (1 - weights) * current: three fp16 roundings (utils.py:260)
        const float p = round_f16(stored(wk * xa[i]));
        const float q = round_f16(stored(vk * xb[i]));
        xo[i] = round_f16(stored(p + q));
      }
    }
    std::memcpy(po + ta * plane, pb + overlap * plane, (tb - overlap) * plane * sizeof(float));
  }
  return out;
}

Frame to_rgb8(const std::vector<float>& planes, int64_t frames, int64_t t, int height, int width) {
  const int64_t plane = static_cast<int64_t>(height) * width;
  Frame f{width, height, std::vector<uint8_t>(3 * plane)};
  for (int c = 0; c < 3; ++c) {
    const float* src = planes.data() + (c * frames + t) * plane;
    for (int64_t i = 0; i < plane; ++i) {
      // torch.clamp(x.float(), -1, 1) * 127.5 + 127.5, .to(uint8) truncates (utils.py:276-277)
      const float v = std::min(std::max(src[i], -1.f), 1.f);
      const float y = stored(stored(v * 127.5f) + 127.5f);
      f.rgb[3 * i + c] = static_cast<uint8_t>(static_cast<int>(y));
    }
  }
  return f;
}

std::string prompt_cache_file(const std::string& dir, const std::string& key) {
  const uint64_t h = fnv1a(key.data(), key.size());
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.fpprompt", static_cast<unsigned long long>(h));
  return join_path(dir, name);
}

namespace {
constexpr char kCacheMagic[8] = {'F', 'L', 'K', 'F', 'P', 'P', 'C', '1'};

template <typename T>
void put(std::vector<uint8_t>& out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}
}  // namespace

// Layout: magic, u64 key length, key, i64 tokens, i64 llama_dim, i64
// pooled_dim, the f32 values (llama then pooled), u64 FNV-1a of all before.
Status write_prompt_cache(const std::string& path, const std::string& key,
                          const PromptEncoding& enc) {
  std::vector<uint8_t> out(kCacheMagic, kCacheMagic + 8);
  put(out, static_cast<uint64_t>(key.size()));
  out.insert(out.end(), key.begin(), key.end());
  put(out, enc.tokens);
  put(out, enc.llama_dim);
  put(out, static_cast<int64_t>(enc.pooled.size()));
  const auto* l = reinterpret_cast<const uint8_t*>(enc.llama.data());
  out.insert(out.end(), l, l + enc.llama.size() * sizeof(float));
  const auto* p = reinterpret_cast<const uint8_t*>(enc.pooled.data());
  out.insert(out.end(), p, p + enc.pooled.size() * sizeof(float));
  put(out, fnv1a(out.data(), out.size()));
  FLICK_TRY(ensure_dir(parent_dir(path)));
  return write_file_atomic(path, out.data(), out.size());
}

std::optional<PromptEncoding> read_prompt_cache(const std::string& path, const std::string& key) {
  if (!is_file(path)) return std::nullopt;
  Expected<std::vector<uint8_t>> file = read_file(path);
  if (!file.ok()) return std::nullopt;
  const std::vector<uint8_t>& d = *file;
  size_t pos = 0;
  auto take = [&](void* dst, size_t n) {
    if (pos + n > d.size()) return false;
    std::memcpy(dst, d.data() + pos, n);
    pos += n;
    return true;
  };
  char magic[8];
  uint64_t key_len = 0;
  if (!take(magic, 8) || std::memcmp(magic, kCacheMagic, 8) != 0 || !take(&key_len, 8) ||
      key_len != key.size() || pos + key_len > d.size() ||
      std::memcmp(d.data() + pos, key.data(), key_len) != 0)
    return std::nullopt;
  pos += key_len;
  PromptEncoding enc;
  int64_t pooled_dim = 0;
  if (!take(&enc.tokens, 8) || !take(&enc.llama_dim, 8) || !take(&pooled_dim, 8) ||
      enc.tokens < 1 || enc.llama_dim < 1 || pooled_dim < 1 || enc.tokens > (1 << 20) ||
      enc.llama_dim > (1 << 20) || pooled_dim > (1 << 20))
    return std::nullopt;
  const size_t values = static_cast<size_t>(enc.tokens * enc.llama_dim + pooled_dim);
  if (d.size() != pos + values * sizeof(float) + 8) return std::nullopt;
  uint64_t sum = 0;
  std::memcpy(&sum, d.data() + d.size() - 8, 8);
  if (sum != fnv1a(d.data(), d.size() - 8)) return std::nullopt;
  enc.llama.resize(enc.tokens * enc.llama_dim);
  enc.pooled.resize(pooled_dim);
  take(enc.llama.data(), enc.llama.size() * sizeof(float));
  take(enc.pooled.data(), enc.pooled.size() * sizeof(float));
  return enc;
}

}  // namespace framepack

struct FramePackPipeline::Impl {
  FramePackOptions opt;
  FramePackPaths paths;
  Backend* be = nullptr;

  std::optional<llama::LlamaTokenizer> llama_tok;
  std::optional<clip::ClipTokenizer> clip_tok;
  std::string llama_weights, clip_weights;  // the text encoders' files, loaded per job
  std::string encoder_identity;             // of the text encoder and tokenizer files

  // Stores first: components hold views into them and are destroyed first.
  WeightStore vae_store, siglip_store;
  hunyuan::FramePackDitConfig dit_cfg;
  std::optional<hunyuan::FramePackDitModel> dit;
  std::optional<HunyuanVae> vae;
  std::optional<siglip::SiglipVision> siglip;

  std::string last_key;  // the previous job's prompt encoding, kept in memory
  framepack::PromptEncoding last_encoding;

  Status load();
  Status ensure_dit() {
    if (dit) return ok_status();
    // Through the plan cache if configured (the DiT names its source:
    // open_framepack_dit); a directory that cannot be made loads without it.
    std::optional<PlanCache> cache = open_plan_cache(opt.plan_cache, "FramePack");
    PlanCacheScope scope(cache ? &*cache : nullptr, plan_cache_platform(*be));
    FLICK_ASSIGN_OR_RETURN(hunyuan::FramePackDitModel d,
                           hunyuan::open_framepack_dit(paths.transformer, *be, opt.precision));
    dit.emplace(std::move(d));
    if (cache) log_info("FramePack: plan cache " + cache->summary());
    return ok_status();
  }
  Expected<framepack::PromptEncoding> encode_prompt(const std::string& prompt);
  Status run(const FramePackInput& in, FrameSink& sink, const RunContext& ctx, const Tap& tap);
};

Status FramePackPipeline::Impl::load() {
  paths = opt.paths.resolved();
  const Precision p = framepack::framepack_kept_precision(opt.precision);  // VAE, SigLIP
  // Tokenizers (small) and the text encoders' configs now, so that a broken
  // download fails at load, not at the first uncached prompt.
  FLICK_TRY(require_dir(paths.tokenizer, "tokenizer"));
  FLICK_TRY(require_file(join_path(paths.tokenizer, "tokenizer.json"), "LLaMA tokenizer"));
  FLICK_ASSIGN_OR_RETURN(llama::LlamaTokenizer lt,
                         llama::LlamaTokenizer::load(join_path(paths.tokenizer, "tokenizer.json")));
  llama_tok.emplace(std::move(lt));
  FLICK_TRY(require_dir(paths.tokenizer_2, "tokenizer_2"));
  FLICK_TRY(require_file(join_path(paths.tokenizer_2, "vocab.json"), "CLIP tokenizer"));
  FLICK_TRY(require_file(join_path(paths.tokenizer_2, "merges.txt"), "CLIP tokenizer"));
  FLICK_ASSIGN_OR_RETURN(clip::ClipTokenizer ct,
                         clip::ClipTokenizer::load_hf_dir(paths.tokenizer_2));
  clip_tok.emplace(std::move(ct));
  FLICK_ASSIGN_OR_RETURN(llama_weights,
                         component_weights(paths.text_encoder, "model", "text_encoder (LLaMA)"));
  FLICK_ASSIGN_OR_RETURN(
      clip_weights, component_weights(paths.text_encoder_2, "model", "text_encoder_2 (CLIP-L)"));
  {
    FLICK_ASSIGN_OR_RETURN(WeightStore s, WeightStore::open({llama_weights}));
    FLICK_ASSIGN_OR_RETURN(llama::LlamaConfig c, llama::LlamaConfig::detect(
                                                     llama::llama_model_view(s),
                                                     join_path(paths.text_encoder, "config.json")));
    (void)c;
  }
  {
    FLICK_ASSIGN_OR_RETURN(WeightStore s, WeightStore::open({clip_weights}));
    FLICK_ASSIGN_OR_RETURN(
        clip::ClipTextConfig c,
        clip::ClipTextConfig::detect(clip::clip_text_model_view(s),
                                     join_path(paths.text_encoder_2, "config.json")));
    (void)c;
  }
  encoder_identity = folder_identity(paths.text_encoder) + "\n" +
                     folder_identity(paths.text_encoder_2) + "\n" +
                     folder_identity(paths.tokenizer) + "\n" + folder_identity(paths.tokenizer_2);

  // The DiT: its config and full layout checked now; loaded now and kept
  // (keep_dit_loaded), or loaded per job once the text encoders are gone.
  // `transformer` may be a diffusers folder or one .safetensors file
  // (Kijai's FramePackI2V_HY_fp8_e4m3fn: framepack_dit.h).
  {
    FLICK_ASSIGN_OR_RETURN(const hunyuan::FramePackDitFiles files,
                           hunyuan::framepack_dit_files(paths.transformer));
    FLICK_ASSIGN_OR_RETURN(WeightStore s, WeightStore::open({files.weights}));
    FLICK_ASSIGN_OR_RETURN(dit_cfg, hunyuan::FramePackDitConfig::detect(s.root(), files.config));
    FLICK_TRY(hunyuan::check_framepack_dit_layout(s.root(), dit_cfg));
  }
  if (dit_cfg.in_channels != kFramePackLatentChannels)
    return invalid_input("FramePack: the transformer takes " + std::to_string(dit_cfg.in_channels) +
                         " latent channels, the pipeline 16");
  if (opt.keep_dit_loaded) FLICK_TRY(ensure_dit());

  FLICK_ASSIGN_OR_RETURN(const std::string vae_file,
                         component_weights(paths.vae, "diffusion_pytorch_model", "vae"));
  FLICK_ASSIGN_OR_RETURN(vae_store, WeightStore::open({vae_file}));
  FLICK_ASSIGN_OR_RETURN(
      HunyuanVaeConfig vc,
      HunyuanVaeConfig::detect(vae_store.root(), join_path(paths.vae, "config.json")));
  if (!vc.has_encoder || !vc.has_decoder)
    return invalid_input("FramePack: the vae in '" + paths.vae +
                         "' needs both encoder and decoder");
  FLICK_ASSIGN_OR_RETURN(HunyuanVae v, HunyuanVae::load(vae_store.root(), vc, *be, p));
  vae.emplace(std::move(v));
  vae->set_tiling(opt.vae_spatial_tiling ? HunyuanVaeTiling::low_vram()
                                         : HunyuanVaeTiling::high_vram());
  FLICK_TRY(vae_store.check_all_used());

  FLICK_ASSIGN_OR_RETURN(const std::string sig_file,
                         component_weights(paths.image_encoder, "model", "image_encoder (SigLIP)"));
  FLICK_ASSIGN_OR_RETURN(siglip_store, WeightStore::open({sig_file}));
  const WeightView sv = siglip::siglip_vision_model_view(siglip_store);
  FLICK_ASSIGN_OR_RETURN(
      siglip::SiglipVisionConfig sc,
      siglip::SiglipVisionConfig::detect(sv, join_path(paths.image_encoder, "config.json")));
  FLICK_ASSIGN_OR_RETURN(siglip::SiglipVision s, siglip::SiglipVision::load(sv, sc, *be, p));
  siglip.emplace(std::move(s));
  FLICK_TRY(siglip_store.check_all_used());

  const hunyuan::FramePackDitConfig& dc = dit_cfg;
  if (dc.image_dim != sc.width)
    return invalid_input("FramePack: the transformer's image projection takes " +
                         std::to_string(dc.image_dim) + " channels, the image encoder gives " +
                         std::to_string(sc.width));
  return ok_status();
}

Expected<framepack::PromptEncoding> FramePackPipeline::Impl::encode_prompt(
    const std::string& prompt) {
  const std::string key = "flick framepack prompt v1\nprecision " +
                          lower(precision_name(opt.precision)) + "\n" + encoder_identity +
                          "\nprompt " + prompt;
  if (key == last_key) return last_encoding;
  const std::string file =
      opt.prompt_cache.empty() ? "" : framepack::prompt_cache_file(opt.prompt_cache, key);
  if (!file.empty()) {
    if (std::optional<framepack::PromptEncoding> hit = framepack::read_prompt_cache(file, key)) {
      log_debug("FramePack: prompt encoding from " + file);
      last_key = key;
      last_encoding = *hit;
      return std::move(*hit);
    }
  }
  framepack::PromptEncoding enc;
  {  // LLaMA: hidden_states[-3] of the templated prompt, rows from crop_start
    FLICK_ASSIGN_OR_RETURN(hunyuan::LlamaPrompt lp, hunyuan::llama_prompt(*llama_tok, prompt));
    FLICK_ASSIGN_OR_RETURN(WeightStore store, WeightStore::open({llama_weights}));
    const WeightView mv = llama::llama_model_view(store);
    FLICK_ASSIGN_OR_RETURN(
        llama::LlamaConfig cfg,
        llama::LlamaConfig::detect(mv, join_path(paths.text_encoder, "config.json")));
    const int64_t n = static_cast<int64_t>(lp.ids.size());
    FLICK_ASSIGN_OR_RETURN(
        llama::LlamaTextEncoder te,
        llama::LlamaTextEncoder::load(mv, cfg, *be, opt.precision, n, cfg.layers - 2));
    FLICK_ASSIGN_OR_RETURN(Tensor hidden, te.forward(lp.ids));  // [1, n, C]
    if (n <= lp.crop_start)
      return invalid_input("FramePack: the prompt template left no prompt tokens");
    enc.tokens = n - lp.crop_start;
    enc.llama_dim = cfg.hidden;
    enc.llama = to_host_f32(*be, hidden.slice(1, lp.crop_start, enc.tokens));
  }
  {  // CLIP-L pooler_output of the 77 padded ids
    FLICK_ASSIGN_OR_RETURN(std::vector<int32_t> ids, clip_tok->encode_padded(prompt, 77));
    FLICK_ASSIGN_OR_RETURN(WeightStore store, WeightStore::open({clip_weights}));
    const WeightView tv = clip::clip_text_model_view(store);
    FLICK_ASSIGN_OR_RETURN(
        clip::ClipTextConfig cfg,
        clip::ClipTextConfig::detect(tv, join_path(paths.text_encoder_2, "config.json")));
    FLICK_ASSIGN_OR_RETURN(clip::ClipTextModel m,
                           clip::ClipTextModel::load(
                               tv, cfg, *be, framepack::framepack_kept_precision(opt.precision)));
    FLICK_ASSIGN_OR_RETURN(clip::ClipTextModel::Output out, m.forward(ids));
    enc.pooled = to_host_f32(*be, out.pooled);
  }
  // The encoders and their stores are gone here, before the DiT samples.
  log_memory("prompt encoded (LLaMA, CLIP-L freed)");
  if (!file.empty()) {
    if (Status s = framepack::write_prompt_cache(file, key, enc); !s.ok())
      log_warning("FramePack: prompt cache not written: " + s.message());
  }
  last_key = key;
  last_encoding = enc;
  return enc;
}

Status FramePackPipeline::Impl::run(const FramePackInput& in, FrameSink& sink,
                                    const RunContext& ctx, const Tap& tap) {
  FLICK_TRY(validate_framepack_input(opt, in));
  const int64_t lws = opt.latent_window;
  const std::span<const FramePackBucket> buckets =
      opt.buckets.empty() ? framepack_buckets_640() : std::span<const FramePackBucket>(opt.buckets);
  const FramePackBucket bucket = find_framepack_bucket(in.image.height, in.image.width, buckets);
  const int H = bucket.height, W = bucket.width;
  const int64_t h = H / kVaeStride, w = W / kVaeStride, plane = int64_t{H} * W;
  const Frame image = framepack_resize_and_center_crop(in.image.view(), W, H);
  if (tap) {
    tap("image", Tensor::view(const_cast<uint8_t*>(image.rgb.data()), DType::U8, Shape{H, W, 3}));
  }

  // ---- conditioning ----
  FLICK_ASSIGN_OR_RETURN(framepack::PromptEncoding enc, encode_prompt(in.prompt));
  const hunyuan::FramePackDitConfig& dc = dit_cfg;
  if (enc.llama_dim != dc.text_dim || static_cast<int64_t>(enc.pooled.size()) != dc.pooled_dim)
    return invalid_input("FramePack: the text encoders give " + std::to_string(enc.llama_dim) +
                         " / " + std::to_string(enc.pooled.size()) +
                         " channels, the transformer takes " + std::to_string(dc.text_dim) + " / " +
                         std::to_string(dc.pooled_dim));
  const Tensor llama =
      Tensor::view(enc.llama.data(), DType::F32, Shape{1, enc.tokens, enc.llama_dim});
  const Tensor pooled = Tensor::view(enc.pooled.data(), DType::F32,
                                     Shape{1, static_cast<int64_t>(enc.pooled.size())});
  if (tap) {
    tap("llama", llama);
    tap("pooled", pooled);
  }

  // Start latent: uint8 / 127.5 - 1 in fp32 (two roundings), [1, 3, 1, H, W];
  // the posterior mean (the reference samples the posterior from the global
  // torch RNG, not from the seed: spec 1.3 [P]).
  OwnedTensor pixels(DType::F32, Shape{1, 3, 1, H, W});
  for (int c = 0; c < 3; ++c)
    for (int64_t i = 0; i < plane; ++i)
      pixels.t.ptr<float>()[c * plane + i] =
          stored(stored(static_cast<float>(image.rgb[3 * i + c]) / kVaeDivisor) - 1.f);
  FLICK_ASSIGN_OR_RETURN(OwnedTensor start_t, vae->start_latent(pixels));  // [1, 16, 1, h, w]
  const LatentFrame start = to_host_f32(*be, start_t.t);
  if (tap) tap("start_latent", start_t.t);

  FLICK_ASSIGN_OR_RETURN(Tensor sig, siglip->forward_rgb(image.rgb.data(), H, W));
  std::vector<float> image_emb = to_host_f32(*be, sig);  // [1, 729, C]
  const Tensor image_embeddings = Tensor::view(image_emb.data(), DType::F32, sig.shape);
  if (tap) tap("image_embeddings", image_embeddings);

  // ---- sections ----
  // Without keep_dit_loaded the DiT is loaded here, after the text encoders
  // were freed, and freed when the job ends (however it ends).
  struct DitRelease {
    Impl* impl;
    ~DitRelease() {
      if (!impl->opt.keep_dit_loaded) impl->dit.reset();
    }
  } release_dit{this};
  FLICK_TRY(ensure_dit());
  log_memory("DiT resident");
  const int64_t n_sections = framepack_section_count(in.seconds, static_cast<int>(lws));
  const int64_t total_frames = framepack_video_frames(n_sections, static_cast<int>(lws));
  const std::vector<FramePackSection> plan =
      framepack_sections(in.variant, n_sections, static_cast<int>(lws));
  const bool f1 = in.variant == FramePackVariant::kF1;
  const int64_t overlap = 4 * lws - 3;
  const float guidance = hunyuan::distilled_guidance(in.distilled_guidance);
  // One generator, consumed across sections (demo_gradio.py:180, k_diffusion_hunyuan.py:61).
  TorchGenerator gen(in.seed);

  // History latents, oldest first in time. original: 1 + 2 + 16 zero frames
  // that the generated sections are prepended to; f1: 16 + 2 + 1 zeros, then
  // the start latent, sections appended.
  const LatentFrame zero(kFramePackLatentChannels * h * w, 0.f);
  std::vector<LatentFrame> history(1 + kClean2x + kClean4x, zero);
  int64_t generated = 0;  // total_generated_latent_frames
  if (f1) {
    history.push_back(start);
    generated = 1;
  }

  FLICK_TRY(sink.begin(W, H, kFramePackFps, total_frames));
  // Pixels not yet final, fp16 values [3, T, H, W]: original keeps the
  // video's first `overlap` frames (the next section blends into them) and
  // the final frames after them as uint8; f1 keeps the last `overlap`.
  std::vector<float> pending;
  int64_t pending_t = 0;
  std::vector<Frame> held;  // original: final frames after `pending`, in time order
  int64_t written = 0;
  auto write_frames = [&](const std::vector<float>& planes, int64_t t, int64_t from,
                          int64_t to) -> Status {
    for (int64_t i = from; i < to; ++i) {
      const Frame f = framepack::to_rgb8(planes, t, i, H, W);
      FLICK_TRY(sink.write(f.view()));
      ++written;
    }
    return ok_status();
  };

  for (const FramePackSection& s : plan) {
    if (ctx.stop_requested())
      return interrupted("FramePack: stopped before section " + std::to_string(s.index + 1) +
                         " of " + std::to_string(n_sections));
    // Clean latents from the history (demo_gradio.py:210-212, demo_gradio_f1.py:225-226).
    const int64_t n_hist = static_cast<int64_t>(history.size());
    std::vector<const LatentFrame*> c1, c2, c4;
    if (f1) {
      for (int64_t i = n_hist - 19; i < n_hist - 3; ++i) c4.push_back(&history[i]);
      for (int64_t i = n_hist - 3; i < n_hist - 1; ++i) c2.push_back(&history[i]);
      c1 = {&start, &history[n_hist - 1]};
    } else {
      c1 = {&start, &history[0]};
      for (int64_t i = 1; i < 3; ++i) c2.push_back(&history[i]);
      for (int64_t i = 3; i < 19; ++i) c4.push_back(&history[i]);
    }
    const OwnedTensor clean = stack_frames(c1, h, w), clean_2x = stack_frames(c2, h, w),
                      clean_4x = stack_frames(c4, h, w);

    // initialize_teacache(enable_teacache, num_steps=steps) per section (demo_gradio.py:215-218).
    std::optional<hunyuan::DitTeaCache> teacache;
    if (in.teacache) teacache.emplace(in.steps);
    hunyuan::VelocityFn velocity = [&](std::span<const float> xb, float timestep, int,
                                       std::span<float> v) -> Status {
      hunyuan::FramePackDitInputs di;
      di.latents.noisy = {Tensor::view(const_cast<float*>(xb.data()), DType::F32,
                                       Shape{1, kFramePackLatentChannels, lws, h, w}),
                          s.latent_indices};
      di.latents.clean = {clean.t, s.clean_indices};
      di.latents.clean_2x = {clean_2x.t, s.clean_2x_indices};
      di.latents.clean_4x = {clean_4x.t, s.clean_4x_indices};
      di.timestep = timestep;
      di.guidance = guidance;
      di.text = llama;
      di.pooled = pooled;
      di.image_embeddings = image_embeddings;
      FLICK_ASSIGN_OR_RETURN(OwnedTensor out,
                             dit->dit.forward(di, {}, teacache ? &*teacache : nullptr));
      FLICK_CHECK(static_cast<size_t>(out.t.numel()) == v.size());
      std::memcpy(v.data(), out.t.ptr<float>(), v.size() * sizeof(float));
      return ok_status();
    };
    hunyuan::SectionSampling sampling;
    sampling.steps = in.steps;
    hunyuan::StepCallback on_step;
    if (tap) {
      on_step = [&](const hunyuan::UniPcStep& st) {
        const std::string base =
            "section" + std::to_string(s.index) + ".step" + std::to_string(st.index);
        const Shape shape{1, kFramePackLatentChannels, lws, h, w};
        tap(base + ".x", Tensor::view(const_cast<float*>(st.x.data()), DType::F32, shape));
        tap(base + ".denoised",
            Tensor::view(const_cast<float*>(st.denoised.data()), DType::F32, shape));
      };
    }
    FLICK_ASSIGN_OR_RETURN(std::vector<float> x,
                           hunyuan::sample_section(velocity, gen, lws, h, w, sampling, on_step));
    log_memory("section " + std::to_string(s.index) + " sampled");
    // Not needed again in this job: without keep_dit_loaded the DiT is freed
    // before the last section's VAE decode, which at the released size does
    // not fit beside it in 24 GB (bench/RESULTS.md, FramePack).
    if (!opt.keep_dit_loaded && s.index + 1 == n_sections) dit.reset();
    if (tap) {
      tap("section" + std::to_string(s.index) + ".latents",
          Tensor::view(x.data(), DType::F32, Shape{1, kFramePackLatentChannels, lws, h, w}));
    }
    std::vector<LatentFrame> fresh = split_frames(x.data(), lws, h, w);
    if (f1) {
      for (LatentFrame& f : fresh) history.push_back(std::move(f));
    } else {
      if (s.last) fresh.insert(fresh.begin(), start);
      history.insert(history.begin(), std::make_move_iterator(fresh.begin()),
                     std::make_move_iterator(fresh.end()));
    }
    const int64_t added = f1 ? lws : static_cast<int64_t>(fresh.size());
    generated += added;

    // Decode: everything the first time, then the newest 2 lws latents (+1
    // with the start latent in the original's last section) (demo_gradio.py:282-292).
    const bool first = pending_t == 0 && held.empty() && written == 0;
    const int64_t n_hist2 = static_cast<int64_t>(history.size());
    const int64_t count = first ? generated : (!f1 && s.last ? 2 * lws + 1 : 2 * lws);
    std::vector<const LatentFrame*> dec;
    for (int64_t i = 0; i < count; ++i)
      dec.push_back(f1 ? &history[n_hist2 - count + i] : &history[i]);
    const OwnedTensor z = stack_frames(dec, h, w);
    FLICK_ASSIGN_OR_RETURN(OwnedTensor decoded, vae->decode_latents(z.t));  // [1, 3, T, H, W]
    log_memory("section " + std::to_string(s.index) + " decoded");
    const int64_t t_cur = decoded.t.dim(2);
    // The demo's VAE is fp16: its pixels, and the blend, are fp16 [P].
    std::vector<float> cur = to_host_f32(*be, decoded.t);
    for (float& v : cur) v = round_f16(v);

    std::vector<float> video;
    int64_t t_video = 0;
    if (first) {
      video = std::move(cur);
      t_video = t_cur;
    } else if (f1) {
      video = framepack::soft_append(pending, pending_t, cur, t_cur, plane, overlap);
      t_video = pending_t + t_cur - overlap;
    } else {
      video = framepack::soft_append(cur, t_cur, pending, pending_t, plane, overlap);
      t_video = t_cur + pending_t - overlap;
    }
    // Keep the `overlap` frames the next section blends into; the rest is final.
    const int64_t keep = std::min(overlap, t_video);
    const int64_t keep_from = f1 ? t_video - keep : 0;
    if (f1) {
      FLICK_TRY(write_frames(video, t_video, 0, keep_from));
    } else {
      std::vector<Frame> fin;
      for (int64_t i = keep; i < t_video; ++i)
        fin.push_back(framepack::to_rgb8(video, t_video, i, H, W));
      held.insert(held.begin(), std::make_move_iterator(fin.begin()),
                  std::make_move_iterator(fin.end()));
    }
    pending.assign(3 * keep * plane, 0.f);
    for (int c = 0; c < 3; ++c)
      std::memcpy(pending.data() + c * keep * plane,
                  video.data() + (c * t_video + keep_from) * plane, keep * plane * sizeof(float));
    pending_t = keep;
    if (ctx.progress) ctx.progress(std::min(4 * generated - 3, total_frames), total_frames);
  }
  FLICK_TRY(write_frames(pending, pending_t, 0, pending_t));
  for (const Frame& f : held) {
    FLICK_TRY(sink.write(f.view()));
    ++written;
  }
  if (written != total_frames)
    return internal_error("FramePack: wrote " + std::to_string(written) + " frames, expected " +
                          std::to_string(total_frames));
  return sink.finish();
}

FramePackPipeline::FramePackPipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FramePackPipeline::~FramePackPipeline() = default;

Expected<std::unique_ptr<FramePackPipeline>> FramePackPipeline::load(
    const FramePackOptions& options, Backend& backend) {
  auto impl = std::make_unique<Impl>();
  impl->opt = options;
  impl->be = &backend;
  // int8 needs AVX-512 VNNI / AMX on the CPU backend: refused now, not at the
  // first job (the DiT may load per job, the LLaMA per uncached prompt).
  FLICK_TRY(check_wan_precision(options.precision, backend, "FramePack"));
  if (options.paths.weights.empty() &&
      (options.paths.transformer.empty() || options.paths.text_encoder.empty() ||
       options.paths.text_encoder_2.empty() || options.paths.tokenizer.empty() ||
       options.paths.tokenizer_2.empty() || options.paths.vae.empty() ||
       options.paths.image_encoder.empty()))
    return invalid_input("FramePack: no weights folder, and not every component's path given");
  FLICK_TRY(impl->load());
  log_memory("loaded");
  return std::unique_ptr<FramePackPipeline>(new FramePackPipeline(std::move(impl)));
}

const FramePackOptions& FramePackPipeline::options() const { return impl_->opt; }

std::string FramePackPipeline::precision_summary() const {
  const std::string p = lower(precision_name(impl_->opt.precision));
  const std::string k =
      lower(precision_name(framepack::framepack_kept_precision(impl_->opt.precision)));
  return p + " DiT, " + p + " LLaMA, " + k + " CLIP-L, " + k + " SigLIP, " + k + " VAE";
}

Status FramePackPipeline::validate(const FramePackInput& input) const {
  return validate_framepack_input(impl_->opt, input);
}

Status FramePackPipeline::run(const FramePackInput& input, FrameSink& sink, const RunContext& ctx,
                              const Tap& tap) {
  return impl_->run(input, sink, ctx, tap);
}

}  // namespace flick
