// The `encode` pipeline: no weights; turns a sequence of PNG/JPEG files or a
// flick frame archive (.zst) into whatever the job's [output] asks for.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "models/pipelines/pipeline.h"
#include "runtime/status.h"

namespace flick {

// Opens one of the input's files for reading and returns a descriptor the
// caller then owns. The jobs code opens only beneath the input roots, so a
// path checked when the job was validated cannot be redirected by a
// symlink swapped in before the read.
using InputOpener = std::function<Expected<int>(const std::string& path)>;

// Exactly one of frame_files / archive is set. The jobs code resolves the
// glob (sorted by name) and checks the paths against the allowed roots.
struct EncodeInput {
  std::vector<std::string> frame_files;  // PNG or JPEG, in display order
  std::string archive;                   // a flick .zst frame archive
  double fps = 0;                        // > 0; with an archive, 0 means the archive's
  InputOpener open;                      // empty: open(2) by path
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
