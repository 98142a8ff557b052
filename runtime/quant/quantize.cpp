#include "runtime/quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/threads.h"

namespace flick {

std::string_view quant_scheme_name(QuantScheme s) {
  switch (s) {
    case QuantScheme::kInt8PerChannel: return "int8";
    case QuantScheme::kFp8PerTensor: return "fp8-tensor";
    case QuantScheme::kFp8PerChannel: return "fp8-channel";
  }
  return "?";
}

DType quant_dtype(QuantScheme s) {
  return s == QuantScheme::kInt8PerChannel ? DType::I8 : DType::F8_E4M3;
}

namespace {

constexpr float kInt8Max = 127.f;
constexpr float kFp8Max = 448.f;  // largest finite E4M3 (fn)

// A weight seen as [rows, cols]: dim 0 is the output channel.
struct Matrix {
  int64_t rows = 0, cols = 0;
};
Matrix as_matrix(const Tensor& t) {
  Matrix m;
  m.rows = t.dim(0);
  m.cols = m.rows > 0 ? t.numel() / m.rows : 0;
  return m;
}

// Elements [first, first + n) of a contiguous buffer as fp32: a pointer into
// it for F32, else converted (exactly, for BF16 and F16) into buf.
const float* as_f32(DType t, const void* data, int64_t first, int64_t n, std::vector<float>& buf) {
  const char* p = static_cast<const char*>(data) + first * static_cast<int64_t>(dtype_size(t));
  if (t == DType::F32) return reinterpret_cast<const float*>(p);
  buf.resize(static_cast<size_t>(n));
  convert(t, p, DType::F32, buf.data(), n);
  return buf.data();
}

const float* row_f32(const Tensor& t, int64_t r, int64_t cols, std::vector<float>& buf) {
  return as_f32(t.dtype, t.data, r * cols, cols, buf);
}

// Per-row max|w| ([rows]); the first row with a NaN or inf, or -1.
int64_t row_amax(const Tensor& w, const Matrix& m, std::vector<float>& amax) {
  amax.assign(static_cast<size_t>(m.rows), 0.f);
  std::vector<int64_t> bad_row(static_cast<size_t>(m.rows), -1);
  parallel_for(m.rows, [&](int64_t r0, int64_t r1) {
    std::vector<float> buf;
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = row_f32(w, r, m.cols, buf);
      // |x| as bits orders like the value and puts inf and NaN above every
      // finite number: one integer max (which vectorizes) gives both.
      uint32_t a = 0;
      for (int64_t k = 0; k < m.cols; ++k) a = std::max(a, f32_bits(x[k]) & 0x7FFFFFFFu);
      amax[static_cast<size_t>(r)] = f32_from_bits(a);
      if (a >= 0x7F800000u) bad_row[static_cast<size_t>(r)] = r;
    }
  });
  for (int64_t r : bad_row)
    if (r >= 0) return r;
  return -1;
}

float scale_for(float amax, float qmax) {
  const float s = amax / qmax;
  return s == 0.f ? 1.f : s;  // an all-zero row quantizes to zeros with scale 1
}

void quantize_row_int8(const float* x, int64_t cols, float scale, int8_t* q) {
  for (int64_t k = 0; k < cols; ++k) {
    // torch.round is round-half-even: nearbyint in the default rounding mode.
    const float v = std::nearbyint(x[k] / scale);
    q[k] = static_cast<int8_t>(std::clamp(v, -kInt8Max, kInt8Max));
  }
}

void quantize_row_fp8(const float* x, int64_t cols, float scale, uint8_t* q) {
  for (int64_t k = 0; k < cols; ++k)
    q[k] = f32_to_f8e4m3(std::clamp(x[k] / scale, -kFp8Max, kFp8Max));
}

// fp64 sums and maxima behind QuantError.
struct ErrorAcc {
  double sw2 = 0, sd2 = 0, swd = 0, se2 = 0, max_abs = 0, max_err = 0;

  void add(const float* w, const float* d, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const double a = w[i], b = d[i], e = a - b;
      sw2 += a * a;
      sd2 += b * b;
      swd += a * b;
      se2 += e * e;
      max_abs = std::max(max_abs, std::fabs(a));
      max_err = std::max(max_err, std::fabs(e));
    }
  }
  void merge(const ErrorAcc& o) {
    sw2 += o.sw2;
    sd2 += o.sd2;
    swd += o.swd;
    se2 += o.se2;
    max_abs = std::max(max_abs, o.max_abs);
    max_err = std::max(max_err, o.max_err);
  }
  QuantError finish() const {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    QuantError e;
    if (sw2 == 0 && sd2 == 0) {
      e.cosine = 1.0;
    } else if (sw2 == 0 || sd2 == 0) {
      e.cosine = 0.0;
    } else {
      e.cosine = swd / std::sqrt(sw2 * sd2);
    }
    e.max_abs = max_abs;
    e.max_abs_error = max_err;
    e.max_rel_error = max_abs > 0 ? max_err / max_abs : (max_err == 0 ? 0.0 : kInf);
    e.snr_db = se2 == 0 ? kInf : (sw2 == 0 ? -kInf : 10.0 * std::log10(sw2 / se2));
    return e;
  }
};

// Runs add(chunk, acc) over fixed chunks of [0, n) and merges in chunk order,
// so the result does not depend on the thread count.
template <typename Fn>
QuantError reduce_error(int64_t n, int64_t chunk, Fn add) {
  const int64_t chunks = (n + chunk - 1) / chunk;
  std::vector<ErrorAcc> acc(static_cast<size_t>(chunks));
  parallel_for(chunks, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      add(c * chunk, std::min(n, (c + 1) * chunk), acc[static_cast<size_t>(c)]);
  });
  ErrorAcc total;
  for (const ErrorAcc& a : acc) total.merge(a);
  return total.finish();
}

}  // namespace

Expected<QuantizedWeight> quantize_weight(const Tensor& w, QuantScheme scheme,
                                          std::string_view name) {
  const std::string who = "tensor '" + std::string(name) + "'";
  if (w.dtype != DType::F32 && w.dtype != DType::BF16 && w.dtype != DType::F16)
    return invalid_input(who + " is " + std::string(dtype_name(w.dtype)) +
                         "; only F32, BF16 and F16 weights can be quantized");
  if (w.ndim() < 2)
    return invalid_input(who + " has shape " + w.shape.str() +
                         "; a quantized weight needs rank >= 2 ([out_channels, ...])");
  if (w.numel() == 0) return invalid_input(who + " has no elements (" + w.shape.str() + ")");
  FLICK_CHECK(w.is_contiguous(), "quantize_weight needs a contiguous weight: " + w.str());

  const Matrix m = as_matrix(w);  // [N, K]
  std::vector<float> amax;        // [N]
  if (int64_t bad = row_amax(w, m, amax); bad >= 0)
    return invalid_input(who + " has NaN or inf values (output channel " + std::to_string(bad) +
                         "); refusing to quantize it");

  const bool per_tensor = scheme == QuantScheme::kFp8PerTensor;
  const float qmax = scheme == QuantScheme::kInt8PerChannel ? kInt8Max : kFp8Max;
  QuantizedWeight out;
  out.q = OwnedTensor(quant_dtype(scheme), w.shape);
  out.scale = OwnedTensor(DType::F32, Shape{per_tensor ? 1 : m.rows});
  float* scale = out.scale.t.ptr<float>();
  if (per_tensor) {
    scale[0] = scale_for(*std::max_element(amax.begin(), amax.end()), qmax);
  } else {
    for (int64_t r = 0; r < m.rows; ++r) scale[r] = scale_for(amax[static_cast<size_t>(r)], qmax);
  }

  parallel_for(m.rows, [&](int64_t r0, int64_t r1) {
    std::vector<float> buf;
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = row_f32(w, r, m.cols, buf);
      const float s = scale[per_tensor ? 0 : r];
      if (scheme == QuantScheme::kInt8PerChannel) {
        quantize_row_int8(x, m.cols, s, out.q.t.ptr<int8_t>() + r * m.cols);
      } else {
        quantize_row_fp8(x, m.cols, s, out.q.t.ptr<uint8_t>() + r * m.cols);
      }
    }
  });
  return out;
}

namespace {

// Dequantizes row r of q into dst (fp32).
void dequantize_row(const Tensor& q, const Tensor& scale, const Matrix& m, int64_t r, float* dst) {
  const float s = scale.ptr<const float>()[scale.numel() == 1 ? 0 : r];
  if (q.dtype == DType::I8) {
    const int8_t* src = q.ptr<const int8_t>() + r * m.cols;
    for (int64_t k = 0; k < m.cols; ++k) dst[k] = static_cast<float>(src[k]) * s;
  } else {
    const uint8_t* src = q.ptr<const uint8_t>() + r * m.cols;
    for (int64_t k = 0; k < m.cols; ++k) dst[k] = f8e4m3_to_f32(src[k]) * s;
  }
}

void check_quantized(const Tensor& q, const Tensor& scale) {
  FLICK_CHECK(q.dtype == DType::I8 || q.dtype == DType::F8_E4M3, "quantized weight is " + q.str());
  FLICK_CHECK(q.ndim() >= 2 && q.is_contiguous(), "quantized weight " + q.str());
  FLICK_CHECK(scale.dtype == DType::F32 && scale.ndim() == 1 &&
                  (scale.numel() == 1 || scale.numel() == q.dim(0)),
              "scale " + scale.str() + " for weight " + q.str());
}

}  // namespace

void dequantize_weight(const Tensor& q, const Tensor& scale, const Tensor& out) {
  check_quantized(q, scale);
  FLICK_CHECK(out.numel() == q.numel() && out.is_contiguous() &&
                  (out.dtype == DType::F32 || out.dtype == DType::BF16),
              "dequantize output " + out.str() + " for " + q.str());
  const Matrix m = as_matrix(q);
  parallel_for(m.rows, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(m.cols));
    for (int64_t r = r0; r < r1; ++r) {
      dequantize_row(q, scale, m, r, row.data());
      char* dst =
          static_cast<char*>(out.data) + r * m.cols * static_cast<int64_t>(dtype_size(out.dtype));
      convert(DType::F32, row.data(), out.dtype, dst, m.cols);
    }
  });
}

QuantError quant_error(const Tensor& reference, const Tensor& approx) {
  FLICK_CHECK(reference.numel() == approx.numel(), reference.str() + " vs " + approx.str());
  FLICK_CHECK(reference.is_contiguous() && approx.is_contiguous(), "quant_error needs contiguous");
  FLICK_CHECK(dtype_is_float(reference.dtype) && dtype_is_float(approx.dtype),
              "quant_error compares float tensors");
  return reduce_error(reference.numel(), int64_t{1} << 16,
                      [&](int64_t i0, int64_t i1, ErrorAcc& acc) {
                        std::vector<float> ba, bb;
                        acc.add(as_f32(reference.dtype, reference.data, i0, i1 - i0, ba),
                                as_f32(approx.dtype, approx.data, i0, i1 - i0, bb), i1 - i0);
                      });
}

QuantError quant_error(const Tensor& original, const QuantizedWeight& qw) {
  check_quantized(qw.q, qw.scale);
  FLICK_CHECK(original.shape == qw.q.t.shape && original.is_contiguous(),
              original.str() + " vs " + qw.q.t.str());
  const Matrix m = as_matrix(original);
  const int64_t rows_per_chunk =
      std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, m.cols));
  return reduce_error(m.rows, rows_per_chunk, [&](int64_t r0, int64_t r1, ErrorAcc& acc) {
    std::vector<float> wbuf, deq(static_cast<size_t>(m.cols));
    for (int64_t r = r0; r < r1; ++r) {
      dequantize_row(qw.q, qw.scale, m, r, deq.data());
      acc.add(row_f32(original, r, m.cols, wbuf), deq.data(), m.cols);
    }
  });
}

}  // namespace flick
