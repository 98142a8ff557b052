// Pillow's Image.resize for 8-bit RGB images, bit for bit (libImaging
// Resample.c; Pillow 11.1 as FramePack pins it, unchanged through 13.0):
// the separable convolution with a filter stretched by the scale when
// downscaling, double-precision weights normalised per output pixel, then
// rounded to 22-bit fixed point; a horizontal pass into an 8-bit
// intermediate (only the source rows the vertical pass reads), then a
// vertical pass; each sum starts at 0.5 (rounding) and is clipped to 0..255.
// A pass whose size does not change is skipped (as Pillow does).
//
// FramePack uses it twice: LANCZOS in resize_and_center_crop to the bucket
// (diffusers_helper/utils.py:45-60) and BICUBIC in SiglipImageProcessor's
// resize to 384 x 384 (transformers image_transforms.resize -> PIL).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/status.h"

namespace flick::siglip {

enum class PilFilter { Bicubic, Lanczos };

// src: interleaved RGB [height, width, 3]; returns [out_height, out_width, 3].
// Image.resize((out_width, out_height), filter) with box = the whole image and
// reducing_gap = None; the same size returns a copy (Image.resize does).
Expected<std::vector<uint8_t>> pil_resize_rgb(std::span<const uint8_t> src, int64_t width,
                                              int64_t height, int64_t out_width, int64_t out_height,
                                              PilFilter filter);

}  // namespace flick::siglip
