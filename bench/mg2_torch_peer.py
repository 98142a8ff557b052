#!/usr/bin/env python3
"""The PyTorch peer for flick's Matrix-Game DiT benchmark (issue 4 targets).

Times diffusers' WanTransformer3DModel at the 1.3B configuration (dim 1536 =
12 heads x 128, FFN 8960, 30 layers, patch 1x2x2, 36 input channels) in BF16
on the CPU over one Matrix-Game block: 3 latent frames of 44x80 = 2640 tokens,
cross attention over 257 context tokens of width 1280 (the CLIP features
Matrix-Game conditions on; here through diffusers' text embedder MLP, the same
shape of work as Matrix-Game's img_emb). This is the same DiT core without the
action module and without the KV cache: diffusers' self attention sees the
block's 2640 tokens, flick's sees 2640 queries against a 5280-token window, so
flick does about 8 % more attention work per block.

With --flick PATH it also runs `flick bench --filter mg2.bf16` in the same run
(same machine state) and prints the ratio. Without torch it prints why and
exits 0, so scripts can call it unconditionally.

  /work/venv/bin/python bench/mg2_torch_peer.py [--flick build/flick] [--threads N]
"""
import argparse
import os
import re
import subprocess
import sys
import time


def run_flick(flick, weights):
    cmd = [flick, "bench", "--filter", "mg2.bf16"]
    if weights:
        cmd += ["--mg2-weights", weights]
    out = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(out.stdout)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        return {}
    # Rows look like "mg2.bf16 dit 2640 tok, 5280 kv   11234.567  ...": the
    # second column is milliseconds.
    found = {}
    for line in out.stdout.splitlines():
        m = re.match(r"(mg2\.\w+ dit) .*? kv\s+([0-9.]+)\s", line)
        if m:
            found[m.group(1)] = float(m.group(2)) / 1e3
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flick", help="flick binary: also run its mg2.dit benchmark")
    ap.add_argument("--mg2-weights", help="passed to flick bench (a flick synth --size full directory)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--layers", type=int, default=30, help="30 = the real model; fewer for a smoke run")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    try:
        import torch
        from diffusers import WanTransformer3DModel
        from diffusers.utils import logging as diffusers_logging
        diffusers_logging.set_verbosity_error()
    except ImportError as e:
        print(f"mg2_torch_peer: skipped, {e.name or e} is not installed "
              "(pip install torch diffusers)")
        return 0

    flick = run_flick(args.flick, args.mg2_weights) if args.flick else {}

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with torch.device("cpu"):
        model = WanTransformer3DModel(
            patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128,
            in_channels=36, out_channels=16, text_dim=1280, freq_dim=256, ffn_dim=8960,
            num_layers=args.layers, cross_attn_norm=True, eps=1e-6)
    model = model.to(torch.bfloat16).eval()
    # As from_pretrained(torch_dtype=bf16) does: the modules diffusers marks
    # numerically sensitive (time embedder, norms, modulation table) stay fp32.
    keep = set(getattr(model, "_keep_in_fp32_modules", None) or [])
    for name, param in model.named_parameters():
        if keep & set(name.split(".")):
            param.data = param.data.float()
    x = torch.randn(1, 36, 3, 44, 80, dtype=torch.bfloat16)
    t = torch.tensor([500], dtype=torch.long)
    ctx = torch.randn(1, 257, 1280, dtype=torch.bfloat16)
    with torch.inference_mode():
        model(x, t, ctx, return_dict=False)  # warm-up: oneDNN primitive creation
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            model(x, t, ctx, return_dict=False)
            times.append(time.perf_counter() - t0)
    best = min(times)
    scale = 30 / args.layers
    print(f"torch {torch.__version__} diffusers WanTransformer3DModel 1.3B bf16, "
          f"{args.layers} layers, 2640 tokens, {args.threads} threads: "
          f"{best:.2f} s/block" + (f" ({best * scale:.2f} s scaled to 30 layers)" if scale != 1 else ""))
    for name, secs in sorted(flick.items()):
        print(f"{name}: {secs:.2f} s/block = {best * scale / secs:.2f}x the PyTorch peer's speed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
