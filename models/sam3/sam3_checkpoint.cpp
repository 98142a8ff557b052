#include "models/sam3/sam3_checkpoint.h"

#include <string>
#include <string_view>
#include <vector>

namespace flick {
namespace {

// The prefix before the one name ending in `anchor`, or an error.
Expected<std::string> locate(const std::vector<std::string>& names, std::string_view anchor,
                             std::string_view what) {
  std::vector<std::string> found;
  for (const std::string& n : names)
    if (n.ends_with(anchor) &&
        (n.size() == anchor.size() || n[n.size() - anchor.size() - 1] == '.'))
      found.push_back(n.substr(0, n.size() - anchor.size()));
  if (found.empty())
    return not_found("not an EfficientSAM3 checkpoint: no " + std::string(what) + " (no tensor *" +
                     std::string(anchor) + ")");
  if (found.size() > 1)
    return invalid_input("two " + std::string(what) + "s in one checkpoint: " + found[0] +
                         std::string(anchor) + " and " + found[1] + std::string(anchor));
  return found[0];
}

// The image path never reads these (see sam3_layout.h). `det` is the
// detector's prefix; the tracker sits beside it ("model.detector." and
// "model.tracker." when the file is {"model": state_dict}, flattened).
bool skipped(std::string_view name, const std::string& det) {
  std::string_view root = det;
  if (root.ends_with("detector.")) root.remove_suffix(9);
  if (name.starts_with(std::string(root) + "tracker.")) return true;
  if (!name.starts_with(det)) return false;
  name.remove_prefix(det.size());
  if (name.starts_with("backbone.vision_backbone.sam2_convs.")) return true;
  constexpr std::string_view vit = "backbone.vision_backbone.trunk.";
  if (!name.starts_with(vit)) return false;
  name.remove_prefix(vit.size());
  return name.starts_with("patch_embed.") || name.starts_with("pos_embed") ||
         name.starts_with("ln_pre.") || name.starts_with("blocks.");
}

}  // namespace

Expected<Sam3Checkpoint> Sam3Checkpoint::inspect(const WeightStore& store) {
  const std::vector<std::string> names = store.names();
  Sam3Checkpoint c;
  FLICK_ASSIGN_OR_RETURN(c.detector_prefix,
                         locate(names, "transformer.decoder.query_embed.weight", "SAM3 decoder"));
  FLICK_ASSIGN_OR_RETURN(c.trunk_prefix, locate(names, "backbone.model.features.0.0.c.weight",
                                                "RepViT student trunk"));
  FLICK_ASSIGN_OR_RETURN(
      c.text_prefix, locate(names, "encoder.embedding_layer.weight", "MobileCLIP text encoder"));
  FLICK_ASSIGN_OR_RETURN(c.trunk, RepVitConfig::detect(store.view(c.trunk_prefix)));
  FLICK_ASSIGN_OR_RETURN(c.text, MobileClipTextConfig::detect(store.view(c.text_prefix)));
  FLICK_ASSIGN_OR_RETURN(c.head, Sam3HeadConfig::detect(store.view(c.detector_prefix)));

  std::vector<Sam3Layout> parts;
  parts.push_back(c.trunk.layout(c.trunk_prefix));
  parts.push_back(c.head.neck_layout(c.detector_prefix));
  parts.push_back(c.text.layout(c.text_prefix));
  parts.push_back(c.head.head_layout(c.detector_prefix));

  const WeightView root = store.root();
  std::vector<std::string> problems;
  for (const Sam3Layout& part : parts) {
    for (const Sam3LayoutTensor& t : part) {
      const TensorInfo* info = root.info(t.name);
      // BatchNorm's step counter is training state: optional, any type.
      const bool optional = t.name.ends_with(".num_batches_tracked");
      if (!info) {
        if (!optional) problems.push_back(t.name + ": missing");
        continue;
      }
      root.mark_used(t.name);
      ++c.image_tensors;
      if (optional) continue;
      if (info->shape != t.shape) {
        problems.push_back(t.name + ": expected shape " + shape_str(t.shape) + ", file has " +
                           shape_str(info->shape));
      } else if (!info->type->dtype ||
                 !DTypeSet({DType::F32, DType::BF16, DType::F16}).contains(*info->type->dtype)) {
        problems.push_back(t.name +
                           ": expected a floating-point tensor (F32, BF16 or F16), file has " +
                           std::string(info->type->name));
      }
    }
  }
  for (const std::string& n : root.unused()) {
    if (skipped(n, c.detector_prefix)) {
      root.mark_used(n);
      ++c.skipped_tensors;
    } else {
      problems.push_back(n + ": unexpected tensor (not part of EfficientSAM3)");
    }
  }
  if (!problems.empty()) {
    std::string file =
        store.sources().empty() ? std::string("checkpoint") : store.sources()[0].path;
    std::string msg = file + ": " + std::to_string(problems.size()) + " problem" +
                      (problems.size() == 1 ? "" : "s") +
                      " with the EfficientSAM3 checkpoint (RepViT-" + c.trunk.name +
                      ", MobileCLIP-" + c.text.name + "):";
    for (const std::string& p : problems) msg += "\n  " + p;
    return invalid_input(msg);
  }
  return c;
}

}  // namespace flick
