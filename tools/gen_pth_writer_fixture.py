#!/usr/bin/env python3
"""The oracle of flick's .pth writer (runtime/weights/pth_writer.h): real
torch.save of a state dict that tests/weights/test_pth_writer.cpp rebuilds
from the same rule and writes with flick. The test compares the two archives
entry by entry: data.pkl byte for byte, every storage, the entry order and the
64-byte alignment of the storages. torch also reads what flick writes
(tools/check_mg2_synth.py loads `flick synth` output with
torch.load(weights_only=True)).

Run: /work/venv/bin/python tools/gen_pth_writer_fixture.py [outdir]
Writes <outdir>/pth_writer_torch.pth (default tests/data/weights), about 300 KB,
and <outdir>/pth_writer_torch_wrapped.pth: tensors 2..4 saved as
{"model": OrderedDict(...)} (the layout of released training checkpoints,
PthWriteOptions::wrap_in), a few KB.

The state dict (keep in sync with kFixture* in the test): 1001 tensors, so
the pickle holds a SETITEMS batch of 1000 and a lone SETITEM, memo indices
past 255 (LONG_BINPUT / LONG_BINGET) and every storage class flick writes.
Tensor i is named "layer{i}.w", has dtype DTYPES[i % 8] and shape
SHAPES[i % 7], except tensor 0: U8 [70000] (a BININT numel) and tensor 1:
I32 [300, 2] (BININT2 sizes). Its bytes are (i * 131 + j * 7 + 3) mod 256
for byte j (any bit pattern: torch.save copies bytes, NaNs included).
"""
import collections
import os
import sys

import torch

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int8, torch.uint8, torch.int32,
          torch.float8_e4m3fn, torch.float8_e5m2]
SHAPES = [[], [0], [3], [2, 3], [4, 1, 2], [1, 2, 1, 2, 1], [0, 5]]
COUNT = 1001


def spec(i):
    if i == 0:
        return torch.uint8, [70000]
    if i == 1:
        return torch.int32, [300, 2]
    return DTYPES[i % len(DTYPES)], SHAPES[i % len(SHAPES)]


def make_tensor(i):
    dtype, shape = spec(i)
    numel = 1
    for d in shape:
        numel *= d
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    data = bytearray((i * 131 + j * 7 + 3) % 256 for j in range(nbytes))
    return torch.frombuffer(data, dtype=dtype).reshape(shape).clone()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "weights")
    sd = collections.OrderedDict((f"layer{i}.w", make_tensor(i)) for i in range(COUNT))
    path = os.path.join(out, "pth_writer_torch.pth")
    torch.save(sd, path)
    back = torch.load(path, weights_only=True)
    assert list(back) == list(sd)
    for k, v in sd.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape
        assert torch.equal(back[k].reshape(-1).view(torch.uint8), v.reshape(-1).view(torch.uint8)), k
    print(f"{path}: {os.path.getsize(path)} bytes, torch {torch.__version__}")
    wrapped = {"model": collections.OrderedDict((f"layer{i}.w", make_tensor(i)) for i in range(2, 5))}
    path = os.path.join(out, "pth_writer_torch_wrapped.pth")
    torch.save(wrapped, path)
    back = torch.load(path, weights_only=True)
    assert list(back) == ["model"] and list(back["model"]) == list(wrapped["model"])
    print(f"{path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
