"""Attention-kernel constants of the step-time model from one-GPU measurements (no training run).

``data/measured/attention_h200.csv`` (``benchmarks/device/moe_kernels_h200.py``, one H200) times
causal ``scaled_dot_product_attention`` forward and forward + backward with the cuDNN backend
(what Transformer Engine's fused attention runs: the model's ``"flash"`` kernel) and the flash
backend (FlashAttention-2: the model's ``"fa2"``). :func:`fit_attention` finds, per kernel, the
constants of :func:`scaletax.model.perf.attention_seconds` that reproduce those times:
``(tensor-core fraction, share of the forward exp hidden, backward efficiency, backward tile)``: the
backward's time per causal score element falls with the sequence (measured: 0.44 of peak at 4k,
0.53 at 64k, head size 128), as if each query paid ``backward tile`` / 2 more elements, the way the
diagonal tiles add :data:`perf.FA_CAUSAL_TILE` / 2 (a fixed cost per query row, whatever its cause)
(``perf.ATTN_KERNEL_CONSTANTS``; a test holds the two to each other).

Public API
----------
- ``read_attention(path=ATTENTION_CSV) -> list[dict]``: the measured points.
- ``published_attention(gpu)``: NVIDIA's published cuDNN attention figures for ``gpu``
  (``data/kernel_benchmarks.csv``, cudnn-frontend's SDPA training benchmark, causal, head size 128
  and DeepSeek-V3's 192 / 128); ``fit_published(gpu)``: the four constants that reproduce them, the
  Blackwell and Blackwell Ultra entries of ``perf.ATTN_FAMILY_CONSTANTS``.
- ``routing_overhead(path=ROUTING_CSV) -> dict``: ``moe_overhead`` measured: the H200's time for one
  MoE layer's routing (router forward and backward, token permutation and its inverse, forward and
  backward, in gather-only PyTorch ops: ``data/measured/routing_h200.csv``) over the ideal HBM time
  of the bytes ``perf.memory_bound_bytes`` counts for it (24 E + ``perf.moe_permute_bytes`` at EP 1
  per token); value the median over the fine-grained models, low / high their extremes.
- ``fit_attention(path=ATTENTION_CSV, min_seq=FIT_MIN_SEQ) -> dict[kernel, (tc, exp_hidden, bwd_eff, bwd_tile)]``
  and ``attention_errors(kernel, path)``: the step-time model's attention (``perf.attention_efficiency``)
  against every measured point, predicted / measured - 1.
Both fits run one rule (:func:`_fit`): the forward's constants on a grid, then the backward's.
- ``expert_gemm_seconds(groups, tokens, k, n)``: the step-time model's time for one grouped expert
  GEMM (its 16-bit ceiling and roofline at the harmonic size of (tokens, k, n); ragged counts add
  half a ``perf.GROUPED_TILE_M`` tile per expert), the rule ``perf.prepare`` applies to every expert
  GEMM forward and backward alike; ``expert_backward_ratios(path)``: that rule over the H200's
  measured forward, data-gradient, weight-gradient and autograd forward + backward times
  (``data/measured/expert_backward_h200.csv``), model / measured per op and tokens per expert.
"""
from __future__ import annotations

import csv
import statistics
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from scaletax import DATA_DIR
from scaletax.inputs import hardware, recipes, runs
from scaletax.model import perf
from scaletax.model.efficiency import default_efficiency

ATTENTION_CSV = DATA_DIR / "measured" / "attention_h200.csv"
KERNELS_CSV = DATA_DIR / "kernel_benchmarks.csv"
ROUTING_CSV = DATA_DIR / "measured" / "routing_h200.csv"
BACKWARD_CSV = DATA_DIR / "measured" / "expert_backward_h200.csv"
#: GEMMs per op of ``expert_backward_h200.csv`` in units of the forward's FLOPs.
BACKWARD_OPS: dict[str, float] = {"fwd": 1.0, "dgrad": 1.0, "wgrad": 1.0, "autograd": 3.0}
#: The routing ops timed per layer (forward + backward): the router's autograd pass and the
#: permutation's and its inverse's gather-only forms (no atomics, as fused permute kernels work).
ROUTING_OPS: tuple[tuple[str, str], ...] = (("router", "fwd_bwd_s"), ("permute", "fwd_s"),
                                            ("permute_bwd_gather", "fwd_s"), ("unpermute_gather", "fwd_s"),
                                            ("unpermute_bwd_gather", "fwd_s"))

#: The measured backend of each model kernel (``torch.nn.attention.SDPBackend``).
BACKEND_OF = {"flash": "cudnn", "fa2": "flash"}
#: Shortest sequence fitted: the training lengths of the published runs (4,096 to 131,072);
#: the 2,048 points are kept as an out-of-fit check (shorter sequences pay more per tile).
FIT_MIN_SEQ = 4096
_GRID_TC = np.arange(0.30, 1.6001, 0.002)
_GRID_OV = np.arange(0.0, 1.0001, 0.002)
_GRID_BWD = np.arange(0.30, 1.6001, 0.002)
_GRID_TILE = np.arange(0.0, 4096.1, 16.0)


def read_attention(path: Path = ATTENTION_CSV) -> list[dict]:
    """The measured points: backend, head_dim, seq, batch, heads, fwd_s and bwd_s (seconds per call)."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    out = []
    for r in rows:
        fwd, both = float(r["fwd_s"]), float(r["fwd_bwd_s"])
        out.append({"backend": r["backend"], "head_dim": int(r["head_dim"]), "seq": int(r["seq"]),
                    "batch": int(r["batch"]), "heads": int(r["heads"]), "fwd_s": fwd, "bwd_s": both - fwd})
    return out


def _elements(p: dict) -> float:
    """Causal score elements of one call: s^2 / 2 per head."""
    return p["batch"] * p["heads"] * p["seq"] * p["seq"] / 2.0


def _rates(gpu: str = "h200_sxm") -> tuple[float, float]:
    """(tensor-core FLOP/s at the 16-bit GEMM ceiling, exp/s) of ``gpu`` as the model has them."""
    g = hardware.get(gpu)
    eff = default_efficiency()
    fam = eff.family_factor[g.family] * perf.power_scale(g)
    peak = g.peak_flops("bf16")
    return peak * eff.gemm_ceiling["16bit"] * fam, peak * fam / perf.SFU_RATIO[g.family]


def _points(kernel: str, path: Path, min_seq: int):
    pts = [p for p in read_attention(path) if p["backend"] == BACKEND_OF[kernel] and p["seq"] >= min_seq]
    if not pts:
        raise ValueError(f"{path}: no {BACKEND_OF[kernel]} points at seq >= {min_seq}")
    d = np.array([p["head_dim"] for p in pts], dtype=np.float64)
    s = np.array([p["seq"] for p in pts], dtype=np.float64)
    el = np.array([_elements(p) for p in pts])
    return pts, d, s, np.array([p["fwd_s"] for p in pts]) / el, np.array([p["bwd_s"] for p in pts]) / el


def _fit(dq, dv, s, t_fwd, t_bwd, gpu: str) -> tuple[float, float, float, float]:
    """The constants of :func:`perf.attention_seconds` for causal kernels timed at head sizes
    ``dq`` / ``dv`` and sequences ``s`` (arrays; seconds per causal score element, s^2 / 2 per head)
    on ``gpu``: tensor-core fraction and exp share minimizing the squared log error of the forward
    times on a grid, then backward efficiency and tile those of the backward times."""
    r, x = _rates(gpu)
    f_fwd, f_bwd = 2.0 * (dq + dv), 6.0 * dq + 4.0 * dv
    tc, ov = _GRID_TC[:, None, None], _GRID_OV[None, :, None]
    pred = (f_fwd / (r * tc) + (1.0 - ov) / x) * (s + perf.FA_CAUSAL_TILE) / s
    i, j = np.unravel_index(np.argmin((np.log(pred / t_fwd) ** 2).sum(axis=-1)), pred.shape[:2])
    tc_best, ov_best = float(_GRID_TC[i]), float(_GRID_OV[j])
    bw, tile = _GRID_BWD[:, None, None], _GRID_TILE[None, :, None]
    pred_b = (f_bwd / (r * tc_best * bw) + 1.0 / x) * (s + perf.FA_CAUSAL_TILE + tile) / s
    k, m = np.unravel_index(np.argmin((np.log(pred_b / t_bwd) ** 2).sum(axis=-1)), pred_b.shape[:2])
    return (round(tc_best, 3), round(ov_best, 3), round(float(_GRID_BWD[k]), 3), float(_GRID_TILE[m]))


def fit_attention(path: Path = ATTENTION_CSV, min_seq: int = FIT_MIN_SEQ) -> dict[str, tuple[float, float, float, float]]:
    """Per model kernel, :func:`_fit` of the H200 points at ``seq >= min_seq`` (square heads)."""
    out = {}
    for kernel in BACKEND_OF:
        _, d, s, t_fwd, t_bwd = _points(kernel, path, min_seq)
        out[kernel] = _fit(d, d, s, t_fwd, t_bwd, "h200_sxm")
    return out


def published_attention(gpu: str, path: Path = KERNELS_CSV, min_seq: int = 0) -> list[dict]:
    """NVIDIA's cuDNN SDPA figures for ``gpu`` (causal, ``seq >= min_seq``; square heads of 128 and
    DeepSeek-V3's MLA-shaped 192 / 128): seq, d_qk, d_v and the forward and backward seconds per
    causal score element (TFLOP/s over 2 (d_qk + d_v) and 6 d_qk + 4 d_v FLOPs)."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["kind"] == "attention" and r["gpu"] == gpu
                and r["op"].startswith("cuDNN SDPA ") and r["causal"] == "true"]
    out: dict[tuple[int, str], dict] = {}
    for r in rows:
        s, dims = int(r["seq_len"]), r["head_dim"]
        dq, dv = (int(x) for x in dims.split("/")) if "/" in dims else (int(dims), int(dims))
        key = "fwd" if r["op"].split(" (")[0].endswith("fwd") else "bwd"
        flops = 2.0 * (dq + dv) if key == "fwd" else 6.0 * dq + 4.0 * dv
        out.setdefault((s, dims), {"seq": s, "d_qk": dq, "d_v": dv})[key] = flops / (float(r["value"]) * 1e12)
    return [v for v in out.values() if "fwd" in v and "bwd" in v and v["seq"] >= min_seq]


def fit_published(gpu: str, path: Path = KERNELS_CSV, min_seq: int = FIT_MIN_SEQ) -> tuple[float, float, float, float]:
    """(tc, exp share hidden, backward efficiency, backward tile) reproducing
    :func:`published_attention` of ``gpu`` at ``seq >= min_seq`` (squared log error, forward then
    backward): the two head shapes (128 / 128 and 192 / 128) separate the tensor-core fraction from
    the exponential's share."""
    pts = published_attention(gpu, path, min_seq)
    if len({(p["d_qk"], p["d_v"]) for p in pts}) < 2:
        raise ValueError(f"{path}: cuDNN SDPA figures of one head shape only for {gpu}")
    col = {k: np.array([p[k] for p in pts], dtype=np.float64) for k in ("d_qk", "d_v", "seq", "fwd", "bwd")}
    return _fit(col["d_qk"], col["d_v"], col["seq"], col["fwd"], col["bwd"], gpu)


def routing_ratios(path: Path = ROUTING_CSV) -> dict[str, dict]:
    """Per measured model: its shape, the measured seconds of one layer's routing (:data:`ROUTING_OPS`),
    the ideal seconds of the bytes the model counts (H200 HBM bandwidth) and their ratio."""
    g = hardware.get("h200_sxm")
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    by: dict[str, dict[str, dict]] = {}
    for r in rows:
        by.setdefault(r["model"], {})[r["op"]] = r
    out = {}
    for name, ops in by.items():
        r0 = ops["router"]
        T, h, E, k = (int(r0[c]) for c in ("tokens", "hidden", "experts", "top_k"))
        shape = SimpleNamespace(is_moe=True, hidden=h, moe_top_k=k, moe_experts=E)
        per_token = 24.0 * E + float(perf.moe_permute_bytes(shape, 1, 1, "alltoall"))
        ideal = T * per_token / g.hbm_bw
        seconds = sum(float(ops[op][col]) for op, col in ROUTING_OPS)
        out[name] = {"tokens": T, "hidden": h, "experts": E, "top_k": k, "seconds": seconds, "ideal": ideal,
                     "ratio": seconds / ideal}
    return out


def routing_overhead(path: Path = ROUTING_CSV) -> dict:
    """``moe_overhead`` as measured: median, min and max of :func:`routing_ratios` over the
    fine-grained models (the regime rule's expert count, ``runs.FINE_MOE_EXPERTS``)."""
    ratios = [v["ratio"] for v in routing_ratios(path).values() if v["experts"] >= runs.FINE_MOE_EXPERTS]
    if not ratios:
        raise ValueError(f"{path}: no fine-grained MoE routing rows")
    return {"value": statistics.median(ratios), "low": min(ratios), "high": max(ratios), "models": len(ratios)}


def attention_errors(kernel: str, path: Path = ATTENTION_CSV, min_seq: int = 0) -> list[dict]:
    """The step-time model's attention on the H200 (``perf.attention_efficiency``, the constants it
    uses) against every measured point of ``kernel``'s backend: predicted / measured time - 1."""
    g = hardware.get("h200_sxm")
    out = []
    for p in _points(kernel, path, min_seq)[0]:
        d, el = p["head_dim"], _elements(p)
        f, b = perf.attention_efficiency(g, d, kernel=kernel, seq=p["seq"])
        rate = g.peak_flops("bf16")
        out.append({"head_dim": d, "seq": p["seq"], "fwd": 4.0 * d * el / (f * rate) / p["fwd_s"] - 1.0,
                    "bwd": 10.0 * d * el / (b * rate) / p["bwd_s"] - 1.0})
    return out


def expert_gemm_seconds(groups, tokens, k, n, ragged: bool = False, gpu: str = "h200_sxm") -> np.ndarray:
    """Seconds of one BF16 grouped expert GEMM, ``groups`` experts of ``tokens`` tokens each, k -> n,
    by the step-time model's rule (``perf.evaluate``'s expert term): FLOPs / (16-bit peak x the
    calibrated ceiling) x (1 + ``gemm_roofline`` x ``perf.gemm_reference_size`` / n_hm), n_hm the
    harmonic mean of (tokens, k, n); ``ragged`` counts pay half a ``perf.GROUPED_TILE_M`` row tile
    per expert. Vectorized over the arguments."""
    g, bf = hardware.get(gpu), recipes.training("bf16")
    eff = default_efficiency()
    m, k, n = (np.asarray(x, dtype=np.float64) for x in (tokens, k, n))
    peak = g.peak_flops(bf) * eff.gemm_ceiling["16bit"]
    n_hm = 3.0 / (1.0 / m + 1.0 / k + 1.0 / n)
    pad = 1.0 + 0.5 * perf.GROUPED_TILE_M / m if ragged else 1.0
    return 2.0 * np.asarray(groups, dtype=np.float64) * m * k * n / peak * (
        1.0 + eff.gemm_roofline * perf.gemm_reference_size(g, bf) / n_hm) * pad


def expert_backward_ratios(path: Path = BACKWARD_CSV) -> dict[str, dict[int, dict[str, float]]]:
    """Per op (``fwd``, ``dgrad``, ``wgrad``, ``autograd`` = forward + backward) and tokens per expert:
    the model's time (:func:`expert_gemm_seconds`, x :data:`BACKWARD_OPS`) over the H200's measured
    one, as ``{"median", "min", "max", "points"}`` over the shapes and expert counts measured."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["op"] in BACKWARD_OPS]
    by: dict[str, dict[int, list[float]]] = {}
    for r in rows:
        G, m, K, N = (int(r[c]) for c in ("groups", "tokens", "K", "N"))
        model_s = float(expert_gemm_seconds(G, m, K, N)) * BACKWARD_OPS[r["op"]]
        by.setdefault(r["op"], {}).setdefault(m, []).append(model_s / float(r["seconds"]))
    return {op: {m: {"median": float(np.median(v)), "min": float(min(v)), "max": float(max(v)), "points": len(v)}
                 for m, v in sorted(d.items())} for op, d in by.items()}


if __name__ == "__main__":
    fitted = fit_attention()
    for name, c in fitted.items():
        errs = attention_errors(name)
        print(name, c, [(e["head_dim"], e["seq"], round(e["fwd"], 3), round(e["bwd"], 3)) for e in errs])
    for name, v in routing_ratios().items():
        print(name, round(v["ratio"], 2))
    print("moe_overhead", routing_overhead())
    for gpu in ("gb200", "gb300"):
        print(gpu, fit_published(gpu))
