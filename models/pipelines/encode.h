// The `encode` pipeline: no weights; turns a sequence of PNG/JPEG files or a
// flick frame archive (.zst) into whatever the job's [output] asks for.
#pragma once

#include <string>
#include <vector>

#include "models/pipelines/pipeline.h"
#include "runtime/status.h"

namespace flick {

// Exactly one of frame_files / archive is set. The jobs code resolves the
// glob (sorted by name) and checks the paths against the allowed roots.
struct EncodeInput {
  std::vector<std::string> frame_files;  // PNG or JPEG, in display order
  std::string archive;                   // a flick .zst frame archive
  double fps = 0;                        // > 0; with an archive, 0 means the archive's
};

class EncodePipeline {
 public:
  // Every file exists and its header decodes, and all frames share one size;
  // the message names the first offending file.
  Status validate(const EncodeInput& input) const;
  // Streams the frames one at a time into the sink (begin, write each,
  // finish), reports progress after every frame and stops with interrupted()
  // when ctx.stop is set.
  Status run(const EncodeInput& input, FrameSink& sink, const RunContext& ctx) const;
};

}  // namespace flick
