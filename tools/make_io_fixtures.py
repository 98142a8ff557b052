#!/usr/bin/env python3
"""Writes the image fixtures of tests/io (tests/data/io): PNG files in every
layout a reader must turn into RGB8, each beside <name>.rgb, the RGB8 bytes
the file should read as (Pillow's Image.convert("RGB"); for 16-bit samples
the high byte, written by hand since Pillow cannot hold 16-bit RGB).

Run: /work/venv/bin/python tools/make_io_fixtures.py
"""
import pathlib
import struct
import zlib

import numpy as np
from PIL import Image

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "io"
W, H = 7, 5
rng = np.random.default_rng(1234)


def save(name, img, expected_rgb, **kw):
    img.save(OUT / f"{name}.png", **kw)
    assert expected_rgb.shape == (H, W, 3) and expected_rgb.dtype == np.uint8
    (OUT / f"{name}.rgb").write_bytes(expected_rgb.tobytes())


def pillow_rgb(path):
    return np.asarray(Image.open(path).convert("RGB"))


def png_chunk(kind, data):
    return (struct.pack(">I", len(data)) + kind + data +
            struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))


def write_png16(path, samples, color_type):
    """A minimal 16-bit PNG writer (Pillow cannot write 16-bit RGB)."""
    h, w = samples.shape[:2]
    raw = b"".join(b"\x00" + samples[y].astype(">u2").tobytes() for y in range(h))
    data = (b"\x89PNG\r\n\x1a\n" +
            png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, color_type, 0, 0, 0)) +
            png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))
    path.write_bytes(data)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2)]  # (x0, y0, dx, dy) of the seven passes


def write_png_adam7(path, rgb):
    """An Adam7-interlaced 8-bit RGB PNG (Pillow cannot write interlaced)."""
    h, w = rgb.shape[:2]
    raw = b""
    for x0, y0, dx, dy in ADAM7:
        sub = rgb[y0::dy, x0::dx]
        if sub.size:
            raw += b"".join(b"\x00" + row.tobytes() for row in sub)
    data = (b"\x89PNG\r\n\x1a\n" +
            png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 1)) +
            png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))
    path.write_bytes(data)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    rgb = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    gray = rng.integers(0, 256, (H, W), dtype=np.uint8)
    alpha = rng.integers(0, 256, (H, W), dtype=np.uint8)

    save("rgb8", Image.fromarray(rgb, "RGB"), rgb)
    write_png_adam7(OUT / "rgb8_interlaced.png", rgb)
    (OUT / "rgb8_interlaced.rgb").write_bytes(rgb.tobytes())
    assert (pillow_rgb(OUT / "rgb8_interlaced.png") == rgb).all()
    save("gray8", Image.fromarray(gray, "L"), np.repeat(gray[..., None], 3, axis=2))
    rgba = np.dstack([rgb, alpha])
    save("rgba8", Image.fromarray(rgba, "RGBA"), rgb)  # alpha dropped, not composited
    save("gray_alpha8", Image.fromarray(np.dstack([gray, alpha]), "LA"),
         np.repeat(gray[..., None], 3, axis=2))

    bits = (rng.integers(0, 2, (H, W)) * 255).astype(np.uint8)
    Image.fromarray(bits, "L").convert("1").save(OUT / "gray1.png")
    (OUT / "gray1.rgb").write_bytes(pillow_rgb(OUT / "gray1.png").tobytes())

    palette_img = Image.fromarray(rgb, "RGB").quantize(colors=6)
    palette_img.save(OUT / "palette.png")
    (OUT / "palette.rgb").write_bytes(pillow_rgb(OUT / "palette.png").tobytes())
    palette_img.save(OUT / "palette_trns.png", transparency=2)
    (OUT / "palette_trns.rgb").write_bytes(pillow_rgb(OUT / "palette_trns.png").tobytes())

    rgb16 = rng.integers(0, 65536, (H, W, 3), dtype=np.uint16)
    write_png16(OUT / "rgb16.png", rgb16, color_type=2)
    (OUT / "rgb16.rgb").write_bytes((rgb16 >> 8).astype(np.uint8).tobytes())
    ga16 = rng.integers(0, 65536, (H, W, 2), dtype=np.uint16)
    write_png16(OUT / "gray_alpha16.png", ga16, color_type=4)
    (OUT / "gray_alpha16.rgb").write_bytes(
        np.repeat((ga16[..., :1] >> 8).astype(np.uint8), 3, axis=2).tobytes())

    # A gray JPEG: decoded by libjpeg(-turbo) in Pillow.
    smooth = (np.add.outer(np.arange(H) * 20, np.arange(W) * 9) % 256).astype(np.uint8)
    Image.fromarray(smooth, "L").save(OUT / "gray.jpg", quality=90)
    (OUT / "gray.jpg.rgb").write_bytes(pillow_rgb(OUT / "gray.jpg").tobytes())


if __name__ == "__main__":
    main()
