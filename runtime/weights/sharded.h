// Sharded safetensors checkpoints: <name>.safetensors.index.json maps every
// tensor to the shard file holding it:
//   {"metadata": {"total_size": ...}, "weight_map": {"tensor": "model-00001-of-00002.safetensors"}}
// The map and the shards must agree both ways, and shard paths must stay
// inside the index's directory.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/weights/safetensors.h"

namespace flick {

struct ShardedCheckpoint {
  std::string index_path;
  std::map<std::string, std::string> metadata;           // the index's "metadata", values as text
  std::vector<std::unique_ptr<SafetensorsFile>> shards;  // in file-name order
};

// Reads the index, opens every shard it names and cross-checks them: each
// weight_map name exists in its shard, each tensor of each shard is in the
// weight_map (pointing at that shard).
Expected<ShardedCheckpoint> open_sharded(const std::string& index_path);

// Whether a file name looks like a sharded index ("*.index.json").
bool is_shard_index_path(const std::string& path);

}  // namespace flick
