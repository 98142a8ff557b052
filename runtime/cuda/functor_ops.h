// Backend ops assembled from the functors of runtime/cuda/functors.h: shape
// checks, broadcasting and strides resolved on the host, then one launch.
// Templated on the launcher, so the CUDA backend (CudaLauncher) and the CPU
// tests (HostLauncher, tests/cuda_host) run the very same op code; only the
// launcher differs. Tensors must live where the launcher runs (device
// pointers for CudaLauncher).
#pragma once

#include <array>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cuda/functors.h"
#include "runtime/ref/ops.h"
#include "runtime/ref/resample.h"

namespace flick::cuda::ops {

inline constexpr int kMaxOperands = 4;  // Map's inputs and output

inline void check_float(const Tensor& t, const char* op) {
  FLICK_CHECK(t.dtype == DType::F32 || t.dtype == DType::BF16,
              std::string(op) + ": the CUDA backend takes F32 or BF16 tensors, got " + t.str());
}

// narrow and the dims' dividers, once the dims are final.
inline void finish_dims(Dims& d) {
  d.narrow = d.numel() < (int64_t{1} << 31);
  for (int k = 0; k < d.ndim; ++k)
    d.fd[k] = d.narrow ? FastDiv(static_cast<uint32_t>(d.d[k])) : FastDiv();
}

inline Dims dims_of(const Shape& s) {
  Dims d;
  d.ndim = s.ndim;
  for (int i = 0; i < s.ndim; ++i) d.d[i] = s[i];
  finish_dims(d);
  return d;
}

// Fewer dims for the same flat index order: size-1 dims dropped, and a dim
// merged into the next where every operand steps through both as one
// (contiguous operands end with one dim, a row-broadcast one with two).
inline void coalesce(Dims& dims, Operand* const* ops, int count) {
  Dims out;
  int64_t st[kMaxOperands][kDims] = {};
  for (int k = 0; k < dims.ndim; ++k) {
    if (dims.d[k] == 1) continue;
    const int w = out.ndim;
    bool merge = w > 0;
    for (int j = 0; merge && j < count; ++j) merge = st[j][w - 1] == ops[j]->s[k] * dims.d[k];
    if (merge) {
      out.d[w - 1] *= dims.d[k];
      for (int j = 0; j < count; ++j) st[j][w - 1] = ops[j]->s[k];
    } else {
      out.d[w] = dims.d[k];
      for (int j = 0; j < count; ++j) st[j][w] = ops[j]->s[k];
      ++out.ndim;
    }
  }
  if (out.ndim == 0) out.ndim = 1, out.d[0] = 1;
  finish_dims(out);
  for (int j = 0; j < count; ++j)
    for (int k = 0; k < kDims; ++k) ops[j]->s[k] = k < out.ndim ? st[j][k] : 0;
  dims = out;
}

// x read at the index of an output of shape `out` (PyTorch broadcasting).
inline Operand broadcast_operand(const Tensor& x, const Shape& out, const char* op) {
  check_float(x, op);
  FLICK_CHECK(x.ndim() <= out.ndim,
              std::string(op) + ": " + x.str() + " has more dims than the output " + out.str());
  Operand o;
  o.data = x.data;
  o.dtype = x.dtype;
  const int lead = out.ndim - x.ndim();
  for (int d = lead; d < out.ndim; ++d) {
    const int xd = d - lead;
    if (x.dim(xd) == out[d]) {
      o.s[d] = out[d] == 1 ? 0 : x.stride(xd);
    } else {
      FLICK_CHECK(x.dim(xd) == 1,
                  std::string(op) + ": " + x.str() + " does not broadcast to " + out.str());
    }
  }
  return o;
}

inline Operand operand(const Tensor& x) {
  Operand o;
  o.data = x.data;
  o.dtype = x.dtype;
  for (int d = 0; d < x.ndim(); ++d) o.s[d] = x.stride(d);
  return o;
}

inline Param param(const Tensor& p, int64_t n, const char* op, const char* what) {
  Param r;
  if (p.empty()) return r;
  FLICK_CHECK((p.dtype == DType::F32 || p.dtype == DType::BF16) && p.ndim() == 1 && p.dim(0) == n,
              std::string(op) + ": " + what + " must be F32/BF16 [" + std::to_string(n) +
                  "], got " + p.str());
  r.data = p.data;
  r.dtype = p.dtype;
  r.s = p.stride(0);
  return r;
}

inline Act act_of(Activation a) { return static_cast<Act>(static_cast<int>(a)); }

template <class L, int N, class Op>
void map(const L& launch, const char* name, const Tensor* const (&in)[N], Tensor& y, Op op) {
  check_float(y, name);
  Map<N, Op> f;
  f.dims = dims_of(y.shape);
  for (int k = 0; k < N; ++k) f.in[k] = broadcast_operand(*in[k], y.shape, name);
  f.out = operand(y);
  f.op = op;
  Operand* ops[N + 1];
  for (int k = 0; k < N; ++k) ops[k] = &f.in[k];
  ops[N] = &f.out;
  coalesce(f.dims, ops, N + 1);
  launch.for_each(y.numel(), f);
}

inline void same_shape(const Tensor& x, const Tensor& y, const char* op) {
  FLICK_CHECK(x.shape == y.shape, std::string(op) + ": input " + x.str() + " vs output " + y.str());
}

template <class L>
void copy(const L& l, const Tensor& x, Tensor& y) {
  same_shape(x, y, "copy");
  const Tensor* in[1] = {&x};
  map(l, "copy", in, y, CopyOp{});
}
template <class L>
void activation(const L& l, const Tensor& x, Tensor& y, Activation act) {
  same_shape(x, y, "activation");
  const Tensor* in[1] = {&x};
  map(l, "activation", in, y, ActOp{act_of(act)});
}
template <class L>
void gelu(const L& l, const Tensor& x, Tensor& y, bool tanh_approx) {
  activation(l, x, y, tanh_approx ? Activation::GeluTanh : Activation::GeluErf);
}
template <class L>
void silu(const L& l, const Tensor& x, Tensor& y) {
  activation(l, x, y, Activation::Silu);
}
template <class L>
void affine(const L& l, const Tensor& x, float alpha, float beta, Tensor& y) {
  same_shape(x, y, "affine");
  const Tensor* in[1] = {&x};
  map(l, "affine", in, y, AffineOp{alpha, beta});
}
template <class L>
void add(const L& l, const Tensor& a, const Tensor& b, Tensor& y) {
  const Tensor* in[2] = {&a, &b};
  map(l, "add", in, y, AddOp{});
}
template <class L>
void mul(const L& l, const Tensor& a, const Tensor& b, Tensor& y) {
  const Tensor* in[2] = {&a, &b};
  map(l, "mul", in, y, MulOp{});
}
template <class L>
void mul_add(const L& l, const Tensor& a, const Tensor& b, const Tensor& c, Tensor& y) {
  const Tensor* in[3] = {&a, &b, &c};
  map(l, "mul_add", in, y, MulAddOp{});
}
template <class L>
void mul_add_stepwise(const L& l, const Tensor& a, const Tensor& b, const Tensor& c, Tensor& y) {
  const Tensor* in[3] = {&a, &b, &c};
  map(l, "mul_add_stepwise", in, y, MulAddStepwiseOp{});
}
template <class L>
void modulate(const L& l, const Tensor& x, const Tensor& shift, const Tensor& scale, Tensor& y) {
  same_shape(x, y, "modulate");
  const Tensor* in[3] = {&x, &shift, &scale};
  map(l, "modulate", in, y, ModulateOp{});
}

// Rows over the last dim of x and y (same shape). The outer dims merged as
// coalesce merges them (most rows then have one outer dim: Rows::off
// without divisions).
inline Rows rows_of(const Tensor& x, const Tensor& y) {
  Rows r;
  Operand ox, oy;  // their outer strides
  r.outer.ndim = x.ndim() - 1;
  for (int d = 0; d + 1 < x.ndim(); ++d) {
    r.outer.d[d] = x.dim(d);
    ox.s[d] = x.stride(d);
    oy.s[d] = y.stride(d);
  }
  Operand* ops[2] = {&ox, &oy};
  coalesce(r.outer, ops, 2);
  for (int d = 0; d < kDims; ++d) r.xs[d] = ox.s[d], r.ys[d] = oy.s[d];
  r.n = x.dim(-1);
  r.sx = x.stride(-1);
  r.sy = y.stride(-1);
  return r;
}
template <class R>
R row_io(const Tensor& x, const Tensor& y) {
  R f{};
  f.r = rows_of(x, y);
  f.x = operand(x);
  f.y = operand(y);
  return f;
}

template <class L>
void layer_norm(const L& l, const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                Tensor& y) {
  check_float(x, "layer_norm");
  check_float(y, "layer_norm");
  same_shape(x, y, "layer_norm");
  FLICK_CHECK(x.ndim() >= 1, "layer_norm: needs at least one dim");
  auto f = row_io<LayerNormRow>(x, y);
  f.w = param(weight, x.dim(-1), "layer_norm", "weight");
  f.b = param(bias, x.dim(-1), "layer_norm", "bias");
  f.eps = eps;
  l.rows(f);
}
template <class L>
void rms_norm(const L& l, const Tensor& x, const Tensor& weight, float eps, Tensor& y) {
  check_float(x, "rms_norm");
  check_float(y, "rms_norm");
  same_shape(x, y, "rms_norm");
  FLICK_CHECK(x.ndim() >= 1, "rms_norm: needs at least one dim");
  auto f = row_io<RmsNormRow>(x, y);
  f.w = param(weight, x.dim(-1), "rms_norm", "weight");
  f.eps = eps;
  l.rows(f);
}
template <class L>
void softmax(const L& l, const Tensor& x, Tensor& y) {
  check_float(x, "softmax");
  check_float(y, "softmax");
  same_shape(x, y, "softmax");
  FLICK_CHECK(x.ndim() >= 1, "softmax: needs at least one dim");
  l.rows(row_io<SoftmaxRow>(x, y));
}
// q = per-row int8 (q I8) or FP8 E4M3 (q F8_E4M3) of x: QuantizeRow.
template <class L>
void quantize_rows(const L& l, const Tensor& x, Tensor& q, Tensor& scale) {
  check_float(x, "quantize_rows");
  FLICK_CHECK(
      x.ndim() == 2 && (q.dtype == DType::I8 || q.dtype == DType::F8_E4M3) && q.shape == x.shape,
      "quantize_rows: x [M, K], q I8 or F8_E4M3 [M, K] expected, got x " + x.str() + ", q " +
          q.str());
  FLICK_CHECK(scale.dtype == DType::F32 && scale.ndim() == 1 && scale.dim(0) == x.dim(0) &&
                  scale.is_contiguous(),
              "quantize_rows: scale must be F32 [M], got " + scale.str());
  auto f = row_io<QuantizeRow>(x, q);
  f.scale = scale.ptr<float>();
  f.fp8 = q.dtype == DType::F8_E4M3;
  l.rows(f);
}
template <class L>
void group_norm(const L& l, const Tensor& x, int64_t groups, const Tensor& weight,
                const Tensor& bias, float eps, Tensor& y) {
  check_float(x, "group_norm");
  check_float(y, "group_norm");
  same_shape(x, y, "group_norm");
  FLICK_CHECK(x.ndim() >= 2, "group_norm: x must be [N, C, *], got " + x.str());
  const int64_t C = x.dim(1);
  FLICK_CHECK(groups > 0 && C % groups == 0, "group_norm: " + std::to_string(groups) +
                                                 " groups do not divide C = " + std::to_string(C));
  // The spatial dims must flatten to one strided dim (contiguous within a
  // channel): the layouts the VAEs use.
  int64_t S = 1;
  for (int d = 2; d < x.ndim(); ++d) S *= x.dim(d);
  auto flat_stride = [&](const Tensor& t) {
    for (int d = 2; d + 1 < t.ndim(); ++d)
      FLICK_CHECK(t.stride(d) == t.stride(d + 1) * t.dim(d + 1),
                  "group_norm: spatial dims of " + t.str() + " do not flatten");
    return t.ndim() > 2 ? t.stride(-1) : 1;
  };
  GroupNormRow f{};
  f.x = operand(x);
  f.y = operand(y);
  f.N = x.dim(0);
  f.C = C;
  f.S = S;
  f.groups = groups;
  f.xs0 = x.stride(0), f.xs1 = x.stride(1), f.xs2 = flat_stride(x);
  f.ys0 = y.stride(0), f.ys1 = y.stride(1), f.ys2 = flat_stride(y);
  f.w = param(weight, C, "group_norm", "weight");
  f.b = param(bias, C, "group_norm", "bias");
  f.eps = eps;
  l.rows(f);
}

template <class L>
void rope(const L& l, const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y,
          bool unfused = false) {
  check_float(x, "rope");
  check_float(y, "rope");
  same_shape(x, y, "rope");
  FLICK_CHECK(x.ndim() == 4 && x.dim(3) % 2 == 0,
              "rope: x must be [B, L, H, D], D even, got " + x.str());
  const Shape cs{x.dim(1), x.dim(3) / 2};
  FLICK_CHECK(
      cos.dtype == DType::F32 && sin.dtype == DType::F32 && cos.shape == cs && sin.shape == cs &&
          cos.is_contiguous() && sin.is_contiguous(),
      "rope: cos/sin must be contiguous F32 " + cs.str() + ", got " + cos.str() + ", " + sin.str());
  RopePairs f{};
  f.x = operand(x);
  f.y = operand(y);
  f.B = x.dim(0), f.L = x.dim(1), f.H = x.dim(2), f.half = x.dim(3) / 2;
  f.cos = cos.ptr<const float>();
  f.sin = sin.ptr<const float>();
  f.unfused = unfused;
  l.for_each(f.size(), f);
}

template <class L>
void rope_unfused(const L& l, const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor& y) {
  rope(l, x, cos, sin, y, true);
}

template <class L>
void rms_norm_stepwise(const L& l, const Tensor& x, float eps, Tensor& y) {
  check_float(x, "rms_norm_stepwise");
  FLICK_CHECK(x.shape == y.shape && x.dtype == y.dtype && x.ndim() >= 1,
              "rms_norm_stepwise: x " + x.str() + " y " + y.str());
  auto f = row_io<RmsNormStepwiseRow>(x, y);
  f.eps = eps;
  l.rows(f);
}

template <class L>
void normalize_l2(const L& l, const Tensor& x, const Tensor& gamma, float scale,
                  NormRounding rounding, Activation act, Tensor& y) {
  check_float(x, "normalize_l2");
  FLICK_CHECK(x.shape == y.shape && x.dtype == y.dtype && x.ndim() >= 1,
              "normalize_l2: x " + x.str() + " y " + y.str());
  FLICK_CHECK(act == Activation::None || act == Activation::Silu,
              "normalize_l2: activation None or Silu");
  FLICK_CHECK(
      gamma.dtype == DType::F32 && gamma.shape == Shape{x.dim(-1)} && gamma.is_contiguous(),
      "normalize_l2: gamma must be F32 [" + std::to_string(x.dim(-1)) + "], got " + gamma.str());
  auto f = row_io<NormalizeL2Row>(x, y);
  f.gamma = gamma.ptr<const float>();
  f.scale = scale;
  f.per_op = rounding == NormRounding::PerOp;
  f.silu = act == Activation::Silu;
  l.rows(f);
}

template <class L>
void softmax_parts(const L& l, const Tensor& x, float scale, Tensor& p, Tensor& inv_sum) {
  FLICK_CHECK(x.dtype == DType::F32 && x.ndim() >= 1 && x.shape == p.shape &&
                  (p.dtype == DType::F32 || p.dtype == DType::BF16),
              "softmax_parts: x " + x.str() + " p " + p.str());
  FLICK_CHECK(inv_sum.dtype == DType::F32 && inv_sum.is_contiguous() &&
                  inv_sum.numel() * x.dim(-1) == x.numel(),
              "softmax_parts: inv_sum " + inv_sum.str() + " for x " + x.str());
  auto f = row_io<SoftmaxPartsRow>(x, p);
  f.scale = scale;
  f.inv_sum = inv_sum.ptr<float>();
  l.rows(f);
}

// rope_3d's (cos, sin) table (Rope3d::table): pair j of axis a at position
// start[a] + q turns by (start[a] + q) * (1 / theta^(2j / (2 pairs[a]))), in
// f64 as the reference; axis a's entries from rope_3d_offsets(p)[a].
inline std::array<int64_t, 3> rope_3d_offsets(const Rope3dParams& p) {
  std::array<int64_t, 3> off{};
  for (size_t a = 1; a < 3; ++a) off[a] = off[a - 1] + 2 * p.grid[a - 1] * p.pairs[a - 1];
  return off;
}
inline std::vector<double> rope_3d_table(const Rope3dParams& p) {
  std::vector<double> t;
  for (size_t a = 0; a < 3; ++a) {
    const int n = p.pairs[a];
    for (int64_t q = 0; q < p.grid[a]; ++q)
      for (int j = 0; j < n; ++j) {
        const double inv_freq = 1.0 / std::pow(p.theta, static_cast<double>(2 * j) / (2 * n));
        const double ang = static_cast<double>(p.start[a] + q) * inv_freq;
        t.push_back(std::cos(ang));
        t.push_back(std::sin(ang));
      }
  }
  return t;
}
// The host's stage of the table: made at each call, kept in the stage.
struct HostRopeTable {
  std::vector<double> t;
  const double* operator()(const Rope3dParams& p) {
    t = rope_3d_table(p);
    return t.data();
  }
};

// stage(p) returns rope_3d_table(p) where the launcher can read it (the GPU
// keeps one per parameter set).
template <class L, class Stage>
void rope_3d(const L& l, const Tensor& x, const Rope3dParams& p, Tensor& y, Stage&& stage) {
  check_float(x, "rope_3d");
  check_float(y, "rope_3d");
  const int pairs = p.pairs[0] + p.pairs[1] + p.pairs[2];
  const int64_t tokens = p.grid[0] * p.grid[1] * p.grid[2];
  FLICK_CHECK(x.shape == y.shape && x.ndim() == 3 && x.dim(0) == tokens && x.dim(2) == 2 * pairs,
              "rope_3d: x " + x.str() + " y " + y.str() + " for a grid of " +
                  std::to_string(tokens) + " tokens and " + std::to_string(pairs) + " pairs");
  Rope3d f{};
  f.x = operand(x);
  f.y = operand(y);
  for (int a = 0; a < 3; ++a) {
    f.grid[a] = p.grid[static_cast<size_t>(a)];
    f.pairs[a] = p.pairs[static_cast<size_t>(a)];
  }
  f.H = x.dim(1);
  f.half = pairs;
  FLICK_CHECK(f.size() < (int64_t{1} << 31), "rope_3d: over 2^31 elements: " + x.str());
  const std::array<int64_t, 3> off = rope_3d_offsets(p);
  for (int a = 0; a < 3; ++a) f.tab_off[a] = off[static_cast<size_t>(a)];
  f.table = stage(p);
  l.for_each(f.size(), f);
}

template <class L>
void reduce(const L& l, const Tensor& x, int dim, ReduceOp op, Tensor& y) {
  if (dim < 0) dim += x.ndim();
  FLICK_CHECK(dim >= 0 && dim < x.ndim(), "reduce: dim out of range for " + x.str());
  check_float(x, "reduce");
  check_float(y, "reduce");
  Shape expect = x.shape;
  expect[dim] = 1;
  FLICK_CHECK(y.shape == expect, "reduce: " + x.str() + " over dim " + std::to_string(dim) +
                                     " must give " + expect.str() + ", got " + y.str());
  FLICK_CHECK(x.dim(dim) > 0 || op == ReduceOp::Sum, "reduce: max/min/mean of an empty dim");
  ReduceDim f{};
  f.ydims = dims_of(y.shape);
  f.x = operand(x);
  f.y = operand(y);
  f.n = x.dim(dim);
  f.sd = x.stride(dim);
  f.op = static_cast<int>(op);
  l.for_each(y.numel(), f);
}

// resize: taps from runtime/ref/resample.h (PyTorch's index arithmetic, the
// one place that reproduces it), staged by stage(taps, dim) where the
// launcher runs (the host: pointers into taps; the GPU: a device copy).
template <class L, class Stage>
void resize_taps_apply(const L& l, const Tensor& x, Tensor& y, const resample::Taps2d& taps,
                       Stage&& stage) {
  Resize2d f{};
  f.x = operand(x);
  f.y = operand(y);
  f.N = y.dim(0), f.C = y.dim(1), f.Ho = y.dim(2), f.Wo = y.dim(3);
  f.th = stage(taps.h, 0);
  f.tw = stage(taps.w, 1);
  l.for_each(y.numel(), f);
}

template <class L, class Stage>
void resize(const L& l, const Tensor& x, Tensor& y, ResizeMode mode, bool align_corners,
            bool antialias, Stage&& stage) {
  check_float(x, "resize");
  check_float(y, "resize");
  resize_taps_apply(l, x, y,
                    resample::resize_taps_2d(x, y, nullptr, mode, align_corners, antialias), stage);
}

template <class L, class Stage>
void resize_window(const L& l, const Tensor& x, Tensor& y, const ResizeWindow& window,
                   ResizeMode mode, bool align_corners, bool antialias, Stage&& stage) {
  check_float(x, "resize_window");
  check_float(y, "resize_window");
  resize_taps_apply(l, x, y,
                    resample::resize_taps_2d(x, y, &window, mode, align_corners, antialias), stage);
}

// The host's stage: the taps' own vectors.
inline ResizeTaps host_taps(const resample::Taps& t, int) {
  return {t.first.data(), t.count.data(), t.weight.data(), t.width, t.in};
}

template <class L>
void upsample_nearest(const L& l, const Tensor& x, Tensor& y) {
  check_float(x, "upsample_nearest");
  check_float(y, "upsample_nearest");
  FLICK_CHECK(x.ndim() == y.ndim() && (x.ndim() == 4 || x.ndim() == 5) && x.dim(0) == y.dim(0) &&
                  x.dim(1) == y.dim(1),
              "upsample_nearest: " + x.str() + " -> " + y.str());
  UpsampleNearest f{};
  f.ydims = dims_of(y.shape);
  f.x = operand(x);
  f.y = operand(y);
  for (int d = 0; d < x.ndim(); ++d) {
    FLICK_CHECK(x.dim(d) > 0 && y.dim(d) % x.dim(d) == 0,
                "upsample_nearest: " + y.str() + " is not an integer multiple of " + x.str());
    f.factor[d] = y.dim(d) / x.dim(d);
  }
  l.for_each(y.numel(), f);
}

// concat = one strided copy per input into its slice of y.
template <class L>
void concat(const L& l, std::span<const Tensor> xs, int dim, Tensor& y) {
  if (dim < 0) dim += y.ndim();
  int64_t at = 0;
  for (const Tensor& x : xs) {
    Tensor part = y.slice(dim, at, x.dim(dim));
    copy(l, x, part);
    at += x.dim(dim);
  }
  FLICK_CHECK(at == y.dim(dim), "concat: inputs cover " + std::to_string(at) + " of " + y.str());
}

// y = act(acc + bias) from an fp32 contiguous result acc of y's shape;
// channel_dim: the dim the bias runs along (the last for a linear, 1 for a
// conv). bias may be empty.
template <class L>
void bias_act(const L& l, const void* acc, DType acc_dtype, const Tensor& bias, int channel_dim,
              Activation act, Tensor& y) {
  check_float(y, "bias_act");
  BiasActEpilogue f{};
  FLICK_CHECK(acc_dtype == DType::F32 || acc_dtype == DType::BF16,
              "bias_act: the accumulator is F32 or BF16");
  f.acc = acc;
  f.acc_bf16 = acc_dtype == DType::BF16;
  if (channel_dim < 0) channel_dim += y.ndim();
  f.channels = y.dim(channel_dim);
  f.inner = 1;
  for (int d = channel_dim + 1; d < y.ndim(); ++d) f.inner *= y.dim(d);
  f.bias = param(bias, f.channels, "bias_act", "bias");
  f.dims = dims_of(y.shape);
  f.y = operand(y);
  f.act = act_of(act);
  Operand* ops[1] = {&f.y};
  coalesce(f.dims, ops, 1);  // the channel comes from the flat index, not y's dims
  if (f.dims.narrow) {
    f.inner_div = FastDiv(static_cast<uint32_t>(f.inner));
    f.channel_div = FastDiv(static_cast<uint32_t>(f.channels));
  }
  l.for_each(y.numel(), f);
}

// Attention as two batched GEMMs around the masked softmax functor, one
// batch row at a time: S = q k^T (fp32), P = softmax(S * scale + masks) in
// v's dtype, out = P v. For what the cuDNN SDPA op refuses (head dims over
// 256, the VAEs' mid attention; masks and biases; F32). mm(a, b, c) is the
// backend's batched matmul (cuBLASLt on the GPU); s_scratch F32 and
// p_scratch (v's dtype) hold at least H * Lq * Lk elements. out may alias q:
// a batch row's scores are complete before its output is written.
template <class L, class Mm>
void attention_fallback(const L& l, Mm&& mm, const Tensor& q, const Tensor& k, const Tensor& v,
                        Tensor& out, const AttentionParams& p, void* s_scratch, void* p_scratch) {
  FLICK_CHECK(q.ndim() == 4 && k.ndim() == 4 && v.ndim() == 4 && out.ndim() == 4,
              "attention: q, k, v, out must be [B, L, H, D]");
  const int64_t B = q.dim(0), Lq = q.dim(1), H = q.dim(2), D = q.dim(3), Lk = k.dim(1);
  FLICK_CHECK(
      k.dim(0) == B && k.dim(2) == H && k.dim(3) == D && v.shape == k.shape && out.shape == q.shape,
      "attention: q " + q.str() + ", k " + k.str() + ", v " + v.str() + ", out " + out.str());
  const float scale = p.scale != 0.f ? p.scale : 1.f / sqrtf(static_cast<float>(D));
  Tensor s = Tensor::view(s_scratch, DType::F32, {H, Lq, Lk}, q.device);
  Tensor pm = Tensor::view(p_scratch, v.dtype, {H, Lq, Lk}, q.device);
  for (int64_t b = 0; b < B; ++b) {
    const Tensor qb = q.select(0, b).permute({1, 0, 2});  // [H, Lq, D]
    const Tensor kt = k.select(0, b).permute({1, 2, 0});  // [H, D, Lk]
    const Tensor vb = v.select(0, b).permute({1, 0, 2});  // [H, Lk, D]
    Tensor ob = out.select(0, b).permute({1, 0, 2});      // [H, Lq, D]
    mm(qb, kt, s);
    AttnSoftmaxRow f{};
    f.s = s.ptr<const float>();
    f.p = operand(pm);
    f.H = H, f.Lq = Lq, f.Lk = Lk;
    f.scale = scale;
    if (!p.bias.empty()) {
      const Tensor& bt = p.bias;
      FLICK_CHECK(bt.dtype == DType::F32 && bt.ndim() == 4 && bt.dim(2) == Lq && bt.dim(3) == Lk &&
                      (bt.dim(0) == B || bt.dim(0) == 1) && (bt.dim(1) == H || bt.dim(1) == 1),
                  "attention: bias must be F32 [B or 1, H or 1, Lq, Lk], got " + bt.str());
      f.bias = static_cast<const float*>(bt.data) + (bt.dim(0) == 1 ? 0 : b * bt.stride(0));
      f.bias_sh = bt.dim(1) == 1 ? 0 : bt.stride(1);
      f.bias_sq = bt.stride(2);
      f.bias_sk = bt.stride(3);
    }
    if (const int64_t w = ref::check_separable_bias("attention", p, B, H, Lq, Lk)) {
      const Tensor &by = p.bias_y, &bx = p.bias_x;
      f.bias_y = static_cast<const float*>(by.data) + (by.dim(0) == 1 ? 0 : b * by.stride(0));
      f.bias_x = static_cast<const float*>(bx.data) + (bx.dim(0) == 1 ? 0 : b * bx.stride(0));
      f.by_sh = by.dim(1) == 1 ? 0 : by.stride(1);
      f.bx_sh = bx.dim(1) == 1 ? 0 : bx.stride(1);
      f.by_sq = by.stride(2);
      f.bx_sq = bx.stride(2);
      f.grid_w = w;
    }
    if (!p.key_padding.empty()) {
      const Tensor& kp = p.key_padding;
      FLICK_CHECK(kp.dtype == DType::U8 && kp.ndim() == 2 && kp.dim(0) == B && kp.dim(1) == Lk,
                  "attention: key_padding must be U8 [B, Lk], got " + kp.str());
      f.key_padding = static_cast<const uint8_t*>(kp.data) + b * kp.stride(0);
      f.kp_stride = kp.stride(1);
    }
    f.causal_block = p.causal_block;
    l.rows(f);
    mm(pm, vb, ob);
  }
}

}  // namespace flick::cuda::ops
