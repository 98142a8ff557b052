// Hugging Face config.json next to a checkpoint: the fields it states that
// the tensor shapes also carry must agree with the shapes (flick detects
// hyper-parameters from shapes; the file only confirms them).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "runtime/status.h"

namespace flick {

// For each (key, value the shapes say): a key the file states must be that
// integer. The error names the file, the key and both values.
inline Status check_config_matches_shapes(
    const nlohmann::json& config, const std::string& config_path,
    std::initializer_list<std::pair<const char*, int64_t>> shapes_say) {
  for (const auto& [key, have] : shapes_say) {
    if (!config.contains(key)) continue;
    const nlohmann::json& v = config[key];
    if (!v.is_number_integer() || v.get<int64_t>() != have)
      return invalid_input(config_path + ": " + key + " is " + v.dump() +
                           " but the checkpoint's shapes say " + std::to_string(have));
  }
  return ok_status();
}

}  // namespace flick
