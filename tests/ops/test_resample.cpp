// Nearest upsampling and resize (torch.nn.functional.interpolate): the
// reference and the CPU op against torch fixtures, nearest upsampling by hand.
//
// Resize tolerance: an output is sum_i sum_j wh_i ww_j x[h_i, w_j] with
// weights that sum to 1 and |weights| summing to at most ~1.3 (bicubic
// lobes), evaluated in fp32 by PyTorch (and by the CPU op): a few roundings of
// terms bounded by max|x|, so |dy| <= 16 u max|x|. The pixel selection itself
// must be exact: a wrong source index is off by O(|x|).
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/cpu/ops.h"
#include "runtime/ref/ops.h"
#include "tests/ops/elementwise_testing.h"

namespace flick {
namespace {

namespace ft = flick::testing;
constexpr double u = ft::kF32Eps;

ResizeMode mode_of(const std::string& m) {
  if (m == "nearest") return ResizeMode::Nearest;
  if (m == "bilinear") return ResizeMode::Bilinear;
  return ResizeMode::Bicubic;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

using ResizeFn = void (*)(const Tensor&, Tensor&, ResizeMode, bool, bool);

// Resizes x to torch's output shape with fn and checks against torch's F32
// output (rows: the output rows the fixture kept, or all).
void check_resize(ResizeFn fn, const Tensor& x, const Tensor& y_torch, const Tensor* rows,
                  const std::map<std::string, std::string>& p, DType out, const std::string& what,
                  double* worst_ulp = nullptr) {
  const int64_t OH =
      rows ? std::stoll(p.at("out").substr(0, p.at("out").find('x'))) : y_torch.dim(2);
  OwnedTensor y(out, {x.dim(0), x.dim(1), OH, y_torch.dim(3)});
  fn(x, y, mode_of(p.at("mode")), p.at("align_corners") == "1", p.at("antialias") == "1");
  std::vector<double> got;
  if (rows) {  // [N, C, len(rows), OW] of the full output
    const auto r = ft::values(*rows);
    const auto all = ft::values(y);
    const int64_t OW = y.t.dim(3);
    OwnedTensor picked(out, y_torch.shape);
    std::vector<double> v;
    for (int64_t nc = 0; nc < x.dim(0) * x.dim(1); ++nc)
      for (double h : r)
        for (int64_t w = 0; w < OW; ++w) v.push_back(all[size_t((nc * OH + int64_t(h)) * OW + w)]);
    ft::fill(picked.t, v);
    y = std::move(picked);
  }
  const std::vector<double> e = ft::values(y_torch);
  const double tol = 16 * u * max_abs(ft::values(x));
  ft::expect_close(y, e, std::vector<double>(e.size(), tol), what);
  if (worst_ulp) *worst_ulp = std::max(*worst_ulp, ft::max_ulp_error(ft::values(y), e));
}

TEST(Resize, RefAndCpuMatchTorch) {
  const ft::Fixtures f = ft::load_fixtures("ops/resize.safetensors");
  int checked = 0;
  double worst_ref = 0, worst_cpu = 0;
  int64_t exact_ref = 0, exact_cpu = 0, total = 0;
  for (const auto& [name, p] : f.cases) {
    if (p.count("input") == 0) continue;
    const Tensor& x = f.get(p.at("input") + ".x");
    const Tensor& yt = f.get(name + ".y");
    const std::string what = name + " " + p.at("mode") + " ac=" + p.at("align_corners") +
                             " aa=" + p.at("antialias") + " " + x.shape.str() + "->" +
                             yt.shape.str();
    check_resize(ref::resize, x, yt, nullptr, p, DType::F32, "ref " + what, &worst_ref);
    check_resize(cpu::resize, x, yt, nullptr, p, DType::F32, "cpu " + what, &worst_cpu);
    // BF16 in and out (the inputs are bf16 values): the fp32 result rounded once.
    OwnedTensor xb = ft::to_dtype(x, DType::BF16);
    check_resize(ref::resize, xb, yt, nullptr, p, DType::BF16, "ref bf16 " + what);
    check_resize(cpu::resize, xb, yt, nullptr, p, DType::BF16, "cpu bf16 " + what);
    for (ResizeFn fn : {ref::resize, cpu::resize}) {
      OwnedTensor y(DType::F32, yt.shape);
      fn(x, y, mode_of(p.at("mode")), p.at("align_corners") == "1", p.at("antialias") == "1");
      const auto a = ft::values(y), e = ft::values(yt);
      for (size_t i = 0; i < a.size(); ++i)
        (fn == ref::resize ? exact_ref : exact_cpu) += a[i] == e[i];
      if (fn == ref::resize) total += static_cast<int64_t>(a.size());
    }
    ++checked;
  }
  EXPECT_EQ(checked, 90);
  std::printf(
      "[ resize vs torch ] bit-exact: ref %.2f%%, cpu %.2f%%; max ulp: ref %.1f, cpu %.1f\n",
      100.0 * double(exact_ref) / double(total), 100.0 * double(exact_cpu) / double(total),
      worst_ref, worst_cpu);
}

// The real preprocessing sizes on the synthetic image of the fixture script:
// Matrix-Game's CLIP input (bicubic 352x640 -> 224x224) and an antialiased
// SAM3-style bilinear downscale.
TEST(Resize, PreprocessingSizesMatchTorch) {
  const ft::Fixtures f = ft::load_fixtures("ops/resize.safetensors");
  for (const char* name : {"clip_bicubic", "aa_bilinear_image"}) {
    const auto& p = f.cases.at(name);
    int64_t dims[4];
    sscanf(p.at("image").c_str(), "%ldx%ldx%ldx%ld", &dims[0], &dims[1], &dims[2], &dims[3]);
    OwnedTensor x = ft::synthetic_image(dims[0], dims[1], dims[2], dims[3]);
    const Tensor& rows = f.get(std::string(name) + ".rows");
    for (ResizeFn fn : {ref::resize, cpu::resize})
      check_resize(fn, x, f.get(std::string(name) + ".y"), &rows, p, DType::F32,
                   std::string(fn == ref::resize ? "ref " : "cpu ") + name);
  }
}

TEST(Resize, CpuMatchesRefOnStridedViews) {
  // An NHWC-stored input viewed as NCHW, written into a padded BF16 output.
  const Shape xs{2, 3, 45, 61};
  ft::StridedTensor x = ft::make_permuted(DType::BF16, xs, {0, 2, 3, 1});
  ft::fill(x.t, ft::values(ft::random_tensor(DType::F32, xs, 4)));
  const double tol = 16 * u * max_abs(ft::values(x));
  for (ResizeMode m : {ResizeMode::Nearest, ResizeMode::Bilinear, ResizeMode::Bicubic})
    for (int aa = 0; aa < (m == ResizeMode::Nearest ? 1 : 2); ++aa) {
      const Shape ys{2, 3, 17, 100};
      OwnedTensor yr(DType::F32, ys);
      ref::resize(x, yr, m, false, aa != 0);
      ft::StridedTensor yc = ft::make_padded(DType::BF16, ys, 7);
      cpu::resize(x, yc, m, false, aa != 0);
      ft::expect_close(
          yc, ft::values(yr), std::vector<double>(size_t(ys.numel()), tol),
          "strided resize mode " + std::to_string(int(m)) + " aa " + std::to_string(aa));
    }
}

// Channels-last input and output (the layout EfficientSAM3's trunk keeps
// its maps in) take the CPU op's all-channels path: the same sums as the
// reference, down- and upscaling, every mode, BF16 and F32 outputs.
TEST(Resize, CpuMatchesRefChannelsLast) {
  for (int64_t c : {3, 70}) {
    const Shape xs{2, c, 45, 61};
    ft::StridedTensor x = ft::make_permuted(DType::BF16, xs, {0, 2, 3, 1});
    ft::fill(x.t, ft::values(ft::random_tensor(DType::F32, xs, 5)));
    const double tol = 16 * u * max_abs(ft::values(x));
    for (const Shape& ys : {Shape{2, c, 17, 100}, Shape{2, c, 72, 30}})
      for (DType out : {DType::F32, DType::BF16})
        for (ResizeMode m : {ResizeMode::Nearest, ResizeMode::Bilinear, ResizeMode::Bicubic})
          for (int aa = 0; aa < (m == ResizeMode::Nearest ? 1 : 2); ++aa) {
            OwnedTensor yr(DType::F32, ys);
            ref::resize(x, yr, m, false, aa != 0);
            ft::StridedTensor yc = ft::make_permuted(out, ys, {0, 2, 3, 1});
            cpu::resize(x, yc, m, false, aa != 0);
            ft::expect_close(yc, ft::values(yr), std::vector<double>(size_t(ys.numel()), tol),
                             "channels-last resize C " + std::to_string(c) + " to " + ys.str() +
                                 " mode " + std::to_string(int(m)) + " aa " + std::to_string(aa));
          }
  }
}

// resize_window is the window of the whole resize, bit for bit, on both
// backends: every mode, up- and downscaling, windows at the corners, inside,
// one pixel, and the whole result; NCHW (one and three channels) and
// channels-last inputs.
TEST(Resize, WindowEqualsTheWholeResult) {
  struct Win {
    int64_t y0, x0, h, w;
  };
  for (const bool last : {false, true}) {
    const int64_t c = last ? 5 : 3;
    const Shape xs{1, c, 29, 43};
    ft::StridedTensor x =
        last ? ft::make_permuted(DType::F32, xs, {0, 2, 3, 1}) : ft::make_padded(DType::F32, xs, 0);
    ft::fill(x.t, ft::values(ft::random_tensor(DType::F32, xs, 11)));
    for (const auto& [oh, ow] : {std::pair<int64_t, int64_t>{71, 130}, {13, 20}})
      for (ResizeMode m : {ResizeMode::Nearest, ResizeMode::Bilinear, ResizeMode::Bicubic})
        for (int aa = 0; aa < (m == ResizeMode::Nearest ? 1 : 2); ++aa) {
          const Shape full{1, c, oh, ow};
          ft::StridedTensor yc = last ? ft::make_permuted(DType::F32, full, {0, 2, 3, 1})
                                      : ft::make_padded(DType::F32, full, 0);
          OwnedTensor yr(DType::F32, full);
          cpu::resize(x.t, yc.t, m, false, aa != 0);
          ref::resize(x.t, yr.t, m, false, aa != 0);
          const Win wins[] = {{0, 0, oh, ow},
                              {0, 0, 4, 5},
                              {oh - 3, ow - 7, 3, 7},
                              {oh / 2, 1, 2, ow - 2},
                              {oh / 3, ow / 3, 1, 1}};
          for (const Win& w : wins) {
            const Shape ws{1, c, w.h, w.w};
            const ResizeWindow at{oh, ow, w.y0, w.x0};
            ft::StridedTensor wc = last ? ft::make_permuted(DType::F32, ws, {0, 2, 3, 1})
                                        : ft::make_padded(DType::F32, ws, 3);
            OwnedTensor wr(DType::F32, ws);
            cpu::resize_window(x.t, wc.t, at, m, false, aa != 0);
            ref::resize_window(x.t, wr.t, at, m, false, aa != 0);
            const std::vector<double> got_c = ft::values(wc.t), got_r = ft::values(wr.t);
            const std::vector<double> all_c = ft::values(yc.t), all_r = ft::values(yr.t);
            int64_t bad = 0;
            for (int64_t ch = 0; ch < c; ++ch)
              for (int64_t i = 0; i < w.h; ++i)
                for (int64_t j = 0; j < w.w; ++j) {
                  const size_t k = size_t((ch * w.h + i) * w.w + j);
                  const size_t f = size_t((ch * oh + w.y0 + i) * ow + w.x0 + j);
                  bad += got_c[k] != all_c[f] || got_r[k] != all_r[f];
                }
            EXPECT_EQ(bad, 0) << (last ? "channels-last" : "NCHW") << " to " << full.str()
                              << " mode " << int(m) << " aa " << aa << " window " << w.h << "x"
                              << w.w << " at " << w.y0 << "," << w.x0;
          }
        }
  }
}

// Channels-last x and y (EfficientSAM3's pixel decoder) copy whole pixels:
// bit-equal to the reference, 2-d and 3-d, factors 1-3, 4- and 2-byte types.
TEST(UpsampleNearest, ChannelsLastEqualsRef) {
  struct Case {
    Shape x, y;
  };
  const Case cases[] = {{{1, 256, 9, 9}, {1, 256, 18, 18}},
                        {{2, 5, 3, 4}, {2, 5, 9, 8}},
                        {{1, 6, 2, 3, 5}, {1, 6, 4, 3, 10}}};
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (const Case& c : cases) {
      std::vector<int> order{0};
      for (int i = 2; i < c.x.ndim; ++i) order.push_back(i);
      order.push_back(1);
      ft::StridedTensor x = ft::make_permuted(dt, c.x, order);
      ft::fill(x.t, ft::values(ft::random_tensor(DType::F32, c.x, 11, 3.0)));
      ft::StridedTensor y = ft::make_permuted(dt, c.y, order);
      OwnedTensor yr(dt, c.y);
      ref::upsample_nearest(x.t, yr);
      cpu::upsample_nearest(x.t, y.t);
      ft::expect_equal(y.t, yr,
                       "channels-last upsample " + c.x.str() + " " + std::string(dtype_name(dt)));
    }
}

TEST(UpsampleNearest, RefByHandAndCpuEqualsRef) {
  struct Case {
    Shape x, y;
  };
  const Case cases[] = {{{1, 2, 3, 4}, {1, 2, 6, 8}},
                        {{2, 3, 5, 7}, {2, 3, 5, 21}},
                        {{1, 4, 2, 3, 5}, {1, 4, 4, 6, 10}},
                        {{1, 1, 1, 44, 80}, {1, 1, 1, 88, 160}},
                        {{1, 2, 3, 3, 3}, {1, 2, 3, 9, 3}}};
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::U8}) {
    for (const Case& c : cases) {
      OwnedTensor x = ft::random_tensor(dt == DType::U8 ? DType::F32 : dt, c.x, 8, 3.0);
      if (dt == DType::U8) {
        OwnedTensor b(DType::U8, c.x);
        for (int64_t i = 0; i < b.t.numel(); ++i) b.t.ptr<uint8_t>()[i] = uint8_t(i * 37 % 251);
        x = std::move(b);
      }
      OwnedTensor yr(dt, c.y), yc(dt, c.y);
      ref::upsample_nearest(x, yr);
      cpu::upsample_nearest(x, yc);
      // By hand: y[..., i, j, k] = x[..., i / fd, j / fh, k / fw].
      const auto xv = ft::values(x);
      std::vector<double> e;
      const int nd = c.y.ndim;
      for (int64_t i = 0; i < c.y.numel(); ++i) {
        int64_t rem = i, xi = 0, mul = 1;
        for (int d = nd - 1; d >= 0; --d) {
          const int64_t idx = rem % c.y[d];
          rem /= c.y[d];
          const int64_t f = d >= 2 ? c.y[d] / c.x[d] : 1;
          xi += idx / f * mul;
          mul *= c.x[d];
        }
        e.push_back(xv[size_t(xi)]);
      }
      const std::vector<double> zero(e.size(), 0.0);
      ft::expect_close(yr, e, zero, "ref upsample " + c.x.str());
      ft::expect_equal(yc, yr, "cpu upsample " + c.x.str());
    }
  }
  // A converting upsample (BF16 -> F32) and a strided source.
  OwnedTensor x = ft::random_tensor(DType::BF16, {1, 3, 4, 5}, 9);
  Tensor xs = x.t.slice(3, 1, 3);
  OwnedTensor yr(DType::F32, {1, 3, 8, 6}), yc(DType::F32, {1, 3, 8, 6});
  ref::upsample_nearest(xs, yr);
  cpu::upsample_nearest(xs, yc);
  ft::expect_equal(yc, yr, "upsample bf16->f32 strided");
}

}  // namespace
}  // namespace flick
