#!/usr/bin/env python3
"""Writes the torch-computed fixtures of the op tests to tests/data/ops/.

  python3 tools/gen_op_fixtures.py [--out tests/data/ops]   (needs torch, safetensors)

Files (safetensors; each case is a tensor group "<case>.<name>" plus a
"__metadata__" entry "<case>" -> "key=value ..." with the op parameters):
  resize.safetensors  torch.nn.functional.interpolate, NCHW, F32
  norm.safetensors    F.layer_norm, F.rms_norm, F.group_norm in F32 and BF16
  act.safetensors     F.gelu (none/tanh), F.silu, torch.softmax in F32 and BF16

Inputs are bf16-representable, so a test may feed the same values as BF16.
Resize outputs are computed in F32 only: torch's CPU generic resize kernel
rounds its interpolation weights to bf16 for bf16 tensors, which CUDA and
torch's own channels-last CPU kernel do not; flick follows the fp32-weight
path, so a BF16 resize is checked against the F32 fixture rounded once.
Everything runs on the CPU, single-threaded, with deterministic generators;
rerunning the script reproduces the same tensors for a given torch version
(only the order of the metadata in the header may change). The committed
files were made with torch 2.15.0 on x86-64.
"""
import argparse
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file


class Writer:
    def __init__(self):
        self.tensors = {}
        self.meta = {}

    def case(self, name, params, **tensors):
        assert name not in self.meta, name
        self.meta[name] = " ".join(f"{k}={v}" for k, v in params.items())
        for k, t in tensors.items():
            self.tensors[f"{name}.{k}"] = t.contiguous().clone()

    def save(self, path):
        save_file(self.tensors, path, metadata=self.meta)
        print(f"{path}: {len(self.meta)} cases, {os.path.getsize(path)} bytes")


def randn(shape, seed, scale=1.0, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * scale + shift
    return x.bfloat16().float()  # bf16-representable


def image(n, c, h, w):
    """An 8-bit-like image in [-1, 1]: k/127.5 - 1, exactly the same in C++
    (see synthetic_image() in tests/ops/elementwise_testing.cpp)."""
    n_i = torch.arange(n).view(n, 1, 1, 1)
    c_i = torch.arange(c).view(1, c, 1, 1)
    h_i = torch.arange(h).view(1, 1, h, 1)
    w_i = torch.arange(w).view(1, 1, 1, w)
    k = (h_i * 31 + w_i * 17 + c_i * 7 + n_i * 3 + (h_i * w_i) % 13) % 256
    return k.float() / 127.5 - 1.0


def resize_fixtures(out):
    wr = Writer()
    shapes = [
        ((1, 2, 5, 7), (13, 17)),  # upscale
        ((1, 1, 37, 41), (11, 9)),  # downscale
        ((2, 1, 20, 8), (7, 19)),  # down in H, up in W
        ((1, 1, 10, 12), (10, 5)),  # one dim unchanged
        ((1, 1, 64, 48), (9, 7)),  # strong downscale (wide aa support)
        ((1, 1, 9, 9), (1, 1)),  # single output pixel
        ((1, 1, 1, 6), (4, 3)),  # single input row
        ((1, 1, 5, 30), (3, 127)),  # H+W > 128: torch's generic CPU kernel
        ((1, 1, 12, 12), (24, 24)),  # exact 2x
        ((1, 1, 6, 6), (18, 18)),  # exact 3x
    ]
    configs = [("nearest", False, False)]
    for mode in ("bilinear", "bicubic"):
        for ac in (False, True):
            for aa in (False, True):
                configs.append((mode, ac, aa))
    for s, (ishape, osize) in enumerate(shapes):
        x = randn(ishape, seed=100 + s)
        wr.case(f"in{s}", {"op": "input"}, x=x)
        for c, (mode, ac, aa) in enumerate(configs):
            kw = {} if mode == "nearest" else {"align_corners": ac, "antialias": aa}
            y = F.interpolate(x, size=osize, mode=mode, **kw)
            wr.case(f"r{s}_{c}", {"input": f"in{s}", "mode": mode, "align_corners": int(ac),
                                  "antialias": int(aa)}, y=y)
    # The real preprocessing sizes, on a synthetic 8-bit-like image generated
    # identically in the test; only some output rows are stored.
    x = image(1, 3, 352, 640)  # Matrix-Game CLIP: bicubic to 224x224
    y = F.interpolate(x, size=(224, 224), mode="bicubic", align_corners=False)
    rows = torch.tensor([0, 1, 57, 111, 112, 223], dtype=torch.int32)
    wr.case("clip_bicubic", {"mode": "bicubic", "align_corners": 0, "antialias": 0,
                             "image": "1x3x352x640", "out": "224x224"},
            rows=rows, y=y[:, :, rows.long(), :])
    x = image(1, 2, 90, 200)  # SAM3-style antialiased bilinear downscale
    y = F.interpolate(x, size=(40, 64), mode="bilinear", align_corners=False, antialias=True)
    wr.case("aa_bilinear_image", {"mode": "bilinear", "align_corners": 0, "antialias": 1,
                                  "image": "1x2x90x200", "out": "40x64"},
            rows=torch.arange(40, dtype=torch.int32), y=y)
    wr.save(os.path.join(out, "resize.safetensors"))


def norm_fixtures(out):
    wr = Writer()
    # layer_norm
    for i, (shape, eps, affine, shift, dt) in enumerate([
        ((2, 1536), 1e-6, True, 0.0, torch.float32),
        ((2, 1536), 1e-6, True, 0.0, torch.bfloat16),
        ((3, 33), 1e-5, False, 0.0, torch.float32),
        ((2, 257), 1e-5, True, 100.0, torch.float32),  # large mean: cancellation
        ((2, 1280), 1e-5, True, 0.5, torch.bfloat16),
    ]):
        x = randn(shape, 200 + i, scale=2.0, shift=shift).to(dt)
        c = shape[-1]
        w = randn((c,), 300 + i, 0.3, 1.0).to(dt) if affine else None
        b = randn((c,), 400 + i, 0.2).to(dt) if affine else None
        y = F.layer_norm(x, (c,), w, b, eps)
        t = {"x": x, "y": y}
        if affine:
            t.update(w=w, b=b)
        wr.case(f"ln{i}", {"op": "layer_norm", "eps": repr(eps)}, **t)
    # rms_norm (F.rms_norm: fp32 inside, one rounding at the output)
    for i, (shape, eps, affine, dt) in enumerate([
        ((2, 1536), 1e-6, True, torch.float32),
        ((2, 1536), 1e-6, True, torch.bfloat16),
        ((1, 2, 4, 128), 1e-6, True, torch.bfloat16),  # per-head [.., H, D]
        ((3, 64), 1e-5, False, torch.float32),
    ]):
        x = randn(shape, 500 + i, scale=1.5).to(dt)
        c = shape[-1]
        w = randn((c,), 600 + i, 0.3, 1.0).to(dt) if affine else None
        y = F.rms_norm(x, (c,), w, eps)
        t = {"x": x, "y": y}
        if affine:
            t.update(w=w)
        wr.case(f"rms{i}", {"op": "rms_norm", "eps": repr(eps)}, **t)
    # group_norm
    for i, (shape, groups, eps, affine, dt) in enumerate([
        ((2, 64, 3, 5), 32, 1e-6, True, torch.float32),
        ((2, 64, 3, 5), 32, 1e-6, True, torch.bfloat16),
        ((1, 96, 2, 4, 4), 32, 1e-6, True, torch.float32),  # 5-D (video VAE)
        ((3, 12, 7), 4, 1e-5, False, torch.float32),
        ((1, 8, 11, 13), 8, 1e-5, True, torch.bfloat16),  # SAM3 pixel decoder GN(8)
    ]):
        x = randn(shape, 700 + i, scale=2.0, shift=0.3).to(dt)
        c = shape[1]
        w = randn((c,), 800 + i, 0.3, 1.0).to(dt) if affine else None
        b = randn((c,), 900 + i, 0.2).to(dt) if affine else None
        y = F.group_norm(x, groups, w, b, eps)
        t = {"x": x, "y": y}
        if affine:
            t.update(w=w, b=b)
        wr.case(f"gn{i}", {"op": "group_norm", "groups": groups, "eps": repr(eps)}, **t)
    wr.save(os.path.join(out, "norm.safetensors"))


def act_fixtures(out):
    wr = Writer()
    x = torch.cat([torch.linspace(-12, 12, 1537), randn((500,), 1000, scale=3.0)])
    x = x.bfloat16().float()
    wr.case("act_in", {"op": "input"}, x=x)
    for dt in (torch.float32, torch.bfloat16):
        tag = "f32" if dt == torch.float32 else "bf16"
        xd = x.to(dt)
        wr.case(f"gelu_erf_{tag}", {"op": "gelu", "input": "act_in", "approximate": "none"},
                y=F.gelu(xd, approximate="none"))
        wr.case(f"gelu_tanh_{tag}", {"op": "gelu", "input": "act_in", "approximate": "tanh"},
                y=F.gelu(xd, approximate="tanh"))
        wr.case(f"silu_{tag}", {"op": "silu", "input": "act_in"}, y=F.silu(xd))
    for i, (shape, scale, dt) in enumerate([
        ((3, 257), 4.0, torch.float32),
        ((2, 1537), 2.0, torch.bfloat16),
        ((4, 7), 10.0, torch.float32),
        ((1, 1), 1.0, torch.float32),
        ((1, 5120), 3.0, torch.float32),
    ]):
        xs = randn(shape, 1100 + i, scale=scale).to(dt)
        wr.case(f"softmax{i}", {"op": "softmax"}, x=xs, y=torch.softmax(xs, dim=-1))
    wr.save(os.path.join(out, "act.safetensors"))


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(root, "tests", "data", "ops"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}")
    resize_fixtures(args.out)
    norm_fixtures(args.out)
    act_fixtures(args.out)


if __name__ == "__main__":
    main()
