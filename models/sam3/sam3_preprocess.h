// EfficientSAM3's image preprocessing (sam3/model/sam3_image_processor.py
// Sam3Processor.transform), bit for bit with torch on the CPU:
//
//   v2.ToDtype(uint8, scale=True)            // the frame is uint8 already
//   v2.Resize((S, S))                        // bilinear, antialias=True, on the uint8 tensor
//   v2.ToDtype(float32, scale=True)          // v.to(float32).mul_(1 / 255)
//   v2.Normalize(mean=0.5, std=0.5)          // (x - 0.5) / 0.5
//
// The resize is torch's uint8 antialiased bilinear kernel (ATen
// native/cpu/UpSampleKernel.cpp -> UpSampleKernelAVXAntialias.h, ported from
// Pillow-SIMD), which is not Pillow's: the taps are Pillow's triangle filter
// widened by the scale when shrinking and normalised to sum 1 (in double),
// but they are quantised to int16 with a precision chosen per axis from the
// largest tap (the most bits that keep 2 * max tap below 2^15), not
// Pillow's fixed 22 bits; the horizontal pass always runs first, each pass
// rounds (+ 2^(p-1), >> p) and clamps to uint8, and a pass whose size does
// not change is skipped (equal sizes copy). This is host-side uint8 work on
// the decoded frame, as io/image_preprocess.cpp does for Pillow.
//
// The oracle is torch 2.15 with its AVX2 or AVX-512 CPU capability (flick
// needs AVX2): both run the same int16 kernel. Under
// ATEN_CPU_CAPABILITY=default (no SIMD) torch takes its generic separable
// path and differs from both by +-1 on a few percent of the values.
#pragma once

#include <cstdint>

#include "io/frame.h"
#include "runtime/tensor.h"

namespace flick {

// torchvision.transforms.v2.functional.resize(img, [height, width],
// InterpolationMode.BILINEAR, antialias=True) of a uint8 [3, H, W] tensor on
// the CPU. FLICK_CHECKs width, height >= 1 and a non-empty source.
Frame sam3_resize(const FrameView& src, int width, int height);

// The normalised value of a uint8 channel value: (float(v) * float(1/255) - 0.5) / 0.5 in fp32.
float sam3_normalize(uint8_t v);

// The whole transform: resize to S x S (S = out.dim(2)), then normalise into
// `out`, a contiguous CPU tensor [1, 3, S, S] F32 or BF16 (rounded to nearest
// even from the fp32 value, as .to(torch.bfloat16)).
void sam3_preprocess(const FrameView& frame, const Tensor& out);

}  // namespace flick
