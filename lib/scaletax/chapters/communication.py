"""Studies for the communication chapter: the communication tax over cluster and domain size.

The collective and per-step traffic model is :mod:`scaletax.comm` on the topology of
:mod:`scaletax.topology`; this module only sweeps it. It answers, for a model on a GPU type:

- which layout is fastest on ``n`` GPUs at a fixed global batch (:func:`best_layout`), and what
  share of its step time is communication that compute does not hide (the *communication tax*);
- how that share moves with the cluster size (:func:`tax_rows`) and the NVLink domain size
  (:func:`domain_rows`), where the data-parallel groups land (:func:`dp_rows`), what an NVL72
  domain changes against an 8-GPU one (:func:`nvl72_rows`), and how the MoE all-to-all depends
  on whether the experts sit inside one domain (:func:`ep_rows`, :func:`alltoall_rows`);
- the achieved bus bandwidth curves of :func:`scaletax.comm.predicted_busbw` with the published
  calibration points (:func:`busbw_rows`, :func:`calibration_rows`).

Step time: by default (:data:`STEP_MODEL` "perf") the book's step-time model,
:func:`scaletax.perf.prepare` and :func:`scaletax.perf.evaluate` with its calibrated
parameters; t_compute is then its tensor-core plus memory-bound time. The stand-in "flat"
model, kept for comparison and for tests of the sweeps::

    t_step = t_compute + t_bubble + t_exposed
    t_compute = hardware FLOPs per step per GPU / (dense peak x COMPUTE_EFFICIENCY)
    t_bubble  = (pp - 1) / (vp * n_micro) * t_compute        (Narayanan et al. 2021, Sec. 2.2)
    t_exposed = scaletax.comm.exposed_comm(step_traffic(...), t_compute, overlap).seconds

In both, the communication tax is t_exposed / t_step.

Every array function is vectorized over a :class:`~scaletax.layout.LayoutArray`; the sweeps
loop only over the handful of (model, GPU, count, domain) cells of a chapter.

Layout search (:func:`candidates`): tp a power of two that divides the NVLink domain (a TP
group never straddles two domains) and the head counts; pp every divisor of the remaining
count up to the layer count; cp 1, or 1 and 2 for sequences of 8192 tokens or more; vp 1, 2 or 4; recompute none, selective or full;
ZeRO-1 (distributed optimizer); one sequence per micro-batch; MoE: ep over the divisors of the
expert count with etp = 1 (expert tensor parallelism off, as Megatron-Bridge recipes for
DeepSeek-V3-style models set it). The global batch is the scenario's token budget per step in
whole sequences, rounded to a whole number of micro-batches per data-parallel rank; layouts with
more data-parallel ranks than sequences in the batch are not considered. Only layouts whose
heaviest pipeline stage fits in memory (:func:`scaletax.memory.fits`) compete.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from scaletax import comm, hardware, memory, recipes
from scaletax.comm import GROUPS, Overlap, WireFormat
from scaletax.models import Model
from scaletax.layout import Layout, LayoutArray, group_strides
from scaletax.topology import Topology, placement

#: ASSUMPTION (the one free parameter of the fallback compute time): the fraction of the dense
#: peak FLOP/s of the training precision that the GEMM-heavy compute of a step sustains, with
#: communication and pipeline bubbles counted separately. 0.5 is between the ~0.4 MFU of large
#: BF16 runs that include communication and bubbles (Llama 3 405B, arXiv 2407.21783 Table 4)
#: and the ~0.7 of large isolated GEMMs; it is not fitted to anything.
COMPUTE_EFFICIENCY = 0.5

#: NVLink domain sizes of the domain sweep (8: HGX; 36, 72: GB200 NVL36 / NVL72; 144: a
#: two-rack or Rubin-Ultra-class domain).
DOMAIN_SWEEP = (8, 16, 36, 72, 144)

#: Candidate choices of the layout search (see the module docstring).
TP_CHOICES = (1, 2, 4, 8, 16, 32, 64)
CP_CHOICES = (1, 2)
#: ASSUMPTION: context parallelism is considered only for sequences of at least 8192 tokens.
#: Shorter sequences split over two ranks give attention chunks too small to keep the kernels
#: efficient, which the compute model (a flat efficiency) would not see; Megatron-Bridge
#: recipes enable CP only for long-context runs.
CP_MIN_SEQ = 8192
VP_CHOICES = (1, 2, 4)
RECOMPUTE_CHOICES = ("none", "selective", "full")

#: Message sizes of the bus-bandwidth curves, bytes (16 KiB .. 4 GiB, two points per octave).
MESSAGE_SIZES = 2.0 ** np.arange(14, 32.5, 0.5)
#: Group size of the "one GPU per domain" curves: a data-parallel-like group on the NICs only,
#: the setting of the InfiniBand calibration row (16 GPUs, one per node).
NIC_GROUP = 16

SCOPES = ("one NVLink domain", "two NVLink domains", "one GPU per domain")


# =========================================================================================
# Compute, bubble and the global batch
# =========================================================================================
def target_sequences(model: Model, batch_tokens: int) -> int:
    """Sequences per global batch: the token budget per step in whole sequences (at least 1)."""
    return max(1, int(round(batch_tokens / model.seq_len)))


def with_batch(layouts: LayoutArray, sequences: int) -> tuple[LayoutArray, np.ndarray]:
    """Layouts with gbs = the batch rounded to whole micro-batches per DP rank, and a validity mask.

    n_micro = max(1, round(sequences / (mbs * dp))); invalid where mbs * dp > sequences (the
    layout would need a larger batch than the scenario's).
    """
    per = layouts.mbs * layouts.dp
    n_micro = np.maximum(1, np.rint(sequences / per)).astype(np.int64)
    return layouts.replace(gbs=n_micro * per), per <= sequences


def compute_seconds(model: Model, layouts: LayoutArray, gpu, precision: str,
                    efficiency: float = COMPUTE_EFFICIENCY) -> np.ndarray:
    """Compute seconds per step per GPU: hardware FLOPs of the global batch / GPUs / achieved FLOP/s.

    Hardware FLOPs per token include recomputation (:meth:`Model.hardware_flops_per_token`).
    """
    g = hardware.get(gpu) if isinstance(gpu, str) else gpu
    flops_tok = np.array([model.hardware_flops_per_token(r) for r in ("none", "selective", "full")])
    tokens = layouts.gbs.astype(float) * model.seq_len
    flops_gpu = flops_tok[layouts.recompute] * tokens / layouts.gpus
    return flops_gpu / (g.peak_flops(recipes.training_precision(g, precision)) * efficiency)


def bubble_seconds(layouts: LayoutArray, t_compute) -> np.ndarray:
    """Pipeline fill and drain of (interleaved) 1F1B: (pp-1)/(vp*n_micro) * t_compute."""
    n_micro = np.maximum(layouts.n_micro, 1).astype(float)
    return (layouts.pp - 1.0) / (layouts.vp * n_micro) * np.asarray(t_compute, dtype=float)


# =========================================================================================
# Candidates, evaluation, best layout
# =========================================================================================
def tp_choices(model: Model, domain: int) -> list[int]:
    """TP sizes: powers of two that divide the domain and the (KV) head counts."""
    return [t for t in TP_CHOICES if domain % t == 0 and model.heads % t == 0 and model.kv_heads % t == 0]


def candidates(model: Model, gpus: int, domain: int, sequences: int, *, ep=None) -> LayoutArray:
    """Every layout of the search space (module docstring) on exactly ``gpus`` GPUs.

    ``ep``: expert-parallel sizes to allow (default: all divisors of the expert count; 1 for a
    dense model). Global batch set by :func:`with_batch`; invalid ones are dropped.
    """
    eps = None if ep is None else [int(e) for e in np.atleast_1d(ep)]
    cps = CP_CHOICES if model.seq_len >= CP_MIN_SEQ else (1,)
    if model.is_moe:
        la = LayoutArray.grid(gpus, model, tp=tp_choices(model, domain), cp=cps, ep=eps, etp=[1],
                              vp=VP_CHOICES, recompute=RECOMPUTE_CHOICES)
    else:
        la = LayoutArray.grid(gpus, model, tp=tp_choices(model, domain), cp=cps, ep=[1],
                              vp=VP_CHOICES, recompute=RECOMPUTE_CHOICES)
    if len(la) == 0:
        return la
    la, ok = with_batch(la, sequences)
    la = la[np.flatnonzero(ok)]
    # interleaving needs more than one stage and at least vp * pp micro-batch slots of layers
    keep = (la.vp == 1) | (la.pp > 1)
    return la[np.flatnonzero(keep)]


@dataclass(frozen=True)
class Evaluation:
    """Step-time terms of each layout (arrays, seconds per step per GPU).

    t_compute: compute (with ``step_model="perf"``: tensor-core work plus memory-bound kernels);
    t_bubble: pipeline fill and drain; step: the per-group traffic (:class:`comm.StepComm`);
    exposed: exposed seconds per group; t_step: the sum of compute, bubble and exposed.
    """

    layouts: LayoutArray
    fits: np.ndarray
    t_compute: np.ndarray
    t_bubble: np.ndarray
    step: comm.StepComm
    exposed: dict

    @property
    def t_exposed(self) -> np.ndarray:
        return sum(np.asarray(v, dtype=float) for v in self.exposed.values()) * np.ones_like(self.t_compute)

    @property
    def t_step(self) -> np.ndarray:
        return self.t_compute + self.t_bubble + self.t_exposed

    @property
    def share(self) -> np.ndarray:
        """Exposed communication / step time (the communication tax)."""
        return self.t_exposed / self.t_step


#: Which step-time model :func:`evaluate` uses by default: "perf" (the book's calibrated
#: step-time model, :func:`scaletax.perf.prepare` / :func:`scaletax.perf.evaluate`) or "flat"
#: (this module's stand-in: compute at :data:`COMPUTE_EFFICIENCY` of the dense peak).
STEP_MODEL = "perf"


def applied_overlap(overlap: Overlap | None = None, step_model: str | None = None) -> Overlap:
    """The overlap fractions a step model applies: ``overlap`` (default :class:`comm.Overlap`)
    as is under "flat", times the calibrated ``overlap_scale`` under "perf"."""
    mode = STEP_MODEL if step_model is None else step_model
    if mode == "perf":
        from scaletax import perf

        return perf.default_efficiency().overlap(overlap)
    return Overlap() if overlap is None else overlap


def evaluate(model: Model, layouts: LayoutArray, gpu, *, domain=None, precision: str = "fp8",
             allowed: Sequence[str] = recipes.TRAINING,
             overlap: Overlap | None = None, efficiency: float = COMPUTE_EFFICIENCY,
             step_model: str | None = None, perf_eff=None) -> Evaluation:
    """Memory fit, compute, bubble and exposed communication of each layout on ``gpu``.

    ``step_model`` (default :data:`STEP_MODEL`): "perf": :func:`scaletax.perf.prepare` /
    :func:`scaletax.perf.evaluate` with ``perf_eff`` (default: the calibrated parameters; it
    scales ``overlap`` by its ``overlap_scale`` and deduplicates the MoE dispatch per domain),
    compute = its tensor-core plus memory-bound time; "flat": compute = :func:`compute_seconds`
    with ``efficiency``, bubble = :func:`bubble_seconds`, exposed =
    :func:`scaletax.comm.exposed_comm`.
    """
    g = hardware.get(gpu) if isinstance(gpu, str) else gpu
    prec = recipes.training_precision(g, precision, allowed)
    topo = Topology.from_gpu(g, domain=domain)
    fit = memory.fits(model, layouts, g, prec)
    mode = STEP_MODEL if step_model is None else step_model
    if mode == "perf":
        from scaletax import perf

        inp = perf.prepare(model, layouts, prec, g, topo, WireFormat.for_recipe(prec))
        st = perf.evaluate(inp, perf_eff, overlap)
        return Evaluation(layouts=layouts, fits=fit, t_compute=st.compute_s + st.other_s, t_bubble=st.bubble_s,
                          step=inp.comm, exposed=dict(st.comm_groups))
    if mode != "flat":
        raise ValueError(f"step_model must be 'flat' or 'perf' (got {mode!r})")
    tc = compute_seconds(model, layouts, g, prec, efficiency)
    st = comm.step_traffic(model, layouts, topo, WireFormat.for_recipe(prec))
    return Evaluation(layouts=layouts, fits=fit, t_compute=tc, t_bubble=bubble_seconds(layouts, tc),
                      step=st, exposed=dict(comm.exposed_comm(st, tc, overlap).groups))


def layout_label(lay: Layout, model: Model | None = None) -> str:
    """Short text of a layout, e.g. ``TP8 PP16 DP128 VP2, selective`` (EP/ETP for MoE)."""
    parts = [f"TP{lay.tp}", f"PP{lay.pp}"]
    if lay.cp > 1:
        parts.append(f"CP{lay.cp}")
    parts.append(f"DP{lay.dp}")
    if model is None or model.is_moe:
        if lay.ep > 1 or (model is not None and model.is_moe):
            parts.append(f"EP{lay.ep}")
    if lay.vp > 1:
        parts.append(f"VP{lay.vp}")
    text = " ".join(parts)
    return text if lay.recompute == "none" else f"{text}, {lay.recompute}"


def _row(model: Model, gpu, ev: Evaluation, i: int, gpus: int, domain: int) -> dict:
    """One result row: layout, step terms, and traffic per group of layout ``i``."""
    lay = ev.layouts.layout(i)
    g = hardware.get(gpu) if isinstance(gpu, str) else gpu
    row = {
        "model": model.id, "gpu": g.id, "label": g.label, "status": g.status, "gpus": int(gpus),
        "domain": int(domain), "layout": layout_label(lay, model), "tp": lay.tp, "pp": lay.pp,
        "cp": lay.cp, "dp": lay.dp, "ep": lay.ep, "etp": lay.etp, "edp": lay.edp, "vp": lay.vp,
        "recompute": lay.recompute, "gbs": lay.gbs, "n_micro": lay.n_micro,
        "t_compute": float(ev.t_compute[i]), "t_bubble": float(ev.t_bubble[i]),
        "t_comm": float(ev.step.seconds[i]), "t_exposed": float(ev.t_exposed[i]),
        "t_step": float(ev.t_step[i]), "share": float(ev.share[i]),
        "nic_gb": float(ev.step.nic_bytes[i]) / 1e9, "nvlink_gb": float(ev.step.nvlink_bytes[i]) / 1e9,
    }
    for name in GROUPS:
        gt = ev.step.groups[name]
        row[f"{name}_s"] = float(np.ravel(gt.seconds)[i if np.size(gt.seconds) > 1 else 0])
        row[f"{name}_exposed"] = float(np.ravel(ev.exposed[name])[i if np.size(ev.exposed[name]) > 1 else 0])
        row[f"{name}_nic_gb"] = float(np.ravel(gt.nic_bytes)[i if np.size(gt.nic_bytes) > 1 else 0]) / 1e9
        row[f"{name}_nvlink_gb"] = float(np.ravel(gt.nvlink_bytes)[i if np.size(gt.nvlink_bytes) > 1 else 0]) / 1e9
    # where the data-parallel groups sit: dense dp*cp group (stride tp), expert edp group
    strides = group_strides(lay)
    for name, key in (("dp", "dp_cp"), ("edp", "edp")):
        size, stride = strides[key]
        n_in, n_out = placement(size, stride, domain)
        row[f"{name}_size"] = int(size)
        row[f"{name}_per_domain"] = int(n_in)
        row[f"{name}_domains"] = int(n_out)
    size, stride = strides["ep"]
    n_in, n_out = placement(size, stride, domain)
    row["ep_per_domain"], row["ep_domains"] = int(n_in), int(n_out)
    return row


def best_layout(model: Model, gpu, gpus: int, *, batch_tokens: int, domain: int | None = None,
                precision: str = "fp8", allowed: Sequence[str] = recipes.TRAINING, ep=None,
                overlap: Overlap | None = None,
                efficiency: float = COMPUTE_EFFICIENCY, step_model: str | None = None) -> dict | None:
    """The fastest layout that fits (least step time) on ``gpus`` GPUs, as a result row.

    None when no candidate fits in memory. ``domain`` overrides the GPU's NVLink domain;
    ``ep`` restricts the expert-parallel sizes.
    """
    g = hardware.get(gpu) if isinstance(gpu, str) else gpu
    dom = int(g.nvlink_domain if domain is None else domain)
    la = candidates(model, gpus, dom, target_sequences(model, batch_tokens), ep=ep)
    if len(la) == 0:
        return None
    ev = evaluate(model, la, g, domain=dom, precision=precision, allowed=allowed, overlap=overlap,
                  efficiency=efficiency,
                  step_model=step_model)
    t = np.where(ev.fits, ev.t_step, np.inf)
    if not np.isfinite(t).any():
        return None
    # ties (equal step time to 1e-9 relative): fewer model-parallel GPUs, then less recompute
    order = np.lexsort((la.recompute, la.tp * la.pp * la.cp, np.round(t / t[np.isfinite(t)].min(), 9)))
    return _row(model, g, ev, int(order[0]), gpus, dom)


# =========================================================================================
# Sweeps for the chapter
# =========================================================================================
def tax_rows(model_ids, gpu_ids, sizes, *, batch_tokens: int, precision: str = "fp8",
             allowed: Sequence[str] = recipes.TRAINING,
             overlap: Overlap | None = None, step_model: str | None = None) -> list[dict]:
    """Best layout and its communication tax per model, GPU (own domain) and cluster size.

    Cells where nothing fits are returned with ``fits=False`` and None metrics.
    """
    from scaletax import models as _models

    rows = []
    for mid in model_ids:
        m = _models.get(mid)
        for gid in gpu_ids:
            for n in sizes:
                r = best_layout(m, gid, int(n), batch_tokens=batch_tokens, precision=precision, allowed=allowed,
                                overlap=overlap,
                                step_model=step_model)
                rows.append(_fill(r, m, gid, n, hardware.get(gid).nvlink_domain))
    return rows


def _fill(row, model, gpu_id, n, domain) -> dict:
    if row is not None:
        return {**row, "fits": True}
    g = hardware.get(gpu_id)
    return {"model": model.id, "gpu": g.id, "label": g.label, "status": g.status, "gpus": int(n),
            "domain": int(domain), "layout": None, "share": None, "t_step": None, "t_exposed": None,
            "fits": False}


def domain_rows(model_ids, gpu_id: str, sizes, domains=DOMAIN_SWEEP, *, batch_tokens: int,
                precision: str = "fp8", allowed: Sequence[str] = recipes.TRAINING, overlap: Overlap | None = None,
                step_model: str | None = None) -> list[dict]:
    """Best layout per model, cluster size and NVLink domain size, the GPU held fixed."""
    from scaletax import models as _models

    rows = []
    for mid in model_ids:
        m = _models.get(mid)
        for n in sizes:
            for d in domains:
                r = best_layout(m, gpu_id, int(n), batch_tokens=batch_tokens, domain=int(d),
                                precision=precision, allowed=allowed, overlap=overlap, step_model=step_model)
                rows.append(_fill(r, m, gpu_id, n, d))
    return rows


def nvl72_rows(rows: list[dict], small: int = 8, large: int = 72) -> list[dict]:
    """Pairs of :func:`domain_rows` cells, domain ``small`` vs ``large``, per model and size.

    Columns: model, gpus, layout_small, layout_large, share_small, share_large, points (share
    difference, percentage points), exposed_cut (1 - exposed_large/exposed_small), speedup
    (t_step small / t_step large).
    """
    by = {(r["model"], r["gpus"], r["domain"]): r for r in rows}
    out = []
    for (mid, n, d), r8 in by.items():
        if d != small:
            continue
        r72 = by.get((mid, n, large))
        if r72 is None or not (r8["fits"] and r72["fits"]):
            continue
        cut = 1.0 - r72["t_exposed"] / r8["t_exposed"] if r8["t_exposed"] > 0 else 0.0
        out.append({"model": mid, "gpus": n, "layout_small": r8["layout"], "layout_large": r72["layout"],
                    "share_small": r8["share"], "share_large": r72["share"],
                    "points": 100.0 * (r8["share"] - r72["share"]), "exposed_cut": cut,
                    "speedup": r8["t_step"] / r72["t_step"]})
    return out


def dp_rows(tax: list[dict], gpus: int) -> list[dict]:
    """Where the data-parallel groups of the best layouts on ``gpus`` GPUs sit, and their cost.

    One row per model and GPU for the dense-parameter group (dp*cp ranks) and, for MoE models,
    one for the expert-parameter group (edp ranks).
    """
    out = []
    for r in tax:
        if r["gpus"] != gpus:
            continue
        if not r["fits"]:
            out.append({"model": r["model"], "gpu": r["gpu"], "label": r["label"], "group": "dp",
                        "who": _model_name(r["model"]), "layout": "does not fit", "size": None, "per_domain": None, "domains": None,
                        "nic_gb": None, "seconds": None, "exposed": None})
            continue
        groups = ("dp", "edp") if r.get("ep", 1) > 1 or r["edp_size"] != r["dp_size"] else ("dp",)
        for name in groups:
            out.append({"model": r["model"], "gpu": r["gpu"], "label": r["label"], "group": name,
                        "who": _model_name(r["model"]) + (", experts" if name == "edp" else ""),
                        "layout": r["layout"], "size": r[f"{name}_size"], "per_domain": r[f"{name}_per_domain"],
                        "domains": r[f"{name}_domains"], "nic_gb": r[f"{name}_nic_gb"],
                        "nvlink_gb": r[f"{name}_nvlink_gb"], "seconds": r[f"{name}_s"],
                        "exposed": r[f"{name}_exposed"], "t_step": r["t_step"]})
    return out


def ep_rows(model: Model, gpu_ids, gpus: int, eps=(8, 64), domains=(), *, batch_tokens: int,
            precision: str = "fp8", allowed: Sequence[str] = recipes.TRAINING, overlap: Overlap | None = None,
            step_model: str | None = None) -> list[dict]:
    """Best layout with the expert-parallel size held at each of ``eps``, per GPU and domain.

    For each GPU the domains are its own NVLink domain plus those of ``domains`` (the same GPU
    with another domain is a what-if; ``own_domain`` says which). Rows carry the EP traffic;
    EP sizes that do not divide the expert count are skipped.
    """
    eps = [int(e) for e in eps if model.moe_experts and model.moe_experts % int(e) == 0]
    rows = []
    for gid in gpu_ids:
        own = hardware.get(gid).nvlink_domain
        for d in sorted(set(domains) | {own}):
            for e in eps:
                r = best_layout(model, gid, gpus, batch_tokens=batch_tokens, domain=d, precision=precision, allowed=allowed,
                                ep=[e], overlap=overlap, step_model=step_model)
                r = _fill(r, model, gid, gpus, d)
                r["ep_fixed"] = int(e)
                r["own_domain"] = d == own
                rows.append(r)
    return rows


def ep_sizes(model: Model, largest: int = 512) -> list[int]:
    """Expert-parallel sizes for a sweep: the powers of two from 2 that divide the expert count."""
    return [e for e in (2 ** k for k in range(1, 20)) if e <= min(largest, model.moe_experts)
            and model.moe_experts % e == 0]


def alltoall_rows(model: Model, gpu_ids, eps=None, *, tokens: int | None = None, precision: str = "fp8",
                  allowed: Sequence[str] = recipes.TRAINING) -> list[dict]:
    """Time of one MoE dispatch all-to-all per EP size on each GPU's own domain.

    ``eps``: EP sizes (default :func:`ep_sizes`); ``tokens`` per GPU (default one sequence of
    the model); payload bytes per element from :meth:`WireFormat.for_recipe` (``dispatch``).
    Columns: gpu, domain, ep, per_domain, domains, message_mb, seconds, ms, nic_share (fraction
    of the payload that crosses the NIC).
    """
    eps = ep_sizes(model) if eps is None else eps
    tok = model.seq_len if tokens is None else int(tokens)
    rows = []
    for gid in gpu_ids:
        g = hardware.get(gid)
        topo = Topology.from_gpu(g)
        wire = WireFormat.for_recipe(recipes.training_precision(g, precision, allowed))
        m = float(comm.moe_dispatch_bytes(tok, model.moe_top_k, model.hidden, wire.dispatch))
        ep = np.asarray(list(eps), dtype=np.int64)
        t = comm.moe_alltoall_time(tok, model.moe_top_k, model.hidden, wire.dispatch, ep, topo)
        n_in, n_out = placement(ep, 1, g.nvlink_domain)
        for k in range(len(ep)):
            rows.append({"gpu": g.id, "label": g.label, "domain": g.nvlink_domain, "ep": int(ep[k]),
                         "per_domain": int(n_in[k]), "domains": int(n_out[k]), "message_mb": m / 1e6,
                         "seconds": float(t[k]), "ms": 1e3 * float(t[k]),
                         "nic_share": float((ep[k] - n_in[k]) / ep[k])})
    return rows


# =========================================================================================
# Bus-bandwidth curves and the calibration points
# =========================================================================================
def _scope_group(scope: str, domain: int) -> tuple[int, int]:
    """(n, stride) of the group for a curve scope on a domain of ``domain`` GPUs."""
    if scope == SCOPES[0]:
        return domain, 1
    if scope == SCOPES[1]:
        return 2 * domain, 1
    return NIC_GROUP, domain


def busbw_rows(gpu_ids, ops=("all_reduce", "all_to_all"), sizes=MESSAGE_SIZES) -> list[dict]:
    """Predicted NCCL bus bandwidth (GB/s) vs message size per GPU, collective and scope.

    Scopes (:data:`SCOPES`): the whole NVLink domain; two domains (hierarchical: NVLink and NIC
    phases); :data:`NIC_GROUP` GPUs one per domain (NIC only). Algorithm "auto" (NCCL's tuner).
    """
    rows = []
    m = np.asarray(sizes, dtype=float)
    for gid in gpu_ids:
        g = hardware.get(gid)
        topo = Topology.from_gpu(g)
        for op in ops:
            for scope in SCOPES:
                n, stride = _scope_group(scope, g.nvlink_domain)
                bw = comm.predicted_busbw(op, m, n, topo, stride)
                for k in range(len(m)):
                    rows.append({"gpu": g.id, "label": g.label, "op": op, "scope": scope, "n": n,
                                 "message_bytes": float(m[k]), "busbw_gb_s": float(bw[k]) / 1e9})
    return rows


def busbw_chart_rows(gpu_ids) -> list[dict]:
    """Rows of the bus-bandwidth figure: the model's curves (``kind`` "model") and, for each
    calibration point of :func:`calibration_rows`, the published value ("published") and the
    model's value at the same setting ("model at that point"), all as ``busbw_gb_s``."""
    rows = [{**r, "kind": "model"} for r in busbw_rows(gpu_ids)]
    for p in calibration_rows():
        for kind, key in (("published", "measured_gb_s"), ("model at that point", "predicted_gb_s")):
            rows.append({"gpu": p["hardware"], "label": p["point_id"], "op": p["op"], "scope": p["scope"],
                         "n": p["n"], "message_bytes": p["message_bytes"], "busbw_gb_s": p[key], "kind": kind})
    return rows


def calibration_rows() -> list[dict]:
    """Published points of ``data/collectives.csv`` that are bus bandwidths, with the prediction.

    A row's metric is comparable with a busbw curve when it is ``busbw``, or ``a2a_link_bw``
    for a group inside one domain (then the remote bytes per second are the busbw). The scope
    follows the row's placement. Other rows are in :func:`scaletax.comm.calibration_table`.
    """
    table = {r["point_id"]: r for r in comm.calibration_table()}
    out = []
    for row in comm.calibration_points():
        n, per = int(row["n_gpus"]), int(row["gpus_per_domain"])
        metric = row["metric"]
        if not row["message_bytes"] or metric not in ("busbw", "a2a_link_bw"):
            continue
        if metric == "a2a_link_bw" and per < n:
            continue
        scope = SCOPES[0] if per >= n else (SCOPES[2] if per == 1 else SCOPES[1])
        t = table[row["point_id"]]
        out.append({"point_id": row["point_id"], "hardware": row["hardware"], "op": row["collective"],
                    "algorithm": row["algorithm"], "scope": scope, "n": n,
                    "message_bytes": float(row["message_bytes"]), "measured_gb_s": float(row["value_gb_s"]),
                    "predicted_gb_s": t["predicted_gb_s"], "rel_error": t["rel_error"],
                    "use": row["use"], "source": row["source"]})
    return out


# =========================================================================================
# Tables and summaries for the chapter (plain rows and scalars)
# =========================================================================================
def sizes_with(sizes, gpus: int) -> list[int]:
    """The cluster sizes of a sweep: the scenario's sizes and its reference count, sorted."""
    return sorted({int(n) for n in sizes} | {int(gpus)})


def tax_table(rows: list[dict], ref: int, top: int) -> list[dict]:
    """One row per model and GPU: layout and exposed share at ``ref`` and at ``top`` GPUs."""
    by = {(r["model"], r["gpu"], r["gpus"]): r for r in rows}
    out = []
    for r in rows:
        if r["gpus"] != ref:
            continue
        t = by.get((r["model"], r["gpu"], top), {})
        out.append({"model": r["model"], "gpu": r["gpu"], "label": r["label"],
                    "layout_ref": r.get("layout") or "does not fit", "share_ref": r.get("share"),
                    "layout_top": t.get("layout") or "does not fit", "share_top": t.get("share"),
                    "exposed_top": t.get("t_exposed")})
    return out


def group_rows(rows: list[dict], gpus: int) -> list[dict]:
    """Exposed seconds per step by parallel group for the best layouts on ``gpus`` GPUs (long form)."""
    out = []
    for r in rows:
        if r["gpus"] != gpus or not r["fits"]:
            continue
        for name in GROUPS:
            out.append({"model": r["model"], "gpu": r["gpu"], "label": r["label"], "group": name,
                        "exposed_s": r[f"{name}_exposed"], "share": r[f"{name}_exposed"] / r["t_step"]})
    return out


def dominant_group(rows: list[dict], gpus: int) -> dict:
    """The parallel group with the most exposed seconds summed over the cells at ``gpus`` GPUs,
    per model: ``{model_id: (group, fraction of the exposed seconds)}``."""
    out: dict[str, tuple[str, float]] = {}
    for mid in dict.fromkeys(r["model"] for r in rows):
        tot = {g: sum(r[f"{g}_exposed"] for r in rows if r["model"] == mid and r["gpus"] == gpus and r["fits"])
               for g in GROUPS}
        s = sum(tot.values())
        g = max(tot, key=tot.get)
        out[mid] = (g, tot[g] / s if s > 0 else 0.0)
    return out


def extremes(rows: list[dict], gpus: int, key: str = "share") -> dict:
    """Smallest and largest ``key`` over the fitting cells at ``gpus`` GPUs, with where they are."""
    cells = [r for r in rows if r["gpus"] == gpus and r["fits"]]
    if not cells:
        return {"min": None, "max": None, "min_where": "none fits", "max_where": "none fits"}
    lo, hi = min(cells, key=lambda r: r[key]), max(cells, key=lambda r: r[key])
    where = lambda r: f"{_model_name(r['model'])} on {r['label']}"  # noqa: E731
    return {"min": lo[key], "max": hi[key], "min_where": where(lo), "max_where": where(hi)}


def growth(rows: list[dict], small: int, large: int) -> dict:
    """Exposed share at ``large`` over the share at ``small`` GPUs: mean, min and max over the
    model x GPU cells that fit at both sizes."""
    by = {(r["model"], r["gpu"], r["gpus"]): r for r in rows if r["fits"]}
    ratios = [by[(m, g, large)]["share"] / by[(m, g, small)]["share"]
              for (m, g, n) in by if n == small and (m, g, large) in by and by[(m, g, small)]["share"] > 0]
    if not ratios:
        return {"mean": None, "min": None, "max": None}
    return {"mean": float(np.mean(ratios)), "min": min(ratios), "max": max(ratios)}


def model_sentence(rows: list[dict], small: int, large: int) -> str:
    """Per model, the exposed share range over GPUs at ``small`` and at ``large`` GPUs, as text."""
    def span(sh):
        if not sh:
            return "does not fit"
        lo, hi = f"{100 * min(sh):.0f}", f"{100 * max(sh):.0f}"
        return f"{lo}%" if lo == hi else f"{lo}-{hi}%"

    parts = []
    for mid in dict.fromkeys(r["model"] for r in rows):
        cells = [(n, span([r["share"] for r in rows if r["model"] == mid and r["gpus"] == n and r["fits"]]))
                 for n in dict.fromkeys((small, large))]
        parts.append(f"{_model_name(mid)}: " + ", ".join(f"{t} at {n:,} GPUs" for n, t in cells))
    return "; ".join(parts)


def nvl72_summary(pairs: list[dict], threshold: float = 0.05) -> dict:
    """Numbers for the NVL72 claim from :func:`nvl72_rows`.

    Per model: the smallest and largest step-time gain (speedup - 1), the cluster sizes where
    they occur, the largest cut of exposed communication, and the cluster sizes where the gain is
    below ``threshold`` ("stops mattering"). Returned as text-ready fields plus raw numbers.
    """
    out = {"models": {}, "gain_min": None, "gain_max": None, "cut_max": None, "threshold": threshold}
    gains = []
    for mid in dict.fromkeys(p["model"] for p in pairs):
        ps = [p for p in pairs if p["model"] == mid]
        lo = min(ps, key=lambda p: p["speedup"])
        hi = max(ps, key=lambda p: p["speedup"])
        small = [p["gpus"] for p in ps if p["speedup"] - 1.0 < threshold]
        out["models"][mid] = {"gain_min": lo["speedup"] - 1.0, "at_min": lo["gpus"],
                              "gain_max": hi["speedup"] - 1.0, "at_max": hi["gpus"],
                              "cut_max": max(p["exposed_cut"] for p in ps), "below": small}
        gains += [p["speedup"] - 1.0 for p in ps]
    if gains:
        out["gain_min"], out["gain_max"] = min(gains), max(gains)
        out["cut_max"] = max(p["exposed_cut"] for p in pairs)
    return out


def nvl72_sentence(summary: dict) -> str:
    """Text of :func:`nvl72_summary`: per model the range of the step-time ratio (8-GPU over
    72-GPU domain) and the cluster sizes where the gain is below the threshold."""
    parts = []
    thr = 100 * summary["threshold"]
    for mid, s in summary["models"].items():
        text = (f"for {_model_name(mid)} the step is {1 + s['gain_min']:.2f} times faster at {s['at_min']:,} GPUs "
                f"and {1 + s['gain_max']:.2f} times at {s['at_max']:,}")
        if s["below"]:
            text += f", less than {thr:.0f}% faster at {', '.join(f'{n:,}' for n in s['below'])} GPUs"
        else:
            text += f", at least {thr:.0f}% faster at every cluster size"
        parts.append(text)
    return "; ".join(parts) if parts else "no model fits at both domain sizes"


def llama_rows(gpu: str = "h100_sxm", precision: str = "fp8", allowed: Sequence[str] = recipes.TRAINING,
               overlap: Overlap | None = None,
               efficiency: float = COMPUTE_EFFICIENCY, step_model: str | None = None) -> tuple[list[dict], float]:
    """Per-group traffic of Llama 3.1 405B in the MLPerf layout (:data:`comm.LLAMA405B_LAYOUT`),
    groups with traffic only, plus the total; and the compute seconds per step used for overlap."""
    from scaletax import models as _models

    lay = Layout(**comm.LLAMA405B_LAYOUT)
    la = LayoutArray.from_layouts([lay])
    ev = evaluate(_models.get("llama31_405b"), la, gpu, precision=precision, allowed=allowed, overlap=overlap,
                  efficiency=efficiency, step_model=step_model)
    tc = float(ev.t_compute[0])
    rows = comm.llama405b_traffic(gpu, gbs=lay.gbs, precision=recipes.training_precision(gpu, precision, allowed),
                                  t_compute=tc, overlap=applied_overlap(overlap, step_model))
    return [r for r in rows if r["group"] == "total" or r["collectives"] > 0], tc


def ep_table(rows: list[dict]) -> list[dict]:
    """Rows of :func:`ep_rows` for a table (one per GPU, domain and EP size)."""
    out = []
    for r in rows:
        fit = r["fits"]
        out.append({"gpu": r["gpu"], "label": r["label"], "domain": r["domain"], "ep": r["ep_fixed"],
                    "layout": r["layout"] if fit else "does not fit",
                    "ep_domains": r["ep_domains"] if fit else None,
                    "ep_nic_gb": r["ep_nic_gb"] if fit else None, "ep_s": r["ep_s"] if fit else None,
                    "ep_exposed": r["ep_exposed"] if fit else None, "share": r["share"] if fit else None,
                    "t_step": r["t_step"] if fit else None})
    return out


def ep_compare(rows: list[dict], small: int = 8, large: int = 64) -> dict:
    """EP ``large`` against EP ``small`` per GPU (own domain): step-time ratio and EP seconds ratio.

    Returns ``{"inside": [...], "across": [...]}``: GPUs whose domain holds the large EP group
    and those whose domain does not, each entry (label, step ratio large/small, EP s ratio).
    """
    by = {(r["gpu"], r["ep_fixed"]): r for r in rows if r["own_domain"] and r["fits"]}
    out = {"inside": [], "across": []}
    for gid in dict.fromkeys(r["gpu"] for r in rows):
        a, b = by.get((gid, small)), by.get((gid, large))
        if a is None or b is None:
            continue
        key = "inside" if b["ep_domains"] == 1 else "across"
        out[key].append((b["label"], b["t_step"] / a["t_step"], b["ep_s"] / a["ep_s"] if a["ep_s"] > 0 else None))
    return out


def busbw_summary(gpu_id: str, op: str = "all_reduce", large: float = 2.0**30) -> dict:
    """Numbers about one GPU's curves: in-domain and NIC-only busbw at ``large`` bytes (GB/s),
    their ratio, and the message size (MB) at which the in-domain busbw reaches half its value
    at ``large`` (the alpha-beta half-bandwidth point, under the auto algorithm)."""
    g = hardware.get(gpu_id)
    topo = Topology.from_gpu(g)
    n_in, s_in = _scope_group(SCOPES[0], g.nvlink_domain)
    n_out, s_out = _scope_group(SCOPES[2], g.nvlink_domain)
    bw_in = float(comm.predicted_busbw(op, large, n_in, topo, s_in))
    bw_out = float(comm.predicted_busbw(op, large, n_out, topo, s_out))
    m = 2.0 ** np.arange(10, 34, 0.05)
    curve = comm.predicted_busbw(op, m, n_in, topo, s_in)
    half = float(m[np.argmax(curve >= bw_in / 2)])
    return {"label": g.label, "domain": g.nvlink_domain, "in_gb_s": bw_in / 1e9, "nic_gb_s": bw_out / 1e9,
            "ratio": bw_in / bw_out, "half_mb": half / 1e6}


def domain_relative(rows: list[dict], base: int = 8) -> list[dict]:
    """:func:`domain_rows` with ``vs_base``: step time over the step time at domain ``base``
    (same model and cluster size; None where either does not fit)."""
    ref = {(r["model"], r["gpus"]): r["t_step"] for r in rows if r["domain"] == base and r["fits"]}
    out = []
    for r in rows:
        b = ref.get((r["model"], r["gpus"]))
        out.append({**r, "vs_base": (r["t_step"] / b) if (r["fits"] and b) else None,
                    "model_name": _model_name(r["model"])})
    return out


def domain_chart_rows(rows: list[dict], gpus: int) -> list[dict]:
    """Long-form rows of the domain-sweep figure at ``gpus`` GPUs from :func:`domain_relative`:
    the exposed share (%) and the step time relative to the base domain, per model and domain."""
    out = []
    for r in rows:
        if r["gpus"] != gpus or not r["fits"]:
            continue
        for metric, value in (("exposed communication (% of step)", 100 * r["share"]),
                              ("step time relative to an 8-GPU domain", r["vs_base"])):
            out.append({"model": r["model"], "model_name": r["model_name"], "domain": r["domain"],
                        "metric": metric, "value": value, "layout": r["layout"]})
    return out


def dp_summary(rows: list[dict]) -> dict:
    """From :func:`dp_rows`: the largest data-parallel NIC bytes per step and exposed share of
    the step, with where they occur, and how many rows span more than one domain."""
    fit = [r for r in rows if r.get("size") is not None]
    if not fit:
        return {"max_nic_gb": None, "max_nic_where": "none fits", "max_exposed_share": None,
                "max_exposed_where": "none fits", "spanning": 0, "rows": 0}
    hi = max(fit, key=lambda r: r["nic_gb"])
    ex = max(fit, key=lambda r: r["exposed"] / r["t_step"])
    where = lambda r: f"{'expert ' if r['group'] == 'edp' else ''}data-parallel group of {_model_name(r['model'])} on {r['label']}"  # noqa: E731
    return {"max_nic_gb": hi["nic_gb"], "max_nic_where": where(hi),
            "max_exposed_share": ex["exposed"] / ex["t_step"], "max_exposed_where": where(ex),
            "spanning": sum(1 for r in fit if r["domains"] > 1), "rows": len(fit)}


def a2a_summary(rows: list[dict], small: int = 8, large: int = 64) -> dict:
    """From :func:`alltoall_rows`: per GPU the time of one dispatch at EP ``large`` over EP
    ``small``; the largest and smallest ratio with their GPUs."""
    by = {(r["gpu"], r["ep"]): r for r in rows}
    ratios = [(r["label"], by[(r["gpu"], large)]["seconds"] / r["seconds"])
              for r in rows if r["ep"] == small and (r["gpu"], large) in by]
    if not ratios:
        return {"max": None, "max_where": "none", "min": None, "min_where": "none"}
    hi, lo = max(ratios, key=lambda t: t[1]), min(ratios, key=lambda t: t[1])
    return {"max": hi[1], "max_where": hi[0], "min": lo[1], "min_where": lo[0]}


def ep_compare_text(items) -> str:
    """``[(label, step ratio, EP ratio), ...]`` of :func:`ep_compare` as "GB200 NVL72 -6%, ..."."""
    if not items:
        return "nothing (no GPU of this scenario in that case, or no layout with both sizes fits)"
    return ", ".join(f"{lab} {100 * (x - 1):+.0f}%" for lab, x, _ in items)


def _model_name(mid: str) -> str:
    """Short display name: the catalog name without its parenthesised note ("GPT 1T", "Kimi K2")."""
    from scaletax import models as _models

    m = _models.get(mid)
    return (m.name or m.id).split(" (")[0]


def model_name(mid: str) -> str:
    """Display name of a catalog model."""
    return _model_name(mid)


def nvl72_note(gpu_ids) -> str:
    """Which of the scenario's GPUs come in an NVLink domain larger than 8, as a sentence part."""
    big = [hardware.get(g) for g in gpu_ids if hardware.get(g).nvlink_domain > 8]
    if not big:
        return "none of this scenario's GPUs has an NVLink domain larger than 8 GPUs"
    return ", ".join(f"{g.label} ({g.nvlink_domain} GPUs)" for g in big)


def sweep_gpu(gpu_ids) -> str:
    """The GPU of the domain sweep: the first with a domain larger than 8, else the last listed."""
    return nvl72_gpu(gpu_ids) or list(gpu_ids)[-1]


def first_moe(model_ids) -> str:
    """The first MoE model of the scenario, else the catalog's trillion-parameter MoE (Kimi K2)."""
    from scaletax import models as _models

    for mid in model_ids:
        if _models.get(mid).is_moe:
            return mid
    return _models.MOE_1T


# =========================================================================================
# Small helpers for prose
# =========================================================================================
def nvl72_gpu(gpu_ids) -> str | None:
    """The first GPU of the list whose catalog NVLink domain is larger than 8 (an NVL72 part)."""
    for gid in gpu_ids:
        if hardware.get(gid).nvlink_domain > 8:
            return gid
    return None


def eight_gpu(gpu_ids) -> str | None:
    """The first GPU of the list with an 8-GPU (HGX) NVLink domain."""
    for gid in gpu_ids:
        if hardware.get(gid).nvlink_domain <= 8:
            return gid
    return None


__all__ = ["COMPUTE_EFFICIENCY", "CP_MIN_SEQ", "DOMAIN_SWEEP", "MESSAGE_SIZES", "NIC_GROUP", "SCOPES",
           "STEP_MODEL", "Evaluation", "a2a_summary", "applied_overlap", "alltoall_rows", "best_layout", "bubble_seconds",
           "busbw_chart_rows", "busbw_rows", "busbw_summary", "calibration_rows", "candidates", "compute_seconds", "domain_chart_rows", "domain_relative",
           "domain_rows", "dominant_group", "dp_rows", "dp_summary", "eight_gpu", "ep_compare", "ep_compare_text", "ep_rows", "ep_sizes",
           "ep_table", "evaluate", "extremes", "first_moe", "group_rows", "growth", "layout_label", "llama_rows",
           "model_name", "model_sentence", "nvl72_gpu", "nvl72_note", "nvl72_rows", "nvl72_sentence",
           "nvl72_summary", "sizes_with", "sweep_gpu", "target_sequences", "tax_rows",
           "tax_table", "tp_choices", "with_batch"]
