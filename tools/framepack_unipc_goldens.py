#!/usr/bin/env python3
"""Goldens for flick's FramePack sampler (models/hunyuan/unipc_sampler): FramePack's own
sample_hunyuan (diffusers_helper/pipelines/k_diffusion_hunyuan.py) with its fm_wrapper
(k_diffusion/wrapper.py) and FlowMatchUniPC bh1 (k_diffusion/uni_pc_fm.py), FramePack @ 97fe5db,
driven by a stand-in transformer whose C++ twin is a few elementwise fp32 ops:

  v = (x.float() * A[c] + (t.float() * 0.0004) * B[c]) + s       A[c] = (c - 7) / 16,
                                                                  B[c] = (c % 5 + 1) / 8,
  s = +0.25 for the positive conditioning, -0.5 for the negative  (each op rounded to fp32)

Writes tests/data/framepack_text/unipc.safetensors:
  sigmas.n{N}.L{L}      get_flux_sigmas_from_mu(N, calculate_flux_mu(L))  (fp32)
  linspace.n{N}         torch.linspace(1, 0, N + 1), the t of the sigmas
  run{k}.noise          the initial latents sample_hunyuan draws from its CPU generator
  run{k}.x{i}           x after step i (the sampler's callback), run{k}.denoised{i} the x0 kept
  run{k}.out            sample_hunyuan's result
  run{k}.timesteps      every bf16 timestep the model saw, run{k}.guidance the bf16 guidance
  section_noise         two consecutive sections' noise from one generator (demo_gradio.py:
                        rnd = torch.Generator("cpu").manual_seed(seed), consumed sequentially)
and unipc.json with each run's settings. The reference code is exported (not committed) to
/work/scratch/fp-text/ref (git archive of lllyasviel/FramePack 97fe5db diffusers_helper);
cv2 / einops / torchvision, imported by its utils.py but unused here, are stubbed.
torch.randn runs with the default CPU capability (AVX2/AVX-512 normal_fill_16, see the spec's
errata 1), as a default x86 FramePack install does.

Usage: /work/venv-fp/bin/python tools/framepack_unipc_goldens.py [REF_DIR]
"""
import json
import math
import os
import subprocess
import tempfile
import sys
import types
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/data/framepack_text"
REF = Path(sys.argv[-1] if len(sys.argv) in (2, 5) else "/work/scratch/fp-text/ref")
sys.path.insert(0, str(REF))
for name in ("cv2", "einops", "torchvision"):
    try:
        __import__(name)
    except ImportError:
        sys.modules[name] = types.ModuleType(name)
from diffusers_helper.pipelines.k_diffusion_hunyuan import (calculate_flux_mu,  # noqa: E402
                                                            get_flux_sigmas_from_mu, sample_hunyuan)

A = torch.tensor([(c - 7) / 16 for c in range(16)]).view(1, 16, 1, 1, 1)
B = torch.tensor([(c % 5 + 1) / 8 for c in range(16)]).view(1, 16, 1, 1, 1)


class StandIn(torch.nn.Module):
    device = torch.device("cpu")

    def __init__(self):
        super().__init__()
        self.seen_t, self.seen_g = [], []

    def forward(self, hidden_states, timestep, encoder_hidden_states, guidance, return_dict=False, **kw):
        assert hidden_states.dtype == torch.bfloat16 and timestep.dtype == torch.bfloat16
        self.seen_t.append(float(timestep[0]))
        self.seen_g.append(float(guidance[0]))
        s = float(encoder_hidden_states.flatten()[0])
        x = hidden_states.float()
        t = (timestep.float() * 0.0004).view(-1, 1, 1, 1, 1)
        return ((x * A + t * B) + s,)


def run_sampler(tensors, runs, k, steps, T, h, w, gs, cfg, seed, shift):
    model = StandIn()
    gen = torch.Generator("cpu").manual_seed(seed)
    noise = torch.randn((1, 16, T, h, w), generator=torch.Generator("cpu").manual_seed(seed))
    steps_x = []
    out = sample_hunyuan(
        transformer=model, sampler="unipc", width=w * 8, height=h * 8, frames=4 * T - 3,
        real_guidance_scale=cfg, distilled_guidance_scale=gs, guidance_rescale=0.0, shift=shift,
        num_inference_steps=steps, generator=gen,
        prompt_embeds=torch.full((1, 1, 1), 0.25), prompt_embeds_mask=torch.ones(1, 1, dtype=torch.bool),
        prompt_poolers=torch.zeros(1, 1),
        negative_prompt_embeds=torch.full((1, 1, 1), -0.5),
        negative_prompt_embeds_mask=torch.ones(1, 1, dtype=torch.bool),
        negative_prompt_poolers=torch.zeros(1, 1), device=torch.device("cpu"), dtype=torch.bfloat16,
        callback=lambda d: steps_x.append((d["x"].clone(), d["denoised"].clone())))
    tensors[f"run{k}.noise"] = noise
    for i, (x, d) in enumerate(steps_x):
        tensors[f"run{k}.x{i}"] = x.float().contiguous()
        tensors[f"run{k}.denoised{i}"] = d.float().contiguous()
    tensors[f"run{k}.out"] = out.float().contiguous()
    tensors[f"run{k}.timesteps"] = torch.tensor(model.seen_t, dtype=torch.float32)
    tensors[f"run{k}.guidance"] = torch.tensor(model.seen_g[:1], dtype=torch.float32)
    # Where torch's log (MKL VML) and expm1 (SLEEF), within an ulp but not always correctly
    # rounded, differ from the correctly rounded values flick computes: the one documented
    # source of difference. log: sigma indices; expm1: the steps using h_phi_1 = expm1(-h).
    sig = get_flux_sigmas_from_mu(steps, math.log(shift) if shift else calculate_flux_mu(T * h * w // 4))
    cr = lambda f, v: torch.tensor(f(float(v)), dtype=torch.float64).float()  # noqa: E731
    log_off = [i for i in range(steps) if torch.log(sig[i:i + 1])[0] != cr(math.log, sig[i])]
    expm1_off = []
    for i in range(1, steps):
        hh = -((-torch.log(sig[i:i + 1])) - (-torch.log(sig[i - 1:i])))[0]
        if torch.expm1(hh) != cr(math.expm1, hh):
            expm1_off.append(i)
    runs.append({"log_not_correctly_rounded_at": log_off,
                 "expm1_not_correctly_rounded_at": expm1_off, "steps": steps,
                 "shape": [1, 16, T, h, w], "gs": gs, "cfg": cfg, "seed": seed,
                 "shift": shift or 0.0, "calls": len(model.seen_t),
                 "mu": math.log(shift) if shift else calculate_flux_mu(T * h * w // 4),
                 "mkl_isa": os.environ.get("MKL_ENABLE_INSTRUCTIONS", "default")})


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--one-run":  # child: one run under the caller's env
        tensors, runs = {}, []
        run_sampler(tensors, runs, *json.loads(sys.argv[2]))
        save_file(tensors, sys.argv[3])
        Path(sys.argv[3] + ".json").write_text(json.dumps(runs[0]))
        return
    tensors, runs = {}, []
    for n in (25, 30, 50, 100, 7):
        tensors[f"linspace.n{n}"] = torch.linspace(1, 0, n + 1)
    for n in (25, 30, 50, 7):
        for L in (13680, 216, 18):  # the 640x608 bucket; small non-bucket sizes (errata 7)
            tensors[f"sigmas.n{n}.L{L}"] = get_flux_sigmas_from_mu(n, calculate_flux_mu(L)).float()

    # (steps, T, h, w, gs, cfg, seed, shift): the demo's setting, cfg != 1, the short orders,
    # and 30 / 50 steps at mu = ln 7 (the 640 buckets' mu; shift=7 gives the same double).
    settings = [(25, 9, 2, 4, 10.0, 1.0, 31337, None), (6, 9, 2, 4, 6.0, 3.0, 7, None),
                (3, 1, 2, 2, 10.0, 1.0, 1, None), (2, 1, 2, 2, 10.0, 1.0, 2, None),
                (30, 1, 2, 2, 10.0, 1.0, 3, 7.0), (50, 1, 2, 2, 10.0, 1.0, 4, 7.0)]
    for k, setting in enumerate(settings):
        run_sampler(tensors, runs, k, *setting)
    # The same sampler with MKL's AVX2 code path (an AVX2-only CPU): its VML log
    # differs from the AVX-512 path's; run in a child process, MKL picks its ISA at load.
    with tempfile.TemporaryDirectory() as tmp:
        k = len(settings)
        env = dict(os.environ, MKL_ENABLE_INSTRUCTIONS="AVX2")
        subprocess.run([sys.executable, __file__, "--one-run",
                        json.dumps([k, 25, 1, 2, 2, 10.0, 1.0, 5, None]), f"{tmp}/run.safetensors",
                        str(REF)], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tensors.update(load_file(f"{tmp}/run.safetensors"))
        runs.append(json.loads(Path(f"{tmp}/run.safetensors.json").read_text()))

    # Two sections' noise from one generator, as demo_gradio.py's worker draws them
    # (latent 640x608 bucket would be [1, 16, 9, 80, 76]; a small shape here).
    rnd = torch.Generator("cpu").manual_seed(31337)
    first = torch.randn((1, 16, 9, 3, 5), generator=rnd)
    second = torch.randn((1, 16, 9, 3, 5), generator=rnd)
    tensors["section_noise"] = torch.cat([first, second])
    save_file(tensors, str(OUT / "unipc.safetensors"))
    (OUT / "unipc.json").write_text(json.dumps({
        "runs": runs, "section_noise": {"seed": 31337, "shape": [1, 16, 9, 3, 5], "sections": 2},
        "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()},
        indent=1) + "\n")
    print(f"{OUT / 'unipc.safetensors'}: {(OUT / 'unipc.safetensors').stat().st_size / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
