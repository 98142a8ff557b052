// Reference linear / matmul: scalar loops that follow each precision's
// rounding points exactly (see runtime/ref/matmul_common.h for the weights):
//   F32:  exact inputs, products accumulated in double.
//   BF16: activations rounded to bf16, exact products accumulated in double.
//   FP8:  as BF16 against the exact fp8 weights, then acc * scale[n] in fp32.
//   INT8: activations quantized per row (quantize_row_int8), exact integer
//         accumulation, then ((float)acc * w_scale[n]) * x_scale[m] in fp32.
// Then + bias (fp32), the activation (double), one rounding at the store
// (RoundGeluTanh: another one before the activation).
#include <vector>

#include "runtime/ref/matmul_common.h"
#include "runtime/ref/ops.h"

namespace flick::ref {
namespace {

class RefLinear final : public PackedLinear {
 public:
  explicit RefLinear(PreparedWeights w) : w_(std::move(w)) {}
  int64_t in_features() const override { return w_.k(); }
  int64_t out_features() const override { return w_.n(); }
  Precision precision() const override { return w_.precision; }
  const PreparedWeights& weights() const { return w_; }

 private:
  PreparedWeights w_;
};

void load_row(const RowsView& v, int64_t i, float* out) {
  const void* r = v.row(i);
  for (int64_t j = 0; j < v.cols; ++j) out[j] = load_as_f32(v.dtype, r, j);
}

// Accumulator of output n for one prepared activation row, before bias.
float linear_dot(const PreparedWeights& w, const float* xs, const int8_t* xq, float x_scale,
                 int64_t n) {
  const int64_t k = w.k();
  switch (w.precision) {
    case Precision::F32: {
      const float* wr = w.w.t.ptr<float>() + n * k;
      double acc = 0;
      for (int64_t j = 0; j < k; ++j) acc += static_cast<double>(xs[j]) * wr[j];
      return static_cast<float>(acc);
    }
    case Precision::BF16:
    case Precision::FP8: {
      const uint16_t* wr = w.w.t.ptr<uint16_t>() + n * k;
      double acc = 0;
      for (int64_t j = 0; j < k; ++j) acc += static_cast<double>(xs[j]) * bf16_to_f32(wr[j]);
      if (w.precision == Precision::BF16) return static_cast<float>(acc);
      return static_cast<float>(acc) * w.scale.t.ptr<float>()[n];
    }
    case Precision::INT8: {
      const int8_t* wr = w.w.t.ptr<int8_t>() + n * k;
      int64_t acc = 0;
      for (int64_t j = 0; j < k; ++j) acc += static_cast<int64_t>(xq[j]) * wr[j];
      const float v = static_cast<float>(acc) * w.scale.t.ptr<float>()[n];
      return v * x_scale;
    }
  }
  return 0.f;
}

}  // namespace

std::unique_ptr<PackedLinear> pack_linear(const LinearDesc& d) {
  FLICK_CHECK(d.w.ndim() == 2, "linear weight must be [N, K]: " + d.w.str());
  return std::make_unique<RefLinear>(prepare_weights(d.w, d.w_scale, d.bias, d.precision));
}

void linear(const Tensor& x, const PackedLinear& packed, Tensor& y, Activation act) {
  const auto* rl = dynamic_cast<const RefLinear*>(&packed);
  FLICK_CHECK(rl != nullptr, "weights were packed by another backend");
  const PreparedWeights& w = rl->weights();
  const RowsView xr = as_rows(x);
  const RowsView yr = as_rows(y);
  FLICK_CHECK(xr.cols == w.k() && yr.cols == w.n() && xr.rows == yr.rows,
              "linear shapes: x " + x.str() + ", y " + y.str() + ", weight [" +
                  std::to_string(w.n()) + ", " + std::to_string(w.k()) + "]");
  const int64_t k = w.k();
  std::vector<float> xs(static_cast<size_t>(k));
  std::vector<int8_t> xq(static_cast<size_t>(k));
  for (int64_t m = 0; m < xr.rows; ++m) {
    load_row(xr, m, xs.data());
    float x_scale = 1.f;
    if (w.precision == Precision::BF16 || w.precision == Precision::FP8) {
      for (float& v : xs) v = round_bf16(v);
    } else if (w.precision == Precision::INT8) {
      x_scale = quantize_row_int8(xs.data(), k, xq.data());
    }
    for (int64_t n = 0; n < w.n(); ++n) {
      float v = linear_dot(w, xs.data(), xq.data(), x_scale, n);
      if (w.has_bias()) v += w.bias.t.ptr<float>()[n];
      store_from_f32(yr.dtype, yr.row(m), n, static_cast<float>(activate(v, act, yr.dtype)));
    }
  }
}

void mlp_relu(const Tensor& x, const PackedLinear& l1, const PackedLinear& l2, Tensor& hidden,
              Tensor& y) {
  linear(x, l1, hidden, Activation::Relu);
  linear(hidden, l2, y, Activation::None);
}

void matmul(const Tensor& a, const Tensor& b, Tensor& c) {
  // 2-d operands are a batch of one.
  auto batched = [](const Tensor& t) {
    if (t.ndim() == 3) return t;
    FLICK_CHECK(t.ndim() == 2, "matmul operands are [Bt, M, K] / [Bt, K, N]: " + t.str());
    Tensor u = t;
    u.shape = Shape{1, t.dim(0), t.dim(1)};
    u.strides = {0, t.stride(0), t.stride(1)};
    return u;
  };
  const Tensor A = batched(a), B = batched(b), C = batched(c);
  const int64_t bt = A.dim(0), m = A.dim(1), k = A.dim(2), n = B.dim(2);
  FLICK_CHECK(B.dim(0) == bt && B.dim(1) == k && C.dim(0) == bt && C.dim(1) == m && C.dim(2) == n,
              "matmul shapes: a " + a.str() + ", b " + b.str() + ", c " + c.str());
  for (int64_t i = 0; i < bt; ++i) {
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t col = 0; col < n; ++col) {
        double acc = 0;
        for (int64_t j = 0; j < k; ++j) {
          acc += static_cast<double>(load_as_f32(A.dtype, A.at({i, r, j}), 0)) *
                 load_as_f32(B.dtype, B.at({i, j, col}), 0);
        }
        store_from_f32(C.dtype, C.at({i, r, col}), 0, static_cast<float>(acc));
      }
    }
  }
}

void quantize_rows_int8(const Tensor& x, Tensor& q, Tensor& scale) {
  const RowsView xr = as_rows(x);
  const RowsView qr = as_rows(q);
  FLICK_CHECK(q.dtype == DType::I8 && qr.rows == xr.rows && qr.cols == xr.cols,
              "quantize_rows_int8: q must be I8 of x's shape, got x " + x.str() + ", q " + q.str());
  FLICK_CHECK(scale.dtype == DType::F32 && scale.ndim() == 1 && scale.dim(0) == xr.rows,
              "quantize_rows_int8: scale must be F32 [M], got " + scale.str());
  std::vector<float> xs(static_cast<size_t>(xr.cols));
  for (int64_t m = 0; m < xr.rows; ++m) {
    load_row(xr, m, xs.data());
    *static_cast<float*>(scale.at({m})) =
        quantize_row_int8(xs.data(), xr.cols, static_cast<int8_t*>(qr.row(m)));
  }
}

}  // namespace flick::ref
