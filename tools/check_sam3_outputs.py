#!/usr/bin/env python3
"""Checks a sam3-segment output directory with independent readers: every
object's COCO RLE decoded by pycocotools has its `area`, and each
label_%06d.png read by Pillow (16-bit) holds, at every pixel, the id of the
highest-scoring object whose mask covers it (equal scores: the later one),
0 elsewhere. Exits 1 on the first mismatch.

Run: /work/venv-sam3/bin/python tools/check_sam3_outputs.py OUT_DIR
"""
import json
import pathlib
import sys

import numpy as np
from PIL import Image
from pycocotools import mask as mask_utils


def main(out):
    out = pathlib.Path(out)
    frames = 0
    for line in (out / "detections.jsonl").read_text().splitlines():
        j = json.loads(line)
        labels = np.asarray(Image.open(out / ("label_%06d.png" % j["frame"])))
        assert labels.dtype == np.uint16, labels.dtype
        assert labels.shape == (j["height"], j["width"]), labels.shape
        expected = np.zeros(labels.shape, np.uint16)
        best = np.full(labels.shape, -1.0)
        for o in j["objects"]:
            m = mask_utils.decode({"size": o["rle"]["size"], "counts": o["rle"]["counts"].encode()})
            assert int(m.sum()) == o["area"], (j["frame"], o["id"])
            on = (m > 0) & (o["score"] >= best)
            expected[on] = o["id"]
            best[on] = o["score"]
        if not (labels == expected).all():
            print(f"frame {j['frame']}: the label PNG differs from the RLE masks")
            return 1
        frames += 1
    print(f"{out}: {frames} frames consistent")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
