// CPU activations, broadcast arithmetic, softmax and RoPE over the fp32
// kernels of eltwise_kernels.h. Every op computes in fp32 and rounds once at
// the store; the arithmetic ops are one FMA per element:
//   add a*1 + b, mul a*b + (-0), mul_add b*c + a, affine x*alpha + beta,
//   modulate x*(1 + scale) + shift with 1 + scale rounded to fp32 first.
#include <algorithm>
#include <string>

#include "runtime/cpu/eltwise_runs.h"
#include "runtime/cpu/ops.h"

namespace flick::cpu {
namespace {

using detail::for_each_run;

void check_same_shape(const Tensor& x, const Tensor& y, const char* op) {
  FLICK_CHECK(x.shape == y.shape, std::string(op) + ": input " + x.str() + " vs output " + y.str());
}

template <size_t N>
using Ptrs = std::array<const float*, N>;
template <size_t N>
using Vecs = std::array<bool, N>;

// Activations convert storage dtypes in registers when x and y run unit-stride
// along their innermost (collapsed) dim; other layouts go through fp32 runs.
void unary(const char* op, const Tensor& x, Tensor& y, Activation act,
           void (*EltwiseKernels::*fn)(const float*, float*, int64_t)) {
  check_same_shape(x, y, op);
  detail::check_float(x, op);
  detail::check_float(y, op);
  if (y.numel() == 0) return;
  const EltwiseKernels& k = eltwise_kernels();
  const auto c = detail::collapse<2>(y.shape, {y.strides, x.strides});
  const int last = c.shape.ndim - 1;
  if (c.strides[0][static_cast<size_t>(last)] == 1 &&
      c.strides[1][static_cast<size_t>(last)] == 1) {
    Shape outer = c.shape;
    outer.ndim = last;
    const int64_t inner = c.shape[last], runs = (inner + detail::kRun - 1) / detail::kRun;
    const int64_t xes = static_cast<int64_t>(dtype_size(x.dtype));
    const int64_t yes = static_cast<int64_t>(dtype_size(y.dtype));
    parallel_for(
        outer.numel() * runs,
        [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const int64_t row = r / runs, start = r % runs * detail::kRun;
            const int64_t ox = flick::detail::offset_of(row, outer, c.strides[1]) + start;
            const int64_t oy = flick::detail::offset_of(row, outer, c.strides[0]) + start;
            k.activation(act, static_cast<const char*>(x.data) + ox * xes, x.dtype,
                         static_cast<char*>(y.data) + oy * yes, y.dtype,
                         std::min(detail::kRun, inner - start));
          }
        },
        std::max<int64_t>(1, 16384 / std::min(inner, detail::kRun)));
    return;
  }
  for_each_run<1>(op, y, {&x}, [&](const Ptrs<1>& in, const Vecs<1>& vec, float* out, int64_t n) {
    // A repeated (broadcast) input only happens for a one-element x.
    (k.*fn)(in[0], out, vec[0] ? n : 1);
  });
}

}  // namespace

void gelu(const Tensor& x, Tensor& y, bool tanh_approx) {
  unary("gelu", x, y, tanh_approx ? Activation::GeluTanh : Activation::GeluErf,
        tanh_approx ? &EltwiseKernels::gelu_tanh : &EltwiseKernels::gelu_erf);
}

void silu(const Tensor& x, Tensor& y) {
  unary("silu", x, y, Activation::Silu, &EltwiseKernels::silu);
}

void activation(const Tensor& x, Tensor& y, Activation act) {
  check_same_shape(x, y, "activation");
  detail::check_float(x, "activation");
  detail::check_float(y, "activation");
  if (y.numel() == 0) return;
  const EltwiseKernels& k = eltwise_kernels();
  if (x.is_contiguous() && y.is_contiguous()) {  // dtype conversion in registers, in chunks
    constexpr int64_t kChunk = 16384;
    const int64_t n = y.numel();
    const int64_t xes = static_cast<int64_t>(dtype_size(x.dtype));
    const int64_t yes = static_cast<int64_t>(dtype_size(y.dtype));
    parallel_for((n + kChunk - 1) / kChunk,
                 [&](int64_t begin, int64_t end) {
                   for (int64_t c = begin; c < end; ++c) {
                     const int64_t s = c * kChunk;
                     k.activation(act, static_cast<const char*>(x.data) + s * xes, x.dtype,
                                  static_cast<char*>(y.data) + s * yes, y.dtype,
                                  std::min(kChunk, n - s));
                   }
                 },
                 1);
    return;
  }
  // Strided views: fp32 runs (RoundGeluTanh then rounds at the store only,
  // so it is refused here: it is only defined for a contiguous dtype change).
  FLICK_CHECK(act != Activation::RoundGeluTanh, "activation: RoundGeluTanh needs contiguous views");
  for_each_run<1>("activation", y, {&x},
                  [&](const Ptrs<1>& in, const Vecs<1>& vec, float* out, int64_t n) {
                    k.activation(act, in[0], DType::F32, out, DType::F32, vec[0] ? n : 1);
                  });
}

void add(const Tensor& a, const Tensor& b, Tensor& y) {
  const EltwiseKernels& k = eltwise_kernels();
  const float one = 1.f;
  for_each_run<2>("add", y, {&a, &b},
                  [&](const Ptrs<2>& in, const Vecs<2>& vec, float* out, int64_t n) {
                    k.fma(in[0], vec[0], &one, false, in[1], vec[1], out, n);
                  });
}

void mul(const Tensor& a, const Tensor& b, Tensor& y) {
  const EltwiseKernels& k = eltwise_kernels();
  const float neg_zero = -0.f;  // x + (-0) == x for every x, keeping the sign of a zero product
  for_each_run<2>("mul", y, {&a, &b},
                  [&](const Ptrs<2>& in, const Vecs<2>& vec, float* out, int64_t n) {
                    k.fma(in[0], vec[0], in[1], vec[1], &neg_zero, false, out, n);
                  });
}

void mul_add(const Tensor& a, const Tensor& b, const Tensor& c, Tensor& y) {
  const EltwiseKernels& k = eltwise_kernels();
  for_each_run<3>("mul_add", y, {&a, &b, &c},
                  [&](const Ptrs<3>& in, const Vecs<3>& vec, float* out, int64_t n) {
                    k.fma(in[1], vec[1], in[2], vec[2], in[0], vec[0], out, n);
                  });
}

void modulate(const Tensor& x, const Tensor& shift, const Tensor& scale, Tensor& y) {
  check_same_shape(x, y, "modulate");
  const EltwiseKernels& k = eltwise_kernels();
  const float one = 1.f;
  for_each_run<3>("modulate", y, {&x, &shift, &scale},
                  [&](const Ptrs<3>& in, const Vecs<3>& vec, float* out, int64_t n) {
                    // 1 + scale, in fp32 as PyTorch rounds it, in scratch slot 4.
                    float s1 = 1.f + *in[2];
                    const float* t = &s1;
                    if (vec[2]) {
                      float* buf = detail::scratch(4, n);
                      k.fma(in[2], true, &one, false, &one, false, buf, n);
                      t = buf;
                    }
                    k.fma(in[0], vec[0], t, vec[2], in[1], vec[1], out, n);
                  });
}

void affine(const Tensor& x, float alpha, float beta, Tensor& y) {
  check_same_shape(x, y, "affine");
  const EltwiseKernels& k = eltwise_kernels();
  for_each_run<1>("affine", y, {&x},
                  [&](const Ptrs<1>& in, const Vecs<1>& vec, float* out, int64_t n) {
                    k.fma(in[0], vec[0], &alpha, false, &beta, false, out, n);
                  });
}

void softmax(const Tensor& x, Tensor& y) {
  const EltwiseKernels& k = eltwise_kernels();
  detail::for_each_row("softmax", x, y, [&](int64_t, const float* xr, float* yr, int64_t n) {
    k.softmax(xr, yr, n);
  });
}

void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) {
  FLICK_CHECK(x.ndim() == 4 && x.shape == y.shape,
              "rope: x and y must be [B, L, H, D], got " + x.str() + " -> " + y.str());
  const int64_t L = x.dim(1), H = x.dim(2), D = x.dim(3);
  FLICK_CHECK(D % 2 == 0, "rope: odd head dim " + std::to_string(D));
  const Shape cs{L, D / 2};
  FLICK_CHECK(
      cos.dtype == DType::F32 && sin.dtype == DType::F32 && cos.shape == cs && sin.shape == cs,
      "rope: cos/sin must be F32 " + cs.str() + ", got " + cos.str() + ", " + sin.str());
  const EltwiseKernels& k = eltwise_kernels();
  detail::for_each_row("rope", x, y, [&](int64_t row, const float* xr, float* yr, int64_t) {
    const int64_t l = row / H % L;
    const float* c = detail::read_f32(k, cos, l * cos.stride(0), cos.stride(1), D / 2, 2);
    const float* s = detail::read_f32(k, sin, l * sin.stride(0), sin.stride(1), D / 2, 3);
    k.rope(xr, c, s, yr, D / 2);
  });
}

}  // namespace flick::cpu
