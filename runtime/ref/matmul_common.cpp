#include "runtime/ref/matmul_common.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace flick::ref {

RowsView as_rows(const Tensor& t) {
  FLICK_CHECK(t.ndim() >= 1, "expected a tensor with at least one dim");
  FLICK_CHECK(t.stride(-1) == 1 || t.dim(-1) == 1, "the last dim must be contiguous: " + t.str());
  RowsView v;
  v.data = t.data;
  v.dtype = t.dtype;
  v.cols = t.dim(-1);
  v.rows = t.numel() / std::max<int64_t>(1, v.cols);
  v.ld = t.ndim() >= 2 ? t.stride(-2) : v.cols;
  // Each leading dim must step by whole blocks of the dim after it.
  for (int i = 0; i + 2 < t.ndim(); ++i) {
    FLICK_CHECK(t.dim(i) == 1 || t.stride(i) == t.stride(i + 1) * t.dim(i + 1),
                "leading dims do not collapse into rows: " + t.str());
  }
  if (v.rows <= 1) v.ld = std::max(v.ld, v.cols);
  return v;
}

float quantize_row_int8(const float* x, int64_t n, int8_t* q) {
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = amax / 127.f;
  if (scale == 0.f) {
    std::fill(q, q + n, int8_t{0});
    return 1.f;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float r = std::nearbyint(x[i] / scale);  // default mode: half to even
    q[i] = static_cast<int8_t>(std::clamp(r, -127.f, 127.f));
  }
  return scale;
}

float quantize_row_e4m3(const float* x, int64_t n, uint8_t* q) {
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = amax / 448.f;
  if (scale == 0.f) {
    std::fill(q, q + n, uint8_t{0});
    return 1.f;
  }
  for (int64_t i = 0; i < n; ++i) q[i] = f32_to_f8e4m3(std::clamp(x[i] / scale, -448.f, 448.f));
  return scale;
}

namespace {

bool is_fp8(DType t) { return t == DType::F8_E4M3 || t == DType::F8_E5M2; }

// Per-output-channel scales of an I8 / F8 weight, broadcast to [N].
std::vector<float> channel_scales(const Tensor& w_scale, int64_t n, DType wt) {
  FLICK_CHECK(!w_scale.empty(),
              std::string("weights of dtype ") + std::string(dtype_name(wt)) + " need a w_scale");
  FLICK_CHECK(w_scale.dtype == DType::F32 && w_scale.ndim() == 1 &&
                  (w_scale.dim(0) == n || w_scale.dim(0) == 1),
              "w_scale must be F32 [N] or [1], got " + w_scale.str());
  std::vector<float> s(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    s[static_cast<size_t>(i)] =
        *static_cast<const float*>(w_scale.at({w_scale.dim(0) == 1 ? 0 : i}));
  }
  return s;
}

}  // namespace

PreparedWeights prepare_weights(const Tensor& w, const Tensor& w_scale, const Tensor& bias,
                                Precision precision) {
  FLICK_CHECK(w.ndim() >= 2 && w.is_contiguous(), "weight must be contiguous [N, ...]: " + w.str());
  const DType wt = w.dtype;
  FLICK_CHECK(
      wt == DType::F32 || wt == DType::BF16 || wt == DType::F16 || wt == DType::I8 || is_fp8(wt),
      "unsupported weight dtype " + std::string(dtype_name(wt)));
  const int64_t n = w.dim(0);
  const int64_t k = w.numel() / n;
  const bool quantized = wt == DType::I8 || is_fp8(wt);
  std::vector<float> in_scale;
  if (quantized) in_scale = channel_scales(w_scale, n, wt);

  PreparedWeights p;
  p.precision = precision;
  // One row of the weight dequantized to fp32 (exact for F32/BF16/F16 inputs).
  std::vector<float> row(static_cast<size_t>(k));
  auto dequant_row = [&](int64_t i) {
    const float s = quantized ? in_scale[static_cast<size_t>(i)] : 1.f;
    for (int64_t j = 0; j < k; ++j) {
      const float v = load_as_f32(wt, w.data, i * k + j);
      row[static_cast<size_t>(j)] = quantized ? v * s : v;
    }
  };

  switch (precision) {
    case Precision::F32:
    case Precision::BF16: {
      const DType dt = precision == Precision::F32 ? DType::F32 : DType::BF16;
      p.w = OwnedTensor(dt, {n, k});
      for (int64_t i = 0; i < n; ++i) {
        dequant_row(i);
        convert(DType::F32, row.data(), dt,
                static_cast<char*>(p.w.t.data) + i * k * static_cast<int64_t>(dtype_size(dt)), k);
      }
      break;
    }
    case Precision::FP8: {
      p.w = OwnedTensor(DType::BF16, {n, k});
      p.scale = OwnedTensor(DType::F32, {n});
      auto* dst = p.w.t.ptr<uint16_t>();
      std::vector<uint8_t> q(static_cast<size_t>(k));
      for (int64_t i = 0; i < n; ++i) {
        if (is_fp8(wt)) {
          for (int64_t j = 0; j < k; ++j)
            dst[i * k + j] = f32_to_bf16(load_as_f32(wt, w.data, i * k + j));
          p.scale.t.ptr<float>()[i] = in_scale[static_cast<size_t>(i)];
        } else {  // float weights: quantize to E4M3 per output channel here
          dequant_row(i);
          p.scale.t.ptr<float>()[i] = quantize_row_e4m3(row.data(), k, q.data());
          for (int64_t j = 0; j < k; ++j)
            dst[i * k + j] = f32_to_bf16(f8e4m3_to_f32(q[static_cast<size_t>(j)]));
        }
      }
      break;
    }
    case Precision::INT8: {
      p.w = OwnedTensor(DType::I8, {n, k});
      p.scale = OwnedTensor(DType::F32, {n});
      auto* dst = p.w.t.ptr<int8_t>();
      for (int64_t i = 0; i < n; ++i) {
        if (wt == DType::I8) {
          std::copy_n(w.ptr<const int8_t>() + i * k, k, dst + i * k);
          p.scale.t.ptr<float>()[i] = in_scale[static_cast<size_t>(i)];
        } else {
          dequant_row(i);
          p.scale.t.ptr<float>()[i] = quantize_row_int8(row.data(), k, dst + i * k);
        }
      }
      break;
    }
  }

  if (!bias.empty()) {
    FLICK_CHECK(bias.ndim() == 1 && bias.dim(0) == n &&
                    (bias.dtype == DType::F32 || bias.dtype == DType::BF16),
                "bias must be F32/BF16 [N], got " + bias.str());
    p.bias = OwnedTensor(DType::F32, {n});
    for (int64_t i = 0; i < n; ++i)
      p.bias.t.ptr<float>()[i] = load_as_f32(bias.dtype, bias.at({i}), 0);
  }
  return p;
}

double activate(double v, Activation act, DType out) {
  switch (act) {
    case Activation::None: return v;
    case Activation::GeluErf: return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    case Activation::GeluTanh: {
      const double c = std::sqrt(2.0 / M_PI);
      return 0.5 * v * (1.0 + std::tanh(c * (v + 0.044715 * v * v * v)));
    }
    case Activation::Silu: return v / (1.0 + std::exp(-v));
    case Activation::Relu: return v > 0.0 ? v : (v == v ? 0.0 : v);  // NaN stays NaN, as torch
    case Activation::Sigmoid: return 1.0 / (1.0 + std::exp(-v));
    case Activation::RoundGeluTanh: {
      float r = 0.f;
      store_from_f32(out, &r, 0, static_cast<float>(v));
      return activate(load_as_f32(out, &r, 0), Activation::GeluTanh, out);
    }
  }
  return v;
}

}  // namespace flick::ref
