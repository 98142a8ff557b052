#include "models/pipelines/tensor_dump.h"

#include <memory>
#include <vector>

#include "runtime/backend.h"
#include "runtime/weights/safetensors.h"

namespace flick {

TensorDump::TensorDump(std::string path, std::string skip)
    : path_(std::move(path)), skip_(std::move(skip)) {}

TensorDump::Tap TensorDump::tap() {
  return [this, copier = std::shared_ptr<Backend>(make_cpu_backend())](std::string_view name,
                                                                       const Tensor& t) {
    if (!skip_.empty() && name.find(skip_) != std::string_view::npos) return;
    OwnedTensor copy(t.dtype, t.shape);
    copier->copy(t, copy.t);  // taps may be strided views
    tensors_.insert_or_assign(std::string(name), std::move(copy));
  };
}

Status TensorDump::write() const {
  std::vector<SafetensorsTensor> out;
  out.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) out.push_back(SafetensorsTensor::from_tensor(name, t.t));
  Status s = write_safetensors(path_, out, {{"writer", "flick FLICK_DUMP"}});
  if (!s.ok()) return Status(s.code(), "FLICK_DUMP: " + s.message());
  return s;
}

}  // namespace flick
