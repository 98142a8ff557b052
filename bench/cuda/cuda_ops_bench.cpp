// flick_cuda_bench: the CUDA backend's ops at Matrix-Game 2.0's shapes on a
// GPU, timed through the Backend interface (what the models call), with the
// achieved TFLOP/s or GB/s and the ratio to a peak given on the command line
// (`--peak-tflops`, e.g. the bf16 GEMM rate PyTorch measures in the same run;
// tools/gpu_check.sh does that). Builds with -DFLICK_CUDA=ON; needs only the
// backend module and libcudart, so it runs on a GPU machine without the
// Debian libraries.
//
// The last lines sum one DiT block's ops (self-attention over the 5280-key
// window, cross-attention over 257 CLIP tokens, the FFN, the elementwise
// passes) and multiply by 30 layers: an op-sum estimate of a DiT call, not
// a run of the model (the Wan DiT does not run on this backend yet).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/backend.h"

namespace flick {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// A device buffer filled with small normal values (bf16 / f32) or bytes.
struct Dev {
  void* p = nullptr;
  Tensor t;
  Dev(DType dt, Shape s, uint32_t seed = 1, float scale = 0.5f) {
    OwnedTensor h(dt, s);
    std::mt19937 g(seed);
    std::normal_distribution<float> n(0.f, scale);
    for (int64_t i = 0; i < h.t.numel(); ++i) store_from_f32(dt, h.t.data, i, n(g));
    check(cudaMalloc(&p, h.t.nbytes()), "cudaMalloc");
    check(cudaMemcpy(p, h.t.data, h.t.nbytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
    t = Tensor::view(p, dt, s, Device::CUDA);
  }
  Dev(const Dev&) = delete;
  ~Dev() { cudaFree(p); }
  operator Tensor&() { return t; }
};

// Milliseconds per call: 3 warm-up calls (plans, scratch growth), then
// `reps` back to back, one device sync around them.
template <class F>
double time_ms(F&& f, int reps = 20) {
  for (int i = 0; i < 3; ++i) f();
  check(cudaDeviceSynchronize(), "sync");
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f();
  check(cudaDeviceSynchronize(), "sync");
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(t1 - t0).count() / reps;
}

double g_peak = 0;           // TFLOP/s, from the command line
const char* g_section = "";  // --section: linear, attention, elementwise or conv alone
bool on(const char* section) { return !*g_section || std::strcmp(section, g_section) == 0; }
void report(const char* name, double ms, double flop, double bytes) {
  std::printf("%-44s %9.3f ms", name, ms);
  if (flop > 0) {
    const double tf = flop / ms / 1e9;
    std::printf("  %7.1f TFLOP/s", tf);
    if (g_peak > 0) std::printf("  %5.1f %% of peak", 100 * tf / g_peak);
  }
  if (bytes > 0) std::printf("  %7.0f GB/s", bytes / ms / 1e6);
  std::printf("\n");
}

struct Linear {
  std::unique_ptr<PackedLinear> w;
  // Weights v in [-127, 127]: I8 or E4M3 with scale 1e-3 (INT8, FP8), or
  // v * 1e-3 in BF16.
  Linear(Backend& be, int64_t n, int64_t k, Precision p) {
    const bool quantized = p == Precision::INT8 || p == Precision::FP8;
    const DType dt = p == Precision::INT8  ? DType::I8
                     : p == Precision::FP8 ? DType::F8_E4M3
                                           : DType::BF16;
    OwnedTensor wt(dt, {n, k}), ws(DType::F32, {n});
    std::mt19937 g(7);
    for (int64_t i = 0; i < n * k; ++i)
      store_from_f32(dt, wt.t.data, i,
                     static_cast<float>(int(g() % 255) - 127) * (quantized ? 1.f : 1e-3f));
    for (int64_t i = 0; i < n; ++i) ws.t.ptr<float>()[i] = 1e-3f;
    LinearDesc d;
    d.w = wt.t;
    if (quantized) d.w_scale = ws.t;
    d.precision = p;
    w = be.pack_linear(d);
  }
};

int run(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--peak-tflops") == 0) g_peak = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--section") == 0) g_section = argv[i + 1];
  }
  auto b = load_cuda_backend();
  if (!b.ok()) {
    std::fprintf(stderr, "no CUDA backend: %s\n", b.status().message().c_str());
    return 1;
  }
  Backend& be = **b;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "props");
  std::printf("device: %s, %d SMs; peak given: %.0f TFLOP/s bf16\n", prop.name,
              prop.multiProcessorCount, g_peak);

  const int64_t T = 2640, C = 1536, F = 8960, H = 12, D = 128, KV = 5280, CTX = 257;
  Dev x(DType::BF16, {T, C}), y(DType::BF16, {T, C}), big(DType::BF16, {T, F});
  Dev q(DType::BF16, {1, T, H, D}), k(DType::BF16, {1, KV, H, D}), v(DType::BF16, {1, KV, H, D});
  Dev kc(DType::BF16, {1, CTX, H, D}), vc(DType::BF16, {1, CTX, H, D}),
      o(DType::BF16, {1, T, H, D});
  Dev shift(DType::F32, {1, C}), scale(DType::F32, {1, C});

  double block_ms[3] = {0, 0, 0};  // bf16, int8, fp8 linears
  const char* pname[3] = {"bf16", "int8", "fp8"};
  const Precision precisions[3] = {Precision::BF16, Precision::INT8, Precision::FP8};
  for (int pi = 0; pi < 3 && on("linear"); ++pi) {
    const Precision p = precisions[pi];
    Linear sq(be, C, C, p), f1(be, F, C, p), f2(be, C, F, p);
    const double ms_sq = time_ms([&] { be.linear(x, *sq.w, y); });
    const double ms_f1 = time_ms([&] { be.linear(x, *f1.w, big, Activation::RoundGeluTanh); });
    const double ms_f1n = time_ms([&] { be.linear(x, *f1.w, big); });
    const double ms_f2 = time_ms([&] { be.linear(big, *f2.w, y); });
    char name[64];
    std::snprintf(name, sizeof name, "linear %s 2640x1536 -> 1536", pname[pi]);
    report(name, ms_sq, 2.0 * T * C * C, 0);
    std::snprintf(name, sizeof name, "linear %s 2640x1536 -> 8960 +gelu (ffn.0)", pname[pi]);
    report(name, ms_f1, 2.0 * T * C * F, 0);
    std::snprintf(name, sizeof name, "linear %s 2640x1536 -> 8960", pname[pi]);
    report(name, ms_f1n, 2.0 * T * C * F, 0);
    std::snprintf(name, sizeof name, "linear %s 2640x8960 -> 1536", pname[pi]);
    report(name, ms_f2, 2.0 * T * C * F, 0);
    // Per block: q k v o (self), q o (cross), fc1, fc2.
    block_ms[pi] = 6 * ms_sq + ms_f1 + ms_f2;
  }

  AttentionParams ap;
  double ms_self = 0, ms_cross = 0;
  if (on("attention")) {
    ms_self = time_ms([&] { be.attention(q, k, v, o, ap); });
    report("attention bf16 2640 q x 5280 k, 12x128", ms_self, 4.0 * T * KV * H * D, 0);
    ms_cross = time_ms([&] { be.attention(q, kc, vc, o, ap); });
    report("attention bf16 2640 q x 257 k, 12x128", ms_cross, 4.0 * T * CTX * H * D, 0);
  }

  double ms_ln = 0, ms_mod = 0, ms_ma = 0, ms_rope = 0, ms_rms = 0;
  if (on("elementwise")) {
    Dev lw(DType::F32, {C});
    const double rw = 2.0 * T * C * 2;  // bytes read + written, bf16
    ms_ln = time_ms([&] { be.layer_norm(x, Tensor{}, Tensor{}, 1e-6f, y); });
    report("layer_norm bf16 [2640, 1536]", ms_ln, 0, rw);
    ms_mod = time_ms([&] { be.modulate(x, shift, scale, y); });
    report("modulate bf16 [2640, 1536]", ms_mod, 0, rw);
    ms_ma = time_ms([&] { be.mul_add(x, y, scale, y); });
    report("mul_add bf16 [2640, 1536]", ms_ma, 0, rw * 1.5);
    Tensor qh = q.t;
    qh.shape = Shape{T, H, D};
    qh.strides = {H * D, D, 1};
    Rope3dParams rp;
    rp.grid = {3, 22, 40};
    rp.pairs = {22, 21, 21};
    ms_rope = time_ms([&] { be.rope_3d(qh, rp, qh); });
    report("rope_3d bf16 [2640, 12, 128]", ms_rope, 0, 2.0 * T * H * D * 2);
    ms_rms = time_ms([&] { be.rms_norm(x, lw, 1e-6f, y); });
    report("rms_norm bf16 [2640, 1536]", ms_rms, 0, rw);
  }
  // Elementwise per block: 3 norms, 2 modulates, 3 gated residuals, 2 RMS
  // norms (q, k) and 2 ropes, and the cross-attention's 2 norms.
  const double elem = 3 * ms_ln + 2 * ms_mod + 3 * ms_ma + 4 * ms_rms + 2 * ms_rope;

  // The Wan VAE decoder's causal 3x3x3 convs at 352x640 (latent 44x80): one
  // latent frame with its two cached frames, at each resolution.
  struct ConvCase {
    int64_t c, h, w;
  } cases[] = {{384, 44, 80}, {384, 88, 160}, {192, 176, 320}, {96, 352, 640}};
  for (const ConvCase& cc : cases) {
    if (!on("conv")) break;
    OwnedTensor wh(DType::BF16, {cc.c, cc.c, 3, 3, 3});
    std::mt19937 g(9);
    std::normal_distribution<float> n(0.f, 0.02f);
    for (int64_t i = 0; i < wh.t.numel(); ++i) store_from_f32(DType::BF16, wh.t.data, i, n(g));
    ConvDesc d;
    d.w = wh.t;
    d.spatial_dims = 3;
    d.padding = {0, 1, 1};
    auto pc = be.pack_conv(d);
    Dev cx(DType::BF16, {1, cc.c, 3, cc.h, cc.w}), cy(DType::BF16, {1, cc.c, 1, cc.h, cc.w});
    const double ms = time_ms([&] { be.conv(cx, *pc, cy, Activation::None); }, 10);
    char name[64];
    std::snprintf(name, sizeof name, "conv3d bf16 %lld->%lld 3x3x3 @%lldx%lld", (long long)cc.c,
                  (long long)cc.c, (long long)cc.h, (long long)cc.w);
    report(name, ms, 2.0 * cc.c * cc.c * 27 * cc.h * cc.w, 0);
  }

  for (int pi = 0; pi < 3 && !*g_section; ++pi) {
    const double blk = block_ms[pi] + ms_self + ms_cross + elem;
    std::printf(
        "op-sum DiT call estimate, %s linears: %.2f ms/block x 30 = %.1f ms "
        "(linears %.1f, attention %.1f, elementwise %.1f ms)\n",
        pname[pi], blk, 30 * blk, 30 * block_ms[pi], 30 * (ms_self + ms_cross), 30 * elem);
  }
  return 0;
}

}  // namespace
}  // namespace flick

int main(int argc, char** argv) { return flick::run(argc, argv); }
