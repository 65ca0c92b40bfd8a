"""Measure, on one GPU, the backward of ragged grouped expert GEMMs at the shapes of the report's MoE
models (issue 34: does the model's grouped-GEMM rule, checked on the forward in
``grouped_h200.csv``, hold for the backward, where the weight gradient reduces over the few tokens
an expert gets?).

Run on a machine with an NVIDIA GPU and PyTorch >= 2.8 (``torch._grouped_mm``; not part of
``make test`` or ``make bench``), about 2 minutes on an H200:
    python3 benchmarks/device/expert_backward_h200.py OUT_DIR

Writes ``OUT_DIR/expert_backward_h200.csv``, one row per timed point (raw seconds; the analysis is
``scaletax.fit.kernels.expert_backward_ratios``). Per model matrix (K -> N), G local experts with
m tokens each (uniform counts), BF16:

- ``fwd``: y = x W per expert, ``torch._grouped_mm(x, w, offs)`` (2-D x 3-D);
- ``dgrad``: dx = dy W^T per expert (2-D x 3-D, the weights transposed);
- ``wgrad``: dW = x^T dy per expert, the reduction over the expert's m tokens (2-D x 2-D, offsets
  along the reduced dimension; output G x K x N);
- ``accumulate``: dW added into an FP32 gradient buffer (what Megatron-Core's ``main_grad`` does
  when the GEMM does not accumulate itself; a memory-bound kernel, an upper bound);
- ``autograd``: forward and backward through PyTorch's autograd of ``_grouped_mm`` (what TorchTitan
  trains with), the backward's dgrad and wgrad chosen by PyTorch.

Timing: ``expert_gemm_h200.queued`` (CUDA events around calls queued back to back, median of
blocks), as the other device scripts.
"""
import csv
import os
import sys
import traceback

import torch

from expert_gemm_h200 import queued  # this folder: the script's own directory is on sys.path

BLOCKS, REPS, WARM = 5, 10, 3
BF = torch.bfloat16
#: (model, matrix, K, N) of one expert GEMM (fc1: hidden -> 2 x expert width, gated; fc2: back)
SHAPES = [
    ("deepseek-v3", "fc1", 7168, 4096), ("deepseek-v3", "fc2", 2048, 7168),
    ("qwen3-235b-a22b", "fc1", 4096, 3072), ("qwen3-235b-a22b", "fc2", 1536, 4096),
    ("gpt-oss-120b", "fc1", 2880, 5760), ("gpt-oss-120b", "fc2", 2880, 2880),
]
GROUPS = (4, 16)
TOKENS = (256, 512, 1024, 2048, 4096, 8192)


def timed(fn):
    return queued(fn, calls=REPS, warm=WARM, reps=BLOCKS)


def points(gpu):
    gm = torch._grouped_mm
    rows = []
    for model, mat, K, N in SHAPES:
        for G in GROUPS:
            w = torch.randn(G, K, N, device="cuda", dtype=BF) * 0.02
            wt = w.transpose(-2, -1)
            acc = torch.zeros(G, K, N, device="cuda", dtype=torch.float32)
            for m in TOKENS:
                T = G * m
                x = torch.randn(T, K, device="cuda", dtype=BF)
                dy = torch.randn(T, N, device="cuda", dtype=BF)
                offs = torch.full((G,), m, dtype=torch.int32, device="cuda").cumsum(0, dtype=torch.int32)
                xt = x.t()  # K x T, column-major: what autograd passes; a row-major copy if this build wants one
                try:
                    gm(xt, dy, offs=offs, out_dtype=BF)
                except Exception as exc:
                    print(f"{model} {mat} wgrad on the transposed view: {type(exc).__name__}; a row-major copy",
                          flush=True)
                    xt = x.t().contiguous()
                dw = torch.empty(G, K, N, device="cuda", dtype=BF)
                xa = x.detach().requires_grad_(True)
                wa = w.detach().requires_grad_(True)

                def autograd():
                    y = gm(xa, wa, offs=offs, out_dtype=BF)
                    y.backward(dy)

                ops = {
                    "fwd": lambda: gm(x, w, offs=offs, out_dtype=BF),
                    "dgrad": lambda: gm(dy, wt, offs=offs, out_dtype=BF),
                    "wgrad": lambda: gm(xt, dy, offs=offs, out_dtype=BF),
                    "accumulate": lambda: acc.add_(dw),
                    "autograd": autograd,
                }
                for op, fn in ops.items():
                    try:
                        t = timed(fn)
                    except Exception as exc:  # an alignment or layout rule of this build: say so, go on
                        print(f"{model} {mat} G{G} m{m} {op}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                        continue
                    flops = 2.0 * T * K * N * (3.0 if op == "autograd" else 0.0 if op == "accumulate" else 1.0)
                    rows.append({"gpu": gpu, "model": model, "matrix": mat, "K": K, "N": N, "groups": G,
                                 "tokens": m, "op": op, "seconds": t,
                                 "tflops": flops / t / 1e12 if flops else "",
                                 "gbs": (10.0 * G * K * N / t / 1e9) if op == "accumulate" else ""})
                del x, dy, xt, dw, xa, wa
                torch.cuda.empty_cache()
            del w, wt, acc
            torch.cuda.empty_cache()
            print(f"{model} {mat} G{G}: {len(rows)} rows so far", flush=True)
    return rows


def main(out):
    os.makedirs(out, exist_ok=True)
    gpu = torch.cuda.get_device_name(0)
    print(f"{gpu}, torch {torch.__version__}, cuda {torch.version.cuda}", flush=True)
    torch.manual_seed(0)
    try:
        rows = points(gpu)
    except Exception:
        traceback.print_exc()
        return
    path = os.path.join(out, "expert_backward_h200.csv")
    with open(path, "w", newline="") as fh:
        wr = csv.DictWriter(fh, fieldnames=list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)
    print(f"{len(rows)} rows -> {path}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
