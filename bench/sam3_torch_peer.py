#!/usr/bin/env python3
"""The PyTorch peer for flick's EfficientSAM3 benchmark (issue 12 targets).

Times the reference image model (SimonZeng7108/efficientsam3, RepViT-M0.9 +
MobileCLIP-S1, the released student; exported at run time by
tools/sam3_refenv.py, nothing of it is stored in flick) on the CPU through its
own Sam3Processor, eager, in fp32 and with bf16 autocast:

  image side   processor.set_image(frame)            trunk, head, neck
  prompt       processor.set_text_prompt(p, state)   text encoder, geometry CLS,
                                                     fusion encoder, decoder,
                                                     seg head, post-processing

per 1008^2 frame (the frame is 1280x720, as flick's benchmark uses). Weights:
a checkpoint in the released layout (`flick synth --model efficientsam3
--size full`, or the real file) with --weights, else the builder's random
initialisation (same cost).

With --flick PATH it also runs `flick bench --filter sam3.<precision>` in the
same run, each precision right after PyTorch's row it is compared with, and
prints the ratios. --rounds N repeats the whole alternation N times and
adds the ratios of each side's best time: on a shared host whose speed
drifts by tens of per cent over a minute (seen on an Emerald Rapids VM),
one round compares two different machine states. Without torch it prints
why and exits 0, so scripts can call it unconditionally.

  /work/venv-sam3/bin/python bench/sam3_torch_peer.py [--flick build/flick]
      [--weights FILE.pth] [--threads N] [--repeat N] [--rounds N] [--profile]

--profile prints PyTorch's own per-op times (torch.profiler, grouped by
input shape) of one f32 frame and prompt instead, to set beside
`FLICK_PROFILE=1 flick bench --filter sam3.f32` (RESULTS.md, session 25).
"""
import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path


# (flick precision, torch row) pairs compared; torch has no int8 CPU path
# here, so int8 is set against both. Each flick precision runs right after
# the torch row of RUN_AFTER, so the two see the same machine state.
PAIRS = (("f32", "f32"), ("bf16", "bf16"), ("int8", "f32"), ("int8", "bf16"))
RUN_AFTER = {"f32": ("f32",), "bf16": ("bf16", "int8")}


def run_flick(flick, weights, threads, precision):
    cmd = [flick, "bench", "--filter", f"sam3.{precision}"]
    if weights:
        cmd += ["--sam3-weights", weights]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    sys.stdout.write(out.stdout)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        return {}
    # Rows are the case name padded to 46 characters, then milliseconds
    # (jobs/cmd_bench.cpp print_row): "sam3.bf16 image   ...   1234.567 ...".
    found = {}
    for line in out.stdout.splitlines():
        name, rest = line[:46].strip(), line[46:].split()
        if re.fullmatch(r"sam3\.\w+ (image|prompt)", name) and rest:
            found[name] = float(rest[0]) / 1e3
    return found


def build(mb, weights):
    model = mb.build_efficientsam3_image_model(
        device="cpu", eval_mode=True, load_from_HF=False, enable_inst_interactivity=False,
        backbone_type="repvit", model_name="m0.9", text_encoder_type="MobileCLIP-S1",
        text_encoder_context_length=77, checkpoint_path=weights)
    return model


def time_model(processor, frame, prompts, repeat, autocast):
    import torch
    ctx = (torch.autocast("cpu", dtype=torch.bfloat16) if autocast else torch.autocast(
        "cpu", enabled=False))
    image_s, prompt_s = [], []
    with torch.inference_mode(), ctx:
        state = processor.set_image(frame)  # warm-up: first-call allocations
        processor.set_text_prompt(prompts[0], state)
        for _ in range(repeat):
            t0 = time.perf_counter()
            state = processor.set_image(frame)
            image_s.append(time.perf_counter() - t0)
            for p in prompts:
                t0 = time.perf_counter()
                processor.set_text_prompt(p, state)
                prompt_s.append(time.perf_counter() - t0)
    return min(image_s), min(prompt_s)


def profile_f32(processor, frame, prompt):
    import torch
    from torch.profiler import ProfilerActivity, profile
    with torch.inference_mode():
        state = processor.set_image(frame)  # warm-up
        processor.set_text_prompt(prompt, state)
        for part in ("image", "prompt"):
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                if part == "image":
                    state = processor.set_image(frame)
                else:
                    processor.set_text_prompt(prompt, state)
            print(f"===== torch f32 {part} side, self time per op and input shapes")
            print(prof.key_averages(group_by_input_shape=True).table(
                sort_by="self_cpu_time_total", row_limit=40, max_name_column_width=40,
                max_shapes_column_width=90))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flick", help="flick binary: also run its sam3 benchmark")
    ap.add_argument("--weights", help="checkpoint in the released layout (.pth)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate torch and flick this many times; also report best-of ratios")
    ap.add_argument("--mirror", help="efficientsam3 git mirror (tools/sam3_refenv.py default)")
    ap.add_argument("--profile", action="store_true",
                    help="print torch's per-op times of one f32 frame + prompt, then exit")
    args = ap.parse_args()

    try:
        import torch
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
        import sam3_refenv
    except ImportError as e:
        print(f"sam3_torch_peer: skipped, the reference environment is missing ({e}); "
              "see tools/sam3_refenv.py")
        return 0

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "unknown CPU")
    print(f"CPU: {cpu}; load average before: {os.getloadavg()[0]:.2f}")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    frame = torch.randint(0, 256, (3, 720, 1280), dtype=torch.uint8)
    prompts = ["person", "red car", "dog"]
    mirror = args.mirror or sam3_refenv.DEFAULT_MIRROR
    best = {}  # row -> (image s, prompt s), the fastest frame + 1 prompt seen

    def keep(name, img, prm):
        if name not in best or img + prm < sum(best[name]):
            best[name] = (img, prm)

    def ratio(label, flick_row, torch_row):
        fi, fp = flick_row
        ti, tp = torch_row
        print(f"{label}: image side {ti / fi:.2f}x, prompt {tp / fp:.2f}x, "
              f"frame + 1 prompt {(ti + tp) / (fi + fp):.2f}x "
              f"(flick {fi + fp:.2f} s, torch {ti + tp:.2f} s)")

    def flick_row(precision):
        found = run_flick(args.flick, args.weights, args.threads, precision)
        fi, fp = found.get(f"sam3.{precision} image"), found.get(f"sam3.{precision} prompt")
        if fi is None or fp is None:
            print(f"flick sam3.{precision}: no figures in `flick bench` output")
            return None
        keep(f"flick.{precision}", fi, fp)
        return fi, fp

    with sam3_refenv.reference(mirror) as root:
        import sam3.model_builder as mb
        from sam3.model.sam3_image_processor import Sam3Processor
        model = build(mb, args.weights)
        processor = Sam3Processor(model, device="cpu", confidence_threshold=0.5)
        if args.profile:
            profile_f32(processor, frame, prompts[0])
            return 0
        for rnd in range(args.rounds):
            if args.rounds > 1:
                print(f"round {rnd + 1} of {args.rounds}")
            torch_rows = {}
            for name, autocast in (("f32", False), ("bf16", True)):
                img, prm = time_model(processor, frame, prompts, args.repeat, autocast)
                torch_rows[name] = (img, prm)
                keep(f"torch.{name}", img, prm)
                print(f"torch.{name:<5} image 1008  {img * 1e3:10.1f} ms   prompt {prm * 1e3:10.1f} ms   "
                      f"frame+1 prompt {(img + prm):6.2f} s   ({args.threads} threads, "
                      f"torch {torch.__version__}, eager{' bf16 autocast' if autocast else ''})")
                if not args.flick:
                    continue
                for precision in RUN_AFTER[name]:
                    row = flick_row(precision)
                    for flick_name, peer in PAIRS:
                        if row is not None and flick_name == precision:
                            ratio(f"flick {precision} vs torch {peer}", row, torch_rows[peer])
    if args.flick and args.rounds > 1:
        print(f"best of {args.rounds} rounds for each side:")
        for name, peer in PAIRS:
            if f"flick.{name}" in best and f"torch.{peer}" in best:
                ratio(f"flick {name} vs torch {peer} (best)", best[f"flick.{name}"],
                      best[f"torch.{peer}"])
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
