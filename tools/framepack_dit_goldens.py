#!/usr/bin/env python3
"""Goldens for flick's FramePack DiT (models/hunyuan/framepack_dit*): the
reference HunyuanVideoTransformer3DModelPacked (lllyasviel/FramePack @ 97fe5db,
diffusers_helper/models/hunyuan_video_packed.py, with diffusers 0.33.1) at a
tiny config with random weights, run on the CPU as demo_gradio.py runs it:
B = 1 (context cropped to image tokens + n_valid, no mask), the clean-latent
1x / 2x / 4x streams, high_quality_fp32_output_for_inference = True, no
TeaCache, and the plain torch SDPA attention (sage / flash / xformers forced
off, as when none is installed).

The tiny shapes exercise every path the released shapes take, plus the
replicate padding the 640 buckets need (latent 10 x 12: the 2x stream pads
10 -> 12 rows, the 4x stream 10 -> 16 and 12 -> 16; 3 and 6 clean frames pad
to 4 and 8 in time).

Writes tests/data/framepack_dit/:
  transformer/    config.json + the weights as sharded bf16 safetensors with
                  an index (the layout of lllyasviel/FramePackI2V_HY); every
                  weight is bf16, so the fp32 and bf16 runs share them.
  goldens.safetensors  inputs and, for the fp32 and bf16 runs, the packed
                  tokens, RoPE tables, temb, refined text, image projection,
                  each block's outputs, norm_out and the final output (f32).
  full_keys.json  the released config's state-dict keys and shapes
                  (meta-device init, no weights).
  manifest.json   config, indices, versions, the reference's own bf16-vs-fp32
                  gaps.
  kijai_fp8/      (--kijai-fp8) the tiny DiT as one file in the layout of
                  Kijai's FramePackI2V_HY_fp8_e4m3fn.safetensors: diffusers
                  key names, no config.json, every tensor whose name holds
                  none of "norm", "bias", "time_in", "vector_in",
                  "guidance_in", "txt_in", "img_in" (the params_to_keep of
                  the conversion kijai/ComfyUI-FramePackWrapper uses, as
                  posted in its PR #13; the last five are HunyuanVideo names
                  no diffusers key holds) cast with `.to(float8_e4m3fn)`, no
                  scale (Kijai's loader multiplies by scale 1): the patch
                  embedder convs, the embedders, the refiner, the image
                  projection, the block linears and proj_out; norms,
                  modulation linears (norm1.linear, norm.linear,
                  norm_out.linear) and biases stay bf16. The single blocks'
                  linears instead carry a per-tensor `<layer>.scale_weight`
                  (F32 [1], amax / 448: the ComfyUI "scaled fp8" convention)
                  so both forms are tested.

Usage: /work/venv-fp/bin/python tools/framepack_dit_goldens.py [FRAMEPACK_DIR]
       /work/venv-fp/bin/python tools/framepack_dit_goldens.py --kijai-fp8
The second form only writes kijai_fp8/ (below) from the existing transformer/.
FRAMEPACK_DIR (default /work/scratch/fp-dit) holds diffusers_helper/ exported
from FramePack @ 97fe5db:
  git --git-dir=<FramePack.git> archive 97fe5db diffusers_helper | tar x -C FRAMEPACK_DIR
"""
import json
import math
import sys
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/data/framepack_dit"
_ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
FP_DIR = Path(_ARGS[0] if _ARGS else "/work/scratch/fp-dit")


def install_stubs():
    import importlib.machinery
    """dit_common imports accelerate only to patch one function, and the model
    uses einops.rearrange for its final unpatchify: stand-ins when absent."""
    try:
        import accelerate.accelerator  # noqa: F401
    except ImportError:
        acc = types.ModuleType("accelerate")
        acc.accelerator = types.ModuleType("accelerate.accelerator")
        # diffusers / transformers call find_spec("accelerate") and then look
        # its version up: with a spec and no installed version they treat it
        # as absent, as they should.
        acc.__spec__ = importlib.machinery.ModuleSpec("accelerate", None)
        sys.modules["accelerate"] = acc
        sys.modules["accelerate.accelerator"] = acc.accelerator
    # diffusers_helper/utils.py (imported for zero_module) loads image and
    # video libraries the DiT never calls.
    for name in ("cv2", "torchvision", "PIL", "PIL.Image"):
        try:
            __import__(name)
        except ImportError:
            mod = types.ModuleType(name)
            mod.__spec__ = importlib.machinery.ModuleSpec(name, None)  # absent to find_spec users
            mod.Image = None
            sys.modules[name] = mod
    try:
        import einops  # noqa: F401
    except ImportError:
        ein = types.ModuleType("einops")

        def rearrange(x, pattern, **k):
            # hunyuan_video_packed.py:1026, the only rearrange on the inference path
            assert pattern == "b (t h w) (c pt ph pw) -> b c (t pt) (h ph) (w pw)", pattern
            t, h, w, pt, ph, pw = k["t"], k["h"], k["w"], k["pt"], k["ph"], k["pw"]
            b, _, ch = x.shape
            c = ch // (pt * ph * pw)
            x = x.reshape(b, t, h, w, c, pt, ph, pw).permute(0, 4, 1, 5, 2, 6, 3, 7)
            return x.reshape(b, c, t * pt, h * ph, w * pw)

        def repeat(*a, **k):
            raise NotImplementedError("einops.repeat stub (only used to initialise weights)")

        ein.rearrange, ein.repeat = rearrange, repeat
        sys.modules["einops"] = ein


install_stubs()
sys.path.insert(0, str(FP_DIR))
import diffusers_helper.models.hunyuan_video_packed as hvp  # noqa: E402
from diffusers_helper.models.hunyuan_video_packed import HunyuanVideoTransformer3DModelPacked  # noqa: E402

# The plain SDPA path of attn_varlen_func (hunyuan_video_packed.py:108-122).
hvp.sageattn = hvp.flash_attn_func = hvp.xformers_attn_func = None

TINY = dict(in_channels=16, out_channels=16, num_attention_heads=2, attention_head_dim=16, num_layers=2,
            num_single_layers=2, num_refiner_layers=1, mlp_ratio=4.0, patch_size=2, patch_size_t=1,
            qk_norm="rms_norm", guidance_embeds=True, text_embed_dim=24, pooled_projection_dim=20,
            rope_theta=256.0, rope_axes_dim=(4, 6, 6), has_image_proj=True, image_proj_dim=28,
            has_clean_x_embedder=True)
# lllyasviel/FramePackI2V_HY config.json (spec section 0).
FULL = dict(in_channels=16, out_channels=16, num_attention_heads=24, attention_head_dim=128, num_layers=20,
            num_single_layers=40, num_refiner_layers=2, mlp_ratio=4.0, patch_size=2, patch_size_t=1,
            qk_norm="rms_norm", guidance_embeds=True, text_embed_dim=4096, pooled_projection_dim=768,
            rope_theta=256.0, rope_axes_dim=(16, 56, 56), has_image_proj=True, image_proj_dim=1152,
            has_clean_x_embedder=True)

# Latent grid and the section layout of demo_gradio.py:181-212 with
# latent_window_size 3 and padding 1 (p = 3), 3 clean 2x frames and 6 clean
# 4x frames (the demo has 2 and 16; odd counts exercise the temporal padding).
T, H, W = 3, 10, 12
P = 3
LATENT_IDX = [1 + P + i for i in range(T)]         # 4 5 6
CLEAN_IDX = [0, P + T + 1]                         # 0 7
IDX_2X = [P + T + 2 + i for i in range(3)]         # 8 9 10
IDX_4X = [P + T + 5 + i for i in range(6)]         # 11 .. 16
TEXT_PAD, N_VALID, IMG_TOKENS = 12, 7, 9
TIMESTEP = 996.0   # bf16(0.9941 * 1000): the second step of 25 (spec 1.5)
GUIDANCE = 9984.0  # bf16(10 * 1000)


def randomise(model):
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 and ("norm" in name):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif p.ndim == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(fan_in))
            p.copy_(p.to(torch.bfloat16).float())  # bf16-exact: the checkpoint is bf16


def inputs():
    g = torch.Generator().manual_seed(1)
    r = lambda *s: torch.randn(s, generator=g)  # noqa: E731
    ctx = r(1, TEXT_PAD, TINY["text_embed_dim"])
    ctx[:, N_VALID:] = 0  # crop_or_pad_yield_mask zero-pads (utils.py:477-489)
    mask = torch.zeros(1, TEXT_PAD, dtype=torch.bool)
    mask[:, :N_VALID] = True
    return bf16_exact(dict(
        hidden_states=r(1, 16, T, H, W),
        timestep=torch.tensor([TIMESTEP]),
        encoder_hidden_states=ctx,
        encoder_attention_mask=mask,
        pooled_projections=r(1, TINY["pooled_projection_dim"]),
        guidance=torch.tensor([GUIDANCE]),
        latent_indices=torch.tensor([LATENT_IDX]),
        clean_latents=r(1, 16, 2, H, W),
        clean_latent_indices=torch.tensor([CLEAN_IDX]),
        clean_latents_2x=r(1, 16, 3, H, W),
        clean_latent_2x_indices=torch.tensor([IDX_2X]),
        clean_latents_4x=r(1, 16, 6, H, W),
        clean_latent_4x_indices=torch.tensor([IDX_4X]),
        image_embeddings=r(1, IMG_TOKENS, TINY["image_proj_dim"]),
    ))


def bf16_exact(d):
    """Inputs rounded to bf16 values (stored as bf16: the fp32 run reads the
    same values, the fixture stays small)."""
    return {k: (v.bfloat16().float() if v.is_floating_point() else v) for k, v in d.items()}


# A second case laid out as demo_gradio.py's sections (latent_window_size
# 9, padding 1: p = 9): 9 noisy frames, 2 / 2 / 16 clean frames, a
# 8 x 10 latent (the 4x stream pads 8 x 10 -> 8 x 16) and every text token
# valid. Only the packing and the output are kept.
DEMO_T, DEMO_H, DEMO_W, DEMO_P = 9, 8, 10, 9


def demo_inputs():
    g = torch.Generator().manual_seed(2)
    r = lambda *s: torch.randn(s, generator=g)  # noqa: E731
    p, t = DEMO_P, DEMO_T
    idx = list(range(1 + p + t + 1 + 2 + 16))  # demo_gradio.py:196-198
    latent, post = idx[1 + p:1 + p + t], idx[1 + p + t]
    i2x, i4x = idx[2 + p + t:4 + p + t], idx[4 + p + t:]
    return bf16_exact(dict(
        hidden_states=r(1, 16, t, DEMO_H, DEMO_W),
        timestep=torch.tensor([226.0]),  # bf16(0.2258 * 1000): the last step of 25
        encoder_hidden_states=r(1, 5, TINY["text_embed_dim"]),
        encoder_attention_mask=torch.ones(1, 5, dtype=torch.bool),
        pooled_projections=r(1, TINY["pooled_projection_dim"]),
        guidance=torch.tensor([GUIDANCE]),
        latent_indices=torch.tensor([latent]),
        clean_latents=r(1, 16, 2, DEMO_H, DEMO_W),
        clean_latent_indices=torch.tensor([[0, post]]),
        clean_latents_2x=r(1, 16, 2, DEMO_H, DEMO_W),
        clean_latent_2x_indices=torch.tensor([i2x]),
        clean_latents_4x=r(1, 16, 16, DEMO_H, DEMO_W),
        clean_latent_4x_indices=torch.tensor([i4x]),
        image_embeddings=r(1, IMG_TOKENS, TINY["image_proj_dim"]),
    ))


# TeaCache (hunyuan_video_packed.py:950-995) over one 5-step cycle of the
# first case: latents x_k = bf16(x + 0.03 k d), timesteps of a schedule.
# With rel_l1_thresh 0.15 calls 1 and 3 reuse the residual.
TEA_STEPS, TEA_THRESH, TEA_EPS = 5, 0.15, 0.03
TEA_TIMESTEPS = [1000.0, 996.0, 988.0, 981.0, 973.0]


def tea_latents(inp):
    g = torch.Generator().manual_seed(3)
    d = torch.randn(inp["hidden_states"].shape, generator=g)
    return [(inp["hidden_states"] + TEA_EPS * k * d).bfloat16().float() for k in range(TEA_STEPS)]


def run_teacache(model, inp, dtype):
    model.initialize_teacache(enable_teacache=True, num_steps=TEA_STEPS, rel_l1_thresh=TEA_THRESH)
    calls = []
    hook = model.transformer_blocks[0].register_forward_pre_hook(lambda *a: calls.append(1))
    outs, calc, acc = [], [], []
    for x, t in zip(tea_latents(inp), TEA_TIMESTEPS):
        a = dict(inp, hidden_states=x, timestep=torch.tensor([t]))
        a = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in a.items()}
        n = len(calls)
        with torch.no_grad(), torch.backends.mkldnn.flags(enabled=dtype == torch.float32):
            outs.append(model(**a, return_dict=False)[0][0].clone())
        calc.append(int(len(calls) > n))
        acc.append(float(model.accumulated_rel_l1_distance))
    hook.remove()
    model.initialize_teacache(enable_teacache=False)
    return torch.stack(outs), torch.tensor(calc, dtype=torch.int32), torch.tensor(acc, dtype=torch.float32)  # float64 values, fp32 stored


def run(model, inp, dtype):
    """One forward as k_diffusion_hunyuan.py / wrapper.py call it (every
    float input in the run dtype), with every intermediate captured."""
    cap = {}
    f = lambda t: t[0].float().clone()  # noqa: E731
    hooks = []

    orig = model.process_input_hidden_states

    def packed(*a, **k):
        hs, rope = orig(*a, **k)
        cap["packed"] = f(hs)
        cap["rope"] = f(rope)  # [L, 2 * head_dim]: cos | sin, pairs repeated
        return hs, rope
    model.process_input_hidden_states = packed

    def hook(name, fn):
        return lambda mod, i, o: cap.__setitem__(name, fn(mod, i, o))
    hooks.append(model.time_text_embed.register_forward_hook(hook("temb", lambda m, i, o: f(o))))
    hooks.append(model.context_embedder.register_forward_hook(hook("refined", lambda m, i, o: f(o)[:N_VALID])))
    hooks.append(model.context_embedder.time_text_embed.register_forward_hook(
        hook("refiner_temb", lambda m, i, o: f(o))))
    hooks.append(model.context_embedder.proj_in.register_forward_hook(
        hook("refiner_proj_in", lambda m, i, o: f(o)[:N_VALID])))
    hooks.append(model.image_projection.register_forward_hook(hook("image_proj", lambda m, i, o: f(o))))
    for n, blk in enumerate(model.transformer_blocks):
        hooks.append(blk.register_forward_hook(hook(f"double{n}.x", lambda m, i, o: f(o[0]))))
        hooks.append(blk.register_forward_hook(hook(f"double{n}.ctx", lambda m, i, o: f(o[1]))))
    blk = model.transformer_blocks[0]
    hooks.append(blk.norm1.register_forward_hook(hook("double0.norm1", lambda m, i, o: f(o[0]))))
    hooks.append(blk.attn.register_forward_hook(hook("double0.attn_x", lambda m, i, o: f(o[0]))))
    hooks.append(blk.attn.register_forward_hook(hook("double0.attn_ctx", lambda m, i, o: f(o[1]))))
    hooks.append(blk.ff.register_forward_hook(hook("double0.ff", lambda m, i, o: f(o))))
    for n, blk in enumerate(model.single_transformer_blocks):
        hooks.append(blk.register_forward_hook(hook(f"single{n}.x", lambda m, i, o: f(o[0]))))
        hooks.append(blk.register_forward_hook(hook(f"single{n}.ctx", lambda m, i, o: f(o[1]))))
    blk = model.single_transformer_blocks[0]
    hooks.append(blk.attn.register_forward_hook(hook("single0.attn_x", lambda m, i, o: f(o[0]))))
    hooks.append(blk.proj_mlp.register_forward_hook(hook("single0.mlp", lambda m, i, o: f(o))))
    hooks.append(model.norm_out.register_forward_hook(hook("norm_out", lambda m, i, o: f(o))))

    args = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in inp.items()}
    # oneDNN's bf16 Conv3d (torch 2.15 CPU) returns garbage for the (2, 4, 4)
    # stride-(2, 4, 4) kernel of proj_2x on some shapes (rel. error ~1.2 vs
    # fp32 on a 16 x 3 x 10 x 12 input; (1, 2, 2) and (4, 8, 8) are fine). The
    # reference runs on CUDA; torch's native CPU conv is the stand-in here.
    with torch.no_grad(), torch.backends.mkldnn.flags(enabled=dtype == torch.float32):
        out = model(**args, return_dict=False)[0]
    for h in hooks:
        h.remove()
    model.process_input_hidden_states = orig
    assert out.dtype == torch.float32  # fp32 proj_out
    cap["output"] = out[0].clone()
    return cap


def main():
    torch.manual_seed(0)
    model = HunyuanVideoTransformer3DModelPacked(**TINY).eval()
    randomise(model)
    tr = OUT / "transformer"
    tr.mkdir(parents=True, exist_ok=True)
    for f in tr.glob("*"):
        f.unlink()
    model.to(torch.bfloat16).save_pretrained(tr, max_shard_size="120KB", safe_serialization=True)

    inp, demo = inputs(), demo_inputs()
    tensors = {}
    for prefix, case in (("", inp), ("demo.", demo)):
        for k, v in case.items():
            if k == "encoder_attention_mask" or not v.is_floating_point():
                tensors[prefix + "input." + k] = v[0].to(torch.int32).contiguous()
            elif v.numel() == 1:
                tensors[prefix + "input." + k] = v[0].float().contiguous()
            else:
                tensors[prefix + "input." + k] = v[0].bfloat16().contiguous()
    tensors["tea.input.hidden_states"] = torch.stack([x[0] for x in tea_latents(inp)]).bfloat16()
    tensors["tea.input.timesteps"] = torch.tensor(TEA_TIMESTEPS)
    caps = {}
    for tag, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        m = HunyuanVideoTransformer3DModelPacked.from_pretrained(tr, torch_dtype=dtype).eval()
        m.high_quality_fp32_output_for_inference = True  # demo_gradio.py:70
        m.initialize_teacache(enable_teacache=False)
        caps[tag] = run(m, inp, dtype)
        for k, v in caps[tag].items():
            if tag == "bf16" and k == "rope":  # fp32 tables in both runs
                continue
            if tag == "bf16" and torch.equal(v.bfloat16().float(), v):
                v = v.bfloat16()  # a bf16 tensor of the reference: stored losslessly
            tensors[f"{tag}.{k}"] = v.contiguous()
        outs, calc, acc = run_teacache(m, inp, dtype)
        tensors[f"tea.{tag}.output"], tensors[f"tea.{tag}.calc"] = outs, calc
        tensors[f"tea.{tag}.accumulated"] = acc
        print(f"  teacache {tag}: calc {calc.tolist()} accumulated {[round(a, 4) for a in acc.tolist()]}")
        d = run(m, demo, dtype)
        for k in ("packed", "rope", "output") if tag == "fp32" else ("output",):
            tensors[f"demo.{tag}.{k}"] = d[k].contiguous()
    assert torch.equal(caps["bf16"]["rope"], caps["fp32"]["rope"])
    # The released RoPE (axes 16 / 56 / 56, theta 256) on two thin grids that
    # reach the positions of a 640 bucket: frame 37 x 1 x 48 and frame 0 x
    # 48 x 1 (errata 4: w needs torch's double pow to match).
    rope = hvp.HunyuanVideoRotaryPosEmbed(FULL["rope_axes_dim"], FULL["rope_theta"])
    for name, (frames, hh, ww) in {"rope_full_x": ([37], 1, 48), "rope_full_y": ([0], 48, 1)}.items():
        tensors[name] = rope(frame_indices=torch.tensor([frames]), height=hh, width=ww,
                             device="cpu")[0].flatten(1).transpose(0, 1)[:, ::2].contiguous()  # [L, 128]
    from safetensors.torch import save_file
    save_file(tensors, str(OUT / "goldens.safetensors"))

    gaps = {k: float((caps["bf16"][k] - caps["fp32"][k]).norm() / caps["fp32"][k].norm()) for k in caps["fp32"]}

    with torch.device("meta"):
        full = HunyuanVideoTransformer3DModelPacked(**FULL)
    keys = [[k, list(v.shape)] for k, v in full.state_dict().items()]
    (OUT / "full_keys.json").write_text(json.dumps({"config": {k: list(v) if isinstance(v, tuple) else v
                                                               for k, v in FULL.items()},
                                                    "dtype": "BF16", "keys": keys}) + "\n")
    n_params = sum(math.prod(s) for _, s in keys)

    (OUT / "manifest.json").write_text(json.dumps({
        "reference": "lllyasviel/FramePack@97fe5db diffusers_helper/models/hunyuan_video_packed.py",
        "config": TINY, "latent": [16, T, H, W], "latent_indices": LATENT_IDX, "clean_latent_indices": CLEAN_IDX,
        "clean_latent_2x_indices": IDX_2X, "clean_latent_4x_indices": IDX_4X, "text_tokens_padded": TEXT_PAD,
        "n_valid": N_VALID, "image_tokens": IMG_TOKENS,
        "teacache": {"num_steps": TEA_STEPS, "rel_l1_thresh": TEA_THRESH, "eps": TEA_EPS,
                     "timesteps": TEA_TIMESTEPS}, "timestep": TIMESTEP, "guidance": GUIDANCE,
        "attention": "torch SDPA (sage/flash/xformers off)",
        "bf16_run": "torch.backends.mkldnn disabled (oneDNN bf16 Conv3d (2,4,4) bug on CPU)",
        "high_quality_fp32_output_for_inference": True, "bf16_vs_fp32_reference_rel_l2": gaps,
        "full_size_params": n_params, "torch": torch.__version__,
        "diffusers": __import__("diffusers").__version__}, indent=1) + "\n")
    for k, v in gaps.items():
        print(f"  {k:18s} ref bf16 vs fp32 {v:.3g}")
    print(f"full-size params {n_params / 1e9:.3f} B, {len(keys)} keys")
    print(f"{OUT}: {sum(f.stat().st_size for f in OUT.rglob('*') if f.is_file()) / 1e6:.2f} MB")


def kijai_fp8():
    import re
    from safetensors.torch import load_file, save_file
    sd = {}
    for f in sorted((OUT / "transformer").glob("*.safetensors")):
        sd.update(load_file(str(f)))
    keep = ("norm", "bias", "time_in", "vector_in", "guidance_in", "txt_in", "img_in")
    single_linear = re.compile(r"^single_transformer_blocks\.\d+\.[a-z_.0-9]+\.weight$")
    out = {}
    for name, t in sorted(sd.items()):
        if any(k in name for k in keep):
            out[name] = t
        elif single_linear.match(name):
            scale = t.float().abs().amax() / 448.0
            out[name] = (t.float() / scale).to(torch.float8_e4m3fn)
            out[name[: -len("weight")] + "scale_weight"] = scale.reshape(1)
        else:
            out[name] = t.to(torch.float8_e4m3fn)
    d = OUT / "kijai_fp8"
    d.mkdir(parents=True, exist_ok=True)
    save_file(out, str(d / "FramePackI2V_HY_tiny_fp8_e4m3fn.safetensors"))
    n8 = sum(1 for t in out.values() if t.dtype == torch.float8_e4m3fn)
    print(f"{d}: {n8} F8_E4M3 weights of {len(out)} tensors")


if __name__ == "__main__":
    if "--kijai-fp8" in sys.argv[1:]:
        kijai_fp8()
    else:
        main()
