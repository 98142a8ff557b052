// linear / matmul / quantize_rows_int8: the CPU backend (oneDNN + own
// kernels) against the scalar reference runtime/ref, which follows each
// precision's rounding points exactly. Bounds: tests/ops/matmul_test_util.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "runtime/cpu/gemm.h"
#include "runtime/cpu/onednn_info.h"
#include "runtime/cpu/ops.h"
#include "runtime/cpu/quantize.h"
#include "runtime/ref/matmul_common.h"
#include "runtime/ref/ops.h"
#include "tests/ops/matmul_test_util.h"

namespace flick {
namespace {

using test::act_name;
using test::BoundCheck;
using test::get;
using test::random_tensor;

// The precisions this CPU runs (INT8 needs AVX-512 VNNI or AMX; the others
// run everywhere, see cpu::cpu_supports).
std::vector<Precision> precisions() {
  std::vector<Precision> out;
  for (Precision p : {Precision::F32, Precision::BF16, Precision::INT8, Precision::FP8})
    if (cpu::cpu_supports(p)) out.push_back(p);
  return out;
}
constexpr DType kFloatTypes[] = {DType::F32, DType::BF16};

// sum_k |x[m, k] * w[n, k]| for the checked rows: the scale of every
// partial sum of the accumulator, [rows.size(), N].
std::vector<double> magnitudes(const Tensor& x, const std::vector<int64_t>& rows, const Tensor& w) {
  const int64_t k = w.dim(1), n = w.dim(0);
  std::vector<float> wabs(static_cast<size_t>(n * k));
  for (int64_t o = 0; o < n; ++o)
    for (int64_t j = 0; j < k; ++j)
      wabs[static_cast<size_t>(o * k + j)] = std::fabs(get(w, {o, j}));
  std::vector<double> mag(rows.size() * static_cast<size_t>(n));
  std::vector<double> xabs(static_cast<size_t>(k));
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t j = 0; j < k; ++j) xabs[static_cast<size_t>(j)] = std::fabs(get(x, {rows[i], j}));
    for (int64_t o = 0; o < n; ++o) {
      const float* wr = wabs.data() + o * k;
      double acc = 0;
      for (int64_t j = 0; j < k; ++j) acc += xabs[static_cast<size_t>(j)] * wr[j];
      mag[i * static_cast<size_t>(n) + static_cast<size_t>(o)] = acc;
    }
  }
  return mag;
}

// Compares fast rows y_fast[rows[i]] with reference rows y_ref[i] within the
// bound of matmul_test_util.h; mag from magnitudes() over the float weight
// the test quantized from (or dequantized).
void check_rows(const std::vector<int64_t>& rows, const std::vector<double>& mag, int64_t k,
                const Tensor& bias, Precision p, Activation act, const Tensor& y_ref,
                const Tensor& y_fast, const std::string& label) {
  const int64_t n = y_ref.dim(1);
  const double acc_e = test::acc_rel_error(p, k) * 1.13 + test::act_rel_error(act) +
                       test::pre_round_rel_error(act, y_fast.dtype);
  const double out_e = test::out_rel_error(y_fast.dtype);
  // Quantized operands differ from the float ones by up to half a step
  // (1/254 of the row max for INT8, 1/16 relative for E4M3): 10% headroom
  // on the magnitude sum covers that.
  const double mag_headroom = p == Precision::INT8 || p == Precision::FP8 ? 1.1 : 1.0;
  BoundCheck bc;
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t o = 0; o < n; ++o) {
      const double m = mag[i * static_cast<size_t>(n) + static_cast<size_t>(o)] * mag_headroom +
                       (bias.empty() ? 0.0 : std::fabs(get(bias, {o})));
      const double ref = get(y_ref, {static_cast<int64_t>(i), o});
      const double bound = acc_e * m + out_e * std::fabs(ref) + 1e-30;
      bc.add(get(y_fast, {rows[i], o}), ref, bound,
             "row " + std::to_string(rows[i]) + " col " + std::to_string(o));
    }
  }
  EXPECT_LE(bc.worst, 1.0) << label << " worst at " << bc.where;
}

void check_rows(const Tensor& x, const std::vector<int64_t>& rows, const Tensor& w,
                const Tensor& bias, Precision p, Activation act, const Tensor& y_ref,
                const Tensor& y_fast, const std::string& label) {
  check_rows(rows, magnitudes(x, rows, w), w.dim(1), bias, p, act, y_ref, y_fast, label);
}

std::vector<int64_t> all_rows(int64_t m) {
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < m; ++i) rows.push_back(i);
  return rows;
}

struct Case {
  Precision p;
  DType x, y;
  int64_t m, k, n;
  bool bias;
  Activation act;
  std::string label() const {
    return std::string(precision_name(p)) + " x " + std::string(dtype_name(x)) + " y " +
           std::string(dtype_name(y)) + " " + std::to_string(m) + "x" + std::to_string(k) + "x" +
           std::to_string(n) + (bias ? " bias " : " ") + act_name(act);
  }
};

// Full check of a small case: every row against the reference.
void check_case(const Case& c, uint32_t seed) {
  OwnedTensor x = random_tensor(c.x, {c.m, c.k}, seed);
  OwnedTensor w =
      random_tensor(DType::F32, {c.n, c.k}, seed + 1, 1.f / std::sqrt(static_cast<float>(c.k)));
  OwnedTensor b = c.bias ? random_tensor(DType::F32, {c.n}, seed + 2, 0.5f) : OwnedTensor();
  const LinearDesc d{w.t, Tensor{}, b.t, c.p};
  auto rw = ref::pack_linear(d);
  auto cw = cpu::pack_linear(d);
  EXPECT_EQ(cw->in_features(), c.k);
  EXPECT_EQ(cw->out_features(), c.n);
  EXPECT_EQ(cw->precision(), c.p);
  OwnedTensor yr(c.y, {c.m, c.n}), yc(c.y, {c.m, c.n});
  ref::linear(x, *rw, yr, c.act);
  cpu::linear(x, *cw, yc, c.act);
  check_rows(x, all_rows(c.m), w, b, c.p, c.act, yr, yc, c.label());
}

// Every precision x x dtype x y dtype x bias x activation on an odd shape.
TEST(Linear, EveryPrecisionDtypeBiasActivation) {
  uint32_t seed = 1;
  for (Precision p : precisions())
    for (DType xt : kFloatTypes)
      for (DType yt : kFloatTypes)
        for (bool bias : {false, true})
          for (Activation act : test::kLinearActivations)
            check_case({p, xt, yt, 7, 13, 29, bias, act}, seed++);
}

// More shapes: a single row, sizes around the 16/64-wide vector and block
// tails, and K large enough for several K blocks.
TEST(Linear, Shapes) {
  const int64_t shapes[][3] = {{1, 64, 48}, {33, 100, 70}, {64, 256, 192}, {17, 1030, 65}};
  uint32_t seed = 100;
  for (Precision p : precisions())
    for (DType t : kFloatTypes)
      for (const auto& s : shapes)
        check_case({p, t, t, s[0], s[1], s[2], true, Activation::None}, seed++);
}

// Rows taken from a wider buffer (a fused QKV output, say), written into a
// slice of a wider output, with leading batch dims.
TEST(Linear, StridedRowsAndLeadingDims) {
  const int64_t B = 2, L = 9, K = 40, N = 24;
  for (Precision p : precisions())
    for (DType t : kFloatTypes) {
      OwnedTensor xbig = random_tensor(t, {B, L, 3 * K}, 11);
      OwnedTensor w = random_tensor(DType::F32, {N, K}, 12, 0.2f);
      OwnedTensor b = random_tensor(DType::F32, {N}, 13);
      const LinearDesc d{w.t, Tensor{}, b.t, p};
      auto rw = ref::pack_linear(d);
      auto cw = cpu::pack_linear(d);
      Tensor x = xbig.t.slice(2, K, K);  // [B, L, K], row stride 3K
      OwnedTensor ybig(t, {B, L, 2 * N});
      Tensor y = ybig.t.slice(2, N, N);  // [B, L, N], row stride 2N
      OwnedTensor yr(t, {B * L, N});
      ref::linear(x, *rw, yr, Activation::Silu);
      cpu::linear(x, *cw, y, Activation::Silu);
      Tensor x2 = xbig.t.reshape({B * L, 3 * K}).slice(1, K, K);
      Tensor y2 = ybig.t.reshape({B * L, 2 * N}).slice(1, N, N);
      check_rows(x2, all_rows(B * L), w, b, p, Activation::Silu, yr, y2,
                 std::string("strided ") + precision_name(p) + " " + std::string(dtype_name(t)));
      // The columns outside the slice stay untouched.
      for (int64_t i = 0; i < B * L; ++i)
        for (int64_t j = 0; j < N; ++j) ASSERT_EQ(get(ybig.t.reshape({B * L, 2 * N}), {i, j}), 0.f);
    }
}

// One packed layer called with several M (the per-M primitive cache), each
// twice: results are deterministic and each M matches the reference.
TEST(Linear, SeveralRowCountsOnOnePackedLayer) {
  const int64_t K = 96, N = 80;
  OwnedTensor w = random_tensor(DType::F32, {N, K}, 21, 0.1f);
  for (Precision p : precisions()) {
    const LinearDesc d{w.t, Tensor{}, Tensor{}, p};
    auto rw = ref::pack_linear(d);
    auto cw = cpu::pack_linear(d);
    for (int64_t m : {5, 64, 1, 5, 130}) {
      OwnedTensor x = random_tensor(DType::BF16, {m, K}, 22 + static_cast<uint32_t>(m));
      OwnedTensor y1(DType::BF16, {m, N}), y2(DType::BF16, {m, N}), yr(DType::BF16, {m, N});
      cpu::linear(x, *cw, y1, Activation::None);
      cpu::linear(x, *cw, y2, Activation::None);
      ref::linear(x, *rw, yr, Activation::None);
      ASSERT_EQ(std::memcmp(y1.t.data, y2.t.data, y1.t.nbytes()), 0);
      check_rows(x, all_rows(m), w, Tensor{}, p, Activation::None, yr, y1,
                 std::string(precision_name(p)) + " M=" + std::to_string(m));
    }
  }
}

// Checkpoint weights given already quantized: I8 + scale for INT8 (per
// channel and per tensor), F8_E4M3 + scale for FP8, and FP8 weights run as
// INT8 (the CPU alternative to FP8 -> BF16).
TEST(Linear, PrequantizedWeights) {
  const int64_t M = 19, K = 72, N = 40;
  OwnedTensor x = random_tensor(DType::BF16, {M, K}, 31);
  OwnedTensor b = random_tensor(DType::F32, {N}, 32);
  std::mt19937 gen(33);
  struct Weights {
    DType dt;
    int64_t scales;
    Precision p;
  };
  for (const Weights& wc :
       {Weights{DType::I8, N, Precision::INT8}, Weights{DType::I8, 1, Precision::INT8},
        Weights{DType::F8_E4M3, N, Precision::FP8}, Weights{DType::F8_E4M3, 1, Precision::FP8},
        Weights{DType::F8_E4M3, N, Precision::INT8}, Weights{DType::I8, N, Precision::BF16}}) {
    if (!cpu::cpu_supports(wc.p)) continue;
    OwnedTensor wq(wc.dt, {N, K}), scale(DType::F32, {wc.scales}), wf(DType::F32, {N, K});
    std::uniform_int_distribution<int> qi(-127, 127);
    std::normal_distribution<float> nd(0.f, 100.f);
    for (int64_t i = 0; i < wc.scales; ++i)
      scale.t.ptr<float>()[i] = 0.001f * static_cast<float>(i + 1);
    for (int64_t o = 0; o < N; ++o)
      for (int64_t j = 0; j < K; ++j) {
        const int64_t e = o * K + j;
        if (wc.dt == DType::I8) {
          wq.t.ptr<int8_t>()[e] = static_cast<int8_t>(qi(gen));
        } else {
          wq.t.ptr<uint8_t>()[e] = f32_to_f8e4m3(std::clamp(nd(gen), -448.f, 448.f));
        }
        wf.t.ptr<float>()[e] =
            load_as_f32(wc.dt, wq.t.data, e) * scale.t.ptr<float>()[wc.scales == 1 ? 0 : o];
      }
    const LinearDesc d{wq.t, scale.t, b.t, wc.p};
    auto rw = ref::pack_linear(d);
    auto cw = cpu::pack_linear(d);
    OwnedTensor yr(DType::F32, {M, N}), yc(DType::F32, {M, N});
    ref::linear(x, *rw, yr, Activation::GeluErf);
    cpu::linear(x, *cw, yc, Activation::GeluErf);
    check_rows(x, all_rows(M), wf, b, wc.p, Activation::GeluErf, yr, yc,
               std::string(dtype_name(wc.dt)) + " weights, " + std::to_string(wc.scales) +
                   " scales, " + precision_name(wc.p));
  }
}

// Rows to check on the big shapes: both ends and a spread in between.
std::vector<int64_t> sample_rows(int64_t m, int count) {
  std::vector<int64_t> rows{0, m - 1};
  std::mt19937 gen(7);
  std::uniform_int_distribution<int64_t> d(1, m - 2);
  while (static_cast<int>(rows.size()) < count) rows.push_back(d(gen));
  return rows;
}

Tensor gather_rows(const Tensor& x, const std::vector<int64_t>& rows, OwnedTensor& out) {
  out = OwnedTensor(x.dtype, {static_cast<int64_t>(rows.size()), x.dim(1)});
  const size_t row_bytes = static_cast<size_t>(x.dim(1)) * dtype_size(x.dtype);
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(out.t.at({static_cast<int64_t>(i), 0}), x.at({rows[i], 0}), row_bytes);
  return out.t;
}

// The Matrix-Game / Wan DiT shapes (2640 tokens, dim 1536, FFN 8960), all
// rows computed by the fast path, a sample of rows checked.
TEST(Linear, DitShapesSampledRows) {
  const int64_t M = 2640, K = 1536;
  OwnedTensor x = random_tensor(DType::BF16, {M, K}, 41);
  const std::vector<int64_t> rows = sample_rows(M, 8);
  OwnedTensor xs;
  gather_rows(x, rows, xs);
  for (int64_t n : {1536, 8960}) {
    OwnedTensor w = random_tensor(DType::F32, {n, K}, 42, 1.f / std::sqrt(float(K)));
    OwnedTensor b = random_tensor(DType::F32, {n}, 43, 0.1f);
    const std::vector<double> mag = magnitudes(x, rows, w);
    for (Precision p : precisions()) {
      const LinearDesc d{w.t, Tensor{}, b.t, p};
      auto rw = ref::pack_linear(d);
      auto cw = cpu::pack_linear(d);
      const Activation act = n == 8960 ? Activation::RoundGeluTanh : Activation::None;
      OwnedTensor yc(DType::BF16, {M, n}), yr(DType::BF16, {static_cast<int64_t>(rows.size()), n});
      cpu::linear(x, *cw, yc, act);
      ref::linear(xs, *rw, yr, act);
      check_rows(rows, mag, K, b, p, act, yr, yc,
                 std::string("DiT ") + precision_name(p) + " N=" + std::to_string(n));
    }
  }
}

// The FFN down projection (K = 8960): the AMX GEMM splits K into blocks
// whose partial sums wait in memory (gemm.cpp), unlike the K = 1536 shapes.
// BF16 and INT8 (FP8 runs the BF16 kernel; F32 is oneDNN's).
TEST(Linear, DitDownProjectionSampledRows) {
  const int64_t M = 2640, K = 8960, N = 1536;
  OwnedTensor x = random_tensor(DType::BF16, {M, K}, 45);
  const std::vector<int64_t> rows = sample_rows(M, 6);
  OwnedTensor xs;
  gather_rows(x, rows, xs);
  OwnedTensor w = random_tensor(DType::F32, {N, K}, 46, 1.f / std::sqrt(float(K)));
  OwnedTensor b = random_tensor(DType::F32, {N}, 47, 0.1f);
  const std::vector<double> mag = magnitudes(x, rows, w);
  for (Precision p : {Precision::BF16, Precision::INT8}) {
    if (!cpu::cpu_supports(p)) continue;
    const LinearDesc d{w.t, Tensor{}, b.t, p};
    auto rw = ref::pack_linear(d);
    auto cw = cpu::pack_linear(d);
    OwnedTensor yc(DType::BF16, {M, N}), yr(DType::BF16, {static_cast<int64_t>(rows.size()), N});
    cpu::linear(x, *cw, yc, Activation::None);
    ref::linear(xs, *rw, yr, Activation::None);
    check_rows(rows, mag, K, b, p, Activation::None, yr, yc,
               std::string("DiT down projection ") + precision_name(p));
  }
}

// On a CPU with AMX, BF16 / FP8 / INT8 layers run on flick's AMX GEMM; on
// one without AMX, INT8 runs on flick's VNNI GEMM where the CPU has AVX-512
// VNNI and BF16 / FP8 on its AVX-512 BF16 GEMM where it has that (from K =
// 32 on); F32 runs on its AVX-512 FMA GEMM wherever there is AVX-512 (from
// K = 16 on); everything else is oneDNN. linear_uses_amx() / _vnni() /
// _avx512_bf16() / _avx512_f32() say which, and the packed layers must agree
// with them.
TEST(Linear, FlickGemmTakenWhenAvailable) {
  const bool amx = cpu::linear_uses_amx(), vnni = cpu::linear_uses_vnni(),
             bf16 = cpu::linear_uses_avx512_bf16(), f32 = cpu::linear_uses_avx512_f32();
  EXPECT_TRUE(!amx || cpu::amx_available());
  EXPECT_TRUE(!vnni || (cpu::vnni_available() && !amx));
  EXPECT_TRUE(!bf16 || (cpu::avx512_bf16_available() && !amx));
  OwnedTensor w = random_tensor(DType::F32, {40, 70}, 48, 0.1f);
  for (Precision p : precisions()) {
    auto cw = cpu::pack_linear({w.t, Tensor{}, Tensor{}, p});
    const std::string impl = cpu::linear_impl(*cw);
    EXPECT_EQ(impl.rfind("flick:amx", 0) == 0, amx && p != Precision::F32)
        << precision_name(p) << ": " << impl;
    EXPECT_EQ(impl == "flick:vnni_int8", vnni && p == Precision::INT8)
        << precision_name(p) << ": " << impl;
    EXPECT_EQ(impl == "flick:avx512_bf16", bf16 && (p == Precision::BF16 || p == Precision::FP8))
        << precision_name(p) << ": " << impl;
    EXPECT_EQ(impl == "flick:avx512_f32", f32 && p == Precision::F32)
        << precision_name(p) << ": " << impl;
  }
  // F32 below one 16-wide K step too (the kernel runs only the k it has).
  OwnedTensor k8 = random_tensor(DType::F32, {40, 8}, 50, 0.1f);
  const std::string k8_impl =
      cpu::linear_impl(*cpu::pack_linear({k8.t, Tensor{}, Tensor{}, Precision::F32}));
  EXPECT_EQ(k8_impl == "flick:avx512_f32", f32) << "F32 K = 8: " << k8_impl;
  // Below one 32-wide K step BF16 / FP8 stay on oneDNN (faster there),
  // but for K <= 4 (level there, and mlp_relu fuses those).
  OwnedTensor narrow = random_tensor(DType::F32, {40, 16}, 49, 0.1f);
  OwnedTensor k2 = random_tensor(DType::F32, {40, 2}, 51, 0.1f);
  for (Precision p : {Precision::BF16, Precision::FP8}) {
    const std::string impl = cpu::linear_impl(*cpu::pack_linear({narrow.t, Tensor{}, Tensor{}, p}));
    EXPECT_EQ(impl.rfind("flick:", 0) == 0, amx) << precision_name(p) << " K = 16: " << impl;
    const std::string k2_impl = cpu::linear_impl(*cpu::pack_linear({k2.t, Tensor{}, Tensor{}, p}));
    EXPECT_EQ(k2_impl.rfind("flick:", 0) == 0, amx || bf16)
        << precision_name(p) << " K = 2: " << k2_impl;
  }
  std::string kernels = amx ? "AMX" : "";
  if (vnni) kernels += "AVX-512 VNNI (INT8)";
  if (bf16) kernels += std::string(vnni ? ", " : "") + "AVX-512 BF16 (BF16, FP8)";
  if (f32) kernels += std::string(kernels.empty() ? "" : ", ") + "AVX-512 FMA (F32)";
  std::printf("[ gemm     ] linear on flick's GEMMs: %s\n",
              kernels.empty() ? "no (oneDNN)" : kernels.c_str());
}

// Shapes around every boundary of the AMX GEMM: M, N, K off the 16 / 32 /
// 64 tile and block sizes, M large enough for the rows to be split across
// threads (>= 2 row blocks per thread) or small enough for the columns to
// be, N beyond one chunk of 8 column blocks, K beyond one K block (64
// steps: 2048 bf16, 4096 int8), and y rows wider than N (a strided output).
// F32 takes the AVX-512 FMA GEMM over the same tile layout: 16 k a step, so
// K = 1, 31, 65, 129, 200 go through padded copies (and run only the k of
// their last step that K fills), and 2100 and 4200 split K (blocks of 32
// steps, 512 k). N = 8, 17, 47 end on a 16-column tile.
TEST(Linear, AmxBlockingBoundaries) {
  struct Shape {
    int64_t m, k, n;
  };
  const Shape shapes[] = {{1, 1, 1},      {3, 31, 17},    {16, 64, 32},    {31, 65, 33},
                          {47, 129, 300}, {130, 200, 47}, {200, 2100, 70}, {70, 4200, 40},
                          {50, 256, 8},   {29, 2, 256},   {13, 3, 8},      {7, 70, 16}};
  uint32_t seed = 300;
  for (Precision p : {Precision::BF16, Precision::FP8, Precision::INT8, Precision::F32}) {
    if (!cpu::cpu_supports(p)) continue;
    for (const Shape& sh : shapes) {
      const DType xt = seed % 2 ? DType::F32 : DType::BF16;
      const DType yt = seed % 3 ? DType::BF16 : DType::F32;
      const Activation act = test::kLinearActivations[seed % 5];
      OwnedTensor x = random_tensor(xt, {sh.m, sh.k}, seed);
      OwnedTensor w = random_tensor(DType::F32, {sh.n, sh.k}, seed + 1,
                                    1.f / std::sqrt(static_cast<float>(sh.k)));
      OwnedTensor b = random_tensor(DType::F32, {sh.n}, seed + 2, 0.5f);
      seed += 3;
      const LinearDesc d{w.t, Tensor{}, b.t, p};
      auto rw = ref::pack_linear(d);
      auto cw = cpu::pack_linear(d);
      OwnedTensor ybig(yt, {sh.m, sh.n + 5});
      Tensor y = ybig.t.slice(1, 0, sh.n);
      OwnedTensor yr(yt, {sh.m, sh.n});
      cpu::linear(x, *cw, y, act);
      ref::linear(x, *rw, yr, act);
      const std::string label = std::string(precision_name(p)) + " " + std::to_string(sh.m) + "x" +
                                std::to_string(sh.k) + "x" + std::to_string(sh.n) + " " +
                                act_name(act);
      check_rows(x, all_rows(sh.m), w, b, p, act, yr, y, label);
      for (int64_t i = 0; i < sh.m; ++i)  // the columns beyond N stay untouched
        for (int64_t j = sh.n; j < sh.n + 5; ++j) ASSERT_EQ(get(ybig, {i, j}), 0.f) << label;
    }
  }
}

// INT8 on flick's GEMMs (AMX, or AVX-512 VNNI with u8 = q + 128 and the
// weights' column sums taken back): the same s8 operands as the reference,
// an exact s32 sum, then (acc * w_scale) * x_scale + bias in fp32 in the
// reference's order: without an activation the output is bit-identical.
// (oneDNN's kernels order the scaling differently, so this holds only there.)
TEST(Linear, FlickGemmInt8BitExactWithReference) {
  if (!cpu::linear_uses_amx() && !cpu::linear_uses_vnni())
    GTEST_SKIP() << "INT8 runs on oneDNN on this CPU";
  // The VNNI kernel's boundaries too: 6-row tiles, 64-column groups (an odd
  // 32-column block last: N = 33, 65), rows split across threads (few
  // groups) or columns (many), K off the 64-byte step.
  for (const auto& [m, k, n] : {std::array<int64_t, 3>{5, 70, 33},
                                {129, 1536, 96},
                                {1, 64, 1},
                                {13, 100, 65},
                                {47, 129, 300},
                                {200, 2100, 70},
                                {70, 4200, 40}}) {
    OwnedTensor x = random_tensor(DType::BF16, {m, k}, 401);
    OwnedTensor w = random_tensor(DType::F32, {n, k}, 402, 0.05f);
    OwnedTensor b = random_tensor(DType::F32, {n}, 403);
    const LinearDesc d{w.t, Tensor{}, b.t, Precision::INT8};
    auto rw = ref::pack_linear(d);
    auto cw = cpu::pack_linear(d);
    for (DType yt : kFloatTypes) {
      OwnedTensor yc(yt, {m, n}), yr(yt, {m, n});
      cpu::linear(x, *cw, yc, Activation::None);
      ref::linear(x, *rw, yr, Activation::None);
      int64_t first_diff = -1;
      for (int64_t i = 0; i < m * n && first_diff < 0; ++i)
        if (load_as_f32(yt, yc.t.data, i) != load_as_f32(yt, yr.t.data, i)) first_diff = i;
      EXPECT_EQ(first_diff, -1) << m << "x" << k << "x" << n << " y " << dtype_name(yt)
                                << ": first difference at element " << first_diff;
    }
  }
}

// RoundGeluTanh fused into the linear gives exactly what the unfused model
// computed before: the linear's output stored in y's dtype, then the GELU op
// on it (the AMX epilogue evaluates GELU with the elementwise op's code; the
// oneDNN path runs those two ops). Bit-exact, every precision, shapes across
// the AMX block / K-block boundaries.
TEST(Linear, RoundGeluTanhEqualsLinearThenGelu) {
  uint32_t seed = 700;
  for (Precision p : precisions())
    for (const auto& [m, k, n] :
         {std::array<int64_t, 3>{7, 13, 29}, {47, 129, 300}, {70, 4200, 40}})
      for (DType yt : kFloatTypes) {
        OwnedTensor x = random_tensor(DType::BF16, {m, k}, seed);
        OwnedTensor w =
            random_tensor(DType::F32, {n, k}, seed + 1, 2.f / std::sqrt(static_cast<float>(k)));
        OwnedTensor b = random_tensor(DType::F32, {n}, seed + 2, 0.5f);
        seed += 3;
        auto cw = cpu::pack_linear(LinearDesc{w.t, Tensor{}, b.t, p});
        OwnedTensor fused(yt, {m, n}), split(yt, {m, n});
        cpu::linear(x, *cw, fused, Activation::RoundGeluTanh);
        cpu::linear(x, *cw, split, Activation::None);
        cpu::gelu(split, split, /*tanh_approx=*/true);
        int64_t first_diff = -1;
        for (int64_t i = 0; i < m * n && first_diff < 0; ++i)
          if (load_as_f32(yt, fused.t.data, i) != load_as_f32(yt, split.t.data, i)) first_diff = i;
        EXPECT_EQ(first_diff, -1) << precision_name(p) << " " << m << "x" << k << "x" << n << " y "
                                  << dtype_name(yt) << ": first difference at element "
                                  << first_diff;
      }
}

double cosine(const Tensor& a, const Tensor& b) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < a.dim(0); ++i)
    for (int64_t j = 0; j < a.dim(1); ++j) {
      const double u = get(a, {i, j}), v = get(b, {i, j});
      ab += u * v;
      aa += u * u;
      bb += v * v;
    }
  return ab / std::sqrt(aa * bb);
}

// Quantization quality (not kernel correctness): each precision against the
// exact product of the fp32 inputs, on transformer-like data. Weights are
// roughly Gaussian with heavier tails (Student-t, 5 dof, std ~0.026). Hidden
// states are N(0, 1) after a norm; the second set adds outlier channels
// (1 % of channels at 8x), which per-token INT8 pays for: the row max grows
// ~8x, so every other channel gets ~8x coarser steps. That case documents the
// cost (layers with such outliers should stay BF16 or be smoothed first).
TEST(Linear, QuantizationQualityOnRealisticData) {
  const int64_t M = 128, K = 1536, N = 512;
  std::mt19937 gen(52);
  OwnedTensor w(DType::F32, {N, K});
  std::student_t_distribution<float> td(5.f);
  for (int64_t i = 0; i < N * K; ++i) w.t.ptr<float>()[i] = 0.02f * td(gen);
  auto exact = ref::pack_linear({w.t, Tensor{}, Tensor{}, Precision::F32});
  // The same weights as an FP8 checkpoint would ship them: E4M3 with one
  // scale per output channel.
  OwnedTensor w8(DType::F8_E4M3, {N, K}), w8_scale(DType::F32, {N});
  for (int64_t o = 0; o < N; ++o)
    w8_scale.t.ptr<float>()[o] =
        ref::quantize_row_e4m3(w.t.ptr<float>() + o * K, K, w8.t.ptr<uint8_t>() + o * K);
  struct Want {
    const char* name;
    LinearDesc desc;
    double min_cos;
  };
  for (bool outliers : {false, true}) {
    OwnedTensor x = random_tensor(DType::F32, {M, K}, 51);
    if (outliers) {
      std::uniform_int_distribution<int64_t> ch(0, K - 1);
      for (int i = 0; i < K / 100; ++i) {
        const int64_t c = ch(gen);
        for (int64_t m = 0; m < M; ++m) x.t.ptr<float>()[m * K + c] *= 8.f;
      }
    }
    OwnedTensor y_exact(DType::F32, {M, N});
    ref::linear(x, *exact, y_exact, Activation::None);
    // Measured here: bf16 0.999997; int8 0.99983 (plain), 0.99937 (outliers;
    // 0.9974 with other outlier channels drawn); fp8 (E4M3 weights, bf16
    // activations) 0.99966 on both; the fp8 checkpoint run as int8 (E4M3
    // weights requantized per channel, activations per token) 0.99948 /
    // 0.99903: weight rounding twice, a little below int8 from float weights.
    for (const Want& want :
         {Want{"bf16", {w.t, Tensor{}, Tensor{}, Precision::BF16}, 0.99999},
          Want{"int8", {w.t, Tensor{}, Tensor{}, Precision::INT8}, outliers ? 0.995 : 0.999},
          Want{"fp8", {w.t, Tensor{}, Tensor{}, Precision::FP8}, 0.999},
          Want{"fp8 checkpoint as int8",
               {w8.t, w8_scale.t, Tensor{}, Precision::INT8},
               outliers ? 0.995 : 0.999}}) {
      if (!cpu::cpu_supports(want.desc.precision)) continue;
      auto cw = cpu::pack_linear(want.desc);
      OwnedTensor y(DType::F32, {M, N});
      cpu::linear(x, *cw, y, Activation::None);
      const double c = cosine(y, y_exact);
      const std::string name = std::string(want.name) + (outliers ? " (outlier channels)" : "");
      RecordProperty("cosine " + name, std::to_string(c));
      std::printf("[ quality  ] %s vs exact: cosine %.7f\n", name.c_str(), c);
      EXPECT_GE(c, want.min_cos) << name;
    }
  }
}

// Kernels are picked by ISA: on an AMX machine the tests above run the AMX
// GEMM only. Re-run them in a child process with oneDNN capped to AVX-512
// BF16 (what Zen 4 / 5 take: INT8 on flick's VNNI GEMM, BF16 / FP8 on its
// AVX-512 BF16 GEMM), AVX-512 VNNI (Ice Lake, Cascade Lake: BF16 / FP8 on
// oneDNN's AVX-512 kernels) and AVX2 (BF16 emulated in f32, no INT8).
TEST(Linear, OtherIsaPaths) {
  if (std::getenv("FLICK_TEST_ISA_CHILD") != nullptr) GTEST_SKIP() << "already the child";
  const std::string self = std::filesystem::read_symlink("/proc/self/exe");
  const std::string log = testing::TempDir() + "flick_isa_child.log";
  struct Cap {
    const char* isa;
    dnnl_cpu_isa_t level;
  };
  for (const Cap& cap :
       {Cap{"AVX512_CORE_BF16", dnnl_cpu_isa_avx512_core_bf16},
        Cap{"AVX512_CORE_VNNI", dnnl_cpu_isa_avx512_core_vnni}, Cap{"AVX2", dnnl_cpu_isa_avx2}}) {
    if (static_cast<int>(dnnl::get_effective_cpu_isa()) <= static_cast<int>(cap.level)) continue;
    const std::string cmd =
        std::string("FLICK_TEST_ISA_CHILD=1 ONEDNN_MAX_CPU_ISA=") + cap.isa + " '" + self +
        "' --gtest_filter='Linear.EveryPrecision*:Linear.Strided*:Linear.RoundGeluTanh*:"
        "Linear.FlickGemm*:Linear.AmxBlockingBoundaries:"
        "Linear.Prequantized*:MlpRelu.*:Matmul.*:Conv.LayerKinds*:Conv.ChannelsLast*' > '" +
        log + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream in(log);
    const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(rc, 0) << "with ONEDNN_MAX_CPU_ISA=" << cap.isa << ":\n" << out;
  }
}

// mlp_relu = linear(Relu) then linear. The CPU fuses K <= 4 -> H -> N <= 16
// F32 / BF16 MLPs (the DETR decoder's boxRPB, 2 -> 256 -> 8) and keeps the
// hidden values in registers; other shapes and INT8 run the two linears.
// Oracle: runtime/ref's two linears. Bound per output: each hidden value
// may differ by its accumulation error (2^-20 of its magnitude sum, K <= 4)
// and, where it rounds to bf16, by one bf16 step (2^-7 relative: the two
// sides can round to neighbours); the second layer adds H fp32 roundings of
// its magnitude sum and the output rounding. F32 on AVX-512 must also equal
// the CPU's own two linears bit for bit (the kernel keeps the F32 GEMM's
// summation order).
TEST(MlpRelu, MatchesTwoLinears) {
  struct Shape3 {
    int64_t m, k, h, n;
  };
  const Shape3 shapes[] = {{37, 2, 256, 8}, {16, 4, 64, 16}, {5, 1, 33, 1},
                           {20, 3, 48, 5},  {9, 16, 32, 24}, {18, 2, 40, 17}};
  uint32_t seed = 900;
  for (Precision p : precisions()) {
    if (p == Precision::FP8) continue;
    for (const Shape3& sh : shapes) {
      for (DType ht : kFloatTypes) {
        const DType xt = seed % 2 ? DType::F32 : DType::BF16;
        const DType yt = seed % 3 ? DType::F32 : DType::BF16;
        // x rows and y rows wider than K and N: strided rows.
        OwnedTensor xbig = random_tensor(xt, {sh.m, sh.k + 3}, seed);
        const Tensor x = xbig.t.slice(1, 0, sh.k);
        OwnedTensor w1 = random_tensor(DType::F32, {sh.h, sh.k}, seed + 1, 1.f);
        OwnedTensor b1 = random_tensor(DType::F32, {sh.h}, seed + 2, 0.5f);
        OwnedTensor w2 = random_tensor(DType::F32, {sh.n, sh.h}, seed + 3,
                                       1.f / std::sqrt(static_cast<float>(sh.h)));
        OwnedTensor b2 = random_tensor(DType::F32, {sh.n}, seed + 4, 0.5f);
        seed += 5;
        const LinearDesc d1{w1.t, Tensor{}, b1.t, p}, d2{w2.t, Tensor{}, b2.t, p};
        auto r1 = ref::pack_linear(d1), r2 = ref::pack_linear(d2);
        auto c1 = cpu::pack_linear(d1), c2 = cpu::pack_linear(d2);
        OwnedTensor hr(ht, {sh.m, sh.h}), hc(ht, {sh.m, sh.h}), hs(ht, {sh.m, sh.h});
        OwnedTensor yr(yt, {sh.m, sh.n}), ybig(yt, {sh.m, sh.n + 2}), ys(yt, {sh.m, sh.n});
        Tensor yc = ybig.t.slice(1, 0, sh.n);
        ref::mlp_relu(x, *r1, *r2, hr.t, yr.t);
        cpu::mlp_relu(x, *c1, *c2, hc.t, yc);
        cpu::linear(x, *c1, hs.t, Activation::Relu);  // the CPU's two linears
        cpu::linear(hs.t, *c2, ys.t, Activation::None);
        const std::string label = std::string(precision_name(p)) + " " + std::to_string(sh.m) +
                                  "x" + std::to_string(sh.k) + "->" + std::to_string(sh.h) + "->" +
                                  std::to_string(sh.n) + " x " + std::string(dtype_name(xt)) +
                                  " hidden " + std::string(dtype_name(ht)) + " y " +
                                  std::string(dtype_name(yt));
        if (p == Precision::INT8) {  // no fused INT8: the two linears themselves
          for (int64_t i = 0; i < sh.m; ++i)
            for (int64_t o = 0; o < sh.n; ++o) ASSERT_EQ(get(yc, {i, o}), get(ys, {i, o})) << label;
          continue;
        }
        const double h_round = ht == DType::BF16 || p == Precision::BF16 ? std::ldexp(1.0, -7) : 0;
        BoundCheck bc;
        for (int64_t i = 0; i < sh.m; ++i) {
          std::vector<double> dh(static_cast<size_t>(sh.h)), ah(static_cast<size_t>(sh.h));
          for (int64_t j = 0; j < sh.h; ++j) {
            double m1 = std::fabs(get(b1, {j}));
            for (int64_t q = 0; q < sh.k; ++q) m1 += std::fabs(get(x, {i, q}) * get(w1, {j, q}));
            ah[static_cast<size_t>(j)] = std::fabs(get(hr, {i, j}));
            dh[static_cast<size_t>(j)] =
                h_round * ah[static_cast<size_t>(j)] + std::ldexp(1.0, -20) * m1;
          }
          for (int64_t o = 0; o < sh.n; ++o) {
            double spread = 0, mag = 0;
            for (int64_t j = 0; j < sh.h; ++j) {
              const double aw = std::fabs(get(w2, {o, j}));
              spread += aw * dh[static_cast<size_t>(j)];
              mag += aw * ah[static_cast<size_t>(j)];
            }
            const double ref = get(yr, {i, o});
            const double bound =
                spread +
                static_cast<double>(sh.h) * std::ldexp(1.0, -23) * (mag + std::fabs(get(b2, {o}))) +
                test::out_rel_error(yt) * std::fabs(ref) + 1e-30;
            bc.add(get(yc, {i, o}), ref, bound,
                   "row " + std::to_string(i) + " col " + std::to_string(o));
          }
          for (int64_t o = sh.n; o < sh.n + 2; ++o)  // the columns beyond N stay untouched
            ASSERT_EQ(get(ybig, {i, o}), 0.f) << label;
        }
        EXPECT_LE(bc.worst, 1.0) << label << " worst at " << bc.where;
        // The fused kernel leaves the scratch alone: the hidden values
        // never reached memory (AVX-512 CPUs, K <= 4, N <= 16).
        const bool fused_here = p == Precision::F32
                                    ? cpu::linear_uses_avx512_f32()
                                    : cpu::linear_uses_amx() || cpu::linear_uses_avx512_bf16();
        if (fused_here && sh.k <= 4 && sh.n <= 16) {
          for (int64_t i = 0; i < sh.m; ++i)
            for (int64_t j = 0; j < sh.h; ++j) ASSERT_EQ(get(hc, {i, j}), 0.f) << label;
        }
        if (p == Precision::F32 && cpu::linear_uses_avx512_f32()) {
          for (int64_t i = 0; i < sh.m; ++i)
            for (int64_t o = 0; o < sh.n; ++o)
              ASSERT_EQ(get(yc, {i, o}), get(ys, {i, o})) << label << " row " << i << " col " << o;
        }
      }
    }
  }
}

TEST(Matmul, BatchedDtypesAndStrides) {
  const int64_t Bt = 3, M = 9, K = 21, N = 14;
  for (DType at : kFloatTypes)
    for (DType bt : kFloatTypes)
      for (DType ct : kFloatTypes)
        for (bool transposed_b : {false, true}) {
          OwnedTensor a = random_tensor(at, {Bt, M, K}, 61);
          // b as a transposed view of a [Bt, N, K] buffer (K @ K^T in attention).
          OwnedTensor bbuf =
              transposed_b ? random_tensor(bt, {Bt, N, K}, 62) : random_tensor(bt, {Bt, K, N}, 62);
          const Tensor b = transposed_b ? bbuf.t.permute({0, 2, 1}) : bbuf.t;
          OwnedTensor cbuf(ct, {Bt, M, 2 * N});
          Tensor c = cbuf.t.slice(2, 0, N);  // strided output rows
          OwnedTensor cr(ct, {Bt, M, N});
          ref::matmul(a, b, cr);
          cpu::matmul(a, b, c);
          // Exact operands on both sides; fp32 vs double accumulation.
          BoundCheck bc;
          for (int64_t i = 0; i < Bt; ++i)
            for (int64_t r = 0; r < M; ++r)
              for (int64_t col = 0; col < N; ++col) {
                double mag = 0;
                for (int64_t j = 0; j < K; ++j)
                  mag += std::fabs(get(a, {i, r, j}) * get(b, {i, j, col}));
                const double ref = get(cr, {i, r, col});
                bc.add(get(c, {i, r, col}), ref,
                       test::acc_rel_error(Precision::F32, K) * mag +
                           test::out_rel_error(ct) * std::fabs(ref) + 1e-30,
                       std::to_string(i) + "," + std::to_string(r) + "," + std::to_string(col));
              }
          EXPECT_LE(bc.worst, 1.0)
              << dtype_name(at) << " @ " << dtype_name(bt) << " -> " << dtype_name(ct)
              << (transposed_b ? " (b transposed)" : "") << " worst at " << bc.where;
        }
}

TEST(Matmul, TwoDimensional) {
  OwnedTensor a = random_tensor(DType::F32, {5, 7}, 71), b = random_tensor(DType::F32, {7, 3}, 72);
  OwnedTensor c(DType::F32, {5, 3}), cr(DType::F32, {5, 3});
  cpu::matmul(a, b, c);
  ref::matmul(a, b, cr);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_NEAR(get(c, {i, j}), get(cr, {i, j}), 1e-5);
}

// Rows with exact rounding ties (x / scale = k + 0.5 exactly), a zero row,
// subnormal-scale values, and odd lengths for the vector tails.
OwnedTensor quantize_input(DType dt, int64_t k) {
  OwnedTensor x = random_tensor(dt, {6, k}, 81 + static_cast<uint32_t>(k));
  for (int64_t j = 0; j < k; ++j) {
    // Row 1: max 127 -> scale exactly 1, values on .5 ties of both parities.
    store_from_f32(dt, x.t.at({1, j}), 0, j == 0 ? 127.f : (j % 2 ? 2.5f : -3.5f) + (j % 7));
    store_from_f32(dt, x.t.at({2, j}), 0, 0.f);
    store_from_f32(dt, x.t.at({3, j}), 0, get(x, {3, j}) * 1e-30f);
  }
  return x;
}

TEST(QuantizeRowsInt8, BitExactWithReference) {
  for (DType dt : kFloatTypes)
    for (int64_t k : {1, 7, 16, 17, 33, 255, 1536}) {
      OwnedTensor x = quantize_input(dt, k);
      OwnedTensor qr(DType::I8, {6, k}), qc(DType::I8, {6, k});
      OwnedTensor sr(DType::F32, {6}), sc(DType::F32, {6});
      ref::quantize_rows_int8(x, qr, sr);
      cpu::quantize_rows_int8(x, qc, sc);
      ASSERT_EQ(std::memcmp(qr.t.data, qc.t.data, qr.t.nbytes()), 0)
          << dtype_name(dt) << " k=" << k;
      ASSERT_EQ(std::memcmp(sr.t.data, sc.t.data, sr.t.nbytes()), 0)
          << dtype_name(dt) << " k=" << k;
      EXPECT_EQ(get(sr, {2}), 1.f);  // zero row
      EXPECT_EQ(get(sr, {1}), 1.f);  // max 127
      if (k > 6) {  // ties to even: 3.5 -> 4, -1.5 -> -2, 5.5 -> 6, 0.5 -> 0, 2.5 -> 2
        const float want[] = {127, 4, -2, 6, 0, 8, 2};
        for (int64_t j = 0; j < 7; ++j) EXPECT_EQ(get(qr, {1, j}), want[j]) << "j=" << j;
      }
    }
}

// Many random rows: the kernels multiply by 1 / scale and divide only near
// ties (quantize.h). The data holds elements where the plain product would
// round the other way; the kernels must still match the division exactly.
TEST(QuantizeRowsInt8, RandomRowsBitExactNearTies) {
  const int64_t M = 3000, K = 1536;
  for (DType dt : kFloatTypes) {
    OwnedTensor x = random_tensor(dt, {M, K}, 91);
    OwnedTensor qr(DType::I8, {M, K}), qc(DType::I8, {M, K});
    OwnedTensor sr(DType::F32, {M}), sc(DType::F32, {M});
    ref::quantize_rows_int8(x, qr, sr);
    cpu::quantize_rows_int8(x, qc, sc);
    int64_t product_differs = 0, first_bad = -1;
    for (int64_t i = 0; i < M * K; ++i) {
      const float s = sr.t.ptr<float>()[i / K];
      const float v = load_as_f32(dt, x.t.data, i);
      if (std::nearbyint(v * (1.f / s)) != std::nearbyint(v / s)) ++product_differs;
      if (first_bad < 0 && qr.t.ptr<int8_t>()[i] != qc.t.ptr<int8_t>()[i]) first_bad = i;
    }
    EXPECT_GT(product_differs, 0) << "the data should hold near-tie elements";
    EXPECT_EQ(first_bad, -1) << dtype_name(dt) << " element " << first_bad;
    EXPECT_EQ(std::memcmp(sr.t.data, sc.t.data, sr.t.nbytes()), 0);
    std::vector<uint8_t> got(static_cast<size_t>(K));
    for (int64_t m = 0; m < M; ++m) {  // the AVX2 kernel on the same rows
      const void* row = x.t.at({m, 0});
      if (dt == DType::F32)
        cpu::quantize_row_f32_avx2(static_cast<const float*>(row), K, got.data(), 0);
      else
        cpu::quantize_row_bf16_avx2(static_cast<const uint16_t*>(row), K, got.data(), 0);
      ASSERT_EQ(std::memcmp(got.data(), qr.t.at({m, 0}), static_cast<size_t>(K)), 0)
          << "AVX2 " << dtype_name(dt) << " row " << m;
    }
  }
}

// The AVX2 fallback kernels, which the dispatcher does not pick on an
// AVX-512 machine, against the same scalar rule.
TEST(QuantizeRowsInt8, Avx2KernelBitExact) {
  for (int64_t k : {1, 7, 8, 9, 100, 1536}) {
    OwnedTensor xf = quantize_input(DType::F32, k);
    OwnedTensor xb = quantize_input(DType::BF16, k);
    for (int64_t r = 0; r < 6; ++r) {
      std::vector<float> row(static_cast<size_t>(k));
      std::vector<int8_t> want(static_cast<size_t>(k));
      std::vector<uint8_t> got(static_cast<size_t>(k));
      for (int offset : {0, 128}) {
        for (const OwnedTensor* x : {&xf, &xb}) {
          for (int64_t j = 0; j < k; ++j) row[static_cast<size_t>(j)] = get(*x, {r, j});
          const float s_want = ref::quantize_row_int8(row.data(), k, want.data());
          const float s_got =
              x->t.dtype == DType::F32
                  ? cpu::quantize_row_f32_avx2(static_cast<const float*>(x->t.at({r, 0})), k,
                                               got.data(), offset)
                  : cpu::quantize_row_bf16_avx2(static_cast<const uint16_t*>(x->t.at({r, 0})), k,
                                                got.data(), offset);
          ASSERT_EQ(s_want, s_got) << "row " << r << " k " << k;
          for (int64_t j = 0; j < k; ++j)
            ASSERT_EQ(static_cast<int>(want[static_cast<size_t>(j)]) + offset,
                      offset == 0 ? static_cast<int8_t>(got[static_cast<size_t>(j)])
                                  : static_cast<int>(got[static_cast<size_t>(j)]))
                << "row " << r << " k " << k << " j " << j << " offset " << offset;
        }
      }
    }
  }
}

}  // namespace
}  // namespace flick
