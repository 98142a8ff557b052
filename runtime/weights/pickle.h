// A restricted unpickler for the data.pkl of a torch.save zip archive. It
// interprets the opcodes of pickle protocols 2-5 over a closed set of objects:
// dicts (collections.OrderedDict), lists, tuples, scalars, strings, and tensors
// rebuilt by torch._utils._rebuild_tensor_v2/_v3 and _rebuild_parameter from
// persistent storage ids. It never imports or calls anything: any other global
// is refused by name when the pickle mentions it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/status.h"
#include "runtime/weights/stored_type.h"

namespace flick {

// A tensor of the state dict: a strided view into a storage of the archive
// (archive/data/<storage_key>). Offset and strides count elements of type.
struct PickledTensor {
  std::string name;  // nested containers flattened with '.', as torch names state dicts
  const StoredType* type = nullptr;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;
  std::string storage_key;
  uint64_t storage_bytes = 0;  // the storage's size as the pickle declares it
};

struct PickledStateDict {
  std::vector<PickledTensor> tensors;  // sorted by name
  // Non-tensor leaves (epoch counters, config strings, ...) as text.
  std::map<std::string, std::string> scalars;
};

// Every error says what was refused and at which byte offset of the pickle.
// Each returned view is checked to lie inside its storage as the pickle
// declares it (storage_bytes); that the archive holds that many bytes is the
// archive reader's check.
Expected<PickledStateDict> unpickle_state_dict(const uint8_t* data, size_t size);

}  // namespace flick
