// The FrameSink that writes a job's [output] into a directory:
//   frames   frame_000000.png / frame_000000.jpg ... or frames.zst (archive)
//   video    <video.file> (MP4 H.264 or MKV FFV1)
//   contact  contact_sheet.png
//   overlay  <overlay.file>: the frames as annotated by a FrameAnnotator
// Every file is written under a temporary name, fsynced and renamed; finish()
// then fsyncs the directory, so after it returns everything is durable. The
// jobs code passes "<output dir>.partial/" and renames that into place itself.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "io/frame_sink.h"
#include "io/output_spec.h"
#include "runtime/status.h"

namespace flick {

inline constexpr const char* kContactSheetName = "contact_sheet.png";
inline constexpr const char* kFrameArchiveName = "frames.zst";

// Ranges of every field and name clashes (video file vs the other outputs);
// messages name the key ("output.frames.quality must be 1..100, got 0").
Status validate_output_spec(const OutputSpec& spec);

// "frame_000012.png" / ".jpg" for frame 12.
std::string frame_file_name(int64_t index, FrameFormat format);

// Draws on a copy of frame `index` (0-based, in write order) for the
// overlay video.
using FrameAnnotator = std::function<void(int64_t index, Frame& frame)>;

// Creates `dir` if it does not exist (its parent must); spec.dir is not used.
// `annotate` is required when spec.overlay is set.
Expected<std::unique_ptr<FrameSink>> make_output_sink(const OutputSpec& spec,
                                                      const std::string& dir,
                                                      FrameAnnotator annotate = {});

}  // namespace flick
