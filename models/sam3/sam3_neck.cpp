#include "models/sam3/sam3_neck.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "runtime/dtype.h"

namespace flick {
namespace {

const DTypeSet kFloat{DType::F32, DType::BF16, DType::F16};

}  // namespace

void sam3_sine_position(int64_t d, int64_t n, float* out) {
  // position_encoding.py PositionEmbeddingSine.forward, in the reference's
  // fp32 arithmetic: embed = i / (n + 1e-6) * 2 pi (i = 1..n), dim_t =
  // 10000 ** (2 * (j // 2) / feats), sin on even j, cos on odd j; channels
  // [pos_y; pos_x].
  const int64_t feats = d / 2;
  const float scale = static_cast<float>(2.0 * M_PI);
  std::vector<float> embed(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    embed[static_cast<size_t>(i)] =
        static_cast<float>(i + 1) / (static_cast<float>(n) + 1e-6f) * scale;
  std::vector<float> dim_t(static_cast<size_t>(feats));
  for (int64_t j = 0; j < feats; ++j) {
    const float e = static_cast<float>(2 * (j / 2)) / static_cast<float>(feats);
    dim_t[static_cast<size_t>(j)] = static_cast<float>(std::pow(10000.0, static_cast<double>(e)));
  }
  // value(a, j) for position index a along an axis.
  auto value = [&](int64_t a, int64_t j) {
    const float v = embed[static_cast<size_t>(a)] / dim_t[static_cast<size_t>(j)];
    return (j % 2 == 0) ? std::sin(v) : std::cos(v);
  };
  for (int64_t j = 0; j < feats; ++j)
    for (int64_t y = 0; y < n; ++y)
      for (int64_t x = 0; x < n; ++x) {
        out[(j * n + y) * n + x] = value(y, j);            // pos_y: varies along rows
        out[((feats + j) * n + y) * n + x] = value(x, j);  // pos_x: along columns
      }
}

Expected<Sam3Neck> Sam3Neck::load(const WeightView& vision, Backend& backend, Precision precision,
                                  int64_t grid) {
  Sam3Neck m;
  const WeightView convs = vision.sub("convs");
  const TensorInfo* c1 = convs.info("2.conv_1x1.weight");
  if (!c1) return not_found(convs.full_name("2.conv_1x1.weight") + ": missing");
  if (c1->shape.size() != 4)
    return invalid_input(convs.full_name("2.conv_1x1.weight") +
                         ": expected [d, C, 1, 1], file has " + c1->shape_str());
  m.cfg_.d_model = c1->shape[0];
  m.cfg_.in_channels = c1->shape[1];
  m.cfg_.grid = grid;
  if (m.cfg_.in_channels % 4 != 0 || m.cfg_.d_model % 4 != 0 || grid < 1)
    return invalid_input(convs.full_name("2.conv_1x1.weight") + ": channels " + c1->shape_str() +
                         " (C and d must be multiples of 4), grid " + std::to_string(grid));
  if (precision != Precision::F32 && precision != Precision::BF16 && precision != Precision::INT8)
    return invalid_input(std::string("SAM3 neck: precision ") + precision_name(precision) +
                         " is not supported (F32, BF16 or INT8)");
  m.backend_ = &backend;
  m.precision_ = precision;
  m.act_ = precision == Precision::F32 ? DType::F32 : DType::BF16;
  FLICK_TRY(m.load_weights(vision));
  m.plan();
  return m;
}

Status Sam3Neck::load_weights(const WeightView& vision) {
  const Sam3NeckConfig& c = cfg_;
  const int64_t ch = c.in_channels, d = c.d_model;
  const WeightView convs = vision.sub("convs");

  // nn.ConvTranspose2d(in, out, 2, stride 2): weight [in, out, 2, 2] -> a
  // 1x1 convolution with output channels (dy, dx, o), bias repeated per tap;
  // its channels-last output is [h, w, dy, dx, o], which scatters to the
  // channels-last [2h, 2w, o] map in contiguous runs of `out` channels.
  // With `then`, the level's following 1x1 conv (W_c [d, out], b_c) is
  // folded in, exactly in real arithmetic since nothing lies between them:
  // per tap t, W'_t = W_c W_t and b' = W_c b_t + b_c, summed in double and
  // rounded once (to the precision's weight type). The convT then writes d
  // channels instead of `out`, and the 1x1 conv over the upsampled map
  // (10.9 GFLOP at level 0, 5.4 at level 1, 1008^2) is gone; level 1's
  // convT shrinks from C -> 4 C/2 to C -> 4 d. In BF16 / INT8 this also
  // drops one rounding of the intermediate map: on the goldens the levels
  // move no further from fp32 (tests/sam3: Neck/cpu_bf16, NeckInt8; bf16
  // level 1 mean error 7.5e-4 -> 6.2e-4), and the bf16 image side at 1008^2
  // takes 0.64 -> 0.57 s on a Zen 4.
  struct Then {
    Tensor w, b;  // [d, out, 1, 1], [d]
  };
  auto conv_t = [&](const std::string& p, int64_t in, int64_t out,
                    const Then* then) -> Expected<ConvT> {
    FLICK_ASSIGN_OR_RETURN(Tensor w, convs.get(p + ".weight", kFloat, {in, out, 2, 2}));
    FLICK_ASSIGN_OR_RETURN(Tensor b, convs.get(p + ".bias", kFloat, {out}));
    std::vector<float> wf(static_cast<size_t>(w.numel())), bf(static_cast<size_t>(out));
    convert(w.dtype, w.data, DType::F32, wf.data(), w.numel());
    convert(b.dtype, b.data, DType::F32, bf.data(), out);
    const int64_t co = then ? then->w.dim(0) : out;  // output channels per tap
    std::vector<float> cw, cb;
    if (then) {
      cw.resize(static_cast<size_t>(then->w.numel()));
      cb.resize(static_cast<size_t>(co));
      convert(then->w.dtype, then->w.data, DType::F32, cw.data(), then->w.numel());
      convert(then->b.dtype, then->b.data, DType::F32, cb.data(), co);
    }
    owned_.emplace_back(DType::F32, Shape{4 * co, in, 1, 1});
    owned_.emplace_back(DType::F32, Shape{4 * co});
    const Tensor lw = owned_[owned_.size() - 2].t, lb = owned_.back().t;
    float* pw = lw.ptr<float>();
    float* pb = lb.ptr<float>();
    std::vector<float> tap(static_cast<size_t>(out * in));  // W_t [out, in], rows contiguous
    std::vector<double> acc(static_cast<size_t>(in));
    for (int64_t t = 0; t < 4; ++t) {  // t = dy * 2 + dx
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i)
          tap[static_cast<size_t>(o * in + i)] = wf[static_cast<size_t>((i * out + o) * 4 + t)];
      for (int64_t oc = 0; oc < co; ++oc) {
        float* dst = pw + (t * co + oc) * in;
        if (!then) {
          std::copy_n(tap.data() + oc * in, in, dst);
          pb[t * co + oc] = bf[static_cast<size_t>(oc)];
          continue;
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        double bias = cb[static_cast<size_t>(oc)];
        for (int64_t o = 0; o < out; ++o) {
          const double wc = cw[static_cast<size_t>(oc * out + o)];  // W_c[oc, o]
          bias += wc * bf[static_cast<size_t>(o)];
          const float* row = tap.data() + o * in;
          for (int64_t i = 0; i < in; ++i) acc[static_cast<size_t>(i)] += wc * row[i];
        }
        for (int64_t i = 0; i < in; ++i) dst[i] = static_cast<float>(acc[static_cast<size_t>(i)]);
        pb[t * co + oc] = static_cast<float>(bias);
      }
    }
    ConvT r;
    r.in = in;
    r.out = co;
    ConvDesc desc;
    desc.w = lw;
    desc.bias = lb;
    desc.precision = precision_;
    r.conv = backend_->pack_conv(desc);
    return r;
  };
  auto conv = [&](const std::string& p, int64_t out, int64_t in,
                  int64_t k) -> Expected<std::unique_ptr<PackedConv>> {
    FLICK_ASSIGN_OR_RETURN(Tensor w, convs.get(p + ".weight", kFloat, {out, in, k, k}));
    FLICK_ASSIGN_OR_RETURN(Tensor b, convs.get(p + ".bias", kFloat, {out}));
    ConvDesc desc;
    desc.w = w;
    desc.bias = b;
    desc.padding = {k / 2, k / 2, 0};
    desc.precision = precision_;
    return backend_->pack_conv(desc);
  };

  const int64_t level_in[Sam3NeckConfig::kLevels] = {ch / 4, ch / 2, ch};
  Then then[2];
  for (int l = 0; l < 2; ++l) {
    const std::string p = std::to_string(l) + ".conv_1x1";
    FLICK_ASSIGN_OR_RETURN(then[l].w, convs.get(p + ".weight", kFloat, {d, level_in[l], 1, 1}));
    FLICK_ASSIGN_OR_RETURN(then[l].b, convs.get(p + ".bias", kFloat, {d}));
  }
  FLICK_ASSIGN_OR_RETURN(up4_0_, conv_t("0.dconv_2x2_0", ch, ch / 2, nullptr));
  FLICK_ASSIGN_OR_RETURN(up4_1_, conv_t("0.dconv_2x2_1", ch / 2, ch / 4, &then[0]));
  FLICK_ASSIGN_OR_RETURN(up2_, conv_t("1.dconv_2x2", ch, ch / 2, &then[1]));
  FLICK_ASSIGN_OR_RETURN(conv1x1_level2_, conv("2.conv_1x1", d, level_in[2], 1));
  for (int l = 0; l < Sam3NeckConfig::kLevels; ++l) {
    FLICK_ASSIGN_OR_RETURN(conv3x3_[static_cast<size_t>(l)],
                           conv(std::to_string(l) + ".conv_3x3", d, d, 3));
  }
  // The 0.5x level (max-pool, 1x1, 3x3) is computed and discarded by the
  // reference (SAM3VLBackbone scalp=1): its tensors are known, not run.
  for (const std::string& n : convs.sub("3").names()) convs.sub("3").mark_used(n);

  for (int l = 0; l < Sam3NeckConfig::kLevels; ++l) {
    const int64_t n = c.side(l);
    OwnedTensor f32(DType::F32, Shape{1, d, n, n});
    sam3_sine_position(d, n, f32.t.ptr<float>());
    if (act_ == DType::F32) {
      pos_.push_back(std::move(f32));
    } else {
      OwnedTensor& r = pos_.emplace_back(act_, Shape{1, d, n, n});
      convert(DType::F32, f32.t.data, act_, r.t.data, f32.t.numel());
    }
  }
  return ok_status();
}

void Sam3Neck::plan() {
  const Sam3NeckConfig& c = cfg_;
  const int64_t ch = c.in_channels, g = c.grid, d = c.d_model;
  // convT outputs before the scatter: g^2 x 4 (C/2) for level 0's first,
  // 4 d channels for the two with the 1x1 conv folded in (load_weights).
  const int64_t cols =
      std::max({g * g * 4 * up4_0_.out, 4 * g * g * 4 * up4_1_.out, g * g * 4 * up2_.out});
  cols_ = arena_.request("neck.cols", act_, {cols});
  up_a_ = arena_.request("neck.up_a", act_, {ch / 2 * 4 * g * g});  // channels-last
  mid_ = arena_.request("neck.mid", act_, {d * 16 * g * g});
  // Flat: levels 0 and 1 are viewed in the mask head's layout
  // (set_levels_channels_last), level 2 as [1, d, g, g].
  for (int l = 0; l < Sam3NeckConfig::kLevels; ++l)
    out_[static_cast<size_t>(l)] =
        arena_.request("neck.level" + std::to_string(l), act_, {d * c.side(l) * c.side(l)});
  arena_.finalize();
}

namespace {
// A channels-last [1, c, h, h] view over the start of a flat buffer: the
// layout oneDNN's convolutions read and write without reorders.
Tensor channels_last(const Tensor& flat, int64_t c, int64_t h) {
  return flat.slice(0, 0, c * h * h).reshape({1, h, h, c}).permute({0, 3, 1, 2});
}
}  // namespace

void Sam3Neck::conv_transpose(const Tensor& x, const ConvT& c, Tensor& y, Activation act) {
  Backend& be = *backend_;
  const int64_t h = x.dim(2);
  Tensor cols = channels_last(arena_.get(cols_), 4 * c.out, h);  // [1, (dy, dx, o), h, h]
  be.conv(x, *c.conv, cols, act);
  // y[o, 2 y0 + dy, 2 x0 + dx] = cols[y0, x0, dy, dx, o]; y is channels-last:
  // [2h, 2h, o] = [h, 2, h, 2, o] <- cols [h, h, 2, 2, o] permuted.
  Tensor src = cols.permute({0, 2, 3, 1}).reshape({h, h, 2, 2, c.out}).permute({0, 2, 1, 3, 4});
  Tensor dst = y.permute({0, 2, 3, 1}).reshape({h, 2, h, 2, c.out});
  be.copy(src, dst);
}

Expected<std::array<Tensor, Sam3NeckConfig::kLevels>> Sam3Neck::forward(const Tensor& x,
                                                                        const Tap& tap) {
  const Sam3NeckConfig& c = cfg_;
  const Shape want{1, c.in_channels, c.grid, c.grid};
  if (x.shape != want || (x.dtype != DType::F32 && x.dtype != DType::BF16))
    return invalid_input("SAM3 neck: expected F32 or BF16 features " + want.str() + ", got " +
                         x.str());
  Backend& be = *backend_;
  const int64_t d = c.d_model;
  std::array<Tensor, Sam3NeckConfig::kLevels> out;
  for (int l = 0; l < Sam3NeckConfig::kLevels; ++l) {
    const int64_t n = c.side(l);
    // Each level's 1x1 conv output; levels 0 and 1 have it folded into
    // their last convT (load_weights).
    Tensor mid = channels_last(arena_.get(mid_), d, n);  // [1, d, n, n]
    if (l == 0) {                                        // convT, GELU, convT (+ 1x1)
      Tensor a =
          channels_last(arena_.get(up_a_), c.in_channels / 2, 2 * c.grid);  // [1, C/2, 2g, 2g]
      conv_transpose(x, up4_0_, a, Activation::GeluErf);
      conv_transpose(a, up4_1_, mid, Activation::None);
    } else if (l == 1) {  // convT (+ 1x1)
      conv_transpose(x, up2_, mid, Activation::None);
    } else {
      be.conv(x, *conv1x1_level2_, mid, Activation::None);
    }
    const Tensor flat = arena_.get(out_[static_cast<size_t>(l)]);
    Tensor y =
        l < 2 && levels_channels_last_ ? channels_last(flat, d, n) : flat.reshape({1, d, n, n});
    be.conv(mid, *conv3x3_[static_cast<size_t>(l)], y, Activation::None);
    if (tap) tap("level" + std::to_string(l), y);
    out[static_cast<size_t>(l)] = y;
  }
  return out;
}

}  // namespace flick
