#!/usr/bin/env python3
"""Writes tests/data/dtype/*.bin: PyTorch's own results for every dtype
conversion in runtime/dtype.h, so tests/core/test_dtype.cpp can prove them
bit-exact against torch.

Usage: /work/venv/bin/python tools/gen_dtype_fixtures.py [OUT_DIR]

Files are raw little-endian arrays, one per name:
  decode_<fmt>.in.bin    every code of <fmt> (u16 for bf16/f16, u8 for fp8), in order
  decode_<fmt>.f32.bin   torch: code -> float32 (bit patterns, NaN payloads included)
  encode_<set>.in.bin    float32 inputs
  encode_<set>.<fmt>.bin torch: float32 -> <fmt> codes
  convert_base.f32.bin, convert_pairs.bin: torch's .to() for every dtype pair
Sets: bf16 / f16 (every code of the format as f32, plus for every positive
code the exact midpoint to the next code and its +-1 ulp f32 neighbours),
common (the same for e4m3 and e5m2, overflow boundaries, subnormals, +-0,
+-inf, NaNs with payloads, and random f32), with outputs for every format.

torch's CPU cast has two paths: a vectorized one for contiguous tensors and
the scalar c10 conversion for strided ones. They agree bit for bit except on
NaN -> bf16 (the AVX-512 path writes 0xFFFF, c10 writes 0x7FC0). The files
store the c10 (scalar) result; the script asserts that the paths agree on
everything else and reports how many NaNs differ.
"""
import os
import sys

import numpy as np
import torch

FORMATS = {  # name: (torch dtype, code numpy dtype)
    "bf16": (torch.bfloat16, np.uint16),
    "f16": (torch.float16, np.uint16),
    "e4m3": (torch.float8_e4m3fn, np.uint8),
    "e5m2": (torch.float8_e5m2, np.uint8),
}
INT_VIEW = {np.uint16: torch.int16, np.uint8: torch.uint8}


def strided(t):
    """The same values as a non-contiguous view (forces torch's scalar loop)."""
    buf = torch.zeros(2 * t.numel(), dtype=t.dtype)
    buf[::2] = t
    return buf[::2]


def codes_of(t, code_np):
    return t.contiguous().view(INT_VIEW[code_np]).numpy().view(code_np).copy()


def decode(fmt):
    tdt, code_np = FORMATS[fmt]
    codes = np.arange(2 ** (8 * np.dtype(code_np).itemsize), dtype=np.uint64).astype(code_np)
    x = torch.from_numpy(codes.view(np.int16) if code_np == np.uint16 else codes).view(tdt)
    vec = x.to(torch.float32).numpy().view(np.uint32)
    sca = strided(x).to(torch.float32).numpy().view(np.uint32)
    assert np.array_equal(vec, sca), f"decode {fmt}: vectorized and scalar paths differ"
    return codes, sca


def encode(inputs_u32, fmt):
    tdt, code_np = FORMATS[fmt]
    x = torch.from_numpy(inputs_u32.view(np.float32).copy())
    vec = codes_of(x.to(tdt), code_np)
    sca = codes_of(strided(x).to(tdt), code_np)
    differ = vec != sca
    is_nan = np.isnan(inputs_u32.view(np.float32))
    assert not np.any(differ & ~is_nan), f"encode {fmt}: paths differ on a non-NaN input"
    if np.any(differ):
        print(f"  {fmt}: {differ.sum()} NaN inputs differ between torch's vectorized "
              f"(e.g. {vec[differ][0]:#x}) and scalar (e.g. {sca[differ][0]:#x}) path; storing scalar")
    return sca


def f32_bits(values):
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def neighbours(bits):
    """bits and its -1/+1 ulp neighbours (same sign), as uint32."""
    b = np.asarray(bits, dtype=np.int64)
    out = np.concatenate([b - 1, b, b + 1])
    return out[(out >= 0) & (out <= 0xFFFFFFFF)].astype(np.uint32)


def midpoints(fmt):
    """Exact midpoints between consecutive positive codes (0 -> max finite,
    and max finite -> the next binade step, the overflow boundary) as f32 bits.
    Every one is exactly representable in float32 for these formats."""
    _, vals = decode(fmt)
    with np.errstate(invalid="ignore"):
        vals = vals.view(np.float32).astype(np.float64)
    n = len(vals) // 2  # positive half
    pos = vals[:n]
    finite = pos[np.isfinite(pos)]
    finite = np.sort(finite)
    step_top = finite[-1] - finite[-2]
    nxt = np.append(finite[1:], finite[-1] + step_top)
    mids = (finite + nxt) / 2
    m32 = mids.astype(np.float32)
    assert np.array_equal(m32.astype(np.float64), mids), f"{fmt}: midpoint not exact in f32"
    return m32.view(np.uint32)


def all_codes_as_f32(fmt):
    return decode(fmt)[1]


def encode_set_16(fmt):
    return np.concatenate([all_codes_as_f32(fmt), neighbours(midpoints(fmt))])


def encode_set_common(rng):
    parts = []
    for fmt in ("e4m3", "e5m2"):
        codes = all_codes_as_f32(fmt)
        mids = neighbours(midpoints(fmt))
        parts += [codes, mids, mids | np.uint32(0x80000000)]
    specials = [0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, 448.0, 464.0, 480.0, 496.0, 512.0,
                57344.0, 61440.0, 65504.0, 65520.0, 65536.0, 3.0e38, -3.0e38,
                np.finfo(np.float32).max, -np.finfo(np.float32).max,
                np.finfo(np.float32).tiny, 2.0 ** -9, 2.0 ** -10, 2.0 ** -16, 2.0 ** -17,
                2.0 ** -24, 2.0 ** -25, 2.0 ** -133, 2.0 ** -134, 2.0 ** -6, 2.0 ** -14]
    sb = f32_bits(specials)
    parts += [neighbours(sb), neighbours(sb | np.uint32(0x80000000))]
    # bf16 overflow boundary (max + half ulp) and f32 subnormals.
    parts.append(neighbours([0x7F7F8000, 0xFF7F8000, 0x00008000, 0x80008000]))
    parts.append(np.array([1, 2, 3, 0x7FFF, 0x8000, 0x8001, 0x17FFF, 0x18000, 0x007FFFFF,
                           0x80000001, 0x807FFFFF], dtype=np.uint32))
    parts.append(rng.integers(1, 0x00800000, 2048, dtype=np.uint32) |
                 (rng.integers(0, 2, 2048, dtype=np.uint32) << 31))
    # NaNs: quiet and signalling, payloads at both ends of the mantissa, both signs.
    payloads = np.array([0x400000, 0x000001, 0x002000, 0x001FFF, 0x200000, 0x012345, 0x7FFFFF,
                         0x3FFFFF, 0x401000, 0x000100, 0x100000, 0x080000, 0x040000],
                        dtype=np.uint32)
    nans = np.uint32(0x7F800000) | payloads
    parts += [nans, nans | np.uint32(0x80000000)]
    parts.append(np.uint32(0x7F800000) | rng.integers(1, 0x00800000, 256, dtype=np.uint32) |
                 (rng.integers(0, 2, 256, dtype=np.uint32) << 31))
    # Random: uniform bit patterns (every exponent) and log-uniform magnitudes
    # over the range where the small formats round (2^-28 .. 2^20).
    parts.append(rng.integers(0, 2 ** 32, 96 * 1024, dtype=np.uint64).astype(np.uint32))
    mag = np.exp2(rng.uniform(-28.0, 20.0, 96 * 1024))
    sign = np.where(rng.integers(0, 2, mag.size) == 1, -1.0, 1.0)
    parts.append(f32_bits(sign * mag))
    return np.concatenate(parts)


TORCH_OF = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
            "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
            "I8": torch.int8, "U8": torch.uint8, "I32": torch.int32}
# Values every dtype holds without overflow once rounded (|v| <= 100: fp8
# rounds 100 to 96 or 104, inside int8); fractions and ties exercise
# float -> int truncation and float rounding.
CONVERT_BASE = [0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.75, -3.75, 0.1, -0.1, 7.0, 12.0,
                -12.0, 17.3, -17.3, 33.3, 42.9, 64.5, -64.5, 99.6, -99.6, 100.0, -100.0, 0.3]


def convert_pairs():
    """convert_base.f32.bin, and convert_pairs.bin: for every (src, dst) in
    the order of flick's kAllDTypes (src major), the src bytes then torch's
    src.to(dst) bytes. U8 cannot hold negatives (casting them is undefined in
    C++ and torch alike), so pairs touching U8 use |base|."""
    chunks = []
    for sname, sdt in TORCH_OF.items():
        for dname, ddt in TORCH_OF.items():
            base = np.abs(CONVERT_BASE) if "U8" in (sname, dname) else np.array(CONVERT_BASE)
            src = torch.tensor(base, dtype=torch.float32).to(sdt)
            dst = src.to(ddt)
            for t in (src, dst):
                chunks.append(t.contiguous().view(torch.uint8).numpy())
    return {"convert_base.f32.bin": np.array(CONVERT_BASE, dtype=np.float32),
            "convert_pairs.bin": np.concatenate(chunks)}


def write(out_dir, name, arr):
    path = os.path.join(out_dir, name)
    np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tofile(path)
    return os.path.getsize(path)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "dtype")
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(20240611)
    total = 0
    for fmt in FORMATS:
        codes, f32 = decode(fmt)
        total += write(out_dir, f"decode_{fmt}.in.bin", codes)
        total += write(out_dir, f"decode_{fmt}.f32.bin", f32)
    sets = {"bf16": (encode_set_16("bf16"), ["bf16"]),
            "f16": (encode_set_16("f16"), ["f16"]),
            "common": (encode_set_common(rng), list(FORMATS))}
    for name, (inputs, fmts) in sets.items():
        print(f"encode_{name}: {inputs.size} inputs")
        total += write(out_dir, f"encode_{name}.in.bin", inputs)
        for fmt in fmts:
            total += write(out_dir, f"encode_{name}.{fmt}.bin", encode(inputs, fmt))
    for name, arr in convert_pairs().items():
        total += write(out_dir, name, arr)
    print(f"wrote {total / 1e6:.2f} MB to {os.path.normpath(out_dir)} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
