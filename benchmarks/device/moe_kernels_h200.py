"""Measure, on one GPU, the MoE routing kernels, ragged grouped expert GEMMs and flash attention at
the shapes of the report's models (issue 34: ground ``moe_overhead``, the grouped-GEMM padding
rule and the attention efficiency by head size in measurements, not fits).

Run on a machine with an NVIDIA GPU and PyTorch (not part of ``make test`` or ``make bench``),
about 2 minutes on an H200:
    python3 benchmarks/device/moe_kernels_h200.py OUT_DIR

Writes three CSV files to OUT_DIR (one row per timed point, raw seconds; the analysis that turns
them into fractions of peak and ideal-HBM ratios is ``scaletax.fit.kernels``, run here):

- ``routing_h200.csv``: the MoE routing path of one layer, per op, forward and forward + backward
  (autograd), in plain PyTorch ops on random data (BF16 tokens, FP32 router softmax):
  ``router`` (x @ W_r, softmax, top-k), ``permute`` (gather each token's k copies in expert order,
  ``index_select``), ``unpermute`` (weighted sum of the k copies back per token, ``index_add``),
  ``act`` (SwiGLU on the expert fc1 output). Megatron-Core runs Transformer Engine's fused permute
  kernels instead, which do the same bytes in fewer passes: these are an upper bound of its time.
- ``grouped_h200.csv``: ``torch._grouped_mm`` of G local experts with uniform token counts and with
  counts drawn as uniform top-k routing would give them (multinomial), same total.
- ``attention_h200.csv``: ``scaled_dot_product_attention``, causal, forward and forward +
  backward, with the flash (FlashAttention-2) and cuDNN backends where this PyTorch has them.

Timing: CUDA events around ``REPS`` calls queued back to back (the host ahead of the GPU), median of
``BLOCKS`` blocks after warm-ups, divided by the calls: what a training step pays per call.
"""
import csv
import os
import sys
import traceback

import torch

from expert_gemm_h200 import queued  # this folder: the script's own directory is on sys.path

BLOCKS, REPS, WARM = 5, 10, 3
BF = torch.bfloat16

#: (model, tokens per micro-batch on the GPU T, hidden h, experts E, top-k k, expert width f)
ROUTING = [
    ("gpt-oss-120b", 16384, 2880, 128, 4, 2880),
    ("qwen3-235b-a22b", 8192, 4096, 128, 8, 1536),
    ("deepseek-v3", 8192, 7168, 256, 8, 2048),
    ("kimi-k2", 8192, 7168, 384, 8, 2048),
    ("mixtral-8x7b", 8192, 4096, 8, 2, 14336),
]
#: (model, matrix, K, N) of one expert GEMM; G local experts, mean tokens per expert m
GROUPED = [
    ("gpt-oss-120b", "fc1", 2880, 5760), ("gpt-oss-120b", "fc2", 2880, 2880),
    ("deepseek-v3", "fc1", 7168, 4096), ("deepseek-v3", "fc2", 2048, 7168),
    ("qwen3-235b-a22b", "fc1", 4096, 3072),
]
GROUPED_G = (8, 16, 32)
GROUPED_M = (256, 1024, 4096)
#: (label, batch, query heads, sequence, head dim): kv heads = query heads (GQA expanded before)
ATTENTION = [
    ("gpt-oss d64", 4, 64, 4096, 64),
    ("llama3 d128 s4096", 2, 32, 4096, 128),
    ("llama3 d128 s8192", 1, 64, 8192, 128),
    ("d128 s16384", 1, 16, 16384, 128),
    ("d64 s16384", 1, 32, 16384, 64),
    ("d128 s2048", 8, 32, 2048, 128),
    ("d64 s2048", 8, 64, 2048, 64),
    ("d128 s32768", 1, 8, 32768, 128),
    ("d128 s65536", 1, 4, 65536, 128),
]


def timed(fn):
    """Seconds per call: ``expert_gemm_h200.queued`` (the same timing), BLOCKS blocks of REPS calls."""
    return queued(fn, calls=REPS, warm=WARM, reps=BLOCKS)


def write(path, rows):
    if not rows:
        return
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} rows -> {path}", flush=True)


def routing(gpu):
    rows = []
    dev = "cuda"
    for model, T, h, E, k, f in ROUTING:
        x = torch.randn(T, h, device=dev, dtype=BF, requires_grad=True)
        wr = torch.randn(h, E, device=dev, dtype=BF, requires_grad=True)
        idx = torch.randint(0, E, (T, k), device=dev)
        order = torch.argsort(idx.flatten(), stable=True)
        src = order // k                                   # token of each copy, expert-major
        copies = torch.randn(T * k, h, device=dev, dtype=BF, requires_grad=True)
        prob = torch.rand(T * k, device=dev, dtype=torch.float32, requires_grad=True)
        fc1 = torch.randn(T * k, 2 * f, device=dev, dtype=BF, requires_grad=True)

        def router():
            logits = x @ wr
            p = torch.softmax(logits.float(), dim=-1)
            val, ix = torch.topk(p, k, dim=-1)
            return val

        def permute():
            return x.index_select(0, src)

        def unpermute():
            y = copies * prob.to(BF)[:, None]
            return torch.zeros(T, h, device=dev, dtype=BF).index_add(0, src, y)

        def act():
            g, u = fc1.chunk(2, dim=-1)
            return torch.nn.functional.silu(g) * u

        inv = torch.argsort(order)                         # expert-order position of each (token, slot) copy
        dy = torch.randn(T, h, device=dev, dtype=BF)
        dcop = torch.randn(T * k, h, device=dev, dtype=BF)
        p_sorted = prob.detach()

        # gather-only forms (no atomics), as fused permute kernels do them (Transformer Engine
        # moe_permute / moe_unpermute): each output row is read from its sources, never accumulated
        def permute_bwd_gather():
            return dcop.index_select(0, inv).view(T, k, h).sum(1)

        def unpermute_gather():
            return (copies.detach().index_select(0, inv).view(T, k, h)
                    * p_sorted[inv].to(BF).view(T, k, 1)).sum(1)

        def unpermute_bwd_gather():
            g = dy.index_select(0, src)
            return g * p_sorted.to(BF)[:, None], (g * copies.detach()).sum(-1)

        with torch.no_grad():
            for op, fn in (("permute_bwd_gather", permute_bwd_gather), ("unpermute_gather", unpermute_gather),
                           ("unpermute_bwd_gather", unpermute_bwd_gather)):
                rows.append({"gpu": gpu, "model": model, "op": op, "tokens": T, "hidden": h, "experts": E,
                             "top_k": k, "expert_width": f, "fwd_s": timed(fn), "fwd_bwd_s": ""})
        for op, fn in (("router", router), ("permute", permute), ("unpermute", unpermute), ("act", act)):
            with torch.no_grad():
                t_fwd = timed(fn)
            probe = fn()
            grad = torch.randn_like(probe)

            def fwd_bwd(fn=fn, grad=grad):
                fn().backward(grad)

            t_all = timed(fwd_bwd)
            rows.append({"gpu": gpu, "model": model, "op": op, "tokens": T, "hidden": h, "experts": E, "top_k": k,
                         "expert_width": f, "fwd_s": t_fwd, "fwd_bwd_s": t_all})
            x.grad = wr.grad = copies.grad = prob.grad = fc1.grad = None
        del x, wr, copies, prob, fc1
        torch.cuda.empty_cache()
    return rows


def grouped(gpu):
    rows = []
    gm = getattr(torch, "_grouped_mm", None)
    if gm is None:
        print("torch._grouped_mm not in this PyTorch: no grouped rows", flush=True)
        return rows
    gen = torch.Generator().manual_seed(0)
    for model, mat, K, N in GROUPED:
        for G in GROUPED_G:
            w = torch.randn(G, K, N, device="cuda", dtype=BF)
            for m in GROUPED_M:
                total = G * m
                x = torch.randn(total, K, device="cuda", dtype=BF)
                uniform = torch.full((G,), m, dtype=torch.int64)
                ragged = torch.multinomial(torch.ones(G), total, replacement=True, generator=gen).bincount(minlength=G)
                for kind, counts in (("uniform", uniform), ("multinomial", ragged)):
                    offs = counts.cumsum(0).to(device="cuda", dtype=torch.int32)
                    try:
                        t = timed(lambda: gm(x, w, offs=offs, out_dtype=BF))
                    except Exception as exc:  # e.g. an alignment rule of this build: say so, go on
                        print(f"grouped {model} {mat} G{G} m{m} {kind}: {type(exc).__name__}: {str(exc)[:200]}",
                              flush=True)
                        continue
                    rows.append({"gpu": gpu, "model": model, "matrix": mat, "K": K, "N": N, "groups": G,
                                 "mean_tokens": m, "counts": kind, "max_tokens": int(counts.max()),
                                 "seconds": t, "tflops": 2.0 * total * K * N / t / 1e12})
                del x
            del w
            torch.cuda.empty_cache()
    return rows


def attention(gpu):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    F = torch.nn.functional
    rows = []
    for label, b, hq, s, d in ATTENTION:
        q, kk, v = (torch.randn(b, hq, s, d, device="cuda", dtype=BF, requires_grad=True) for _ in range(3))
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    fwd = lambda: F.scaled_dot_product_attention(q, kk, v, is_causal=True)  # noqa: E731
                    with torch.no_grad():
                        t_fwd = timed(fwd)
                    g = torch.randn(b, hq, s, d, device="cuda", dtype=BF)
                    t_all = timed(lambda: fwd().backward(g))
            except Exception as exc:  # backend absent for this shape / build: say so, go on
                print(f"attention {label} {name}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                continue
            # causal score elements (s^2 / 2 per head), 4 d FLOPs each forward (QK^T, PV), 10 d backward
            elems = b * hq * s * s / 2.0
            rows.append({"gpu": gpu, "label": label, "backend": name, "batch": b, "heads": hq, "seq": s,
                         "head_dim": d, "fwd_s": t_fwd, "fwd_bwd_s": t_all,
                         "fwd_tflops": 4.0 * d * elems / t_fwd / 1e12,
                         "bwd_tflops": 10.0 * d * elems / (t_all - t_fwd) / 1e12})
            q.grad = kk.grad = v.grad = None
        del q, kk, v
        torch.cuda.empty_cache()
    return rows


def main(out):
    os.makedirs(out, exist_ok=True)
    gpu = torch.cuda.get_device_name(0)
    print(f"{gpu}, torch {torch.__version__}, cuda {torch.version.cuda}, cudnn {torch.backends.cudnn.version()}",
          flush=True)
    torch.manual_seed(0)
    for name, fn in (("routing", routing), ("grouped", grouped), ("attention", attention)):
        try:
            write(os.path.join(out, f"{name}_h200.csv"), fn(gpu))
        except Exception:
            traceback.print_exc()


if __name__ == "__main__":
    main(sys.argv[1])
