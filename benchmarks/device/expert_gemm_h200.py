"""Measure expert (grouped) GEMMs and few-token GEMMs on one GPU, each timed two ways.

Prepared for issue 29 (fine-grained MoE and few tokens per GPU); not yet run: no device was lent
to the session that wrote it. Run on a machine with an NVIDIA GPU and PyTorch (not part of
`make test` or `make bench`), about 3 minutes on an H200:
    python3 benchmarks/device/expert_gemm_h200.py OUT.csv

Why two timings. ``benchmarks/device/gemm_h200.py`` records a CUDA event, launches one GEMM from
Python and records another, with the GPU idle before it: its 512^3 and 1024^3 GEMMs both take
about 22 us, the host's dispatch of one op. A training step queues kernels ahead of the GPU, so
that time is hidden there. Here every point is timed as
  - ``idle``: as in gemm_h200.py (one call between two events, synchronized after each), and
  - ``queued``: R calls back to back between two events (no synchronization inside), divided
    by R: the GPU's own time per call when the host runs ahead.
The difference of the two is the dispatch time; ``queued`` is what a step pays per GEMM.

Shapes (BF16, random normal data, median of 7 timed blocks after 3 warm-ups):
  - expert GEMMs of the report's fine-grained MoE models, G local experts with m tokens each,
    as G separate matmuls (Transformer Engine's GroupedLinear issues one GEMM per expert) and,
    where this PyTorch has it, as one ``torch._grouped_mm`` call;
  - Llama 3 8B's GEMMs at TP1 for m = 512 to 16384 tokens per micro-batch (few tokens per GPU).
"""
import csv
import statistics
import sys

import torch

#: (model, matrix, K, N): an expert's fc1 (gate and up, N = 2 x expert width) and fc2
EXPERTS = [
    ("gpt-oss-120b", "fc1", 2880, 5760), ("gpt-oss-120b", "fc2", 2880, 2880),
    ("qwen3-235b-a22b", "fc1", 4096, 3072), ("qwen3-235b-a22b", "fc2", 1536, 4096),
    ("qwen3-30b-a3b", "fc1", 2048, 1536), ("qwen3-30b-a3b", "fc2", 768, 2048),
    ("deepseek-v3", "fc1", 7168, 4096), ("deepseek-v3", "fc2", 2048, 7168),
]
GROUPS = (4, 16)
TOKENS = (128, 512, 1024, 4096)
#: Llama 3 8B at TP1: (matrix, K, N)
DENSE = [("llama3-8b qkv", 4096, 6144), ("llama3-8b proj", 4096, 4096), ("llama3-8b fc1", 4096, 28672),
         ("llama3-8b fc2", 14336, 4096)]
DENSE_TOKENS = (512, 1024, 2048, 4096, 8192, 16384)
QUEUED_CALLS = 20


def _median(times):
    return statistics.median(times)


def queued(fn, calls=QUEUED_CALLS, warm=3, reps=7):
    """Seconds per call of ``calls`` calls queued back to back (the host ahead of the GPU)."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn()
        b.record(); torch.cuda.synchronize()
        out.append(a.elapsed_time(b) / 1e3 / calls)
    return _median(out)


def idle(fn):
    """Seconds of one call launched on an idle GPU: :func:`queued` with one call per block (events
    around it, synchronized after each), as ``gemm_h200.py`` times its points."""
    return queued(fn, calls=1)


def _row(name, label, mode, groups, m, n, k, seconds):
    flops = 2.0 * groups * m * n * k
    return {"gpu": name, "label": label, "dtype": "bf16", "mode": mode, "groups": groups, "m": m, "n": n, "k": k,
            "seconds": seconds, "tflops": flops / seconds / 1e12}


def main(path):
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(0)
    bf = torch.bfloat16
    grouped = getattr(torch, "_grouped_mm", None)
    rows = []
    for model, mat, k, n in EXPERTS:
        for g in GROUPS:
            w = torch.randn(g, k, n, device=dev, dtype=bf)
            for m in TOKENS:
                x = torch.randn(g * m, k, device=dev, dtype=bf)
                parts = list(x.split(m))

                def loop():
                    for i in range(g):
                        parts[i] @ w[i]

                label = f"{model} expert {mat}"
                rows.append(_row(name, label + " loop", "idle", g, m, n, k, idle(loop)))
                rows.append(_row(name, label + " loop", "queued", g, m, n, k, queued(loop)))
                if grouped is not None:
                    offs = torch.arange(m, g * m + 1, m, device=dev, dtype=torch.int32)
                    try:
                        fn = lambda: grouped(x, w, offs=offs, out_dtype=bf)  # noqa: E731
                        fn()
                    except (RuntimeError, TypeError) as exc:  # not on this GPU / PyTorch: say so once
                        print(f"torch._grouped_mm unavailable here ({exc}); loop timings only")
                        grouped = None
                    else:
                        rows.append(_row(name, label + " grouped_mm", "idle", g, m, n, k, idle(fn)))
                        rows.append(_row(name, label + " grouped_mm", "queued", g, m, n, k, queued(fn)))
                del x, parts
            del w
    for label, k, n in DENSE:
        w = torch.randn(k, n, device=dev, dtype=bf)
        for m in DENSE_TOKENS:
            x = torch.randn(m, k, device=dev, dtype=bf)
            fn = lambda: x @ w  # noqa: E731
            rows.append(_row(name, label, "idle", 1, m, n, k, idle(fn)))
            rows.append(_row(name, label, "queued", 1, m, n, k, queued(fn)))
            del x
        del w
    with open(path, "w", newline="") as fh:
        out = csv.DictWriter(fh, fieldnames=list(rows[0]))
        out.writeheader(); out.writerows(rows)
    print(f"{name}, torch {torch.__version__}, cuda {torch.version.cuda}, {len(rows)} rows -> {path}")


if __name__ == "__main__":
    main(sys.argv[1])
