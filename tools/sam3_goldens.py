#!/usr/bin/env python3
"""Key tables and golden-parity fixtures for the EfficientSAM3 port
(tests/data/sam3/).

The reference (SimonZeng7108/efficientsam3 at sam3_refenv.REF_COMMIT, which
vendors facebookresearch/sam3) is exported from a local git mirror into a
temporary directory at run time (tools/sam3_refenv.py); none of it is stored
in flick.

    /work/venv-sam3/bin/python tools/sam3_goldens.py keys    [--mirror DIR] [--out tests/data/sam3]
    /work/venv-sam3/bin/python tools/sam3_goldens.py goldens [--mirror DIR] [--out tests/data/sam3]

`keys` builds the reference classes on the meta device (no memory, no init)
and writes one table per file or section, one tensor per line in state-dict
order: `name dtype d0,d1,...` (a 0-d tensor has an empty shape). Tables:

  keys_efficient_sam3_repvit-m0_9_mobileclip_s1.txt
      the 2028 keys of the released checkpoint, in the file's layout
      ({"model": state_dict}): "detector." + the student image model
      (RepViT-M0.9 + MobileCLIP-S1, 77-token text context), the original
      SAM3 ViT trunk beside the student trunk, the SAM2 neck (`sam2_convs`)
      and "tracker." + build_tracker(); the last three are not used by the
      image path;
  trunk_repvit_<m0_9|m1_1|m2_3>.txt   the student trunk + head of each RepViT
      variant, under "detector.backbone.vision_backbone.trunk.model.";
  text_mobileclip_<s0|s1>.txt         the student text encoder of each
      MobileCLIP variant, under "detector.backbone.language_backbone.".

`goldens` runs tiny configurations on CPU in fp32 with seeded random weights
(BatchNorm statistics included, so that folding is exercised) and writes
named inputs, weights and outputs as safetensors.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sam3_refenv  # noqa: E402

import torch  # noqa: E402

RELEASED = "efficient_sam3_repvit-m0_9_mobileclip_s1"
TRUNK_PREFIX = "detector.backbone.vision_backbone.trunk.model."
TEXT_PREFIX = "detector.backbone.language_backbone."
DTYPE_NAMES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
               torch.int64: "I64", torch.complex64: "C64", torch.int32: "I32", torch.uint8: "U8", torch.bool: "BOOL"}


def table(sd: dict, prefix: str = "") -> list[str]:
    return [f"{prefix}{k} {DTYPE_NAMES[v.dtype]} {','.join(str(d) for d in v.shape)}"
            for k, v in sd.items()]


@contextlib.contextmanager
def meta_device():
    with torch.device("meta"):
        yield


def image_model(mb, trunk: str, text: str):
    return mb.build_efficientsam3_image_model(
        device="cpu", eval_mode=True, load_from_HF=False, enable_inst_interactivity=False,
        backbone_type="repvit", model_name=trunk, text_encoder_type=text,
        text_encoder_context_length=77)


def write_keys(out: Path) -> None:
    import sam3.model_builder as mb

    out.mkdir(parents=True, exist_ok=True)
    with meta_device():
        model = image_model(mb, "m0.9", "MobileCLIP-S1")
        image_sd = model.state_dict()
        stand_in_trunk = torch.nn.Module()
        stand_in_trunk.channel_list = [1024]  # what the neck reads of the ViT
        neck = mb._create_vit_neck(mb._create_position_encoding(precompute_resolution=1008),
                                   stand_in_trunk, enable_inst_interactivity=True)
        sam2_sd = {k: v for k, v in neck.state_dict().items() if k.startswith("sam2_convs.")}
        tracker_sd = mb.build_tracker(apply_temporal_disambiguation=False).state_dict()
    # The ViT's drop-path schedule calls .item(), which the meta device cannot:
    # built on the CPU (1.8 GB, a few seconds), only the names and shapes kept.
    vit_sd = {k: torch.empty(v.shape, dtype=v.dtype, device="meta")
              for k, v in mb._create_vit_backbone().state_dict().items()}

    lines = table(image_sd, "detector.")
    lines += table(vit_sd, "detector.backbone.vision_backbone.trunk.")
    lines += table(sam2_sd, "detector.backbone.vision_backbone.")
    lines += table(tracker_sd, "tracker.")
    names = [l.split()[0] for l in lines]
    assert len(names) == len(set(names)), "duplicate key"
    print(f"{RELEASED}: {len(lines)} keys (image model {len(image_sd)}, SAM3 ViT {len(vit_sd)}, "
          f"sam2_convs {len(sam2_sd)}, tracker {len(tracker_sd)})")
    (out / f"keys_{RELEASED}.txt").write_text("\n".join(lines) + "\n")

    for trunk in ("m0_9", "m1_1", "m2_3"):
        with meta_device():
            sd = image_model(mb, trunk, "MobileCLIP-S1").backbone.vision_backbone.trunk.model.state_dict()
        (out / f"trunk_repvit_{trunk}.txt").write_text("\n".join(table(sd, TRUNK_PREFIX)) + "\n")
        print(f"trunk {trunk}: {len(sd)} keys")
    for text in ("S0", "S1"):
        with meta_device():
            enc = mb._create_student_text_encoder(None, f"MobileCLIP-{text}", context_length=77)
        sd = enc.state_dict()
        (out / f"text_mobileclip_{text.lower()}.txt").write_text("\n".join(table(sd, TEXT_PREFIX)) + "\n")
        print(f"text {text}: {len(sd)} keys")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["keys", "goldens"])
    ap.add_argument("--mirror", default=sam3_refenv.DEFAULT_MIRROR)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/data/sam3"))
    args = ap.parse_args()
    torch.manual_seed(0)
    with sam3_refenv.reference(args.mirror):
        if args.what == "keys":
            write_keys(Path(args.out))
        else:
            import sam3_goldens_components as comps  # noqa: F401  (see below)


if __name__ == "__main__":
    main()
