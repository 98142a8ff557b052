#include "bench/bench_mg2.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "models/pipelines/matrix_game.h"
#include "models/pipelines/mg2_synth.h"
#include "models/wan_vae/wan_vae_encoder.h"
#include "models/wan_vae/wan_vae_synthetic.h"
#include "runtime/backend.h"
#include "runtime/cpu/onednn_info.h"
#include "runtime/dtype.h"
#include "runtime/profile_backend.h"

namespace flick::bench {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kLatents = 6;  // two blocks: block 1 attends a full 6-latent window
constexpr uint64_t kSeed = 1;

struct Precisions {
  const char* name;
  Precision precision;
  Precision vae = Precision::BF16;  // the VAE's convs (Mg2Options::vae_precision)
};
// "all-int8": the INT8 DiT with the INT8 VAE convs (a name that the
// filter "mg2.int8" does not select).
constexpr Precisions kPrecisions[] = {{"bf16", Precision::BF16},
                                      {"int8", Precision::INT8},
                                      {"fp8", Precision::FP8},
                                      {"all-int8", Precision::INT8, Precision::INT8}};

// /proc/self/status fields in kB: VmRSS, VmHWM.
int64_t proc_status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(f, line))
    if (line.rfind(k, 0) == 0) return std::stoll(line.substr(k.size()));
  return -1;
}

// Restarts VmHWM (the peak RSS) at the current RSS (Linux >= 4.0).
void reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
}

double gib(int64_t kb) { return static_cast<double>(kb) / (1024.0 * 1024.0); }

class CountingSink : public FrameSink {
 public:
  Status begin(int, int, double, int64_t) override { return ok_status(); }
  Status write(const FrameView&) override {
    ++frames;
    return ok_status();
  }
  Status finish() override { return ok_status(); }
  int64_t frames = 0;
};

// A start image with structure (a diagonal gradient) and an action track:
// forward throughout, the camera turning right in the second half.
Mg2Input bench_input(const Mg2Options& o) {
  Mg2Input in;
  in.image.width = o.width;
  in.image.height = o.height;
  in.image.rgb.resize(static_cast<size_t>(3 * o.width * o.height));
  for (int y = 0; y < o.height; ++y)
    for (int x = 0; x < o.width; ++x)
      for (int c = 0; c < 3; ++c)
        in.image.rgb[static_cast<size_t>((y * o.width + x) * 3 + c)] =
            static_cast<uint8_t>((x + y + 80 * c) & 255);
  in.seed = kSeed;
  in.latent_frames = kLatents;
  const int64_t t = mg2_video_frames(kLatents);
  in.keyboard.assign(static_cast<size_t>(4 * t), 0.f);
  in.mouse.assign(static_cast<size_t>(2 * t), 0.f);
  for (int64_t i = 0; i < t; ++i) {
    in.keyboard[static_cast<size_t>(4 * i)] = 1.f;                    // w
    if (i >= t / 2) in.mouse[static_cast<size_t>(2 * i + 1)] = 0.1f;  // yaw right
  }
  return in;
}

// FLOPs of one DiT call (linear layers and attention; the action module's
// and the elementwise work are left out, so the rate is a slight underestimate).
struct DitFlops {
  double linear = 0, attention = 0;
};
DitFlops dit_flops() {
  const double t = 2640, d = 1536, f = 8960, layers = 30, kv = 5280, ctx = 257;
  DitFlops r;
  r.linear = layers * (2 * t * d * d * 6 + 2 * t * d * f * 2);  // q k v o, cross q o, ffn
  r.attention = layers * (4 * t * kv * d + 4 * t * ctx * d);    // QK^T and PV
  return r;
}

double linear_peak(const Peaks& p, Precision precision) {
  if (precision == Precision::INT8) return p.amx_int8_gops > 0 ? p.amx_int8_gops : p.int8_gops;
  // BF16 and FP8 (E4M3 weights widened to bf16) run bf16 dot products.
  return p.amx_bf16_gflops > 0 ? p.amx_bf16_gflops : p.bf16_gflops;
}
double attention_peak(const Peaks& p) {
  return p.amx_bf16_gflops > 0 ? p.amx_bf16_gflops : p.bf16_gflops;
}

std::vector<BenchResult> run_precision(const std::string& weights, const Precisions& prec,
                                       const Peaks& peaks) {
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  std::vector<BenchResult> out;
  const std::string name = std::string("mg2.") + prec.name;
  auto failed = [&](const Status& s) {
    BenchResult r;
    r.name = name;
    r.detail = "failed: " + s.message();
    return std::vector<BenchResult>{r};
  };

  reset_peak_rss();
  Mg2Options o;
  o.weights = weights;
  o.mode = Mg2Mode::kUniversal;
  o.precision = prec.precision;
  o.vae_precision = prec.vae;
  std::unique_ptr<Backend> backend = profile_if_enabled(make_cpu_backend());
  ProfileBackend* profiler = as_profiler(*backend);  // FLICK_PROFILE=1
  const auto load_start = clock::now();
  Expected<std::unique_ptr<Mg2Pipeline>> p = Mg2Pipeline::load(o, *backend);
  if (!p.ok()) return failed(p.status());
  const double load_s = seconds(load_start, clock::now());
  const int64_t rss_loaded = proc_status_kb("VmRSS");

  std::map<std::string, clock::time_point> at;
  ProfileStats dit_start;
  if (profiler != nullptr) profiler->reset();  // the run, without loading
  const Mg2Pipeline::Tap tap = [&](std::string_view n, const Tensor&) {
    at[std::string(n)] = clock::now();
    if (profiler == nullptr) return;
    // The measured DiT call (below) on its own, then the whole run.
    if (n == "b1.s0.x") dit_start = profiler->stats();
    if (n == "b1.s0.flow")
      std::fputs(profiler->stats().minus(dit_start).table(name + " DiT call b1.s0").c_str(),
                 stderr);
  };
  CountingSink sink;
  const Mg2Input in = bench_input(o);
  const auto run_start = clock::now();
  const Status s = (*p)->run(in, sink, RunContext{}, tap);
  const auto run_end = clock::now();
  if (profiler != nullptr)
    std::fputs(profiler->stats().table(name + " whole run (after load)").c_str(), stderr);
  if (!s.ok()) return failed(s);
  const int64_t rss_peak = proc_status_kb("VmHWM");

  const DitFlops fl = dit_flops();
  const double dit_s = seconds(at["b1.s0.x"], at["b1.s0.flow"]);
  const double bound = fl.linear / (linear_peak(peaks, prec.precision) * 1e9) +
                       fl.attention / (attention_peak(peaks) * 1e9);
  const char* dit_target = prec.precision == Precision::INT8   ? "7"
                           : prec.precision == Precision::BF16 ? "12"
                                                               : "-";
  char buf[256];
  BenchResult dit;
  dit.name = name + " dit 2640 tok, 5280 kv";
  dit.seconds = dit_s;
  dit.rate = (fl.linear + fl.attention) / dit_s * 1e-9;
  dit.unit = prec.precision == Precision::INT8 ? "GOPS" : "GFLOPS";
  dit.peak_pct = bound > 0 ? 100.0 * bound / dit_s : 0;
  std::snprintf(buf, sizeof buf, "target <= %s s; peak-derived lower bound %.2f s (%s)", dit_target,
                bound, precision_name(prec.precision));
  dit.detail = buf;
  out.push_back(dit);

  const int64_t block_frames = 4 * kMg2FramesPerBlock;  // every block after the first
  BenchResult dec;
  dec.name = name + " vae decode 352x640";
  dec.seconds = seconds(at["b1.latents"], at["b1.frames"]) / block_frames;
  dec.rate = 1.0 / dec.seconds;
  dec.unit = "frames/s";
  dec.detail = "per video frame, steady state; target <= 1.5 s";
  out.push_back(dec);

  BenchResult e2e;
  e2e.name = name + " e2e per frame";
  e2e.seconds = seconds(at["b0.frames"], at["b1.frames"]) / block_frames;
  e2e.rate = 1.0 / e2e.seconds;
  e2e.unit = "frames/s";
  std::snprintf(buf, sizeof buf,
                "steady state; whole %lld-frame job %.1f s/frame (conditioning %.1f s), load "
                "%.0f s, RSS %.2f GiB loaded, peak %.2f GiB%s",
                static_cast<long long>(sink.frames),
                seconds(run_start, run_end) / static_cast<double>(sink.frames),
                seconds(run_start, at["b0.s0.x"]), load_s, gib(rss_loaded), gib(rss_peak),
                prec.precision == Precision::INT8 ? "; target <= 5 s, <= 6 GiB" : "");
  e2e.detail = buf;
  out.push_back(e2e);
  return out;
}

// The conditioning encode alone: the VAE encoder (BF16, synthetic weights of
// the released widths) on the image + 20 zero frames at 352x640, computing
// every frame and reusing constant tails (WanVaeEncoder::
// set_reuse_steady_frames), alternately in one process after a warm-up of
// each (their convolution plans built), best of 2 each; the latents must be
// equal bit for bit. Then the encoder with INT8 convolutions (reusing
// constant tails), its time beside BF16's and its latents' SNR against
// BF16's.
std::vector<BenchResult> run_conditioning(const BenchOptions& options) {
  const std::string name = "mg2.cond vae encode bf16 21 frames 352x640";
  std::unique_ptr<Backend> be = profile_if_enabled(make_cpu_backend());
  ProfileBackend* profiler = as_profiler(*be);  // FLICK_PROFILE=1: per-op tables of the last round
  Expected<WeightStore> store = wan_vae::make_synthetic_wan_vae(96, kSeed);
  FLICK_CHECK(store.ok(), store.status().message());
  const int64_t frames = mg2_video_frames(kLatents);
  OwnedTensor video(DType::BF16, Shape{1, 3, frames, 352, 640});
  std::fill_n(static_cast<uint8_t*>(video.t.data), video.t.nbytes(), uint8_t{0});
  uint32_t state = 1;
  uint16_t* first = static_cast<uint16_t*>(video.t.data);
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t i = 0; i < 352 * 640; ++i) {
      state = state * 1664525u + 1013904223u;
      first[c * frames * 352 * 640 + i] =
          f32_to_bf16(static_cast<float>(state >> 8) * 0x1p-23f - 1.f);
    }
  const int rounds = options.quick ? 2 : 3;
  // Best time of rounds 1.. (round 0 builds the plans: its time in `first`)
  // and the last latents.
  auto measure = [&](WanVaeEncoder& enc, const std::string& label, std::vector<float>& latents,
                     double* first = nullptr) {
    double best = 1e30;
    for (int round = 0; round < rounds; ++round) {
      if (profiler != nullptr) profiler->reset();
      const double t0 = bench_now(options);
      Expected<Tensor> z = enc.encode(video.t);
      const double t = bench_now(options) - t0;
      if (profiler != nullptr && round + 1 == rounds)
        std::fputs(profiler->stats().table(label).c_str(), stderr);
      FLICK_CHECK(z.ok(), z.status().message());
      latents.assign(z->ptr<float>(), z->ptr<float>() + z->numel());
      if (round > 0) best = std::min(best, t);
      if (round == 0 && first != nullptr) *first = t;
    }
    return best;
  };
  Expected<WanVaeEncoder> enc = WanVaeEncoder::load(store->root(), *be, Precision::BF16);
  FLICK_CHECK(enc.ok(), enc.status().message());
  double best[2];
  std::vector<float> latents[2];
  for (int reuse = 0; reuse < 2; ++reuse) {
    enc->set_reuse_steady_frames(reuse == 1);
    best[reuse] = measure(*enc, name + (reuse == 1 ? ", reusing constant tails" : ", every frame"),
                          latents[reuse]);
  }
  enc->release_buffers();
  BenchResult r;
  r.name = name;
  r.seconds = best[1];
  r.rate = best[0] / best[1];
  r.unit = "x";
  char buf[200];
  std::snprintf(
      buf, sizeof buf, "%.2fx: reusing constant tails %.1f s, every frame %.1f s; latents %s",
      best[0] / best[1], best[1], best[0], latents[0] == latents[1] ? "bit-identical" : "DIFFER");
  r.detail = buf;
  std::vector<BenchResult> out{r};
  if (!cpu::cpu_supports(Precision::INT8)) return out;

  const std::string name8 = "mg2.cond vae encode int8 21 frames 352x640";
  Expected<WanVaeEncoder> enc8 =
      WanVaeEncoder::load(store->root(), *be, Precision::BF16, Precision::INT8);
  FLICK_CHECK(enc8.ok(), enc8.status().message());
  std::vector<float> z8;
  double first8 = 0;
  const double t8 = measure(*enc8, name8, z8, &first8);
  double signal = 0, noise = 0;
  for (size_t i = 0; i < z8.size(); ++i) {
    signal += double(latents[1][i]) * latents[1][i];
    noise += (double(z8[i]) - latents[1][i]) * (double(z8[i]) - latents[1][i]);
  }
  BenchResult r8;
  r8.name = name8;
  r8.seconds = t8;
  r8.rate = t8 / best[1];
  r8.unit = "x bf16";
  std::snprintf(buf, sizeof buf,
                "%.2fx the BF16 encoder's %.1f s; latents SNR %.1f dB vs BF16; first encode "
                "(building its plans) %.1f s",
                t8 / best[1], best[1], 10 * std::log10(signal / noise), first8);
  r8.detail = buf;
  out.push_back(r8);
  return out;
}

}  // namespace

std::vector<BenchResult> run_mg2_benches(const Peaks& peaks, const BenchOptions& options) {
  std::vector<BenchResult> results;
  // Opt-in as the jobs below ("mg2", "mg2.cond"); no checkpoint needed.
  if (!options.filter.empty() && std::string("mg2.cond").find(options.filter) != std::string::npos)
    results = run_conditioning(options);
  std::vector<const Precisions*> todo;
  for (const Precisions& p : kPrecisions) {
    // Opt-in: an empty filter (a plain `flick bench`) does not run these.
    if (!options.filter.empty() &&
        (std::string("mg2.") + p.name).find(options.filter) != std::string::npos)
      todo.push_back(&p);
  }
  if (todo.empty()) return results;

  std::string weights = options.mg2_weights;
  std::string scratch;
  if (weights.empty()) {
    const char* tmp = getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/flick-bench-mg2.XXXXXX";
    if (!mkdtemp(templ.data())) {
      BenchResult r;
      r.name = "mg2";
      r.detail = "failed: cannot create a directory for the synthetic weights in " + templ;
      results.push_back(r);
      return results;
    }
    scratch = weights = templ;
    std::printf("writing full-size synthetic Matrix-Game weights (universal) to %s ...\n",
                weights.c_str());
    std::fflush(stdout);
    Mg2SynthOptions so;
    so.size = Mg2SynthSize::kFull;
    so.modes = {Mg2Mode::kUniversal};
    so.seed = kSeed;
    const Status s = write_mg2_synth(weights, so);
    if (!s.ok()) {
      fs::remove_all(scratch);
      BenchResult r;
      r.name = "mg2";
      r.detail = "failed: " + s.message();
      results.push_back(r);
      return results;
    }
  }
  for (const Precisions* p : todo) {
    for (BenchResult& r : run_precision(weights, *p, peaks)) results.push_back(std::move(r));
  }
  if (!scratch.empty()) fs::remove_all(scratch);
  return results;
}

}  // namespace flick::bench
