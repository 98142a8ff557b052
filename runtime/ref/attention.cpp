// Scalar oracle of attention: softmax(Q K^T * scale + mask) V, one query row at
// a time, in double. Inputs are read with their dtype's exact value; the
// result is rounded once, at the store, to the output dtype.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "runtime/ref/ops.h"

namespace flick::ref {
namespace {

// Element offset of [i0, i1, i2, i3] in a 4-d view.
int64_t offset4(const Tensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return i0 * t.stride(0) + i1 * t.stride(1) + i2 * t.stride(2) + i3 * t.stride(3);
}

}  // namespace

void check_attention_args(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const AttentionParams& p) {
  FLICK_CHECK(q.ndim() == 4 && k.ndim() == 4 && v.ndim() == 4 && out.ndim() == 4,
              std::string(op) + ": q, k, v, out must be [B, L, H, D]");
  const int64_t B = q.dim(0), Lq = q.dim(1), H = q.dim(2), D = q.dim(3);
  const int64_t Lk = k.dim(1);
  FLICK_CHECK(
      k.shape == Shape({B, Lk, H, D}) && v.shape == k.shape,
      std::string(op) + ": k/v " + k.shape.str() + "/" + v.shape.str() + " vs q " + q.shape.str());
  FLICK_CHECK(out.shape == q.shape,
              std::string(op) + ": out " + out.shape.str() + " vs q " + q.shape.str());
  if (!p.bias.empty()) {
    FLICK_CHECK(p.bias.dtype == DType::F32 && p.bias.ndim() == 4 &&
                    (p.bias.dim(0) == 1 || p.bias.dim(0) == B) &&
                    (p.bias.dim(1) == 1 || p.bias.dim(1) == H) && p.bias.dim(2) == Lq &&
                    p.bias.dim(3) == Lk,
                std::string(op) + ": bias must be F32 [B|1, H|1, Lq, Lk], got " + p.bias.str());
  }
  check_separable_bias(op, p, B, H, Lq, Lk);
  if (!p.key_padding.empty()) {
    FLICK_CHECK(p.key_padding.dtype == DType::U8 && p.key_padding.shape == Shape({B, Lk}),
                std::string(op) + ": key_padding must be U8 [B, Lk], got " + p.key_padding.str());
  }
  FLICK_CHECK(p.causal_block >= 0, std::string(op) + ": negative causal_block");
}

int64_t check_separable_bias(const char* op, const AttentionParams& p, int64_t B, int64_t H,
                             int64_t Lq, int64_t Lk) {
  if (p.bias_y.empty() && p.bias_x.empty()) return 0;
  const int64_t w = p.bias_x.ndim() == 4 ? p.bias_x.dim(3) : 0;
  const auto part = [&](const Tensor& t, int64_t n) {
    return t.dtype == DType::F32 && t.ndim() == 4 && (t.dim(0) == 1 || t.dim(0) == B) &&
           (t.dim(1) == 1 || t.dim(1) == H) && t.dim(2) == Lq && t.dim(3) == n && t.stride(3) == 1;
  };
  FLICK_CHECK(p.bias.empty(), std::string(op) + ": bias together with bias_y / bias_x");
  FLICK_CHECK(w >= 1 && Lk % w == 0 && part(p.bias_x, w) && part(p.bias_y, Lk / w),
              std::string(op) + ": bias_y / bias_x must be F32 [B|1, H|1, Lq, Lk / W] / " +
                  "[B|1, H|1, Lq, W] with W dividing Lk = " + std::to_string(Lk) +
                  ", last dims contiguous, got " + p.bias_y.str() + " / " + p.bias_x.str());
  return w;
}

float attention_bias(const AttentionParams& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  // Broadcast dims (size 1) read index 0.
  const auto at = [&](const Tensor& t, int64_t jj) {
    return t.ptr<float>()[offset4(t, t.dim(0) == 1 ? 0 : b, t.dim(1) == 1 ? 0 : h, i, jj)];
  };
  if (!p.bias.empty()) return at(p.bias, j);
  if (p.bias_y.empty()) return 0.f;
  const int64_t w = p.bias_x.dim(3);
  return at(p.bias_y, j / w) + at(p.bias_x, j % w);  // one fp32 rounding, as a materialised sum
}

int64_t causal_key_end(int64_t i, int64_t lq, int64_t lk, int64_t cb) {
  if (cb <= 0) return lk;
  const int64_t pos = i + lk - lq;
  const int64_t block = pos >= 0 ? pos / cb : -((-pos + cb - 1) / cb);
  const int64_t end = (block + 1) * cb;
  return end < 0 ? 0 : (end > lk ? lk : end);
}

void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
               const AttentionParams& p) {
  check_attention_args("attention", q, k, v, out, p);
  const int64_t B = q.dim(0), Lq = q.dim(1), H = q.dim(2), D = q.dim(3);
  const int64_t Lk = k.dim(1);
  const bool has_bias = !p.bias.empty() || !p.bias_y.empty();
  const bool has_padding = !p.key_padding.empty();
  const double scale =
      p.scale != 0.f ? static_cast<double>(p.scale) : 1.0 / std::sqrt(static_cast<double>(D));
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();

  std::vector<double> qrow(static_cast<size_t>(D)), acc(static_cast<size_t>(D));
  std::vector<double> score(static_cast<size_t>(Lk));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < Lq; ++i) {
        for (int64_t d = 0; d < D; ++d)
          qrow[static_cast<size_t>(d)] = load_as_f32(q.dtype, q.data, offset4(q, b, i, h, d));
        const int64_t key_end = causal_key_end(i, Lq, Lk, p.causal_block);
        double max_score = kNegInf;
        for (int64_t j = 0; j < Lk; ++j) {
          double s = kNegInf;
          const bool padded =
              has_padding && p.key_padding.ptr<uint8_t>()[b * p.key_padding.stride(0) +
                                                          j * p.key_padding.stride(1)] == 0;
          if (j < key_end && !padded) {
            double dot = 0;
            for (int64_t d = 0; d < D; ++d)
              dot += qrow[static_cast<size_t>(d)] *
                     static_cast<double>(load_as_f32(k.dtype, k.data, offset4(k, b, j, h, d)));
            s = dot * scale;
            if (has_bias) s += attention_bias(p, b, h, i, j);
          }
          score[static_cast<size_t>(j)] = s;
          if (s > max_score) max_score = s;
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        double sum = 0;
        if (max_score != kNegInf) {  // else every key is masked: the row stays zero
          for (int64_t j = 0; j < Lk; ++j) {
            if (score[static_cast<size_t>(j)] == kNegInf) continue;
            const double w = std::exp(score[static_cast<size_t>(j)] - max_score);
            sum += w;
            for (int64_t d = 0; d < D; ++d)
              acc[static_cast<size_t>(d)] +=
                  w * static_cast<double>(load_as_f32(v.dtype, v.data, offset4(v, b, j, h, d)));
          }
        }
        for (int64_t d = 0; d < D; ++d) {
          const double o = sum > 0 ? acc[static_cast<size_t>(d)] / sum : 0.0;
          store_from_f32(out.dtype, out.data, offset4(out, b, i, h, d), static_cast<float>(o));
        }
      }
    }
  }
}

}  // namespace flick::ref
