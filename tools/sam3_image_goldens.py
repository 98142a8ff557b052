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

`image` and `full` run the reference image model (SimonZeng7108/efficientsam3,
exported by tools/sam3_refenv.py as tools/sam3_goldens.py does; built with
build_efficientsam3_image_model for RepViT-M0.9 + MobileCLIP-S1 with the
77-token context, i.e. the released architecture) on the CPU in fp32 with the
synthetic weights of models/sam3/sam3_synth.h (synth_state_dict below mirrors
it), through the processor (Sam3Processor.set_image + set_text_prompt,
confidence 0: every query kept) on a fixed frame stored in the fixture:

  image  at a reduced input size (224: grid 16, so the student head resizes
         its 7 x 7 map to 16 x 16, adapted in this script only by setting the
         ImageStudentEncoder's embed_size), dumping every tap the C++ model
         names (models/sam3/sam3_image_model.h) plus the detections ->
         sam3_image_224.safetensors;
  full   at the released 1008 x 1008 -> sam3_image_1008.safetensors with the
         small outputs only (scores, boxes, presence, a subsample of the mask
         logits and of the frame-size masks).

Large tensors are stored as an evenly strided subsample: element k of the
stored vector is element k * step of the flattened tensor, step =
ceil(numel / 4096), with the full shape beside it ("<name>.shape", I64), so
that the fixtures stay small.
"""

from __future__ import annotations

import argparse
import math
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


# ---------------------------------------------------------------- synthetic weights

def synth_unused(name: str) -> bool:
    """The parts the image path skips (zero in the synthetic file)."""
    if name.startswith("tracker."):
        return True
    vb = "detector.backbone.vision_backbone."
    if not name.startswith(vb):
        return False
    rest = name[len(vb):]
    return rest.startswith("sam2_convs.") or (rest.startswith("trunk.") and not rest.startswith("trunk.model."))


def synth_scale(name: str, shape) -> tuple[float, float]:
    """(offset, std) of a tensor: models/sam3/sam3_synth.cpp sam3_synth_scale."""
    if synth_unused(name) or name.endswith("num_batches_tracked"):
        return 0.0, 0.0
    bn = ".bn." in name or "trunk.model.head.1." in name or ".rbr_skip." in name
    if name.endswith("running_var"):
        return 1.0, 0.1
    if name.endswith("running_mean"):
        return 0.0, 0.1
    if bn and name.endswith(".weight") and len(shape) == 1:
        return 0.5, 0.1
    if name.endswith(".bias") or name.endswith("in_proj_bias"):
        return 0.0, 0.02
    if len(shape) == 1:
        return 1.0, 0.1
    if name.endswith("reference_points.weight"):
        return 0.0, 1.0
    if name.endswith("embedding_layer.weight") or name.endswith("pos_embed.pos_embed"):
        return 0.0, 0.02
    fan_in = max(1, math.prod(shape) // max(1, shape[0]))
    return 0.0, 1.0 / math.sqrt(fan_in)


def synth_state_dict(sd: dict, seed: int, prefix: str = "detector.") -> dict:
    """Tensor i of `sd` (state-dict order = the released file's, whose first
    1277 keys are the image model's) = randn(shape, manual_seed(seed + i)) *
    std + offset in fp32."""
    out = {}
    for i, (k, v) in enumerate(sd.items()):
        name = prefix + k
        off, std = synth_scale(name, list(v.shape))
        if v.dtype != torch.float32 or (off == 0.0 and std == 0.0):
            out[k] = torch.zeros_like(v)
            continue
        g = torch.Generator().manual_seed(seed + i)
        out[k] = torch.randn(tuple(v.shape), generator=g) * std + off
    return out


# ---------------------------------------------------------------- image model

SEED = 2026
PROMPT = "a red car on the road"
FRAME_HW = (120, 160)  # the frame: upscaled to the input size in both goldens
SUBSAMPLE = 4096


def frame() -> torch.Tensor:
    """A fixed RGB8 frame [H, W, 3]: smooth shapes plus noise."""
    h, w = FRAME_HW
    g = torch.Generator().manual_seed(11)
    yy = torch.arange(h).view(h, 1).float()
    xx = torch.arange(w).view(1, w).float()
    r = 128 + 100 * torch.sin(xx / 9) * torch.cos(yy / 13)
    gch = 255 * ((xx - 60) ** 2 + (yy - 50) ** 2 < 900).float()
    b = 255 * xx / w
    img = torch.stack([r, gch.expand(h, w), b.expand(h, w)], dim=-1)
    img = img + 12 * torch.randn(h, w, 3, generator=g)
    return img.clamp(0, 255).round().to(torch.uint8)


def subsample(name: str, t: torch.Tensor, out: dict) -> None:
    t = t.detach().float().contiguous()
    flat = t.flatten()
    step = max(1, -(-flat.numel() // SUBSAMPLE))
    out[name] = flat[::step].clone()
    out[name + ".shape"] = torch.tensor(list(t.shape), dtype=torch.int32)


def run_reference(size: int, taps: bool) -> dict:
    import sam3.model_builder as mb
    from sam3.model.sam3_image_processor import Sam3Processor

    model = mb.build_efficientsam3_image_model(
        device="cpu", eval_mode=True, load_from_HF=False, enable_inst_interactivity=False,
        backbone_type="repvit", model_name="m0.9", text_encoder_type="MobileCLIP-S1",
        text_encoder_context_length=77)
    sd = model.state_dict()
    assert len(sd) == 1277, len(sd)
    missing, unexpected = model.load_state_dict(synth_state_dict(sd, SEED), strict=True)
    model.eval()
    student = model.backbone.vision_backbone.trunk.model  # ImageStudentEncoder
    student.embed_size = size // 14  # 72 for 1008 (the builder's constant)

    rec: dict = {}
    vb = model.backbone
    orig_forward_image = vb.forward_image

    def forward_image(x):
        rec["pixels"] = x.clone()
        out = orig_forward_image(x)
        for i, lvl in enumerate(out["backbone_fpn"]):
            rec[f"neck.level{i}"] = lvl.clone()
        return out
    vb.forward_image = forward_image
    student.register_forward_hook(lambda m, i, o: rec.__setitem__("trunk", o.clone()))

    tok = vb.language_backbone.tokenizer
    orig_tok_call = tok.__call__

    class TokWrap:
        def __call__(self, *a, **k):
            t = orig_tok_call(*a, **k)
            rec["tokens"] = t[0].to(torch.int32).clone()
            return t

        def __getattr__(self, n):
            return getattr(tok, n)
    vb.language_backbone.tokenizer = TokWrap()
    orig_text = vb.forward_text

    def forward_text(*a, **k):
        out = orig_text(*a, **k)
        rec["text"] = out["language_features"][:, 0][None].clone()  # [1, L, d]
        return out
    vb.forward_text = forward_text

    orig_encode_prompt = model._encode_prompt

    def encode_prompt(*a, **k):
        prompt, mask, bo = orig_encode_prompt(*a, **k)
        rec["prompt"] = prompt[:, 0].clone()  # [P, d]
        rec["prompt_mask"] = mask[0].to(torch.uint8).clone()
        return prompt, mask, bo
    model._encode_prompt = encode_prompt
    dec = model.transformer.decoder
    orig_dec_forward = dec.forward

    def dec_forward(*a, **k):
        out = orig_dec_forward(*a, **k)
        hs, refs, pres = out[0], out[1], out[2]
        rec["dec.hs"], rec["dec.refs"], rec["dec.presence"] = hs.clone(), refs.clone(), pres.clone()
        return out
    dec.forward = dec_forward
    model.dot_prod_scoring.register_forward_hook(
        lambda m, i, o: rec.__setitem__("logits_all", o.clone()))
    orig_grounding = model.forward_grounding

    def forward_grounding(*a, **k):
        out = orig_grounding(*a, **k)
        rec["memory"] = out["encoder_hidden_states"].clone()
        rec["out"] = {k2: v for k2, v in out.items() if isinstance(v, torch.Tensor)}
        return out
    model.forward_grounding = forward_grounding

    img = frame()
    proc = Sam3Processor(model, resolution=size, device="cpu", confidence_threshold=0.0)
    with torch.inference_mode():
        state = proc.set_image(img.permute(2, 0, 1).contiguous())
        state = proc.set_text_prompt(PROMPT, state)

    o = rec["out"]
    nl = rec["dec.hs"].shape[0]
    g = {"frame": img, "prompt_text": torch.tensor(list(PROMPT.encode()), dtype=torch.uint8)}
    g["tokens"] = rec["tokens"]
    g["presence"] = o["presence_logit_dec"].flatten()[-1:].float()
    g["scores"] = (o["pred_logits"].sigmoid() * o["presence_logit_dec"].sigmoid().unsqueeze(1)
                   ).flatten()
    g["boxes"] = o["pred_boxes"][0]
    g["logits"] = rec["logits_all"].squeeze(-1)[:, 0]  # [L, Q]
    g["det.scores"] = state["scores"]
    g["det.boxes"] = state["boxes"]
    subsample("mask_logits", o["pred_masks"], g)
    subsample("det.mask_prob", state["masks_logits"][:, 0], g)
    print("decoder outputs:", {k: tuple(rec[k].shape) for k in ("dec.hs", "dec.refs", "dec.presence")},
          "memory", tuple(rec["memory"].shape), "masks", tuple(o["pred_masks"].shape))
    print("scores: max %.4f min %.4f, > 0.5: %d" % (g["scores"].max(), g["scores"].min(),
                                                     int((g["scores"] > 0.5).sum())))
    if taps:
        for k in ("pixels", "trunk", "neck.level0", "neck.level1", "neck.level2", "text", "prompt"):
            subsample(k, rec[k], g)
        g["prompt_mask"] = rec["prompt_mask"]
        subsample("memory", rec["memory"].transpose(0, 1), g)  # seq-first -> [1, T, d]
        for l in range(nl):
            subsample(f"decoder.hs{l}", rec["dec.hs"][l, :, 0], g)  # [Q, d]
            g[f"decoder.ref{l}"] = rec["dec.refs"][l, :, 0].clone()  # [Q, 4]
            g[f"decoder.presence{l}"] = rec["dec.presence"][l].reshape(1, 1).clone()
    return g


def golden_image(out: Path, size: int, taps: bool, name: str) -> None:
    g = run_reference(size, taps)
    save(out / name, g, {"seed": SEED, "prompt": PROMPT, "image_size": size,
                         "weights": "sam3_synth kFull (models/sam3/sam3_synth.h)",
                         "subsample": SUBSAMPLE})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["preprocess", "image", "full"])
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--mirror", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.what == "preprocess":
        golden_preprocess(Path(args.out))
        return
    import sam3_refenv
    with sam3_refenv.reference(args.mirror or sam3_refenv.DEFAULT_MIRROR):
        if args.what == "image":
            golden_image(Path(args.out), 224, True, "sam3_image_224.safetensors")
        else:
            golden_image(Path(args.out), 1008, False, "sam3_image_1008.safetensors")


if __name__ == "__main__":
    main()
