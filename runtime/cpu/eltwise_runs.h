// How the CPU elementwise / norm / data ops feed the fp32 kernels of
// eltwise_kernels.h: operands are read as fp32 runs (the tensor's own memory
// when it is F32 and unit-stride, otherwise a converted or gathered copy in a
// per-thread scratch buffer) and results are written back the same way.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "runtime/cpu/eltwise_kernels.h"
#include "runtime/ref/data_iter.h"
#include "runtime/tensor.h"
#include "runtime/threads.h"

namespace flick::cpu::detail {

using flick::detail::Strides;

// Per-thread fp32 scratch, grown on first use and then reused, so steady-state
// calls do not allocate. Slots 0-4 hold per-run operands and results; slots
// 5-7 per-call parameters prepared by the calling thread (which also runs a
// share of the work, hence the separate slots).
inline constexpr int kParamSlot = 5;
inline constexpr int kScratchSlots = 8;
float* scratch(int slot, int64_t n);

// n elements of t from element offset `off`, `stride` apart, as contiguous fp32.
const float* read_f32(const EltwiseKernels& k, const Tensor& t, int64_t off, int64_t stride,
                      int64_t n, int slot);
// Where to compute n output elements: t's memory if F32 unit-stride, else scratch.
float* out_f32(const Tensor& t, int64_t off, int64_t stride, int64_t n, int slot);
// Stores a run computed by out_f32 (a no-op when it was computed in place).
void write_f32(const EltwiseKernels& k, const Tensor& t, int64_t off, int64_t stride, int64_t n,
               const float* buf);

// A per-channel parameter vector ([n] or empty) as fp32 on the calling thread.
const float* param_f32(const EltwiseKernels& k, const Tensor& p, int64_t n, int slot);

// The dims of a view after dropping size-1 dims and merging each dim into the
// next when every operand is contiguous across the pair (stride 0 repeats
// merge too): the minimal loop nest. Operand 0 is the output.
template <size_t N>
struct Collapsed {
  Shape shape;
  std::array<Strides, N> strides{};
};

template <size_t N>
Collapsed<N> collapse(const Shape& shape, const std::array<Strides, N>& strides) {
  Collapsed<N> c;
  for (int d = 0; d < shape.ndim; ++d) {
    if (shape[d] == 1) continue;
    const size_t sd = static_cast<size_t>(d);
    if (c.shape.ndim > 0) {
      const int last = c.shape.ndim - 1;
      bool merge = true;
      for (size_t k = 0; k < N; ++k)
        merge = merge && c.strides[k][static_cast<size_t>(last)] == strides[k][sd] * shape[d];
      if (merge) {
        c.shape[last] *= shape[d];
        for (size_t k = 0; k < N; ++k) c.strides[k][static_cast<size_t>(last)] = strides[k][sd];
        continue;
      }
    }
    const size_t nd = static_cast<size_t>(c.shape.ndim++);
    c.shape.dims[nd] = shape[d];
    for (size_t k = 0; k < N; ++k) c.strides[k][nd] = strides[k][sd];
  }
  if (c.shape.ndim == 0) {  // a single element
    c.shape.ndim = 1;
    c.shape.dims[0] = 1;
  }
  return c;
}

// collapse() after ordering the dims by the output's strides (operand 0),
// largest first (stable): an elementwise op visits every element once in any
// order, and a permuted dense output (a channels-last map: [N, C, H, W] with
// C innermost) then collapses into one run like a contiguous one, with
// every operand of the same layout.
template <size_t N>
Collapsed<N> collapse_in_y_order(const Shape& shape, const std::array<Strides, N>& strides) {
  std::array<int, kMaxDims> order{};
  for (int d = 0; d < shape.ndim; ++d) order[static_cast<size_t>(d)] = d;
  std::stable_sort(order.begin(), order.begin() + shape.ndim, [&](int a, int b) {
    return strides[0][static_cast<size_t>(a)] > strides[0][static_cast<size_t>(b)];
  });
  Shape ps = shape;
  std::array<Strides, N> pst = strides;
  for (int d = 0; d < shape.ndim; ++d) {
    const auto from = static_cast<size_t>(order[static_cast<size_t>(d)]);
    ps[d] = shape[static_cast<int>(from)];
    for (size_t k = 0; k < N; ++k) pst[k][static_cast<size_t>(d)] = strides[k][from];
  }
  return collapse(ps, pst);
}

void check_float(const Tensor& t, const char* op);

// Runs fn(in, vec, out, n) over the output y in runs of at most kRun elements,
// in parallel: in[k] points to n fp32 values of input k, or to one value when
// vec[k] is false (the input repeats along the run); fn writes n values to
// out. Inputs broadcast to y's shape (PyTorch rules); y may alias an input
// that has y's shape and strides.
inline constexpr int64_t kRun = 2048;

template <size_t N, class Fn>
void for_each_run(const char* op, Tensor& y, const std::array<const Tensor*, N>& in, Fn fn) {
  check_float(y, op);
  std::array<Strides, N + 1> st;
  st[0] = y.strides;
  for (size_t k = 0; k < N; ++k) {
    check_float(*in[k], op);
    st[k + 1] = flick::detail::broadcast_strides(*in[k], y.shape, op);
  }
  if (y.numel() == 0) return;
  const Collapsed<N + 1> c = collapse_in_y_order(y.shape, st);
  const int last = c.shape.ndim - 1;
  const int64_t inner = c.shape[last];
  Shape outer = c.shape;
  outer.ndim = last;
  const int64_t runs_per_row = (inner + kRun - 1) / kRun;
  const int64_t total = outer.numel() * runs_per_row;
  const EltwiseKernels& kern = eltwise_kernels();
  parallel_for(
      total,
      [&](int64_t begin, int64_t end) {
        std::array<float, N> scalars;
        std::array<const float*, N> ptrs;
        std::array<bool, N> vec;
        for (int64_t r = begin; r < end; ++r) {
          const int64_t row = r / runs_per_row, start = (r % runs_per_row) * kRun;
          const int64_t n = std::min(kRun, inner - start);
          const auto& sy = c.strides[0];
          const int64_t oy = flick::detail::offset_of(row, outer, sy) + start * sy[last];
          for (size_t k = 0; k < N; ++k) {
            const auto& sk = c.strides[k + 1];
            const int64_t ok = flick::detail::offset_of(row, outer, sk) + start * sk[last];
            vec[k] = sk[last] != 0;
            if (vec[k]) {
              ptrs[k] = read_f32(kern, *in[k], ok, sk[last], n, static_cast<int>(k));
            } else {
              scalars[k] = load_as_f32(in[k]->dtype, in[k]->data, ok);
              ptrs[k] = &scalars[k];
            }
          }
          float* out = out_f32(y, oy, sy[last], n, static_cast<int>(N));
          fn(ptrs, vec, out, n);
          write_f32(kern, y, oy, sy[last], n, out);
        }
      },
      std::max<int64_t>(1, 16384 / std::min(inner, kRun)));
}

// Runs fn(row, x_row, y_row, n) for every row of the last dim of x / y (same
// shape) in parallel, x_row / y_row fp32 runs as in for_each_run.
template <class Fn>
void for_each_row(const char* op, const Tensor& x, Tensor& y, Fn fn) {
  check_float(x, op);
  check_float(y, op);
  FLICK_CHECK(x.shape == y.shape && x.ndim() >= 1,
              std::string(op) + ": input " + x.str() + " vs output " + y.str());
  if (x.numel() == 0) return;
  const Shape rows = flick::detail::outer_shape(x.shape);
  const int64_t n = x.dim(-1);
  const EltwiseKernels& kern = eltwise_kernels();
  parallel_for(
      rows.numel(),
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const int64_t ox = flick::detail::offset_of(r, rows, x.strides);
          const int64_t oy = flick::detail::offset_of(r, rows, y.strides);
          const float* xr = read_f32(kern, x, ox, x.stride(-1), n, 0);
          float* yr = out_f32(y, oy, y.stride(-1), n, 1);
          fn(r, xr, yr, n);
          write_f32(kern, y, oy, y.stride(-1), n, yr);
        }
      },
      std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n)));
}

}  // namespace flick::cpu::detail
