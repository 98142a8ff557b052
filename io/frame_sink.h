// Where pipelines put the frames they produce (io/output_sink.h writes them
// to files; tests collect them in memory).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/frame.h"
#include "runtime/status.h"

namespace flick {

// One file a sink wrote, relative to its output directory.
struct OutputFile {
  std::string name;  // "walk.mp4", "frame_000012.png"
  int64_t bytes = 0;
};

// The pipeline calls begin() once, write() for every frame in order, and
// finish() after the last one; on an error or a stop it returns without
// finish() and the sink's destructor discards unfinished files.
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  // Called once before the first frame. total_frames <= 0: not known.
  virtual Status begin(int width, int height, double fps, int64_t total_frames) = 0;
  virtual Status write(const FrameView& frame) = 0;
  // Flush and close everything; after this the outputs are complete and
  // durable.
  virtual Status finish() = 0;
  // A file of the pipeline's own beside the frames (sam3-segment: label
  // PNGs, detections.jsonl), between begin() and finish(): written
  // atomically into the output directory and listed in outputs(). `name` is
  // a plain file name. Sinks that write no files ignore it.
  virtual Status write_side_file(const std::string& name, const void* data, size_t size) {
    return ok_status();
  }
  // Appends to a side file that grows with the job (sam3-segment's
  // detections.jsonl), so the pipeline holds none of it in memory: written
  // under a temporary name as it comes, and like the videos it appears under
  // `name` (fsynced, listed in outputs()) only at finish(); a job that stops
  // before leaves none of it. Sinks that write no files ignore it.
  virtual Status append_side_file(const std::string& name, const void* data, size_t size) {
    return ok_status();
  }
  // The files written so far (all of them after finish()), in the order they
  // were completed. Sinks that write no files return none.
  virtual std::vector<OutputFile> outputs() const { return {}; }
};

}  // namespace flick
