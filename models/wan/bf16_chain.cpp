#include "models/wan/bf16_chain.h"

#include <string>

#include "runtime/dtype.h"
#include "runtime/status.h"
#include "runtime/threads.h"

namespace flick::wan {

void bf16_mul_add_row_scalar(const uint16_t* p, const uint16_t* q, const uint16_t* r, uint16_t* out,
                             int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float t = round_bf16(bf16_to_f32(p[i]) * bf16_to_f32(q[i]));
    out[i] = f32_to_bf16(t + bf16_to_f32(r[i]));
  }
}

void bf16_mul_add_row(const uint16_t* p, const uint16_t* q, const uint16_t* r, uint16_t* out,
                      int64_t n) {
  static const bool avx512 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  if (avx512) {
    bf16_mul_add_row_avx512(p, q, r, out, n);
  } else {
    bf16_mul_add_row_scalar(p, q, r, out, n);
  }
}

void bf16_mul_add(const Tensor& p, const Tensor& q, const Tensor& r, Tensor& out) {
  const int64_t frames = out.dim(0), tokens = out.dim(1), d = out.dim(2);
  auto fits = [&](const Tensor& t, bool may_repeat) {
    return t.dtype == DType::BF16 && t.ndim() == 3 && t.dim(0) == frames && t.dim(2) == d &&
           t.stride(2) == 1 && (t.dim(1) == tokens || (may_repeat && t.dim(1) == 1));
  };
  FLICK_CHECK(
      out.ndim() == 3 && fits(out, false) && fits(p, false) && fits(q, true) && fits(r, true),
      "bf16_mul_add: expected BF16 [F, T, D] views with contiguous rows, got " + p.str() + " * " +
          q.str() + " + " + r.str() + " -> " + out.str());
  // The element offset of row (f, t) of a view; a repeated view stays on row 0.
  auto row = [](const Tensor& v, int64_t f, int64_t t) {
    return static_cast<uint16_t*>(v.data) + f * v.stride(0) + (v.dim(1) == 1 ? 0 : t * v.stride(1));
  };
  parallel_for(
      frames * tokens,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const int64_t f = i / tokens, t = i % tokens;
          bf16_mul_add_row(row(p, f, t), row(q, f, t), row(r, f, t), row(out, f, t), d);
        }
      },
      /*min_per_thread=*/16);
}

}  // namespace flick::wan
