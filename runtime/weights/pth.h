// PyTorch checkpoints as torch.save (>= 1.6) writes them: a zip archive
// <name>/data.pkl (the pickled state dict), <name>/data/<key> (one raw
// little-endian storage per key), <name>/byteorder, <name>/version. The
// pickle goes through the restricted unpickler (pickle.h); tensors are views
// into storages, which are read from the archive on first use.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"
#include "runtime/weights/pickle.h"
#include "runtime/weights/weight_file.h"

struct zip;

namespace flick {

class PthFile final : public WeightFile {
 public:
  ~PthFile() override;

  static Expected<std::unique_ptr<PthFile>> open(const std::string& path);
  // The same from bytes in memory; `name` stands for the file in messages.
  static Expected<std::unique_ptr<PthFile>> open_memory(std::vector<uint8_t> bytes,
                                                        const std::string& name);

  std::string_view format() const override { return "pytorch"; }
  // A view into the storage (read on first use, CRC-checked), or for a
  // non-contiguous tensor a contiguous copy made once.
  Expected<const uint8_t*> data(size_t i) override;

 private:
  PthFile() = default;
  Status init();
  Expected<std::string> read_small_entry(const std::string& entry, size_t limit);
  Expected<const uint8_t*> storage(const std::string& key);

  struct zip* zip_ = nullptr;
  std::vector<uint8_t> memory_;         // backs zip_ for open_memory
  std::string prefix_;                  // "<name>/"
  std::vector<PickledTensor> pickled_;  // parallel to tensors_
  std::map<std::string, HostBuffer> storages_;
  std::map<size_t, HostBuffer> contiguous_copies_;
};

}  // namespace flick
