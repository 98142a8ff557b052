#include "models/sam3/repvit_trunk.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "runtime/dtype.h"

namespace flick {
namespace {

const DTypeSet kFloat{DType::F32, DType::BF16, DType::F16};
constexpr double kBnEps = 1e-5;  // torch.nn.BatchNorm2d default, used by every BN here

std::vector<double> doubles(const Tensor& t) {
  std::vector<float> f(static_cast<size_t>(t.numel()));
  convert(t.dtype, t.data, DType::F32, f.data(), t.numel());
  return {f.begin(), f.end()};
}

// A conv's weight and bias in double while they are being folded.
struct Fold {
  Shape shape;            // [O, I/groups, kh, kw]
  std::vector<double> w;  // row-major
  std::vector<double> b;  // [O]
};

Expected<Fold> read_conv(const WeightView& v, const std::string& name, Shape shape, bool bias) {
  Fold f;
  f.shape = shape;
  FLICK_ASSIGN_OR_RETURN(Tensor w, v.get(name + "weight", kFloat, shape));
  f.w = doubles(w);
  if (bias) {
    FLICK_ASSIGN_OR_RETURN(Tensor b, v.get(name + "bias", kFloat, {shape[0]}));
    f.b = doubles(b);
  } else {
    f.b.assign(static_cast<size_t>(shape[0]), 0.0);
  }
  return f;
}

// f <- BN(f) for a BatchNorm2d at `bn` (eval statistics):
// w' = w * g / sqrt(var + eps), b' = beta + (b - mean) * g / sqrt(var + eps).
Status fold_bn(const WeightView& v, const std::string& bn, Fold& f) {
  const int64_t o = f.shape[0];
  FLICK_ASSIGN_OR_RETURN(Tensor g, v.get(bn + "weight", kFloat, {o}));
  FLICK_ASSIGN_OR_RETURN(Tensor beta, v.get(bn + "bias", kFloat, {o}));
  FLICK_ASSIGN_OR_RETURN(Tensor mean, v.get(bn + "running_mean", kFloat, {o}));
  FLICK_ASSIGN_OR_RETURN(Tensor var, v.get(bn + "running_var", kFloat, {o}));
  v.mark_used(bn + "num_batches_tracked");
  const std::vector<double> gd = doubles(g), bd = doubles(beta), md = doubles(mean),
                            vd = doubles(var);
  const size_t per = f.w.size() / static_cast<size_t>(o);
  for (size_t c = 0; c < static_cast<size_t>(o); ++c) {
    const double s = gd[c] / std::sqrt(vd[c] + kBnEps);
    for (size_t i = 0; i < per; ++i) f.w[c * per + i] *= s;
    f.b[c] = bd[c] + (f.b[c] - md[c]) * s;
  }
  return ok_status();
}

// Conv2d_BN (repvit.py): conv without bias ("c.") + BN ("bn.").
Expected<Fold> conv_bn(const WeightView& v, const std::string& p, Shape shape) {
  FLICK_ASSIGN_OR_RETURN(Fold f, read_conv(v, p + "c.", shape, false));
  FLICK_TRY(fold_bn(v, p + "bn.", f));
  return f;
}

}  // namespace

Expected<RepVitTrunk> RepVitTrunk::load(const WeightView& model, Backend& backend,
                                        Precision precision, int64_t image_size,
                                        int64_t embed_size) {
  RepVitTrunk m;
  FLICK_ASSIGN_OR_RETURN(m.cfg_, RepVitConfig::detect(model));
  if (embed_size < 1)
    return invalid_input("RepViT trunk: output size " + std::to_string(embed_size) + " < 1");
  m.cfg_.embed_size = embed_size;
  if (precision != Precision::F32 && precision != Precision::BF16)
    return invalid_input(std::string("RepViT trunk: precision ") + precision_name(precision) +
                         " is not supported (F32 or BF16)");
  if (image_size < 32)
    return invalid_input("RepViT trunk: image size " + std::to_string(image_size) +
                         " is below the trunk's stride of 32");
  m.backend_ = &backend;
  m.precision_ = precision;
  m.act_ = precision == Precision::F32 ? DType::F32 : DType::BF16;
  m.image_size_ = image_size;
  FLICK_TRY(m.load_weights(model));
  m.plan();
  return m;
}

Status RepVitTrunk::load_weights(const WeightView& model) {
  const RepVitConfig& c = cfg_;
  // Folded weights are packed from owned F32 copies (the packer rounds them
  // to bf16 for Precision::BF16).
  auto pack = [&](const Fold& f, int64_t stride, int64_t pad,
                  int64_t groups) -> std::unique_ptr<PackedConv> {
    OwnedTensor& w = owned_.emplace_back(DType::F32, f.shape);
    OwnedTensor& b = owned_.emplace_back(DType::F32, Shape{f.shape[0]});
    for (size_t i = 0; i < f.w.size(); ++i) w.t.ptr<float>()[i] = static_cast<float>(f.w[i]);
    for (size_t i = 0; i < f.b.size(); ++i) b.t.ptr<float>()[i] = static_cast<float>(f.b[i]);
    ConvDesc d;
    d.w = w.t;
    d.bias = b.t;
    d.stride = {stride, stride, 1};
    d.padding = {pad, pad, 0};
    d.groups = groups;
    d.precision = precision_;
    return backend_->pack_conv(d);
  };
  // A 1x1 conv on a [1, c, 1, 1] map as a linear layer (the SE convs have biases).
  auto pack_1x1_linear = [&](const WeightView& v, const std::string& p, int64_t o,
                             int64_t i) -> Expected<std::unique_ptr<PackedLinear>> {
    FLICK_ASSIGN_OR_RETURN(Tensor w, v.get(p + "weight", kFloat, {o, i, 1, 1}));
    FLICK_ASSIGN_OR_RETURN(Tensor b, v.get(p + "bias", kFloat, {o}));
    return backend_->pack_linear({w.reshape({o, i}), Tensor{}, b, precision_});
  };
  auto out_side = [](int64_t h, int64_t k, int64_t s, int64_t p) {
    return (h + 2 * p - k) / s + 1;
  };

  const WeightView f = model.sub("backbone.model.features");
  const int64_t c0 = c.stem;
  FLICK_ASSIGN_OR_RETURN(Fold s1, conv_bn(f, "0.0.", {c0 / 2, 3, 3, 3}));
  stem1_ = pack(s1, 2, 1, 1);
  FLICK_ASSIGN_OR_RETURN(Fold s2, conv_bn(f, "0.2.", {c0, c0 / 2, 3, 3}));
  stem2_ = pack(s2, 2, 1, 1);
  stem_h1_ = out_side(image_size_, 3, 2, 1);
  stem_h2_ = out_side(stem_h1_, 3, 2, 1);

  int64_t h = stem_h2_;
  for (size_t i = 0; i < c.blocks.size(); ++i) {
    const RepVitBlockConfig& bc = c.blocks[i];
    const WeightView v = f.sub(std::to_string(i + 1));
    Block& b = blocks_.emplace_back();
    b.cfg = bc;
    b.h_in = h;
    if (bc.stride == 1) {
      // RepVGGDW.fuse(): BN(conv_bn(x) + conv1(x) + x) as one dw3x3 + bias.
      FLICK_ASSIGN_OR_RETURN(Fold t, conv_bn(v, "token_mixer.0.conv.", {bc.in, 1, 3, 3}));
      FLICK_ASSIGN_OR_RETURN(Fold one,
                             read_conv(v, "token_mixer.0.conv1.", {bc.in, 1, 1, 1}, true));
      for (int64_t ch = 0; ch < bc.in; ++ch) {
        t.w[static_cast<size_t>(ch * 9 + 4)] += one.w[static_cast<size_t>(ch)] + 1.0;  // centre tap
        t.b[static_cast<size_t>(ch)] += one.b[static_cast<size_t>(ch)];
      }
      FLICK_TRY(fold_bn(v, "token_mixer.0.bn.", t));
      b.token = pack(t, 1, 1, bc.in);
      b.h_out = h;
    } else {
      FLICK_ASSIGN_OR_RETURN(Fold t, conv_bn(v, "token_mixer.0.", {bc.in, 1, 3, 3}));
      b.token = pack(t, 2, 1, bc.in);
      FLICK_ASSIGN_OR_RETURN(Fold pw, conv_bn(v, "token_mixer.2.", {bc.out, bc.in, 1, 1}));
      b.down = pack(pw, 1, 0, 1);
      b.h_out = out_side(h, 3, 2, 1);
    }
    if (bc.se) {
      b.se = std::make_unique<Se>();
      FLICK_ASSIGN_OR_RETURN(b.se->fc1, pack_1x1_linear(v, "token_mixer.1.fc1.", bc.se, bc.in));
      FLICK_ASSIGN_OR_RETURN(b.se->fc2, pack_1x1_linear(v, "token_mixer.1.fc2.", bc.in, bc.se));
    }
    FLICK_ASSIGN_OR_RETURN(Fold m1, conv_bn(v, "channel_mixer.m.0.", {2 * bc.out, bc.out, 1, 1}));
    b.mix1 = pack(m1, 1, 0, 1);
    FLICK_ASSIGN_OR_RETURN(Fold m2, conv_bn(v, "channel_mixer.m.2.", {bc.out, 2 * bc.out, 1, 1}));
    b.mix2 = pack(m2, 1, 0, 1);
    h = b.h_out;
  }
  out_h_ = h;

  // ImageStudentEncoder.head: Conv2d(1x1, no bias), BatchNorm2d, GELU, Conv2d(3x3).
  const int64_t e = c.embed_dim;
  FLICK_ASSIGN_OR_RETURN(Fold h0, read_conv(model, "head.0.", {e, c.out_channels(), 1, 1}, false));
  FLICK_TRY(fold_bn(model, "head.1.", h0));
  head1_ = pack(h0, 1, 0, 1);
  FLICK_ASSIGN_OR_RETURN(Fold h3, read_conv(model, "head.3.", {e, e, 3, 3}, true));
  head2_ = pack(h3, 1, 1, 1);
  return ok_status();
}

void RepVitTrunk::plan() {
  const RepVitConfig& c = cfg_;
  int64_t act = c.stem * stem_h2_ * stem_h2_;
  int64_t hidden = (c.stem / 2) * stem_h1_ * stem_h1_;  // the stem's first conv writes here too
  int64_t widest = 1;
  for (const Block& b : blocks_) {
    act = std::max({act, b.cfg.in * b.h_in * b.h_in, b.cfg.out * b.h_out * b.h_out,
                    b.cfg.in * b.h_out * b.h_out});
    hidden = std::max(hidden, 2 * b.cfg.out * b.h_out * b.h_out);
    widest = std::max({widest, b.cfg.in, b.cfg.se});
  }
  a_ = arena_.request("repvit.a", act_, {act});
  b_ = arena_.request("repvit.b", act_, {act});
  hidden_ = arena_.request("repvit.hidden", act_, {hidden});
  mean_ = arena_.request("repvit.se_mean", act_, {widest});
  se_ = arena_.request("repvit.se_reduced", act_, {widest});
  gate_ = arena_.request("repvit.se_gate", act_, {widest});
  head_ = arena_.request("repvit.head1", act_, {c.embed_dim * out_h_ * out_h_});
  head2_buf_ = arena_.request("repvit.head2", act_, {c.embed_dim * out_h_ * out_h_});
  out_ = arena_.request("repvit.out", act_, {c.embed_dim * c.embed_size * c.embed_size});
  arena_.finalize();
}

Tensor RepVitTrunk::view_cl(Arena::BufferId id, int64_t c, int64_t h) const {
  return arena_.get(id).slice(0, 0, c * h * h).reshape({1, h, h, c}).permute({0, 3, 1, 2});
}

namespace {
// A channels-last [1, c, h, w] view as the contiguous [1, h*w, c] rows it
// covers (elementwise ops and reductions run on those at full speed).
Tensor rows_of(const Tensor& cl) {
  const int64_t c = cl.dim(1), hw = cl.dim(2) * cl.dim(3);
  return cl.permute({0, 2, 3, 1}).reshape({1, hw, c});
}
}  // namespace

Expected<Tensor> RepVitTrunk::forward(const Tensor& pixels, const Tap& tap) {
  const RepVitConfig& c = cfg_;
  const Shape want{1, 3, image_size_, image_size_};
  if (pixels.shape != want || (pixels.dtype != DType::F32 && pixels.dtype != DType::BF16))
    return invalid_input("RepViT trunk: expected F32 or BF16 pixels " + want.str() + ", got " +
                         pixels.str());
  Backend& be = *backend_;
  // The activations stay channels-last from the stem to the head (see
  // view_cl): oneDNN's convolutions then run without reordering x and y on
  // every call (NCHW costs two passes over each map, 58 % of the image side
  // at 1008^2 in bf16). Taps get an NCHW copy.
  OwnedTensor tap_copy;
  auto emit = [&](std::string_view name, const Tensor& v) {
    if (!tap) return;
    tap_copy = OwnedTensor(v.dtype, v.shape);
    be.copy(v, tap_copy.t);
    tap(name, tap_copy.t);
  };

  Tensor s1 = view_cl(hidden_, c.stem / 2, stem_h1_);  // [1, c0/2, S/2, S/2]
  be.conv(pixels, *stem1_, s1, Activation::GeluErf);
  Tensor x = view_cl(a_, c.stem, stem_h2_);  // [1, c0, S/4, S/4]
  be.conv(s1, *stem2_, x, Activation::None);
  emit("stem", x);

  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    const RepVitBlockConfig& bc = b.cfg;
    Tensor t = view_cl(b_, bc.in, b.h_out);  // [1, c_in, h', h']
    be.conv(x, *b.token, t, Activation::None);
    if (b.se) {
      Tensor t_rows = rows_of(t);  // [1, h'*h', c_in]
      Tensor mean = arena_.get(mean_).slice(0, 0, bc.in).reshape({1, 1, bc.in});
      be.reduce(t_rows, 1, ReduceOp::Mean, mean);
      Tensor red = arena_.get(se_).slice(0, 0, bc.se).reshape({1, bc.se});
      be.linear(mean.reshape({1, bc.in}), *b.se->fc1, red, Activation::Relu);
      Tensor gate = arena_.get(gate_).slice(0, 0, bc.in).reshape({1, bc.in});
      be.linear(red, *b.se->fc2, gate, Activation::Sigmoid);
      be.mul(t_rows, gate.reshape({1, 1, bc.in}), t_rows);
    }
    Tensor y = view_cl(a_, bc.out, b.h_out);  // [1, c_out, h', h']
    Tensor mixer_in = t;
    if (b.down) {  // stride 2: the token mixer ends in a 1x1 c_in -> c_out (into a)
      be.conv(t, *b.down, y, Activation::None);
      mixer_in = y;
    }
    Tensor hid = view_cl(hidden_, 2 * bc.out, b.h_out);  // [1, 2 c_out, h', h']
    be.conv(mixer_in, *b.mix1, hid, Activation::GeluErf);
    Tensor o = b.down ? view_cl(b_, bc.out, b.h_out) : y;  // the buffer mixer_in is not in
    be.conv(hid, *b.mix2, o, Activation::None);
    Tensor y_rows = rows_of(y);
    be.add(rows_of(mixer_in), rows_of(o), y_rows);  // Residual: x + m(x)
    x = y;
    emit("block" + std::to_string(i), x);
  }

  Tensor h1 = view_cl(head_, c.embed_dim, out_h_);
  be.conv(x, *head1_, h1, Activation::GeluErf);
  Tensor h2 = view_cl(head2_buf_, c.embed_dim, out_h_);  // [1, 1024, h, w]
  be.conv(h1, *head2_, h2, Activation::None);
  emit("head", h2);
  // Channels-last like the rest: the neck's convs read it as stored (an NCHW
  // map cost each of its three convs a transposing pass).
  Tensor out = view_cl(out_, c.embed_dim, c.embed_size);  // [1, 1024, 72, 72]
  if (out_h_ == c.embed_size) {
    be.copy(h2, out);
  } else {
    be.resize(h2, out, ResizeMode::Bilinear, /*align_corners=*/false, /*antialias=*/false);
  }
  emit("output", out);
  return out;
}

}  // namespace flick
