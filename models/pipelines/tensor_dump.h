// FLICK_DUMP: a pipeline's named intermediates written to one safetensors
// file, so a run can be diffed against the reference framework tensor by
// tensor (tools/mg2_goldens.py writes the same names).
//
//   TensorDump dump(dir + "/" + job_id + ".safetensors");
//   pipeline.run(input, sink, ctx, dump.tap());
//   FLICK_TRY(dump.write());
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "runtime/status.h"
#include "runtime/tensor.h"

namespace flick {

class TensorDump {
 public:
  using Tap = std::function<void(std::string_view name, const Tensor& t)>;

  // skip: intermediates whose name contains this are not kept (e.g.
  // "frames": decoded video is large and already in the job's outputs).
  explicit TensorDump(std::string path, std::string skip = {});

  // Keeps a contiguous copy of every tensor it sees (in its dtype); a name
  // seen twice keeps the last value.
  Tap tap();
  // Writes the file (atomically); the message names the path on failure.
  Status write() const;
  size_t size() const { return tensors_.size(); }

 private:
  std::string path_, skip_;
  std::map<std::string, OwnedTensor, std::less<>> tensors_;
};

}  // namespace flick
