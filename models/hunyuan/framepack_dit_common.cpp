#include "models/hunyuan/framepack_dit_common.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "runtime/cpu/linear_cache.h"
#include "runtime/dtype.h"
#include "runtime/quant/quantize.h"

namespace flick::hunyuan {

DTypeSet dit_float_types() { return DTypeSet{DType::F32, DType::BF16, DType::F16}; }

namespace {

// What a tensor of an FP8 file may be besides the float types (its norm
// weights and biases are read through `convert`, exact for E4M3).
DTypeSet dit_stored_types() {
  return DTypeSet{DType::F32, DType::BF16, DType::F16, DType::F8_E4M3};
}

// t converted to `to` (a temporary the pack copies from).
OwnedTensor converted(const Tensor& t, DType to) {
  OwnedTensor o(to, t.shape);
  convert(t.dtype, t.data, to, o.t.data, t.numel());
  return o;
}

Expected<std::unique_ptr<PackedLinear>> pack(const WeightView& v, std::string_view name,
                                             const Tensor& w, int64_t n, const DitRun& run,
                                             Precision precision, bool round_weight_bf16) {
  FLICK_ASSIGN_OR_RETURN(Tensor b, v.get(std::string(name) + ".bias", dit_stored_types(), {n}));
  // The bias as the module holds it: bf16 in a bf16 module (F16 is not a
  // pack input: widened to F32 in an F32 run).
  OwnedTensor b_conv;
  if (run.bf16() && b.dtype != DType::BF16) {
    b_conv = converted(b, DType::BF16);
    b = b_conv.t;
  } else if (b.dtype == DType::F16 || b.dtype == DType::F8_E4M3) {
    b_conv = converted(b, DType::F32);
    b = b_conv.t;
  }
  OwnedTensor w_conv, scale;
  Tensor wt = w;
  if (w.dtype == DType::F8_E4M3) {
    // An FP8 file: per-tensor scale_weight, or none (Kijai's plain cast: 1).
    const std::string s_name = std::string(name) + std::string(kDitFp8ScaleSuffix);
    scale = OwnedTensor(DType::F32, {1});
    scale.t.ptr<float>()[0] = 1.f;
    if (v.has(s_name)) {
      const TensorInfo* info = v.info(s_name);
      if (info->numel != 1)
        return invalid_input(v.full_name(s_name) + ": expected one per-tensor scale, file has " +
                             info->shape_str());
      FLICK_ASSIGN_OR_RETURN(Tensor s, v.get(s_name, dit_float_types()));
      convert(s.dtype, s.data, DType::F32, scale.t.data, 1);
      const float sv = scale.t.ptr<float>()[0];
      if (!(std::isfinite(sv) && sv > 0.f))
        return invalid_input(v.full_name(s_name) + ": scale " + std::to_string(sv) +
                             " (must be finite and positive)");
    }
    if (precision == Precision::FP8) return run.be->pack_linear({w, scale.t, b, precision});
    // Any other precision: the layer as the fp8 module would compute it
    // (ComfyUI upcasts w * scale to the compute dtype), bf16.
    w_conv = OwnedTensor(precision == Precision::F32 ? DType::F32 : DType::BF16, w.shape);
    dequantize_weight(w, scale.t, w_conv.t);
    return run.be->pack_linear({w_conv.t, Tensor{}, b, precision});
  } else if (v.has(std::string(name) + std::string(kDitFp8ScaleSuffix))) {
    return invalid_input(v.full_name(std::string(name) + std::string(kDitFp8ScaleSuffix)) +
                         ": a scale beside a " + std::string(dtype_name(w.dtype)) +
                         " weight (only F8_E4M3 weights are scaled)");
  }
  if (round_weight_bf16 && run.bf16() && w.dtype != DType::BF16) {
    w_conv = converted(w, DType::BF16);
    wt = w_conv.t;
  }
  return run.be->pack_linear({wt, Tensor{}, b, precision});
}

// pack() of the weight read() returns, through the plan cache of a
// pipeline's load on the CPU backend (runtime/cpu/linear_cache.h): a hit
// adopts the packed layer and reads none of the checkpoint. The bytes depend
// on the file (the key's source identity), the precision (the key's kind)
// and round_weight_bf16, which is fixed per layer in this code; the run's
// activation dtype follows from the precision.
Expected<std::unique_ptr<PackedLinear>> pack_cached(const WeightView& v, std::string_view name,
                                                    int64_t n, int64_t k, const DitRun& run,
                                                    Precision precision, bool round_weight_bf16,
                                                    const std::function<Expected<Tensor>()>& read) {
  auto build = [&]() -> Expected<std::unique_ptr<PackedLinear>> {
    FLICK_ASSIGN_OR_RETURN(Tensor w, read());
    return pack(v, name, w, n, run, precision, round_weight_bf16);
  };
  if (std::strcmp(run.be->name(), "cpu") != 0) return build();
  const std::string layer(name);
  // The precision in the name: INT8 and BF16 pipelines sharing a cache keep
  // their own entries (the layers both run at BF16 share one).
  Expected<std::unique_ptr<PackedLinear>> l = cpu::pack_linear_cached(
      v.full_name(layer) + "@" + precision_name(precision), precision, n, k, /*bias=*/true, build);
  if (l.ok()) {  // a hit stands for the layer's tensors
    v.mark_used(layer + ".weight");
    v.mark_used(layer + ".bias");
    const std::string scale = layer + std::string(kDitFp8ScaleSuffix);
    if (v.has(scale)) v.mark_used(scale);
  }
  return l;
}

}  // namespace

Expected<std::unique_ptr<PackedLinear>> load_dit_linear(const WeightView& v, std::string_view name,
                                                        int64_t n, int64_t k, const DitRun& run,
                                                        Precision precision,
                                                        bool round_weight_bf16) {
  return pack_cached(v, name, n, k, run, precision, round_weight_bf16, [&] {
    return v.get(std::string(name) + ".weight", dit_stored_types(), {n, k});
  });
}

Expected<std::unique_ptr<PackedLinear>> load_dit_patch_conv(const WeightView& v,
                                                            std::string_view name, int64_t n,
                                                            int64_t c, int64_t kt, int64_t kh,
                                                            int64_t kw, const DitRun& run) {
  const int64_t k = c * kt * kh * kw;
  return pack_cached(v, name, n, k, run, run.kept(), false, [&]() -> Expected<Tensor> {
    FLICK_ASSIGN_OR_RETURN(
        Tensor w, v.get(std::string(name) + ".weight", dit_stored_types(), {n, c, kt, kh, kw}));
    return w.reshape({n, k});
  });
}

Expected<Tensor> load_dit_param(const WeightView& v, std::string_view name, const Shape& shape,
                                const DitRun& run, std::vector<OwnedTensor>& owned) {
  FLICK_ASSIGN_OR_RETURN(Tensor t, v.get(name, dit_stored_types(), shape));
  return owned.emplace_back(converted(t, run.act())).t;
}

void dit_linear_act(const DitRun& run, const Tensor& x, const PackedLinear& w, Tensor& y,
                    Activation act) {
  if (run.bf16() && act != Activation::None) {
    run.be->linear(x, w, y, Activation::None);
    run.be->activation(y, y, act);
    return;
  }
  run.be->linear(x, w, y, act);
}

void dit_modulate(const DitRun& run, Tensor& x, const Tensor& shift, const Tensor& scale,
                  Tensor& one_plus) {
  Backend& be = *run.be;
  be.affine(scale, 1.f, 1.f, one_plus);  // 1 + scale (rounded)
  be.mul(x, one_plus, x);
  be.add(x, shift, x);
}

void dit_gated_add(const DitRun& run, Tensor& x, Tensor& y, const Tensor& gate) {
  run.be->mul(y, gate, y);
  run.be->add(x, y, x);
}

void dit_rms_norm(const DitRun& run, const Tensor& x, const Tensor& w, float eps, Tensor& y) {
  run.be->rms_norm(x, Tensor{}, eps, y);
  run.be->mul(y, w, y);
}

void dit_timestep_sinusoid(float t, Tensor& out) {
  // diffusers embeddings.py get_timestep_embedding: exponent = -ln(1e4) *
  // arange(half) in fp32 (the scalar cast to fp32), / half, exp, times t.
  // torch's CPU exp is MKL's vector exp in the reference build: 3 of the 128
  // frequencies are 1 ulp from the correctly rounded expf used here, which
  // at t ~ 1e4 moves temb by ~2e-5 relative (the fp32 test's bound says so).
  const int64_t dim = out.dim(-1), half = dim / 2;
  FLICK_CHECK(out.numel() == dim && dim % 2 == 0, "timestep sinusoid: bad output " + out.str());
  const float neg_log = static_cast<float>(-std::log(10000.0));
  std::vector<float> row(static_cast<size_t>(dim));
  for (int64_t j = 0; j < half; ++j) {
    const float exponent = static_cast<float>(j) * neg_log / static_cast<float>(half);
    const float arg = t * std::exp(exponent);
    row[static_cast<size_t>(j)] = std::cos(arg);  // flip_sin_to_cos: cos first
    row[static_cast<size_t>(half + j)] = std::sin(arg);
  }
  convert(DType::F32, row.data(), out.dtype, out.data, dim);
}

}  // namespace flick::hunyuan
