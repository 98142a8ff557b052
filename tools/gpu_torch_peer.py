#!/usr/bin/env python3
"""The PyTorch peer of bench/cuda/cuda_ops_bench.cpp on the same GPU, same run.

Prints the bf16 GEMM rate on random 8192^3 data (the measured peak that
flick_cuda_bench's percentages use; the last line is `peak_tflops N`) and
PyTorch eager's time for the ops flick_cuda_bench times at Matrix-Game 2.0's
shapes (linears at 2640 tokens, SDPA over the 5280-key window and the 257
CLIP tokens). Timed with CUDA events: 3 warm-ups, then the mean of 20 calls.
"""
import torch
import torch.nn.functional as F


def time_ms(f, reps=20):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        f()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / reps


def main():
    dev = torch.device("cuda")
    bf = torch.bfloat16
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, cuDNN {torch.backends.cudnn.version()}")
    n = 8192
    a, b = torch.randn(n, n, device=dev, dtype=bf), torch.randn(n, n, device=dev, dtype=bf)
    ms = time_ms(lambda: a @ b, 10)
    peak = 2 * n**3 / ms / 1e9
    print(f"torch matmul bf16 8192^3                      {ms:9.3f} ms  {peak:7.1f} TFLOP/s")
    T, C, Fd, H, D, KV, CTX = 2640, 1536, 8960, 12, 128, 5280, 257
    x = torch.randn(T, C, device=dev, dtype=bf)
    h = torch.randn(T, Fd, device=dev, dtype=bf)
    w1, w2, w3 = (torch.randn(o, i, device=dev, dtype=bf) * 0.02 for o, i in ((C, C), (Fd, C), (C, Fd)))
    bias1, bias2 = torch.zeros(C, device=dev, dtype=bf), torch.zeros(Fd, device=dev, dtype=bf)
    rows = [
        ("linear bf16 2640x1536 -> 1536", lambda: F.linear(x, w1, bias1), 2 * T * C * C),
        ("linear bf16 2640x1536 -> 8960 +gelu", lambda: F.gelu(F.linear(x, w2, bias2), approximate="tanh"), 2 * T * C * Fd),
        ("linear bf16 2640x8960 -> 1536", lambda: F.linear(h, w3, bias1), 2 * T * C * Fd),
    ]
    q = torch.randn(1, H, T, D, device=dev, dtype=bf)
    k, v = torch.randn(1, H, KV, D, device=dev, dtype=bf), torch.randn(1, H, KV, D, device=dev, dtype=bf)
    kc, vc = k[:, :, :CTX].contiguous(), v[:, :, :CTX].contiguous()
    rows.append(("sdpa bf16 2640 q x 5280 k, 12x128", lambda: F.scaled_dot_product_attention(q, k, v), 4 * T * KV * H * D))
    rows.append(("sdpa bf16 2640 q x 257 k, 12x128", lambda: F.scaled_dot_product_attention(q, kc, vc), 4 * T * CTX * H * D))
    ln = torch.nn.LayerNorm(C, elementwise_affine=False, eps=1e-6, device=dev, dtype=bf)
    rows.append(("layer_norm bf16 [2640, 1536]", lambda: ln(x), 0))
    for name, f, flop in rows:
        ms = time_ms(f)
        extra = f"  {flop / ms / 1e9:7.1f} TFLOP/s" if flop else ""
        print(f"torch {name:<40} {ms:9.3f} ms{extra}")
    print(f"peak_tflops {peak:.1f}")


if __name__ == "__main__":
    main()
