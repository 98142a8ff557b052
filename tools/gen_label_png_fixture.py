#!/usr/bin/env python3
"""Writes tests/data/io/label16.png, a 16-bit grayscale PNG made by Pillow
from known ids (0, 1, 255, 256, 65535 among them), and label16.u16, the ids
as little-endian uint16 row-major: the oracle for io/label_png's reader (and
the proof that a common reader keeps all 16 bits of flick's label maps).

Run: /work/venv-sam3/bin/python tools/gen_label_png_fixture.py
"""
import pathlib

import numpy as np
from PIL import Image

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "io"
ids = np.array([[0, 1, 2, 255, 256, 257, 1000],
                [65535, 65534, 4096, 0, 0, 7, 300],
                [12345, 3, 3, 3, 3, 511, 512],
                [0, 40000, 2, 1, 0, 65535, 9]], dtype=np.uint16)
Image.fromarray(ids).save(OUT / "label16.png")  # mode I;16 -> 16-bit gray
back = np.asarray(Image.open(OUT / "label16.png"))
assert back.dtype == np.uint16 and (back == ids).all()
(OUT / "label16.u16").write_bytes(ids.astype("<u2").tobytes())
print(OUT / "label16.png")
