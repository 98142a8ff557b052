// The CUDA backend's GEMM mapping (runtime/cuda/gemm_map.h) through a
// column-major emulator of cublasLtMatmul's semantics (D = op(A) op(B), ld,
// strided batches), against the reference matmul: the layout logic the CPU
// suite can check before a GPU runs cuBLASLt itself. fp32 data, products
// summed in double: tolerance 1e-5 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cuda/gemm_map.h"

namespace flick {
namespace {

using cuda::GemmCall;
using cuda::GemmOperand;

float at(const GemmOperand& o, int64_t batch, int64_t r, int64_t c) {
  return static_cast<const float*>(o.p)[batch * o.batch_stride + r + c * o.ld];
}
// op(X)(i, k): X stored rows x cols, transposed when trans.
float op_at(const GemmOperand& o, int64_t batch, int64_t i, int64_t k) {
  return o.trans ? at(o, batch, k, i) : at(o, batch, i, k);
}

void emulate(const GemmCall& g) {
  ASSERT_EQ(g.d_dtype, DType::F32);
  const int64_t k_len = g.a.trans ? g.a.rows : g.a.cols;
  ASSERT_EQ(k_len, g.b.trans ? g.b.cols : g.b.rows) << "inner dims";
  ASSERT_EQ(g.m, g.a.trans ? g.a.cols : g.a.rows);
  ASSERT_EQ(g.n, g.b.trans ? g.b.rows : g.b.cols);
  ASSERT_GE(g.a.ld, g.a.rows);  // cuBLASLt's layout rule
  ASSERT_GE(g.b.ld, g.b.rows);
  ASSERT_GE(g.ld_d, g.m);
  for (int b = 0; b < g.batch; ++b)
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double s = 0;
        for (int64_t k = 0; k < k_len; ++k) s += double(op_at(g.a, b, i, k)) * op_at(g.b, b, k, j);
        static_cast<float*>(g.d)[b * g.d_batch_stride + i + j * g.ld_d] = static_cast<float>(s);
      }
}

OwnedTensor randn(Shape s, uint32_t seed) {
  OwnedTensor t(DType::F32, s);
  std::mt19937 g(seed);
  std::normal_distribution<float> n;
  for (int64_t i = 0; i < t.t.numel(); ++i) t.t.ptr<float>()[i] = n(g);
  return t;
}

void expect_close(const Tensor& a, const Tensor& e) {
  for (int64_t i = 0; i < a.numel(); ++i) {
    const int64_t r = i / (a.dim(1) * a.dim(2)), m = i / a.dim(2) % a.dim(1), n = i % a.dim(2);
    const float av = *static_cast<float*>(a.at({r, m, n})),
                ev = *static_cast<float*>(e.at({r, m, n}));
    ASSERT_NEAR(av, ev, 1e-5 * std::max(1.f, std::fabs(ev))) << r << " " << m << " " << n;
  }
}

TEST(GemmMap, MatmulContiguousAndTransposedViews) {
  auto ref = make_ref_backend();
  auto a = randn({3, 5, 7}, 1), b = randn({3, 7, 4}, 2);
  auto bt_store = randn({3, 4, 7}, 3);  // b given as a transposed view
  const Tensor bt = bt_store.t.permute({0, 2, 1});
  auto at_store = randn({3, 7, 5}, 4);
  const Tensor at_view = at_store.t.permute({0, 2, 1});
  for (const auto& [x, y] :
       {std::pair<Tensor, Tensor>{a.t, b.t}, {a.t, bt}, {at_view, b.t}, {at_view, bt}}) {
    OwnedTensor c(DType::F32, {3, 5, 4}), e(DType::F32, {3, 5, 4});
    emulate(cuda::matmul_call(x, y, c));
    ref->matmul(x, y, e);
    expect_close(c, e);
  }
}

TEST(GemmMap, AttentionFallbackViews) {
  // The fallback's GEMMs: q [Lq, H, D] of one batch row as [H, Lq, D], kᵀ
  // as [H, D, Lk], and P v written into out's [H, Lq, D] view.
  auto ref = make_ref_backend();
  const int64_t Lq = 6, Lk = 9, H = 3, D = 8;
  auto q = randn({Lq, H, D}, 5), k = randn({Lk, H, D}, 6), v = randn({Lk, H, D}, 7);
  const Tensor qh = q.t.permute({1, 0, 2}), kt = k.t.permute({1, 2, 0}),
               vh = v.t.permute({1, 0, 2});
  OwnedTensor s(DType::F32, {H, Lq, Lk}), se(DType::F32, {H, Lq, Lk});
  emulate(cuda::matmul_call(qh, kt, s));
  ref->matmul(qh, kt, se);
  expect_close(s, se);
  OwnedTensor out(DType::F32, {Lq, H, D}), oute(DType::F32, {Lq, H, D});
  Tensor oh = out.t.permute({1, 0, 2}), ohe = oute.t.permute({1, 0, 2});
  emulate(cuda::matmul_call(s, vh, oh));
  ref->matmul(s, vh, ohe);
  expect_close(oh, ohe);
}

TEST(GemmMap, LinearIsTn) {
  // y = x Wᵀ with x rows strided (a slice of a wider buffer).
  auto ref = make_ref_backend();
  const int64_t T = 5, K = 12, N = 7;
  auto xs = randn({T, K + 4}, 8), w = randn({N, K}, 9);
  const Tensor x = xs.t.slice(1, 2, K);
  OwnedTensor y(DType::F32, {1, T, N}), e(DType::F32, {T, N});
  const GemmCall g = cuda::linear_call(x.data, DType::F32, T, K, x.stride(0), w.t.data, DType::F32,
                                       N, y.t.data, DType::F32);
  EXPECT_TRUE(g.a.trans);
  EXPECT_FALSE(g.b.trans);
  emulate(g);
  LinearDesc d;
  d.w = w.t;
  d.precision = Precision::F32;
  auto p = ref->pack_linear(d);
  ref->linear(x, *p, e, Activation::None);
  expect_close(y, e.t.reshape({1, T, N}));
}

}  // namespace
}  // namespace flick
