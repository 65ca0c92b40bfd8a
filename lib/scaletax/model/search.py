"""Layout search: every valid layout of a model on N GPUs evaluated at once as numpy arrays.

This is the book's one answer to "which layout": every chapter that needs a best layout asks
:func:`search` with a :class:`SearchSpace` holding its restrictions.

Public API
----------
- ``SearchSpace``: the choices per parallel dimension, the NVLink domain, the batch rule and the
  objective ("fastest" or "least_parallel"); defaults below. ``TP_CHOICES``, ``MAX_GPUS``.
- ``candidates(model, gpus, space, sequences, domain=None) -> LayoutArray``: every valid layout
  (rules below).
- ``search(model, precision, gpu, gpus, *, tokens_per_step=None, gbs=None, space=None, topo=None,
  band=None, pareto=True) -> SearchResult``: the best layout that fits memory by the space's
  objective, with its ``StepTime`` (and low/high band) and its per-group traffic
  (``comm.StepComm``), the Pareto set (cluster tokens/s vs memory headroom vs GPUs), or a
  "does not fit" answer with the minimum GPU count (:func:`min_gpus`).
- ``min_gpus(model, precision, gpu, *, space=None, sequences=None, counts=None) -> SearchResult``:
  the smallest GPU count (1, 2, 4, then whole 8-GPU nodes up to ``space.max_gpus``) where the
  space has a layout that fits, searched there.
- ``rank_key(objective, ...)``: the ranking, best first (one definition for both searches).
- ``search_loop(...)``: the same search as a plain per-layout Python loop (scalar ``Layout``
  objects, one ``memory.breakdown`` and one ``perf.step_time`` call each): the reference for
  the vectorized one (tests, benchmark).
- ``pareto_mask(throughput, headroom, gpus) -> bool array``.
- ``benchmark(model, precision, gpu, gpus, tokens_per_step=...) -> dict``: layouts/s of both.

``precision`` is a ``recipes.Recipe`` and ``gpu`` a ``hardware.GPU`` everywhere here (the ids are
resolved where they come in); a result names them (``SearchResult.precision``, ``.gpu``).

Candidate rules (both implementations): ``tp`` from ``space.tp`` dividing the GPU count and, with
``space.tp_aligned``, dividing the NVLink domain or a multiple of it (every TP group then sits in
whole domains, where ``layout.members_per_domain`` is exact); ``pp`` the divisors of the
remaining count up to the layer count (or ``space.pp``); ``cp``, ``vp``, ``mbs``, ZeRO stage and
recompute from the space; MoE: ``ep`` the divisors of the expert count (or ``space.ep``), ``etp``
1 or tp; dense: ep = 1, etp = tp. ``layout`` validity rules (heads and kv_heads divisible by tp,
seq_len by 2 cp, ep x etp dividing tp x cp x dp, ...).
Global batch (the one batch rule): the token budget in whole sequences S, rounded to a whole
number of micro-batches per data-parallel rank, n_micro = max(1, round(S / (mbs dp))); layouts
whose batch differs from S by more than ``space.batch_tolerance`` are dropped. With
``batch_tolerance=None`` there is no batch: each layout runs pp micro-batches per step (what
memory alone allows). Interleaving (vp > 1) needs pp > 1, n_micro a multiple of pp (Megatron's
interleaved 1F1B) and pp x vp <= layers.
Ranking (:func:`rank_key`): "fastest": tokens/s per GPU (the step-time model, to 1e-6), ties
broken by less memory, then by the least-parallel order; "least_parallel": smallest
tp x pp x cp, then least recompute, smallest ep, pp, vp and ZeRO stage.
"""
from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np

from scaletax import memo
from scaletax.inputs import hardware, options, recipes
from scaletax.inputs.layout import RECOMPUTE_CODE, RECOMPUTE_NAME, Layout, LayoutArray, LayoutGrid, divisors, label
from scaletax.inputs.models import Model
from scaletax.model import comm, efficiency, memory, perf
from scaletax.model.topology import Topology

#: Tensor-parallel sizes the search tries: powers of two up to 8, one rule for every chapter. Every
#: published run and NVIDIA benchmark recipe in data/ (published_runs.csv, heldout_runs.csv,
#: bridge_recipes.csv, production_moe_recipes.csv, coverage_probes.csv) uses TP <= 8, on 8-GPU HGX
#: nodes and 72-GPU NVL72 racks alike: beyond it the per-GPU GEMMs shrink and the TP collectives
#: outgrow what hides under them, and nothing calibrates the model there (tests/test_search.py
#: holds the rule to the tables).
TP_CHOICES: tuple[int, ...] = (1, 2, 4, 8)
#: ZeRO stages the search tries: those of the calibration runs, Megatron-Core's distributed
#: optimizer (ZeRO-1, every Megatron-Core row of data/published_runs.csv) and Megatron-FSDP / PyTorch
#: FSDP2 (ZeRO-3, the rows with zero_stage 3). No calibration run uses plain data parallelism
#: (ZeRO-0) or ZeRO-2, so the search does not pick them (tests/test_search.py holds it to the table).
ZERO_STAGES: tuple[int, ...] = (1, 3)
#: Largest GPU count :func:`min_gpus` tries.
MAX_GPUS = 65_536
OBJECTIVES = ("fastest", "least_parallel")


#: The ``SearchSpace`` floors that keep the search where measured runs checked the model
#: (``plan.validated_space``; 0 or None: no floor).
FLOORS: tuple[str, ...] = ("min_tokens_per_expert", "min_layers_per_chunk", "min_tokens_per_cp_rank")


@dataclass(frozen=True)
class SearchSpace:
    """What a search may choose, and how it ranks (``None``: derived, see the module doc).

    tp, pp, cp, ep, etp_tp (MoE: etp = 1 or tp), vp, mbs, zero_stage, recompute: the choices
    per dimension. domain: NVLink domain size in GPUs (None: the GPU's). tp_aligned: tp divides
    the domain or is a multiple of it. batch_tolerance: relative distance allowed between a
    layout's global batch and the target (None: no batch, pp micro-batches per step).
    objective: "fastest" or "least_parallel". max_gpus: the largest count :func:`min_gpus` tries.
    ep_dispatch, schedule: the software every candidate is timed with (``perf.prepare``): the MoE
    dispatcher, "dedup" (DeepEP / HybridEP class, Megatron-Core's flex dispatcher; ``None``: the
    search's default, "dedup" for an MoE) or "alltoall" (Megatron-Core's alltoall dispatcher, one copy
    per routed expert), and the schedule ("unknown": half the expert all-to-all hidden; "1f1b": none;
    "ep_overlap" / "dualpipe": paired micro-batches); expert_gemm: how the routed experts run their GEMMs
    (``options.EXPERT_GEMMS``, ``perf.expert_call_layers``: "auto" Transformer Engine's one call per local
    expert under Megatron-Core, "grouped" one kernel). A planner whose stack differs searches with it
    (the scenario's ``training.software``, ``plan.Terms.space``).
    min_tokens_per_expert, min_layers_per_chunk: an MoE layout's floor on the tokens each local
    expert gets per micro-batch (mbs s / cp x k x ep x etp / (tp E)) and on the transformer layers
    per pipeline chunk (layers / (pp vp)); None or 0: no floor. ``plan.fastest`` sets those left
    None to what the measured MoE runs span (``plan.validated_space``), so that the search does not
    choose where the model was never checked; 0 keeps a space free of them (:func:`only`).
    min_tokens_per_cp_rank: any model's floor on the tokens a context-parallel rank holds per
    micro-batch (mbs s / cp; layouts without context parallelism are exempt), set the same way to
    the fewest of any measured run with context parallelism.
    """

    tp: tuple[int, ...] = TP_CHOICES
    pp: tuple[int, ...] | None = None
    cp: tuple[int, ...] = (1, 2, 4, 8, 16)
    ep: tuple[int, ...] | None = None
    etp_tp: tuple[bool, ...] = (False, True)  # MoE: etp = 1 (False) or etp = tp (True)
    vp: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
    mbs: tuple[int, ...] = (1, 2, 4, 8)
    zero_stage: tuple[int, ...] = ZERO_STAGES
    recompute: tuple[str, ...] = ("none", "selective", "full")
    batch_tolerance: float | None = 0.10
    domain: int | None = None
    tp_aligned: bool = True
    objective: str = "fastest"
    max_gpus: int = MAX_GPUS
    ep_dispatch: str | None = None
    schedule: str = "unknown"
    expert_gemm: str = "auto"
    min_tokens_per_expert: float | None = None
    min_layers_per_chunk: float | None = None
    min_tokens_per_cp_rank: float | None = None

    def __post_init__(self) -> None:
        bad = set(self.recompute) - set(RECOMPUTE_CODE)
        if bad:
            raise ValueError(f"recompute: unknown {sorted(bad)}; valid: {', '.join(RECOMPUTE_CODE)}")
        for name in ("tp", "cp", "vp", "mbs"):
            if any(int(v) < 1 for v in getattr(self, name)):
                raise ValueError(f"{name}: choices must be >= 1")
        if self.batch_tolerance is not None and not 0 <= self.batch_tolerance < 1:
            raise ValueError("batch_tolerance: must be in [0, 1) or None")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective: must be one of {', '.join(OBJECTIVES)} (got {self.objective!r})")
        if self.domain is not None and int(self.domain) < 1:
            raise ValueError("domain: must be >= 1")
        if self.ep_dispatch not in (None, *EP_DISPATCHES):
            raise ValueError(f"ep_dispatch: must be one of {', '.join(EP_DISPATCHES)} (got {self.ep_dispatch!r})")
        comm.schedule_ep_overlap(self.schedule)  # a one-line error for an unknown schedule
        if self.expert_gemm not in options.EXPERT_GEMMS:
            raise ValueError(f"expert_gemm: must be one of {', '.join(options.EXPERT_GEMMS)} (got {self.expert_gemm!r})")
        for name in FLOORS:
            v = getattr(self, name)
            if v is not None and not float(v) >= 0:
                raise ValueError(f"{name}: must be >= 0 or None (got {v!r})")

    def with_(self, **changes: Any) -> "SearchSpace":
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)


def _tp_ok(t: int, domain: int | None, aligned: bool) -> bool:
    return not aligned or domain is None or domain % t == 0 or t % domain == 0


def _choices(model: Model, gpus: int, space: SearchSpace, domain: int | None = None) -> dict[str, list]:
    dom = space.domain if domain is None else domain
    tp = [t for t in space.tp if gpus % t == 0 and _tp_ok(t, dom, space.tp_aligned)]
    pp = sorted({p for p in (space.pp or divisors(gpus)) if p <= model.layers and gpus % p == 0})
    ep = (list(space.ep) if space.ep is not None else divisors(model.moe_experts)) if model.is_moe else [1]
    etp = list(space.etp_tp) if model.is_moe else [True]
    return {"tp": tp, "pp": pp, "cp": list(space.cp), "ep": ep, "etp_tp": etp, "vp": list(space.vp),
            "mbs": list(space.mbs), "zero": list(space.zero_stage),
            "rc": [RECOMPUTE_CODE[r] for r in space.recompute]}


def only(lay: Layout) -> SearchSpace:
    """The space holding only layout ``lay`` (its recompute as the search's, the NVLink domain the GPU's,
    no MoE floors: a stated layout is timed wherever it lies)."""
    return SearchSpace(tp=(int(lay.tp),), pp=(int(lay.pp),), cp=(int(lay.cp),), ep=(int(lay.ep),),
                       etp_tp=(int(lay.etp) == int(lay.tp),), vp=(int(lay.vp),), mbs=(int(lay.mbs),),
                       zero_stage=(int(lay.zero_stage),), recompute=(str(lay.recompute),),
                       **{name: 0.0 for name in FLOORS})


def in_space(lay: Layout, model: Model, space: SearchSpace, domain: int) -> bool:
    """Whether ``space`` (NVLink ``domain``) enumerates layout ``lay``'s values: each of tp
    (domain-aligned), pp, cp, ep, etp, vp, mbs, ZeRO stage and recompute is one of its choices,
    and the layout meets its floors (an MoE layout's tokens per expert and layers per chunk, a
    context-parallel layout's tokens per rank)."""
    ch = _choices(model, int(lay.gpus), space, domain)
    etp_tp = int(lay.etp) == int(lay.tp)  # at tp = 1 the search keeps etp = tp (= 1) only
    return bool(int(lay.tp) in ch["tp"] and int(lay.pp) in ch["pp"] and int(lay.cp) in ch["cp"]
                and int(lay.ep) in ch["ep"] and etp_tp in ch["etp_tp"]
                and int(lay.vp) in ch["vp"] and int(lay.mbs) in ch["mbs"] and int(lay.zero_stage) in ch["zero"]
                and RECOMPUTE_CODE[str(lay.recompute)] in ch["rc"]
                and _in_envelope(model, space, lay))


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


def _n_micro(sequences, per):
    """Micro-batches per data-parallel rank: the batch rule (module docstring); ``per`` = mbs x dp."""
    return np.maximum(1, np.rint(sequences / per).astype(np.int64))


def _product(*arrays):
    """Cartesian product of 1-D arrays, first varying slowest (itertools.product order)."""
    grids = np.meshgrid(*(np.asarray(a) for a in arrays), indexing="ij")
    return [g.ravel() for g in grids]


def candidates(model: Model, gpus: int, space: SearchSpace | None = None, sequences: int | None = 1,
               domain: int | None = None) -> LayoutArray:
    """Every valid layout of ``model`` on exactly ``gpus`` GPUs (module docstring rules).

    ``sequences``: the target global batch (ignored with ``space.batch_tolerance=None``);
    ``domain``: NVLink domain for the tp alignment rule (default ``space.domain``; None: no rule).
    Built in three stages so that rules prune early: the parallel sizes (tp, pp, cp, ep, etp)
    with ``layout``'s validity rules, then the schedule (vp, mbs) with the batch and
    interleaving rules, then ZeRO stage x recompute (no rules: :func:`candidate_grid`).
    Order: ``itertools.product`` over (tp, pp, cp, ep, etp, vp, mbs, zero, recompute), as
    :func:`search_loop`.
    """
    return candidate_grid(model, gpus, space, sequences, domain).expand()


def candidate_grid(model: Model, gpus: int, space: SearchSpace | None = None, sequences: int | None = 1,
                   domain: int | None = None) -> LayoutGrid:
    """:func:`candidates` before its last stage: the valid (tp, pp, cp, ep, etp, vp, mbs) rows x
    the space's ZeRO stages x its recompute modes, as a ``layout.LayoutGrid`` (its ``expand()``
    is :func:`candidates`, same order)."""
    space = SearchSpace() if space is None else space
    ch = _choices(model, gpus, space, domain)
    i64 = np.int64
    if any(not ch[k] for k in ("tp", "pp", "cp", "ep", "etp_tp", "vp", "mbs", "zero", "rc")):
        return LayoutGrid(LayoutArray.from_layouts([]), np.zeros(0, i64), np.zeros(0, i64))
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
    if space.batch_tolerance is None:
        n_micro = pk
        ok = np.ones(k1.size, dtype=bool)
    else:
        n_micro = _n_micro(sequences, m * dk)
        ok = np.abs(n_micro * m * dk - sequences) <= space.batch_tolerance * sequences
    gbs = n_micro * m * dk
    ok &= (v == 1) | ((pk > 1) & (n_micro % pk == 0) & (pk * v <= model.layers))
    ok &= _in_envelope(model, space, SimpleNamespace(tp=t[k1], pp=pk, cp=c[k1], ep=e[k1], etp=etp[k1], vp=v, mbs=m))
    k1, v, m, gbs = (a[ok] for a in (k1, v, m, gbs))
    # stage 3 (the grid): ZeRO stage x recompute, no rules
    tk = t[k1]
    zeros = np.zeros_like(tk)
    rows = LayoutArray(tp=tk, pp=p[k1], cp=c[k1], ep=e[k1], etp=etp[k1], dp=d[k1], vp=v, mbs=m, gbs=gbs,
                       sp=(tk > 1).astype(i64), zero_stage=zeros, recompute=zeros)
    return LayoutGrid(rows, np.asarray(ch["zero"], dtype=i64), np.asarray(ch["rc"], dtype=i64))


def tokens_per_expert(model: Model, lay) -> np.ndarray:
    """Tokens each local expert of an MoE layer gets per micro-batch with balanced routing,
    mbs s / cp x k x ep x etp / (tp E) (tokens split over tp before the dispatch, gathered over etp
    after), for anything with a layout's fields (``Layout``, ``LayoutArray``). Vectorized."""
    f = np.float64
    return (np.asarray(lay.mbs, f) * model.seq_len / np.asarray(lay.cp, f) * model.moe_top_k
            * np.asarray(lay.ep, f) * np.asarray(lay.etp, f) / (np.asarray(lay.tp, f) * model.moe_experts))


def layers_per_chunk(model: Model, lay) -> np.ndarray:
    """Transformer layers per pipeline chunk, layers / (pp vp). Vectorized."""
    return model.layers / (np.asarray(lay.pp, np.float64) * np.asarray(lay.vp, np.float64))


def tokens_per_cp_rank(model: Model, lay) -> np.ndarray:
    """Tokens a context-parallel rank holds per micro-batch, mbs s / cp. Vectorized."""
    return np.asarray(lay.mbs, np.float64) * model.seq_len / np.asarray(lay.cp, np.float64)


def _in_envelope(model: Model, space: SearchSpace, lay) -> np.ndarray:
    """Whether layouts (anything with a layout's fields) meet the space's floors: a context-parallel
    layout's tokens per rank (``min_tokens_per_cp_rank``; cp 1 is exempt), an MoE layout's tokens per
    expert and layers per chunk (``min_tokens_per_expert``, ``min_layers_per_chunk``)."""
    ok = np.ones(np.shape(lay.tp), dtype=bool)
    if space.min_tokens_per_cp_rank:
        ok &= (np.asarray(lay.cp) == 1) | (tokens_per_cp_rank(model, lay)
                                           >= float(space.min_tokens_per_cp_rank) * (1 - 1e-9))
    if not model.is_moe:
        return ok
    if space.min_tokens_per_expert:
        ok &= tokens_per_expert(model, lay) >= float(space.min_tokens_per_expert) * (1 - 1e-9)
    if space.min_layers_per_chunk:
        ok &= layers_per_chunk(model, lay) >= float(space.min_layers_per_chunk) * (1 - 1e-9)
    return ok


def rank_key(objective: str, *, tp, pp, cp, ep, vp, zero_stage, recompute, tps=None, mem=None) -> tuple:
    """The search's ranking as a tuple of keys, smallest first wins (scalars or arrays).

    "fastest": -tokens/s per GPU (rounded to 1e-6), memory bytes (rounded to the byte), then the
    least-parallel keys; "least_parallel": tp x pp x cp, recompute code, ep, pp, vp, ZeRO stage.
    """
    ties = (tp * pp * cp, recompute, ep, pp, vp, zero_stage)
    if objective == "fastest":
        return (-np.round(tps, 6), np.round(mem, 0)) + ties
    if objective == "least_parallel":
        return ties
    raise ValueError(f"objective: must be one of {', '.join(OBJECTIVES)} (got {objective!r})")


def _first(keys: tuple, n: int) -> int:
    """Index of the smallest entry by ``keys`` in priority order (first index among full ties)."""
    idx = np.arange(n)
    for k in keys:
        k = np.broadcast_to(np.asarray(k), (n,))[idx]
        idx = idx[k == k.min()]
        if idx.size == 1:
            break
    return int(idx[0])


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

    fits: some layout fits memory and the batch rule. best: the chosen ``Layout`` (None if not
    fits); metrics: its numbers (tokens/s per GPU with ``_low``/``_high``, MFU, step time and
    breakdown, memory GiB, headroom GiB); step: its ``perf.StepTime`` (one entry) and band
    (``perf.Prediction``); traffic: its per-group traffic (``comm.StepComm``, one entry);
    pareto: rows of the Pareto set ("fastest" only); model, precision, gpu: names (the recipe's and the
    GPU's id); n_layouts: candidates evaluated; n_fit:
    those that fit; min_gpus: smallest GPU count that fits at all (only when nothing fits);
    message: one line for the book; seconds: wall time of the whole search (enumeration,
    memory, step time, ranking, Pareto set); domain: the NVLink domain searched; objective.
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
    sequences: int | None
    step: perf.StepTime | None = None
    band: perf.Prediction | None = None
    traffic: comm.StepComm | None = None
    domain: int | None = None
    objective: str = "fastest"

    @property
    def layouts_per_s(self) -> float:
        return self.n_layouts / self.seconds if self.seconds > 0 else float("inf")


def layout_row(la: LayoutArray, i: int) -> dict[str, Any]:
    """Plain fields of layout ``i`` (recompute by name)."""
    return {"tp": int(la.tp[i]), "pp": int(la.pp[i]), "cp": int(la.cp[i]), "ep": int(la.ep[i]),
            "etp": int(la.etp[i]), "dp": int(la.dp[i]), "vp": int(la.vp[i]), "mbs": int(la.mbs[i]),
            "gbs": int(la.gbs[i]), "zero_stage": int(la.zero_stage[i]),
            "recompute": RECOMPUTE_NAME[int(la.recompute[i])]}


def _rank(objective: str, la: LayoutArray, tps, mem) -> int:
    """Index of the best layout of ``la`` by :func:`rank_key`.

    The full key is built only for the layouts tied on its first entry (tokens/s per GPU to
    1e-6, or tp x pp x cp): full-length temporaries for every key would cost more than the rest.
    """
    if objective == "fastest":
        first = np.round(tps, 6)
        idx = np.flatnonzero(first == first.max())
    else:
        first = la.tp * la.pp * la.cp
        idx = np.flatnonzero(first == first.min())
    sub = la[idx]
    keys = rank_key(objective, tp=sub.tp, pp=sub.pp, cp=sub.cp, ep=sub.ep, vp=sub.vp, zero_stage=sub.zero_stage,
                    recompute=sub.recompute, tps=None if tps is None else tps[idx], mem=mem[idx])
    return int(idx[_first(keys, idx.size)])


#: ``SearchSpace.ep_dispatch`` values (``perf.prepare``'s ``ep_dispatch``).
EP_DISPATCHES: tuple[str, ...] = ("dedup", "alltoall")


def _software(model: Model, space: SearchSpace) -> dict[str, str]:
    """``perf.prepare``'s software options for the space's candidates: the MoE dispatcher
    (default DeepEP-class "dedup" for an MoE; a dense model has no dispatch), the schedule and how
    the routed experts run their GEMMs."""
    disp = (space.ep_dispatch or "dedup") if model.is_moe else "alltoall"
    return {"ep_dispatch": disp, "schedule": space.schedule, "expert_gemm": space.expert_gemm}


def _topology(g: hardware.GPU, space: SearchSpace, topo: Topology | None) -> tuple[Topology, int]:
    topo = Topology.from_gpu(g, domain=space.domain) if topo is None else topo
    return topo, int(np.max(topo.domain))


def _fail(model, precision, g, counts, space, n, seconds, sequences, domain, why: str,
          **memory_options) -> SearchResult:
    fit = min_gpus(model, precision, g, space=space.with_(batch_tolerance=None, objective="least_parallel"),
                   **memory_options)
    need = (f"needs at least {fit.gpus[0]:,}" if fit.fits
            else f"does not fit on any count up to {space.max_gpus:,}")
    counts_s = "/".join(f"{c:,}" for c in counts)
    if why == "memory":
        msg = f"{model.name or model.id} does not fit on {counts_s} GPUs of type {g.label} in {precision.name}; {need}"
    else:
        msg = (f"{model.name or model.id} on {counts_s} GPUs of type {g.label}: no valid layout for a global batch "
               f"of {sequences:,} sequences within the batch tolerance (memory alone {need})")
    return SearchResult(model=model.id or model.name, precision=precision.name, gpu=g.id, gpus=tuple(counts), fits=False,
                        best=None, metrics={}, pareto=[], n_layouts=n, n_fit=0,
                        min_gpus=fit.gpus[0] if fit.fits else None, message=msg, seconds=seconds, sequences=sequences,
                        domain=domain, objective=space.objective)


def search(model: Model, precision: recipes.Recipe, gpu, gpus: int | Sequence[int], *, tokens_per_step: float | None = None,
           gbs: int | None = None, space: SearchSpace | None = None, topo: Topology | None = None,
           band: efficiency.EfficiencyBand | None = None, pareto: bool = True, **memory_options: Any) -> SearchResult:
    """Vectorized layout search (module docstring). ``gpus``: one count or several (Pareto over them).

    ``topo`` overrides the topology (default: the GPU's, with ``space.domain``); ``band``: the
    efficiency band (default ``data/efficiency.yaml``); ``memory_options`` go to
    ``memory.breakdown``. With ``space.batch_tolerance=None`` no token budget is needed.
    """
    space = SearchSpace() if space is None else space
    seqs = None if space.batch_tolerance is None else target_sequences(model, tokens_per_step, gbs)
    return _search(model, precision, hardware.check(gpu), [int(gpus)] if np.ndim(gpus) == 0 else [int(x) for x in gpus],
                   seqs, space, topo, band, pareto, memory_options)


#: (grid, memory) of this process's last searches by their GPU-independent inputs (model, count,
#: space, batch, NVLink domain, precision, memory options): the chapters ask for the same model,
#: count and batch on several GPUs of one domain in turn, and the candidates and their memory
#: do not depend on the GPU (its capacity is applied after). ~5 MB an entry.
_GRIDS: OrderedDict = OrderedDict()
_GRIDS_MAX = 32
_GRIDS_LOCK = threading.Lock()  # a caller may search from threads


def _grid_memory(model, count: int, space: SearchSpace, seqs, domain, precision: recipes.Recipe, memory_options: dict,
                 keep: bool = True) -> tuple[LayoutGrid, np.ndarray]:
    """(:func:`candidate_grid`, the candidates' memory total in bytes, ``memory.breakdown``'s on
    ``grid.expand()``, computed on the grid by :func:`memory.grid_total` unless the reserve varies
    per layout); with ``keep``, remembered in :data:`_GRIDS` (the arrays are never written to)."""
    try:
        key = (model, int(count), space, seqs, domain, precision, tuple(sorted(memory_options.items())))
        hash(key)
    except TypeError:  # an unhashable memory option: computed every time
        key, keep = None, False
    if keep:
        with _GRIDS_LOCK:
            hit = _GRIDS.get(key)
            if hit is not None:
                _GRIDS.move_to_end(key)
                return hit
    grid = candidate_grid(model, count, space, seqs, domain)
    if not len(grid):
        mem = np.zeros(0)
    elif np.ndim(memory_options.get("reserve_gib", 0.0)) == 0:
        mem = memory.grid_total(model, grid, precision, **memory_options)
    else:
        mem = memory.breakdown(model, grid.expand(), precision, **memory_options).total
    if keep:
        with _GRIDS_LOCK:
            _GRIDS[key] = (grid, mem)
            while len(_GRIDS) > _GRIDS_MAX:
                _GRIDS.popitem(last=False)
    return grid, mem


def _search(model, precision, g, counts, seqs, space, topo, band, pareto, memory_options, fail=True):
    band = efficiency.default_band() if band is None else band
    topo, domain = _topology(g, space, topo)
    fastest = space.objective == "fastest"
    cap = memory.capacity_gib(g) * memory.GIB
    t0 = time.perf_counter()
    parts, n_total = [], 0
    for count in counts:
        grid, mem = _grid_memory(model, count, space, seqs, domain, precision, memory_options, keep=fastest)
        n_total += len(grid)
        if not len(grid):
            continue
        ok = mem <= cap
        if not ok.any():
            continue
        rows = np.flatnonzero(ok)
        sub = grid.take(rows)
        inp = (perf.prepare(model, sub, precision, g, topo, **_software(model, space), grid=(grid, rows))
               if fastest else None)
        parts.append((sub, mem[rows], perf.evaluate(inp, band.value) if fastest else None, inp))
    if not parts:
        if not fail:
            return None
        return _fail(model, precision, g, counts, space, n_total, time.perf_counter() - t0, seqs, domain,
                     "memory" if n_total else "batch", **memory_options)
    if len(parts) == 1:
        la, mem, st = parts[0][:3]
    else:
        la = LayoutArray.concat([p[0] for p in parts])
        mem = np.concatenate([p[1] for p in parts])
        st = perf.StepTime.concat([p[2] for p in parts]) if fastest else None
    i = _rank(space.objective, la, st.tokens_per_s_per_gpu if fastest else None, mem)
    best = la.layout(i)
    if fastest:  # the prepared inputs of the best layout
        j, k = i, 0
        while j >= len(parts[k][0]):
            j -= len(parts[k][0])
            k += 1
        inp1 = parts[k][3].take([j])
    else:
        inp1 = perf.prepare(model, la.take([i]), precision, g, topo, **_software(model, space))
    pb = perf.evaluate_band(inp1, band)
    metrics = _metrics(pb, mem[i], cap)
    rows = []
    if pareto and fastest:
        gpus_of = la.gpus
        cluster = st.tokens_per_s_per_gpu * gpus_of
        head = (cap - mem) / memory.GIB
        pm = np.flatnonzero(pareto_mask(cluster, head, gpus_of))
        pm = pm[np.argsort(-cluster[pm], kind="stable")]
        rows = [{**layout_row(la, q), "gpus": int(gpus_of[q]), "tokens_per_s": float(cluster[q]),
                 "tokens_per_s_per_gpu": float(st.tokens_per_s_per_gpu[q]), "mfu": float(st.mfu[q]),
                 "memory_gib": float(mem[q] / memory.GIB), "headroom_gib": float(head[q])} for q in pm]
    seconds = time.perf_counter() - t0
    what = "best" if fastest else "least model-parallel"
    msg = (f"{what} of {n_total:,} layouts ({len(la):,} fit): {label(best, model)} at "
           f"{metrics['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU")
    return SearchResult(model=model.id or model.name, precision=precision.name, gpu=g.id, gpus=tuple(counts), fits=True,
                        best=best, metrics=metrics, pareto=rows, n_layouts=n_total, n_fit=len(la), min_gpus=None,
                        message=msg, seconds=seconds, sequences=seqs, step=pb.value, band=pb, traffic=inp1.comm,
                        domain=domain, objective=space.objective)


#: GPU counts :func:`min_gpus` tries by default: 1, 2, 4, then whole 8-GPU nodes.
def default_counts(max_gpus: int = MAX_GPUS) -> list[int]:
    """1, 2, 4, then every multiple of 8 up to ``max_gpus``."""
    return [n for n in (1, 2, 4) if n <= max_gpus] + list(range(8, max_gpus + 1, 8))


def _state_bound(model: Model, precision: recipes.Recipe, **memory_options: Any) -> float:
    """Bytes of model state with everything sharded and no activations: a lower bound for a screen."""
    o = memory.resolve_options(precision, **{k: v for k, v in memory_options.items() if k != "reserve_gib"})
    per_param = o["param_bytes"] + o["grad_bytes"] + o["optimizer_bytes"]
    if o["lowp_params"]:
        per_param = per_param - o["param_bytes"] + min(o["lowp"], o["param_bytes"])
    return model.total_params * per_param


def min_gpus(model: Model, precision: recipes.Recipe, gpu, *, space: SearchSpace | None = None, sequences: int | None = None,
             counts: Sequence[int] | None = None, band: efficiency.EfficiencyBand | None = None,
             **memory_options: Any) -> SearchResult:
    """The smallest GPU count where ``space`` has a layout that fits, searched there.

    ``counts``: counts to try in increasing order (default :func:`default_counts` up to
    ``space.max_gpus``); ``sequences``: the global batch (used unless ``space.batch_tolerance``
    is None). Counts are screened first with a lower bound (model state fully sharded, no
    activations), then with the least-memory schedule of the space (vp 1, the smallest
    micro-batch: both only add activations) before the full space is searched. Returns the
    :func:`search` result at that count (``fits`` False, ``message`` empty, when none fits).
    """
    space = SearchSpace() if space is None else space
    g = hardware.check(gpu)
    counts = sorted(set(int(c) for c in counts)) if counts is not None else default_counts(space.max_gpus)
    reserve = float(memory_options.get("reserve_gib", options.RESERVE_GIB))
    usable = (memory.capacity_gib(g) - reserve) * memory.GIB
    bound = _state_bound(model, precision, **memory_options)
    screen = space.with_(vp=(1,), mbs=(min(space.mbs),), objective="least_parallel")
    t0 = time.perf_counter()
    for n in counts:
        if usable <= 0 or bound / n > usable:
            continue
        if _search(model, precision, g, [n], sequences, screen, None, band, False, memory_options, fail=False) is None:
            continue
        return _search(model, precision, g, [n], sequences, space, None, band, False, memory_options)
    return SearchResult(model=model.id or model.name, precision=precision.name, gpu=g.id, gpus=(), fits=False, best=None,
                        metrics={}, pareto=[], n_layouts=0, n_fit=0, min_gpus=None, message="",
                        seconds=time.perf_counter() - t0, sequences=sequences, objective=space.objective)


def _metrics(pb: perf.Prediction, mem_bytes: float, cap: float) -> dict[str, Any]:
    st = pb.value
    out = {"tokens_per_s_per_gpu": float(st.tokens_per_s_per_gpu[0]), "mfu": float(st.mfu[0]),
           "model_tflops_per_gpu": float(st.model_tflops_per_gpu[0]), "step_s": float(st.step_s[0]),
           "compute_s": float(st.compute_s[0]), "exposed_comm_s": float(st.exposed_comm_s[0]),
           "bubble_s": float(st.bubble_s[0]), "other_s": float(st.other_s[0]),
           "tokens_per_step": float(st.tokens_per_step[0]),
           "memory_gib": float(mem_bytes / memory.GIB), "headroom_gib": float((cap - mem_bytes) / memory.GIB),
           "tokens_per_s_per_gpu_low": float(pb.low.tokens_per_s_per_gpu[0]),
           "tokens_per_s_per_gpu_high": float(pb.high.tokens_per_s_per_gpu[0])}
    return out


# =========================================================================================
# The same search as a plain per-layout loop (reference and benchmark)
# =========================================================================================
def _scalar_candidate(model: Model, gpus: int, sequences: int | None, space: SearchSpace, t, p, c, e, et, v, m, z, r):
    """The vectorized rules of :func:`candidates` for one combination; a ``Layout`` or None."""
    if gpus % (t * p * c):
        return None
    if model.is_moe and t == 1 and not et:
        return None
    d = gpus // (t * p * c)
    if space.batch_tolerance is None:
        n_micro = p
    else:
        n_micro = int(_n_micro(sequences, m * d))
        if abs(n_micro * m * d - sequences) > space.batch_tolerance * sequences:
            return None
    gbs = n_micro * m * d
    if v > 1 and not (p > 1 and n_micro % p == 0 and p * v <= model.layers):
        return None
    if not _in_envelope(model, space, SimpleNamespace(tp=t, pp=p, cp=c, ep=e, etp=t if et else 1, vp=v, mbs=m)):
        return None
    try:
        lay = Layout(tp=t, pp=p, cp=c, dp=d, ep=e, etp=t if et else 1, vp=v, mbs=m, gbs=gbs,
                     zero_stage=z, recompute=RECOMPUTE_NAME[r])
        lay.check(model)
    except ValueError:
        return None
    return lay


def search_loop(model: Model, precision: recipes.Recipe, gpu, gpus: int, *, tokens_per_step: float | None = None,
                gbs: int | None = None, space: SearchSpace | None = None, topo: Topology | None = None,
                eff: efficiency.Efficiency | None = None, limit: int | None = None,
                **memory_options: Any) -> dict[str, Any]:
    """The search as a per-layout Python loop: same candidates, same model, scalar calls.

    Returns ``{"best": Layout | None, "tokens_per_s_per_gpu", "memory_gib", "n_layouts",
    "n_fit", "seconds"}``; ``limit`` stops after that many candidate layouts (benchmarks).
    """
    space = SearchSpace() if space is None else space
    g = hardware.check(gpu)
    seqs = None if space.batch_tolerance is None else target_sequences(model, tokens_per_step, gbs)
    eff = efficiency.default_efficiency() if eff is None else eff
    topo, domain = _topology(g, space, topo)
    cap = memory.capacity_gib(g) * memory.GIB
    ch = _choices(model, gpus, space, domain)
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
            st = perf.step_time(model, lay, precision, g, topo, eff=eff, **_software(model, space))
            tps = float(st.tokens_per_s_per_gpu[0])
            key = rank_key(space.objective, tp=lay.tp, pp=lay.pp, cp=lay.cp, ep=lay.ep, vp=lay.vp,
                           zero_stage=lay.zero_stage, recompute=RECOMPUTE_CODE[lay.recompute], tps=tps, mem=mem)
            if best_key is None or key < best_key:
                best, best_key, best_vals = lay, key, (tps, mem)
        if limit is not None and n >= limit:
            break
    return {"best": best, "tokens_per_s_per_gpu": best_vals[0],
            "memory_gib": None if best_vals[1] is None else best_vals[1] / memory.GIB,
            "n_layouts": n, "n_fit": n_fit, "seconds": time.perf_counter() - t0}


def benchmark(model: Model, precision: recipes.Recipe, gpu, gpus: int, *, tokens_per_step: float, repeats: int = 3,
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
    return {"model": model.id or model.name, "gpu": hardware.check(gpu).id,
            "gpus": gpus, "precision": precision.name, "n_layouts": res.n_layouts, "n_fit": res.n_fit,
            "vectorized_seconds": vec_s, "vectorized_layouts_per_s": vec_rate,
            "loop_layouts": loop["n_layouts"], "loop_seconds": loop["seconds"], "loop_layouts_per_s": loop_rate,
            "speedup": vec_rate / loop_rate, "best": label(res.best, model) if res.fits else res.message,
            "tokens_per_s_per_gpu": res.metrics.get("tokens_per_s_per_gpu"),
            "tokens_per_s_per_gpu_low": res.metrics.get("tokens_per_s_per_gpu_low"),
            "tokens_per_s_per_gpu_high": res.metrics.get("tokens_per_s_per_gpu_high"),
            "mfu": res.metrics.get("mfu")}


#: Data files the search reads beyond its arguments (calibration, link efficiencies, systems, the MoE
#: dispatch kernels' measured NVLink rate: comm.ep_link_curve).
SEARCH_DATA: tuple[str, ...] = ("efficiency.yaml", "collectives.csv", "systems.csv", "kernel_benchmarks.csv")


def _search_by_value(model: Model, precision: recipes.Recipe, gpu: hardware.GPU, counts: tuple[int, ...],
                     sequences: int | None, space: SearchSpace, topo: Topology | None,
                     band: efficiency.EfficiencyBand | None, pareto: bool, memory_options: dict[str, Any]) -> SearchResult:
    """:func:`search` on arguments in one canonical form (see :func:`cached_search`)."""
    return _search(model, precision, gpu, list(counts), sequences, space, topo, band, pareto, memory_options)


_cached_by_value = memo.cached(_search_by_value, data=SEARCH_DATA, name=f"{__name__}.search")


def cached_search(model: Model, precision: recipes.Recipe, gpu, gpus: int | Sequence[int], *,
                  tokens_per_step: float | None = None, gbs: int | None = None, space: SearchSpace | None = None,
                  topo: Topology | None = None, band: efficiency.EfficiencyBand | None = None, pareto: bool = True,
                  **memory_options: Any) -> SearchResult:
    """:func:`search`, cached on disk by ``scaletax.memo`` (the content hash of its arguments, with
    a GPU or model by its fields, this module's code and :data:`SEARCH_DATA`); a plain call when
    no cache folder is set. Chapters call it at their search boundary, so chapters and builds
    share every search. The key is taken on what the search depends on, so that the same search
    asked two ways is one entry: the GPU resolved, the counts as a tuple, the token budget as the
    global batch in sequences it gives (none without a batch rule), and the space with its NVLink
    domain filled in (``domain=None`` is the GPU's own domain, :func:`_topology`)."""
    space = SearchSpace() if space is None else space
    g = hardware.check(gpu)
    if space.domain is None and topo is None:
        space = space.with_(domain=int(g.nvlink_domain))
    seqs = None if space.batch_tolerance is None else target_sequences(model, tokens_per_step, gbs)
    counts = (int(gpus),) if np.ndim(gpus) == 0 else tuple(int(x) for x in gpus)
    return _cached_by_value(model, precision, g, counts, seqs, space, topo, band, pareto, dict(memory_options))


#: :func:`min_gpus` cached on disk like :func:`cached_search`.
cached_min_gpus = memo.cached(min_gpus, data=SEARCH_DATA)


__all__ = ["MAX_GPUS", "OBJECTIVES", "SEARCH_DATA", "SearchResult", "SearchSpace", "TP_CHOICES", "ZERO_STAGES", "benchmark",
           "cached_min_gpus", "cached_search", "candidate_grid", "candidates", "default_counts", "in_space", "layout_row", "min_gpus", "only",
           "pareto_mask", "rank_key", "search", "search_loop", "target_sequences", "tokens_per_expert", "layers_per_chunk"]
