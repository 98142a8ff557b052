#include "runtime/cpu/eltwise_runs.h"

#include <vector>

namespace flick::cpu::detail {

float* scratch(int slot, int64_t n) {
  FLICK_CHECK(slot >= 0 && slot < kScratchSlots, "scratch slot out of range");
  thread_local std::vector<float> buffers[kScratchSlots];
  std::vector<float>& b = buffers[slot];
  if (static_cast<int64_t>(b.size()) < n) b.resize(static_cast<size_t>(n));
  return b.data();
}

void check_float(const Tensor& t, const char* op) {
  FLICK_CHECK(flick::detail::is_float(t.dtype),
              std::string(op) + ": expected an F32/BF16/F16 tensor, got " + t.str());
}

const float* read_f32(const EltwiseKernels& k, const Tensor& t, int64_t off, int64_t stride,
                      int64_t n, int slot) {
  if (stride == 1 || n == 1) {
    if (t.dtype == DType::F32) return t.ptr<const float>() + off;
    float* buf = scratch(slot, n);
    k.to_f32(t.dtype, static_cast<const char*>(t.data) + off * int64_t(dtype_size(t.dtype)), buf,
             n);
    return buf;
  }
  float* buf = scratch(slot, n);
  for (int64_t i = 0; i < n; ++i) buf[i] = load_as_f32(t.dtype, t.data, off + i * stride);
  return buf;
}

float* out_f32(const Tensor& t, int64_t off, int64_t stride, int64_t n, int slot) {
  if (t.dtype == DType::F32 && (stride == 1 || n == 1)) return t.ptr<float>() + off;
  return scratch(slot, n);
}

void write_f32(const EltwiseKernels& k, const Tensor& t, int64_t off, int64_t stride, int64_t n,
               const float* buf) {
  if (t.dtype == DType::F32 && (stride == 1 || n == 1)) return;  // computed in place
  if (stride == 1 || n == 1) {
    k.from_f32(buf, t.dtype, static_cast<char*>(t.data) + off * int64_t(dtype_size(t.dtype)), n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) store_from_f32(t.dtype, t.data, off + i * stride, buf[i]);
}

const float* param_f32(const EltwiseKernels& k, const Tensor& p, int64_t n, int slot) {
  if (p.empty()) return nullptr;
  FLICK_CHECK(flick::detail::is_float(p.dtype) && p.ndim() == 1 && p.dim(0) == n,
              "expected a parameter vector of " + std::to_string(n) + " floats, got " + p.str());
  return read_f32(k, p, 0, p.stride(0), n, slot);
}

}  // namespace flick::cpu::detail
