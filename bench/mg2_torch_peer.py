#!/usr/bin/env python3
"""flick's Matrix-Game 2.0 beside PyTorch, in one run (issue 15 deliverable 6).

1. The DiT call. The PyTorch peer is diffusers' WanTransformer3DModel at the
   1.3B configuration (dim 1536 = 12 heads x 128, FFN 8960, 30 layers, patch
   1x2x2, 36 input channels) in BF16 on the CPU over one Matrix-Game block:
   3 latent frames of 44x80 = 2640 tokens, cross attention over 257 context
   tokens of width 1280 (the CLIP features Matrix-Game conditions on; here
   through diffusers' text embedder MLP, the same shape of work as
   Matrix-Game's img_emb). This is the same DiT core without the action
   module and without the KV cache: diffusers' self attention sees the
   block's 2640 tokens, flick's sees 2640 queries against a 5280-token
   window, so flick does about 8 % more attention work per block. flick's
   side: `flick bench --filter mg2.bf16` and `--filter mg2.int8` (the
   measured call is block 1's first step).
2. The whole job. flick: the same two bench runs load the pipeline from
   --mg2-weights and run one universal job of 6 latents = 21 frames at
   352x640 through Mg2Pipeline::run (what `flick run` runs for a
   matrix-game-2 job, without the video file writing): seconds per frame,
   conditioning and load apart. The reference: with --ref-job,
   tools/mg2_ref_job.py runs the reference Matrix-Game pipeline itself
   (inference.py's job: VAE encode, CLIP, CausalInferencePipeline with its
   streaming decoder, in bf16 unless --ref-decoder-dtype fp16 asks for the
   reference's own fp16) on the CPU on the same weights, same length.

Prints every figure and the ratios (PyTorch time / flick time: > 1 means
flick is faster). Without torch it prints why and exits 0, so scripts can
call it unconditionally.

Memory: the flick runs and the DiT peer take 6-8 GiB each, the reference job
~12 GiB. With --lock FILE each runs under flock(1) on FILE, shared for the
former and exclusive for the reference job (one at a time, nothing else big
beside it).

  /work/venv-fp/bin/python bench/mg2_torch_peer.py --flick build/flick \\
      --mg2-weights DIR [--ref-job] [--lock /path/bigmem.lock] [--threads N]
"""
import argparse
import fcntl
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def locked(cmd, lock, exclusive):
    if not lock:
        return cmd
    return ["flock", "-x" if exclusive else "-s", lock] + cmd


def run_flick(flick, weights, precision, lock):
    """One `flick bench --filter mg2.<precision>`: {"dit": s, "job": s/frame, ...}."""
    cmd = [flick, "bench", "--filter", f"mg2.{precision}"]
    if weights:
        cmd += ["--mg2-weights", weights]
    out = subprocess.run(locked(cmd, lock, False), capture_output=True, text=True)
    sys.stdout.write(out.stdout)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        return {}
    found = {}
    for line in out.stdout.splitlines():
        # "mg2.bf16 dit 2640 tok, 5280 kv   11234.567  ...": milliseconds.
        m = re.match(r"mg2\.[\w-]+ dit .*? kv\s+([0-9.]+)\s", line)
        if m:
            found["dit"] = float(m.group(1)) / 1e3
        m = re.search(r"whole (\d+)-frame job ([0-9.]+) s/frame \(conditioning ([0-9.]+) s\), "
                      r"load ([0-9.]+) s", line)
        if m:
            found.update(frames=int(m.group(1)), job=float(m.group(2)),
                         conditioning=float(m.group(3)), load=float(m.group(4)))
    return found


def run_ref_job(weights, latents, threads, lock, decoder_dtype):
    cmd = [sys.executable, str(ROOT / "tools/mg2_ref_job.py"), "--weights", weights,
           "--latents", str(latents), "--threads", str(threads), "--decoder-dtype", decoder_dtype]
    out = subprocess.run(locked(cmd, lock, True), capture_output=True, text=True)
    sys.stdout.write(out.stdout)
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-4000:])
        return {}
    for line in out.stdout.splitlines():
        if line.startswith("REF_JOB "):
            return {k: float(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
    return {}


def torch_dit_call(args):
    """Seconds of one WanTransformer3DModel forward (best of --repeat), scaled
    to 30 layers; None without torch/diffusers."""
    try:
        import torch
        from diffusers import WanTransformer3DModel
        from diffusers.utils import logging as diffusers_logging
        diffusers_logging.set_verbosity_error()
    except ImportError as e:
        print(f"mg2_torch_peer: PyTorch DiT peer skipped, {e.name or e} is not installed "
              "(pip install torch diffusers)")
        return None
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
    return best * scale


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flick", help="flick binary: also run its mg2.bf16 and mg2.int8 benchmarks")
    ap.add_argument("--mg2-weights", help="a flick synth --size full directory (flick bench and the "
                    "reference job; without it flick bench writes its own and --ref-job is refused)")
    ap.add_argument("--ref-job", action="store_true",
                    help="also run the reference Matrix-Game pipeline's whole job on the CPU")
    ap.add_argument("--ref-latents", type=int, default=6,
                    help="latent frames of the reference job (6 = 21 frames, flick bench's job)")
    # bf16 by default: the reference's fp16 decoder (inference.py's dtype) runs
    # PyTorch's fp16 Conv3d on one thread in a slow path on CPUs without fp16
    # units (Zen 4: no frame decoded in 10+ minutes, twice; bench/RESULTS.md).
    ap.add_argument("--ref-decoder-dtype", choices=["fp16", "bf16"], default="bf16")
    ap.add_argument("--lock", help="flock(1) file: shared for flick and the DiT peer, exclusive "
                    "for the reference job")
    ap.add_argument("--precisions", default="bf16,int8", help="flick bench runs, in order "
                    "(bf16, int8, fp8, all-int8: int8 with the INT8 VAE convs)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--layers", type=int, default=30, help="30 = the real model; fewer for a smoke run")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    if args.ref_job and not args.mg2_weights:
        ap.error("--ref-job needs --mg2-weights (the reference runs the same weights)")

    start = time.time()
    print(f"load average at the start: {os.getloadavg()[0]:.2f} (1 min), "
          f"{os.getloadavg()[1]:.2f} (5 min)")
    flick = {}
    if args.flick:
        for p in args.precisions.split(","):
            flick[p] = run_flick(args.flick, args.mg2_weights, p, args.lock)

    lock_fd = None
    if args.lock:  # the DiT peer in this process: a shared hold of the lock
        lock_fd = os.open(args.lock, os.O_RDONLY | os.O_CREAT, 0o644)
        fcntl.flock(lock_fd, fcntl.LOCK_SH)
    try:
        torch_dit = torch_dit_call(args)
    finally:
        if lock_fd is not None:
            os.close(lock_fd)  # released before the reference job asks for it exclusively

    ref = run_ref_job(args.mg2_weights, args.ref_latents, args.threads, args.lock,
                      args.ref_decoder_dtype) if args.ref_job else {}

    print()
    print(f"summary ({time.time() - start:.0f} s; load average now {os.getloadavg()[0]:.2f}), "
          f"{args.threads} threads; ratio = PyTorch time / flick time:")
    for p, f in flick.items():
        if "dit" in f:
            line = f"  DiT call, flick {p.upper()}: {f['dit']:.2f} s"
            if torch_dit:
                line += f"; PyTorch BF16 {torch_dit:.2f} s: {torch_dit / f['dit']:.2f}x"
            print(line)
    if torch_dit and not flick:
        print(f"  DiT call, PyTorch BF16: {torch_dit:.2f} s")
    ref_frames = int(ref.get("frames", 0))
    for p, f in flick.items():
        if "job" in f:
            line = (f"  whole job, flick {p.upper()}: {f['job']:.2f} s/frame "
                    f"({f['frames']} frames, conditioning {f['conditioning']:.1f} s; load {f['load']:.0f} s)")
            if ref:
                line += f"; reference {ref['per_frame_s']:.2f} s/frame: {ref['per_frame_s'] / f['job']:.2f}x"
                if ref_frames != f["frames"]:
                    line += f" (reference job {ref_frames} frames)"
            print(line)
    if ref:
        print(f"  reference job: {ref['per_frame_s']:.2f} s/frame ({ref_frames} frames; VAE encode "
              f"{ref['encode_s']:.1f} s, CLIP {ref['clip_s']:.1f} s, {int(ref['dit_calls'])} DiT calls "
              f"{ref['dit_s']:.1f} s, decode {ref['decode_s']:.1f} s; load {ref['load_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
