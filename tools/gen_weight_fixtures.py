#!/usr/bin/env python3
"""Writes the weight-loader fixtures in tests/data/weights/ with real torch.

Run: /work/venv/bin/python tools/gen_weight_fixtures.py [outdir]

Files (all small):
  state_dict.pth        torch.save of an nn.Module state dict (OrderedDict with
                        _metadata) extended with every dtype, transposed, sliced,
                        expanded (stride 0), tied, 0-d, empty and 7-d tensors;
                        pickle protocol 2 (torch's default)
  nested_p4.pth         {"state_dict": {...}, "layers": [...], "epoch": ...,
                        "cfg": {...}} with pickle protocol 4 (FRAME, MEMOIZE,
                        SHORT_BINUNICODE, STACK_GLOBAL)
  nested_p5.pth         the same with protocol 5
  state_dict.safetensors, nested.safetensors
                        the same tensors (flattened names, contiguous) written
                        by the safetensors package: an independent oracle
  expected.json         every tensor's dtype, shape and values (row-major) as
                        torch computed them
  all_dtypes.safetensors  one tensor per safetensors dtype flick reads
  evil_system.pth, evil_eval.pth, evil_module.pth
                        pickles that call os.system / builtins.eval or pickle a
                        whole nn.Module: must be refused
  legacy.pth            the pre-1.6 (non-zip) torch.save format: refused
  truncated_tail.pth, truncated_half.pth  cut-off zips
"""
import builtins
import collections
import json
import os
import sys

import torch
from safetensors.torch import save_file

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "weights")

DTYPE_NAMES = {
    torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
    torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2", torch.int8: "I8",
    torch.uint8: "U8", torch.int32: "I32", torch.int64: "I64", torch.bool: "BOOL",
    torch.float64: "F64",
}


def values(t):
    flat = t.detach().contiguous().reshape(-1)
    if t.dtype.is_floating_point:
        return [float(v) for v in flat.float().tolist()] if t.dtype != torch.float64 else flat.tolist()
    return [int(v) for v in flat.to(torch.int64).tolist()]


def expected_entry(t):
    return {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape), "values": values(t)}


def every_dtype(g):
    return {
        "dt.f32": torch.randn(3, 4, generator=g),
        "dt.bf16": torch.randn(3, 4, generator=g).to(torch.bfloat16),
        "dt.f16": torch.randn(2, 5, generator=g).to(torch.float16),
        "dt.f8_e4m3": (torch.randn(4, 3, generator=g) * 4).to(torch.float8_e4m3fn),
        "dt.f8_e5m2": (torch.randn(4, 3, generator=g) * 4).to(torch.float8_e5m2),
        "dt.i8": torch.randint(-128, 128, (5,), generator=g, dtype=torch.int8),
        "dt.u8": torch.randint(0, 256, (2, 3), generator=g, dtype=torch.uint8),
        "dt.i32": torch.randint(-2**31, 2**31 - 1, (3, 2), generator=g, dtype=torch.int32),
    }


def flat_state_dict(g):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    sd = model.state_dict()  # OrderedDict with _metadata: exercises BUILD
    sd.update(every_dtype(g))
    base = torch.randn(4, 6, generator=g)
    sd["view.base"] = base
    sd["view.transposed"] = base.t()             # strides (1, 6), shares base's storage
    sd["view.sliced"] = base[1:3, 2:5]           # offset 8, strides (6, 1)
    sd["view.row"] = base[2]                     # contiguous at offset 12
    sd["view.expanded"] = torch.randn(3, 1, generator=g).expand(3, 4)  # stride 0
    bf = torch.randn(3, 5, generator=g).to(torch.bfloat16)
    sd["view.bf16_t"] = bf.t()
    tied = torch.randn(2, 2, generator=g)
    sd["tied.a"] = tied
    sd["tied.b"] = tied
    sd["misc.scalar"] = torch.tensor(2.5)
    sd["misc.empty"] = torch.zeros(0, 3)
    sd["misc.seven_d"] = torch.arange(2, dtype=torch.float32).reshape(1, 1, 1, 1, 1, 1, 2)
    sd["misc.position_ids"] = torch.arange(5, dtype=torch.int64)
    sd["misc.mask"] = torch.tensor([True, False, True])
    sd["misc.param"] = torch.nn.Parameter(torch.randn(2, generator=g))
    return sd


def nested(g):
    inner = collections.OrderedDict()
    inner["enc.weight"] = torch.randn(2, 3, generator=g)
    inner["enc.bias"] = torch.randn(2, generator=g).to(torch.bfloat16)
    inner["dec"] = {"weight": torch.randn(3, 2, generator=g).t()}
    return {
        "state_dict": inner,
        "layers": [torch.randn(2, generator=g), (torch.randn(1, generator=g), inner["enc.weight"])],
        "epoch": 7,
        "cfg": {"name": "fixture", "lr": 0.25, "flag": True, "none": None, "big": 2**40},
    }


def flatten(obj, prefix=""):
    out = {}
    items = obj.items() if isinstance(obj, dict) else enumerate(obj)
    for k, v in items:
        name = f"{prefix}{k}"
        if isinstance(v, torch.Tensor):
            out[name] = v
        elif isinstance(v, (dict, list, tuple)):
            out.update(flatten(v, name + "."))
    return out


def oracle(tensors, path):
    # safetensors refuses shared or non-contiguous tensors: give it copies.
    save_file({k: v.detach().contiguous().clone() for k, v in tensors.items()}, path,
              metadata={"writer": "gen_weight_fixtures.py"})


class CallsSystem:
    def __reduce__(self):
        return (os.system, ("echo flick-pwned",))


class CallsEval:
    def __reduce__(self):
        return (builtins.eval, ("__import__('os').system('echo flick-pwned')",))


def main():
    os.makedirs(OUT, exist_ok=True)
    g = torch.Generator().manual_seed(1234)
    expected = {}

    sd = flat_state_dict(g)
    torch.save(sd, os.path.join(OUT, "state_dict.pth"))
    oracle(dict(sd), os.path.join(OUT, "state_dict.safetensors"))
    expected["state_dict"] = {k: expected_entry(v) for k, v in sd.items()}

    nd = nested(g)
    torch.save(nd, os.path.join(OUT, "nested_p4.pth"), pickle_protocol=4)
    torch.save(nd, os.path.join(OUT, "nested_p5.pth"), pickle_protocol=5)
    flat = flatten(nd)
    oracle(flat, os.path.join(OUT, "nested.safetensors"))
    expected["nested"] = {k: expected_entry(v) for k, v in flat.items()}
    expected["nested_scalars"] = {"epoch": "7", "cfg.name": "fixture", "cfg.lr": "0.25",
                                  "cfg.flag": "True", "cfg.none": "None", "cfg.big": str(2**40)}

    dt = every_dtype(g)
    save_file(dt, os.path.join(OUT, "all_dtypes.safetensors"), metadata={"format": "pt"})
    expected["all_dtypes"] = {k: expected_entry(v) for k, v in dt.items()}

    w = {"w": torch.ones(2)}
    torch.save({**w, "payload": CallsSystem()}, os.path.join(OUT, "evil_system.pth"))
    torch.save({**w, "payload": CallsEval()}, os.path.join(OUT, "evil_eval.pth"))
    torch.save(torch.nn.Linear(2, 2), os.path.join(OUT, "evil_module.pth"))
    torch.save(w, os.path.join(OUT, "legacy.pth"), _use_new_zipfile_serialization=False)

    with open(os.path.join(OUT, "state_dict.pth"), "rb") as f:
        data = f.read()
    with open(os.path.join(OUT, "truncated_tail.pth"), "wb") as f:
        f.write(data[:-40])  # end-of-central-directory record cut off
    with open(os.path.join(OUT, "truncated_half.pth"), "wb") as f:
        f.write(data[:len(data) // 2])

    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
