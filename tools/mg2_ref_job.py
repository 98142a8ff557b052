#!/usr/bin/env python3
"""One whole Matrix-Game 2.0 job (universal mode) through the reference
pipeline itself (SkyworkAI/Matrix-Game, Matrix-Game-2/inference.py), on the
CPU, timed: what bench/mg2_torch_peer.py sets beside `flick bench --filter
mg2.*`'s whole-job figure.

The reference tree is exported from the local bare mirror at run time
(tools/mg2_refenv.py; nothing of it is committed). The job is the one of
inference.py's InteractiveGameInference.generate_videos: the start image and
4 (N - 1) zero frames through WanVAE.encode (bf16, tiled as there), CLIP
encode_video, CausalInferencePipeline.inference (bf16 DiT, KV caches,
3 steps + the clean re-run per block, the fp16 VAEDecoderWrapper streaming
each block), frames to uint8. Adaptations for a CPU-only host, all here and
none in the reference code:
  * device "cpu" instead of "cuda"; flash attention -> PyTorch SDPA
    (mg2_refenv.Reference);
  * the decoder is not torch.compile'd (inference.py compiles it with
    mode="max-autotune-no-cudagraphs", a CUDA-oriented autotune);
  * torchvision is not needed: the one transform the job uses (CLIP's
    Normalize) is provided by a stand-in with torchvision's arithmetic;
  * the config yaml is given as the namespace it parses to (no OmegaConf);
  * the noise is drawn from a CPU generator (the reference draws CUDA noise);
    action tracks are a fixed synthetic track (forward, camera turning right
    in the second half: bench_mg2.cpp's), not Bench_actions_universal's
    random one - neither changes the amount of work;
  * --decoder-dtype bf16 runs the decoder in bf16 instead of fp16 (PyTorch's
    fp16 convolutions on a CPU without fp16 units may be far slower; the
    default is the reference's fp16).
Prints one line "REF_JOB key=value ..." (seconds) for scripts.

  /work/venv-fp/bin/python tools/mg2_ref_job.py --weights DIR [--latents 6]
"""
from __future__ import annotations

import argparse
import importlib.machinery
import os
import sys
import time
import types
from pathlib import Path

import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mg2_refenv  # noqa: E402


def install_torchvision_standin() -> None:
    """torchvision.transforms as far as wanx_vae_src/clip.py uses it: building
    the Compose at load, and Normalize (transforms[-1]) on tensors in
    encode_video, with torchvision's arithmetic (clone, sub_(mean), div_(std)
    in the tensor's dtype)."""
    try:
        import torchvision.transforms  # noqa: F401
        return
    except ImportError:
        pass

    class Compose:
        def __init__(self, transforms):
            self.transforms = transforms

    class Normalize:
        def __init__(self, mean, std, inplace=False):
            self.mean, self.std, self.inplace = mean, std, inplace

        def __call__(self, tensor):
            if not self.inplace:
                tensor = tensor.clone()
            mean = torch.as_tensor(self.mean, dtype=tensor.dtype, device=tensor.device)
            std = torch.as_tensor(self.std, dtype=tensor.dtype, device=tensor.device)
            if mean.ndim == 1:
                mean = mean.view(-1, 1, 1)
            if std.ndim == 1:
                std = std.view(-1, 1, 1)
            return tensor.sub_(mean).div_(std)

    class _Unused:
        def __init__(self, *a, **k):
            pass

        def __call__(self, *a, **k):
            raise NotImplementedError("torchvision stand-in: not used by the Matrix-Game job")

    tf = types.ModuleType("torchvision.transforms")
    tf.Compose, tf.Normalize, tf.Resize, tf.ToTensor = Compose, Normalize, _Unused, _Unused
    tf.InterpolationMode = types.SimpleNamespace(BICUBIC="bicubic", BILINEAR="bilinear")
    tv = types.ModuleType("torchvision")
    tv.transforms = tf
    for m in (tv, tf):
        m.__spec__ = importlib.machinery.ModuleSpec(m.__name__, None)
    sys.modules["torchvision"] = tv
    sys.modules["torchvision.transforms"] = tf


def synthetic_image(h: int, w: int) -> torch.Tensor:
    """bench_mg2.cpp's start image (a diagonal gradient), normalised to [-1, 1]
    as inference.py's frame_process: [1, 3, 1, H, W]."""
    y = torch.arange(h).view(h, 1)
    x = torch.arange(w).view(1, w)
    rgb = torch.stack([(x + y + 80 * c) % 256 for c in range(3)]).float()  # [3, H, W]
    return ((rgb / 255 - 0.5) / 0.5)[None, :, None]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", required=True,
                    help="a Matrix-Game-2.0 directory (flick synth --size full layout)")
    ap.add_argument("--latents", type=int, default=6, help="latent frames N (a multiple of 3)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--decoder-dtype", choices=["fp16", "bf16"], default="fp16")
    ap.add_argument("--mirror", default=mg2_refenv.DEFAULT_MIRROR)
    args = ap.parse_args()
    assert args.latents > 0 and args.latents % 3 == 0
    torch.set_num_threads(args.threads)
    wdir = Path(args.weights)
    H, W, lh, lw = 352, 640, 44, 80

    t_start = time.perf_counter()
    install_torchvision_standin()
    ref = mg2_refenv.Reference(mirror=args.mirror)
    ref.set_frame_tokens(lh * lw // 4)
    dec_dtype = torch.float16 if args.decoder_dtype == "fp16" else torch.bfloat16
    dt = torch.bfloat16
    with mg2_refenv.cpu_instead_of_cuda_device():
        generator = ref.wan_wrapper.WanDiffusionWrapper(
            model_config=str(ref.root / "configs/distilled_model/universal"), timestep_shift=5.0,
            is_causal=True)
    decoder = ref.vae_block3.VAEDecoderWrapper()
    sd = torch.load(str(wdir / "Wan2.1_VAE.pth"), map_location="cpu")
    decoder.load_state_dict({k: v for k, v in sd.items() if "decoder." in k or "conv2" in k})
    del sd
    decoder.to("cpu", dec_dtype).requires_grad_(False).eval()
    cfg = types.SimpleNamespace(denoising_step_list=[1000, 666, 333], warp_denoising_step=True,
                                num_frame_per_block=3, context_noise=0,
                                model_kwargs=dict(timestep_shift=5.0))
    pipe = ref.causal_inference.CausalInferencePipeline(cfg, device="cpu", generator=generator,
                                                        vae_decoder=decoder)
    pipe.generator.load_state_dict(
        load_file(str(wdir / "base_distilled_model/base_distill.safetensors")))
    pipe = pipe.to(device="cpu", dtype=dt)
    pipe.vae_decoder.to(dec_dtype)
    if dec_dtype != torch.float16:
        # The pipeline hands the decoder denoised_pred.half().
        fwd = pipe.vae_decoder.forward
        pipe.vae_decoder.forward = lambda z, *cache: fwd(z.to(dec_dtype), *cache)
    vae = ref.wanx_wrapper.get_wanx_vae_wrapper(str(wdir), torch.float16)
    vae.requires_grad_(False)
    vae.eval()
    vae = vae.to("cpu", dt)
    load_s = time.perf_counter() - t_start

    # Per-phase wall clock: the DiT calls and decoder calls by wrapping them.
    times = {"dit": [], "decode": []}

    def timed(key, fn):
        def call(*a, **k):
            t0 = time.perf_counter()
            out = fn(*a, **k)
            times[key].append(time.perf_counter() - t0)
            return out
        return call

    pipe.generator.forward = timed("dit", pipe.generator.forward)
    pipe.vae_decoder.forward = timed("decode", pipe.vae_decoder.forward)

    n = args.latents
    frames_total = 1 + 4 * (n - 1)
    t_job = time.perf_counter()
    with torch.no_grad():
        image = synthetic_image(H, W).to(dt)
        padding = torch.zeros_like(image).repeat(1, 1, 4 * (n - 1), 1, 1)
        t0 = time.perf_counter()
        img_cond = vae.encode(torch.concat([image, padding], dim=2), device="cpu", tiled=True,
                              tile_size=[44, 80], tile_stride=[23, 38])
        encode_s = time.perf_counter() - t0
        mask = torch.ones_like(img_cond)
        mask[:, :, 1:] = 0
        cond_concat = torch.cat([mask[:, :4], img_cond], dim=1)
        t0 = time.perf_counter()
        visual_context = vae.clip.encode_video(image)
        clip_s = time.perf_counter() - t0
        gen = torch.Generator().manual_seed(1)
        noise = torch.randn([1, 16, n, lh, lw], generator=gen).to(dt)
        keyboard = torch.zeros(1, frames_total, 4)
        keyboard[:, :, 0] = 1
        mouse = torch.zeros(1, frames_total, 2)
        mouse[:, frames_total // 2:, 1] = 0.1
        cond = dict(cond_concat=cond_concat.to(dt), visual_context=visual_context.to(dt),
                    mouse_cond=mouse.to(dt), keyboard_cond=keyboard.to(dt))
        videos = pipe.inference(noise=noise, conditional_dict=cond, return_latents=False,
                                mode="universal")
        video = torch.cat(videos, dim=1)  # [1, T, 3, H, W]
        u8 = ((video.float() + 1) * 127.5).clip(0, 255).to(torch.uint8)
    job_s = time.perf_counter() - t_job
    assert u8.shape[1] == frames_total, u8.shape
    dit = times["dit"]
    print(f"reference Matrix-Game 2.0 job (universal, {n} latents = {frames_total} frames at "
          f"{H}x{W}), torch {torch.__version__}, {args.threads} threads, bf16 DiT/encoder, "
          f"{args.decoder_dtype} decoder:")
    print(f"  load {load_s:.1f} s; job {job_s:.1f} s = {job_s / frames_total:.2f} s/frame "
          f"(VAE encode {encode_s:.1f} s, CLIP {clip_s:.1f} s, {len(dit)} DiT calls "
          f"{sum(dit):.1f} s (mean {sum(dit) / len(dit):.2f}), decode {sum(times['decode']):.1f} s)")
    print(f"REF_JOB frames={frames_total} job_s={job_s:.3f} per_frame_s={job_s / frames_total:.3f} "
          f"load_s={load_s:.3f} encode_s={encode_s:.3f} clip_s={clip_s:.3f} "
          f"dit_calls={len(dit)} dit_s={sum(dit):.3f} decode_s={sum(times['decode']):.3f}")
    ref.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
