#include "runtime/cuda/device_arena.h"

#include <cuda_runtime.h>

#include <utility>

namespace flick::cuda {

DeviceBlock::DeviceBlock(size_t bytes) : n_(bytes) {
  if (bytes == 0) return;
  const cudaError_t e = cudaMalloc(&p_, bytes);
  FLICK_CHECK(e == cudaSuccess,
              "cudaMalloc of " + std::to_string(bytes) + " bytes: " + cudaGetErrorString(e));
}
DeviceBlock& DeviceBlock::operator=(DeviceBlock&& o) noexcept {
  std::swap(p_, o.p_);
  std::swap(n_, o.n_);
  return *this;
}
DeviceBlock::~DeviceBlock() {
  if (p_) cudaFree(p_);
}

DeviceArena::BufferId DeviceArena::request(std::string name, DType dtype, Shape shape) {
  FLICK_CHECK(memory_.get() == nullptr, "DeviceArena: request after finalize: " + name);
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  entries_.push_back({std::move(name), dtype, shape, total_});
  total_ += (bytes + 255) / 256 * 256;  // 256-byte alignment: cuBLASLt and cuDNN like 16+
  return static_cast<BufferId>(entries_.size() - 1);
}

void DeviceArena::finalize() { memory_ = DeviceBlock(total_); }

Tensor DeviceArena::get(BufferId id) const {
  FLICK_CHECK(id >= 0 && static_cast<size_t>(id) < entries_.size() && memory_.get(),
              "DeviceArena::get: bad id or not finalized");
  const Entry& e = entries_[static_cast<size_t>(id)];
  return Tensor::view(static_cast<char*>(memory_.get()) + e.offset, e.dtype, e.shape, Device::CUDA);
}

void* DeviceScratch::get(size_t bytes) {
  if (bytes > block_.size()) {
    block_ = DeviceBlock();  // free first: the peak is the new size only
    block_ = DeviceBlock((bytes + 255) / 256 * 256);
  }
  return block_.get();
}

}  // namespace flick::cuda
