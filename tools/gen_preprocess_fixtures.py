#!/usr/bin/env python3
"""Writes the fixtures of tests/io/test_image_preprocess.cpp (tests/data/io/preprocess)
with the real libraries the Matrix-Game 2.0 reference runs: Pillow (open,
ImageOps.exif_transpose, convert("RGB"), crop, resize), diffusers' load_image,
torchvision.transforms.v2 (Resize, ToTensor, Normalize) and torch (bf16 cast).

Inputs are synthetic images computed from integer formulas that the C++ test
reproduces (synthetic_rgb below and in the test), so only outputs are stored:

  synthetic_97x61.png        the formula's 97x61 image (proves both sides agree)
  resize/<filter>_<in>_<out>.png
                             Image.resize((w, h), filter) of synthetic(in)
  resize_random.txt          300 random shapes and filters: a weighted hash
                             of each Image.resize result
  pipeline.txt               per case: input size, seed, crop box, FNV-1a 64 of
                             the 640x352 RGB8 resize and of the [3,352,640]
                             bf16 tensor (little-endian bytes)
  pipeline_<case>_rows.png   rows 0, 1, 175, 176, 350, 351 of that resize
  start_*.jpg, start_*.png   whole files (4:2:0 JPEG, RGBA PNG, with EXIF
                             orientation); pipeline_files.txt: the same two
                             hashes for the reference run from the file
  normalize.txt              hex bits of ToTensor + Normalize for every u8
                             value: f32 and bf16, for mean/std 0.5 and ImageNet
  exif/*.jpg, exif/*.png     files with EXIF / XMP orientation, well-formed and
                             malformed; exif/expected.txt: the orientation
                             Pillow applies to each (or "raises")
  exif/<name>.rgb.png        load_image(<name>) for the well-formed files

Run: /work/venv/bin/python tools/gen_preprocess_fixtures.py
Needs: pillow, torch, torchvision, diffusers (Pillow 13.0.0, torchvision
0.29.2, torch 2.15, diffusers 0.42.1 wrote the committed files).
"""
import io
import pathlib
import struct
import warnings
import zlib

import numpy as np
import torch
from diffusers.utils import load_image
from PIL import Image, ImageOps
from torchvision.transforms import v2

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "io" / "preprocess"
M32 = 0xFFFFFFFF


# --- synthetic inputs (mirrored in the C++ test) --------------------------------

def synthetic_rgb(w, h, seed):
    """16x16 blocks cycling through hashed noise, a wrapping ramp and a 0/255
    checkerboard (full-range edges: bicubic and Lanczos overshoot and clip)."""
    y, x = np.mgrid[0:h, 0:w].astype(np.uint32)
    out = np.empty((h, w, 3), np.uint8)
    for c in range(3):
        v = x * np.uint32(0x9E3779B1) + y * np.uint32(0x85EBCA77)
        v = v + np.uint32((c * 0xC2B2AE3D + seed * 0x27D4EB2F) & M32)
        v ^= v >> np.uint32(15)
        v *= np.uint32(0x2C1B3C6D)
        v ^= v >> np.uint32(12)
        v *= np.uint32(0x297A2D39)
        v ^= v >> np.uint32(15)
        noise = v >> np.uint32(24)
        ramp = (x * np.uint32(3) + y * np.uint32(5) + np.uint32(40 * c)) & np.uint32(255)
        checker = ((x // 4 + y // 4) % 2) * np.uint32(255)
        block = (x // 16 + y // 16 + np.uint32(c)) % 3
        out[..., c] = np.where(block == 0, noise, np.where(block == 1, ramp, checker))
    return out


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


# --- resize ---------------------------------------------------------------------

FILTERS = {
    "box": Image.Resampling.BOX,
    "bilinear": Image.Resampling.BILINEAR,
    "hamming": Image.Resampling.HAMMING,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}

# (in_w, in_h, out_w, out_h): down, up, mixed, one axis only, a large factor,
# degenerate sizes.
RESIZE_CASES = [
    (97, 61, 40, 23),
    (31, 19, 97, 61),
    (97, 61, 30, 90),
    (97, 61, 97, 30),
    (97, 61, 50, 61),
    (700, 400, 64, 37),
    (13, 7, 1, 1),
    (1, 1, 5, 3),
    (5, 1, 2, 9),
    # Pillow 13's pass order: vertical first iff the height shrinks by more
    # than twice as many pixels as the width (31 - 20 > 2 * 5), not at the tie.
    (30, 31, 25, 20),
    (30, 30, 25, 20),
    (20, 60, 40, 10),
]
RANDOM_RESIZES = 300
RESIZE_SEED = 7


def weighted_hash(a):
    """sum(byte[i] * (2i + 1) * 0x9E3779B97F4A7C15) mod 2^64: every single-byte
    change alters it (odd weights), cheap in numpy and in C++."""
    b = a.reshape(-1).astype(np.uint64)
    i = np.arange(b.size, dtype=np.uint64)
    w = (i * np.uint64(2) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
    return int(np.sum(b * w, dtype=np.uint64))


def write_resize():
    d = OUT / "resize"
    d.mkdir(parents=True, exist_ok=True)
    for old in d.iterdir():
        old.unlink()
    for (iw, ih, ow, oh) in RESIZE_CASES:
        src = Image.fromarray(synthetic_rgb(iw, ih, RESIZE_SEED), "RGB")
        for name, f in FILTERS.items():
            dst = src.resize((ow, oh), f)
            dst.save(d / f"{name}_{iw}x{ih}_{ow}x{oh}.png", optimize=True)

    # Random shapes: small both ways, large factors down and up, and shapes
    # around the pass-order tie.
    rng = np.random.default_rng(2024)
    lines = ["# in_w in_h out_w out_h filter(0 box .. 4 lanczos) seed weighted_hash"]
    names = list(FILTERS)
    for k in range(RANDOM_RESIZES):
        kind = k % 4
        if kind == 0:
            iw, ih, ow, oh = (int(v) for v in rng.integers(1, 160, 4))
        elif kind == 1:
            iw, ih = (int(v) for v in rng.integers(100, 600, 2))
            ow, oh = (int(v) for v in rng.integers(1, 60, 2))
        elif kind == 2:
            iw, ih = (int(v) for v in rng.integers(1, 30, 2))
            ow, oh = (int(v) for v in rng.integers(60, 200, 2))
        else:
            iw = int(rng.integers(10, 150))
            ow = int(rng.integers(1, iw))
            oh = int(rng.integers(1, 100))
            ih = oh + 2 * (iw - ow) + int(rng.integers(-1, 2))
        f = int(rng.integers(0, 5))
        seed = int(rng.integers(0, 1 << 16))
        out = np.asarray(Image.fromarray(synthetic_rgb(iw, ih, seed), "RGB").resize(
            (ow, oh), FILTERS[names[f]]))
        lines.append(f"{iw} {ih} {ow} {oh} {f} {seed} {weighted_hash(out)}")
    (OUT / "resize_random.txt").write_text("\n".join(lines) + "\n")


# --- the Matrix-Game 2.0 start-image pipeline ----------------------------------

# (in_w, in_h, seed): wider and taller than 640:352, exact 2x down and up,
# identity, odd differences where banker's rounding changes the crop size.
PIPELINE_CASES = [
    (97, 61, 1),
    (97, 62, 2),
    (700, 400, 3),
    (1280, 720, 4),
    (320, 176, 5),
    (640, 352, 6),
    (352, 640, 7),
    (1000, 300, 8),
    (301, 1000, 9),
    (1919, 1080, 10),
    (643, 355, 11),
]
SAMPLE_ROWS = [0, 1, 175, 176, 350, 351]


def resizecrop(image, th, tw):
    # Matrix-Game-2/inference.py::_resizecrop, verbatim.
    w, h = image.size
    if h / w > th / tw:
        new_w = int(w)
        new_h = int(new_w * th / tw)
    else:
        new_h = int(h)
        new_w = int(new_h * tw / th)
    left = (w - new_w) / 2
    top = (h - new_h) / 2
    right = (w + new_w) / 2
    bottom = (h + new_h) / 2
    return image.crop((left, top, right, bottom)), (left, top, right, bottom)


FRAME_PROCESS = v2.Compose([
    v2.Resize(size=(352, 640), antialias=True),
    v2.ToTensor(),
    v2.Normalize(mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5]),
])
RESIZE_ONLY = v2.Resize(size=(352, 640), antialias=True)


def write_pipeline():
    lines = ["# name in_w in_h seed crop_x0 crop_y0 crop_x1 crop_y1 rgb_fnv1a64 bf16_fnv1a64"]
    for (w, h, seed) in PIPELINE_CASES:
        name = f"{w}x{h}"
        src = Image.fromarray(synthetic_rgb(w, h, seed), "RGB")
        cropped, box = resizecrop(src, 352, 640)
        # The box Pillow actually cut: Image.crop rounds each float coordinate
        # with round() (half to even). Recovered from the result, not assumed.
        x0, y0 = round(box[0]), round(box[1])
        assert cropped.size == (round(box[2]) - x0, round(box[3]) - y0)
        assert np.array_equal(np.asarray(cropped),
                              np.asarray(src)[y0:y0 + cropped.size[1], x0:x0 + cropped.size[0]])
        resized = np.asarray(RESIZE_ONLY(cropped))
        assert resized.shape == (352, 640, 3)
        tensor = FRAME_PROCESS(cropped).to(torch.bfloat16)
        assert tensor.shape == (3, 352, 640)
        bf16_bytes = tensor.contiguous().view(torch.int16).numpy().astype("<i2").tobytes()
        lines.append(f"{name} {w} {h} {seed} {x0} {y0} {x0 + cropped.size[0]} "
                     f"{y0 + cropped.size[1]} {fnv1a64(resized.tobytes()):016x} "
                     f"{fnv1a64(bf16_bytes):016x}")
        Image.fromarray(resized[SAMPLE_ROWS], "RGB").save(OUT / f"pipeline_{name}_rows.png",
                                                          optimize=True)
    (OUT / "pipeline.txt").write_text("\n".join(lines) + "\n")


def reference_start_image(path):
    """Matrix-Game-2/inference.py from the file on: load_image, _resizecrop,
    frame_process, .to(bfloat16). Returns (RGB8 after the resize, bf16 bytes)."""
    image, _ = resizecrop(load_image(str(path)), 352, 640)
    resized = np.asarray(RESIZE_ONLY(image))
    tensor = FRAME_PROCESS(image).to(torch.bfloat16)
    return resized, tensor.contiguous().view(torch.int16).numpy().astype("<i2").tobytes()


def write_pipeline_files():
    """Whole files through the reference: a 4:2:0 JPEG with odd sizes and
    EXIF orientation 6 (portrait after rotation), an RGBA PNG with orientation
    3 in an eXIf chunk (alpha dropped)."""
    jpeg = io.BytesIO()
    Image.fromarray(synthetic_rgb(203, 150, 12), "RGB").save(
        jpeg, "JPEG", quality=90, subsampling=2)
    jpeg = jpeg.getvalue()
    jpeg = jpeg[:2] + exif_app1(tiff([(ORI, 3, 1, short_field(6))])) + jpeg[2:]
    (OUT / "start_420_orientation6.jpg").write_bytes(jpeg)
    rgba = np.dstack([synthetic_rgb(150, 90, 13), synthetic_rgb(150, 90, 14)[..., :1]])
    png = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(png, "PNG", exif=tiff([(ORI, 3, 1, short_field(3))]))
    (OUT / "start_rgba_orientation3.png").write_bytes(png.getvalue())
    lines = ["# file rgb_fnv1a64 (640x352 RGB8 after the resize) bf16_fnv1a64 ([3,352,640])"]
    for name in ("start_420_orientation6.jpg", "start_rgba_orientation3.png"):
        resized, bf16 = reference_start_image(OUT / name)
        lines.append(f"{name} {fnv1a64(resized.tobytes()):016x} {fnv1a64(bf16):016x}")
    (OUT / "pipeline_files.txt").write_text("\n".join(lines) + "\n")


# --- ToTensor + Normalize --------------------------------------------------------

NORMALIZE_CASES = {
    "half": ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5]),
    "imagenet": ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
}


def write_normalize():
    ramp = np.repeat(np.arange(256, dtype=np.uint8)[None, :, None], 3, axis=2)  # [1, 256, 3]
    lines = ["# name channel then 256 f32 bit patterns, then 256 bf16 bit patterns (hex)"]
    for name, (mean, std) in NORMALIZE_CASES.items():
        t = v2.Compose([v2.ToTensor(), v2.Normalize(mean=mean, std=std)])(
            Image.fromarray(ramp, "RGB"))
        assert t.dtype == torch.float32 and t.shape == (3, 1, 256)
        f32 = t.view(torch.int32).numpy().astype(np.uint32)
        bf16 = t.to(torch.bfloat16).view(torch.int16).numpy().astype(np.uint16)
        for c in range(3):
            lines.append(f"{name} {c} f32 " + " ".join(f"{v:08x}" for v in f32[c, 0]))
            lines.append(f"{name} {c} bf16 " + " ".join(f"{v:04x}" for v in bf16[c, 0]))
    (OUT / "normalize.txt").write_text("\n".join(lines) + "\n")


# --- EXIF / XMP orientation -----------------------------------------------------

def base_image():
    # 6x4, every pixel distinct: each of the 8 orientations gives another image.
    rng = np.random.default_rng(99)
    return rng.integers(0, 256, (4, 6, 3), dtype=np.uint8)


def tiff(entries, order="<", ifd_offset=8, extra=b"", next_ifd=0, magic=None, count=None):
    """A TIFF blob with one IFD at ifd_offset. entries: (tag, type, count, 4-byte
    field as bytes or int). extra: bytes appended after the IFD."""
    head = (b"II" if order == "<" else b"MM") + struct.pack(order + "H", 42)
    if magic is not None:
        head = magic
    head += struct.pack(order + "L", ifd_offset)
    body = bytearray(head)
    if ifd_offset <= 64:  # else: deliberately out of range
        body += b"\0" * max(0, ifd_offset - len(body))
    n = len(entries) if count is None else count
    body += struct.pack(order + "H", n)
    for (tag, typ, cnt, field) in entries:
        if isinstance(field, int):
            field = struct.pack(order + "L", field)
        body += struct.pack(order + "HHL", tag, typ, cnt) + field
    body += struct.pack(order + "L", next_ifd)
    body += extra
    return bytes(body)


def short_field(v, order="<"):
    return struct.pack(order + "HH", v, 0)


def app_segment(marker, payload):
    assert len(payload) + 2 <= 0xFFFF
    return bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload


def jpeg_with(segments):
    buf = io.BytesIO()
    Image.fromarray(base_image(), "RGB").save(buf, "JPEG", quality=95, subsampling=0)
    data = buf.getvalue()
    assert data[:2] == b"\xff\xd8"
    return data[:2] + b"".join(segments) + data[2:]


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(
        ">I", zlib.crc32(kind + data) & M32)


def png_with(before_idat=(), after_idat=()):
    buf = io.BytesIO()
    Image.fromarray(base_image(), "RGB").save(buf, "PNG")
    data = buf.getvalue()
    # Split into chunks; insert ancillary chunks after IHDR / before IEND.
    pos, chunks = 8, []
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        chunks.append(data[pos:pos + 12 + n])
        pos += 12 + n
    assert chunks[0][4:8] == b"IHDR" and chunks[-1][4:8] == b"IEND"
    return (data[:8] + chunks[0] + b"".join(before_idat) + b"".join(chunks[1:-1]) +
            b"".join(after_idat) + chunks[-1])


def exif_app1(tiff_blob):
    return app_segment(0xE1, b"Exif\0\0" + tiff_blob)


def xmp_app1(xmp):
    return app_segment(0xE1, b"http://ns.adobe.com/xap/1.0/\0" + xmp)


def xmp_packet(orientation, element=False):
    body = (f"<tiff:Orientation>{orientation}</tiff:Orientation>" if element else
            f'<rdf:Description tiff:Orientation="{orientation}"/>')
    return (b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF>' + body.encode() +
            b"</rdf:RDF></x:xmpmeta>")


def raw_profile(tiff_blob):
    data = b"Exif\0\0" + tiff_blob
    hexs = data.hex()
    lines = "\n".join(hexs[i:i + 72] for i in range(0, len(hexs), 72))
    return f"\nexif\n{len(data):8}\n{lines}\n".encode()


ORI = 0x0112


def exif_cases():
    """name -> file bytes. Well-formed ones are named ok_*."""
    c = {}
    for o in range(1, 9):
        c[f"ok_jpeg_ii_{o}.jpg"] = jpeg_with([exif_app1(tiff([(ORI, 3, 1, short_field(o))]))])
    for o in (3, 6):
        c[f"ok_jpeg_mm_{o}.jpg"] = jpeg_with(
            [exif_app1(tiff([(ORI, 3, 1, short_field(o, ">"))], order=">"))])
    for o in (2, 5, 8):
        c[f"ok_png_exif_{o}.png"] = png_with(
            [png_chunk(b"eXIf", tiff([(ORI, 3, 1, short_field(o))]))])
    c["ok_png_exif_after_idat_7.png"] = png_with(
        after_idat=[png_chunk(b"eXIf", tiff([(ORI, 3, 1, short_field(7))]))])
    c["ok_png_exif_last_wins_4.png"] = png_with(
        [png_chunk(b"eXIf", tiff([(ORI, 3, 1, short_field(6))]))],
        [png_chunk(b"eXIf", tiff([(ORI, 3, 1, short_field(4))]))])
    make = b"Canon\0\0\0"
    # Orientation after an ASCII entry whose value lives at an offset.
    c["ok_jpeg_after_offset_entry_6.jpg"] = jpeg_with([exif_app1(tiff(
        [(0x010F, 2, len(make), 8 + 2 + 2 * 12 + 4), (ORI, 3, 1, short_field(6))], extra=make))])
    c["ok_jpeg_ifd_not_at_8_5.jpg"] = jpeg_with([exif_app1(tiff(
        [(ORI, 3, 1, short_field(5))], ifd_offset=20))])
    c["ok_jpeg_long_type_8.jpg"] = jpeg_with([exif_app1(tiff([(ORI, 4, 1, 8)]))])
    c["ok_jpeg_sshort_type_3.jpg"] = jpeg_with([exif_app1(tiff([(ORI, 8, 1, short_field(3))]))])
    c["ok_jpeg_two_values_6.jpg"] = jpeg_with([exif_app1(tiff(
        [(ORI, 3, 2, struct.pack("<HH", 6, 3))]))])
    c["ok_jpeg_rational_6.jpg"] = jpeg_with([exif_app1(tiff(
        [(ORI, 5, 1, 8 + 2 + 12 + 4)], extra=struct.pack("<LL", 12, 2)))])
    c["ok_jpeg_double_2.jpg"] = jpeg_with([exif_app1(tiff(
        [(ORI, 12, 1, 8 + 2 + 12 + 4)], extra=struct.pack("<d", 2.0)))])
    c["ok_jpeg_duplicate_first_wins_2.jpg"] = jpeg_with([exif_app1(tiff(
        [(ORI, 3, 1, short_field(2)), (ORI, 3, 1, short_field(7))]))])
    c["ok_jpeg_double_prefix_3.jpg"] = jpeg_with([app_segment(
        0xE1, b"Exif\0\0Exif\0\0" + tiff([(ORI, 3, 1, short_field(3))]))])
    # Multi-segment EXIF: Pillow 13 appends later Exif APP1 payloads.
    t = tiff([(0x010F, 2, len(make), 8 + 2 + 2 * 12 + 4), (ORI, 3, 1, short_field(8))])
    c["ok_jpeg_split_exif_8.jpg"] = jpeg_with([exif_app1(t), exif_app1(make)])
    c["ok_jpeg_xmp_attr_6.jpg"] = jpeg_with([xmp_app1(xmp_packet(6))])
    c["ok_jpeg_xmp_element_8.jpg"] = jpeg_with([xmp_app1(xmp_packet(8, element=True))])
    c["ok_jpeg_exif_beats_xmp_3.jpg"] = jpeg_with(
        [exif_app1(tiff([(ORI, 3, 1, short_field(3))])), xmp_app1(xmp_packet(6))])
    c["ok_jpeg_no_exif_1.jpg"] = jpeg_with([])
    c["ok_png_no_exif_1.png"] = png_with()
    xmp = xmp_packet(6)
    c["ok_png_xmp_itxt_6.png"] = png_with([png_chunk(
        b"iTXt", b"XML:com.adobe.xmp\0\0\0\0\0" + xmp)])
    c["ok_png_xmp_itxt_zlib_2.png"] = png_with([png_chunk(
        b"iTXt", b"XML:com.adobe.xmp\0\1\0\0\0" + zlib.compress(xmp_packet(2)))])
    rp = raw_profile(tiff([(ORI, 3, 1, short_field(5))]))
    c["ok_png_raw_profile_ztxt_5.png"] = png_with([png_chunk(
        b"zTXt", b"Raw profile type exif\0\0" + zlib.compress(rp))])
    c["ok_png_raw_profile_text_7.png"] = png_with([png_chunk(
        b"tEXt", b"Raw profile type exif\0" + raw_profile(tiff([(ORI, 3, 1, short_field(7))])))])

    # Malformed or ignored: the result must be what Pillow does (or, where
    # Pillow raises, no rotation).
    c["bad_truncated_ifd.jpg"] = jpeg_with([exif_app1(tiff(
        [(0x010F, 2, 4, b"abc\0"), (ORI, 3, 1, short_field(6))], count=9)[:-4])])
    c["bad_truncated_after_orientation.jpg"] = jpeg_with([exif_app1(tiff(
        [(ORI, 3, 1, short_field(6))], count=5)[:-4])])
    c["bad_ifd_offset_out_of_range.jpg"] = jpeg_with([exif_app1(tiff(
        [(ORI, 3, 1, short_field(6))], ifd_offset=0xFFFFFFF0))])
    c["bad_value_offset_before_orientation.jpg"] = jpeg_with([exif_app1(tiff(
        [(0x010F, 2, 64, 0x7FFFFFFF), (ORI, 3, 1, short_field(6))]))])
    c["bad_value_offset_after_orientation.jpg"] = jpeg_with([exif_app1(tiff(
        [(ORI, 3, 1, short_field(6)), (0x0110, 2, 64, 0xFFFFFFFF)]))])
    c["bad_value_offset_aborts.jpg"] = jpeg_with([exif_app1(tiff(
        [(0x010F, 2, 8, 0xFFFFFF00), (ORI, 3, 1, short_field(6))]))])
    # Pillow skips an offset value once the running total of value sizes
    # exceeds the blob: 38 + 32 bytes fit a 70-byte blob, 39 + 32 do not.
    six = struct.pack("<8L", 6, 1, 6, 1, 6, 1, 6, 1)
    c["ok_jpeg_total_size_fits_6.jpg"] = jpeg_with([exif_app1(tiff(
        [(0x010F, 2, 38, 0), (ORI, 5, 4, 38)], extra=six))])
    c["bad_total_size_skips_orientation.jpg"] = jpeg_with([exif_app1(tiff(
        [(0x010F, 2, 39, 0), (ORI, 5, 4, 38)], extra=six))])
    c["bad_huge_count.jpg"] = jpeg_with([exif_app1(tiff(
        [(0x0110, 4, 0xFFFFFFFF, 8), (ORI, 3, 1, short_field(6))]))])
    c["bad_magic.jpg"] = jpeg_with([exif_app1(b"XX*\0" + tiff([(ORI, 3, 1, short_field(6))])[4:])])
    c["bad_short_header.jpg"] = jpeg_with([exif_app1(b"II*\0\x08")])
    c["bad_bigtiff.jpg"] = jpeg_with([exif_app1(b"II+\0" + tiff([(ORI, 3, 1, short_field(6))])[4:])])
    c["bad_empty_exif.jpg"] = jpeg_with([exif_app1(b"")])
    c["bad_count_zero.jpg"] = jpeg_with([exif_app1(tiff([(ORI, 3, 0, short_field(6))]))])
    c["bad_unknown_type.jpg"] = jpeg_with([exif_app1(tiff([(ORI, 99, 1, short_field(6))]))])
    c["bad_unknown_type_keeps_earlier.jpg"] = jpeg_with([exif_app1(tiff(
        [(ORI, 3, 1, short_field(6)), (ORI, 99, 1, short_field(3))]))])
    c["bad_byte_type.jpg"] = jpeg_with([exif_app1(tiff([(ORI, 1, 1, b"\x06\0\0\0")]))])
    c["bad_ascii_type.jpg"] = jpeg_with([exif_app1(tiff([(ORI, 2, 2, b"6\0\0\0")]))])
    c["bad_undefined_type.jpg"] = jpeg_with([exif_app1(tiff([(ORI, 7, 1, b"\x06\0\0\0")]))])
    c["bad_value_9.jpg"] = jpeg_with([exif_app1(tiff([(ORI, 3, 1, short_field(9))]))])
    c["bad_value_0.jpg"] = jpeg_with([exif_app1(tiff([(ORI, 3, 1, short_field(0))]))])
    c["bad_long_65542.jpg"] = jpeg_with([exif_app1(tiff([(ORI, 4, 1, 65536 + 6)]))])
    c["bad_rational_zero_den.jpg"] = jpeg_with([exif_app1(tiff(
        [(ORI, 5, 1, 8 + 2 + 12 + 4)], extra=struct.pack("<LL", 6, 0)))])
    c["bad_rational_13_2.jpg"] = jpeg_with([exif_app1(tiff(
        [(ORI, 5, 1, 8 + 2 + 12 + 4)], extra=struct.pack("<LL", 13, 2)))])
    # IFD0 and its next pointer point at themselves, a sub-IFD pointer too:
    # only IFD0 is read, so nothing loops.
    c["bad_ifd_loop.jpg"] = jpeg_with([exif_app1(tiff(
        [(0x8769, 4, 1, 8), (ORI, 3, 1, short_field(6))], next_ifd=8))])
    c["bad_entry_count_65535.jpg"] = jpeg_with([exif_app1(tiff(
        [(ORI, 3, 1, short_field(6))], count=0xFFFF))])
    c["bad_xmp_value_9.jpg"] = jpeg_with([xmp_app1(xmp_packet(9))])
    c["bad_exif_present_blocks_xmp.jpg"] = jpeg_with(
        [exif_app1(tiff([(ORI, 7, 1, b"\x06\0\0\0")])), xmp_app1(xmp_packet(6))])
    c["bad_png_magic.png"] = png_with([png_chunk(b"eXIf", b"XX*\0\x08\0\0\0")])
    c["bad_png_truncated_ifd.png"] = png_with([png_chunk(
        b"eXIf", tiff([(ORI, 3, 1, short_field(6))], count=3)[:-4])])
    c["bad_png_raw_profile_bad_hex.png"] = png_with([png_chunk(
        b"tEXt", b"Raw profile type exif\0\nexif\n   8\nzz11\n")])
    return c


TRANSPOSES = {
    1: None,
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


def pillow_orientation(path):
    """Which of the 8 orientations diffusers' load_image applied, or "raises"."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loaded = np.asarray(load_image(str(path)))
    except Exception as e:  # noqa: BLE001 - any failure is the answer
        return "raises", type(e).__name__
    raw = Image.open(path).convert("RGB")
    hits = [o for o, t in TRANSPOSES.items()
            if np.array_equal(np.asarray(raw if t is None else raw.transpose(t)), loaded)]
    assert len(hits) == 1, (path, hits)
    return str(hits[0]), ""


def write_exif():
    d = OUT / "exif"
    d.mkdir(parents=True, exist_ok=True)
    for old in d.iterdir():
        old.unlink()
    lines = ["# file orientation-pillow-applies (1..8) or 'raises' [exception]"]
    for name, data in exif_cases().items():
        (d / name).write_bytes(data)
        ori, exc = pillow_orientation(d / name)
        if name.startswith("ok_"):
            assert ori == name.rsplit("_", 1)[1].split(".")[0], (name, ori, exc)
            load_image(str(d / name)).save(d / f"{name}.rgb.png")
        lines.append(f"{name} {ori} {exc}".rstrip())
    (d / "expected.txt").write_text("\n".join(lines) + "\n")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    Image.fromarray(synthetic_rgb(97, 61, 1), "RGB").save(OUT / "synthetic_97x61.png")
    write_resize()
    write_pipeline()
    write_pipeline_files()
    write_normalize()
    write_exif()


if __name__ == "__main__":
    main()
