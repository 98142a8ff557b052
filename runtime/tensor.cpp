#include "runtime/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

namespace flick {

Shape::Shape(std::initializer_list<int64_t> d) {
  FLICK_CHECK(d.size() <= kMaxDims, "too many dims");
  ndim = static_cast<int>(d.size());
  size_t i = 0;
  for (int64_t v : d) dims[i++] = v;
}

Shape Shape::from_vector(const std::vector<int64_t>& d) {
  FLICK_CHECK(d.size() <= kMaxDims, "too many dims");
  Shape s;
  s.ndim = static_cast<int>(d.size());
  for (size_t i = 0; i < d.size(); ++i) s.dims[i] = d[i];
  return s;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= dims[static_cast<size_t>(i)];
  return n;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < ndim; ++i) os << (i ? ", " : "") << dims[static_cast<size_t>(i)];
  os << ']';
  return os.str();
}

bool Shape::operator==(const Shape& o) const {
  if (ndim != o.ndim) return false;
  for (int i = 0; i < ndim; ++i)
    if (dims[static_cast<size_t>(i)] != o.dims[static_cast<size_t>(i)]) return false;
  return true;
}

std::array<int64_t, kMaxDims> contiguous_strides(const Shape& s) {
  std::array<int64_t, kMaxDims> st{};
  int64_t acc = 1;
  for (int i = s.ndim - 1; i >= 0; --i) {
    st[static_cast<size_t>(i)] = acc;
    acc *= s.dims[static_cast<size_t>(i)];
  }
  return st;
}

Tensor Tensor::view(void* data, DType dtype, Shape shape, Device device) {
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  t.strides = contiguous_strides(shape);
  t.data = data;
  t.device = device;
  return t;
}

bool Tensor::is_contiguous() const {
  int64_t acc = 1;
  for (int i = shape.ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[static_cast<size_t>(i)] != acc) return false;
    acc *= shape[i];
  }
  return true;
}

void* Tensor::at(std::initializer_list<int64_t> idx) const {
  FLICK_CHECK(static_cast<int>(idx.size()) == shape.ndim, "index rank mismatch");
  int64_t off = 0;
  size_t i = 0;
  for (int64_t v : idx) off += v * strides[i++];
  return static_cast<char*>(data) + off * static_cast<int64_t>(dtype_size(dtype));
}

Tensor Tensor::slice(int d, int64_t start, int64_t len) const {
  if (d < 0) d += shape.ndim;
  FLICK_CHECK(d >= 0 && d < shape.ndim && start >= 0 && len >= 0 && start + len <= shape[d],
              "slice out of range");
  Tensor t = *this;
  t.shape[d] = len;
  t.data = static_cast<char*>(data) +
           start * strides[static_cast<size_t>(d)] * static_cast<int64_t>(dtype_size(dtype));
  return t;
}

Tensor Tensor::reshape(Shape new_shape) const {
  FLICK_CHECK(is_contiguous(), "reshape of a non-contiguous view");
  FLICK_CHECK(new_shape.numel() == numel(), "reshape changes numel: " + shape.str() + " -> " +
                                                new_shape.str());
  Tensor t = *this;
  t.shape = new_shape;
  t.strides = contiguous_strides(new_shape);
  return t;
}

Tensor Tensor::permute(std::initializer_list<int> order) const {
  FLICK_CHECK(static_cast<int>(order.size()) == shape.ndim, "permute rank mismatch");
  Tensor t = *this;
  size_t i = 0;
  for (int o : order) {
    t.shape.dims[i] = shape.dims[static_cast<size_t>(o)];
    t.strides[i] = strides[static_cast<size_t>(o)];
    ++i;
  }
  return t;
}

Tensor Tensor::select(int d, int64_t index) const {
  if (d < 0) d += shape.ndim;
  Tensor t = slice(d, index, 1);
  for (int i = d; i < shape.ndim - 1; ++i) {
    t.shape.dims[static_cast<size_t>(i)] = t.shape.dims[static_cast<size_t>(i + 1)];
    t.strides[static_cast<size_t>(i)] = t.strides[static_cast<size_t>(i + 1)];
  }
  t.shape.ndim -= 1;
  return t;
}

std::string Tensor::str() const {
  return std::string(dtype_name(dtype)) + shape.str() + (is_contiguous() ? "" : " strided");
}

HostBuffer::HostBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  size_t rounded = (bytes + 63) / 64 * 64;
  data_ = std::aligned_alloc(64, rounded);
  FLICK_CHECK(data_ != nullptr, "out of memory allocating " + std::to_string(bytes) + " bytes");
  std::memset(data_, 0, rounded);
}
HostBuffer::HostBuffer(HostBuffer&& o) noexcept : data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}
HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  if (this != &o) {
    std::free(data_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}
HostBuffer::~HostBuffer() { std::free(data_); }

OwnedTensor::OwnedTensor(DType dtype, Shape shape)
    : buffer(static_cast<size_t>(shape.numel()) * dtype_size(dtype)),
      t(Tensor::view(buffer.data(), dtype, shape)) {}

}  // namespace flick
