// The EXIF / XMP orientation of PNG and JPEG files, read and applied exactly
// as the PyTorch references see it: diffusers' load_image calls Pillow's
// ImageOps.exif_transpose, which takes the Orientation tag (274) of the EXIF
// block's first IFD, or else XMP's tiff:Orientation, and transposes the image
// for values 2..8. tests/io/test_image_preprocess.cpp checks every rule below
// against Pillow 13 on well-formed and malformed files.
//
// Where the metadata lives (Pillow's rules):
// - JPEG: APP1 segments that start "Exif\0\0" (several are concatenated);
//   XMP in APP1 "http://ns.adobe.com/xap/1.0/\0" (the last one).
// - PNG: the eXIf chunk (the last one, before or after IDAT), else
//   ImageMagick's "Raw profile type exif" text chunk (hex); XMP in the iTXt
//   chunk "XML:com.adobe.xmp". PNG ancillary chunks whose CRC is wrong are
//   skipped, as libpng does when decoding.
//
// Malformed metadata never fails a load: it counts as orientation 1, and the
// reason is reported so the caller can log it. (Pillow is inconsistent here:
// a JPEG whose EXIF header is broken loads unrotated, the same PNG raises.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "io/frame.h"
#include "runtime/status.h"

namespace flick {

// EXIF orientation values and the Pillow transpose each one applies:
// 1 none, 2 FLIP_LEFT_RIGHT, 3 ROTATE_180, 4 FLIP_TOP_BOTTOM, 5 TRANSPOSE,
// 6 ROTATE_270 (90 degrees clockwise), 7 TRANSVERSE, 8 ROTATE_90.
inline constexpr int kOrientationNone = 1;

// The Orientation entry of the first IFD of an EXIF block (a TIFF header and
// IFD, optionally preceded by one or two "Exif\0\0" markers, as Pillow
// strips them). nullopt: no entry could be read (Pillow then consults XMP).
// Otherwise 2..8, or 1 for an entry Pillow does not act on (a value outside
// 2..8 or not an integer, a BYTE/ASCII/UNDEFINED entry). An unreadable header
// (short, wrong magic, BigTIFF) is an error. Reads only inside [exif,
// exif + size); follows no IFD chain, so it cannot loop.
Expected<std::optional<int>> exif_orientation(const uint8_t* exif, size_t size);

// The orientation (1..8) that load_image applies to an encoded PNG or JPEG
// held in memory; 1 for other data. If the metadata is malformed the result
// is 1 and *problem (if given) says what is wrong; else *problem is cleared.
int image_orientation(const uint8_t* data, size_t size, std::string* problem = nullptr);

// The frame as Pillow's Image.transpose shows it for that orientation
// (orientations 5..8 swap width and height). FLICK_CHECKs 1 <= orientation <= 8.
Frame apply_orientation(const FrameView& src, int orientation);

}  // namespace flick
