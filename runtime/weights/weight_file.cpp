#include "runtime/weights/weight_file.h"

#include <algorithm>

namespace flick {

std::string shape_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

std::string TensorInfo::shape_str() const { return flick::shape_str(shape); }

int64_t WeightFile::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  if (it == tensors_.end() || it->name != name) return -1;
  return it - tensors_.begin();
}

Status WeightFile::check_unique_names() const {
  for (size_t i = 1; i < tensors_.size(); ++i)
    if (tensors_[i].name == tensors_[i - 1].name)
      return invalid_input(path_ + ": tensor '" + tensors_[i].name + "' appears twice");
  return ok_status();
}

}  // namespace flick
