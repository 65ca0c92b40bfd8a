"""Measure achieved GEMM throughput (BF16, FP8 E4M3) and HBM copy bandwidth on one GPU.

Run on a machine with an NVIDIA GPU and PyTorch (not part of `make test` or `make bench`):
    python3 benchmarks/device/gemm_h200.py OUT.csv
Shapes are the per-GPU GEMMs of the report's models under typical tensor parallelism, plus a
square sweep. Each point: median of 20 timed runs (CUDA events) after 5 warm-ups, random data.
"""
import csv
import statistics
import sys

import torch

SHAPES = []  # (label, M, N, K)
for m in (1024, 2048, 4096, 8192, 16384):
    SHAPES += [
        ("megatron_1t tp8 qkv", m, 9600, 25600), ("megatron_1t tp8 fc1", m, 12800, 25600),
        ("megatron_1t tp8 fc2", m, 25600, 12800), ("megatron_1t tp8 proj", m, 25600, 3200),
        ("llama405b tp8 fc1", m, 13312, 16384), ("llama405b tp8 qkv", m, 2304, 16384),
        ("kimi_k2 expert up+gate", m, 4096, 7168), ("kimi_k2 expert down", m, 7168, 2048),
        ("gpt3_175b tp4 fc1", m, 12288, 12288),
    ]
for n in (512, 1024, 2048, 4096, 8192, 16384):
    SHAPES.append(("square", n, n, n))


def timed(fn, warm=5, reps=20):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize()
        out.append(a.elapsed_time(b) / 1e3)
    return statistics.median(out)


def main(path):
    dev = torch.device("cuda")
    rows = []
    name = torch.cuda.get_device_name(0)
    one = torch.ones((), device=dev)
    for label, m, n, k in SHAPES:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        bt = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        t = timed(lambda: a @ bt.t())
        rows.append({"gpu": name, "label": label, "dtype": "bf16", "m": m, "n": n, "k": k,
                     "seconds": t, "tflops": 2 * m * n * k / t / 1e12})
        a8 = a.to(torch.float8_e4m3fn)
        b8 = bt.to(torch.float8_e4m3fn)
        t = timed(lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
        rows.append({"gpu": name, "label": label, "dtype": "fp8_e4m3", "m": m, "n": n, "k": k,
                     "seconds": t, "tflops": 2 * m * n * k / t / 1e12})
        # fast accumulation: what Transformer Engine uses for the forward FP8 GEMMs
        t = timed(lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                           use_fast_accum=True))
        rows.append({"gpu": name, "label": label, "dtype": "fp8_e4m3_fastaccum", "m": m, "n": n, "k": k,
                     "seconds": t, "tflops": 2 * m * n * k / t / 1e12})
        del a, bt, a8, b8
    x = torch.empty(2 * 2**30, dtype=torch.uint8, device=dev)
    y = torch.empty_like(x)
    t = timed(lambda: y.copy_(x))
    rows.append({"gpu": name, "label": "device copy 2 GiB (read+write bytes)", "dtype": "uint8",
                 "m": x.numel(), "n": 0, "k": 0, "seconds": t, "tflops": 2 * x.numel() / t / 1e12})
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader(); w.writerows(rows)
    print(f"{name}, torch {torch.__version__}, cuda {torch.version.cuda}")
    for r in rows:
        if r["label"] == "square" or "copy" in r["label"]:
            print(r["label"], r["dtype"], r["m"], f"{r['tflops']:.1f}")


if __name__ == "__main__":
    main(sys.argv[1])
