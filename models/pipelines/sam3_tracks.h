// What sam3-segment makes of each frame's detections: stable object ids
// across frames, and the per-frame outputs (label map, JSON line, overlay).
//
// Tracker: a simple association in plain C++ (the SAM3 memory tracker is a
// later step). Per prompt, each detection of the current frame is matched to
// an object of the same prompt seen in the last `max_missed + 1` processed
// frames by mask IoU, greedily, highest IoU first (ties: lower object id,
// then lower detection index), a pair counting only with IoU >= min_iou.
// Matched detections take the object's id (and become its latest mask);
// unmatched detections get new ids, 1, 2, 3 ... in order of appearance
// (prompt order, then detection order); ids are never reused. Objects not
// matched for more than max_missed processed frames are forgotten.
//
// Label map: pixel = object id, 0 = none; where masks overlap, the
// detection with the higher score wins (equal scores: the later prompt /
// detection). Ids above 65535 (io/label_png.h) are an error.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "io/boxed_mask.h"
#include "io/coco_rle.h"
#include "io/frame.h"
#include "io/label_png.h"
#include "io/overlay.h"
#include "runtime/status.h"

namespace flick {

// One detection of a frame, its mask binarised (prob > 0.5).
struct Sam3Object {
  int64_t id = 0;  // set by the tracker
  int prompt = 0;  // index into the job's prompts
  float score = 0;
  std::array<float, 4> box_xyxy{};  // pixels
  BoxedMask mask;                   // at the frame's size
};

struct Sam3TrackerOptions {
  float min_iou = 0.3f;
  int max_missed = 5;
};

class Sam3Tracker {
 public:
  explicit Sam3Tracker(Sam3TrackerOptions options = {}) : options_(options) {}
  // Sets the ids of one processed frame's objects (all prompts).
  Status assign(std::vector<Sam3Object>& objects);
  int64_t ids_issued() const { return next_id_ - 1; }

 private:
  struct Track {
    int64_t id;
    int prompt;
    int64_t last_seen;  // processed frame index
    BoxedMask mask;
  };
  Sam3TrackerOptions options_;
  std::vector<Track> tracks_;
  int64_t next_id_ = 1;
  int64_t frame_ = 0;
};

// The label map of one frame (see the top of this file).
Expected<LabelMap> sam3_label_map(const std::vector<Sam3Object>& objects, int width, int height);

// One line of detections.jsonl (without the newline):
// {"frame": k, "source_frame": i, "width": W, "height": H, "objects": [{"id",
//  "prompt", "prompt_index", "score", "box": [x0, y0, x1, y1], "area",
//  "rle": {"size": [H, W], "counts": "..."}}]}, objects in prompt order,
// then in the model's order (ascending query index).
std::string sam3_json_line(int64_t frame, int64_t source_frame,
                           const std::vector<Sam3Object>& objects,
                           const std::vector<std::string>& prompts, int width, int height);

// The overlay: each mask tinted with its id's colour (alpha 0.45), the box
// outlined in it, "<prompt> <id> <score>" above the box on a dark plate.
Rgb sam3_id_color(int64_t id);
void draw_sam3_overlay(Frame& frame, const std::vector<Sam3Object>& objects,
                       const std::vector<std::string>& prompts);

}  // namespace flick
