#!/usr/bin/env python3
"""Writes tools/demo_assets/frames/: the small PNG sequence `make demo` encodes
(a drifting gradient with a moving disc, 320x176, 24 frames). Needs numpy and
Pillow (tools only); the output is committed."""
import pathlib

import numpy as np
from PIL import Image

out = pathlib.Path(__file__).resolve().parent / "demo_assets" / "frames"
out.mkdir(parents=True, exist_ok=True)
h, w, n = 176, 320, 24
yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
for i in range(n):
    t = i / n
    r = 128 + 100 * np.sin(2 * np.pi * (xx / w + t))
    g = 128 + 100 * np.sin(2 * np.pi * (yy / h - t))
    b = np.full_like(r, 90.0)
    cx, cy = w * (0.2 + 0.6 * t), h * (0.5 + 0.25 * np.sin(2 * np.pi * t))
    disc = (xx - cx) ** 2 + (yy - cy) ** 2 < 24**2
    r[disc], g[disc], b[disc] = 250, 240, 60
    rgb = np.stack([r, g, b], axis=-1).clip(0, 255).astype(np.uint8)
    Image.fromarray(rgb).save(out / f"frame_{i:03d}.png", optimize=True)
