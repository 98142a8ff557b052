#!/usr/bin/env python3
"""Goldens for flick's HunyuanVideo VAE (models/hunyuan_vae): diffusers 0.33.1
AutoencoderKLHunyuanVideo (src/diffusers/models/autoencoders/
autoencoder_kl_hunyuan_video.py, "AKHV" below) at a tiny config, CPU fp32,
random weights, run the ways FramePack runs it (diffusers_helper/hunyuan.py
vae_encode / vae_decode):

  encode   moments = quant_conv(encoder(x)); FramePack scales the posterior
           (flick: its mean) by scaling_factor 0.476986
  decode   vae.decode(z): always the temporal tiled decode once T_lat > 4
           (AKHV:835, _temporal_tiled_decode :1038-1072), per temporal tile
           the spatially tiled decode in low-VRAM mode (enable_tiling(),
           tiled_decode :949-1005); tiled_encode (:899-947) for the encode.

The tiny config has 4 levels like the real one (block_out_channels 4, 8, 8, 8,
GroupNorm 2 groups, latent 4): the compression rules of AKHV:446-455 / :574-580
give 8x space / 4x time only with at least 3 levels (2 levels give 4x / 2x,
which the tiling arithmetic, written in the configured ratios, does not fit).
The default temporal tiles (16 frames / stride 12 = 5 latents / stride 3) are
exercised with 9 latents (3 tiles, the last one short); spatial tiling uses
tiny tiles (32 px / stride 24 px = 4 latents / stride 3) so a 5x5 latent is
split into 2x2 tiles.

Writes tests/data/hunyuan_vae/: vae/config.json and
vae/diffusion_pytorch_model.safetensors (as the hunyuanvideo-community/
HunyuanVideo download), goldens.safetensors (inputs, per-block
intermediates, outputs; fp32, and the reference's bf16 run of the decode and
encode outputs), full_layout.json (every key and shape of the full-size
default config, from meta-device init) and manifest.json.

Usage: python tools/hunyuan_vae_goldens.py <dir with diffusers 0.33.1>
       (torch, diffusers==0.33.1, safetensors; /work/venv-fp has them)
"""
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/data/hunyuan_vae"

TINY = dict(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(4, 8, 8, 8),
            layers_per_block=2, norm_num_groups=2, scaling_factor=0.476986,
            spatial_compression_ratio=8, temporal_compression_ratio=4, mid_block_add_attention=True)


def main():
    if len(sys.argv) > 1:
        sys.path.insert(0, sys.argv[1])
    import diffusers
    from diffusers import AutoencoderKLHunyuanVideo
    from safetensors.torch import save_file
    assert diffusers.__version__ == "0.33.1", diffusers.__version__
    torch.set_num_threads(1)

    # Full-size layout: every key and shape of the default config (= the
    # released vae/config.json) without allocating it.
    with torch.device("meta"):
        full = AutoencoderKLHunyuanVideo()
    layout = {k: list(v.shape) for k, v in full.state_dict().items()}
    n_params = {p: sum(torch.Size(s).numel() for k, s in layout.items() if k.startswith(p))
                for p in ("encoder.", "decoder.", "quant_conv.", "post_quant_conv.")}
    OUT.mkdir(parents=True, exist_ok=True)
    cfg = {k: v for k, v in dict(full.config).items() if not k.startswith("_")}
    (OUT / "full_layout.json").write_text(
        '{"config": ' + json.dumps(cfg) + ',\n"params": ' + json.dumps(n_params) + ',\n"tensors": {\n' +
        ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in layout.items()) + "}}\n")

    torch.manual_seed(0)
    vae = AutoencoderKLHunyuanVideo(**TINY).eval()
    with torch.no_grad():  # non-trivial norms, biases
        for name, p in vae.named_parameters():
            if "norm" in name:
                p.copy_((1 + 0.2 * torch.randn_like(p)) if name.endswith("weight") else 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn_like(p))
    vd = OUT / "vae"
    vd.mkdir(parents=True, exist_ok=True)
    for f in vd.glob("*"):
        f.unlink()
    vae.save_pretrained(vd, safe_serialization=True)

    g = {}
    gen = torch.Generator().manual_seed(1)

    def rand(*shape, scale=1.0):
        return (torch.rand(*shape, generator=gen) * 2 - 1) * scale

    def hooked(model, names, run):
        taps = {}
        hs = []
        for tag, mod in names:
            hs.append(mod.register_forward_hook(
                lambda m, i, o, tag=tag: taps.__setitem__(tag, o.detach().float().clone())))
        with torch.no_grad():
            out = run()
        for h in hs:
            h.remove()
        return out, taps

    enc, dec = vae.encoder, vae.decoder
    # --- encode, no tiling: a 5-frame clip (temporal downsampling and the
    # frame-causal mid attention over 2 latent frames) and one image (FramePack).
    x = rand(1, 3, 5, 24, 32)
    names = [("conv_in", enc.conv_in), ("down0.res0", enc.down_blocks[0].resnets[0])]
    names += [(f"down{i}", b) for i, b in enumerate(enc.down_blocks)]
    names += [("mid.res0", enc.mid_block.resnets[0]), ("mid.attn", enc.mid_block.attentions[0]),
              ("mid", enc.mid_block), ("conv_out", enc.conv_out)]
    post, taps = hooked(vae, names, lambda: vae.encode(x).latent_dist)
    g["enc.x"] = x
    for k, v in taps.items():
        g[f"enc.{k}"] = v
    g["enc.moments"] = post.parameters.float()
    g["enc.mean"] = post.mean.float()
    x1 = rand(1, 3, 1, 32, 48)
    with torch.no_grad():
        p1 = vae.encode(x1).latent_dist
    g["img.x"] = x1
    g["img.mean"] = p1.mean.float()
    g["img.latent"] = (p1.mean * vae.config.scaling_factor).float()  # flick's start latent

    # --- decode, one pass (T_lat 3 <= 4: no tiling).
    z = rand(1, 4, 3, 2, 3, scale=2.0)
    names = [("post_quant_conv", vae.post_quant_conv), ("conv_in", dec.conv_in), ("mid", dec.mid_block),
             ("up0.res0", dec.up_blocks[0].resnets[0]), ("up0.upsample", dec.up_blocks[0].upsamplers[0])]
    names += [(f"up{i}", b) for i, b in enumerate(dec.up_blocks)]
    out, taps = hooked(vae, names, lambda: vae.decode(z).sample)
    g["dec.z"] = z
    for k, v in taps.items():
        g[f"dec.{k}"] = v
    g["dec.out"] = out

    # --- decode, temporally tiled (the default path): 9 latents -> tiles at 0, 3, 6.
    zt = rand(1, 4, 9, 2, 3, scale=2.0)
    with torch.no_grad():
        g["tdec.z"] = zt
        g["tdec.out"] = vae.decode(zt).sample
        assert g["tdec.out"].shape[2] == 33

    # --- FramePack's section lengths (spec 3.3): 19 latents -> 13 + 5 x 12 + 0
    # = 73 frames (the last tile z[18:19] decodes to one frame, dropped), and 7
    # latents -> 13 + 12 + 0 = 25. 1x1 latents keep them small.
    for n in (7, 19):
        zn = rand(1, 4, n, 1, 1, scale=2.0)
        with torch.no_grad():
            g[f"tdec{n}.z"] = zn
            g[f"tdec{n}.out"] = vae.decode(zn).sample
            assert g[f"tdec{n}.out"].shape[2] == 4 * (n - 1) + 1

    # --- low-VRAM mode: spatial tiles of 32 px at stride 24 px (4 / 3 latents).
    vae.enable_tiling(tile_sample_min_height=32, tile_sample_min_width=32,
                      tile_sample_stride_height=24, tile_sample_stride_width=24)
    zs = rand(1, 4, 2, 5, 5, scale=2.0)  # T_lat 2: tiled_decode directly
    zts = rand(1, 4, 5, 5, 5, scale=2.0)  # T_lat 5: temporal tiles, each spatially tiled
    xs = rand(1, 3, 1, 40, 48)  # tiled_encode (3 x 3 tiles... of 32 px at stride 24)
    with torch.no_grad():
        g["sdec.z"] = zs
        g["sdec.out"] = vae.decode(zs).sample
        g["tsdec.z"] = zts
        g["tsdec.out"] = vae.decode(zts).sample
        g["senc.x"] = xs
        g["senc.moments"] = vae.encode(xs).latent_dist.parameters.float()
    vae.disable_tiling()

    # --- the temporally tiled encode (above 16 frames: tiles of 17 frames at
    # stride 12, AKHV:1007-1036).
    xt = rand(1, 3, 21, 8, 8)
    with torch.no_grad():
        g["tenc.x"] = xt
        g["tenc.moments"] = vae.encode(xt).latent_dist.parameters.float()

    # --- the reference's reduced-precision run (bf16 weights and activations,
    # CPU kernels), for the bf16 tolerances.
    vb = AutoencoderKLHunyuanVideo.from_pretrained(vd, torch_dtype=torch.bfloat16).eval()
    with torch.no_grad():
        g["bf16.tdec.out"] = vb.decode(zt.bfloat16()).sample.float()
        g["bf16.enc.mean"] = vb.encode(x.bfloat16()).latent_dist.mean.float()
        g["bf16.img.mean"] = vb.encode(x1.bfloat16()).latent_dist.mean.float()

    g = {k: v.contiguous().clone() for k, v in g.items()}
    save_file(g, str(OUT / "goldens.safetensors"))
    (OUT / "manifest.json").write_text(json.dumps({
        "config": TINY, "torch": torch.__version__, "diffusers": diffusers.__version__,
        "tiles": {"default": [256, 256, 16, 192, 192, 12], "low_vram": [32, 32, 16, 24, 24, 12]},
        "shapes": {k: list(v.shape) for k, v in g.items()}}, indent=1) + "\n")
    print(f"{OUT}: {sum(f.stat().st_size for f in OUT.rglob('*') if f.is_file()) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
