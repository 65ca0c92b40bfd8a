"""Layout search: every valid layout of a model on N GPUs evaluated at once as numpy arrays.

Public API
----------
- ``SearchSpace``: the choices per parallel dimension (defaults below).
- ``candidates(model, gpus, space, sequences) -> LayoutArray``: every valid layout (rules below).
- ``search(model, precision, gpu, gpus, *, tokens_per_step=None, gbs=None, space=None, topo=None,
  band=None, pareto=True) -> SearchResult``: the fastest layout that fits memory (tokens/s per
  GPU, with its low/high band), the Pareto set (cluster tokens/s vs memory headroom vs GPUs),
  or a "does not fit" answer with the minimum GPU count (``memory.min_gpus_to_fit``).
- ``search_loop(...)``: the same search as a plain per-layout Python loop (scalar ``Layout``
  objects, one ``memory.breakdown`` and one ``perf.step_time`` call each): the reference for
  the vectorized one (tests, benchmark).
- ``pareto_mask(throughput, headroom, gpus) -> bool array``.
- ``benchmark(model, precision, gpu, gpus, tokens_per_step=...) -> dict``: layouts/s of both.

Candidate rules (both implementations): ``tp`` from ``space.tp`` dividing the GPU count;
``pp`` the divisors of the remaining count up to the layer count (or ``space.pp``); ``cp``,
``vp``, ``mbs``, ZeRO stage and recompute from the space; MoE: ``ep`` the divisors of the expert
count (or ``space.ep``), ``etp`` 1 or tp; dense: ep = 1, etp = tp. ``parallel`` validity rules
(heads and kv_heads divisible by tp, seq_len by 2 cp, ep x etp dividing tp x cp x dp, ...).
Global batch: the token budget in whole sequences S, rounded to a whole number of micro-batches
per data-parallel rank, n_micro = max(1, round(S / (mbs dp))); layouts whose batch differs from S
by more than ``space.batch_tolerance`` are dropped. Interleaving (vp > 1) needs pp > 1,
n_micro a multiple of pp (Megatron's interleaved 1F1B) and pp x vp <= layers.
Ranking: tokens/s per GPU (the step-time model), ties broken by less memory, then by less model
parallelism (``memory.choose_least_parallel`` order).
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from scaletax import hardware, memory, perf
from scaletax.models import Model
from scaletax.layout import RECOMPUTE_CODE, RECOMPUTE_NAME, Layout, LayoutArray
from scaletax.topology import Topology


@dataclass(frozen=True)
class SearchSpace:
    """Choices per dimension (``None``: derived from the model and GPU count, see module doc)."""

    tp: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    pp: tuple[int, ...] | None = None
    cp: tuple[int, ...] = (1, 2, 4, 8, 16)
    ep: tuple[int, ...] | None = None
    etp_tp: tuple[bool, ...] = (False, True)  # MoE: etp = 1 (False) or etp = tp (True)
    vp: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
    mbs: tuple[int, ...] = (1, 2, 4, 8)
    zero_stage: tuple[int, ...] = (0, 1, 2, 3)
    recompute: tuple[str, ...] = ("none", "selective", "full")
    batch_tolerance: float = 0.10

    def __post_init__(self) -> None:
        bad = set(self.recompute) - set(RECOMPUTE_CODE)
        if bad:
            raise ValueError(f"recompute: unknown {sorted(bad)}; valid: {', '.join(RECOMPUTE_CODE)}")
        for name in ("tp", "cp", "vp", "mbs"):
            if any(int(v) < 1 for v in getattr(self, name)):
                raise ValueError(f"{name}: choices must be >= 1")
        if not 0 <= self.batch_tolerance < 1:
            raise ValueError("batch_tolerance: must be in [0, 1)")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _choices(model: Model, gpus: int, space: SearchSpace) -> dict[str, list]:
    tp = [t for t in space.tp if gpus % t == 0]
    pp = sorted({p for p in (space.pp or _divisors(gpus)) if p <= model.layers and gpus % p == 0})
    ep = (list(space.ep) if space.ep is not None else _divisors(model.moe_experts)) if model.is_moe else [1]
    etp = list(space.etp_tp) if model.is_moe else [True]
    return {"tp": tp, "pp": pp, "cp": list(space.cp), "ep": ep, "etp_tp": etp, "vp": list(space.vp),
            "mbs": list(space.mbs), "zero": list(space.zero_stage),
            "rc": [RECOMPUTE_CODE[r] for r in space.recompute]}


def target_sequences(model: Model, tokens_per_step: float | None = None, gbs: int | None = None) -> int:
    """Sequences per step: ``gbs``, or the token budget per step in whole sequences."""
    if gbs is not None:
        if gbs < 1:
            raise ValueError("gbs: must be >= 1")
        return int(gbs)
    if tokens_per_step is None:
        raise ValueError("give tokens_per_step or gbs")
    if tokens_per_step < model.seq_len:
        raise ValueError(f"tokens_per_step={tokens_per_step:g} is less than one sequence ({model.seq_len} tokens)")
    return max(1, int(round(tokens_per_step / model.seq_len)))


def _product(*arrays):
    """Cartesian product of 1-D arrays, first varying slowest (itertools.product order)."""
    grids = np.meshgrid(*(np.asarray(a) for a in arrays), indexing="ij")
    return [g.ravel() for g in grids]


def candidates(model: Model, gpus: int, space: SearchSpace | None = None, sequences: int = 1) -> LayoutArray:
    """Every valid layout of ``model`` on exactly ``gpus`` GPUs (module docstring rules).

    Built in three stages so that rules prune early: the parallel sizes (tp, pp, cp, ep, etp)
    with ``parallel``'s validity rules, then the schedule (vp, mbs) with the batch and
    interleaving rules, then ZeRO stage x recompute (no rules). Order: ``itertools.product``
    over (tp, pp, cp, ep, etp, vp, mbs, zero, recompute), as :func:`search_loop`.
    """
    space = SearchSpace() if space is None else space
    ch = _choices(model, gpus, space)
    if any(not ch[k] for k in ("tp", "pp", "cp", "ep", "etp_tp", "vp", "mbs", "zero", "rc")):
        return LayoutArray.from_layouts([])
    i64 = np.int64
    t, p, c, e, et = _product(*(np.asarray(ch[k], dtype=i64) for k in ("tp", "pp", "cp", "ep", "etp_tp")))
    ok = (gpus % (t * p * c)) == 0
    ok &= ~((t == 1) & (et == 0) & model.is_moe)  # etp = 1 and etp = tp coincide at tp = 1
    t, p, c, e, et = (a[ok] for a in (t, p, c, e, et))
    d = gpus // (t * p * c)
    etp = np.where(et.astype(bool), t, 1)
    one = np.ones_like(t)
    base = LayoutArray(tp=t, pp=p, cp=c, ep=e, etp=etp, dp=d, vp=one, mbs=one, gbs=d, sp=(t > 1).astype(i64),
                       zero_stage=one, recompute=0 * one)
    s1 = np.flatnonzero(base.valid_mask(model, gpus))  # structural rules (vp, gbs rules hold here)
    # stage 2: schedule
    k1, v, m = _product(s1, np.asarray(ch["vp"], dtype=i64), np.asarray(ch["mbs"], dtype=i64))
    pk, dk = p[k1], d[k1]
    n_micro = np.maximum(1, np.rint(sequences / (m * dk)).astype(i64))
    gbs = n_micro * m * dk
    ok = np.abs(gbs - sequences) <= space.batch_tolerance * sequences
    ok &= (v == 1) | ((pk > 1) & (n_micro % pk == 0) & (pk * v <= model.layers))
    k1, v, m, gbs = (a[ok] for a in (k1, v, m, gbs))
    # stage 3: ZeRO stage x recompute
    k2, z, r = _product(np.arange(k1.size), np.asarray(ch["zero"], dtype=i64), np.asarray(ch["rc"], dtype=i64))
    src = k1[k2]
    return LayoutArray(tp=t[src], pp=p[src], cp=c[src], ep=e[src], etp=etp[src], dp=d[src], vp=v[k2], mbs=m[k2],
                       gbs=gbs[k2], sp=(t[src] > 1).astype(i64), zero_stage=z, recompute=r)


def pareto_mask(throughput, headroom, gpus) -> np.ndarray:
    """Non-dominated points: higher ``throughput``, higher ``headroom``, fewer ``gpus``.

    A point is dominated if another is at least as good in all three and better in one; of
    exact duplicates the first is kept. O(n log n) per distinct GPU count.
    """
    thr, hr, g = (np.asarray(a, dtype=np.float64) for a in (throughput, headroom, gpus))
    keep = np.zeros(thr.size, dtype=bool)
    front_t, front_h = np.empty(0), np.empty(0)
    for count in np.unique(g):  # fewer GPUs first
        idx = np.flatnonzero(g == count)
        order = idx[np.lexsort((-hr[idx], -thr[idx]))]  # throughput desc, headroom desc, index (stable)
        # within the group: dominated if an earlier point (throughput >=) has headroom >=
        best_h = np.maximum.accumulate(np.concatenate(([-np.inf], hr[order][:-1])))
        cand = order[~(best_h >= hr[order])]
        if front_t.size and cand.size:  # dominated by a kept point with fewer GPUs?
            o = np.argsort(-front_t, kind="stable")
            ft, fh = front_t[o], np.maximum.accumulate(front_h[o])
            pos = np.searchsorted(-ft, -thr[cand], side="right")  # front points with throughput >=
            best = np.where(pos > 0, fh[np.maximum(pos - 1, 0)], -np.inf)
            cand = cand[~(best >= hr[cand])]
        keep[cand] = True
        front_t = np.concatenate((front_t, thr[cand]))
        front_h = np.concatenate((front_h, hr[cand]))
    return keep


@dataclass(frozen=True)
class SearchResult:
    """Outcome of a layout search.

    fits: some layout fits memory and the batch rule. best: the fastest ``Layout`` (None if not
    fits); metrics: its numbers (tokens/s per GPU with ``_low``/``_high``, MFU, step time and
    breakdown, memory GiB, headroom GiB); pareto: rows of the Pareto set; n_layouts: candidates
    evaluated; n_fit: those that fit; min_gpus: smallest GPU count that fits at all (only when
    nothing fits); message: one line for the book; seconds: wall time of the whole search
    (enumeration, memory, step time, ranking, Pareto set).
    """

    model: str
    precision: str
    gpu: str
    gpus: tuple[int, ...]
    fits: bool
    best: Layout | None
    metrics: dict[str, Any]
    pareto: list[dict[str, Any]]
    n_layouts: int
    n_fit: int
    min_gpus: int | None
    message: str
    seconds: float
    sequences: int

    @property
    def layouts_per_s(self) -> float:
        return self.n_layouts / self.seconds if self.seconds > 0 else float("inf")


def layout_row(la: LayoutArray, i: int) -> dict[str, Any]:
    """Plain fields of layout ``i`` (recompute by name)."""
    return {"tp": int(la.tp[i]), "pp": int(la.pp[i]), "cp": int(la.cp[i]), "ep": int(la.ep[i]),
            "etp": int(la.etp[i]), "dp": int(la.dp[i]), "vp": int(la.vp[i]), "mbs": int(la.mbs[i]),
            "gbs": int(la.gbs[i]), "zero_stage": int(la.zero_stage[i]),
            "recompute": RECOMPUTE_NAME[int(la.recompute[i])]}


def _best(tps: np.ndarray, mem: np.ndarray, la: LayoutArray) -> int:
    """Index of the best layout: most tokens/s per GPU (to 1e-6), then least memory (to the
    byte), then least model parallelism, recompute, ep, pp, vp and ZeRO stage (the loop's key)."""
    r = np.round(tps, 6)
    idx = np.flatnonzero(r == r.max())
    if idx.size == 1:
        return int(idx[0])
    keys = (la.zero_stage[idx], la.vp[idx], la.pp[idx], la.ep[idx], la.recompute[idx],
            (la.tp * la.pp * la.cp)[idx], np.round(mem[idx], 0))
    return int(idx[np.lexsort(keys)[0]])


def _not_fit(model, precision, g, counts, space, n, seconds, sequences, why: str) -> SearchResult:
    fit = memory.min_gpus_to_fit(model, g, precision, max_tp=max(space.tp), zero_stages=tuple(space.zero_stage),
                                 recompute=tuple(space.recompute))
    need = (f"needs at least {fit.gpus:,}" if fit.gpus is not None
            else "does not fit on any count up to 65,536")
    counts_s = "/".join(f"{c:,}" for c in counts)
    if why == "memory":
        msg = f"{model.name or model.id} does not fit on {counts_s} GPUs of type {g.label} in {precision}; {need}"
    else:
        msg = (f"{model.name or model.id} on {counts_s} GPUs of type {g.label}: no valid layout for a global batch "
               f"of {sequences:,} sequences within the batch tolerance (memory alone {need})")
    return SearchResult(model=model.id or model.name, precision=precision, gpu=g.id, gpus=tuple(counts), fits=False,
                        best=None, metrics={}, pareto=[], n_layouts=n, n_fit=0,
                        min_gpus=fit.gpus, message=msg, seconds=seconds, sequences=sequences)


def search(model: Model, precision: str, gpu, gpus: int | Sequence[int], *, tokens_per_step: float | None = None,
           gbs: int | None = None, space: SearchSpace | None = None, topo: Topology | None = None,
           band: perf.EfficiencyBand | None = None, pareto: bool = True, **memory_options: Any) -> SearchResult:
    """Vectorized layout search (module docstring). ``gpus``: one count or several (Pareto over them)."""
    space = SearchSpace() if space is None else space
    g = hardware.get(gpu) if isinstance(gpu, str) else gpu
    counts = [int(gpus)] if np.ndim(gpus) == 0 else [int(x) for x in gpus]
    seqs = target_sequences(model, tokens_per_step, gbs)
    band = perf.default_band() if band is None else band
    cap = memory.capacity_gib(g) * memory.GIB
    t0 = time.perf_counter()
    parts, n_total = [], 0
    for count in counts:
        la = candidates(model, count, space, seqs)
        n_total += len(la)
        if not len(la):
            continue
        mem = memory.breakdown(model, la, precision, **memory_options).total
        ok = mem <= cap
        if not ok.any():
            continue
        sub = la[ok]
        inp = perf.prepare(model, sub, precision, g, topo, ep_dispatch="dedup" if model.is_moe else "alltoall")
        st = perf.evaluate(inp, band.value)
        parts.append((sub, mem[ok], st, inp))
    if not parts:
        return _not_fit(model, precision, g, counts, space, n_total, time.perf_counter() - t0, seqs,
                        "memory" if n_total else "batch")
    la = _concat([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
    mem = np.concatenate([p[1] for p in parts])
    st = parts[0][2] if len(parts) == 1 else _concat_steps([p[2] for p in parts])
    i = _best(st.tokens_per_s_per_gpu, mem, la)
    best = la.layout(i)
    # band of the best layout (low / high efficiency corners)
    j = i
    k = 0
    while j >= len(parts[k][0]):
        j -= len(parts[k][0])
        k += 1
    pb = perf.evaluate_band(_take_inputs(parts[k][3], j), band)
    metrics = _metrics(st, i, mem[i], cap, pb)
    rows = []
    if pareto:
        cluster = st.tokens_per_s_per_gpu * la.gpus
        head = (cap - mem) / memory.GIB
        pm = np.flatnonzero(pareto_mask(cluster, head, la.gpus))
        pm = pm[np.argsort(-cluster[pm], kind="stable")]
        rows = [{**layout_row(la, q), "gpus": int(la.gpus[q]), "tokens_per_s": float(cluster[q]),
                 "tokens_per_s_per_gpu": float(st.tokens_per_s_per_gpu[q]), "mfu": float(st.mfu[q]),
                 "memory_gib": float(mem[q] / memory.GIB), "headroom_gib": float(head[q])} for q in pm]
    seconds = time.perf_counter() - t0
    msg = (f"best of {n_total:,} layouts ({len(la):,} fit): {perf_label(best)} at "
           f"{metrics['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU")
    return SearchResult(model=model.id or model.name, precision=precision, gpu=g.id, gpus=tuple(counts), fits=True,
                        best=best, metrics=metrics, pareto=rows, n_layouts=n_total, n_fit=len(la), min_gpus=None,
                        message=msg, seconds=seconds, sequences=seqs)


def perf_label(lay: Layout) -> str:
    """Layout label for tables (``validate.layout_string``)."""
    from scaletax.validate import layout_string

    return layout_string(lay)


def _metrics(st: perf.StepTime, i: int, mem_bytes: float, cap: float, pb: perf.Prediction | None) -> dict[str, Any]:
    out = {"tokens_per_s_per_gpu": float(st.tokens_per_s_per_gpu[i]), "mfu": float(st.mfu[i]),
           "model_tflops_per_gpu": float(st.model_tflops_per_gpu[i]), "step_s": float(st.step_s[i]),
           "compute_s": float(st.compute_s[i]), "exposed_comm_s": float(st.exposed_comm_s[i]),
           "bubble_s": float(st.bubble_s[i]), "other_s": float(st.other_s[i]),
           "tokens_per_step": float(st.tokens_per_step[i]),
           "memory_gib": float(mem_bytes / memory.GIB), "headroom_gib": float((cap - mem_bytes) / memory.GIB)}
    if pb is not None:
        out["tokens_per_s_per_gpu_low"] = float(pb.low.tokens_per_s_per_gpu[0])
        out["tokens_per_s_per_gpu_high"] = float(pb.high.tokens_per_s_per_gpu[0])
    return out


def _take_inputs(inp: perf.StepInputs, j: int) -> perf.StepInputs:
    """Entry ``j`` of prepared inputs as a one-entry ``StepInputs``."""
    from dataclasses import fields

    from scaletax import comm

    sel = np.array([j])
    arrays = {f.name: np.asarray(getattr(inp, f.name))[sel] for f in fields(perf.StepInputs) if f.name != "comm"}
    c = inp.comm
    n = len(c.layouts)

    def pick(a):
        a = np.asarray(a)
        return np.broadcast_to(a, (n,))[sel] if a.ndim <= 1 else a[sel]

    groups = {k: comm.GroupTraffic(count=pick(v.count), nvlink_bytes=pick(v.nvlink_bytes), nic_bytes=pick(v.nic_bytes),
                                   seconds=pick(v.seconds), size=pick(v.size), stride=pick(v.stride),
                                   domain=pick(v.domain)) for k, v in c.groups.items()}
    step = comm.StepComm(groups=groups, dp_grad_s=pick(c.dp_grad_s), dp_param_s=pick(c.dp_param_s),
                         dp_bucket_s=pick(c.dp_bucket_s), pp_hop_s=pick(c.pp_hop_s), layouts=c.layouts[sel])
    return perf.StepInputs(comm=step, **arrays)


def _concat(las: list[LayoutArray]) -> LayoutArray:
    from scaletax.layout import FIELDS

    return LayoutArray(**{f: np.concatenate([getattr(x, f) for x in las]) for f in FIELDS})


def _concat_steps(sts: list[perf.StepTime]) -> perf.StepTime:
    from dataclasses import fields

    kw = {}
    for f in fields(perf.StepTime):
        if f.name == "comm_groups":
            kw[f.name] = {k: np.concatenate([s.comm_groups[k] for s in sts]) for k in sts[0].comm_groups}
        else:
            kw[f.name] = np.concatenate([getattr(s, f.name) for s in sts])
    return perf.StepTime(**kw)


# =========================================================================================
# The same search as a plain per-layout loop (reference and benchmark)
# =========================================================================================
def _scalar_candidate(model: Model, gpus: int, sequences: int, space: SearchSpace, t, p, c, e, et, v, m, z, r):
    """The vectorized rules of :func:`candidates` for one combination; a ``Layout`` or None."""
    if gpus % (t * p * c):
        return None
    if model.is_moe and t == 1 and not et:
        return None
    d = gpus // (t * p * c)
    n_micro = max(1, int(round(sequences / (m * d))))
    gbs = n_micro * m * d
    if abs(gbs - sequences) > space.batch_tolerance * sequences:
        return None
    if v > 1 and not (p > 1 and n_micro % p == 0 and p * v <= model.layers):
        return None
    try:
        lay = Layout(tp=t, pp=p, cp=c, dp=d, ep=e, etp=t if et else 1, vp=v, mbs=m, gbs=gbs,
                     zero_stage=z, recompute=RECOMPUTE_NAME[r])
        lay.check(model)
    except ValueError:
        return None
    return lay


def search_loop(model: Model, precision: str, gpu, gpus: int, *, tokens_per_step: float | None = None,
                gbs: int | None = None, space: SearchSpace | None = None, topo: Topology | None = None,
                eff: perf.Efficiency | None = None, limit: int | None = None,
                **memory_options: Any) -> dict[str, Any]:
    """The search as a per-layout Python loop: same candidates, same model, scalar calls.

    Returns ``{"best": Layout | None, "tokens_per_s_per_gpu", "memory_gib", "n_layouts",
    "n_fit", "seconds"}``; ``limit`` stops after that many candidate layouts (benchmarks).
    """
    space = SearchSpace() if space is None else space
    g = hardware.get(gpu) if isinstance(gpu, str) else gpu
    seqs = target_sequences(model, tokens_per_step, gbs)
    eff = perf.default_efficiency() if eff is None else eff
    cap = memory.capacity_gib(g) * memory.GIB
    ch = _choices(model, gpus, space)
    t0 = time.perf_counter()
    best, best_key, n, n_fit = None, None, 0, 0
    best_vals = (None, None)
    for combo in itertools.product(ch["tp"], ch["pp"], ch["cp"], ch["ep"], ch["etp_tp"], ch["vp"], ch["mbs"],
                                   ch["zero"], ch["rc"]):
        lay = _scalar_candidate(model, gpus, seqs, space, *combo)
        if lay is None:
            continue
        n += 1
        mem = float(memory.breakdown(model, lay, precision, **memory_options).total[0])
        if mem <= cap:
            n_fit += 1
            st = perf.step_time(model, lay, precision, g, topo, eff=eff,
                                ep_dispatch="dedup" if model.is_moe else "alltoall")
            tps = float(st.tokens_per_s_per_gpu[0])
            key = (-round(tps, 6), round(mem), lay.tp * lay.pp * lay.cp,
                   RECOMPUTE_CODE[lay.recompute], lay.ep, lay.pp, lay.vp, lay.zero_stage)
            if best_key is None or key < best_key:
                best, best_key, best_vals = lay, key, (tps, mem)
        if limit is not None and n >= limit:
            break
    return {"best": best, "tokens_per_s_per_gpu": best_vals[0],
            "memory_gib": None if best_vals[1] is None else best_vals[1] / memory.GIB,
            "n_layouts": n, "n_fit": n_fit, "seconds": time.perf_counter() - t0}


def benchmark(model: Model, precision: str, gpu, gpus: int, *, tokens_per_step: float, repeats: int = 3,
              loop_layouts: int = 300, space: SearchSpace | None = None) -> dict[str, Any]:
    """Layouts per second of :func:`search` (median of ``repeats``) and of :func:`search_loop`
    (on its first ``loop_layouts`` candidates), and their ratio. Reports, asserts nothing."""
    times, res = [], None
    for _ in range(max(1, repeats)):
        res = search(model, precision, gpu, gpus, tokens_per_step=tokens_per_step, space=space)
        times.append(res.seconds)
    vec_s = float(np.median(times))
    loop = search_loop(model, precision, gpu, gpus, tokens_per_step=tokens_per_step, space=space, limit=loop_layouts)
    vec_rate = res.n_layouts / vec_s
    loop_rate = loop["n_layouts"] / loop["seconds"]
    return {"model": model.id or model.name, "gpu": hardware.get(gpu).id if isinstance(gpu, str) else gpu.id,
            "gpus": gpus, "precision": precision, "n_layouts": res.n_layouts, "n_fit": res.n_fit,
            "vectorized_seconds": vec_s, "vectorized_layouts_per_s": vec_rate,
            "loop_layouts": loop["n_layouts"], "loop_seconds": loop["seconds"], "loop_layouts_per_s": loop_rate,
            "speedup": vec_rate / loop_rate, "best": perf_label(res.best) if res.fits else res.message,
            "tokens_per_s_per_gpu": res.metrics.get("tokens_per_s_per_gpu"),
            "tokens_per_s_per_gpu_low": res.metrics.get("tokens_per_s_per_gpu_low"),
            "tokens_per_s_per_gpu_high": res.metrics.get("tokens_per_s_per_gpu_high"),
            "mfu": res.metrics.get("mfu")}


__all__ = ["SearchResult", "SearchSpace", "benchmark", "candidates", "layout_row", "pareto_mask", "perf_label", "search",
           "search_loop", "target_sequences"]
