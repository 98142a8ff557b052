#include "models/wan/wan_quant.h"

#include <fnmatch.h>

#include <cmath>
#include <cstring>
#include <string>

#include "runtime/cpu/onednn_info.h"
#include "runtime/dtype.h"

namespace flick {

const WanKeptLayer* wan_kept_layer(std::string_view tensor_name) {
  const std::string dotted = "." + std::string(tensor_name);
  for (const WanKeptLayer& k : kWanKeptLayers)
    if (fnmatch(std::string(k.pattern).c_str(), dotted.c_str(), 0) == 0) return &k;
  return nullptr;
}

Precision wan_layer_precision(std::string_view weight_name, Precision model) {
  if (model == Precision::F32 || model == Precision::BF16) return model;
  return wan_kept_layer(weight_name) != nullptr ? Precision::BF16 : model;
}

DType wan_activation_dtype(Precision model) {
  return model == Precision::F32 ? DType::F32 : DType::BF16;
}

Status check_wan_precision(Precision model, const Backend& backend, std::string_view who) {
  // The reference backend runs every precision; the CPU backend's INT8 needs
  // oneDNN's brgemm int8 kernels (runtime/cpu/matmul.cpp).
  if (std::strcmp(backend.name(), "cpu") == 0 && !cpu::cpu_supports(model))
    return invalid_input(std::string(who) + ": precision " + precision_name(model) +
                         " needs a CPU with AVX-512 VNNI (or AMX); this one has neither: use bf16 "
                         "or fp8");
  return ok_status();
}

namespace {

const DTypeSet kFloat{DType::F32, DType::BF16, DType::F16};
const DTypeSet kQuantized{DType::I8, DType::F8_E4M3};

// A `flick convert` scale: F32 [n] or [1], finite and positive.
Expected<Tensor> load_scale(const WeightView& v, const std::string& name, int64_t n) {
  const TensorInfo* info = v.info(name);
  const bool per_tensor = info != nullptr && info->shape.size() == 1 && info->shape[0] == 1;
  FLICK_ASSIGN_OR_RETURN(Tensor s, v.get(name, DType::F32, Shape{per_tensor ? 1 : n}));
  const float* p = s.ptr<const float>();
  for (int64_t i = 0; i < s.numel(); ++i)
    if (!(std::isfinite(p[i]) && p[i] > 0.f))
      return invalid_input(v.full_name(name) + ": scale " + std::to_string(i) + " is " +
                           std::to_string(p[i]) + "; scales must be finite and positive");
  return s;
}

}  // namespace

Expected<std::unique_ptr<PackedLinear>> load_wan_linear(const WeightView& v, std::string_view layer,
                                                        const Shape& weight_shape, bool bias,
                                                        Precision model, Backend& backend) {
  const int64_t n = weight_shape[0], k = weight_shape.numel() / n;
  const std::string w_name = std::string(layer) + ".weight";
  const std::string s_name = w_name + "_scale";
  const Precision precision = wan_layer_precision(v.full_name(w_name), model);
  LinearDesc d;
  d.precision = precision;
  const TensorInfo* info = v.info(w_name);
  const bool stored_quantized =
      info != nullptr && info->type->dtype && kQuantized.contains(*info->type->dtype);
  if (v.has(s_name)) {
    if (info != nullptr && !stored_quantized)
      return invalid_input(v.full_name(w_name) + ": has a " + v.full_name(s_name) + " but is " +
                           std::string(info->type->name) +
                           " (a quantized weight is I8 or F8_E4M3)");
    FLICK_ASSIGN_OR_RETURN(d.w, v.get(w_name, kQuantized, weight_shape));
    FLICK_ASSIGN_OR_RETURN(d.w_scale, load_scale(v, s_name, n));
  } else {
    if (stored_quantized)
      return invalid_input(v.full_name(w_name) + ": " + std::string(info->type->name) +
                           " weight without " + v.full_name(s_name));
    // Quantized at pack time (runtime/ref/matmul_common.h) by the rule of
    // quantize_weight(), so a converted checkpoint packs to the same bytes.
    FLICK_ASSIGN_OR_RETURN(d.w, v.get(w_name, kFloat, weight_shape));
  }
  d.w = d.w.reshape({n, k});
  OwnedTensor b;
  if (bias) {
    FLICK_ASSIGN_OR_RETURN(Tensor raw, v.get(std::string(layer) + ".bias", kFloat, Shape{n}));
    b = OwnedTensor(wan_activation_dtype(model), raw.shape);
    convert(raw.dtype, raw.data, b.t.dtype, b.t.data, raw.numel());
    d.bias = b.t;
  }
  return backend.pack_linear(d);  // copies what it keeps
}

}  // namespace flick
