#!/usr/bin/env python3
"""Checks a `flick synth` directory with the reference tools: torch reads the
.pth files (torch.load(weights_only=True), plain and mmap=True), the
safetensors package reads the DiT files, the key lists (and, for --size full,
shapes and order) match tests/data/mg2/full_keys.json.gz, the storages sit at
64-byte boundaries of stored zip entries, and every sampled value equals the
generator of models/pipelines/mg2_synth.h re-implemented here in numpy.

    flick synth OUT [--size full] [--seed N]
    check_mg2_synth.py OUT [--seed N] [--samples 4096] [--full]

Values are compared after the file's rounding (bf16 for the DiT files). The
C++ evaluates fma(centred sum, a, offset) in double; numpy rounds the product
first, which for tensors with an offset (norm weights: 1 + 0.1 g) can move the
double by one ulp and, very rarely, the float: up to 1 float ulp is accepted
and counted.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import sys
import zipfile
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open

ROOT = Path(__file__).resolve().parent.parent
FILES = [
    "base_distilled_model/base_distill.safetensors",
    "gta_distilled_model/gta_keyboard2dim.safetensors",
    "templerun_distilled_model/templerun_7dim_onlykey.safetensors",
    "Wan2.1_VAE.pth",
    "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth",
]
M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix64_int(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def mix64(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def tensor_key(seed: int, name: str) -> int:
    h = 0xCBF29CE484222325
    for c in name.encode():
        h = ((h ^ c) * 0x100000001B3) & M64
    return mix64_int(h ^ mix64_int((seed + GOLDEN) & M64))


def scale(name: str, shape: list[int]) -> tuple[float, float]:
    if name.endswith("log_scale"):
        return math.log(1 / 0.07), 0.0
    if name.endswith(".bias"):
        return 0.0, 0.02
    if name.endswith("modulation"):
        return 0.0, 1.0 / math.sqrt(shape[-1] if shape else 1)
    if name.endswith(".gamma") or (len(shape) == 1 and name.endswith(".weight")):
        return 1.0, 0.1
    if re.search(r"(embedding(\.weight)?|visual\.head)$", name) and "patch_embedding" not in name:
        return 0.0, 0.02
    fan_in = math.prod(shape[1:]) if len(shape) > 1 else 1
    return 0.0, 1.0 / math.sqrt(max(fan_in, 1))


def values(seed: int, name: str, shape: list[int], idx: np.ndarray) -> np.ndarray:
    offset, std = scale(name, shape)
    a = std / math.sqrt(4.0 * (65536.0 * 65536.0 - 1.0) / 12.0)
    with np.errstate(over="ignore"):
        z = mix64(np.uint64(tensor_key(seed, name)) + (idx.astype(np.uint64) + np.uint64(1)) * np.uint64(GOLDEN))
    m = np.uint64(0xFFFF)
    s = (z & m) + ((z >> np.uint64(16)) & m) + ((z >> np.uint64(32)) & m) + (z >> np.uint64(48))
    # C++: fma(centred, a, offset) in double, one rounding; here two (the
    # product, then the sum), equal unless offset != 0 and a tie is near.
    return ((s.astype(np.int64) - 131070).astype(np.float64) * a + offset).astype(np.float32)


def check_values(t: torch.Tensor, name: str, seed: int, samples: int, rng) -> tuple[int, int, int]:
    """(checked, exact, within one ulp) for a sample of the tensor's elements."""
    flat = t.reshape(-1)
    n = flat.numel()
    if n == 0:
        return 0, 0, 0
    idx = np.arange(n) if n <= samples else np.unique(rng.integers(0, n, samples))
    want = torch.from_numpy(values(seed, name, list(t.shape), idx)).to(t.dtype).float()
    got = flat[torch.from_numpy(idx)].float()
    exact = int((got == want).sum())
    ulp = torch.from_numpy(np.spacing(np.abs(want.numpy()))).float()
    if t.dtype == torch.bfloat16:
        ulp = ulp * 65536
    close = int(((got - want).abs() <= ulp).sum())
    return len(idx), exact, close


def pattern(key: str) -> str:
    """The key with its block numbers blanked: the tiny size has fewer blocks."""
    return re.sub(r"\.\d+\.", ".#.", key)


def check_zip(path: Path) -> None:
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        for info in z.infolist():
            assert info.compress_type == zipfile.ZIP_STORED, info.filename
            f.seek(info.header_offset + 26)
            name_len, extra_len = np.frombuffer(f.read(4), dtype="<u2")
            data_at = info.header_offset + 30 + int(name_len) + int(extra_len)
            if "/data/" in info.filename:
                assert data_at % 64 == 0, f"{info.filename} data at {data_at}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--samples", type=int, default=4096, help="values checked per tensor")
    ap.add_argument("--full", action="store_true",
                    help="compare keys, shapes and order with full_keys.json.gz (default: the key "
                         "patterns, block numbers blanked)")
    args = ap.parse_args()
    tables = json.load(gzip.open(ROOT / "tests/data/mg2/full_keys.json.gz", "rt"))
    rng = np.random.default_rng(0)
    ok = True
    for rel in FILES:
        path = Path(args.dir) / rel
        if not path.exists():
            continue
        ref_keys = tables[rel]["keys"]
        if path.suffix == ".pth":
            check_zip(path)
            sd = torch.load(path, weights_only=True, mmap=True)
            if path.stat().st_size < (1 << 30):  # a plain load reads everything into memory
                plain = torch.load(path, weights_only=True)
                assert list(plain) == list(sd)
                assert all(torch.equal(plain[k], sd[k]) for k in sd)
            names, tensors = list(sd), sd
        else:
            f = safe_open(str(path), framework="pt")
            names = sorted(f.keys())
            tensors = {k: f.get_tensor(k) for k in names}
            ref_keys = sorted(ref_keys)
        if args.full:
            got = [[k, list(tensors[k].shape)] for k in names]
            if got != [[k, list(s)] for k, s in ref_keys]:
                print(f"{path}: keys or shapes differ from full_keys.json.gz", file=sys.stderr)
                ok = False
        elif {pattern(k) for k in names} != {pattern(k) for k, _ in ref_keys}:
            print(f"{path}: key patterns differ from full_keys.json.gz", file=sys.stderr)
            ok = False
        checked = exact = close = 0
        for k in names:
            c, e, w = check_values(tensors[k], k, args.seed, args.samples, rng)
            checked, exact, close = checked + c, exact + e, close + w
        dtypes = sorted({str(tensors[k].dtype).removeprefix("torch.") for k in names})
        print(f"{rel}: {len(names)} tensors {','.join(dtypes)}; values {exact}/{checked} exact, "
              f"{close}/{checked} within 1 ulp")
        ok &= close == checked
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
