#include "bench/bench_vae.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "models/wan_vae/wan_vae_decoder.h"
#include "models/wan_vae/wan_vae_encoder.h"
#include "models/wan_vae/wan_vae_synthetic.h"
#include "runtime/backend.h"
#include "runtime/op_list.h"
#include "runtime/profile_backend.h"
#include "runtime/tensor.h"
#include "runtime/weights/weight_store.h"

namespace flick::bench {
namespace {

// Forwards every op to another backend, counting the multiply-add work of
// convolutions, attention and matmuls and the time spent in each kind of op.
class CountingBackend final : public Backend {
 public:
  CountingBackend(Backend& inner, const BenchOptions& options) : inner_(inner), options_(options) {}
  const char* name() const override { return inner_.name(); }

  struct Totals {
    double flops = 0;
    double conv_s = 0, attention_s = 0, add_s = 0, copy_s = 0, other_s = 0;
  };
  Totals totals;
  // Convolution time and FLOPs by (weight, output) shape, kept under FLICK_PROFILE=1.
  struct ConvEntry {
    int64_t calls = 0;
    double seconds = 0, flops = 0;
  };
  std::map<std::string, ConvEntry> conv_shapes;

 private:
  template <class Fn>
  auto timed(double Totals::*slot, Fn fn) {
    const double start = bench_now(options_);
    struct Stop {
      CountingBackend* self;
      double Totals::*slot;
      double start;
      ~Stop() { self->totals.*slot += bench_now(self->options_) - start; }
    } stop{this, slot, start};
    return fn();
  }

 public:
#define FLICK_BENCH_TIMED(ret, op, params, args)                    \
  ret op params override {                                          \
    return timed(&Totals::other_s, [&] { return inner_.op args; }); \
  }
  FLICK_BENCH_TIMED(std::unique_ptr<PackedLinear>, pack_linear, (const LinearDesc& d), (d))
  FLICK_BENCH_TIMED(std::unique_ptr<PackedConv>, pack_conv, (const ConvDesc& d), (d))
  FLICK_BENCH_TIMED(void, linear,
                    (const Tensor& x, const PackedLinear& w, Tensor& y, Activation act),
                    (x, w, y, act))
  FLICK_BENCH_TIMED(void, mlp_relu,
                    (const Tensor& x, const PackedLinear& l1, const PackedLinear& l2,
                     Tensor& hidden, Tensor& y),
                    (x, l1, l2, hidden, y))
  FLICK_BENCH_TIMED(void, layer_norm,
                    (const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y),
                    (x, w, b, eps, y))
  FLICK_BENCH_TIMED(void, rms_norm, (const Tensor& x, const Tensor& w, float eps, Tensor& y),
                    (x, w, eps, y))
  FLICK_BENCH_TIMED(void, group_norm,
                    (const Tensor& x, int64_t g, const Tensor& w, const Tensor& b, float eps,
                     Tensor& y, Activation act),
                    (x, g, w, b, eps, y, act))
  FLICK_BENCH_TIMED(void, rope, (const Tensor& x, const Tensor& c, const Tensor& s, Tensor& y),
                    (x, c, s, y))
  FLICK_BENCH_TIMED(void, gelu, (const Tensor& x, Tensor& y, bool t), (x, y, t))
  FLICK_BENCH_TIMED(void, silu, (const Tensor& x, Tensor& y), (x, y))
  FLICK_BENCH_TIMED(void, activation, (const Tensor& x, Tensor& y, Activation a), (x, y, a))
  FLICK_BENCH_TIMED(void, modulate,
                    (const Tensor& x, const Tensor& sh, const Tensor& sc, Tensor& y),
                    (x, sh, sc, y))
  void add(const Tensor& a, const Tensor& b, Tensor& y) override {
    timed(&Totals::add_s, [&] { inner_.add(a, b, y); });
  }
  FLICK_BENCH_TIMED(void, mul, (const Tensor& a, const Tensor& b, Tensor& y), (a, b, y))
  FLICK_BENCH_TIMED(void, mul_add, (const Tensor& a, const Tensor& b, const Tensor& c, Tensor& y),
                    (a, b, c, y))
  FLICK_BENCH_TIMED(void, affine, (const Tensor& x, float a, float b, Tensor& y), (x, a, b, y))
  FLICK_BENCH_TIMED(void, softmax, (const Tensor& x, Tensor& y), (x, y))
  FLICK_BENCH_TIMED(void, upsample_nearest, (const Tensor& x, Tensor& y), (x, y))
  FLICK_BENCH_TIMED(void, resize, (const Tensor& x, Tensor& y, ResizeMode m, bool ac, bool aa),
                    (x, y, m, ac, aa))
  FLICK_BENCH_TIMED(void, resize_window,
                    (const Tensor& x, Tensor& y, const ResizeWindow& w, ResizeMode m, bool ac,
                     bool aa),
                    (x, y, w, m, ac, aa))
  void copy(const Tensor& x, Tensor& y) override {
    timed(&Totals::copy_s, [&] { inner_.copy(x, y); });
  }
  FLICK_BENCH_TIMED(void, concat, (std::span<const Tensor> xs, int dim, Tensor& y), (xs, dim, y))
  FLICK_BENCH_TIMED(void, reduce, (const Tensor& x, int dim, ReduceOp op, Tensor& y),
                    (x, dim, op, y))
  FLICK_BENCH_TIMED(void, quantize_rows_int8, (const Tensor& x, Tensor& q, Tensor& s), (x, q, s))
  FLICK_BENCH_TIMED(void, rope_3d, (const Tensor& x, const Rope3dParams& p, Tensor& y), (x, p, y))
  FLICK_BENCH_TIMED(void, rope_unfused,
                    (const Tensor& x, const Tensor& c, const Tensor& s, Tensor& y), (x, c, s, y))
  FLICK_BENCH_TIMED(void, rms_norm_stepwise, (const Tensor& x, float eps, Tensor& y), (x, eps, y))
  FLICK_BENCH_TIMED(void, mul_add_stepwise,
                    (const Tensor& a, const Tensor& b, const Tensor& c, Tensor& y), (a, b, c, y))
  FLICK_BENCH_TIMED(void, normalize_l2,
                    (const Tensor& x, const Tensor& g, float s, NormRounding r, Activation a,
                     Tensor& y),
                    (x, g, s, r, a, y))
  FLICK_BENCH_TIMED(bool, attention_int8_pays_off, (), ())
  FLICK_BENCH_TIMED(void, softmax_parts, (const Tensor& x, float s, Tensor& p, Tensor& i),
                    (x, s, p, i))
#undef FLICK_BENCH_TIMED

  void conv(const Tensor& x, const PackedConv& w, Tensor& y, Activation act) override {
    const Tensor& wt = w.desc().w;  // [O, I/g, k...]
    double per_output = 2.0;
    for (int i = 1; i < wt.ndim(); ++i) per_output *= static_cast<double>(wt.dim(i));
    const double flops = per_output * static_cast<double>(y.numel());
    totals.flops += flops;
    const double before = totals.conv_s;
    timed(&Totals::conv_s, [&] { inner_.conv(x, w, y, act); });
    if (profile_) {
      ConvEntry& e = conv_shapes["w " + wt.shape.str() + " y " + y.shape.str()];
      ++e.calls;
      e.seconds += totals.conv_s - before;
      e.flops += flops;
    }
  }
  void matmul(const Tensor& a, const Tensor& b, Tensor& c) override {
    totals.flops += 2.0 * static_cast<double>(c.numel()) * static_cast<double>(a.dim(-1));
    timed(&Totals::attention_s, [&] { inner_.matmul(a, b, c); });
  }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                 const AttentionParams& p) override {
    // [B, L, H, D]: QK^T and PV
    totals.flops += 4.0 * static_cast<double>(q.numel()) * static_cast<double>(k.dim(1));
    timed(&Totals::attention_s, [&] { inner_.attention(q, k, v, out, p); });
  }
  void attention_int8(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                      const AttentionParams& p) override {
    totals.flops += 4.0 * static_cast<double>(q.numel()) * static_cast<double>(k.dim(1));
    timed(&Totals::attention_s, [&] { inner_.attention_int8(q, k, v, out, p); });
  }

 private:
  Backend& inner_;
  const BenchOptions& options_;
  const bool profile_ = profiling_enabled();
};

// The convolutions of one measured call, the slowest first.
void print_conv_shapes(const std::string& title, const CountingBackend& be, double seconds) {
  std::vector<std::pair<std::string, CountingBackend::ConvEntry>> rows(be.conv_shapes.begin(),
                                                                       be.conv_shapes.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  std::fprintf(stderr, "%s: convolutions by shape (%.3f s in all)\n", title.c_str(), seconds);
  std::fprintf(stderr, "  %-58s %5s %9s %6s %8s\n", "shape", "calls", "ms", "%", "GFLOPS");
  for (const auto& [name, e] : rows) {
    std::fprintf(stderr, "  %-58s %5lld %9.1f %5.1f%% %8.0f\n", name.c_str(),
                 static_cast<long long>(e.calls), e.seconds * 1e3, 100 * e.seconds / seconds,
                 e.flops / e.seconds * 1e-9);
  }
}

// Deterministic values in [-scale, scale).
void fill(const Tensor& t, float scale, uint32_t seed) {
  uint32_t state = seed;
  for (int64_t i = 0; i < t.numel(); ++i) {
    state = state * 1664525u + 1013904223u;
    store_from_f32(t.dtype, t.data, i, (static_cast<float>(state >> 8) * 0x1p-23f - 1.f) * scale);
  }
}

BenchResult vae_result(std::string name, double seconds, double frames,
                       const CountingBackend::Totals& t, const Peaks& peaks,
                       const std::string& note) {
  BenchResult r;
  r.name = std::move(name);
  r.seconds = seconds / frames;  // per video frame / per chunk
  r.rate = t.flops / seconds * 1e-9;
  r.unit = "GFLOPS";
  const double peak = peaks.amx_bf16_gflops > 0 ? peaks.amx_bf16_gflops : peaks.bf16_gflops;
  r.peak_pct = peak > 0 ? 100.0 * r.rate / peak : 0.0;
  const double bound = peak > 0 ? t.flops / (peak * 1e9) / frames : 0.0;
  char buf[320];
  std::snprintf(
      buf, sizeof buf,
      "%.3f s/%s, %.2f TFLOP/%s; lower bound %.3f s (FLOPs / %s peak): x%.2f; "
      "conv %.0f%%, attention %.0f%%, add %.0f%%, copy %.0f%%, other backend %.0f%%, "
      "model kernels %.0f%%",
      seconds / frames, note.c_str(), t.flops / frames * 1e-12, note.c_str(), bound,
      peaks.amx_bf16_gflops > 0 ? "AMX bf16" : "vdpbf16ps", bound > 0 ? r.seconds / bound : 0.0,
      100 * t.conv_s / seconds, 100 * t.attention_s / seconds, 100 * t.add_s / seconds,
      100 * t.copy_s / seconds, 100 * t.other_s / seconds,
      100 * std::max(0.0, seconds - t.conv_s - t.attention_s - t.add_s - t.copy_s - t.other_s) /
          seconds);
  r.detail = buf;
  return r;
}

bool selected(const std::string& name, const BenchOptions& o) {
  return name.find(o.filter) != std::string::npos;
}

constexpr int64_t kLatentH = 44, kLatentW = 80;  // 352 x 640 video

// The decoder at BF16 and with INT8 convolutions (WanVaeDecoder's
// conv_precision), both loaded in one process and timed alternately, so the
// int8 / bf16 ratio holds on a shared host. The int8 detail also gives the
// PSNR of its frames against the bf16 decoder's (values in [-1, 1]).
void run_decoder(const WeightStore& store, const Peaks& peaks, const BenchOptions& options,
                 std::vector<BenchResult>& results) {
  const char* kinds[2] = {"bf16", "int8"};
  std::string first_name[2], block_name[2];
  bool any = false;
  for (int k = 0; k < 2; ++k) {
    first_name[k] = std::string("vae decode ") + kinds[k] + " 44x80 first latent (1 frame)";
    block_name[k] = std::string("vae decode ") + kinds[k] + " 44x80 3-latent block (12 frames)";
    any = any || selected(first_name[k], options) || selected(block_name[k], options);
  }
  if (!any) return;
  const bool want_block = selected(block_name[0], options) || selected(block_name[1], options);
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  CountingBackend be(*cpu, options);
  std::vector<WanVaeDecoder> decs;
  for (int k = 0; k < 2; ++k) {
    Expected<WanVaeDecoder> dec = WanVaeDecoder::load(store.root(), be, Precision::BF16,
                                                      k == 0 ? Precision::BF16 : Precision::INT8);
    FLICK_CHECK(dec.ok(), dec.status().message());
    decs.push_back(std::move(*dec));
  }
  OwnedTensor latents(DType::BF16, Shape{1, 16, 4, kLatentH, kLatentW});
  fill(latents, 2.f, 21);
  const Tensor first = latents.t.slice(2, 0, 1), block = latents.t.slice(2, 1, 3);
  std::vector<float> frames[2];  // the last block decode of each
  auto decode = [&](int k, const Tensor& z) {
    be.totals = {};
    be.conv_shapes.clear();
    const double start = bench_now(options);
    Expected<Tensor> out = decs[static_cast<size_t>(k)].decode(z);
    const double took = bench_now(options) - start;
    FLICK_CHECK(out.ok(), out.status().message());
    if (z.dim(2) > 1 || !want_block)
      frames[k].assign(out->ptr<float>(), out->ptr<float>() + out->numel());
    return took;
  };
  // Warm-up video: primitives for every shape, buffers at their largest.
  for (int k = 0; k < 2; ++k) {
    decode(k, first);
    if (want_block) decode(k, block);
  }
  const int reps = options.quick ? 1 : 2;
  double best_first[2] = {1e30, 1e30}, best_block[2] = {1e30, 1e30};
  CountingBackend::Totals first_totals[2], block_totals[2];
  for (int r = 0; r < reps; ++r) {
    for (int k = 0; k < 2; ++k) {
      WanVaeDecoder& dec = decs[static_cast<size_t>(k)];
      dec.reset();
      if (const double t = decode(k, first); t < best_first[k]) {
        best_first[k] = t;
        first_totals[k] = be.totals;
        if (profiling_enabled() && !want_block) print_conv_shapes(first_name[k], be, t);
      }
      if (!want_block) continue;
      if (const double t = decode(k, block); t < best_block[k]) {
        best_block[k] = t;
        block_totals[k] = be.totals;
        if (profiling_enabled()) print_conv_shapes(block_name[k], be, t);
      }
    }
  }
  double se = 0;
  for (size_t i = 0; i < frames[0].size() && i < frames[1].size(); ++i)
    se += (double(frames[1][i]) - frames[0][i]) * (double(frames[1][i]) - frames[0][i]);
  const double psnr = 10 * std::log10(4.0 / (se / static_cast<double>(frames[0].size())));
  for (int k = 0; k < 2; ++k) {
    std::string vs;
    if (k == 1) {
      char buf[200];
      if (want_block)
        std::snprintf(buf, sizeof buf,
                      "; x%.2f of bf16 (first latent x%.2f), same process; block frames vs bf16: "
                      "PSNR %.1f dB",
                      best_block[1] / best_block[0], best_first[1] / best_first[0], psnr);
      else
        std::snprintf(buf, sizeof buf, "; x%.2f of bf16, same process; frame vs bf16: PSNR %.1f dB",
                      best_first[1] / best_first[0], psnr);
      vs = buf;
    }
    if (selected(first_name[k], options)) {
      results.push_back(
          vae_result(first_name[k], best_first[k], 1, first_totals[k], peaks, "frame"));
      results.back().detail += vs;
    }
    if (selected(block_name[k], options)) {
      results.push_back(
          vae_result(block_name[k], best_block[k], 12, block_totals[k], peaks, "frame"));
      results.back().detail += vs;
    }
  }
}

void run_encoder(const WeightStore& store, const Peaks& peaks, const BenchOptions& options,
                 std::vector<BenchResult>& results) {
  const std::string first_name = "vae encode bf16 352x640 first chunk (1 frame)";
  const std::string chunk_name = "vae encode bf16 352x640 chunk (4 frames)";
  if (!selected(first_name, options) && !selected(chunk_name, options)) return;
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  CountingBackend be(*cpu, options);
  Expected<WanVaeEncoder> enc = WanVaeEncoder::load(store.root(), be, Precision::BF16);
  FLICK_CHECK(enc.ok(), enc.status().message());
  // Every frame computed: the per-chunk cost of an arbitrary video (the
  // constant-tail reuse of a conditioning video is what `mg2.cond` measures).
  enc->set_reuse_steady_frames(false);
  // The conditioning video: an image, then zeros (inference.py), 3 chunks.
  OwnedTensor video(DType::F32, Shape{1, 3, 9, 8 * kLatentH, 8 * kLatentW});
  Tensor image = video.t.slice(2, 0, 1);
  fill(image, 1.f, 22);
  // Per-chunk times and counts from the "chunk{i}.head" taps.
  std::vector<double> ends;
  std::vector<CountingBackend::Totals> totals;
  double start = 0;
  const WanVaeEncoder::Tap tap = [&](std::string_view name, const Tensor&) {
    if (!name.ends_with(".head")) return;
    ends.push_back(bench_now(options) - start);
    totals.push_back(be.totals);
  };
  auto encode = [&] {
    ends.clear();
    totals.clear();
    be.totals = {};
    start = bench_now(options);
    Expected<Tensor> z = enc->encode(video, tap);
    FLICK_CHECK(z.ok() && ends.size() == 3, "vae encode bench");
  };
  encode();  // warm-up
  double best_first = 1e30, best_chunk = 1e30;
  CountingBackend::Totals first_totals, chunk_totals;
  for (int r = 0; r < (options.quick ? 1 : 2); ++r) {
    encode();
    if (ends[0] < best_first) {
      best_first = ends[0];
      first_totals = totals[0];
    }
    // The last chunk, minus what the counters held at the end of the one before.
    const double chunk = ends[2] - ends[1];
    if (chunk < best_chunk) {
      best_chunk = chunk;
      chunk_totals = totals[2];
      chunk_totals.flops -= totals[1].flops;
      chunk_totals.conv_s -= totals[1].conv_s;
      chunk_totals.attention_s -= totals[1].attention_s;
      chunk_totals.add_s -= totals[1].add_s;
      chunk_totals.copy_s -= totals[1].copy_s;
      chunk_totals.other_s -= totals[1].other_s;
    }
  }
  if (selected(first_name, options))
    results.push_back(vae_result(first_name, best_first, 1, first_totals, peaks, "chunk"));
  if (selected(chunk_name, options)) {
    BenchResult r = vae_result(chunk_name, best_chunk, 1, chunk_totals, peaks, "chunk");
    char buf[160];
    std::snprintf(buf, sizeof buf, "; 57 frames (N = 15 latents) computing every frame: %.1f s",
                  best_first + 14 * best_chunk);
    r.detail += buf;
    results.push_back(r);
  }
}

}  // namespace

std::vector<BenchResult> run_vae_benches(const Peaks& peaks, const BenchOptions& options) {
  std::vector<BenchResult> results;
  const char* names[] = {"vae decode bf16 44x80 first latent (1 frame)",
                         "vae decode bf16 44x80 3-latent block (12 frames)",
                         "vae decode int8 44x80 first latent (1 frame)",
                         "vae decode int8 44x80 3-latent block (12 frames)",
                         "vae encode bf16 352x640 first chunk (1 frame)",
                         "vae encode bf16 352x640 chunk (4 frames)"};
  if (std::none_of(std::begin(names), std::end(names),
                   [&](const char* n) { return selected(n, options); }))
    return results;
  // --mg2-weights: that download's (or `flick synth` output's) VAE; else
  // synthetic full-width weights.
  Expected<WeightStore> store =
      options.mg2_weights.empty()
          ? wan_vae::make_synthetic_wan_vae(96, 0)
          : WeightStore::open(
                {(std::filesystem::path(options.mg2_weights) / "Wan2.1_VAE.pth").string()});
  FLICK_CHECK(store.ok(), store.status().message());
  run_decoder(*store, peaks, options, results);
  run_encoder(*store, peaks, options, results);
  return results;
}

}  // namespace flick::bench
