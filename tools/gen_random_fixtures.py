#!/usr/bin/env python3
"""Writes tests/data/random/: torch.randn outputs for a few seeds and sizes,
the oracle of runtime/random.cpp. Needs torch (tools only).

Each case is <name>.bin: raw little-endian float32 (or bf16 bits as uint16).
cases.txt lists: name seed dtype n1 [n2 ...] (consecutive randn calls on one
generator, concatenated in the file)."""
import pathlib
import sys

import torch

out = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "random"
out.mkdir(parents=True, exist_ok=True)
cases = [
    ("f32_s42_n5", 42, "f32", [5]),
    ("f32_s42_n16", 42, "f32", [16]),
    ("f32_s0_n37", 0, "f32", [37]),
    ("f32_s123_n7040", 123, "f32", [7040]),
    ("f32_s7_seq", 7, "f32", [100, 3, 64]),
    ("bf16_s42_n3520", 42, "bf16", [3520]),
    ("bf16_s1_n41", 1, "bf16", [41]),
    ("bf16_s2_n9", 2, "bf16", [9]),
]
lines = []
for name, seed, dt, sizes in cases:
    g = torch.Generator().manual_seed(seed)
    parts = []
    for n in sizes:
        if dt == "f32":
            parts.append(torch.randn(n, generator=g).numpy().tobytes())
        else:
            parts.append(torch.randn(n, generator=g, dtype=torch.bfloat16).view(torch.int16).numpy().tobytes())
    (out / f"{name}.bin").write_bytes(b"".join(parts))
    lines.append(" ".join([name, str(seed), dt] + [str(n) for n in sizes]))
(out / "cases.txt").write_text(f"# torch {torch.__version__}\n" + "\n".join(lines) + "\n")
print("wrote", out, file=sys.stderr)
