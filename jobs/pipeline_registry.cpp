#include "jobs/pipeline_registry.h"

namespace flick {
namespace {

constexpr PipelineKind kKinds[] = {
    {"encode", "frames (a PNG/JPEG glob or a .zst frame archive) to video and frames, no weights",
     &create_encode_pipeline},
    {"matrix-game-2",
     "Matrix-Game 2.0: a start image and a keyboard/mouse track to video (universal, gta_drive, "
     "templerun)",
     &create_matrix_game_pipeline},
    {"sam3-segment",
     "EfficientSAM3: text-prompted masks with stable object ids over frames or a video",
     &create_sam3_segment_pipeline},
    {"framepack-i2v", "FramePack: a start image and a prompt to a 30 fps video (original, f1)",
     &create_framepack_pipeline},
};

}  // namespace

std::span<const PipelineKind> pipeline_kinds() { return kKinds; }

const PipelineKind* find_pipeline_kind(std::string_view name) {
  for (const PipelineKind& k : kKinds) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

std::string pipeline_kind_names() {
  std::string out;
  for (const PipelineKind& k : kKinds) {
    if (!out.empty()) out += ", ";
    out += k.name;
  }
  return out;
}

bool read_backend_key(TableReader& entry) {
  if (!entry.has("backend")) return true;
  const auto b = entry.choice("backend", Need::kOptional, {"cpu", "cuda"});
  if (b && *b == 1) {
    entry.error("backend",
                "no pipeline runs on the CUDA backend yet (its ops are tested on a GPU; the "
                "models still keep their activations in host memory)",
                "not available yet", {"use backend = \"cpu\""});
  }
  return b == 0;
}

}  // namespace flick
