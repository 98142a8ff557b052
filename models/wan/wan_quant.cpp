#include "models/wan/wan_quant.h"

#include <fnmatch.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

#include "runtime/cpu/linear_cache.h"
#include "runtime/cpu/onednn_info.h"
#include "runtime/dtype.h"
#include "runtime/plan_cache.h"
#include "runtime/ref/matmul_common.h"

namespace flick {

const WanKeptLayer* wan_kept_layer(std::string_view tensor_name) {
  std::string dotted(1, '.');  // (not "." + name: GCC 12 warns falsely, -Wrestrict)
  dotted += tensor_name;
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

// One linear's checkpoint tensors, checked: weight [n, k] (a view into the
// checkpoint), its scale if stored quantized, the bias in the activation
// dtype.
struct LayerTensors {
  Tensor w, scale;
  OwnedTensor bias;
  Precision precision;
};

Expected<LayerTensors> read_layer(const WeightView& v, std::string_view layer,
                                  const Shape& weight_shape, bool bias, Precision model) {
  const int64_t n = weight_shape[0], k = weight_shape.numel() / n;
  const std::string w_name = std::string(layer) + ".weight";
  const std::string s_name = w_name + "_scale";
  LayerTensors t;
  t.precision = wan_layer_precision(v.full_name(w_name), model);
  const TensorInfo* info = v.info(w_name);
  const bool stored_quantized =
      info != nullptr && info->type->dtype && kQuantized.contains(*info->type->dtype);
  if (v.has(s_name)) {
    if (info != nullptr && !stored_quantized)
      return invalid_input(v.full_name(w_name) + ": has a " + v.full_name(s_name) + " but is " +
                           std::string(info->type->name) +
                           " (a quantized weight is I8 or F8_E4M3)");
    FLICK_ASSIGN_OR_RETURN(t.w, v.get(w_name, kQuantized, weight_shape));
    FLICK_ASSIGN_OR_RETURN(t.scale, load_scale(v, s_name, n));
  } else {
    if (stored_quantized)
      return invalid_input(v.full_name(w_name) + ": " + std::string(info->type->name) +
                           " weight without " + v.full_name(s_name));
    // Quantized at pack time (runtime/ref/matmul_common.h) by the rule of
    // quantize_weight(), so a converted checkpoint packs to the same bytes.
    FLICK_ASSIGN_OR_RETURN(t.w, v.get(w_name, kFloat, weight_shape));
  }
  t.w = t.w.reshape({n, k});
  if (bias) {
    FLICK_ASSIGN_OR_RETURN(Tensor raw, v.get(std::string(layer) + ".bias", kFloat, Shape{n}));
    t.bias = OwnedTensor(wan_activation_dtype(model), raw.shape);
    convert(raw.dtype, raw.data, t.bias.t.dtype, t.bias.t.data, raw.numel());
  }
  return t;
}

// parts stacked along dim 0 into out (same dtype, same trailing size).
void stack_rows(const std::vector<Tensor>& parts, Tensor& out) {
  char* dst = static_cast<char*>(out.data);
  for (const Tensor& p : parts) {
    FLICK_CHECK(p.dtype == out.dtype && p.is_contiguous(), "stack_rows: " + p.str());
    std::memcpy(dst, p.data, p.nbytes());
    dst += p.nbytes();
  }
}

// Whether `layers` (weights of `weight_shape` each) pack through the plan cache: a
// scope is active and they run INT8 from float weights, so loading means
// reading 2 bytes per weight and quantizing them; the cache holds the
// quantized int8 weight and its scales (what ref::prepare_weights makes of
// them, so a hit packs the same bytes). Stored-quantized checkpoints and
// float layers are a copy already and skip the cache.
bool int8_cacheable(const WeightView& v, std::span<const std::string_view> layers,
                    const Shape& weight_shape, Precision model) {
  const PlanCacheScope* scope = PlanCacheScope::current();
  if (scope == nullptr || scope->cache() == nullptr) return false;
  for (std::string_view layer : layers) {
    const std::string w_name = std::string(layer) + ".weight";
    const TensorInfo* info = v.info(w_name);
    if (info == nullptr || v.has(w_name + "_scale") ||
        wan_layer_precision(v.full_name(w_name), model) != Precision::INT8 ||
        !(info->type->dtype && kFloat.contains(*info->type->dtype)) ||
        info->shape != weight_shape.to_vector())
      return false;  // the uncached path reports whatever is wrong
  }
  return true;
}

// The INT8 linear of `layers` stacked ([n * layers.size(), k]) through the
// plan cache; `read` builds the stacked float weight (the uncached path).
Expected<std::unique_ptr<PackedLinear>> pack_int8_cached(
    const WeightView& v, std::span<const std::string_view> layers, int64_t n, int64_t k, bool bias,
    Precision model, Backend& backend,
    const std::function<Expected<Tensor>(OwnedTensor& keep)>& read) {
  const int64_t total = n * static_cast<int64_t>(layers.size());
  std::string name = v.full_name(std::string(layers[0]));
  for (size_t i = 1; i < layers.size(); ++i) {
    name += '+';
    name += layers[i];
  }
  // The stacked bias in the activation dtype (the reference's module holds
  // a bf16 bias), as the uncached loaders make it.
  auto read_bias = [&]() -> Expected<OwnedTensor> {
    OwnedTensor b;
    if (!bias) return b;
    b = OwnedTensor(wan_activation_dtype(model), Shape{total});
    char* dst = static_cast<char*>(b.t.data);
    for (std::string_view layer : layers) {
      FLICK_ASSIGN_OR_RETURN(Tensor raw, v.get(std::string(layer) + ".bias", kFloat, Shape{n}));
      convert(raw.dtype, raw.data, b.t.dtype, dst, n);
      dst += n * static_cast<int64_t>(dtype_size(b.t.dtype));
    }
    return b;
  };
  // A hit read none of the layers' tensors: count them as used (their
  // shapes were checked against the checkpoint's records by int8_cacheable).
  auto mark_used = [&] {
    for (std::string_view layer : layers) {
      v.mark_used(std::string(layer) + ".weight");
      if (bias) v.mark_used(std::string(layer) + ".bias");
    }
  };
  if (std::strcmp(backend.name(), "cpu") == 0) {
    // The CPU backend caches the packed layout itself (AMX tiles or oneDNN's
    // blocked weights, with scales and bias): a hit maps and adopts it.
    Expected<std::unique_ptr<PackedLinear>> l = cpu::pack_linear_cached(
        name, Precision::INT8, total, k, bias, [&]() -> Expected<std::unique_ptr<PackedLinear>> {
          OwnedTensor keep;
          FLICK_ASSIGN_OR_RETURN(Tensor w, read(keep));
          FLICK_ASSIGN_OR_RETURN(OwnedTensor b, read_bias());
          return backend.pack_linear({w, Tensor{}, b.t, Precision::INT8});
        });
    if (l.ok()) mark_used();
    return l;
  }
  // Other backends: the int8 weight and scales of ref::prepare_weights.
  const std::string kind = "int8-linear w I8 [" + std::to_string(total) + ", " + std::to_string(k) +
                           "] scale F32 [" + std::to_string(total) + "]";
  FLICK_ASSIGN_OR_RETURN(
      PlanCached c, PlanCached::get(name, kind, [&]() -> Expected<std::vector<OwnedTensor>> {
        OwnedTensor keep;
        FLICK_ASSIGN_OR_RETURN(Tensor w, read(keep));
        ref::PreparedWeights p = ref::prepare_weights(w, Tensor{}, Tensor{}, Precision::INT8);
        std::vector<OwnedTensor> out;
        out.push_back(std::move(p.w));
        out.push_back(std::move(p.scale));
        return out;
      }));
  if (c.tensors.size() != 2 || c.tensors[0].dtype != DType::I8 ||
      c.tensors[0].shape != Shape{total, k} || c.tensors[1].dtype != DType::F32 ||
      c.tensors[1].shape != Shape{total})
    return internal_error("plan cache entry of " + name + " has the wrong tensors");
  for (std::string_view layer : layers) v.mark_used(std::string(layer) + ".weight");
  FLICK_ASSIGN_OR_RETURN(OwnedTensor b, read_bias());
  return backend.pack_linear({c.tensors[0], c.tensors[1], b.t, Precision::INT8});
}

}  // namespace

Expected<std::unique_ptr<PackedLinear>> load_wan_linear(const WeightView& v, std::string_view layer,
                                                        const Shape& weight_shape, bool bias,
                                                        Precision model, Backend& backend) {
  const int64_t n = weight_shape[0], k = weight_shape.numel() / n;
  const std::string_view layers[] = {layer};
  if (int8_cacheable(v, layers, weight_shape, model))
    return pack_int8_cached(
        v, layers, n, k, bias, model, backend, [&](OwnedTensor&) -> Expected<Tensor> {
          FLICK_ASSIGN_OR_RETURN(LayerTensors t, read_layer(v, layer, weight_shape, false, model));
          return t.w;  // a view into the checkpoint
        });
  FLICK_ASSIGN_OR_RETURN(LayerTensors t, read_layer(v, layer, weight_shape, bias, model));
  return backend.pack_linear({t.w, t.scale, t.bias.t, t.precision});  // copies what it keeps
}

namespace {

// The stacked checkpoint tensors of load_wan_linears_fused.
struct FusedTensors {
  OwnedTensor w, scale, b;
  Precision precision;
};

Expected<FusedTensors> read_fused(const WeightView& v, std::span<const std::string_view> layers,
                                  int64_t n, int64_t k, bool bias, Precision model) {
  std::vector<LayerTensors> parts;
  for (std::string_view layer : layers) {
    FLICK_ASSIGN_OR_RETURN(LayerTensors t, read_layer(v, layer, Shape{n, k}, bias, model));
    parts.push_back(std::move(t));
  }
  const LayerTensors& first = parts.front();
  const int64_t total = n * static_cast<int64_t>(parts.size());
  for (size_t i = 1; i < parts.size(); ++i) {
    FLICK_CHECK(parts[i].precision == first.precision, "kWanKeptLayers splits the fused layers " +
                                                           std::string(layers[0]) + " and " +
                                                           std::string(layers[i]));
    if (parts[i].scale.empty() != first.scale.empty() ||
        (!first.scale.empty() && parts[i].w.dtype != first.w.dtype))
      return invalid_input(v.full_name(std::string(layers[i]) + ".weight") + " is " +
                           std::string(dtype_name(parts[i].w.dtype)) + " but " +
                           v.full_name(std::string(layers[0]) + ".weight") + " is " +
                           std::string(dtype_name(first.w.dtype)) +
                           ": layers that run as one must be quantized alike");
  }
  // Float parts of different dtypes meet in F32 (exact for BF16 / F16).
  bool same_dtype = true;
  for (const LayerTensors& p : parts) same_dtype = same_dtype && p.w.dtype == first.w.dtype;
  OwnedTensor w(same_dtype ? first.w.dtype : DType::F32, Shape{total, k});
  std::vector<Tensor> rows;
  std::vector<OwnedTensor> converted;
  for (const LayerTensors& p : parts) {
    if (p.w.dtype == w.t.dtype) {
      rows.push_back(p.w);
    } else {
      OwnedTensor& c = converted.emplace_back(DType::F32, p.w.shape);
      convert(p.w.dtype, p.w.data, DType::F32, c.t.data, p.w.numel());
      rows.push_back(c.t);
    }
  }
  stack_rows(rows, w.t);
  OwnedTensor scale, b;
  if (!first.scale.empty()) {  // per output channel; a per-tensor scale fills its part
    scale = OwnedTensor(DType::F32, Shape{total});
    for (size_t i = 0; i < parts.size(); ++i) {
      const Tensor& s = parts[i].scale;
      for (int64_t j = 0; j < n; ++j)
        scale.t.ptr<float>()[static_cast<int64_t>(i) * n + j] =
            s.ptr<const float>()[s.numel() == 1 ? 0 : j];
    }
  }
  if (bias) {
    b = OwnedTensor(first.bias.t.dtype, Shape{total});
    std::vector<Tensor> biases;
    for (const LayerTensors& p : parts) biases.push_back(p.bias.t);
    stack_rows(biases, b.t);
  }
  return FusedTensors{std::move(w), std::move(scale), std::move(b), first.precision};
}

}  // namespace

Expected<std::unique_ptr<PackedLinear>> load_wan_linears_fused(
    const WeightView& v, std::span<const std::string_view> layers, int64_t n, int64_t k, bool bias,
    Precision model, Backend& backend) {
  FLICK_CHECK(!layers.empty(), "load_wan_linears_fused: no layers");
  if (int8_cacheable(v, layers, Shape{n, k}, model))
    return pack_int8_cached(
        v, layers, n, k, bias, model, backend, [&](OwnedTensor& keep) -> Expected<Tensor> {
          FLICK_ASSIGN_OR_RETURN(FusedTensors f, read_fused(v, layers, n, k, false, model));
          keep = std::move(f.w);
          return keep.t;
        });
  FLICK_ASSIGN_OR_RETURN(FusedTensors f, read_fused(v, layers, n, k, bias, model));
  return backend.pack_linear({f.w.t, f.scale.t, f.b.t, f.precision});
}

std::string plan_cache_platform(const Backend& backend) {
  const dnnl_version_t* v = dnnl_version();
  char isa[32];
  std::snprintf(isa, sizeof(isa), "0x%x", static_cast<unsigned>(dnnl::get_effective_cpu_isa()));
  return std::string("backend=") + backend.name() + ";isa=" + isa +
         ";onednn=" + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + "+" + v->hash;
}

}  // namespace flick
