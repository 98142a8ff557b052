// Writes a state dict as torch.save (torch >= 1.6) writes it, so that both
// flick's PthFile and torch.load(weights_only=True) read it:
//
//   <root>/data.pkl             pickle protocol 2: collections.OrderedDict of
//                               torch._utils._rebuild_tensor_v2 (v3 for float8)
//                               over persistent-id storages, opcode for opcode
//                               what Python's pickler emits for torch.save
//   <root>/.format_version      "1"
//   <root>/.storage_alignment   "64"
//   <root>/byteorder            "little"
//   <root>/data/<i>             tensor i's bytes, row-major, one storage each
//   <root>/version              "3\n"
//
// The zip is written by hand (stored entries, zip64 where offsets or sizes
// pass 4 GiB): libzip cannot place entry data at 64-byte boundaries (torch
// pads with an "FB" extra field so storages can be memory-mapped), cannot
// leave holes for all-zero tensors, and copies every entry through its own
// temporary file. Tensors are streamed: a multi-GB checkpoint needs one chunk
// buffer, not the whole state dict in memory.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/status.h"
#include "runtime/tensor.h"
#include "runtime/weights/stored_type.h"

namespace flick {

// A tensor whose bytes are produced on demand.
struct StreamedTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  // Writes bytes [offset, offset + out.size()) of the row-major tensor into
  // `out`; called with increasing offsets, chunk by chunk, each chunk a whole
  // number of elements. Empty: the tensor is all zeros and is left as a hole
  // in the file (sparse), which costs neither time nor disk.
  std::function<void(uint64_t offset, std::span<uint8_t> out)> fill;
  // A stored type flick does not compute in (I64, F64, BOOL, C64 buffers of
  // a released checkpoint), written with its typed torch storage; overrides
  // dtype. nullptr: dtype's own type.
  const StoredType* stored = nullptr;

  // Bytes of numel(shape) elements; nullopt if the shape is invalid.
  std::optional<uint64_t> nbytes() const;

  // A contiguous tensor's bytes, copied when written (t must outlive the
  // write; programmer error if it is not contiguous).
  static StreamedTensor from_tensor(std::string name, const Tensor& t);
};

struct PthWriteOptions {
  // The archive's root folder; empty: the file name without its extension,
  // as torch.save names it.
  std::string archive_name;
  // Non-empty: the state dict is saved as {wrap_in: state_dict} (the layout
  // of released training checkpoints such as EfficientSAM3's {"model": ...});
  // flick reads its tensors as "<wrap_in>.<name>", torch.load as
  // ckpt[wrap_in][name]. Empty: the state dict itself, as torch.save(sd).
  std::string wrap_in;
};

// Writes `tensors` (in this order: the state dict's order) to `path`
// atomically (temporary file, fsync, rename, directory fsync). Errors name
// the file and the tensor (repeated names, invalid shapes).
Status write_pth(const std::string& path, const std::vector<StreamedTensor>& tensors,
                 const PthWriteOptions& options = {});

}  // namespace flick
