// INT8 convolution of the CPU backend (conv_int8.cpp): pack_conv / conv hand
// Precision::INT8 here. The quantization rule is ref/conv_int8.h's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/ref/conv_int8.h"
#include "runtime/status.h"

namespace flick::cpu {

std::unique_ptr<PackedConv> pack_conv_int8(const ConvDesc& d);
// Whether w came from pack_conv_int8.
bool is_conv_int8(const PackedConv& w);
void conv_int8(const Tensor& x, const PackedConv& w, Tensor& y, Activation act);
std::string conv_int8_impl(const PackedConv& w);
// conv_cache.h's view of an INT8 conv: the reordered weights (U8), their md
// (U8), the s8 weights I8 [O, K], their scales F32 [O], the bias (F32 [O] or
// empty); and a conv that adopts such views (kept alive by `storage`).
std::vector<Tensor> int8_conv_tensors(const PackedConv& w);
Expected<std::unique_ptr<PackedConv>> adopt_int8_conv(const ConvDesc& d, const Tensor& md,
                                                      const Tensor& weights, const Tensor& w_plain,
                                                      const Tensor& w_scale, const Tensor& bias,
                                                      std::shared_ptr<const void> storage);

// The activation pass over n dense F32 / BF16 values (AVX-512 kernels,
// conv_int8_avx512.cpp; INT8 needs AVX-512 VNNI anyway): min and max, and
// q = ref::conv_int8_q(x) as bytes (int8 or uint8 by p.lo). Single-threaded:
// the caller splits the range.
void minmax_avx512(const void* x, DType dtype, int64_t n, float* min, float* max);
// max |x| (the S8 encoding needs only that: one cheaper pass).
float absmax_avx512(const void* x, DType dtype, int64_t n);
void quantize_int8_avx512(const void* x, DType dtype, int64_t n, const ref::ConvInt8Quant& p,
                          uint8_t* q);

}  // namespace flick::cpu
