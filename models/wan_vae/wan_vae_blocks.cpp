#include "models/wan_vae/wan_vae_blocks.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <utility>

#include "runtime/cpu/conv_cache.h"
#include "runtime/plan_cache.h"
#include "runtime/threads.h"

namespace flick::wan_vae {
namespace {

const DTypeSet kFloat{DType::F32, DType::BF16, DType::F16};

// A weight, bias or norm scale in any float dtype as the fp32 values the
// numerics compute with (the reference's casts applied).
Expected<OwnedTensor> convert_f32(const WeightView& v, const std::string& name, const Shape& shape,
                                  const Numerics& num) {
  FLICK_ASSIGN_OR_RETURN(Tensor t, v.get(name, kFloat, shape));
  OwnedTensor out(DType::F32, shape);
  float* p = out.t.ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float x = load_as_f32(t.dtype, t.data, i);
    p[i] = num.ref_weights ? ref_weight_value(x) : x;
  }
  return out;
}

Expected<OwnedTensor> load_f32(const WeightView& v, const std::string& name, const Shape& shape,
                               const Numerics& num) {
  const PlanCacheScope* scope = PlanCacheScope::current();
  const TensorInfo* info = v.info(name);
  // Large weights (the convolutions) through the plan cache of a pipeline's
  // load (runtime/plan_cache.h): the converted fp32 values, so a hit skips
  // reading the .pth storage (CRC-checked) and the per-element casts.
  // Biases and norm scales (under 4096 values) are not worth a file each.
  if (scope == nullptr || scope->cache() == nullptr || info == nullptr ||
      info->shape != shape.to_vector() || shape.numel() < 4096)
    return convert_f32(v, name, shape, num);
  FLICK_ASSIGN_OR_RETURN(
      PlanCached c,
      // The cast in the name too: encoder and decoder may read one tensor
      // with different numerics, and must not evict each other's entry.
      PlanCached::get(v.full_name(name) + (num.ref_weights ? "@ref-cast" : "@f32"),
                      "vae-weight F32 " + shape.str() + (num.ref_weights ? " ref-cast" : ""),
                      [&]() -> Expected<std::vector<OwnedTensor>> {
                        FLICK_ASSIGN_OR_RETURN(OwnedTensor t, convert_f32(v, name, shape, num));
                        std::vector<OwnedTensor> out;
                        out.push_back(std::move(t));
                        return out;
                      }));
  if (c.tensors.size() != 1 || c.tensors[0].dtype != DType::F32 || c.tensors[0].shape != shape)
    return internal_error("plan cache entry of " + v.full_name(name) + " has the wrong tensors");
  if (!c.built.empty()) return std::move(c.built[0]);
  v.mark_used(name);  // a hit reads none of it
  OwnedTensor out(DType::F32, shape);
  std::memcpy(out.t.data, c.tensors[0].data, out.t.nbytes());
  return out;
}

// How a convolution's loader reads its weights as fp32 (load_f32 or
// convert_f32).
using LoadF32 = Expected<OwnedTensor> (*)(const WeightView&, const std::string&, const Shape&,
                                          const Numerics&);
using ConvMaker = std::function<Expected<std::unique_ptr<PackedConv>>(LoadF32)>;

// The layer's shapes and geometry as pack_conv_cached keys them: `d` with
// its weight shape `w` and a bias of w[0] values, no data.
ConvDesc conv_shapes(ConvDesc d, const Shape& w) {
  d.w = Tensor::view(nullptr, DType::F32, w);
  d.bias = Tensor::view(nullptr, DType::F32, Shape{w[0]});
  return d;
}

// A convolution packed through the plan cache of a pipeline's load. The CPU
// backend caches it packed (runtime/cpu/conv_cache.h): a hit adopts
// oneDNN's reordered weights and reads nothing of the checkpoint, so
// `make` reads the weights uncached (convert_f32) on a miss. Other
// backends cache the fp32 values (make(load_f32)). `entry`: the layer's
// name in the checkpoint view; `used`: the tensors a hit stands for.
Expected<std::unique_ptr<PackedConv>> pack_conv_cached(const WeightView& v, std::string_view entry,
                                                       std::initializer_list<std::string> used,
                                                       Backend& be, const ConvDesc& shapes,
                                                       const Numerics& num, const ConvMaker& make) {
  if (std::strcmp(be.name(), "cpu") != 0) return make(load_f32);
  // Precision and cast in the name: the encoder and decoder (or two
  // pipelines sharing the cache) may pack one layer differently, and must
  // not evict each other's entry.
  const std::string name = v.full_name(std::string(entry)) + "@" +
                           precision_name(shapes.precision) + (num.ref_weights ? "-ref-cast" : "");
  Expected<std::unique_ptr<PackedConv>> c =
      cpu::pack_conv_cached(name, shapes, [&] { return make(convert_f32); });
  if (c.ok())
    for (const std::string& u : used) v.mark_used(u);
  return c;
}

// The convolution of the checkpoint's `<p>.weight` (stored as `file`,
// convolved as `ws`, the same values) and `<p>.bias`, geometry and
// precision from `d`, through pack_conv_cached.
Expected<std::unique_ptr<PackedConv>> load_conv(const WeightView& v, const std::string& p,
                                                const Shape& file, const Shape& ws,
                                                const ConvDesc& d, Backend& be,
                                                const Numerics& num) {
  return pack_conv_cached(
      v, p, {p + ".weight", p + ".bias"}, be, conv_shapes(d, ws), num,
      [&](LoadF32 load) -> Expected<std::unique_ptr<PackedConv>> {
        FLICK_ASSIGN_OR_RETURN(OwnedTensor w, load(v, p + ".weight", file, num));
        FLICK_ASSIGN_OR_RETURN(OwnedTensor b, load(v, p + ".bias", Shape{ws[0]}, num));
        ConvDesc full = d;
        full.w = w.t.reshape(ws);
        full.bias = b.t;
        return be.pack_conv(full);
      });
}

size_t frame_bytes(const Tensor& x) {
  return static_cast<size_t>(x.dim(1) * x.dim(3) * x.dim(4)) * dtype_size(x.dtype);
}

// n bytes of dtype-t activations from src to dst (non-overlapping): a
// backend copy of flat views.
void copy_bytes(Backend& be, DType t, void* dst, const void* src, size_t n) {
  const Shape shape{static_cast<int64_t>(n / dtype_size(t))};
  Tensor to = Tensor::view(dst, t, shape);
  be.copy(Tensor::view(const_cast<void*>(src), t, shape), to);
}

// Pointer to frame `t` of a channels-last [1, C, T, H, W] view.
char* frame_ptr(const Tensor& x, int64_t t) {
  return static_cast<char*>(x.data) + static_cast<size_t>(t) * frame_bytes(x);
}

// y = a + b over dense channels-last views of one shape, as the flat
// buffers they are (the backend's loops see the permuted views as strided).
void add_channels_last(Backend& be, const Tensor& a, const Tensor& b, Tensor& y) {
  FLICK_CHECK(is_channels_last(a) && is_channels_last(b) && is_channels_last(y) &&
                  a.shape == y.shape && b.shape == y.shape,
              "add: " + a.str() + " + " + b.str() + " -> " + y.str());
  Tensor fy = Tensor::view(y.data, y.dtype, Shape{y.numel()});
  be.add(Tensor::view(a.data, a.dtype, Shape{a.numel()}),
         Tensor::view(b.data, b.dtype, Shape{b.numel()}), fy);
}

// padded [T, H + 1, W + 1, C] = x [T, H, W, C] with a zero column right and
// a zero row at the bottom of every frame.
void pad_bottom_right(const Tensor& x, Tensor& padded) {
  const int64_t t = x.dim(2), h = x.dim(3), w = x.dim(4);
  const size_t pixel = static_cast<size_t>(x.dim(1)) * dtype_size(x.dtype);
  const size_t in_row = static_cast<size_t>(w) * pixel, out_row = in_row + pixel;
  parallel_for(t * (h + 1), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t f = r / (h + 1), i = r % (h + 1);
      char* dst = static_cast<char*>(padded.data) + static_cast<size_t>(r) * out_row;
      if (i == h) {
        std::memset(dst, 0, out_row);
        continue;
      }
      std::memcpy(dst, static_cast<const char*>(x.data) + static_cast<size_t>(f * h + i) * in_row,
                  in_row);
      std::memset(dst + in_row, 0, pixel);
    }
  });
}

}  // namespace

Numerics normalized_only(const Numerics& num) {
  Numerics n = num;
  if (n.conv == Precision::INT8) n.conv = Precision::BF16;
  return n;
}

Expected<Precision> conv_precision(std::string_view what, Precision precision,
                                   std::optional<Precision> conv) {
  const Precision c = conv.value_or(precision);
  if (c != precision && !(precision == Precision::BF16 && c == Precision::INT8))
    return invalid_input(std::string(what) + ": " + precision_name(c) + " convolutions with " +
                         precision_name(precision) +
                         " activations are not supported (INT8 runs with BF16)");
  return c;
}

float ref_weight_value(float v) { return round_bf16(f16_to_f32(f32_to_f16(v))); }

Tensor Scratch::get(DType dtype, const Shape& shape) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  if (buf_.t.empty() || buf_.t.nbytes() < bytes)
    buf_ = OwnedTensor(DType::U8, Shape{static_cast<int64_t>(bytes)});
  return Tensor::view(buf_.t.data, dtype, shape);
}

Tensor Scratch::channels_last(DType dtype, int64_t c, int64_t t, int64_t h, int64_t w) {
  return get(dtype, Shape{1, t, h, w, c}).permute({0, 4, 1, 2, 3});
}

Tensor channels_last_view(void* data, DType dtype, int64_t c, int64_t t, int64_t h, int64_t w) {
  return Tensor::view(data, dtype, Shape{1, t, h, w, c}).permute({0, 4, 1, 2, 3});
}

bool is_channels_last(const Tensor& x) {
  return x.ndim() == 5 && x.permute({0, 2, 3, 4, 1}).is_contiguous();
}

Tensor frames(const Tensor& x, int64_t start, int64_t len) {
  FLICK_CHECK(
      is_channels_last(x) && start >= 0 && len >= 0 && start + len <= x.dim(2),
      "frames: " + x.str() + " [" + std::to_string(start) + ", +" + std::to_string(len) + ")");
  return channels_last_view(frame_ptr(x, start), x.dtype, x.dim(1), len, x.dim(3), x.dim(4));
}

namespace {

// Bitwise equality of two frames, both threads comparing (equal frames are
// read whole: tens of MB at 352x640).
bool same_bytes(const char* a, const char* b, size_t n) {
  constexpr size_t kBlock = size_t{1} << 20;
  if (n <= kBlock) return std::memcmp(a, b, n) == 0;
  std::atomic<bool> same{true};
  parallel_for(static_cast<int64_t>((n + kBlock - 1) / kBlock), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end && same.load(std::memory_order_relaxed); ++i) {
      const size_t off = static_cast<size_t>(i) * kBlock;
      if (std::memcmp(a + off, b + off, std::min(kBlock, n - off)) != 0) same = false;
    }
  });
  return same;
}

}  // namespace

int64_t steady_from(const Tensor& x, int64_t known) {
  FLICK_CHECK(is_channels_last(x), "steady_from: " + x.str());
  const int64_t t = x.dim(2);
  const size_t bytes = frame_bytes(x);
  const char* last = frame_ptr(x, t - 1);
  int64_t s = known >= 0 && known < t ? known : t - 1;
  while (s > 0 && same_bytes(frame_ptr(x, s - 1), last, bytes)) --s;
  return s;
}

namespace {

// Frames [n, T) of a channels-last y = its frame n - 1.
void repeat_last_computed(Backend& be, Tensor& y, int64_t n) {
  const size_t bytes = frame_bytes(y);
  for (int64_t i = n; i < y.dim(2); ++i)
    copy_bytes(be, y.dtype, frame_ptr(y, i), frame_ptr(y, n - 1), bytes);
}

// Convolves x into y (output frame i from x's frames i .. i + taps - 1),
// with `reuse` only up to the first output whose window lies in x's
// constant tail (x's frames from `x_known` on are known equal; -1: not
// known), then repeats that output. Returns the frame of y from which its
// frames are known equal (T - 1 when all were computed).
int64_t conv_frames(Backend& be, const Tensor& x, const PackedConv& conv, Tensor& y, int64_t taps,
                    bool reuse, int64_t x_known) {
  const int64_t t = y.dim(2);
  const int64_t n = reuse && t >= 2 && is_channels_last(x) && is_channels_last(y)
                        ? steady_from(x, x_known) + 1  // outputs [0, n) computed
                        : t;
  if (n >= t) {
    be.conv(x, conv, y, Activation::None);
    return t - 1;
  }
  const Tensor xs = frames(x, 0, n + taps - 1);
  Tensor ys = frames(y, 0, n);
  be.conv(xs, conv, ys, Activation::None);
  repeat_last_computed(be, y, n);
  return n - 1;
}

}  // namespace

// ---- CausalConv3d ----

Expected<CausalConv3d> CausalConv3d::load(const WeightView& v, std::string_view prefix, Backend& be,
                                          const Numerics& num) {
  const std::string p(prefix);
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* info, v.require(p + ".weight", 5));
  const std::vector<int64_t>& s = info->shape;
  if (s[2] != 1 && s[2] != 3)
    return invalid_input(v.full_name(p + ".weight") +
                         ": temporal kernel must be 1 or 3, file has " + info->shape_str());
  if (s[3] != s[4] || s[3] % 2 != 1)
    return invalid_input(v.full_name(p + ".weight") +
                         ": expected an odd square spatial kernel, file has " + info->shape_str());
  CausalConv3d c;
  c.cout_ = s[0];
  c.cin_ = s[1];
  c.kt_ = s[2];
  c.act_ = num.act;
  ConvDesc d;
  d.spatial_dims = 3;
  d.padding = {0, s[3] / 2, s[4] / 2};
  d.precision = num.conv;
  const Shape ws{s[0], s[1], s[2], s[3], s[4]};
  FLICK_ASSIGN_OR_RETURN(c.conv_, load_conv(v, p, ws, ws, d, be, num));
  return c;
}

Expected<CausalConv3d> CausalConv3d::load_2d(const WeightView& v, std::string_view prefix,
                                             Backend& be, const Numerics& num) {
  const std::string p(prefix);
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* info, v.require(p + ".weight", 4));
  const std::vector<int64_t>& s = info->shape;
  if (s[2] != s[3] || s[2] % 2 != 1)
    return invalid_input(v.full_name(p + ".weight") + ": expected an odd square kernel, file has " +
                         info->shape_str());
  CausalConv3d c;
  c.cout_ = s[0];
  c.cin_ = s[1];
  c.act_ = num.act;
  // A per-frame 2-D conv is a 3-D conv with a 1-frame kernel.
  ConvDesc d;
  d.spatial_dims = 3;
  d.padding = {0, s[2] / 2, s[3] / 2};
  d.precision = num.conv;
  FLICK_ASSIGN_OR_RETURN(c.conv_, load_conv(v, p, Shape{s[0], s[1], s[2], s[3]},
                                            Shape{s[0], s[1], 1, s[2], s[3]}, d, be, num));
  return c;
}

Tensor CausalConv3d::padded(Scratch& pad, int64_t t, int64_t h, int64_t w) const {
  FLICK_CHECK(kt_ == 3, "CausalConv3d::padded: a 1-frame kernel has no cache");
  return pad.channels_last(act_, cin_, 2 + t, h, w);
}

int64_t CausalConv3d::run(Backend& be, const Tensor& padded, Tensor& y, int64_t body_from) {
  FLICK_CHECK(kt_ == 3 && is_channels_last(padded) && padded.dim(1) == cin_ && padded.dim(2) > 2 &&
                  y.ndim() == 5 && y.dim(1) == cout_ && y.dim(2) == padded.dim(2) - 2,
              "CausalConv3d: padded " + padded.str() + " y " + y.str());
  const int64_t t = padded.dim(2) - 2, h = padded.dim(3), w = padded.dim(4);
  const Shape cache_shape{2, h, w, cin_};
  if (cache_.t.empty() || cache_.t.shape != cache_shape || cache_.t.dtype != padded.dtype) {
    FLICK_CHECK(cache_zero_, "CausalConv3d: input size changed mid-stream: " + padded.str());
    cache_ = OwnedTensor(padded.dtype, cache_shape);
  }
  const size_t frame = frame_bytes(padded);
  char* slot[2] = {static_cast<char*>(cache_.t.data), static_cast<char*>(cache_.t.data) + frame};
  if (cache_zero_) {
    std::memset(padded.data, 0, 2 * frame);
  } else {
    copy_bytes(be, padded.dtype, frame_ptr(padded, 0), slot[1 - newest_], frame);
    copy_bytes(be, padded.dtype, frame_ptr(padded, 1), slot[newest_], frame);
  }
  const int64_t y_from =
      conv_frames(be, padded, *conv_, y, 3, reuse_steady_, body_from >= 0 ? 2 + body_from : -1);
  if (t == 1 && !cache_zero_) {
    // The earlier slot takes the new frame; the other one stays.
    newest_ = 1 - newest_;
    copy_bytes(be, padded.dtype, slot[newest_], frame_ptr(padded, 2), frame);
  } else {
    copy_bytes(be, padded.dtype, slot[0], frame_ptr(padded, t), 2 * frame);
    newest_ = 1;
  }
  cache_zero_ = false;
  return y_from;
}

uint64_t CausalConv3d::state_checksum() const {
  if (cache_zero_ || cache_.t.empty()) return 0;
  const size_t frame = cache_.t.nbytes() / 2;
  const char* slot[2] = {static_cast<const char*>(cache_.t.data),
                         static_cast<const char*>(cache_.t.data) + frame};
  return plan_checksum(slot[newest_], frame, plan_checksum(slot[1 - newest_], frame, 1));
}

int64_t CausalConv3d::forward(Backend& be, const Tensor& x, Tensor& y, Scratch& pad,
                              int64_t x_from) {
  FLICK_CHECK(x.ndim() == 5 && x.dim(1) == cin_ && y.ndim() == 5 && y.dim(1) == cout_ &&
                  y.dim(2) == x.dim(2),
              "CausalConv3d: x " + x.str() + " y " + y.str());
  if (kt_ == 1) return conv_frames(be, x, *conv_, y, 1, reuse_steady_, x_from);
  const Tensor p = padded(pad, x.dim(2), x.dim(3), x.dim(4));
  Tensor body = frames(p, 2, x.dim(2));
  if (is_channels_last(x) && x.dtype == act_) {
    copy_bytes(be, x.dtype, body.data, x.data, x.nbytes());
  } else {
    be.copy(x, body);
  }
  return run(be, p, y, x_from);
}

// ---- ChannelRmsNorm ----

Expected<ChannelRmsNorm> ChannelRmsNorm::load(const WeightView& v, std::string_view prefix,
                                              int64_t c, int trailing_ones, const Numerics& num) {
  std::vector<int64_t> dims{c};
  for (int i = 0; i < trailing_ones; ++i) dims.push_back(1);
  ChannelRmsNorm n;
  FLICK_ASSIGN_OR_RETURN(
      n.gamma_, load_f32(v, std::string(prefix) + ".gamma", Shape::from_vector(dims), num));
  n.gamma_.t = n.gamma_.t.reshape({c});
  n.rounding_ = num.norm;
  return n;
}

void ChannelRmsNorm::forward(Backend& be, const Tensor& x, Tensor& y, bool silu) const {
  FLICK_CHECK(is_channels_last(x) && is_channels_last(y) && x.shape == y.shape &&
                  x.dtype == y.dtype && x.dim(1) == gamma_.t.dim(0),
              "ChannelRmsNorm: x " + x.str() + " y " + y.str());
  const int64_t c = x.dim(1);
  // torch: dim ** 0.5 (a double) multiplies an fp32 / bf16 tensor as a float.
  const float scale = static_cast<float>(std::sqrt(static_cast<double>(c)));
  const Shape rows{x.numel() / c, c};  // channels-last: C contiguous
  Tensor yr = Tensor::view(y.data, y.dtype, rows);
  be.normalize_l2(Tensor::view(x.data, x.dtype, rows), gamma_.t, scale, rounding_,
                  silu ? Activation::Silu : Activation::None, yr);
}

// ---- ResidualBlock ----

Expected<ResidualBlock> ResidualBlock::load(const WeightView& v, Backend& be, const Numerics& num) {
  ResidualBlock r;
  FLICK_ASSIGN_OR_RETURN(r.conv1_, CausalConv3d::load(v, "residual.2", be, num));
  FLICK_ASSIGN_OR_RETURN(r.conv2_, CausalConv3d::load(v, "residual.6", be, num));
  const int64_t in = r.conv1_.in_channels(), out = r.conv1_.out_channels();
  if (r.conv2_.in_channels() != out || r.conv2_.out_channels() != out)
    return invalid_input(v.full_name("residual.6.weight") + ": expected " + std::to_string(out) +
                         " -> " + std::to_string(out) + " channels");
  FLICK_ASSIGN_OR_RETURN(r.norm1_, ChannelRmsNorm::load(v, "residual.0", in, 3, num));
  FLICK_ASSIGN_OR_RETURN(r.norm2_, ChannelRmsNorm::load(v, "residual.3", out, 3, num));
  if (in != out) {
    FLICK_ASSIGN_OR_RETURN(CausalConv3d s,
                           CausalConv3d::load(v, "shortcut", be, normalized_only(num)));
    if (s.in_channels() != in || s.out_channels() != out)
      return invalid_input(v.full_name("shortcut.weight") + ": expected " + std::to_string(in) +
                           " -> " + std::to_string(out) + " channels");
    r.shortcut_ = std::make_unique<CausalConv3d>(std::move(s));
  } else if (v.has("shortcut.weight")) {
    return invalid_input(v.full_name("shortcut.weight") +
                         ": unexpected (the block keeps its channel count)");
  }
  return r;
}

void ResidualBlock::reset() {
  conv1_.reset();
  conv2_.reset();
}

void ResidualBlock::reuse_steady_frames(bool on) {
  reuse_steady_ = on;
  conv1_.reuse_steady_frames(on);
  conv2_.reuse_steady_frames(on);
  if (shortcut_) shortcut_->reuse_steady_frames(on);
}

uint64_t ResidualBlock::state_checksum() const {
  return conv2_.state_checksum() * 31 + conv1_.state_checksum();
}

void ResidualBlock::forward(Backend& be, const Tensor& x, Tensor& y, Workspace& ws) {
  const int64_t t = x.dim(2), hh = x.dim(3), ww = x.dim(4);
  // With reuse_steady_, each per-frame op computes frames [0, k) of its
  // output and copies frame k - 1 into the rest, k one past the first frame
  // of its input's constant tail; where that tail starts is passed along
  // (each op knows its output's), so only x is scanned whole.
  const int64_t x_from = reuse_steady_ ? steady_from(x) : t - 1;
  // Returns the first frame of out's known-equal tail.
  auto norm = [&](const ChannelRmsNorm& n, const Tensor& in, int64_t in_from, Tensor& out) {
    const int64_t k = in_from + 1;
    if (k >= t) {
      n.forward(be, in, out, /*silu=*/true);
      return t - 1;
    }
    Tensor head = frames(out, 0, k);
    n.forward(be, frames(in, 0, k), head, /*silu=*/true);
    repeat_last_computed(be, out, k);
    return k - 1;
  };
  // RMS, SiLU straight into conv1's padded input.
  Tensor p1 = conv1_.padded(ws.pad, t, hh, ww);
  Tensor in1 = frames(p1, 2, t);
  const int64_t in1_from = norm(norm1_, x, x_from, in1);
  Tensor h = ws.mid.channels_last(x.dtype, out_channels(), t, hh, ww);
  const int64_t h_from = conv1_.run(be, p1, h, reuse_steady_ ? in1_from : -1);
  Tensor p2 = conv2_.padded(ws.pad, t, hh, ww);
  Tensor in2 = frames(p2, 2, t);
  const int64_t in2_from = norm(norm2_, h, h_from, in2);
  const int64_t y_from = conv2_.run(be, p2, y, reuse_steady_ ? in2_from : -1);  // y = residual
  Tensor s = x;
  int64_t s_from = x_from;
  if (shortcut_) {
    s = ws.mid.channels_last(x.dtype, out_channels(), t, hh, ww);
    s_from = shortcut_->forward(be, x, s, ws.pad, reuse_steady_ ? x_from : -1);
  }
  const int64_t k = std::max(y_from, s_from) + 1;
  if (k >= t) return add_channels_last(be, y, s, y);
  Tensor head = frames(y, 0, k);
  add_channels_last(be, head, frames(s, 0, k), head);
  repeat_last_computed(be, y, k);
}

// ---- AttentionBlock ----

Expected<AttentionBlock> AttentionBlock::load(const WeightView& v, Backend& be,
                                              const Numerics& num) {
  AttentionBlock a;
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* qkv, v.require("to_qkv.weight", 4));
  const int64_t c = qkv->shape[1];
  a.c_ = c;
  if (qkv->shape[0] != 3 * c || qkv->shape[2] != 1 || qkv->shape[3] != 1)
    return invalid_input(v.full_name("to_qkv.weight") + ": expected [3C, C, 1, 1], file has " +
                         qkv->shape_str());
  FLICK_ASSIGN_OR_RETURN(a.norm_, ChannelRmsNorm::load(v, "norm", c, 2, num));
  FLICK_ASSIGN_OR_RETURN(a.qkv_, CausalConv3d::load_2d(v, "to_qkv", be, num));
  FLICK_TRY(v.get("proj.weight", kFloat, Shape{c, c, 1, 1}).status());  // 1x1, C -> C
  FLICK_ASSIGN_OR_RETURN(a.proj_, CausalConv3d::load_2d(v, "proj", be, num));
  return a;
}

void AttentionBlock::forward(Backend& be, const Tensor& x, Tensor& y, Workspace& ws) {
  const int64_t c = c_, t = x.dim(2), hh = x.dim(3), ww = x.dim(4), l = hh * ww;
  Tensor h = ws.mid.channels_last(x.dtype, c, t, hh, ww);
  norm_.forward(be, x, h, /*silu=*/false);
  Tensor qkv = ws.aux.channels_last(x.dtype, 3 * c, t, hh, ww);
  qkv_.forward(be, h, qkv, ws.pad);
  // Per frame: q / k / v = channels [0:C], [C:2C], [2C:3C] of [L, 3C];
  // S = q k^T [L, L] (fp32), P = softmax numerator, o = P v / sums.
  const DType dt = x.dtype;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c)));
  Tensor o = ws.up.get(dt, Shape{t, l, c});
  // The scores and probabilities (70 MB at 44x80) borrow `pad` and `mid`,
  // idle between the qkv and proj convolutions and larger at full
  // resolution anyway.
  Tensor s = ws.pad.get(DType::F32, Shape{1, l, l});
  Tensor p = dt == DType::F32 ? s : ws.mid.get(dt, Shape{1, l, l});
  Tensor acc = ws.acc.get(DType::F32, Shape{1, l, c});
  Tensor inv_sums = ws.sums.get(DType::F32, Shape{l});
  for (int64_t f = 0; f < t; ++f) {
    const Tensor frame = Tensor::view(frame_ptr(qkv, f), dt, Shape{1, l, 3 * c});
    const Tensor q = frame.slice(2, 0, c), k = frame.slice(2, c, c), v = frame.slice(2, 2 * c, c);
    be.matmul(q, k.permute({0, 2, 1}), s);
    be.softmax_parts(s, scale, p, inv_sums);  // p = exp(s * scale - max), 1 / sum
    be.matmul(p, v, acc);
    Tensor of = o.slice(0, f, 1);  // [1, L, C]
    be.mul(acc, inv_sums.reshape({1, l, 1}), of);
  }
  // [T, H, W, C] read as a channels-last [1, C, T, H, W].
  const Tensor o5 = channels_last_view(o.data, x.dtype, c, t, hh, ww);
  proj_.forward(be, o5, y, ws.pad);
  add_channels_last(be, y, x, y);
}

// ---- Upsample ----

// Output row 2i + py reads upsampled rows 2i + py - 1 .. 2i + py + 1, i.e.
// source rows i - 1 + py (offset a = 0 of the 2x2 kernel, padding 1) and
// i + py (a = 1); the 3 taps k land as py = 0: a = 0 <- k {0}, a = 1 <-
// k {1, 2}; py = 1: a = 0 <- k {0, 1}, a = 1 <- k {2}. Columns alike.
OwnedTensor Upsample::phase_weights(const Tensor& w) {
  static constexpr int kFirst[2][2] = {{0, 1}, {0, 2}};  // [parity][a]: taps first..last
  static constexpr int kLast[2][2] = {{0, 2}, {1, 2}};
  const int64_t o = w.dim(0), in = w.dim(1);
  OwnedTensor out(DType::F32, Shape{4 * o, in, 1, 2, 2});
  const float* src = w.ptr<float>();
  float* dst = out.t.ptr<float>();
  for (int py = 0; py < 2; ++py) {
    for (int px = 0; px < 2; ++px) {
      for (int64_t r = 0; r < o * in; ++r) {  // (output, input channel)
        const float* k = src + r * 9;
        float* d = dst + ((2 * py + px) * o * in + r) * 4;
        for (int a = 0; a < 2; ++a) {
          for (int b = 0; b < 2; ++b) {
            float sum = 0.f;
            for (int kh = kFirst[py][a]; kh <= kLast[py][a]; ++kh)
              for (int kw = kFirst[px][b]; kw <= kLast[px][b]; ++kw) sum += k[kh * 3 + kw];
            d[a * 2 + b] = sum;
          }
        }
      }
    }
  }
  return out;
}

Expected<Upsample> Upsample::load(const WeightView& v, Backend& be, const Numerics& num) {
  Upsample u;
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* info, v.require("resample.1.weight", 4));
  const std::vector<int64_t>& s = info->shape;
  if (s[2] != 3 || s[3] != 3)
    return invalid_input(v.full_name("resample.1.weight") + ": expected a 3x3 kernel, file has " +
                         info->shape_str());
  u.out_ = s[0];
  u.c_ = s[1];
  ConvDesc d;
  d.spatial_dims = 3;
  d.padding = {0, 1, 1};
  d.precision = normalized_only(num).conv;
  // The four phases' 2x2 kernels of phase_weights, as one conv.
  const Shape ws{4 * s[0], s[1], 1, 2, 2};
  FLICK_ASSIGN_OR_RETURN(
      u.phases_,
      pack_conv_cached(
          v, "resample.1.phases", {"resample.1.weight", "resample.1.bias"}, be, conv_shapes(d, ws),
          num, [&](LoadF32 load) -> Expected<std::unique_ptr<PackedConv>> {
            FLICK_ASSIGN_OR_RETURN(OwnedTensor w,
                                   load(v, "resample.1.weight", Shape{s[0], s[1], 3, 3}, num));
            FLICK_ASSIGN_OR_RETURN(OwnedTensor b, load(v, "resample.1.bias", Shape{s[0]}, num));
            OwnedTensor bias(DType::F32, Shape{4 * s[0]});
            for (int p = 0; p < 4; ++p)
              std::memcpy(bias.t.ptr<float>() + p * s[0], b.t.data,
                          static_cast<size_t>(s[0]) * sizeof(float));
            const OwnedTensor pw = phase_weights(w.t);
            FLICK_CHECK(pw.t.shape == ws, "Upsample: phase weights " + pw.t.str());
            ConvDesc full = d;
            full.w = pw.t;
            full.bias = bias.t;
            return be.pack_conv(full);
          }));
  if (v.has("time_conv.weight")) {
    FLICK_ASSIGN_OR_RETURN(CausalConv3d tc,
                           CausalConv3d::load(v, "time_conv", be, normalized_only(num)));
    if (tc.in_channels() != u.c_ || tc.out_channels() != 2 * u.c_)
      return invalid_input(v.full_name("time_conv.weight") + ": expected " + std::to_string(u.c_) +
                           " -> " + std::to_string(2 * u.c_) + " channels, 3 x 1 x 1");
    u.time_conv_ = std::make_unique<CausalConv3d>(std::move(tc));
  }
  return u;
}

void Upsample::reset() {
  first_ = true;
  if (time_conv_) time_conv_->reset();
}

void Upsample::forward(Backend& be, const Tensor& x, Tensor& y, Workspace& ws) {
  FLICK_CHECK(is_channels_last(x), "Upsample: x " + x.str());
  const int64_t c = c_, t = x.dim(2), hh = x.dim(3), ww = x.dim(4);
  // The frames to upsample as [T, S, H, W, C]: S = 2 reads frame 2t + s from
  // channels [s*C, (s+1)*C) of the time conv's output.
  Tensor frames = Tensor::view(x.data, x.dtype, Shape{t, 1, hh, ww, c});
  if (time_conv_) {
    if (first_) {
      first_ = false;  // 'Rep': the first latent keeps its single frame
    } else {
      Tensor tc = ws.aux.channels_last(x.dtype, 2 * c, t, hh, ww);
      time_conv_->forward(be, x, tc, ws.pad);
      frames = Tensor::view(tc.data, x.dtype, Shape{t, 2, hh, ww, c});
      frames.strides = {hh * ww * 2 * c, c, ww * 2 * c, 2 * c, 1, 0};  // of [T, H, W, 2, C]
    }
  }
  const int64_t slots = frames.dim(1), tf = frames.dim(0) * slots;
  FLICK_CHECK(is_channels_last(y) && y.dim(2) == tf, "Upsample: y " + y.str());
  // [1, 4 out, 1, H + 1, W + 1]: the four phases of one output frame.
  Tensor phases = ws.up.channels_last(x.dtype, 4 * out_, 1, hh + 1, ww + 1);
  const Tensor phases4 = Tensor::view(phases.data, x.dtype, Shape{hh + 1, ww + 1, 4, out_});
  for (int64_t f = 0; f < tf; ++f) {
    // [H, W, C] view of the source frame.
    Tensor src = Tensor::view(frames.slice(0, f / slots, 1).slice(1, f % slots, 1).data, x.dtype,
                              Shape{hh, ww, c});
    src.strides = {frames.stride(2), frames.stride(3), 1, 0, 0, 0};
    Tensor in = channels_last_view(src.data, x.dtype, c, 1, hh, ww);
    if (!src.is_contiguous()) {  // a time conv slot: every other C channels
      in = ws.pad.channels_last(x.dtype, c, 1, hh, ww);
      Tensor dense = Tensor::view(in.data, x.dtype, Shape{hh, ww, c});
      be.copy(src, dense);
    }
    be.conv(in, *phases_, phases, Activation::None);
    Tensor dst = Tensor::view(frame_ptr(y, f), y.dtype, Shape{2 * hh, 2 * ww, out_});
    interleave_upsample_phases(be, phases4, dst);
  }
}

// ---- Downsample ----

Expected<Downsample> Downsample::load(const WeightView& v, Backend& be, const Numerics& num) {
  Downsample d;
  FLICK_ASSIGN_OR_RETURN(const TensorInfo* info, v.require("resample.1.weight", 4));
  const int64_t c = info->shape[1];
  d.c_ = c;
  ConvDesc cd;
  cd.spatial_dims = 3;
  cd.stride = {1, 2, 2};
  // Both convs read the raw residual stream: INT8 runs them as BF16.
  cd.precision = normalized_only(num).conv;
  FLICK_ASSIGN_OR_RETURN(
      d.conv_, load_conv(v, "resample.1", Shape{c, c, 3, 3}, Shape{c, c, 1, 3, 3},  // per frame
                         cd, be, num));
  if (v.has("time_conv.weight")) {
    ConvDesc td;
    td.spatial_dims = 3;
    td.stride = {2, 1, 1};
    td.precision = cd.precision;
    const Shape ts{c, c, 3, 1, 1};
    FLICK_ASSIGN_OR_RETURN(d.time_conv_, load_conv(v, "time_conv", ts, ts, td, be, num));
  }
  return d;
}

uint64_t Downsample::state_checksum() const {
  return last_.t.empty() ? 0 : plan_checksum(last_.t.data, last_.t.nbytes(), 2);
}

void Downsample::forward(Backend& be, const Tensor& x, Tensor& y, Workspace& ws) {
  const int64_t c = c_, t = x.dim(2), h = x.dim(3), w = x.dim(4);
  FLICK_CHECK(x.dim(1) == c && h % 2 == 0 && w % 2 == 0 && is_channels_last(y),
              "Downsample: x " + x.str() + " y " + y.str());
  // ZeroPad2d((0, 1, 0, 1)): [1, C, T, H + 1, W + 1], zeros right and bottom.
  FLICK_CHECK(is_channels_last(x), "Downsample: x " + x.str());
  // Frame by frame: with reuse_steady_, only up to the first frame of x's
  // constant tail, that output copied into the rest.
  const int64_t n = reuse_steady_ ? steady_from(x) + 1 : t;
  Tensor padded = ws.pad.channels_last(x.dtype, c, std::min(n, t), h + 1, w + 1);
  pad_bottom_right(frames(x, 0, padded.dim(2)), padded);
  auto spatial = [&](Tensor& out) {
    if (n >= t) {
      be.conv(padded, *conv_, out, Activation::None);
      return;
    }
    Tensor head = frames(out, 0, n);
    be.conv(padded, *conv_, head, Activation::None);
    repeat_last_computed(be, out, n);
  };
  if (!time_conv_) {
    spatial(y);
    return;
  }
  const size_t frame = static_cast<size_t>(c * (h / 2) * (w / 2)) * dtype_size(x.dtype);
  if (first_) {
    spatial(y);
    last_ = OwnedTensor(x.dtype, Shape{1, h / 2, w / 2, c});
    copy_bytes(be, x.dtype, last_.t.data, frame_ptr(y, t - 1), frame);
    first_ = false;
    return;
  }
  // [1, C, 1 + T, H/2, W/2] = [previous last frame, conv(x)]
  Tensor joined = ws.aux.channels_last(x.dtype, c, 1 + t, h / 2, w / 2);
  Tensor body = frames(joined, 1, t);
  spatial(body);
  copy_bytes(be, x.dtype, joined.data, last_.t.data, frame);
  be.conv(joined, *time_conv_, y, Activation::None);
  copy_bytes(be, x.dtype, last_.t.data, frame_ptr(joined, t), frame);
}

Expected<ResampleLayers> scan_resample_layers(const WeightView& list, std::string_view kind) {
  ResampleLayers r;
  const std::vector<std::string> children = list.children();
  r.count = static_cast<int64_t>(children.size());
  for (int64_t i = 0; i < r.count; ++i) {
    const std::string idx = std::to_string(i);
    if (std::find(children.begin(), children.end(), idx) == children.end())
      return invalid_input(list.full_name(idx) + ": missing (" + std::string(kind) +
                           " layers must be numbered 0.." + std::to_string(r.count - 1) + ")");
    const WeightView l = list.sub(idx);
    if (l.has("resample.1.weight")) {
      ++r.spatial;
      if (l.has("time_conv.weight")) ++r.temporal;
    } else if (!l.has("residual.2.weight")) {
      return invalid_input(l.prefix() + "*: neither a residual block nor a" +
                           (kind.front() == 'u' ? "n " : " ") + std::string(kind) + "r");
    }
  }
  return r;
}

}  // namespace flick::wan_vae
