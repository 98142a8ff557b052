#!/usr/bin/env python3
"""The PyTorch peer for flick's FramePack DiT benchmark (issue 13 target:
"the DiT call at full size at the smallest bucket the model accepts, seconds
per step, beside PyTorch eager bf16 running the same transformer on the same
tokens in the same run (>= 2x in int8)").

The released transformer (20 double + 40 single blocks, 25.7 GB in bf16) does
not fit a 24 GB machine for PyTorch, so both run a full-width checkpoint with
fewer blocks (default 2 + 4, random values: `flick synth --model framepack
--size full --dit-layers 2,4 --parts transformer`), and the per-block times
give the 20 + 40 call by extrapolation (labelled as such).

One run, the same tokens on both sides:
  1. writes DIR/bench_inputs.safetensors: bf16 latents of the 640 bucket with
     the fewest tokens (544x704: 68x88 latents), latent window 9, clean
     latents 1x / 2x / 4x of 2 / 2 / 16 frames with the indices of the first
     section of a 4-section original-variant video (demo_gradio.py:187-212,
     latent_padding 3), 729 SigLIP tokens, 20 valid LLaMA tokens;
  2. runs `flick bench --filter framepack --framepack-weights DIR` (bf16 and
     int8; FLICK_FRAMEPACK_BENCH_OUT keeps its outputs);
  3. runs FramePack's HunyuanVideoTransformer3DModelPacked (lllyasviel/
     FramePack @ 97fe5db, exported to --framepack-dir; diffusers 0.33.1) eager
     bf16 on the CPU with torch's SDPA (hunyuan_video_packed.py:108-122, the
     path without flash-attn / xformers / sage), as the demo calls it
     (k_diffusion_hunyuan.py:84-110: bf16 timestep and guidance, the LLaMA
     states padded to 512 with their mask, high_quality_fp32_output_for_inference
     as demo_gradio.py sets it), timing each block with forward hooks;
  4. prints per call, per block and the extrapolation, the ratios, and the
     cosine of flick's outputs against PyTorch's (a check that both ran the
     same model on the same tokens).

  /work/venv-fp/bin/python bench/framepack_torch_peer.py [--flick build/flick]
      [--weights DIR] [--framepack-dir DIR] [--layers 2,4] [--repeat 2]

Memory: about 7 GB at the peak (2 + 4 blocks; flick's side and PyTorch's
run one after the other).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PADDED_TEXT = 512  # crop_or_pad_yield_mask(llama_vec, length=512) (demo_gradio.py)
TEXT_TOKENS, IMAGE_TOKENS = 20, 729
TIMESTEP, GUIDANCE = 1000.0, 10000.0  # the first step; gs 10 * 1000 (bf16: 9984)


def import_reference(fp_dir):
    # tools/framepack_dit_goldens.py installs the stubs (einops, accelerate)
    # and imports the model from the directory named by its first argument,
    # with attn_varlen_func on torch SDPA.
    argv = sys.argv
    sys.argv = [argv[0], str(fp_dir)]
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import framepack_dit_goldens as g
    finally:
        sys.argv = argv
    return g.HunyuanVideoTransformer3DModelPacked


def smallest_bucket():
    from diffusers_helper.bucket_tools import bucket_options
    return min(bucket_options[640], key=lambda hw: (hw[0] // 16) * (hw[1] // 16))


def section_indices():
    # demo_gradio.py:197-208 for latent_padding 3, latent_window_size 9.
    import torch
    lws, pad = 9, 3
    idx = torch.arange(0, sum([1, pad, lws, 1, 2, 16])).unsqueeze(0)
    pre, _, latent, post, i2x, i4x = idx.split([1, pad, lws, 1, 2, 16], dim=1)
    return latent, torch.cat([pre, post], dim=1), i2x, i4x


def write_inputs(path, cfg):
    import torch
    from safetensors.torch import save_file
    h, w = (s // 8 for s in smallest_bucket())
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(s, generator=g).to(torch.bfloat16)  # noqa: E731
    latent, clean, i2x, i4x = section_indices()
    t = {
        "latents": r(1, 16, latent.shape[1], h, w),
        "clean_latents": r(1, 16, clean.shape[1], h, w),
        "clean_latents_2x": r(1, 16, i2x.shape[1], h, w),
        "clean_latents_4x": r(1, 16, i4x.shape[1], h, w),
        "text": r(1, TEXT_TOKENS, cfg["text_embed_dim"]),
        "pooled": r(1, cfg["pooled_projection_dim"]),
        "image_embeddings": r(1, IMAGE_TOKENS, cfg["image_proj_dim"]),
        "latent_indices": latent.to(torch.int32)[0],
        "clean_latent_indices": clean.to(torch.int32)[0],
        "clean_latent_2x_indices": i2x.to(torch.int32)[0],
        "clean_latent_4x_indices": i4x.to(torch.int32)[0],
    }
    save_file({k: v.contiguous() for k, v in t.items()}, str(path))
    return t


def run_flick(flick, weights, out_dir, quick):
    cmd = [flick, "bench", "--filter", "framepack", "--framepack-weights", str(weights)]
    if quick:
        cmd.append("--quick")  # one call per precision
    env = dict(os.environ, FLICK_FRAMEPACK_BENCH_OUT=str(out_dir))
    print("$ FLICK_FRAMEPACK_BENCH_OUT=" + str(out_dir) + " " + " ".join(cmd), flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    sys.stdout.write(out.stdout)
    sys.stdout.flush()
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        return {}
    # Rows: the case name padded to 46 characters, then milliseconds
    # (jobs/cmd_bench.cpp print_row).
    found = {}
    for line in out.stdout.splitlines():
        name, rest = line[:46].strip(), line[46:].split()
        if name.startswith("framepack.") and rest:
            try:
                found[name] = float(rest[0]) / 1e3
            except ValueError:
                pass
    return found


def run_torch(model_cls, folder, t, repeat):
    import torch
    # Built on the meta device and given the checkpoint's tensors (without
    # accelerate, from_pretrained would initialise every weight first: twice
    # the memory).
    from safetensors.torch import load_file
    with torch.device("meta"):
        model = model_cls.from_config(model_cls.load_config(str(folder)))
    files = sorted(Path(folder).glob("diffusion_pytorch_model*.safetensors"))
    sd = {}
    for f in files:
        sd.update(load_file(str(f)))
    model.load_state_dict({k: v.to(torch.bfloat16) for k, v in sd.items()}, strict=True, assign=True)
    del sd
    model = model.eval()
    model.high_quality_fp32_output_for_inference = True  # demo_gradio.py
    model.requires_grad_(False)
    n_double, n_single = len(model.transformer_blocks), len(model.single_transformer_blocks)
    marks = []
    blocks = list(model.transformer_blocks) + list(model.single_transformer_blocks)
    blocks[0].register_forward_pre_hook(lambda *a: marks.append(("start", time.perf_counter())))
    for i, b in enumerate(blocks):
        b.register_forward_hook(lambda *a, i=i: marks.append((i, time.perf_counter())))
    text = torch.zeros(1, PADDED_TEXT, t["text"].shape[2], dtype=torch.bfloat16)
    text[:, :TEXT_TOKENS] = t["text"]
    mask = torch.zeros(1, PADDED_TEXT, dtype=torch.bool)
    mask[:, :TEXT_TOKENS] = True
    kw = dict(
        hidden_states=t["latents"], timestep=torch.tensor([TIMESTEP], dtype=torch.bfloat16),
        encoder_hidden_states=text, encoder_attention_mask=mask,
        pooled_projections=t["pooled"], guidance=torch.tensor([GUIDANCE], dtype=torch.bfloat16),
        latent_indices=t["latent_indices"].long()[None],
        clean_latents=t["clean_latents"], clean_latent_indices=t["clean_latent_indices"].long()[None],
        clean_latents_2x=t["clean_latents_2x"],
        clean_latent_2x_indices=t["clean_latent_2x_indices"].long()[None],
        clean_latents_4x=t["clean_latents_4x"],
        clean_latent_4x_indices=t["clean_latent_4x_indices"].long()[None],
        image_embeddings=t["image_embeddings"], return_dict=False)
    best = None
    with torch.no_grad():
        for _ in range(repeat):
            marks.clear()
            start = time.perf_counter()
            out = model(**kw)[0]
            total = time.perf_counter() - start
            if best is None or total < best["call"]:
                d = dict(marks)
                ends = [d[i] for i in range(len(blocks))]
                starts = [d["start"]] + ends[:-1]
                per = [e - s for s, e in zip(starts, ends)]
                best = {"call": total, "double": sum(per[:n_double]) / max(n_double, 1),
                        "single": sum(per[n_double:]) / max(n_single, 1), "out": out.float()}
                best["outside"] = total - sum(per)
    return best, n_double, n_single


def cosine(a, b):
    import torch
    a, b = a.flatten().double(), b.flatten().double()
    return float(torch.dot(a, b) / (a.norm() * b.norm()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flick", default=str(ROOT / "build/flick"))
    ap.add_argument("--weights", default="/work/scratch/s7/fpfull/dit24",
                    help="folder for (or with) transformer/ (written if absent)")
    ap.add_argument("--framepack-dir", default="/work/scratch/s7/fpfull/fp",
                    help="holds diffusers_helper/ of FramePack @ 97fe5db (git archive)")
    ap.add_argument("--layers", default="2,4", help="double,single blocks of a written checkpoint")
    ap.add_argument("--repeat", type=int, default=2,
                    help="calls per side (flick: 1 with --repeat 1, else its own 2)")
    args = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"no torch ({e}): skipping the PyTorch peer")
        return 0
    weights = Path(args.weights)
    if not (weights / "transformer").is_dir():
        cmd = [args.flick, "synth", str(weights), "--model", "framepack", "--size", "full",
               "--dit-layers", args.layers, "--parts", "transformer", "--fill", "random"]
        print("$ " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    model_cls = import_reference(args.framepack_dir)
    import json
    cfg = json.loads((weights / "transformer/config.json").read_text())
    t = write_inputs(weights / "bench_inputs.safetensors", cfg)

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} threads; torch {torch.__version__} "
          f"({torch.get_num_threads()} threads); load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as out_dir:
        flick = run_flick(args.flick, weights, out_dir, args.repeat == 1)
        print(f"load average after flick: {os.getloadavg()[0]:.2f}", flush=True)
        ref, n_double, n_single = run_torch(model_cls, weights / "transformer", t, args.repeat)
        from safetensors.torch import load_file
        outs = {p: load_file(str(Path(out_dir) / f"flick_{p}.safetensors"))["output"]
                for p in ("bf16", "int8") if (Path(out_dir) / f"flick_{p}.safetensors").exists()}
    print(f"load average after torch: {os.getloadavg()[0]:.2f}")

    full = lambda d: d["outside"] + 20 * d["double"] + 40 * d["single"]  # noqa: E731
    ref["full"] = full(ref)
    width = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    print(f"\nFramePack DiT, {n_double} double + {n_single} single blocks, width {width}, "
          f"bucket {smallest_bucket()}, best of {args.repeat}; seconds")
    print(f"{'':28}{'torch bf16':>12}{'flick bf16':>12}{'ratio':>8}{'flick int8':>12}{'ratio':>8}")
    for key, label in (("call", "call (one step)"), ("double", "double block (mean)"),
                       ("single", "single block (mean)"), ("outside", "outside the blocks"),
                       ("full", "20+40 call EXTRAPOLATED")):
        row = f"{label:28}{ref[key]:12.2f}"
        for p in ("bf16", "int8"):
            name = {"call": "call", "double": "double block", "single": "single block",
                    "outside": "outside blocks", "full": "20+40 call"}[key]
            v = flick.get(f"framepack.{p} {name}")
            row += f"{v:12.2f}{ref[key] / v:7.2f}x" if v else f"{'-':>12}{'-':>8}"
        print(row)
    for p, o in outs.items():
        print(f"cosine(flick {p}, torch bf16) = {cosine(o, ref['out']):.5f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
