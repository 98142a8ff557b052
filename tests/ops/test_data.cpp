// copy (transpose / slice / dtype conversion), concat and reduce: the
// reference by hand, the CPU op against the reference (copy and concat move
// or convert values, so they must agree exactly).
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/cpu/ops.h"
#include "runtime/ref/ops.h"
#include "tests/ops/elementwise_testing.h"

namespace flick {
namespace {

namespace ft = flick::testing;
constexpr double u = ft::kF32Eps;

OwnedTensor iota(DType dt, Shape s) {
  OwnedTensor t(dt, s);
  std::vector<double> v(size_t(s.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(i % 200) - 50;
  ft::fill(t.t, v);
  return t;
}

TEST(RefData, CopyByHand) {
  // Transpose: y[j, i] = x[i, j].
  OwnedTensor x = iota(DType::F32, {3, 4});
  OwnedTensor y(DType::F32, {4, 3});
  ref::copy(x.t.permute({1, 0}), y);
  std::vector<double> e;
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 3; ++i) e.push_back(double(i * 4 + j) - 50);
  ft::expect_close(y, e, std::vector<double>(12, 0.0), "transpose");
  // Slice of columns 1..2 into BF16: values are small integers, exact.
  OwnedTensor s(DType::BF16, {3, 2});
  ref::copy(x.t.slice(1, 1, 2), s);
  ft::expect_close(s, {-49, -48, -45, -44, -41, -40}, std::vector<double>(6, 0.0), "slice");
  // Conversions follow runtime/dtype.h: bf16 rounding, truncation to ints.
  OwnedTensor f(DType::F32, {4});
  ft::fill(f.t, {1.00390625, -2.7, 300.5, 1e10});
  OwnedTensor b(DType::BF16, {4});
  ref::copy(f, b);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b.t.ptr<uint16_t>()[i], f32_to_bf16(f.t.ptr<float>()[i]));
  OwnedTensor small(DType::F32, {2}), i32(DType::I32, {2});
  ft::fill(small.t, {-2.7, 100.9});
  ref::copy(small, i32);
  EXPECT_EQ(i32.t.ptr<int32_t>()[0], -2);
  EXPECT_EQ(i32.t.ptr<int32_t>()[1], 100);
  // Same-dtype copies move bits: large int32 values survive.
  OwnedTensor big(DType::I32, {1}), big2(DType::I32, {1});
  big.t.ptr<int32_t>()[0] = 123456789;
  ref::copy(big, big2);
  EXPECT_EQ(big2.t.ptr<int32_t>()[0], 123456789);
}

TEST(CpuData, CopyEqualsRef) {
  struct Layout {
    Shape s;
    std::vector<int> perm;  // view = x.permute(perm)
  };
  const Layout layouts[] = {{{4, 33, 17}, {0, 1, 2}},
                            {{2, 5, 12, 128}, {0, 2, 1, 3}},  // [B,L,H,D] -> [B,H,L,D]
                            {{70, 45}, {1, 0}},
                            {{3, 40, 50}, {0, 2, 1}},  // tiled transposes
                            {{6, 7, 8, 9}, {3, 1, 0, 2}},
                            {{1537}, {0}},
                            {{2, 3, 4, 5, 6}, {4, 0, 3, 1, 2}}};
  const DType dtypes[] = {DType::F32, DType::BF16, DType::F16, DType::I32, DType::U8, DType::I8};
  for (const Layout& l : layouts)
    for (DType from : dtypes)
      for (DType to : dtypes) {
        OwnedTensor x = iota(from, l.s);
        Tensor v = x.t;
        v.shape.ndim = l.s.ndim;
        for (int d = 0; d < l.s.ndim; ++d) {
          v.shape[d] = x.t.dim(l.perm[size_t(d)]);
          v.strides[size_t(d)] = x.t.stride(l.perm[size_t(d)]);
        }
        OwnedTensor yr(to, v.shape), yc(to, v.shape);
        ref::copy(v, yr);
        cpu::copy(v, yc);
        ft::expect_equal(yc, yr, "copy " + v.str() + " -> " + std::string(dtype_name(to)));
        // And into a padded (strided) destination.
        ft::StridedTensor yp = ft::make_padded(to, v.shape, 3);
        cpu::copy(v, yp);
        ft::expect_equal(yp, yr, "copy into padded " + v.str());
      }
  // Float payloads: random values, NaN and infinities through every float pair.
  OwnedTensor r = ft::random_tensor(DType::F32, {5, 1000}, 3, 1e3);
  r.t.ptr<float>()[7] = NAN;
  r.t.ptr<float>()[8] = INFINITY;
  r.t.ptr<float>()[9] = -1e-40f;
  for (DType from : {DType::F32, DType::BF16, DType::F16})
    for (DType to : {DType::F32, DType::BF16, DType::F16}) {
      OwnedTensor x = ft::to_dtype(r, from);
      OwnedTensor yr(to, {1000, 5}), yc(to, {1000, 5});
      ref::copy(x.t.permute({1, 0}), yr);
      cpu::copy(x.t.permute({1, 0}), yc);
      ft::expect_equal(yc, yr, "float copy");
      // Bit-level equality for the conversions themselves (not just values).
      OwnedTensor cr(to, {5, 1000}), cc(to, {5, 1000});
      ref::copy(x, cr);
      cpu::copy(x, cc);
      EXPECT_EQ(0, std::memcmp(cr.t.data, cc.t.data, cr.t.nbytes()))
          << dtype_name(from) << "->" << dtype_name(to);
    }
}

TEST(Concat, RefByHandAndCpuEqualsRef) {
  OwnedTensor a = iota(DType::F32, {2, 3}), b = iota(DType::F32, {2, 1});
  ft::fill(b.t, {100, 200});
  OwnedTensor y(DType::F32, {2, 4});
  const Tensor parts[] = {a.t, b.t};
  ref::concat(parts, -1, y);
  ft::expect_close(y, {-50, -49, -48, 100, -47, -46, -45, 200}, std::vector<double>(8, 0.0),
                   "concat by hand");
  // [1, 16, F, 44, 80]-like: mask channels ++ latent channels, various dims and dtypes.
  for (DType dt : {DType::F32, DType::BF16})
    for (int dim = 0; dim < 3; ++dim) {
      Shape s1{3, 4, 5}, s2{3, 4, 5}, s3{3, 4, 5};
      s1[dim] = 2;
      s2[dim] = 1;
      s3[dim] = 6;
      OwnedTensor x1 = iota(dt, s1), x2 = ft::random_tensor(DType::F32, s2, 3),
                  x3 = ft::random_tensor(dt, {s3[2], s3[1], s3[0]}, 4);
      Shape ys{3, 4, 5};
      ys[dim] = 9;
      const Tensor xs[] = {x1.t, x2.t, x3.t.permute({2, 1, 0})};
      OwnedTensor yr(dt, ys), yc(dt, ys);
      ref::concat(xs, dim, yr);
      cpu::concat(xs, dim, yc);
      ft::expect_equal(yc, yr, "concat dim " + std::to_string(dim));
    }
}

TEST(Reduce, RefByHand) {
  OwnedTensor x = iota(DType::F32, {2, 3});  // [[-50, -49, -48], [-47, -46, -45]]
  OwnedTensor y0(DType::F32, {1, 3}), y1(DType::F32, {2, 1});
  const std::vector<double> z3(3, 0.0), z2(2, 0.0);
  ref::reduce(x, 0, ReduceOp::Sum, y0);
  ft::expect_close(y0, {-97, -95, -93}, z3, "sum");
  ref::reduce(x, 1, ReduceOp::Mean, y1);
  ft::expect_close(y1, {-49, -46}, z2, "mean");
  ref::reduce(x, -1, ReduceOp::Max, y1);
  ft::expect_close(y1, {-48, -45}, z2, "max");
  ref::reduce(x, 0, ReduceOp::Min, y0);
  ft::expect_close(y0, {-50, -49, -48}, z3, "min");
  x.t.ptr<float>()[4] = NAN;
  ref::reduce(x, 1, ReduceOp::Max, y1);
  EXPECT_TRUE(std::isnan(y1.t.ptr<float>()[1]));
}

// Sums accumulate in fp32 (lanes over a row, or up to 64 rows then a running
// total across blocks): |error| <= (64 + n / 64) u sum|x|, mean the same
// divided by n. Max and min are exact.
TEST(Reduce, CpuMatchesRef) {
  const Shape shapes[] = {{5, 33, 17}, {3, 8960}, {2, 300, 70}, {1537}, {4, 1, 6}};
  uint64_t seed = 70;
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (const Shape& s : shapes)
      for (int dim = 0; dim < s.ndim; ++dim)
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min}) {
          OwnedTensor x = ft::random_tensor(dt, s, ++seed, 2.0, 0.5);
          Shape ys = s;
          ys[dim] = 1;
          OwnedTensor yr(DType::F32, ys), yc(dt, ys);
          ref::reduce(x, dim, op, yr);
          cpu::reduce(x, dim, op, yc);
          // sum |x| along the reduced dim, per output.
          OwnedTensor ax = ft::to_dtype(x, DType::F32);
          for (int64_t i = 0; i < ax.t.numel(); ++i)
            ax.t.ptr<float>()[i] = std::fabs(ax.t.ptr<float>()[i]);
          OwnedTensor sabs(DType::F32, ys);
          ref::reduce(ax, dim, ReduceOp::Sum, sabs);
          const double n = double(s[dim]);
          std::vector<double> tol = ft::values(sabs);
          for (double& t : tol) {
            t *= (64 + n / 64) * u;
            if (op == ReduceOp::Mean) t /= n;
            if (op == ReduceOp::Max || op == ReduceOp::Min) t = 0;
          }
          ft::expect_close(yc, ft::values(yr), tol,
                           "reduce " + x.t.str() + " dim " + std::to_string(dim) + " op " +
                               std::to_string(int(op)));
        }
  // A strided view takes the reference's loop.
  OwnedTensor x = ft::random_tensor(DType::F32, {6, 8}, 3);
  Tensor xt = x.t.permute({1, 0});
  OwnedTensor yr(DType::F32, {8, 1}), yc(DType::F32, {8, 1});
  ref::reduce(xt, 1, ReduceOp::Sum, yr);
  cpu::reduce(xt, 1, ReduceOp::Sum, yc);
  ft::expect_equal(yc, yr, "reduce strided");
}

}  // namespace
}  // namespace flick
