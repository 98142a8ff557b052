// Layer, RMS and group normalisation: the reference by hand and against
// torch, the CPU op against the reference.
//
// Tolerances (u = 2^-24): an fp32 implementation computes y = (x - m) r w + b
// with m within an ulp, r = 1/sqrt(var + eps) within ~16u (the variance is a
// sum in fp32 lanes), so |dy| <= 4u (|x| + |m|) r |w| + 32u |x^ w| + 4u |b|
// with x^ = (x - m) r. The first term is the cancellation in x - m (large when
// |m| >> std); the others are a few roundings of the result's parts.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/cpu/ops.h"
#include "runtime/ref/ops.h"
#include "tests/ops/elementwise_testing.h"

namespace flick {
namespace {

namespace ft = flick::testing;
constexpr double u = ft::kF32Eps;

OwnedTensor vec(std::vector<double> v, Shape shape, DType dt = DType::F32) {
  OwnedTensor t(dt, shape);
  ft::fill(t.t, v);
  return t;
}

// Row (or group) statistics in double: mean and 1/sqrt(var + eps) per element.
struct Stats {
  std::vector<double> mean, rstd;
};
Stats row_stats(const std::vector<double>& x, int64_t n, double eps, bool rms) {
  Stats s;
  for (size_t r = 0; r < x.size() / size_t(n); ++r) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < n; ++i) m += x[r * size_t(n) + size_t(i)];
    m /= double(n);
    for (int64_t i = 0; i < n; ++i) {
      const double d = x[r * size_t(n) + size_t(i)] - (rms ? 0 : m);
      v += d * d;
    }
    const double rstd = 1 / std::sqrt(v / double(n) + eps);
    for (int64_t i = 0; i < n; ++i) {
      s.mean.push_back(rms ? 0 : m);
      s.rstd.push_back(rstd);
    }
  }
  return s;
}

// The tolerance of the header comment; w, b: the per-element affine values.
std::vector<double> norm_tol(const std::vector<double>& x, const Stats& s,
                             const std::vector<double>& w, const std::vector<double>& b) {
  std::vector<double> t(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double aw = std::fabs(w[i]);
    t[i] = 4 * u * (std::fabs(x[i]) + std::fabs(s.mean[i])) * s.rstd[i] * aw +
           32 * u * std::fabs((x[i] - s.mean[i]) * s.rstd[i] * aw) + 4 * u * std::fabs(b[i]);
  }
  return t;
}

// Per-element values of a [C] parameter for a tensor whose channel index is
// (i / inner) % C; 1 (weight) / 0 (bias) when empty.
std::vector<double> per_element(const Tensor& p, size_t count, int64_t inner, int64_t C,
                                double dflt) {
  std::vector<double> v(count, dflt);
  if (p.empty()) return v;
  const std::vector<double> pv = ft::values(p);
  for (size_t i = 0; i < count; ++i) v[i] = pv[i / size_t(inner) % size_t(C)];
  return v;
}

TEST(RefNorm, HandComputedValues) {
  // [1, 2, 3, 4]: mean 2.5, var 1.25.
  OwnedTensor x = vec({1, 2, 3, 4}, {1, 4});
  OwnedTensor y(DType::F32, {1, 4});
  const double r = 1 / std::sqrt(1.25 + 1e-5);
  ref::layer_norm(x, Tensor{}, Tensor{}, 1e-5f, y);
  const std::vector<double> tol4(4, 4 * u * 2);  // a rounding or two of values below 2
  ft::expect_close(y, {-1.5 * r, -0.5 * r, 0.5 * r, 1.5 * r}, tol4, "ln");
  OwnedTensor w = vec({1, 2, 3, 4}, {4}), b = vec({0, 0, 1, -1}, {4});
  ref::layer_norm(x, w, b, 1e-5f, y);
  ft::expect_close(y, {-1.5 * r, -1.0 * r, 1.5 * r + 1, 6.0 * r - 1},
                   std::vector<double>(4, 4 * u * 8), "ln affine");
  // rms of (3, 4) = sqrt(12.5).
  OwnedTensor x2 = vec({3, 4}, {2}), w2 = vec({1, -2}, {2});
  OwnedTensor y2(DType::F32, {2});
  ref::rms_norm(x2, w2, 0.f, y2);
  ft::expect_close(y2, {3 / std::sqrt(12.5), -8 / std::sqrt(12.5)}, {4 * u, 4 * u * 4}, "rms");
  // group_norm [1, 4, 2], 2 groups: {1,2,3,4} and {10,10,10,14}.
  OwnedTensor g = vec({1, 2, 3, 4, 10, 10, 10, 14}, {1, 4, 2});
  OwnedTensor gy(DType::F32, {1, 4, 2});
  ref::group_norm(g, 2, Tensor{}, Tensor{}, 0.f, gy, Activation::None);
  const double r2 = 1 / std::sqrt(3.0);  // group 2: mean 11, var 3
  ft::expect_close(gy,
                   {-1.5 / std::sqrt(1.25), -0.5 / std::sqrt(1.25), 0.5 / std::sqrt(1.25),
                    1.5 / std::sqrt(1.25), -r2, -r2, -r2, 3 * r2},
                   std::vector<double>(8, 1e-6), "group_norm");
}

// The reference against torch's F.layer_norm / F.rms_norm / F.group_norm in
// fp32, and in bf16 (fp32 inside, one rounding) against the same band.
TEST(RefNorm, MatchesTorch) {
  const ft::Fixtures f = ft::load_fixtures("ops/norm.safetensors");
  int checked = 0;
  for (const auto& [name, p] : f.cases) {
    SCOPED_TRACE(name);
    const Tensor& x = f.get(name + ".x");
    const Tensor& yt = f.get(name + ".y");
    const Tensor w = f.has(name + ".w") ? f.get(name + ".w") : Tensor{};
    const Tensor b = f.has(name + ".b") ? f.get(name + ".b") : Tensor{};
    const float eps = std::stof(p.at("eps"));
    OwnedTensor y(DType::F32, x.shape);
    const std::vector<double> xv = ft::values(x);
    std::vector<double> tol;
    if (p.at("op") == "group_norm") {
      const int64_t groups = std::stoll(p.at("groups"));
      ref::group_norm(x, groups, w, b, eps, y, Activation::None);
      const int64_t C = x.dim(1), inner = x.numel() / x.dim(0) / C;
      const Stats s = row_stats(xv, C / groups * inner, eps, false);
      tol = norm_tol(xv, s, per_element(w, xv.size(), inner, C, 1),
                     per_element(b, xv.size(), inner, C, 0));
    } else {
      const int64_t n = x.dim(-1);
      const bool rms = p.at("op") == "rms_norm";
      if (rms) {
        ref::rms_norm(x, w, eps, y);
      } else {
        ref::layer_norm(x, w, b, eps, y);
      }
      tol = norm_tol(xv, row_stats(xv, n, eps, rms), per_element(w, xv.size(), 1, n, 1),
                     per_element(b, xv.size(), 1, n, 0));
    }
    ft::expect_close(yt, ft::values(y), tol, name);
    ++checked;
  }
  EXPECT_EQ(checked, 14);
}

constexpr int64_t kWidths[] = {1, 7, 33, 1280, 1536, 1537, 5120, 8960};
struct DTypes {
  DType in, out, param;
};
constexpr DTypes kDTypes[] = {{DType::F32, DType::F32, DType::F32},
                              {DType::BF16, DType::BF16, DType::BF16},
                              {DType::BF16, DType::F32, DType::F32},
                              {DType::F32, DType::BF16, DType::BF16},
                              {DType::F16, DType::F16, DType::F32}};

void check(const std::function<void(Tensor&)>& ref_op, const std::function<void(Tensor&)>& cpu_op,
           const Shape& shape, DType out, const std::vector<double>& tol, const std::string& what,
           Tensor* y_view = nullptr) {
  OwnedTensor yr(DType::F32, shape);
  ref_op(yr);
  OwnedTensor yc(out, shape);
  Tensor& y = y_view ? *y_view : yc.t;
  cpu_op(y);
  ft::expect_close(y, ft::values(yr), tol, what);
}

TEST(CpuNorm, LayerAndRmsNormMatchRef) {
  uint64_t seed = 1;
  for (DTypes d : kDTypes)
    for (int64_t n : kWidths)
      for (int affine = 0; affine < 3; ++affine) {  // none, weight + bias, bias only
        const Shape s{3, n};
        OwnedTensor x = ft::random_tensor(d.in, s, ++seed, 2.0, affine == 1 ? 3.0 : 0.0);
        OwnedTensor w = ft::random_tensor(d.param, {n}, ++seed, 0.3, 1.0);
        OwnedTensor b = ft::random_tensor(d.param, {n}, ++seed, 0.2);
        const Tensor wt = affine == 1 ? w.t : Tensor{};
        const Tensor bt = affine >= 1 ? b.t : Tensor{};
        const std::string what = std::string(dtype_name(d.in)) + "->" +
                                 std::string(dtype_name(d.out)) + " " + s.str() + " affine " +
                                 std::to_string(affine);
        const auto xv = ft::values(x);
        const auto wv = per_element(wt, xv.size(), 1, n, 1),
                   bv = per_element(bt, xv.size(), 1, n, 0);
        check([&](Tensor& y) { ref::layer_norm(x, wt, bt, 1e-6f, y); },
              [&](Tensor& y) { cpu::layer_norm(x, wt, bt, 1e-6f, y); }, s, d.out,
              norm_tol(xv, row_stats(xv, n, 1e-6, false), wv, bv), "layer_norm " + what);
        if (affine == 2) continue;
        check([&](Tensor& y) { ref::rms_norm(x, wt, 1e-6f, y); },
              [&](Tensor& y) { cpu::rms_norm(x, wt, 1e-6f, y); }, s, d.out,
              norm_tol(xv, row_stats(xv, n, 1e-6, true), wv, std::vector<double>(xv.size(), 0)),
              "rms_norm " + what);
      }
}

TEST(CpuNorm, PerHeadStridedAndInPlace) {
  // q of a fused [B, L, 3 * H * D] projection viewed as [B, L, H, D]: RMS over D, in place.
  OwnedTensor qkv = ft::random_tensor(DType::BF16, {2, 5, 3 * 12 * 128}, 3, 1.5);
  Tensor q = qkv.t.reshape({2, 5, 36, 128}).slice(2, 12, 12);
  OwnedTensor w = ft::random_tensor(DType::BF16, {128}, 4, 0.3, 1.0);
  const auto qv = ft::values(q);
  check([&](Tensor& y) { ref::rms_norm(q, w, 1e-6f, y); },
        [&](Tensor& y) { cpu::rms_norm(q, w, 1e-6f, y); }, q.shape, DType::BF16,
        norm_tol(qv, row_stats(qv, 128, 1e-6, true), per_element(w, qv.size(), 1, 128, 1),
                 std::vector<double>(qv.size(), 0)),
        "rms_norm per head in place", &q);
  // Norms over the channels of NC(D)HW tensors, viewed as [N, (D,) H, W, C]:
  // x and y both channel-strided (the vectorised-across-pixels path), odd
  // pixel counts, in place, and a contiguous output.
  struct ChannelCase {
    Shape nchw;
    DType in, out;
  };
  const ChannelCase cc[] = {{{1, 96, 9, 23}, DType::F32, DType::F32},
                            {{2, 384, 3, 5}, DType::BF16, DType::BF16},
                            {{1, 33, 130}, DType::F16, DType::F32},
                            {{1, 16, 2, 7, 9}, DType::F32, DType::BF16}};
  for (const ChannelCase& c : cc)
    for (int rms = 0; rms < 2; ++rms) {
      const int nd = c.nchw.ndim;
      std::vector<int> to_last(static_cast<size_t>(nd));  // [N, C, *] -> [N, *, C]
      to_last[0] = 0;
      for (int d = 1; d < nd - 1; ++d) to_last[size_t(d)] = d + 1;
      to_last[size_t(nd - 1)] = 1;
      Shape vs;
      vs.ndim = nd;
      for (int d = 0; d < nd; ++d) vs[d] = c.nchw[to_last[size_t(d)]];
      std::vector<int> storage(
          static_cast<size_t>(nd));  // storage order of the view's dims: N, C, *
      storage[0] = 0;
      storage[1] = nd - 1;
      for (int d = 2; d < nd; ++d) storage[size_t(d)] = d - 1;
      ft::StridedTensor xv = ft::make_permuted(c.in, vs, storage);
      ft::fill(xv.t, ft::values(ft::random_tensor(DType::F32, vs, 11, 1.5, 0.25)));
      const int64_t C = vs[-1];
      OwnedTensor w = ft::random_tensor(DType::F32, {C}, 12, 0.3, 1.0);
      OwnedTensor b = ft::random_tensor(DType::F32, {C}, 13, 0.2);
      const auto vals = ft::values(xv);
      const auto tol =
          norm_tol(vals, row_stats(vals, C, 1e-6, rms != 0), per_element(w, vals.size(), 1, C, 1),
                   per_element(rms ? Tensor{} : b.t, vals.size(), 1, C, 0));
      auto ref_op = [&](Tensor& y) {
        if (rms)
          ref::rms_norm(xv, w, 1e-6f, y);
        else
          ref::layer_norm(xv, w, b, 1e-6f, y);
      };
      auto cpu_op = [&](Tensor& y) {
        if (rms)
          cpu::rms_norm(xv, w, 1e-6f, y);
        else
          cpu::layer_norm(xv, w, b, 1e-6f, y);
      };
      const std::string what = std::string(rms ? "rms" : "layer") + "_norm over channels " +
                               c.nchw.str() + " " + std::string(dtype_name(c.in));
      ft::StridedTensor yv = ft::make_permuted(c.out, vs, storage);
      check(ref_op, cpu_op, vs, c.out, tol, what, &yv.t);
      check(ref_op, cpu_op, vs, c.out, tol, what + " contiguous out");
      if (c.in == c.out) check(ref_op, cpu_op, vs, c.out, tol, what + " in place", &xv.t);
    }
  // Layer norm over the channels of an NCHW tensor: a [N, H, W, C] permuted view.
  OwnedTensor x = ft::random_tensor(DType::F32, {2, 24, 5, 7}, 5, 1.0, 0.5);
  Tensor xp = x.t.permute({0, 2, 3, 1});
  const auto xv = ft::values(xp);
  check([&](Tensor& y) { ref::layer_norm(xp, Tensor{}, Tensor{}, 1e-5f, y); },
        [&](Tensor& y) { cpu::layer_norm(xp, Tensor{}, Tensor{}, 1e-5f, y); }, xp.shape, DType::F32,
        norm_tol(xv, row_stats(xv, 24, 1e-5, false), std::vector<double>(xv.size(), 1),
                 std::vector<double>(xv.size(), 0)),
        "layer_norm over strided channels");
}

TEST(CpuNorm, GroupNormMatchesRef) {
  struct Case {
    Shape s;
    int64_t groups;
    bool affine;
  };
  // VAE-style 5-D, SAM3's GN(8), a spatial block larger than the 4096 chunk.
  const Case cases[] = {{{2, 64, 3, 5}, 32, true},   {{1, 96, 2, 4, 4}, 32, true},
                        {{3, 12, 7}, 4, false},      {{1, 8, 11, 13}, 8, true},
                        {{1, 64, 70, 80}, 32, true}, {{2, 32}, 8, true}};
  uint64_t seed = 50;
  for (DTypes d : kDTypes)
    for (const Case& c : cases) {
      OwnedTensor x = ft::random_tensor(d.in, c.s, ++seed, 2.0, 0.3);
      const int64_t C = c.s[1];
      OwnedTensor w = ft::random_tensor(d.param, {C}, ++seed, 0.3, 1.0);
      OwnedTensor b = ft::random_tensor(d.param, {C}, ++seed, 0.2);
      const Tensor wt = c.affine ? w.t : Tensor{}, bt = c.affine ? b.t : Tensor{};
      const auto xv = ft::values(x);
      const int64_t inner = x.t.numel() / c.s[0] / C;
      const auto tol = norm_tol(xv, row_stats(xv, C / c.groups * inner, 1e-6, false),
                                per_element(wt, xv.size(), inner, C, 1),
                                per_element(bt, xv.size(), inner, C, 0));
      check([&](Tensor& y) { ref::group_norm(x, c.groups, wt, bt, 1e-6f, y, Activation::None); },
            [&](Tensor& y) { cpu::group_norm(x, c.groups, wt, bt, 1e-6f, y, Activation::None); },
            c.s, d.out, tol,
            "group_norm " + std::string(dtype_name(d.in)) + "->" + std::string(dtype_name(d.out)) +
                " " + c.s.str());
    }
  // A channels-last view (strided spatial block) takes the strided path.
  OwnedTensor xs = ft::random_tensor(DType::F32, {1, 6, 5, 16}, 9);
  Tensor xv = xs.t.permute({0, 3, 1, 2});  // [1, 16, 6, 5], channels innermost in memory
  const auto vals = ft::values(xv);
  check([&](Tensor& y) { ref::group_norm(xv, 4, Tensor{}, Tensor{}, 1e-5f, y, Activation::None); },
        [&](Tensor& y) { cpu::group_norm(xv, 4, Tensor{}, Tensor{}, 1e-5f, y, Activation::None); },
        xv.shape, DType::F32,
        norm_tol(vals, row_stats(vals, 4 * 30, 1e-5, false), std::vector<double>(vals.size(), 1),
                 std::vector<double>(vals.size(), 0)),
        "group_norm channels-last");
}

// Channels-last x and y (EfficientSAM3's pixel decoder keeps its maps so)
// take the CPU op's per-channel column sums: against the reference, every
// dtype pair, pixel counts off the 64-pixel chunk, a batch, 5-D.
TEST(CpuNorm, GroupNormChannelsLastMatchesRef) {
  struct Case {
    Shape s;
    int64_t groups;
    bool affine;
  };
  const Case cases[] = {
      {{1, 256, 37, 29}, 8, true}, {{2, 64, 9, 7}, 32, false}, {{1, 96, 3, 4, 5}, 32, true}};
  uint64_t seed = 700;
  for (DTypes d : kDTypes)
    for (const Case& c : cases) {
      const int nd = c.s.ndim;
      std::vector<int> order{0};
      for (int i = 2; i < nd; ++i) order.push_back(i);
      order.push_back(1);
      ft::StridedTensor x = ft::make_permuted(d.in, c.s, order);
      ft::fill(x.t, ft::values(ft::random_tensor(DType::F32, c.s, ++seed, 2.0, 0.3)));
      const int64_t C = c.s[1];
      OwnedTensor w = ft::random_tensor(d.param, {C}, ++seed, 0.3, 1.0);
      OwnedTensor b = ft::random_tensor(d.param, {C}, ++seed, 0.2);
      const Tensor wt = c.affine ? w.t : Tensor{}, bt = c.affine ? b.t : Tensor{};
      const auto xv = ft::values(x.t);
      const int64_t inner = x.t.numel() / c.s[0] / C;
      const auto tol = norm_tol(xv, row_stats(xv, C / c.groups * inner, 1e-6, false),
                                per_element(wt, xv.size(), inner, C, 1),
                                per_element(bt, xv.size(), inner, C, 0));
      ft::StridedTensor y = ft::make_permuted(d.out, c.s, order);
      check(
          [&](Tensor& out) {
            ref::group_norm(x.t, c.groups, wt, bt, 1e-6f, out, Activation::None);
          },
          [&](Tensor& out) {
            cpu::group_norm(x.t, c.groups, wt, bt, 1e-6f, out, Activation::None);
          },
          c.s, d.out, tol,
          "channels-last group_norm " + std::string(dtype_name(d.in)) + "->" +
              std::string(dtype_name(d.out)) + " " + c.s.str(),
          &y.t);
    }
}

// group_norm's fused activation (the VAE's GroupNorm + SiLU, SAM3's GroupNorm
// + ReLU) is the activation op on the stored norm output, bit for bit, on
// both backends and every CPU path: contiguous NC*, dense channels-last, and
// a channels-last view with padded rows (the reference path).
TEST(CpuNorm, GroupNormFusedActivationIsNormThenActivation) {
  struct Layout {
    const char* name;
    std::vector<int> order;  // storage order of the dims, outermost first
    bool padded;
  };
  const Shape s{2, 16, 9, 7};
  const Layout layouts[] = {{"nchw", {0, 1, 2, 3}, false},
                            {"channels-last", {0, 2, 3, 1}, false},
                            {"padded", {0, 1, 2, 3}, true}};
  uint64_t seed = 900;
  for (DTypes d : kDTypes)
    for (Activation act : {Activation::Relu, Activation::Silu})
      for (const Layout& l : layouts) {
        OwnedTensor xs = ft::random_tensor(d.in, s, ++seed, 2.0, 0.3);
        OwnedTensor w = ft::random_tensor(d.param, {s[1]}, ++seed, 0.3, 1.0);
        OwnedTensor b = ft::random_tensor(d.param, {s[1]}, ++seed, 0.2);
        auto make = [&](DType t) {
          return l.padded ? ft::make_padded(t, s, 3) : ft::make_permuted(t, s, l.order);
        };
        ft::StridedTensor x = make(d.in);
        ft::fill(x.t, ft::values(xs));
        const std::string what = std::string(l.name) + " " + std::string(dtype_name(d.in)) + "->" +
                                 std::string(dtype_name(d.out)) +
                                 (act == Activation::Relu ? " relu" : " silu");
        for (int backend = 0; backend < 2; ++backend) {
          ft::StridedTensor fused = make(d.out), split = make(d.out);
          auto norm = backend == 0 ? &ref::group_norm : &cpu::group_norm;
          auto activation = backend == 0 ? &ref::activation : &cpu::activation;
          norm(x.t, 4, w.t, b.t, 1e-6f, fused.t, act);
          norm(x.t, 4, w.t, b.t, 1e-6f, split.t, Activation::None);
          activation(split.t, split.t, act);
          EXPECT_EQ(ft::expect_equal(fused.t, split.t, what), 0)
              << (backend == 0 ? "ref " : "cpu ") << what;
        }
      }
}

}  // namespace
}  // namespace flick
