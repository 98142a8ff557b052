#!/usr/bin/env python3
"""Independent checks of tests/data/mg2 (written by tools/mg2_goldens.py).

Re-derives, from the fixtures alone and with plain torch ops (no reference
code), the semantics the C++ port has to reproduce: sampler tables, x0 and
add_noise rounding, noise order, unpatchify layout, 3-D RoPE, action RoPE,
the action windows, the weight-free action RMSNorm, the KV-cache roll,
consistency between component and pipeline goldens. Most checks are bit
exact; the few that are not say why.

    /work/venv/bin/python tools/mg2_check_goldens.py [--data tests/data/mg2]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import load_file

BF16, F32, F64 = torch.bfloat16, torch.float32, torch.float64
FAILURES = []


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + (f"  ({detail})" if detail else ""))
    if not ok:
        FAILURES.append(name)


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def sampler(c):
    s = torch.linspace(1.0, 0.0, 1001)[:-1]
    sig = 5.0 * s / (1 + 4.0 * s)
    check("scheduler sigmas = shift formula over fp32 linspace", same(sig, c["scheduler.sigmas"]))
    check("scheduler timesteps = 1000 * sigmas", same(sig * 1000, c["scheduler.timesteps"]))
    for name, steps in (("universal_gta", [1000, 666, 333]), ("templerun", [1000, 750, 500, 250])):
        grid = torch.cat([c["scheduler.timesteps"], torch.zeros(1)])
        check(f"warped steps {name} = grid[1000 - steps]",
              same(grid[1000 - torch.tensor(steps)], c[f"sampler.{name}.t"]),
              f"t={c[f'sampler.{name}.t'].tolist()} sigma={c[f'sampler.{name}.sigma'].tolist()}")


def sinusoid(c):
    t = c["sinusoid.t"].to(F64)
    om = torch.pow(10000.0, -torch.arange(128, dtype=F64) / 128)
    ang = t[:, None] * om[None]
    ref = torch.cat([torch.cos(ang), torch.sin(ang)], 1)
    err = (ref - c["sinusoid.f64"]).abs().max().item()
    check("sinusoid = [cos(t w_j), sin(t w_j)], w_j = 10000^(-j/128), f64", err < 1e-12, f"max err {err:.1e}")


def rope_table(c, name, hd):
    cpx = hd // 2
    parts = [cpx - 2 * (cpx // 3), cpx // 3, cpx // 3]
    rows = c[f"rope.{name}.rows"].to(F64)
    cols = []
    for n in parts:
        d = 2 * n
        cols.append(rows[:, None] * (1.0 / torch.pow(10000.0, torch.arange(0, d, 2, dtype=F64) / d))[None])
    ang = torch.cat(cols, 1)
    err = max((torch.cos(ang) - c[f"rope.{name}.cos_f64"]).abs().max().item(),
              (torch.sin(ang) - c[f"rope.{name}.sin_f64"]).abs().max().item())
    check(f"3-D RoPE table {name}: pairs {parts}, w = 10000^(-2j/d) per axis, f64", err < 1e-12,
          f"max err {err:.1e}")


def action_rope(c):
    rows = c["action_rope.rows"].to(F32)
    f = 1.0 / torch.pow(torch.tensor(256.0), torch.arange(0, 8, 2).float() / 8)
    ang = rows[:, None] * f[None]
    cos = torch.cat([ang.cos().repeat_interleave(2, 1), torch.ones(len(rows), 56)], 1)
    sin = torch.cat([ang.sin().repeat_interleave(2, 1), torch.zeros(len(rows), 56)], 1)
    err = max((cos - c["action_rope.cos"]).abs().max().item(), (sin - c["action_rope.sin"]).abs().max().item())
    # fp32 cos/sin of angles up to 7499 rad: libm and the vectorised torch
    # kernel may differ by an ulp or two.
    check("action RoPE: dims 0-7 angle f*256^(-2i/8) interleaved, dims 8-63 identity, fp32", err < 1e-6,
          f"max err {err:.1e}")


def randn(c):
    for key in [k for k in c if k.startswith("randn.seed") and ".n" in k]:
        seed, n = int(key.split(".")[1][4:]), int(key.split(".n")[1])
        g = torch.Generator().manual_seed(seed)
        check(f"randn {key} reproducible", same(torch.randn(n, generator=g), c[key]))


def rope_apply_3d(x, c, start_frame, grid):
    """x [1, L, H, D] bf16 -> complex f64 product with the tiny table, bf16."""
    f, h, w = grid
    d = x.shape[-1]
    cpx = d // 2
    parts = [cpx - 2 * (cpx // 3), cpx // 3, cpx // 3]
    cos, sin = c["rope.tiny.cos_f64"], c["rope.tiny.sin_f64"]   # rows 0..15 = positions
    tab = torch.complex(cos, sin)
    t0, t1, t2 = tab[:, :parts[0]], tab[:, parts[0]:parts[0] + parts[1]], tab[:, parts[0] + parts[1]:]
    fr = torch.cat([t0[start_frame:start_frame + f].view(f, 1, 1, -1).expand(f, h, w, -1),
                    t1[:h].view(1, h, 1, -1).expand(f, h, w, -1),
                    t2[:w].view(1, 1, w, -1).expand(f, h, w, -1)], -1).reshape(f * h * w, 1, -1)
    xc = torch.view_as_complex(x[0].to(F64).reshape(f * h * w, x.shape[2], -1, 2))
    return torch.view_as_real(xc * fr).flatten(2)[None].to(x.dtype)


def action_rope_apply(x, c, start):
    """x [N, T, H, 64]: x*cos + rot(x)*sin in fp32 at positions start..start+T."""
    t = x.shape[1]
    cos = c["action_rope.cos"][start:start + t].view(1, t, 1, 64)
    sin = c["action_rope.sin"][start:start + t].view(1, t, 1, 64)
    xf = x.float()
    re, im = xf.reshape(*xf.shape[:-1], -1, 2).unbind(-1)
    rot = torch.stack([-im, re], -1).flatten(3)
    return (xf * cos + rot * sin).to(x.dtype)


def bf16_rms_noweight(x, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)


def pipeline(mode, p, c, m, vae_enc, clip):
    tiny = m["tiny"]
    h, w = tiny["latent"]
    S = tiny["frame_tokens"]
    n_lat = m["detail_calls"][mode]["num_latents"]
    steps = {"templerun": "templerun"}.get(mode, "universal_gta")
    tt, sg = c[f"sampler.{steps}.t"], c[f"sampler.{steps}.sigma"]
    nsteps = len(tt)
    pre = f"[{mode}] "

    # Noise: fp32 draws of one CPU generator, in sampler order.
    g = torch.Generator().manual_seed(m["noise"]["seed"])
    ok = same(torch.randn([1, 16, n_lat, h, w], generator=g), p["noise.initial"])
    for b in range(n_lat // 3):
        for k in range(nsteps - 1):
            ok &= same(torch.randn([3, 16, h, w], generator=g), p[f"noise.b{b}.s{k}"])
    check(pre + "noise = initial randn then one randn([3,16,h,w]) per re-noise, one generator", ok)

    check(pre + "first DiT call gets t = warped t0 per frame, fp32 [1,3]",
          same(p["ref.t_first_call"], torch.full((1, 3), tt[0].item())))

    for prec, dt in (("ref", BF16), ("fp32", F32)):
        ok_x0 = ok_add = True
        for b in range(n_lat // 3):
            x = p["noise.initial"][:, :, 3 * b:3 * b + 3].to(dt)
            for k in range(nsteps):
                flow, x0 = p[f"{prec}.b{b}.s{k}.flow"], p[f"{prec}.b{b}.s{k}.x0"]
                exp = (x.to(F64) - sg[k].to(F64) * flow.to(F64)).to(dt)
                ok_x0 &= same(exp, x0)
                if k + 1 < nsteps:
                    n = p[f"noise.b{b}.s{k}"].to(dt)                              # [F, C, h, w]
                    x0f = x0[0].permute(1, 0, 2, 3)                                 # (b f) c h w
                    s1 = sg[k + 1]
                    nxt = ((1 - s1) * x0f.float() + s1 * n.float()).to(dt)
                    nxt = nxt.permute(1, 0, 2, 3)[None]
                    if prec == "ref":
                        ok_add &= same(nxt, p[f"{prec}.b{b}.s{k + 1}.x"])
                    x = nxt
        check(pre + f"{prec}: x0 = cast(f64(x) - f64(sigma) * f64(flow)) for every step", ok_x0)
        if prec == "ref":
            check(pre + "ref: next x = bf16(fp32(1-s')*fp32(x0) + fp32(s')*fp32(noise))", ok_add)

    # Conditioning equals the component goldens (causal VAE: the first 6
    # latents of a 9-latent encode equal a 6-latent encode).
    for prec in ("ref", "fp32"):
        n6 = min(6, n_lat)
        check(pre + f"{prec}: img_cond[:, :, :{n6}] == vae_encoder latents",
              same(p[f"{prec}.img_cond"][:, :, :n6], vae_enc[f"{prec}.latents"][:, :, :n6]))
        check(pre + f"{prec}: visual_context == clip golden", same(p[f"{prec}.visual_context"],
                                                                  clip[f"{prec}.visual_context"]))

    # Per-call internals of the first call (ref, bf16).
    a = "ref.call.b0.s0."
    grid = (3, h // 2, w // 2)
    ho = p[a + "head_out"]                                  # [1, F, S, 64]
    fl = p[a + "flow"]
    F_, hh, ww = grid
    exp = ho.view(1, F_, hh, ww, 1, 2, 2, 16)
    exp = torch.einsum("bfhwpqrc->bcfphqwr", exp).reshape(1, 16, F_, h, w)
    check(pre + "unpatchify: flow[c, f, 2i+q, 2j+r] = head_out[f, i*W+j, q*32 + r*16 + c]", same(exp, fl))
    check(pre + "call flow == pipeline step flow", same(fl, p["ref.b0.s0.flow"]))

    q = p[a + "blk0.sa_q"]
    n_heads = m["tiny"]["dit"]["num_heads"]
    hd = q.shape[-1] // n_heads
    qr = rope_apply_3d(q.view(1, -1, n_heads, hd), c, 0, grid)
    check(pre + "3-D RoPE on q (f64 complex product, frame-major tokens f*S + i*W + j)",
          same(qr, p[a + "blk0.sa_q_rope"]))
    check(pre + "cache window of first call = this call's roped k",
          same(p[a + "blk0.sa_kwin"], p[a + "blk0.sa_k_rope"]))

    # Action module, block 0.
    act = a + "blk0.act."
    kb = p["inputs.keyboard"].to(BF16)[:, :1 + 4 * 2]
    pad = torch.cat([kb[:, :1].expand(-1, 12, -1), kb], 1)
    check(pre + "keyboard embed input = raw track, front-padded with 12 copies of frame 0",
          same(p[act + "kb_raw"], pad))
    e = p[act + "kb_embed"]
    win = torch.stack([e[:, 4 * f:4 * f + 12] for f in range(3)], 1).reshape(1, 3, -1)
    check(pre + "keyboard window of latent f = embed(raw[4f-12 .. 4f-1]) flattened time-major",
          same(win, p[act + "kb_window"]))
    qn = p[act + "kb_q_norm"]
    rms = qn.float().pow(2).mean(-1).sqrt()
    check(pre + "action RMSNorm ignores its stored weight (unit RMS per 64-dim head)",
          (rms - 1).abs().max().item() < 0.02, f"max |rms-1| {(rms - 1).abs().max().item():.3f}")
    ac = m["tiny"]["action"]
    qs = qn.view(1, 3, S, ac["heads_num"], 64).transpose(1, 2).reshape(S, 3, ac["heads_num"], 64)
    check(pre + "keyboard q RoPE at absolute latent positions, fp32 math, bf16 out",
          same(action_rope_apply(qs, c, 0), p[act + "kb_q_rope"]))
    if mode != "templerun":
        mi = p[act + "mouse_in"]                            # [S, 3, dim + 24]
        x = p[a + "blk0.x_after_ca"].view(3, S, -1).transpose(0, 1)
        ms = p["inputs.mouse"].to(BF16)[0, :1 + 4 * 2]
        mp = torch.cat([ms[:1].expand(12, -1), ms], 0)
        mw = torch.stack([mp[4 * f:4 * f + 12].reshape(-1) for f in range(3)], 0)
        check(pre + "mouse MLP input = [x token (dim), mouse raw[4f-12 .. 4f-1] time-major (24)]",
              same(mi, torch.cat([x, mw[None].expand(S, -1, -1)], -1)))
        check(pre + "mouse q RoPE", same(action_rope_apply(p[act + "mouse_q_norm"], c, 0),
                                         p[act + "mouse_q_rope"]))
        x1 = p[a + "blk0.x_after_ca"] + p[act + "mouse_proj"]
        check(pre + "x1 = x + proj_mouse(attn) feeds the keyboard query", same(x1, p[act + "kb_q_in"]))
        check(pre + "block output after action = x1 + proj_keyboard(attn)",
              same(x1 + p[act + "kb_proj"], p[a + "blk0.x_after_action"]))
    else:
        check(pre + "templerun: keyboard query reads x directly",
              same(p[a + "blk0.x_after_ca"], p[act + "kb_q_in"]))

    # Cache roll: first call of the last block.
    last = n_lat // 3 - 1
    L = 4 if mode == "gta_drive" else 6
    kwin = p[f"ref.call.b{last}.s0.blk0.sa_kwin"]
    final = p["ref.final_cache.blk0.k"]
    check(pre + f"self-attn window at block {last} holds {L} frames", kwin.shape[1] == L * S,
          f"{kwin.shape[1] // S} frames")
    keep = (L - 3) * S
    check(pre + f"the {L - 3} older frames are the previous block's clean (t=0 rerun) keys",
          same(kwin[:, :keep], final[:, :keep]))
    check(pre + "final cache ends full", int(p["ref.final_cache.blk0.local_end"]) == L * S and
          int(p["ref.final_cache.blk0.global_end"]) == n_lat * S)
    mk = p.get(f"ref.call.b{last}.s0.blk0.act.mouse_kwin")
    if mk is not None:
        check(pre + f"mouse cache window = {L} frames per spatial token", mk.shape[:2] == (S, L))
    kk = p[f"ref.call.b{last}.s0.blk0.act.kb_kwin"]
    check(pre + f"keyboard cache window = {L} frames, one copy", kk.shape[:2] == (1, L))

    v = p["ref.video_u8"]
    check(pre + "video frames = 1 + 4 (N - 1)", v.shape[0] == 1 + 4 * (n_lat - 1))


def encoder_scale(e):
    mean = torch.tensor([-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
                         0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921])
    std = torch.tensor([2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                        3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160])
    m2 = mean.half().to(BF16)
    s2 = std.half().to(BF16)
    check("encoder mean = bf16(fp16(mean)) (WanVAE .to(fp16) then .to(bf16))", same(m2, e["ref.scale_mean"]))
    check("encoder 1/std computed in bf16 from bf16(fp16(std))", same(1.0 / s2, e["ref.scale_inv_std"]))
    direct = (1.0 / std.to(BF16))
    diff = (direct != e["ref.scale_inv_std"]).sum().item()
    diffm = (mean.to(BF16) != e["ref.scale_mean"]).sum().item()
    print(f"     note: vs direct fp32->bf16 casts, {diffm} mean and {diff} inv_std values differ")


def decoder(d):
    check("decoder: 3 latents -> 9 frames, then 1 latent -> 4 frames",
          d["ref.b0.frames"].shape[1] == 9 and d["ref.b1.frames"].shape[1] == 4)
    kinds = d["ref.cache_kinds"].tolist()
    check("decoder feat_cache after use: 30 tensors + 2 'Rep'-then-tensor slots filled", 0 not in kinds,
          f"kinds {kinds}")
    for prec in ("ref", "fp32"):
        f = d[f"{prec}.b0.frames"].float()
        check(f"decoder {prec}: output clamped to [-1, 1]", f.abs().max().item() <= 1.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(Path(__file__).resolve().parent.parent / "tests/data/mg2"))
    d = Path(ap.parse_args().data)
    m = json.loads((d / "manifest.json").read_text())
    c = load_file(str(d / "constants.safetensors"))
    sampler(c)
    sinusoid(c)
    rope_table(c, "full", 128)
    rope_table(c, "tiny", m["tiny"]["dit"]["dim"] // m["tiny"]["dit"]["num_heads"])
    action_rope(c)
    randn(c)
    e = load_file(str(d / "vae_encoder.safetensors"))
    encoder_scale(e)
    decoder(load_file(str(d / "vae_decoder.safetensors")))
    clip = load_file(str(d / "clip.safetensors"))
    for mode in ("universal", "gta_drive", "templerun"):
        pipeline(mode, load_file(str(d / f"pipeline_{mode}.safetensors")), c, m, e, clip)
    print(f"{len(FAILURES)} failure(s)")
    raise SystemExit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
