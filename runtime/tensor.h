// Tensor: a non-owning view {dtype, shape (<= 6 dims), strides, data, device}.
// Memory belongs to an Arena (activations, caches) or a WeightStore. Strides
// are in elements, not bytes.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/status.h"

namespace flick {

enum class Device : uint8_t { CPU, CUDA };

inline constexpr int kMaxDims = 6;

struct Shape {
  int ndim = 0;
  std::array<int64_t, kMaxDims> dims{};

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  static Shape from_vector(const std::vector<int64_t>& d);

  int64_t operator[](int i) const { return dims[static_cast<size_t>(i < 0 ? ndim + i : i)]; }
  int64_t& operator[](int i) { return dims[static_cast<size_t>(i < 0 ? ndim + i : i)]; }
  int64_t numel() const;
  std::vector<int64_t> to_vector() const { return {dims.begin(), dims.begin() + ndim}; }
  std::string str() const;  // "[2, 3, 4]"
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
};

struct Tensor {
  DType dtype = DType::F32;
  Shape shape;
  std::array<int64_t, kMaxDims> strides{};
  void* data = nullptr;
  Device device = Device::CPU;

  // A contiguous (row-major) view over data.
  static Tensor view(void* data, DType dtype, Shape shape, Device device = Device::CPU);

  int ndim() const { return shape.ndim; }
  int64_t dim(int i) const { return shape[i]; }
  int64_t stride(int i) const { return strides[static_cast<size_t>(i < 0 ? shape.ndim + i : i)]; }
  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool is_contiguous() const;
  bool empty() const { return data == nullptr; }

  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }
  // Byte address of the element at a multi-index.
  void* at(std::initializer_list<int64_t> idx) const;

  // Views (no copy). slice: [start, start+len) along dim. reshape: requires
  // contiguity. permute: reorders dims. select: drops dim at index.
  Tensor slice(int dim, int64_t start, int64_t len) const;
  Tensor reshape(Shape new_shape) const;
  Tensor permute(std::initializer_list<int> order) const;
  Tensor select(int dim, int64_t index) const;

  std::string str() const;  // "BF16[2, 3] contiguous"
};

std::array<int64_t, kMaxDims> contiguous_strides(const Shape& s);

// Owning host buffer, 64-byte aligned: for tests, tools and weights converted
// at load. Hot paths use the Arena.
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(size_t bytes);
  HostBuffer(HostBuffer&& o) noexcept;
  HostBuffer& operator=(HostBuffer&& o) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer();
  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// A tensor together with the memory it views (zero-initialised).
struct OwnedTensor {
  HostBuffer buffer;
  Tensor t;
  OwnedTensor() = default;
  OwnedTensor(DType dtype, Shape shape);
  operator Tensor&() { return t; }
  operator const Tensor&() const { return t; }
};

}  // namespace flick
