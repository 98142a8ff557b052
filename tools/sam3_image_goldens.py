#!/usr/bin/env python3
"""Golden fixtures for the composed EfficientSAM3 image model
(models/sam3/sam3_image_model.h, sam3_preprocess.h, sam3_synth.h) in
tests/data/sam3/.

    /work/venv-sam3/bin/python tools/sam3_image_goldens.py preprocess [--out tests/data/sam3]
    /work/venv-sam3/bin/python tools/sam3_image_goldens.py image      [--mirror DIR] [--out ...]
    /work/venv-sam3/bin/python tools/sam3_image_goldens.py full       [--mirror DIR] [--out ...]

`preprocess` needs torch + torchvision only: the oracle is
torchvision.transforms.v2.functional.resize on a uint8 [3, H, W] tensor
(bilinear, antialias=True; torch's CPU uint8 kernel) over varied sizes, and
the processor's whole v2.Compose on a small image. Writes
preprocess_resize.safetensors (uint8 HWC inputs and outputs, F32 pixels).

`image` and `full` run the reference (SimonZeng7108/efficientsam3, exported
by tools/sam3_refenv.py as tools/sam3_goldens.py does) on the CPU in fp32.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "tests/data/sam3"


def save(path: Path, tensors: dict, meta: dict) -> None:
    from safetensors.torch import save_file
    tensors = {k: v.detach().clone().contiguous() for k, v in tensors.items()}
    meta = {k: str(v) for k, v in meta.items()}
    meta["torch"] = torch.__version__
    save_file(tensors, str(path), metadata=meta)
    print(f"{path.name}: {path.stat().st_size / 1e3:.0f} kB, {len(tensors)} tensors")


# (in_h, in_w) -> (out_h, out_w): down and up, odd sizes, one axis unchanged
# (only the other pass runs), equal sizes (a copy), 1 x N and N x 1, large
# ratios both ways, and a down-then-up mix.
RESIZE_CASES = [
    ((37, 53), (24, 70)),
    ((64, 48), (31, 17)),
    ((1, 97), (20, 5)),
    ((97, 1), (3, 41)),
    ((5, 300), (5, 13)),
    ((300, 7), (31, 7)),
    ((17, 17), (17, 17)),
    ((600, 40), (9, 9)),
    ((2, 3), (90, 111)),
    ((1, 1), (7, 5)),
    ((101, 9), (16, 250)),
    ((45, 45), (1, 3)),  # (1, 1) trips an internal assert in torch 2.15
]


def golden_preprocess(out: Path) -> None:
    from torchvision.transforms import v2
    import torchvision.transforms.v2.functional as F

    g = torch.Generator().manual_seed(7)
    tensors = {}
    for i, ((h, w), (oh, ow)) in enumerate(RESIZE_CASES):
        # Half noise (every rounding case), half a smooth ramp (long runs).
        noise = torch.randint(0, 256, (3, h, w), generator=g, dtype=torch.uint8)
        yy = torch.arange(h).view(h, 1).expand(h, w).float() / max(h - 1, 1)
        xx = torch.arange(w).view(1, w).expand(h, w).float() / max(w - 1, 1)
        ramp = torch.stack([255 * xx, 255 * yy, 127 + 128 * (xx - yy)]).clamp(0, 255).round()
        img = torch.where(torch.arange(w).view(1, 1, w) < w // 2, noise, ramp.to(torch.uint8))
        res = F.resize(img, [oh, ow], interpolation=v2.InterpolationMode.BILINEAR, antialias=True)
        assert res.dtype == torch.uint8
        tensors[f"case{i}.input"] = img.permute(1, 2, 0)   # HWC as flick frames
        tensors[f"case{i}.output"] = res.permute(1, 2, 0)
    # The processor's transform (sam3_image_processor.py:24-31) at a small
    # resolution: a uint8 image in, normalised fp32 pixels out.
    res = 28
    transform = v2.Compose([
        v2.ToDtype(torch.uint8, scale=True),
        v2.Resize(size=(res, res)),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5]),
    ])
    img = torch.randint(0, 256, (3, 41, 67), generator=g, dtype=torch.uint8)
    tensors["pipeline.input"] = img.permute(1, 2, 0)
    tensors["pipeline.pixels"] = transform(v2.functional.to_image(img))[None]
    # Every uint8 value through the transform's ToDtype + Normalize.
    allv = torch.arange(256, dtype=torch.uint8).view(1, 16, 16).expand(3, 16, 16).contiguous()
    scale = v2.Compose([transform.transforms[0], transform.transforms[2], transform.transforms[3]])
    tensors["values.pixels"] = scale(allv)[0].flatten()
    save(out / "preprocess_resize.safetensors", tensors,
         {"cases": RESIZE_CASES, "pipeline_resolution": res})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["preprocess"])
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.what == "preprocess":
        golden_preprocess(Path(args.out))


if __name__ == "__main__":
    main()
