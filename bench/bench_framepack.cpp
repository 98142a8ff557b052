#include "bench/bench_framepack.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "models/hunyuan/framepack_dit.h"
#include "models/pipelines/framepack.h"
#include "models/pipelines/framepack_synth.h"
#include "models/wan/wan_quant.h"
#include "runtime/backend.h"
#include "runtime/plan_cache.h"
#include "runtime/profile_backend.h"
#include "runtime/weights/safetensors.h"
#include "runtime/weights/weight_store.h"

namespace flick::bench {
namespace fs = std::filesystem;

namespace {

constexpr int64_t kTextTokens = 20;    // valid LLaMA tokens of a short prompt
constexpr int64_t kImageTokens = 729;  // SigLIP so400m at 384 px
constexpr float kTimestep = 1000.f;    // the first step: bf16(sigma 1.0 * 1000)
constexpr float kGuidance = 9984.f;    // bf16(gs 10 * 1000)
constexpr int kFullDouble = 20, kFullSingle = 40;

struct PrecisionCase {
  const char* name;
  Precision precision;
};
constexpr PrecisionCase kPrecisions[] = {{"bf16", Precision::BF16}, {"int8", Precision::INT8}};

double max_rss_gb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / (1024.0 * 1024.0);  // kB -> GiB
}

// The 640 bucket with the fewest latent tokens.
FramePackBucket smallest_bucket() {
  FramePackBucket best = framepack_buckets_640().front();
  for (const FramePackBucket& b : framepack_buckets_640())
    if (int64_t{b.height} * b.width < int64_t{best.height} * best.width) best = b;
  return best;
}

// Deterministic values of unit variance (sum of four uniforms, scaled).
OwnedTensor random_tensor(Shape shape, uint64_t seed) {
  OwnedTensor t(DType::F32, shape);
  float* p = t.t.ptr<float>();
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t.t.numel(); ++i) {
    float sum = 0;
    for (int k = 0; k < 4; ++k) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      sum += static_cast<float>(s >> 40) / static_cast<float>(1ull << 24);
    }
    p[i] = (sum - 2.f) * 1.7320508f;
  }
  return t;
}

// The call's inputs: bench_inputs.safetensors of the peer, else generated.
struct Inputs {
  std::map<std::string, OwnedTensor> tensors;
  std::vector<int64_t> latent, clean, clean_2x, clean_4x;
  std::string source;

  hunyuan::FramePackDitInputs dit() const {
    hunyuan::FramePackDitInputs in;
    in.latents.noisy = {tensors.at("latents").t, latent};
    in.latents.clean = {tensors.at("clean_latents").t, clean};
    in.latents.clean_2x = {tensors.at("clean_latents_2x").t, clean_2x};
    in.latents.clean_4x = {tensors.at("clean_latents_4x").t, clean_4x};
    in.timestep = kTimestep;
    in.guidance = kGuidance;
    in.text = tensors.at("text").t;
    in.pooled = tensors.at("pooled").t;
    in.image_embeddings = tensors.at("image_embeddings").t;
    return in;
  }
};

Expected<Inputs> make_inputs(const std::string& folder, const hunyuan::FramePackDitConfig& c) {
  Inputs in;
  // Indices of the first section of a 4-section original-variant video.
  const FramePackSection s = framepack_sections(FramePackVariant::kOriginal, 4).front();
  in.latent = s.latent_indices;
  in.clean = s.clean_indices;
  in.clean_2x = s.clean_2x_indices;
  in.clean_4x = s.clean_4x_indices;
  const std::string file = (fs::path(folder) / "bench_inputs.safetensors").string();
  std::error_code ec;
  if (fs::is_regular_file(file, ec)) {
    FLICK_ASSIGN_OR_RETURN(WeightStore store, WeightStore::open({file}));
    for (const char* n : {"latents", "clean_latents", "clean_latents_2x", "clean_latents_4x",
                          "text", "pooled", "image_embeddings"}) {
      FLICK_ASSIGN_OR_RETURN(Tensor t, store.get(n));
      OwnedTensor o(t.dtype, t.shape);
      std::memcpy(o.t.data, t.data, t.nbytes());
      in.tensors.emplace(n, std::move(o));
    }
    auto indices = [&](const char* n, std::vector<int64_t>& out) -> Status {
      FLICK_ASSIGN_OR_RETURN(Tensor t, store.get(n, DTypeSet{DType::I32}));
      out.assign(t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel());
      return ok_status();
    };
    FLICK_TRY(indices("latent_indices", in.latent));
    FLICK_TRY(indices("clean_latent_indices", in.clean));
    FLICK_TRY(indices("clean_latent_2x_indices", in.clean_2x));
    FLICK_TRY(indices("clean_latent_4x_indices", in.clean_4x));
    in.source = file;
    return in;
  }
  const FramePackBucket b = smallest_bucket();
  const int64_t h = b.height / 8, w = b.width / 8;
  auto add = [&](const char* n, Shape shape) {
    in.tensors.emplace(n, random_tensor(shape, in.tensors.size() + 1));
  };
  add("latents", {1, 16, static_cast<int64_t>(in.latent.size()), h, w});
  add("clean_latents", {1, 16, static_cast<int64_t>(in.clean.size()), h, w});
  add("clean_latents_2x", {1, 16, static_cast<int64_t>(in.clean_2x.size()), h, w});
  add("clean_latents_4x", {1, 16, static_cast<int64_t>(in.clean_4x.size()), h, w});
  add("text", {1, kTextTokens, c.text_dim});
  add("pooled", {1, c.pooled_dim});
  add("image_embeddings", {1, kImageTokens, c.image_dim});
  in.source = "generated, bucket " + std::to_string(b.height) + "x" + std::to_string(b.width);
  return in;
}

// Seconds from the call's start to the end of each block (its last tap).
struct CallTimes {
  double total = 0;
  std::vector<double> double_end, single_end;
  double blocks_start = 0;  // the image projection's tap: the blocks begin
};

std::vector<BenchResult> run_precision(const std::string& folder, const PrecisionCase& p,
                                       const BenchOptions& options) {
  const std::string base = std::string("framepack.") + p.name;
  // FLICK_PROFILE=1: the per-op table (stderr) of the last call.
  std::unique_ptr<Backend> backend = profile_if_enabled(make_cpu_backend());
  ProfileBackend* profiler = as_profiler(*backend);
  std::optional<PlanCache> cache = open_plan_cache(options.plan_cache, "framepack bench");
  const double t0 = bench_now(options);
  Expected<hunyuan::FramePackDitModel> m = [&] {
    PlanCacheScope scope(cache ? &*cache : nullptr, plan_cache_platform(*backend));
    return hunyuan::open_framepack_dit(folder, *backend, p.precision);
  }();
  if (!m.ok()) return {failed_row(base + " load", m.status().message())};
  const double load = bench_now(options) - t0;
  // The load row's detail: the peak RSS so far (after the calls, unless
  // --load-only), the depth loaded and the cache's counts.
  const std::string detail = "; " + std::to_string(m->dit.config().layers) + " + " +
                             std::to_string(m->dit.config().single_layers) + " blocks" +
                             (cache ? "; plan cache " + cache->summary() : std::string());
  auto load_row = [&] {
    char rss[64];
    std::snprintf(rss, sizeof rss, "peak RSS %.2f GiB", max_rss_gb());
    return per_minute_row(base + " load", load, rss + detail);
  };
  if (options.load_only) return {load_row()};
  const hunyuan::FramePackDitConfig& c = m->dit.config();
  Expected<Inputs> inputs = make_inputs(fs::path(folder).parent_path().string(), c);
  if (!inputs.ok()) return {failed_row(base + " call", inputs.status().message())};
  const hunyuan::FramePackDitInputs in = inputs->dit();
  const int64_t h = in.latents.noisy.latents.dim(3), w = in.latents.noisy.latents.dim(4);

  const int reps = options.quick ? 1 : 2;
  CallTimes best;
  OwnedTensor out;
  for (int r = 0; r < reps; ++r) {
    if (profiler != nullptr) profiler->reset();
    CallTimes ct;
    ct.double_end.assign(static_cast<size_t>(c.layers), 0);
    ct.single_end.assign(static_cast<size_t>(c.single_layers), 0);
    const double start = bench_now(options);
    auto tap = [&](std::string_view name, const Tensor&) {
      const double now = bench_now(options) - start;
      if (name == "image_proj") ct.blocks_start = now;
      for (auto [prefix, ends] : {std::pair{std::string_view("double"), &ct.double_end},
                                  std::pair{std::string_view("single"), &ct.single_end}}) {
        if (!name.starts_with(prefix)) continue;
        const size_t i = std::strtoul(std::string(name.substr(prefix.size())).c_str(), nullptr, 10);
        if (i < ends->size()) (*ends)[i] = now;
      }
    };
    Expected<OwnedTensor> o = m->dit.forward(in, tap);
    if (!o.ok()) return {failed_row(base + " call", o.status().message())};
    ct.total = bench_now(options) - start;
    if (r == 0 || ct.total < best.total) best = ct;
    out = std::move(*o);
  }
  if (const char* dir = std::getenv("FLICK_FRAMEPACK_BENCH_OUT")) {
    const std::string path = (fs::path(dir) / ("flick_" + std::string(p.name) + ".safetensors"));
    const Status s = write_safetensors(path, {SafetensorsTensor::from_tensor("output", out.t)});
    if (!s.ok()) std::fprintf(stderr, "%s: %s\n", path.c_str(), s.message().c_str());
  }

  double prev = best.blocks_start, dsum = 0, ssum = 0;
  for (double e : best.double_end) dsum += e - prev, prev = e;
  for (double e : best.single_end) ssum += e - prev, prev = e;
  const double dmean = c.layers > 0 ? dsum / static_cast<double>(c.layers) : 0;
  const double smean = c.single_layers > 0 ? ssum / static_cast<double>(c.single_layers) : 0;
  const double outside = best.total - dsum - ssum;
  const int64_t tokens_x = in.latents.noisy.latents.dim(2) * (h / 2) * (w / 2);
  char shape[200];
  std::snprintf(shape, sizeof shape,
                "%lldx%lld latents (%lld noisy tokens), clean 1x/2x/4x %lld/%lld/%lld frames, "
                "%lld + %lld context tokens, %lld + %lld blocks; inputs %s",
                static_cast<long long>(h * 8), static_cast<long long>(w * 8),
                static_cast<long long>(tokens_x),
                static_cast<long long>(in.latents.clean.indices.size()),
                static_cast<long long>(in.latents.clean_2x.indices.size()),
                static_cast<long long>(in.latents.clean_4x.indices.size()),
                static_cast<long long>(in.image_embeddings.dim(1)),
                static_cast<long long>(in.text.dim(1)), static_cast<long long>(c.layers),
                static_cast<long long>(c.single_layers), inputs->source.c_str());
  std::vector<BenchResult> rows;
  rows.push_back(load_row());
  rows.push_back(per_minute_row(base + " call", best.total, shape));
  rows.push_back(
      per_minute_row(base + " double block", dmean, "mean of " + std::to_string(c.layers)));
  rows.push_back(
      per_minute_row(base + " single block", smean, "mean of " + std::to_string(c.single_layers)));
  rows.push_back(per_minute_row(base + " outside blocks", outside,
                                "packing, RoPE, embedders, refiner, image projection, head"));
  rows.push_back(
      per_minute_row(base + " 20+40 call", outside + kFullDouble * dmean + kFullSingle * smean,
                     "EXTRAPOLATED: outside + 20 x double + 40 x single (the released depth)"));
  if (profiler != nullptr) std::fputs(profiler->stats().table(base + " call").c_str(), stderr);
  return rows;
}

}  // namespace

std::vector<BenchResult> run_framepack_benches(const Peaks&, const BenchOptions& options) {
  std::vector<const PrecisionCase*> cases;
  for (const PrecisionCase& p : kPrecisions)
    // Opt-in: an empty filter (a plain `flick bench`) does not run these.
    if (!options.filter.empty() &&
        (std::string("framepack.") + p.name).find(options.filter) != std::string::npos)
      cases.push_back(&p);
  if (cases.empty()) return {};

  std::string weights = options.framepack_weights, temp;
  if (weights.empty()) {
    temp = (fs::temp_directory_path() / ("flick-bench-framepack-" + std::to_string(::getpid())))
               .string();
    FramePackSynthOptions o;
    o.size = FramePackSynthSize::kFull;
    o.parts = {"transformer"};
    o.dit_layers = 2;
    o.dit_single_layers = 4;
    const Status s = write_framepack_synth(temp, o);
    if (!s.ok()) {
      fs::remove_all(temp);
      return {failed_row("framepack synth", s.message())};
    }
    weights = temp;
  }
  std::error_code ec;
  const std::string folder = fs::is_directory(fs::path(weights) / "transformer", ec)
                                 ? (fs::path(weights) / "transformer").string()
                                 : weights;
  std::vector<BenchResult> out;
  for (const PrecisionCase* p : cases) {
    std::vector<BenchResult> rows = run_precision(folder, *p, options);
    out.insert(out.end(), rows.begin(), rows.end());
  }
  if (!temp.empty()) fs::remove_all(temp);
  return out;
}

}  // namespace flick::bench
