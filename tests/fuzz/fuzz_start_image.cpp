// libFuzzer: a start image (PNG or JPEG, detected by signature) through the
// real preprocessing of a Matrix-Game job: decode with the size limits, EXIF
// / XMP orientation, centre crop and Pillow-exact resize to 640x352. Also the
// header-only read the encode kind uses to check frame sizes.
#include <cstdint>
#include <cstdlib>

#include "io/image.h"
#include "models/pipelines/matrix_game.h"
#include "runtime/log.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  flick::log_set_level(flick::LogLevel::kError);  // orientation warnings would flood the output
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  flick::fuzz::MemFile file(data, size);
  auto info = flick::read_image_info(file.path());
  if (info.ok() && (info->width < 1 || info->height < 1 || info->width > flick::kMaxImageSide ||
                    info->height > flick::kMaxImageSide)) {
    std::abort();
  }
  auto img = flick::prepare_mg2_image(file.path(), 640, 352);
  if (img.ok() && (img->width != 640 || img->height != 352 || img->rgb.size() != 640 * 352 * 3)) {
    std::abort();
  }
  return 0;
}
