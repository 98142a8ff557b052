// Device memory of the CUDA backend, allocated at load (weights, the plan's
// buffers) and never on the job loop:
//  - DeviceArena: the Arena of runtime/arena.h in GPU memory: buffers are
//    requested while planning, then carved out of one cudaMalloc.
//  - DeviceScratch: a grow-only workspace (GEMM results, attention scores,
//    converted inputs). It grows the first time a larger shape is seen, i.e.
//    during a pipeline's warm-up step; later steps reuse it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace flick::cuda {

// One cudaMalloc'd block; freed with its owner.
class DeviceBlock {
 public:
  DeviceBlock() = default;
  explicit DeviceBlock(size_t bytes);
  DeviceBlock(DeviceBlock&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  DeviceBlock& operator=(DeviceBlock&& o) noexcept;
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
  ~DeviceBlock();
  void* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

class DeviceArena {
 public:
  using BufferId = int;
  BufferId request(std::string name, DType dtype, Shape shape);
  void finalize();                // one allocation; no more requests
  Tensor get(BufferId id) const;  // a Device::CUDA view
  size_t bytes() const { return total_; }

 private:
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    size_t offset;
  };
  std::vector<Entry> entries_;
  size_t total_ = 0;
  DeviceBlock memory_;
};

class DeviceScratch {
 public:
  // At least `bytes`, 256-byte aligned; contents are not kept across growth.
  void* get(size_t bytes);

 private:
  DeviceBlock block_;
};

}  // namespace flick::cuda
