#!/usr/bin/env python3
"""Golden-parity fixtures for the Matrix-Game 2.0 port (tests/data/mg2/).

Runs TINY configurations of the reference implementation (SkyworkAI/
Matrix-Game, Matrix-Game-2/ at commit 3ceb311) on CPU with deterministic
random weights stored in the exact key layout of the real checkpoints, and
dumps named intermediates, whole tiny pipeline runs for the three modes,
sampler constants and RoPE tables as safetensors, plus manifest.json and
full_keys.json (the key tables of the full-size checkpoints, derived from the
reference classes built on the meta device).

The reference code is exported from a local git mirror into a temporary
directory at run time (see mg2_refenv.py); none of it is stored in flick.

    /work/venv/bin/python tools/mg2_goldens.py [--mirror DIR] [--out tests/data/mg2]

Needs torch, numpy, safetensors, einops, diffusers, tqdm and torchvision
(pip install --no-deps is enough: only torchvision.transforms is imported).

Numerics follow the reference: the DiT runs in bf16 (fp32 inside norms, f64
RoPE / sinusoid / x0 conversion), the VAE encoder and CLIP in bf16, the
streaming VAE decoder in fp16. Every DiT/encoder/CLIP/decoder golden is also
produced by an fp32 run of the same weights ("fp32." prefix) so that kernels
can be checked at tight tolerances. The generated files are deterministic for
a given torch build and CPU capability (both recorded in the manifest).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import math
import os
import platform
import random
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mg2_refenv  # noqa: E402

# ---------------------------------------------------------------------------
# Tiny configuration
# ---------------------------------------------------------------------------

LATENT_H, LATENT_W = 4, 6            # real: 44 x 80
PIXEL_H, PIXEL_W = 8 * LATENT_H, 8 * LATENT_W
NUM_LATENTS = 9                      # three 3-latent blocks (the L=6 caches roll at block 2)
FRAME_TOKENS = (LATENT_H // 2) * (LATENT_W // 2)
RAW_FRAMES = 1 + 4 * (NUM_LATENTS - 1)

TINY_DIT = dict(dim=64, ffn_dim=128, num_heads=2, num_layers=4)
TINY_ACTION = dict(blocks=[0, 1], heads_num=2, hidden_size=4, img_hidden_size=64,
                   keyboard_hidden_dim=128, mouse_hidden_dim=128)
TINY_VAE_DIM = 2                     # real: 96 (channel widths 96,192,384 -> 2,4,8)
TINY_CLIP = dict(embed_dim=24, image_size=21, patch_size=7, vision_dim=32, vision_mlp_ratio=4,
                 vision_heads=2, vision_layers=3, vocab_size=40, max_text_len=10, text_dim=16,
                 text_heads=2, text_layers=1)
CLIP_TOKENS = (TINY_CLIP["image_size"] // TINY_CLIP["patch_size"]) ** 2 + 1

FULL_CLIP = dict(embed_dim=1024, image_size=224, patch_size=14, vision_dim=1280, vision_mlp_ratio=4,
                 vision_heads=16, vision_layers=32, vocab_size=250002, max_text_len=514,
                 text_dim=1024, text_heads=16, text_layers=24)

MODES = {
    "universal": dict(ckpt="base_distilled_model/base_distill.safetensors",
                      steps=[1000, 666, 333], seed=1001),
    "gta_drive": dict(ckpt="gta_distilled_model/gta_keyboard2dim.safetensors",
                      steps=[1000, 666, 333], seed=1002, num_latents=6),  # L=4 rolls at block 1
    "templerun": dict(ckpt="templerun_distilled_model/templerun_7dim_onlykey.safetensors",
                      steps=[1000, 750, 500, 250], seed=1003),
}
VAE_FILE = "Wan2.1_VAE.pth"
CLIP_FILE = "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth"

WEIGHT_SEEDS = dict(dit=11, vae=12, clip=13)
INPUT_SEED = 21
NOISE_SEED = 42                      # torch.Generator().manual_seed for the sampler noise
DECODER_INPUT_SEED = 23

REF = torch.bfloat16


def bf16_round(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).to(t.dtype)


# ---------------------------------------------------------------------------
# Deterministic weights
# ---------------------------------------------------------------------------

def randomize_(module: nn.Module, seed: int, ref: mg2_refenv.Reference) -> None:
    """Replaces every parameter by seeded random values (the reference inits
    several to zero/one, which would hide bugs). Norm scales ~1 +- 0.2, biases
    ~0.1, matrices ~N(0, 1/fan_in)."""
    gen = torch.Generator().manual_seed(seed)
    norm_types = (nn.LayerNorm, ref.model.WanRMSNorm, ref.action_module.WanRMSNorm,
                  ref.vae_modules.RMS_norm, ref.wanx_vae.RMS_norm)
    norm_params = set()
    for mod in module.modules():
        if isinstance(mod, norm_types):
            for p in mod.parameters(recurse=False):
                norm_params.add(id(p))
    with torch.no_grad():
        for name, p in module.named_parameters():
            r = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if id(p) in norm_params:
                v = 1.0 + 0.2 * r if not name.endswith("bias") else 0.1 * r
            elif name.endswith("bias"):
                v = 0.1 * r
            elif name.endswith("modulation"):
                v = r / math.sqrt(p.shape[-1])
            elif p.ndim == 0:
                v = torch.full((), math.log(1 / 0.07))
            elif name.endswith(("cls_embedding", "pos_embedding", "visual.head")) or \
                    ("embedding.weight" in name and "patch" not in name):
                v = r / math.sqrt(p.shape[-1])
            else:
                fan_in = p.numel() // p.shape[0]
                v = r / math.sqrt(fan_in)
            p.copy_(v.to(p.dtype))


# ---------------------------------------------------------------------------
# Recording of named intermediates
# ---------------------------------------------------------------------------

class Recorder:
    def __init__(self):
        self.prefix = None
        self.block = None
        self.out: dict[str, torch.Tensor] = {}

    def active(self) -> bool:
        return self.prefix is not None

    def put(self, name: str, t: torch.Tensor) -> None:
        if self.prefix is None:
            return
        level = getattr(self, "level", None)
        if level == "windows" and not name.endswith(("win", "flow")):
            return
        if level == "blocks" and name.startswith("blk") and not name.endswith(".out"):
            return
        key = f"{self.prefix}.{name}"
        assert key not in self.out, key
        self.out[key] = t.detach().clone().contiguous()

    def put_first_free(self, names, t) -> None:
        if self.prefix is None:
            return
        for name in names:
            if f"{self.prefix}.{name}" not in self.out:
                self.put(name, t)
                return
        raise AssertionError(f"{self.prefix}: all of {names} recorded already")


def _hook_out(rec, name, fn=None):
    def hook(_m, _inp, out):
        if rec.active():
            rec.put(name() if callable(name) else name, fn(out) if fn else out)
    return hook


def _hook_in(rec, name, fn=None):
    def hook(_m, args, kwargs=None):
        if rec.active():
            x = args[0] if args else next(iter(kwargs.values()))
            rec.put(name() if callable(name) else name, fn(x) if fn else x)
    return hook


class DitRecorder(Recorder):
    """Hooks on CausalWanModel, names `blk{i}.*`. Per recorded call a level:
    "blocks":      embeddings, output of every block, head, flow;
    "checkpoints": "blocks" + the residual stream after every sub-layer;
    "windows":     only the K/V windows the attentions of block 0 read
                   (self-attn KV cache, mouse and keyboard caches) and the
                   flow: shows the cache roll;
    "full":        checkpoints + every internal of the blocks in `detail_blocks`."""

    def __init__(self, ref, model, detail_blocks):
        super().__init__()
        self.detail_blocks = set(detail_blocks)
        self.level = None
        m = model
        m.patch_embedding.register_forward_hook(
            _hook_out(self, "patch_embed", lambda y: y.flatten(2).transpose(1, 2)))
        m.time_embedding.register_forward_pre_hook(_hook_in(self, "sinusoid"))
        m.time_embedding.register_forward_hook(_hook_out(self, "time_e"))
        m.time_projection.register_forward_hook(_hook_out(self, "time_e0"))
        m.img_emb.register_forward_hook(_hook_out(self, "context"))
        m.head.norm.register_forward_hook(_hook_out(self, "head_norm"))
        m.head.register_forward_hook(_hook_out(self, "head_out"))
        m.register_forward_hook(_hook_out(self, "flow"))
        for i, blk in enumerate(m.blocks):
            self._hook_block(i, blk)
        rec = self

        # Module-level functions called by name from the reference modules.
        cm, am = ref.causal_model, ref.action_module
        orig_rope, orig_attn = cm.causal_rope_apply, cm.attention
        orig_arope, orig_fa = am.apply_rotary_emb, am.flash_attn_func

        def rope(x, grid_sizes, freqs, start_frame=0):
            y = orig_rope(x, grid_sizes, freqs, start_frame=start_frame)
            if rec.detail():
                rec.put_first_free([rec.b("sa_q_rope"), rec.b("sa_k_rope")], y)
            return y

        def attn(q, k, v, **kw):
            y = orig_attn(q, k, v, **kw)
            if rec.windows():
                rec.put(rec.b("sa_kwin"), k)
                rec.put(rec.b("sa_vwin"), v)
            if rec.detail():
                rec.put(rec.b("sa_attn"), y)
            return y

        def arope(xq, xk, freqs_cis, head_first=False, start_offset=0):
            q, k = orig_arope(xq, xk, freqs_cis, head_first=head_first, start_offset=start_offset)
            if rec.detail():
                which = "mouse" if rec.b("act.mouse_q_rope") not in rec.keys() and rec.has_mouse else "kb"
                rec.put(rec.b(f"act.{which}_q_rope"), q)
                rec.put(rec.b(f"act.{which}_k_rope"), k[:1] if which == "kb" else k)
            return q, k

        def fa(q, k, v, **kw):
            y = orig_fa(q, k, v, **kw)
            if rec.windows():
                which = "mouse" if rec.b("act.mouse_kwin") not in rec.keys() and rec.has_mouse else "kb"
                if which == "kb":  # the keyboard cache window is repeated per spatial token
                    assert torch.equal(k, k[:1].expand_as(k))
                    k, v = k[:1], v[:1]
                rec.put(rec.b(f"act.{which}_kwin"), k)
                rec.put(rec.b(f"act.{which}_vwin"), v)
                if rec.detail():
                    rec.put(rec.b(f"act.{which}_attn"), y)
            return y

        self._restore = (cm, orig_rope, orig_attn, am, orig_arope, orig_fa)
        cm.causal_rope_apply, cm.attention = rope, attn
        am.apply_rotary_emb, am.flash_attn_func = arope, fa
        self.has_mouse = False

    def restore(self):
        cm, orig_rope, orig_attn, am, orig_arope, orig_fa = self._restore
        cm.causal_rope_apply, cm.attention = orig_rope, orig_attn
        am.apply_rotary_emb, am.flash_attn_func = orig_arope, orig_fa

    def keys(self):
        return {k[len(self.prefix) + 1:] for k in self.out if k.startswith(self.prefix + ".")}

    def b(self, name):
        return f"blk{self.block}.{name}"

    def detail(self):
        return self.active() and self.level == "full" and self.block in self.detail_blocks

    def windows(self):
        return self.active() and (self.detail() or (self.level == "windows" and self.block == 0))

    def _hook_block(self, i, blk):
        rec = self

        def set_block(_m, args, kwargs):
            rec.block = i
            rec.has_mouse = blk.action_model is not None and blk.action_model.enable_mouse \
                and kwargs.get("mouse_cond") is not None
        blk.register_forward_pre_hook(set_block, with_kwargs=True)
        blk.register_forward_hook(_hook_out(self, f"blk{i}.out"))
        # Residual checkpoints: inputs of the modules that follow each sub-layer.
        blk.norm3.register_forward_pre_hook(_hook_in(self, f"blk{i}.x_after_sa"))
        if blk.action_model is not None:
            blk.action_model.register_forward_pre_hook(_hook_in(self, f"blk{i}.x_after_ca"))
            blk.norm2.register_forward_pre_hook(_hook_in(self, f"blk{i}.x_after_action"))
        else:
            blk.norm2.register_forward_pre_hook(_hook_in(self, f"blk{i}.x_after_ca"))

        def detail_out(name, fn=None):
            def hook(_m, _inp, out):
                if rec.detail():
                    rec.put(f"blk{i}.{name}", fn(out) if fn else out)
            return hook

        def detail_in(name):
            def hook(_m, args):
                if rec.detail():
                    rec.put(f"blk{i}.{name}", args[0])
            return hook

        sa, ca = blk.self_attn, blk.cross_attn
        sa.register_forward_pre_hook(detail_in("sa_in"))
        sa.norm_q.register_forward_hook(detail_out("sa_q"))
        sa.norm_k.register_forward_hook(detail_out("sa_k"))
        sa.v.register_forward_hook(detail_out("sa_v"))
        sa.register_forward_hook(detail_out("sa_out"))
        blk.norm3.register_forward_hook(detail_out("ca_in"))
        ca.norm_q.register_forward_hook(detail_out("ca_q"))
        ca.norm_k.register_forward_hook(detail_out("ca_k"))   # first call only (cross-attn K/V cache)
        ca.v.register_forward_hook(detail_out("ca_v"))
        ca.register_forward_hook(detail_out("ca_out"))
        blk.ffn.register_forward_pre_hook(detail_in("ffn_in"))
        blk.ffn.register_forward_hook(detail_out("ffn_out"))
        am = blk.action_model
        if am is None:
            return
        if am.enable_mouse:
            am.mouse_mlp.register_forward_pre_hook(detail_in("act.mouse_in"))
            am.mouse_mlp.register_forward_hook(detail_out("act.mouse_mlp"))
            am.img_attn_q_norm.register_forward_hook(detail_out("act.mouse_q_norm"))
            am.img_attn_k_norm.register_forward_hook(detail_out("act.mouse_k_norm"))
            am.proj_mouse.register_forward_hook(detail_out("act.mouse_proj"))
        am.keyboard_embed.register_forward_pre_hook(detail_in("act.kb_raw"))
        am.keyboard_embed.register_forward_hook(detail_out("act.kb_embed"))
        am.keyboard_attn_kv.register_forward_pre_hook(detail_in("act.kb_window"))
        am.keyboard_attn_kv.register_forward_hook(detail_out("act.kb_kv"))
        am.mouse_attn_q.register_forward_pre_hook(detail_in("act.kb_q_in"))
        am.key_attn_q_norm.register_forward_hook(detail_out("act.kb_q_norm"))
        am.key_attn_k_norm.register_forward_hook(detail_out("act.kb_k_norm"))
        am.proj_keyboard.register_forward_hook(detail_out("act.kb_proj"))


# ---------------------------------------------------------------------------
# Building the tiny reference components
# ---------------------------------------------------------------------------

def tiny_dit_config(ref, mode: str) -> dict:
    cfg = json.loads((ref.root / "configs/distilled_model" / mode / "config.json").read_text())
    cfg.update(TINY_DIT)
    cfg["action_config"] = dict(cfg["action_config"], **TINY_ACTION)
    return cfg


def build_generator(ref, mode: str, tmp: Path):
    """WanDiffusionWrapper built the way inference.py does it (from the
    config directory), with the tiny dims."""
    cfg_dir = tmp / f"config_{mode}"
    cfg_dir.mkdir(exist_ok=True)
    (cfg_dir / "config.json").write_text(json.dumps(tiny_dit_config(ref, mode), indent=1))
    cm, mp = ref.causal_model, ref.model
    saved = cm.MLPProj
    # MLPProj(1280, dim) is hard-coded: the image-embedding input width is the
    # CLIP width, tiny here.
    cm.MLPProj = lambda in_dim, out_dim: mp.MLPProj(TINY_CLIP["vision_dim"], out_dim)
    try:
        with mg2_refenv.cpu_instead_of_cuda_device():
            gen = ref.wan_wrapper.WanDiffusionWrapper(model_config=str(cfg_dir), timestep_shift=5.0,
                                                      is_causal=True)
    finally:
        cm.MLPProj = saved
    return gen


class TinyPipeline:
    """CausalInferencePipeline with cache buffers sized for the tiny model:
    the reference hard-codes 30 blocks, 12x128 heads, 880 tokens per frame,
    16x64 action heads and 257 context tokens in its _initialize_* methods
    (cache *contents* and the inference loop are the reference's)."""

    @staticmethod
    def make(ref, args, generator, vae_decoder, model_cfg):
        base = ref.causal_inference.CausalInferencePipeline

        class Tiny(base):
            def _initialize_kv_cache(self, batch_size, dtype, device):
                n, d = model_cfg["num_heads"], model_cfg["dim"] // model_cfg["num_heads"]
                size = self.local_attn_size * self.frame_seq_length
                self.kv_cache1 = [dict(k=torch.zeros([batch_size, size, n, d], dtype=dtype),
                                       v=torch.zeros([batch_size, size, n, d], dtype=dtype),
                                       global_end_index=torch.tensor([0], dtype=torch.long),
                                       local_end_index=torch.tensor([0], dtype=torch.long))
                                  for _ in range(self.num_transformer_blocks)]

            def _initialize_kv_cache_mouse_and_keyboard(self, batch_size, dtype, device):
                ac = model_cfg["action_config"]
                n = ac["heads_num"]
                d = ac["keyboard_hidden_dim"] // n
                size = self.local_attn_size

                def cache(rows):
                    return dict(k=torch.zeros([rows, size, n, d], dtype=dtype),
                                v=torch.zeros([rows, size, n, d], dtype=dtype),
                                global_end_index=torch.tensor([0], dtype=torch.long),
                                local_end_index=torch.tensor([0], dtype=torch.long))
                self.kv_cache_keyboard = [cache(batch_size) for _ in range(self.num_transformer_blocks)]
                self.kv_cache_mouse = [cache(batch_size * self.frame_seq_length)
                                       for _ in range(self.num_transformer_blocks)]

            def _initialize_crossattn_cache(self, batch_size, dtype, device):
                self.crossattn_cache = [dict(k=None, v=None, is_init=False)
                                        for _ in range(self.num_transformer_blocks)]

        pipe = Tiny(args, device="cpu", generator=generator, vae_decoder=vae_decoder)
        pipe.num_transformer_blocks = model_cfg["num_layers"]
        pipe.frame_seq_length = FRAME_TOKENS
        return pipe


def pipeline_args(mode):
    return types.SimpleNamespace(denoising_step_list=MODES[mode]["steps"], warp_denoising_step=True,
                                 num_frame_per_block=3, context_noise=0,
                                 model_kwargs=dict(timestep_shift=5.0))


# ---------------------------------------------------------------------------
# Weight files
# ---------------------------------------------------------------------------

def write_tiny_weights(ref, wdir: Path, tmp: Path) -> dict:
    info = {}
    # DiT checkpoints: safetensors, keys "model.*" (saved from WanDiffusionWrapper),
    # bf16 values; the fp32 run uses the very same values.
    for mode, spec in MODES.items():
        gen = build_generator(ref, mode, tmp)
        randomize_(gen, WEIGHT_SEEDS["dit"] + 100 * list(MODES).index(mode), ref)
        sd = {k: v.to(torch.bfloat16).contiguous() for k, v in gen.state_dict().items()}
        path = wdir / spec["ckpt"]
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file(sd, str(path))
        info[mode] = dict(file=spec["ckpt"], tensors=len(sd), config=tiny_dit_config(ref, mode))
    # VAE: the full VideoVAE_ state dict (encoder + decoder + conv1/conv2), fp32,
    # torch.save of the state dict like Wan2.1_VAE.pth.
    vae = ref.wanx_vae.VideoVAE_(dim=TINY_VAE_DIM, z_dim=16)
    randomize_(vae, WEIGHT_SEEDS["vae"], ref)
    torch.save(vae.state_dict(), str(wdir / VAE_FILE))
    info["vae"] = dict(file=VAE_FILE, tensors=len(vae.state_dict()), dim=TINY_VAE_DIM, z_dim=16)
    # CLIP: XLMRobertaCLIP state dict (visual + unused textual + log_scale), fp32.
    clip = ref.wanx_clip.XLMRobertaCLIP(**tiny_clip_kwargs())
    randomize_(clip, WEIGHT_SEEDS["clip"], ref)
    torch.save(clip.state_dict(), str(wdir / CLIP_FILE))
    info["clip"] = dict(file=CLIP_FILE, tensors=len(clip.state_dict()), config=TINY_CLIP)
    return info


def tiny_clip_kwargs():
    kw = dict(vision_pool="token", activation="gelu", type_size=1, pad_id=1, text_post_norm=True,
              text_dropout=0.1, attn_dropout=0.0, proj_dropout=0.0, embedding_dropout=0.0)
    kw.update(TINY_CLIP)
    return kw


@functools.cache
def _patched_vae_classes(ref):
    return functools.partial(ref.wanx_vae.VideoVAE_, dim=TINY_VAE_DIM), \
        functools.partial(ref.vae_block3.VAEDecoder3d, dim=TINY_VAE_DIM)


class tiny_vae_and_clip_classes:
    """While active, the reference builds the tiny VAE / decoder / CLIP."""

    def __init__(self, ref):
        self.ref = ref

    def __enter__(self):
        r = self.ref
        self.saved = (r.wanx_vae.VideoVAE_, r.vae_block3.VAEDecoder3d, r.wanx_clip.clip_xlm_roberta_vit_h_14)
        enc, dec = _patched_vae_classes(r)
        r.wanx_vae.VideoVAE_ = enc
        r.vae_block3.VAEDecoder3d = dec
        r.wanx_clip.clip_xlm_roberta_vit_h_14 = functools.partial(self.saved[2], **TINY_CLIP)

    def __exit__(self, *exc):
        r = self.ref
        r.wanx_vae.VideoVAE_, r.vae_block3.VAEDecoder3d, r.wanx_clip.clip_xlm_roberta_vit_h_14 = self.saved


def load_vae_and_clip(ref, wdir: Path, reference_precision: bool):
    """reference_precision: exactly inference.py (get_wanx_vae_wrapper with
    fp16, then .to(bf16)); else everything fp32 (mean/std never rounded)."""
    with tiny_vae_and_clip_classes(ref):
        if reference_precision:
            vae = ref.wanx_wrapper.get_wanx_vae_wrapper(str(wdir), torch.float16)
            vae.requires_grad_(False)
            vae.eval()
            vae = vae.to("cpu", torch.bfloat16)
        else:
            src = ref.wanx_vae
            v = src.WanVAE(pretrained_path=str(wdir / VAE_FILE))
            c = ref.wanx_clip.CLIPModel(checkpoint_path=str(wdir / CLIP_FILE), tokenizer_path="unused")
            vae = ref.wanx_wrapper.WanxVAEWrapper(v, c)
    return vae


def load_decoder(ref, wdir: Path, dtype, as_inference_py=False):
    """inference.py L54-63: decoder + conv2 subset of Wan2.1_VAE.pth, cast to
    `dtype`. as_inference_py: also the later casts of L71-72 (the decoder is a
    submodule of the pipeline, which is cast to bf16, then the decoder back to
    fp16), so the weights end up fp16(bf16(fp16(w)))."""
    with tiny_vae_and_clip_classes(ref):
        dec = ref.vae_block3.VAEDecoderWrapper()
    sd = torch.load(str(wdir / VAE_FILE), map_location="cpu")
    dec.load_state_dict({k: v for k, v in sd.items() if "decoder." in k or "conv2" in k})
    dec = dec.to("cpu", dtype).requires_grad_(False).eval()
    if as_inference_py:
        dec = dec.to(dtype=torch.bfloat16).to(torch.float16)
    return dec


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------

def make_inputs():
    """Deterministic tiny image and per-raw-frame action tracks. Actions change
    every raw frame (unlike the reference benchmark's 12-frame holds) so that
    an off-by-one in the action window shows."""
    g = torch.Generator().manual_seed(INPUT_SEED)
    image_u8 = torch.randint(0, 256, (3, PIXEL_H, PIXEL_W), generator=g, dtype=torch.uint8)
    image = (image_u8.float() / 255.0 - 0.5) / 0.5           # ToTensor + Normalize(0.5, 0.5)
    image = image[None, :, None]                             # [1, 3, 1, H, W]
    mouse = bf16_round(0.1 * torch.randn(1, RAW_FRAMES, 2, generator=g))
    kb4 = (torch.rand(1, RAW_FRAMES, 4, generator=g) < 0.4).float()
    kb2 = (torch.rand(1, RAW_FRAMES, 2, generator=g) < 0.4).float()
    kb7 = torch.nn.functional.one_hot(torch.randint(0, 7, (1, RAW_FRAMES), generator=g), 7).float()
    return dict(image_u8=image_u8, image=image, mouse=mouse,
                keyboard=dict(universal=kb4, gta_drive=kb2, templerun=kb7))


# ---------------------------------------------------------------------------
# Components
# ---------------------------------------------------------------------------

def clip_goldens(ref, wdir, inputs):
    out = {}
    for prec, reference_precision in (("ref", True), ("fp32", False)):
        vae = load_vae_and_clip(ref, wdir, reference_precision)
        clip = vae.clip
        vis = clip.model.visual
        dt = torch.bfloat16 if reference_precision else torch.float32
        p = f"{prec}."
        hooks = [vis.patch_embedding.register_forward_pre_hook(
                     lambda m, a: out.__setitem__(p + "pixels", a[0].detach().clone())),
                 vis.patch_embedding.register_forward_hook(
                     lambda m, a, y: out.__setitem__(p + "patch_embed", y.flatten(2).permute(0, 2, 1).clone())),
                 vis.pre_norm.register_forward_pre_hook(
                     lambda m, a: out.__setitem__(p + "embed_plus_pos", a[0].detach().clone())),
                 vis.pre_norm.register_forward_hook(
                     lambda m, a, y: out.__setitem__(p + "pre_norm", y.detach().clone()))]
        for i, blk in enumerate(vis.transformer):
            hooks.append(blk.register_forward_hook(
                lambda m, a, y, i=i: out.__setitem__(p + f"block{i}", y.detach().clone())))
            hooks.append(blk.attn.register_forward_hook(
                lambda m, a, y, i=i: out.__setitem__(p + f"block{i}.attn_out", y.detach().clone())))
            hooks.append(blk.mlp[1].register_forward_hook(
                lambda m, a, y, i=i: out.__setitem__(p + f"block{i}.mlp_hidden", y.detach().clone())))
        image = inputs["image"].to(dt)
        with torch.no_grad():
            ctx = clip.encode_video(image.clone())
        for h in hooks:
            h.remove()
        out[p + "input"] = image
        out[p + "visual_context"] = ctx
        assert torch.equal(ctx, out[p + f"block{len(vis.transformer) - 2}"])
    return out


def vae_encoder_goldens(ref, wdir, inputs):
    out = {}
    n_lat = 6
    for prec, reference_precision in (("ref", True), ("fp32", False)):
        vae = load_vae_and_clip(ref, wdir, reference_precision)
        dt = torch.bfloat16 if reference_precision else torch.float32
        model = vae.vae.model
        enc = model.encoder
        chunk = [0]
        p = f"{prec}."
        # conv1 (chunk 0 only: full resolution), the output of each stage
        # (Resample layers: spatial /2, and temporal /2 for downsample3d), the
        # middle and the head conv, for chunk 0 (frame 0) and chunk 1 (frames 1-4).
        names = [("conv1", enc.conv1)] + [(f"down{i}", l) for i, l in enumerate(enc.downsamples)
                                          if isinstance(l, ref.wanx_vae.Resample)] + \
            [("middle", enc.middle[2]), ("head", enc.head[2])]
        hooks = []
        for name, mod in names:
            hooks.append(mod.register_forward_hook(
                lambda m, a, y, name=name: out.__setitem__(f"{p}chunk{chunk[0]}.{name}", y.detach().clone())
                if chunk[0] < 2 and not (name == "conv1" and chunk[0] > 0) else None))
        hooks.append(enc.register_forward_hook(lambda m, a, y: chunk.__setitem__(0, chunk[0] + 1)))
        hooks.append(model.conv1.register_forward_hook(
            lambda m, a, y: out.__setitem__(p + "conv1_mu_logvar", y.detach().clone())))
        image = inputs["image"].to(dt)
        video = torch.cat([image, torch.zeros_like(image).repeat(1, 1, 4 * (n_lat - 1), 1, 1)], dim=2)
        with torch.no_grad():
            z = vae.encode(video, device="cpu", tiled=True, tile_size=[44, 80], tile_stride=[23, 38])
        for h in hooks:
            h.remove()
        assert chunk[0] == n_lat
        out[p + "input_frame0"] = image
        out[p + "latents"] = z
        out[p + "scale_mean"] = vae.vae.scale[0].clone()
        out[p + "scale_inv_std"] = vae.vae.scale[1].clone()
    return out


def vae_decoder_goldens(ref, wdir):
    """Streaming decode of two 3-latent blocks with the persistent feature
    cache, exactly as CausalInferencePipeline calls the decoder."""
    out = {}
    g = torch.Generator().manual_seed(DECODER_INPUT_SEED)
    # 4 latents: a 3-latent block (first-latent rule, 'Rep', primed caches),
    # then one more call with the caches carried over.
    z = bf16_round(torch.randn(1, 16, 4, LATENT_H, LATENT_W, generator=g))   # denoised latents (bf16 in the pipeline)
    out["input_latents"] = z
    for prec, dt in (("ref", torch.float16), ("fp32", torch.float32)):
        dec = load_decoder(ref, wdir, dt, as_inference_py=prec == "ref")
        d = dec.decoder
        p = f"{prec}."
        state = dict(block=0, latent=0)
        # conv1, middle, and the two temporal upsamplers (full-resolution stages
        # are left to the frames themselves to keep the fixture small).
        names = [("conv1", d.conv1), ("middle", d.middle[2])] + \
            [(f"up{i}", l) for i, l in enumerate(d.upsamples)
             if isinstance(l, ref.vae_block3.Resample) and l.mode == "upsample3d"]
        hooks = []
        for name, mod in names:
            def hook(m, a, y, name=name):
                # latents 0 and 1 of block 0 (first-latent and 'Rep' rules),
                # latent 0 of block 1 (fully primed cache)
                if (state["block"], state["latent"]) in ((0, 0), (0, 1), (1, 0)):
                    out[f"{p}b{state['block']}.l{state['latent']}.{name}"] = y.detach().clone()
            hooks.append(mod.register_forward_hook(hook))
        hooks.append(d.register_forward_hook(lambda m, a, y: state.__setitem__("latent", state["latent"] + 1)))
        hooks.append(dec.conv2.register_forward_hook(
            lambda m, a, y: out.__setitem__(f"{p}b{state['block']}.conv2", y.detach().clone())))
        cache = [None] * 32
        with torch.no_grad():
            for b, (lo, hi) in enumerate(((0, 3), (3, 4))):
                state.update(block=b, latent=0)
                blk = z[:, :, lo:hi]
                # pipeline: denoised_pred.transpose(1, 2) then .half() (fp16 run)
                frames, cache = dec(blk.transpose(1, 2).to(dt), *cache)
                out[f"{p}b{b}.frames"] = frames if prec == "fp32" else frames.half()
        for h in hooks:
            h.remove()
        out[f"{p}cache_kinds"] = torch.tensor([0 if c is None else (1 if isinstance(c, str) else 2)
                                               for c in cache], dtype=torch.uint8)
    return out


# ---------------------------------------------------------------------------
# Whole pipeline
# ---------------------------------------------------------------------------

class _TorchWithRandnLike:
    """Stands in for the `torch` module inside pipeline/causal_inference.py:
    randn_like draws fp32 from the golden's CPU generator and casts to the
    tensor's dtype (the reference draws CUDA Philox noise directly in bf16,
    which no CPU implementation reproduces)."""

    def __init__(self, gen):
        self._gen = gen
        self.draws = []

    def randn_like(self, t):
        n = torch.randn(tuple(t.shape), generator=self._gen, dtype=torch.float32)
        self.draws.append(n)
        return n.to(t.dtype)

    def __getattr__(self, name):
        return getattr(torch, name)


def run_pipeline(ref, wdir, tmp, mode, inputs, reference_precision):
    dt = torch.bfloat16 if reference_precision else torch.float32
    prec = "ref" if reference_precision else "fp32"
    spec = MODES[mode]
    cfg = tiny_dit_config(ref, mode)
    num_latents = spec.get("num_latents", NUM_LATENTS)
    num_blocks = num_latents // 3
    ref.set_frame_tokens(FRAME_TOKENS)
    out = {}

    # ---- models, as inference.py _init_models ----
    generator = build_generator(ref, mode, tmp)
    decoder = load_decoder(ref, wdir, torch.float16) if reference_precision else None
    pipe = TinyPipeline.make(ref, pipeline_args(mode), generator, decoder, cfg)
    pipe.generator.load_state_dict(load_file(str(wdir / spec["ckpt"])))
    pipe = pipe.to(device="cpu", dtype=dt)
    if reference_precision:
        pipe.vae_decoder.to(torch.float16)
    vae = load_vae_and_clip(ref, wdir, reference_precision)

    # ---- conditioning, as inference.py generate_videos ----
    image = inputs["image"].to(dt)
    padding = torch.zeros_like(image).repeat(1, 1, 4 * (num_latents - 1), 1, 1)
    with torch.no_grad():
        img_cond = vae.encode(torch.cat([image, padding], dim=2), device="cpu", tiled=True,
                              tile_size=[44, 80], tile_stride=[23, 38])
        mask = torch.ones_like(img_cond)
        mask[:, :, 1:] = 0
        cond_concat = torch.cat([mask[:, :4], img_cond], dim=1)
        visual_context = vae.clip.encode_video(image.clone())
    gen = torch.Generator().manual_seed(NOISE_SEED)
    noise_f32 = torch.randn([1, 16, num_latents, LATENT_H, LATENT_W], generator=gen, dtype=torch.float32)
    noise = noise_f32.to(dt)
    cond = dict(cond_concat=cond_concat.to(dt), visual_context=visual_context.to(dt))
    raw_frames = 1 + 4 * (num_latents - 1)
    if cfg["action_config"]["enable_mouse"]:
        cond["mouse_cond"] = inputs["mouse"][:, :raw_frames].to(dt)
    cond["keyboard_cond"] = inputs["keyboard"][mode][:, :raw_frames].to(dt)
    # cond_concat = [mask (4 ch: 1 for latent 0, else 0), img_cond (16 ch)]
    out.update({f"{prec}.img_cond": cond["cond_concat"][:, 4:].clone(),
                f"{prec}.visual_context": cond["visual_context"]})
    noise_draws = {"noise.initial": noise_f32}

    # ---- recording ----
    model = pipe.generator.model
    rec = DitRecorder(ref, model, detail_blocks=[0])
    steps = len(spec["steps"])
    calls_per_block = steps + 1
    last = num_blocks - 1
    # ref: every internal of the first call (empty caches); K/V windows of the
    # first call of the last block (caches rolled). fp32: block outputs of the
    # first call (tight-tolerance localisation).
    detail_calls = {0: ("b0.s0", "full"), last * calls_per_block: (f"b{last}.s0", "windows")} \
        if reference_precision else {0: ("b0.s0", "blocks")}
    state = dict(call=0)
    orig_forward = pipe.generator.forward

    def generator_forward(noisy_image_or_video, conditional_dict, timestep, **kw):
        c = state["call"]
        b, k = divmod(c, calls_per_block)
        tag = f"b{b}.s{k}" if k < steps else f"b{b}.ctx"
        rec.prefix, rec.level = (f"{prec}.call.{detail_calls[c][0]}", detail_calls[c][1]) \
            if c in detail_calls else (None, None)
        flow, x0 = orig_forward(noisy_image_or_video, conditional_dict, timestep, **kw)
        rec.prefix = rec.level = None
        # Stored: every step's flow and x0, and (ref only) the re-noised input
        # of steps >= 1 (the bf16 add_noise result). Not stored, as exact
        # functions of stored tensors: the s0 input (noise slice), fp32 step
        # inputs (fp32 add_noise), the context re-run (input = last x0, t = 0,
        # output unused; its effect is the cache state seen by later calls).
        if k < steps:
            if k > 0 and reference_precision:
                out[f"{prec}.{tag}.x"] = noisy_image_or_video.detach().clone()
            out[f"{prec}.{tag}.flow"] = flow.detach().clone()
            out[f"{prec}.{tag}.x0"] = x0.detach().clone()
        if c == 0:
            out[f"{prec}.t_first_call"] = timestep.detach().clone()
        assert kw["current_start"] == 3 * b * FRAME_TOKENS
        state["call"] += 1
        return flow, x0
    pipe.generator.forward = generator_forward

    torch_proxy = _TorchWithRandnLike(gen)
    ci = ref.causal_inference
    ci.torch = torch_proxy
    orig_add_noise = pipe.scheduler.add_noise

    def add_noise(original_samples, noise_, timestep):
        y = orig_add_noise(original_samples, noise_, timestep)
        c = state["call"] - 1
        b, k = divmod(c, calls_per_block)
        draw = torch_proxy.draws[-1]
        assert torch.equal(draw.to(noise_.dtype), noise_)
        noise_draws[f"noise.b{b}.s{k}"] = draw
        return y
    pipe.scheduler.add_noise = add_noise

    frames = []
    if reference_precision:
        orig_dec_forward = pipe.vae_decoder.forward

        def dec_forward(z, *cache):
            video, cache = orig_dec_forward(z, *cache)
            frames.append(video)
            return video, cache
        pipe.vae_decoder.forward = dec_forward
    else:
        # fp32 run: the decoder is checked separately (vae_decoder.safetensors);
        # the pipeline's `.half()` input would defeat an fp32 decode.
        pipe.vae_decoder = lambda z, *cache: (None, list(cache))

    try:
        with torch.no_grad():
            videos = pipe.inference(noise=noise, conditional_dict=cond, return_latents=False, mode=mode)
    finally:
        ci.torch = torch
        rec.restore()
    assert state["call"] == num_blocks * calls_per_block
    out.update(rec.out)
    out.update(noise_draws)
    if reference_precision:
        video = torch.cat(videos, dim=1)                                 # [1, T, 3, H, W] fp32
        u8 = ((video.float() + 1) * 127.5).clip(0, 255).permute(0, 1, 3, 4, 2).numpy().astype(np.uint8)[0]
        out[f"{prec}.video_u8"] = torch.from_numpy(np.ascontiguousarray(u8))   # [T, H, W, 3]
        for b, f in enumerate(frames):
            assert f.shape[1] == (9 if b == 0 else 12)
    # Self-attn cache of layer 0 after the whole run: shows the rolled layout.
    if reference_precision:
        kv = pipe.kv_cache1[0]
        out[f"{prec}.final_cache.blk0.k"] = kv["k"].clone()
        out[f"{prec}.final_cache.blk0.v"] = kv["v"].clone()
        out[f"{prec}.final_cache.blk0.local_end"] = kv["local_end_index"].clone()
        out[f"{prec}.final_cache.blk0.global_end"] = kv["global_end_index"].clone()
    return out, {f"{prec}.call.{name}": level for name, level in detail_calls.values()}


# ---------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------

def constants(ref):
    out = {}
    sch = ref.scheduler.FlowMatchScheduler(shift=5.0, sigma_min=0.0, extra_one_step=True)
    sch.set_timesteps(1000, training=True)
    out["scheduler.sigmas"] = sch.sigmas.clone()          # fp32 [1000]
    out["scheduler.timesteps"] = sch.timesteps.clone()    # fp32 [1000]
    for name, steps in (("universal_gta", [1000, 666, 333]), ("templerun", [1000, 750, 500, 250])):
        args = types.SimpleNamespace(denoising_step_list=steps, warp_denoising_step=True)
        warped = torch.cat((sch.timesteps.cpu(), torch.tensor([0], dtype=torch.float32)))[
            1000 - torch.tensor(args.denoising_step_list, dtype=torch.long)]
        out[f"sampler.{name}.t"] = warped
        idx = torch.argmin((sch.timesteps.double()[None] - warped.double()[:, None]).abs(), dim=1)
        out[f"sampler.{name}.sigma"] = sch.sigmas[idx].clone()
        out[f"sampler.{name}.grid_index"] = idx
    # Sinusoidal time embedding (freq_dim 256), f64, for the step times and 0.
    t = torch.cat([out["sampler.universal_gta.t"], out["sampler.templerun.t"], torch.zeros(1)])
    out["sinusoid.t"] = t
    out["sinusoid.f64"] = ref.model.sinusoidal_embedding_1d(256, t)
    # Main 3-D RoPE tables (complex128 in the reference): real and imaginary
    # parts, full config (head_dim 128) and tiny config.
    for name, hd in (("full", 128), ("tiny", TINY_DIT["dim"] // TINY_DIT["num_heads"])):
        freqs = torch.cat([ref.model.rope_params(1024, hd - 4 * (hd // 6)),
                           ref.model.rope_params(1024, 2 * (hd // 6)),
                           ref.model.rope_params(1024, 2 * (hd // 6))], dim=1)
        rows = torch.tensor(list(range(16)) + [100, 333, 777, 1023])
        out[f"rope.{name}.rows"] = rows
        out[f"rope.{name}.cos_f64"] = freqs[rows].real.contiguous()
        out[f"rope.{name}.sin_f64"] = freqs[rows].imag.contiguous()
    # Action-module RoPE (fp32 cos/sin [7500, 64], identical for tiny and full).
    with mg2_refenv.cpu_instead_of_cuda_device():
        am = ref.action_module.ActionModule(keyboard_dim_in=4, hidden_size=8, img_hidden_size=64,
                                            keyboard_hidden_dim=128, mouse_hidden_dim=128,
                                            heads_num=2)
    rows = torch.tensor(list(range(16)) + [255, 256, 1000, 1023, 2047, 4095, 7499])
    out["action_rope.rows"] = rows
    out["action_rope.cos"] = am.freqs_cos[rows].contiguous()
    out["action_rope.sin"] = am.freqs_sin[rows].contiguous()
    assert am.freqs_cos.shape == (7500, 64) and am.freqs_cos.dtype == torch.float32
    # VAE latent normalisation constants as each consumer rounds them.
    with tiny_vae_and_clip_classes(ref):
        dec = ref.vae_block3.VAEDecoderWrapper()
    mean, std = dec.mean, dec.std
    out["vae.mean_f32"] = mean
    out["vae.std_f32"] = std
    # streaming decoder (vae_block3.py L159-160): constants cast to fp16, 1/std in fp16
    out["vae.decoder_fp16.mean"] = mean.to(torch.float16)
    out["vae.decoder_fp16.inv_std"] = 1.0 / std.to(torch.float16)
    # torch CPU randn reference vectors for the RNG port (mt19937 + Box-Muller).
    for seed in (0, 42):
        for n in (1, 7, 15, 16, 17, 31, 100, 1000):
            g = torch.Generator().manual_seed(seed)
            out[f"randn.seed{seed}.n{n}"] = torch.randn(n, generator=g, dtype=torch.float32)
    g = torch.Generator().manual_seed(42)
    a = torch.randn(40, generator=g)
    b = torch.randn(24, generator=g)
    out["randn.seed42.seq40_then24"] = torch.cat([a, b])
    # The same from torch's scalar kernel (ATEN_CPU_CAPABILITY=default): the
    # vectorised AVX2/AVX-512 kernel (above, and the pipeline noise) uses
    # Cephes-style log/sincos approximations and differs in the last bit for
    # ~40 % of the values of a size >= 16 draw.
    code = ("import torch,sys\nfrom safetensors.torch import save_file\nd={}\n"
            "for s in (0,42):\n for n in (1,7,15,16,17,31,100,1000):\n"
            "  g=torch.Generator().manual_seed(s); d[f'randn_scalar.seed{s}.n{n}']=torch.randn(n,generator=g)\n"
            "assert torch.backends.cpu.get_cpu_capability()=='DEFAULT'\nsave_file(d,sys.argv[1])\n")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scalar.safetensors"
        subprocess.run([sys.executable, "-c", code, str(path)], check=True,
                       env=dict(os.environ, ATEN_CPU_CAPABILITY="default"))
        out.update(load_file(str(path)))
    return out


# ---------------------------------------------------------------------------
# Full-size key tables
# ---------------------------------------------------------------------------

def full_key_tables(ref):
    tables = {}
    for mode, spec in MODES.items():
        cfg = json.loads((ref.root / "configs/distilled_model" / mode / "config.json").read_text())
        cfg = {k: v for k, v in cfg.items() if not k.startswith("_") and k != "inject_sample_info"}
        with torch.device("meta"), mg2_refenv.cpu_instead_of_cuda_device():
            model = ref.causal_model.CausalWanModel(**cfg)
        tables[spec["ckpt"]] = dict(
            dtype="BF16", dtype_verified=False,
            keys=[["model." + k, list(v.shape)] for k, v in model.state_dict().items()])
    with torch.device("meta"):
        vae = ref.wanx_vae.VideoVAE_(z_dim=16)
        clip = ref.wanx_clip.XLMRobertaCLIP(**dict(tiny_clip_kwargs(), **FULL_CLIP))
    tables[VAE_FILE] = dict(dtype="F32", dtype_verified=False,
                            keys=[[k, list(v.shape)] for k, v in vae.state_dict().items()])
    tables[CLIP_FILE] = dict(dtype="F32", dtype_verified=False,
                             keys=[[k, list(v.shape)] for k, v in clip.state_dict().items()])
    for t in tables.values():
        t["tensors"] = len(t["keys"])
        t["parameters"] = sum(math.prod(s) for _, s in t["keys"])
    return tables


# ---------------------------------------------------------------------------

def ref_vs_fp32(tensors: dict) -> dict:
    """Relative L2 distance of every ref.* tensor to its fp32.* twin: what
    bf16/fp16 numerics cost on these tiny models (a guide for tolerances)."""
    out = {}
    for k, v in sorted(tensors.items()):
        if k.startswith("ref.") and f"fp32.{k[4:]}" in tensors and v.is_floating_point() and v.numel() > 16:
            w = tensors[f"fp32.{k[4:]}"].double()
            out[k[4:]] = float(f"{((v.double() - w).norm() / w.norm()).item():.3g}")
    return out


def save(out_dir: Path, name: str, tensors: dict, meta: dict) -> dict:
    path = out_dir / name
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path),
              # one entry: safetensors writes the metadata map in hash order
              metadata={"generator": f"tools/mg2_goldens.py, reference {mg2_refenv.REF_COMMIT}"})
    meta.setdefault("tensor_counts", {})[name] = len(tensors)
    diffs = ref_vs_fp32(tensors)
    if diffs:
        meta.setdefault("ref_vs_fp32_rel_l2", {})[name] = diffs
    return meta


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mirror", default=mg2_refenv.DEFAULT_MIRROR,
                    help="bare git mirror of %s (or %s)" % (mg2_refenv.REF_REPO, mg2_refenv.REF_MIRROR_REPO))
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/data/mg2"))
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    random.seed(0)
    os.environ.setdefault("TQDM_DISABLE", "1")
    out_dir = Path(args.out)
    wdir = out_dir / "weights"
    wdir.mkdir(parents=True, exist_ok=True)

    ref = mg2_refenv.Reference(args.mirror)
    tensors_meta: dict = {}
    with tempfile.TemporaryDirectory(prefix="mg2gold-") as tmp:
        tmp = Path(tmp)
        weights = write_tiny_weights(ref, wdir, tmp)
        inputs = make_inputs()
        save(out_dir, "constants.safetensors", constants(ref), tensors_meta)
        save(out_dir, "clip.safetensors", clip_goldens(ref, wdir, inputs), tensors_meta)
        save(out_dir, "vae_encoder.safetensors", vae_encoder_goldens(ref, wdir, inputs), tensors_meta)
        save(out_dir, "vae_decoder.safetensors", vae_decoder_goldens(ref, wdir), tensors_meta)
        detail = {}
        for mode in MODES:
            calls = {}
            raw = 1 + 4 * (MODES[mode].get("num_latents", NUM_LATENTS) - 1)
            t = dict(image_u8=inputs["image_u8"], keyboard=inputs["keyboard"][mode][:, :raw])
            if mode != "templerun":
                t["mouse"] = inputs["mouse"][:, :raw]
            t = {f"inputs.{k}": v for k, v in t.items()}
            for rp in (True, False):
                o, c = run_pipeline(ref, wdir, tmp, mode, inputs, rp)
                for k, v in o.items():   # noise draws are shared by both runs
                    assert k not in t or torch.equal(t[k], v), k
                t.update(o)
                calls.update(c)
            detail[mode] = calls
            detail[mode]["num_latents"] = MODES[mode].get("num_latents", NUM_LATENTS)
            save(out_dir, f"pipeline_{mode}.safetensors", t, tensors_meta)
    with gzip.GzipFile(out_dir / "full_keys.json.gz", "wb", mtime=0) as f:
        f.write((json.dumps(full_key_tables(ref), indent=0) + "\n").encode())
    manifest = dict(
        generator="tools/mg2_goldens.py",
        reference=dict(repo=mg2_refenv.REF_REPO, mirror=mg2_refenv.REF_MIRROR_REPO,
                       commit=mg2_refenv.REF_COMMIT, folder=mg2_refenv.REF_FOLDER,
                       source_patches=[dict(file=f, reason=w) for f, _, _, w in mg2_refenv.SOURCE_PATCHES]),
        environment=dict(torch=torch.__version__, cpu_capability=torch.backends.cpu.get_cpu_capability(),
                         threads=args.threads, python=platform.python_version()),
        tiny=dict(latent=[LATENT_H, LATENT_W], pixels=[PIXEL_H, PIXEL_W], num_latents=NUM_LATENTS,
                  frame_tokens=FRAME_TOKENS, raw_frames=RAW_FRAMES, clip_tokens=CLIP_TOKENS,
                  dit=TINY_DIT, action=TINY_ACTION, vae_dim=TINY_VAE_DIM, clip=TINY_CLIP),
        weights=weights,
        seeds=dict(weights=WEIGHT_SEEDS, inputs=INPUT_SEED, noise=NOISE_SEED, decoder_input=DECODER_INPUT_SEED),
        noise=dict(seed=NOISE_SEED, generator="torch.Generator() (CPU, mt19937) .manual_seed(seed)",
                   dtype="float32, then cast to the run's dtype (bf16 for ref, none for fp32)",
                   draws=["initial: randn([1, 16, N, h, w]) row-major (c, f, y, x)",
                          "per block b, per step k < last: randn([3, 16, h, w]) row-major (f, c, y, x), "
                          "the sampler's randn_like((b f) c h w)"]),
        detail_calls=detail,
        **tensors_meta,
    )
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    ref.close()
    total = sum(p.stat().st_size for p in out_dir.rglob("*") if p.is_file())
    print(f"wrote {out_dir} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
