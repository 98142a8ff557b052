#!/usr/bin/env python3
"""Writes tests/data/quant/: a torch reference of flick's weight quantizers
(runtime/quant/quantize.h) on small weights, for tests/quant/test_quantize.cpp.

Usage: /work/venv/bin/python tools/gen_quant_fixtures.py [OUT_DIR]

manifest.txt: one line per case, "<case> <dtype> <dim0> <dim1> ...".
<case>.bin, raw little-endian, in this order:
  the input weight (its dtype, row-major)
  then for each scheme in (int8, fp8-tensor, fp8-channel):
    q        int8 / float8_e4m3fn codes, numel bytes
    scale    float32 [N] or [1]
    deq      float32, numel: q.float() * scale
    metrics  float64 [3]: cosine, max relative error, SNR dB (deq vs the
             input, computed in float64)
"""
import os
import sys

import numpy as np
import torch

SCHEMES = ("int8", "fp8-tensor", "fp8-channel")
DTYPE_NAME = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


def scale_of(amax, qmax):
    scale = amax / qmax  # float32 true division, as flick
    return torch.where(scale == 0, torch.ones_like(scale), scale)


def quantize(w, scheme):
    """The reference: w [N, ...] -> (q, scale [N] or [1], deq) exactly as the
    common recipes write it in torch."""
    x = w.float().reshape(w.shape[0], -1)  # [N, K]
    if scheme == "int8":
        scale = scale_of(x.abs().amax(dim=1), 127.0)
        q = torch.round(x / scale[:, None]).clamp(-127, 127).to(torch.int8)
    else:
        amax = x.abs().amax(dim=1) if scheme == "fp8-channel" else x.abs().amax().reshape(1)
        scale = scale_of(amax, 448.0)
        q = (x / scale[:, None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    deq = q.float() * scale[:, None]
    return q.reshape(w.shape), scale, deq.reshape(w.shape)


def metrics(w, deq):
    a = w.double().flatten()
    b = deq.double().flatten()
    cosine = float((a * b).sum() / (a.norm() * b.norm()))
    max_rel = float((a - b).abs().max() / a.abs().max())
    err = float(((a - b) ** 2).sum())
    snr = float("inf") if err == 0 else float(10 * torch.log10((a ** 2).sum() / err))
    return np.array([cosine, max_rel, snr], dtype=np.float64)


def linear_f32(g):
    n, k = 24, 96
    w = torch.randn(n, k, generator=g) * torch.pow(10.0, torch.empty(n, 1).uniform_(-4, 1, generator=g))
    w[3] = 0  # all-zero row: scale 1
    w[5, 17] = 50 * w[5].abs().max()  # one outlier
    # amax 127 -> int8 scale exactly 1: half-integers are exact ties.
    w[7] = torch.tensor([(i % 254) - 126.5 for i in range(k)]).clamp(-127, 127)
    w[7, 0] = 127.0
    # amax 448 -> fp8 channel scale exactly 1: E4M3 midpoints are exact ties.
    ties = torch.tensor([8.5, 9.5, 17.0, 19.0, 35.0, 39.0, 0.0146484375, 464.0 / 1.0357])
    w[9] = ties.repeat(k // ties.numel() + 1)[:k] * torch.where(torch.arange(k) % 2 == 0, 1.0, -1.0)
    w[9, 1] = 448.0
    w[11] *= 1e-30  # tiny but normal
    w[13] = torch.randn(k, generator=g) * 1e-39  # f32 subnormals: subnormal scales
    return w


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "quant")
    os.makedirs(out_dir, exist_ok=True)
    g = torch.Generator().manual_seed(1234)
    cases = {
        "linear_f32": linear_f32(g),
        "linear_bf16": (torch.randn(16, 80, generator=g) * 0.02).to(torch.bfloat16),
        "linear_f16": (torch.randn(16, 80, generator=g) * 0.05).to(torch.float16),
        # A Wan-VAE-style conv3d weight [O, I, kt, kh, kw], quantized per O.
        "conv3d_f32": torch.randn(6, 4, 2, 3, 3, generator=g) * 0.1,
    }
    manifest = []
    total = 0
    for name, w in cases.items():
        manifest.append(" ".join([name, DTYPE_NAME[w.dtype]] + [str(d) for d in w.shape]))
        parts = [w.contiguous().view(torch.uint8).numpy().tobytes()]
        for scheme in SCHEMES:
            q, scale, deq = quantize(w, scheme)
            parts += [q.contiguous().view(torch.uint8).numpy().tobytes(),
                      scale.numpy().astype("<f4").tobytes(),
                      deq.numpy().astype("<f4").tobytes(),
                      metrics(w, deq).astype("<f8").tobytes()]
            print(f"{name:12s} {scheme:11s} cosine {metrics(w, deq)[0]:.6f}")
        blob = b"".join(parts)
        with open(os.path.join(out_dir, name + ".bin"), "wb") as f:
            f.write(blob)
        total += len(blob)
    with open(os.path.join(out_dir, "manifest.txt"), "w") as f:
        f.write("\n".join(manifest) + "\n")
    print(f"wrote {total / 1e3:.1f} kB to {os.path.normpath(out_dir)} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
