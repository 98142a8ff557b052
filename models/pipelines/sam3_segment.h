// The `sam3-segment` pipeline: text-prompted concept segmentation of a frame
// sequence with EfficientSAM3 (models/sam3/sam3_image_model.h), ids kept
// across frames by models/pipelines/sam3_tracks.h.
//
// Input: a glob of PNG/JPEG files (sorted by name), a flick .zst frame
// archive, or a video file (io/video_reader.h, decoded as it streams); every
// `every_n`-th source frame (0, n, 2n, ...) is processed. Per processed frame
// k (source frame i = k * every_n): encode_image once, detect per prompt
// (prob > threshold), masks binarised at 0.5, ids assigned; then
//   label_%06d.png      16-bit label map, pixel = object id (0: none)
//   one line of detections.jsonl (sam3_json_line), appended as the frame ends
//                       (the file appears whole when the job finishes)
//   the frame itself to the sink (frames / video / contact sheet), and the
//   overlay video's copy drawn by the annotator (sam3_overlay_annotator).
// Output rate: the source's (input.fps, the archive's or the video's, 25 for
// a file glob without one) divided by every_n, so the videos keep the
// source's duration. Progress and the stop token are checked per frame.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/output_sink.h"
#include "io/video_reader.h"
#include "models/pipelines/encode.h"
#include "models/pipelines/pipeline.h"
#include "models/pipelines/sam3_tracks.h"
#include "models/sam3/postprocess.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace flick {

inline constexpr const char* kSam3DetectionsName = "detections.jsonl";
inline constexpr double kSam3DefaultFps = 25;
inline constexpr size_t kSam3MaxPrompts = 64;
inline constexpr size_t kSam3MaxPromptBytes = 256;
// `flick run --dump`: intermediates of the first processed frames only (a
// frame's image side alone is tens of MB at 1008 x 1008).
inline constexpr int64_t kSam3DumpFrames = 2;

std::string sam3_label_file_name(int64_t frame);  // "label_000012.png"

// What the frame loop needs of the model; Sam3ImageModel through an adapter
// (jobs/kind_sam3_segment.cpp), a fake in tests.
class Sam3FrameModel {
 public:
  using Tap = std::function<void(std::string_view name, const Tensor& t)>;
  virtual ~Sam3FrameModel() = default;
  virtual Status encode_image(const FrameView& frame, const Tap& tap) = 0;
  virtual Expected<Sam3Detections> detect(std::string_view prompt, float threshold,
                                          const Tap& tap) = 0;
};

struct Sam3SegmentInput {
  // Exactly one source.
  std::vector<std::string> frame_files;  // PNG / JPEG in display order
  std::string archive;                   // .zst frame archive
  std::string video;                     // any container/codec libav decodes
  InputOpener open;                      // empty: open(2) by path
  double fps = 0;  // the source's rate; 0: the archive's / video's own (25 for files)
  VideoReaderLimits video_limits;

  std::vector<std::string> prompts;  // 1..64, each 1..256 bytes
  float threshold = 0.5f;            // [0, 1); 0 keeps every query
  int64_t every_n = 1;               // >= 1
};

// The checks of the job without the model: prompts, threshold, every_n, and
// the source (every file's header and one size; the archive's seek table;
// the video's stream header). Messages name the file or the field.
Status validate_sam3_segment_input(const Sam3SegmentInput& input);

// What the overlay annotator draws: the objects of the frame last written.
struct Sam3OverlayState {
  int64_t frame = -1;  // the output index these objects belong to
  std::vector<Sam3Object> objects;
  std::vector<std::string> prompts;
};
FrameAnnotator sam3_overlay_annotator(std::shared_ptr<const Sam3OverlayState> state);

struct Sam3SegmentStats {
  int64_t frames = 0;      // processed
  int64_t detections = 0;  // over all frames and prompts
  int64_t ids = 0;         // distinct object ids
};

// Runs the job (see the top of this file). `overlay` may be null; `tap`
// sees the model's intermediates of the first kSam3DumpFrames frames as
// "f{k}.<name>" (image side) and "f{k}.p{j}.<name>" (prompt j).
Status run_sam3_segment(Sam3FrameModel& model, const Sam3SegmentInput& input, FrameSink& sink,
                        const RunContext& ctx, const std::shared_ptr<Sam3OverlayState>& overlay,
                        const Sam3FrameModel::Tap& tap = {}, Sam3SegmentStats* stats = nullptr);

}  // namespace flick
