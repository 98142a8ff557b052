// Recognises an EfficientSAM3 checkpoint as users have it (the released
// efficient_sam3_repvit-m0_9_mobileclip_s1.pth and the other student
// variants the reference builder supports): locates the parts whatever
// wrapper prefixes the file uses ("detector.", "student_trunk."), detects
// every hyper-parameter from shapes, checks each tensor of the image path
// against the layout those imply, and recognises the tensors the image path
// does not use (the original SAM3 ViT trunk, the SAM2 neck, the tracker),
// which are skipped, not errors.
//
// Every problem is reported, one line each, naming the tensor:
//   <name>: missing
//   <name>: expected shape [..], file has [..]
//   <name>: unexpected tensor (not part of EfficientSAM3)
#pragma once

#include <cstddef>
#include <string>

#include "models/sam3/sam3_layout.h"
#include "runtime/status.h"
#include "runtime/weights/weight_store.h"

namespace flick {

struct Sam3Checkpoint {
  // Prefixes as the flattened names have them: the released file is
  // {"model": state_dict}, so its detector is "model.detector.".
  std::string detector_prefix;
  std::string trunk_prefix;  // the ImageStudentEncoder's: "...vision_backbone.trunk.model."
  std::string text_prefix;   // the TextStudentEncoder's: "...language_backbone."
  RepVitConfig trunk;
  MobileClipTextConfig text;
  Sam3HeadConfig head;
  size_t image_tensors = 0;    // tensors of the image path (1277 in the released file)
  size_t skipped_tensors = 0;  // recognised, unused by the image path (751)

  // Inspects every tensor of `store` and marks them used (check_all_used
  // passes afterwards). The error lists every problem found.
  static Expected<Sam3Checkpoint> inspect(const WeightStore& store);
};

}  // namespace flick
