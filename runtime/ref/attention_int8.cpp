// Scalar oracle of attention_int8 (Backend::attention_int8): Q and the
// mean-smoothed K quantized to INT8 per row exactly as the contract states,
// V rounded to bf16, then the attention of those operands in double: the
// scores as the exact integer dot times both scales, softmax and P.V in
// double (the kernels' bf16 P is the only rounding left between them and
// this). The quantizer is written out independently of runtime/cpu.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/ref/ops.h"

namespace flick::ref {
namespace {

int64_t at4(const Tensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return i0 * t.stride(0) + i1 * t.stride(1) + i2 * t.stride(2) + i3 * t.stride(3);
}

// Symmetric per-row INT8 of the contract, in fp32 as specified.
float quantize_row_int8(const std::vector<float>& x, std::vector<int8_t>& q) {
  float amax = 0.f;
  for (float e : x) amax = std::max(amax, std::fabs(e));
  q.assign(x.size(), 0);
  if (!(amax > 0.f)) return 0.f;
  const float inv = 127.f / amax;
  for (size_t e = 0; e < x.size(); ++e) {
    const float r = std::nearbyint(x[e] * inv);  // default rounding mode: half to even
    q[e] = static_cast<int8_t>(std::min(127.f, std::max(-127.f, r)));
  }
  return amax / 127.f;
}

}  // namespace

void attention_int8(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                    const AttentionParams& p) {
  check_attention_args("attention_int8", q, k, v, out, p);
  const int64_t B = q.dim(0), Lq = q.dim(1), H = q.dim(2), D = q.dim(3);
  const int64_t Lk = k.dim(1);
  const bool has_bias = !p.bias.empty() || !p.bias_y.empty();
  const bool has_padding = !p.key_padding.empty();
  const double scale =
      p.scale != 0.f ? static_cast<double>(p.scale) : 1.0 / std::sqrt(static_cast<double>(D));
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  const auto d_ = static_cast<size_t>(D);

  std::vector<float> row(d_), mean(d_);
  std::vector<int8_t> qrow, krow;
  std::vector<std::vector<int8_t>> kq(static_cast<size_t>(Lk));
  std::vector<float> ks(static_cast<size_t>(Lk));
  std::vector<double> score(static_cast<size_t>(Lk)), acc(d_);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t d = 0; d < D; ++d) {
        double sum = 0;
        for (int64_t j = 0; j < Lk; ++j) sum += load_as_f32(k.dtype, k.data, at4(k, b, j, h, d));
        mean[static_cast<size_t>(d)] = Lk > 0 ? static_cast<float>(sum / double(Lk)) : 0.f;
      }
      for (int64_t j = 0; j < Lk; ++j) {
        for (int64_t d = 0; d < D; ++d)
          row[static_cast<size_t>(d)] =
              load_as_f32(k.dtype, k.data, at4(k, b, j, h, d)) - mean[static_cast<size_t>(d)];
        ks[static_cast<size_t>(j)] = quantize_row_int8(row, kq[static_cast<size_t>(j)]);
      }
      for (int64_t i = 0; i < Lq; ++i) {
        for (int64_t d = 0; d < D; ++d)
          row[static_cast<size_t>(d)] = load_as_f32(q.dtype, q.data, at4(q, b, i, h, d));
        const double qs = quantize_row_int8(row, qrow);
        const int64_t key_end = causal_key_end(i, Lq, Lk, p.causal_block);
        double max_score = kNegInf;
        for (int64_t j = 0; j < Lk; ++j) {
          double s = kNegInf;
          const bool padded =
              has_padding && p.key_padding.ptr<uint8_t>()[b * p.key_padding.stride(0) +
                                                          j * p.key_padding.stride(1)] == 0;
          if (j < key_end && !padded) {
            int64_t dot = 0;
            const std::vector<int8_t>& kj = kq[static_cast<size_t>(j)];
            for (size_t d = 0; d < d_; ++d) dot += int64_t(qrow[d]) * int64_t(kj[d]);
            s = static_cast<double>(dot) * qs * static_cast<double>(ks[static_cast<size_t>(j)]) *
                scale;
            if (has_bias) s += attention_bias(p, b, h, i, j);
          }
          score[static_cast<size_t>(j)] = s;
          max_score = std::max(max_score, s);
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        double sum = 0;
        if (max_score != kNegInf) {
          for (int64_t j = 0; j < Lk; ++j) {
            if (score[static_cast<size_t>(j)] == kNegInf) continue;
            const double w = std::exp(score[static_cast<size_t>(j)] - max_score);
            sum += w;
            for (int64_t d = 0; d < D; ++d)
              acc[static_cast<size_t>(d)] +=
                  w * round_bf16(load_as_f32(v.dtype, v.data, at4(v, b, j, h, d)));
          }
        }
        for (int64_t d = 0; d < D; ++d)
          store_from_f32(out.dtype, out.data, at4(out, b, i, h, d),
                         static_cast<float>(sum > 0 ? acc[static_cast<size_t>(d)] / sum : 0.0));
      }
    }
  }
}

bool attention_int8_pays_off() { return true; }

}  // namespace flick::ref
