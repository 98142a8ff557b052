#!/usr/bin/env python3
"""Synthetic FULL-SIZE Matrix-Game 2.0 checkpoints with the real key names,
shapes and dtypes, deterministic from a seed. For loader / shape-detection /
benchmark tests; never committed (about 15 GB for everything).

Keys come from tests/data/mg2/full_keys.json.gz, which tools/mg2_goldens.py
derives from the reference classes (built on the meta device); this script
needs neither the reference code nor a GPU. Layout = the Hugging Face repo
Skywork/Matrix-Game-2.0:

  OUT/base_distilled_model/base_distill.safetensors                 universal
  OUT/gta_distilled_model/gta_keyboard2dim.safetensors              gta_drive
  OUT/templerun_distilled_model/templerun_7dim_onlykey.safetensors  templerun
  OUT/Wan2.1_VAE.pth                                                vae
  OUT/models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth       clip

Values: every tensor has its own PCG64 stream seeded by (seed, crc32(key)),
so a tensor does not depend on which files are written or in which order:
matrices N(0, 1/fan_in), 1-D weights and VAE gammas 1 + 0.1 N, biases
0.02 N, modulation N/sqrt(dim), embeddings 0.02 N, log_scale log(1/0.07).

    mg2_synth_full.py OUT [--only universal,vae] [--seed 0] [--dit-dtype bf16|f32]
    mg2_synth_full.py --key-tables      # markdown tables for tests/data/mg2/README.md
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import math
import re
import struct
import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np
import torch

DEFAULT_KEYS = Path(__file__).resolve().parent.parent / "tests/data/mg2/full_keys.json.gz"
FILES = {
    "universal": "base_distilled_model/base_distill.safetensors",
    "gta_drive": "gta_distilled_model/gta_keyboard2dim.safetensors",
    "templerun": "templerun_distilled_model/templerun_7dim_onlykey.safetensors",
    "vae": "Wan2.1_VAE.pth",
    "clip": "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth",
}
CHUNK = 1 << 24                      # elements generated per step (64 MiB of fp32)
ST_DTYPES = {"BF16": (torch.bfloat16, 2), "F32": (torch.float32, 4), "F16": (torch.float16, 2)}


def load_tables(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def scale_for(key: str, shape: list[int]) -> tuple[float, float]:
    """(offset, std) of the synthetic values for one tensor."""
    if key.endswith("log_scale"):
        return math.log(1 / 0.07), 0.0
    if key.endswith(".bias"):
        return 0.0, 0.02
    if key.endswith("modulation"):
        return 0.0, 1.0 / math.sqrt(shape[-1])
    if key.endswith(".gamma") or (len(shape) == 1 and key.endswith(".weight")):
        return 1.0, 0.1
    if re.search(r"(embedding(\.weight)?|visual\.head)$", key) and "patch_embedding" not in key:
        return 0.0, 0.02
    fan_in = math.prod(shape[1:]) if len(shape) > 1 else 1
    return 0.0, 1.0 / math.sqrt(fan_in)


def generate(key: str, shape: list[int], seed: int):
    """Yields float32 chunks of the tensor, in row-major order."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, zlib.crc32(key.encode())])))
    offset, std = scale_for(key, shape)
    n = math.prod(shape)
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        v = rng.standard_normal(m, dtype=np.float32)
        if std != 1.0:
            v *= np.float32(std)
        if offset:
            v += np.float32(offset)
        yield v


def to_bytes(chunk: np.ndarray, dtype: str) -> bytes:
    t = torch.from_numpy(chunk).to(ST_DTYPES[dtype][0])
    return t.view(torch.int16).numpy().tobytes() if ST_DTYPES[dtype][1] == 2 else t.numpy().tobytes()


def write_safetensors(path: Path, keys: list, dtype: str, seed: int) -> None:
    """Streams a safetensors file: header first (layout as safetensors.torch
    writes it: tensors ordered by alignment then name, header padded with
    spaces to 8 bytes), then each tensor's bytes, one chunk at a time."""
    itemsize = ST_DTYPES[dtype][1]
    ordered = sorted(keys, key=lambda ks: (-itemsize, ks[0]))
    header, offset = {}, 0
    for key, shape in ordered:
        size = math.prod(shape) * itemsize
        header[key] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for key, shape in ordered:
            for chunk in generate(key, shape, seed):
                f.write(to_bytes(chunk, dtype))


def write_pth(path: Path, keys: list, seed: int) -> None:
    """torch.save of an OrderedDict of fp32 tensors (a state dict, as the real
    Wan2.1_VAE.pth / open-clip .pth), with the storages backed by a memmap so
    that multi-GB files need little RAM."""
    total = sum(math.prod(s) for _, s in keys)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".synth-", suffix=".f32") as tmp:
        backing = np.memmap(tmp.name, dtype=np.float32, mode="w+", shape=(max(total, 1),))
        sd, pos = collections.OrderedDict(), 0
        for key, shape in keys:
            n = math.prod(shape)
            at = pos
            for chunk in generate(key, shape, seed):
                backing[at:at + len(chunk)] = chunk
                at += len(chunk)
            sd[key] = torch.from_numpy(backing[pos:pos + n]).view(shape) if shape else \
                torch.from_numpy(backing[pos:pos + 1]).view(())
            pos += n
        backing.flush()
        torch.save(sd, str(path))
        del sd, backing


def _fmt(vals: list[int]) -> str:
    vals = sorted(set(vals))
    if len(vals) > 2 and vals == list(range(vals[0], vals[-1] + 1)):
        return f"{vals[0]}..{vals[-1]}"
    return ",".join(map(str, vals))


def _rows(pattern: str, idx: list[tuple]) -> list[tuple[str, int]]:
    """Collapses the index tuples of one (pattern, shape) group into rows whose
    index sets are full products, splitting on the leading index if needed."""
    if not idx or not idx[0]:
        return [(pattern, len(idx))]
    cols = list(zip(*idx))
    if len(idx) == math.prod(len(set(c)) for c in cols):
        name = pattern
        for c in cols:
            rep = _fmt(c)
            name = name.replace("{}", rep if len(set(c)) == 1 else "{" + rep + "}", 1)
        return [(name, len(idx))]
    rows = []
    for first in sorted(set(cols[0])):
        rest = [i[1:] for i in idx if i[0] == first]
        rows += _rows(pattern.replace("{}", str(first), 1), rest)
    return rows


def key_tables_markdown(tables: dict) -> str:
    """Every key of every file; numeric path components collapse into
    {a..b} ranges or {a,b} lists."""
    out = []
    for fname, t in tables.items():
        out.append(f"### `{fname}`\n")
        out.append(f"{t['tensors']} tensors, {t['parameters']:,} parameters, dtype {t['dtype']}.\n")
        groups = collections.OrderedDict()
        for key, shape in t["keys"]:
            parts = key.split(".")
            nums = tuple(int(p) for p in parts if p.isdigit())
            pattern = ".".join("{}" if p.isdigit() else p for p in parts)
            groups.setdefault((pattern, tuple(shape)), []).append(nums)
        out.append("| key | shape | count |\n|---|---|---|")
        total = 0
        for (pattern, shape), idx in groups.items():
            for name, n in _rows(pattern, idx):
                out.append(f"| `{name}` | {list(shape)} | {n} |")
                total += n
        assert total == t["tensors"]
        out.append("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", help="output directory (Hugging Face layout)")
    ap.add_argument("--only", default=",".join(FILES), help="comma list of: " + ", ".join(FILES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dit-dtype", choices=["BF16", "F32"], type=str.upper, default=None,
                    help="DiT safetensors dtype (default: the table's, BF16)")
    ap.add_argument("--keys", default=str(DEFAULT_KEYS))
    ap.add_argument("--key-tables", action="store_true", help="print the README key tables and exit")
    args = ap.parse_args()
    tables = load_tables(Path(args.keys))
    if args.key_tables:
        print(key_tables_markdown(tables))
        return
    if not args.out:
        ap.error("OUT directory required")
    out = Path(args.out)
    for name in args.only.split(","):
        fname = FILES[name]
        t = tables[fname]
        path = out / fname
        if fname.endswith(".safetensors"):
            write_safetensors(path, t["keys"], args.dit_dtype or t["dtype"], args.seed)
        else:
            assert t["dtype"] == "F32"
            write_pth(path, t["keys"], args.seed)
        print(f"{path}: {t['tensors']} tensors, {path.stat().st_size / 1e9:.2f} GB", file=sys.stderr)


if __name__ == "__main__":
    main()
