// safetensors: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype", "shape", "data_offsets": [begin, end)}, "__metadata__":
// {string: string}}, then the data buffer the offsets index. The reader maps
// the file and validates everything before exposing a byte of it; the writer
// produces files the reference implementation accepts, atomically.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"
#include "runtime/weights/mapped_file.h"
#include "runtime/weights/weight_file.h"

namespace flick {

// The reference reader's bound on N.
inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

struct SafetensorsHeader {
  struct Entry {
    TensorInfo info;
    uint64_t begin = 0;  // byte offsets into the data buffer, [begin, end)
    uint64_t end = 0;
  };
  std::vector<Entry> entries;  // sorted by name
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + N: file offset of the data buffer
};

// Validates a whole safetensors file image: header bounds, JSON, every entry,
// offsets tiling the data buffer exactly, file size. Every error starts with
// `name` (the file) and names the tensor it concerns.
Expected<SafetensorsHeader> parse_safetensors(const uint8_t* data, size_t size,
                                              const std::string& name);

class SafetensorsFile final : public WeightFile {
 public:
  static Expected<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  void release_pages() const override { map_.release_pages(); }

  std::string_view format() const override { return "safetensors"; }
  // A pointer into the mapping (zero copy), or, for a tensor the file stores
  // at an offset misaligned for its element size, an aligned copy.
  Expected<const uint8_t*> data(size_t i) override;

 private:
  SafetensorsFile() = default;
  MappedFile map_;
  std::vector<uint64_t> file_offsets_;  // per tensor, absolute
  std::map<size_t, HostBuffer> aligned_copies_;
};

// One tensor to write: nbytes = numel(shape) x type bits / 8 at data.
struct SafetensorsTensor {
  std::string name;
  const StoredType* type = nullptr;
  std::vector<int64_t> shape;
  const void* data = nullptr;

  // A contiguous CPU tensor (programmer error otherwise).
  static SafetensorsTensor from_tensor(std::string name, const Tensor& t);
};

// Writes path atomically: a temp file in the same directory, fsync, rename,
// fsync of the directory. Tensors are laid out by descending element size,
// then name, so every offset is aligned to its element size; the header is
// padded with spaces to a multiple of 8 bytes.
Status write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace flick
