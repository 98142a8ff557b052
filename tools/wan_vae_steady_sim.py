#!/usr/bin/env python3
"""Convolution work of Matrix-Game's conditioning encode (the start image and
4 (N - 1) zero frames through the Wan VAE encoder at 352x640), with and
without WanVaeEncoder's constant-tail reuse (models/wan_vae/wan_vae_encoder.h).

Frames are symbols (interned ids: two frames are equal exactly when they come
from equal inputs by the same layer), so the emulation finds the same equal
frames the encoder's memcmp finds, and counts the FLOPs of the frames each
convolution computes: per chunk, outputs up to the first one whose window lies
in the input's constant tail (at least all of a 1-frame call), and whole chunks
copied once the cached frames stop changing and the input repeats. The layer
list is the released encoder's (dim 96, multipliers 1 2 4 4, 2 residual
blocks per stage, time down in the last two resamplers); the equal-frame
positions it implies are what tests/models/test_wan_vae_steady.cpp measures.

  python3 tools/wan_vae_steady_sim.py
"""
ids = {}
def I(*t):
    return ids.setdefault(t, len(ids))
H, W = 352, 640


class Conv3:
    def __init__(s, name, cin, cout, scale):
        s.name, s.cin, s.cout, s.px = name, cin, cout, H * W // scale**2
        s.cache = [I('zero'), I('zero')]
    def flops(s): return 2 * s.cin * s.cout * 27 * s.px
    def run(s, x, st):  # x: list of IDs (the conv input frames)
        p = s.cache + x
        T = len(x)
        sf = len(p) - 1
        while sf > 0 and p[sf - 1] == p[-1]: sf -= 1
        n = T if (T < 2 or not st['reuse']) else min(T, sf + 1)
        st['done'] += n * s.flops(); st['all'] += T * s.flops()
        s.cache = p[-2:]
        return [I('c', s.name, p[i], p[i + 1], p[i + 2]) for i in range(T)]
class Res:
    def __init__(s, name, cin, cout, scale):
        s.c1 = Conv3(name + 'a', cin, cout, scale); s.c2 = Conv3(name + 'b', cout, cout, scale)
        s.name = name
    def run(s, x, st):
        h = s.c1.run([I('n1', s.name, f) for f in x], st)
        y = s.c2.run([I('n2', s.name, f) for f in h], st)
        return [I('add', s.name, a, b) for a, b in zip(y, x)]
    def state(s): return tuple(s.c1.cache + s.c2.cache)
class Down:
    def __init__(s, name, c, scale, temporal):
        s.name, s.c, s.px, s.temporal, s.first, s.last = name, c, H * W // (scale * 2)**2, temporal, True, None
    def run(s, x, st):
        T = len(x)
        sf = T - 1
        while sf > 0 and x[sf - 1] == x[-1]: sf -= 1
        n = min(T, sf + 1) if st['reuse'] else T
        f = 2 * s.c * s.c * 9 * s.px
        st['done'] += n * f; st['all'] += T * f
        y = [I('d', s.name, v) for v in x]
        if not s.temporal: return y
        if s.first:
            s.first = False; s.last = y[-1]; return y
        j = [s.last] + y
        s.last = y[-1]
        f = 2 * s.c * s.c * 3 * s.px
        out = [I('t', s.name, j[2 * i], j[2 * i + 1], j[2 * i + 2]) for i in range(T // 2)]
        st['done'] += len(out) * f; st['all'] += len(out) * f
        return out
    def state(s): return (s.last,)
def encoder():
    L = [Conv3('conv1', 3, 96, 1)]
    L += [Res('r0', 96, 96, 1), Res('r1', 96, 96, 1), Down('d2', 96, 1, False)]
    L += [Res('r3', 96, 192, 2), Res('r4', 192, 192, 2), Down('d5', 192, 2, True)]
    L += [Res('r6', 192, 384, 4), Res('r7', 384, 384, 4), Down('d8', 384, 4, True)]
    L += [Res('r9', 384, 384, 8), Res('r10', 384, 384, 8)]
    L += [Res('m0', 384, 384, 8), 'attn', Res('m1', 384, 384, 8), Conv3('head', 384, 32, 8)]
    return L
def run(latents, reuse):
    L = encoder(); st = dict(done=0, all=0, reuse=reuse)
    video = [I('img')] + [I('zero')] * (4 * (latents - 1))
    last_state, steady, skipped = None, False, 0
    for i in range(latents):
        chunk = video[:1] if i == 0 else video[1 + 4 * (i - 1): 1 + 4 * i]
        if reuse and steady and i >= 2 and chunk == video[1 + 4 * (i - 2): 1 + 4 * (i - 1)]:
            skipped += 1; continue
        x = chunk
        for l in L:
            if l == 'attn': x = [I('at', v) for v in x]; continue
            x = l.run(x, st)
        state = tuple(l.state() if hasattr(l, 'state') else tuple(l.cache) for l in L if l != 'attn')
        steady = i >= 2 and state == last_state
        last_state = state
    return st, skipped
for n in (6, 15, 150):
    full, _ = run(n, False)
    r, sk = run(n, True)
    print(f"{n} latents ({4*n-3} frames): conv TFLOP every frame {full['all']/1e12:.2f}, "
          f"with reuse {r['done']/1e12:.2f} ({100*r['done']/full['all']:.0f} %), whole chunks copied {sk}")
