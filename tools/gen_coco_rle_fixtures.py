#!/usr/bin/env python3
"""Writes tests/data/io/coco_rle.json, the oracle of io/coco_rle: binary masks
and what pycocotools makes of them (mask.encode -> the compressed `counts`
string of rleToString, the run lengths themselves via frPyObjects' inverse,
area and toBbox).

Each case: {"name", "h", "w", "mask": hex of the row-major mask bits packed
MSB first (np.packbits), "counts": the string, "runs": the uncompressed run
lengths (column-major, starting with zeros), "area", "bbox": [x, y, w, h]}.

Run: /work/venv-sam3/bin/python tools/gen_coco_rle_fixtures.py
"""
import importlib.metadata
import json
import pathlib

import numpy as np
from pycocotools import mask as mask_utils

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "io" / "coco_rle.json"
rng = np.random.default_rng(20261125)


def runs_of(m):
    """Run lengths of the column-major mask, zeros first: an independent
    check of the counts string beside pycocotools'."""
    flat = np.asfortranarray(m).ravel(order="F")
    runs, cur, n = [], 0, 0
    for v in flat:
        if v != cur:
            runs.append(n)
            cur, n = v, 0
        n += 1
    runs.append(n)
    return runs


cases = []


def add(name, m):
    m = np.asarray(m, dtype=np.uint8)
    h, w = m.shape
    rle = mask_utils.encode(np.asfortranarray(m))
    counts = rle["counts"].decode("ascii")
    back = mask_utils.decode(rle)
    assert (back == m).all()
    runs = runs_of(m)
    # The uncompressed form pycocotools builds from runs must give the same string.
    again = mask_utils.frPyObjects({"size": [h, w], "counts": runs}, h, w)
    assert again["counts"].decode("ascii") == counts, name
    cases.append({
        "name": name,
        "h": h,
        "w": w,
        "mask": np.packbits(m.ravel()).tobytes().hex(),
        "counts": counts,
        "runs": runs,
        "area": int(mask_utils.area(rle)),
        "bbox": [float(v) for v in mask_utils.toBbox(rle)],
    })


add("empty", np.zeros((5, 7)))
add("full", np.ones((5, 7)))
add("one_pixel_first", np.pad(np.ones((1, 1)), ((0, 4), (0, 6))))
add("one_pixel_last", np.pad(np.ones((1, 1)), ((4, 0), (6, 0))))
add("single_row", rng.random((1, 33)) > 0.5)
add("single_col", rng.random((29, 1)) > 0.5)
box = np.zeros((30, 40))
box[7:19, 11:30] = 1
add("box", box)
add("random_sparse", rng.random((31, 17)) > 0.9)
add("random_half", rng.random((24, 36)) > 0.5)
add("random_dense", rng.random((13, 50)) > 0.1)
yy, xx = np.mgrid[:48, :64]
add("disc", (xx - 30.5) ** 2 + (yy - 20.0) ** 2 < 15 ** 2)
# Long runs: counts that need four and more 5-bit groups, and negative
# differences against the run two back.
big = np.ones((300, 200))
big[150, 100] = 0
add("full_but_one", big)
stripes = np.zeros((256, 130))
stripes[:, 3:4] = 1
stripes[:, 60:129] = 1
add("stripes", stripes)

OUT.write_text(json.dumps({"source": "pycocotools " + importlib.metadata.version("pycocotools"),
                           "cases": cases}, indent=1) + "\n")
print(OUT, len(cases), "cases", OUT.stat().st_size, "bytes")
