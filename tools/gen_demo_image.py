#!/usr/bin/env python3
"""Writes tools/demo_assets/start.png: the start image of `make demo`'s
Matrix-Game job, a drawn landscape (sky, sun, hills, a path, trees) at the
model's 640x352. Needs numpy and Pillow (tools only); the output is committed."""
import pathlib

import numpy as np
from PIL import Image, ImageDraw

out = pathlib.Path(__file__).resolve().parent / "demo_assets" / "start.png"
out.parent.mkdir(parents=True, exist_ok=True)
w, h = 640, 352
yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
sky = np.stack([110 + 80 * yy / h, 160 + 60 * yy / h, np.full_like(yy, 235.0)], -1)
img = Image.fromarray(sky.clip(0, 255).astype(np.uint8))
d = ImageDraw.Draw(img)
d.ellipse([470, 40, 530, 100], fill=(255, 236, 150))
for i, (base, amp, col) in enumerate([(190, 30, (96, 140, 90)), (225, 22, (70, 120, 60))]):
    pts = [(x, base - amp * np.sin(x / 90.0 + 1.7 * i)) for x in range(0, w + 8, 8)]
    d.polygon(pts + [(w, h), (0, h)], fill=col)
d.polygon([(300, 352), (340, 352), (326, 232), (318, 232)], fill=(170, 150, 110))
for x, s in [(90, 1.0), (150, 0.8), (470, 0.9), (560, 1.1)]:
    d.rectangle([x - 4 * s, 250 - 10 * s, x + 4 * s, 250 + 22 * s], fill=(90, 60, 40))
    d.ellipse([x - 22 * s, 250 - 50 * s, x + 22 * s, 250], fill=(40, 95, 45))
img.save(out, optimize=True)
