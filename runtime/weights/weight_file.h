// WeightFile: one opened checkpoint file (safetensors or PyTorch .pth) as a
// sorted list of validated tensor descriptions, plus lazy access to the bytes.
// WeightStore (weight_store.h) is what model code uses; this is the layer
// below it, shared by the readers and `flick inspect`.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"
#include "runtime/weights/stored_type.h"

namespace flick {

// A tensor as its file describes it. Everything here has been validated when
// the file was opened: the bytes exist in the file and match type x shape.
struct TensorInfo {
  std::string name;
  const StoredType* type = nullptr;
  std::vector<int64_t> shape;  // any rank; flick tensors take at most kMaxDims
  uint64_t numel = 0;
  uint64_t nbytes = 0;   // of the contiguous tensor
  bool strided = false;  // stored as a non-contiguous view (.pth); loading copies

  std::string shape_str() const;  // "[2, 3]"
};

class WeightFile {
 public:
  virtual ~WeightFile() = default;
  WeightFile(const WeightFile&) = delete;
  WeightFile& operator=(const WeightFile&) = delete;

  const std::string& path() const { return path_; }
  virtual std::string_view format() const = 0;  // "safetensors", "pytorch"
  // Sorted by name, names unique.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // safetensors __metadata__; for .pth the non-tensor leaves of the pickle.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Index of a name in tensors(), or -1.
  int64_t find(std::string_view name) const;

  // Row-major contiguous bytes of tensors()[i] (nbytes of them), aligned to
  // the element size, read-only, valid for the life of this object. May read
  // from disk (and fail) the first time. Not thread-safe.
  virtual Expected<const uint8_t*> data(size_t i) = 0;
  // Gives resident pages of a memory-mapped file back to the system after
  // loading; data() pointers stay valid. Files read into memory do nothing.
  virtual void release_pages() const {}

 protected:
  WeightFile() = default;
  // tensors_ must be sorted by name; an error names a repeated one.
  Status check_unique_names() const;

  std::string path_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// "[2, 3]" for any rank.
std::string shape_str(const std::vector<int64_t>& dims);

}  // namespace flick
