// Start-image preprocessing, bit-exact with what the PyTorch references do to
// a PIL image: diffusers' load_image, centre crops with Image.crop, Pillow's
// Image.resize and torchvision's ToTensor + Normalize. Checked against
// Pillow 13 / torchvision 0.29 / torch 2.15 by tests/io/test_image_preprocess.cpp.
//
// Matrix-Game 2.0 (inference.py: load_image, _resizecrop(352, 640),
// v2.Resize((352, 640)), ToTensor, Normalize(0.5, 0.5), .to(bfloat16)):
//
//   FLICK_ASSIGN_OR_RETURN(Frame img, load_image_rgb(path));
//   FLICK_ASSIGN_OR_RETURN(img, center_crop_to_aspect(img.view(), 640, 352));
//   img = pil_resize(img.view(), 640, 352, PilFilter::kBilinear);
//   to_normalized_chw(img.view(), {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}, image_bf16);
//
// (Its CLIP input is made later from that tensor by torch's bicubic
// interpolate, a tensor op, not by Pillow.)
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "io/frame.h"
#include "io/image_orientation.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace flick {

// diffusers.utils.load_image: decodes a PNG or JPEG (detected by signature)
// to RGB8 as Image.convert("RGB") does, then applies its EXIF / XMP
// orientation (ImageOps.exif_transpose). Malformed metadata is logged as a
// warning naming the file and ignored; errors name the file.
Expected<Frame> load_image_rgb(const std::string& path);
// The same from the bytes of a file (`name` for messages), for callers that
// open the file themselves.
Expected<Frame> decode_image_rgb(const std::vector<uint8_t>& data, const std::string& name);

// A pixel rectangle [x0, x1) x [y0, y1).
struct CropBox {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  int width() const { return x1 - x0; }
  int height() const { return y1 - y0; }
  bool operator==(const CropBox&) const = default;
};

// The box Matrix-Game's _resizecrop cuts to reach aspect_w:aspect_h: keep the
// full width if the image is relatively taller (h / w > aspect_h / aspect_w),
// else the full height; the other side becomes int(side * ratio), centred at
// float coordinates that Image.crop rounds half to even. So the result can be
// one pixel larger than int(side * ratio): 97x62 crops to 97x54, not 97x53.
// May be empty for extreme aspect ratios.
CropBox center_crop_box(int width, int height, int aspect_w, int aspect_h);

// A copy of the box's pixels; the box must lie inside src (FLICK_CHECK).
Frame crop(const FrameView& src, const CropBox& box);

// crop(src, center_crop_box(...)); an error if the crop would be empty.
Expected<Frame> center_crop_to_aspect(const FrameView& src, int aspect_w, int aspect_h);

// Pillow's resampling filters (Image.Resampling) with their support radius in
// source pixels at scale 1: box 0.5, bilinear (triangle) 1, hamming 1,
// bicubic (a = -0.5) 2, lanczos (a = 3) 3.
enum class PilFilter { kBox, kBilinear, kHamming, kBicubic, kLanczos };

// Image.resize((width, height), filter) of an RGB image, bit for bit: the
// separable, antialiased convolution of Pillow's Resample.c (filter support
// widened by the scale factor when shrinking, taps normalised to sum 1 and
// quantised to 22-bit fixed point, rounded and clipped to uint8 after each
// pass). An axis whose size does not change is not filtered, and equal sizes
// return a copy, as in Pillow. The pass order is Pillow 13's: vertical first
// when the height shrinks by more than twice as many pixels as the width,
// else horizontal first. (Pillow <= 12 always went horizontal first; the two
// agree on every resize that keeps an aspect ratio below 2:1 tall, such as
// Matrix-Game's 640:352 crop-then-resize.) FLICK_CHECKs width, height >= 1.
Frame pil_resize(const FrameView& src, int width, int height, PilFilter filter);

// torchvision ToTensor + Normalize(mean, std): out[c, y, x] =
// (float(v) / 255 - mean[c]) / std[c] in fp32, stored as F32 or rounded to
// BF16 (round to nearest even, as tensor.to(torch.bfloat16)). `out` must be a
// contiguous CPU tensor of shape [3, height, width] (FLICK_CHECK).
void to_normalized_chw(const FrameView& src, const std::array<float, 3>& mean,
                       const std::array<float, 3>& std, const Tensor& out);

}  // namespace flick
