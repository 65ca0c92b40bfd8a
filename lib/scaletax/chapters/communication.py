"""Studies for the communication chapter: the communication tax over cluster and domain size.

The collective and per-step traffic model is :mod:`scaletax.model.comm` on the topology of
:mod:`scaletax.model.topology`; the best layout and its step time come from the book's one layout
search, :func:`scaletax.model.search.search` (the step-time model :mod:`scaletax.model.perf` with its
calibrated parameters). This module only chooses what to ask and sweeps it. It answers, for a
model on a GPU type:

- which layout is fastest on ``n`` GPUs at a fixed global batch (:func:`best_layout`), and what
  share of its step time is communication that compute does not hide (the *communication tax*,
  exposed communication / step time);
- how that share moves with the cluster size (:func:`tax_rows`) and the NVLink domain size
  (:func:`domain_rows`, ``SearchSpace.domain``), where the data-parallel groups land
  (:func:`dp_rows`), what an NVL72 domain changes against an 8-GPU one (:func:`nvl72_rows`), and
  how the MoE all-to-all depends on whether the experts sit inside one domain (:func:`ep_rows`,
  ``SearchSpace.ep`` held fixed; :func:`alltoall_rows`);
- the per-group traffic of one published layout (:func:`traffic_table`, :func:`llama_rows`);
- the achieved bus bandwidth curves of :func:`scaletax.model.comm.predicted_busbw` with the published
  calibration points (:func:`busbw_rows`, :func:`calibration_rows`).

The sweeps loop only over the handful of (model, GPU, count, domain) cells of a chapter; each
cell is one search (memoized per process, :func:`best_layout`).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from scaletax.inputs import hardware, recipes
from scaletax.inputs.layout import Layout, LayoutArray, group_strides, label
from scaletax.inputs.models import Model
from scaletax.model import comm, efficiency, perf, search
from scaletax.model import plan as planning
from scaletax.model.comm import GROUPS, Overlap, WireFormat
from scaletax.model.topology import Topology, placement

#: NVLink domain sizes of the domain sweep (8: HGX; 36, 72: GB200 NVL36 / NVL72; 144: a
#: two-rack or Rubin-Ultra-class domain).
DOMAIN_SWEEP = (8, 16, 36, 72, 144)

#: Message sizes of the bus-bandwidth curves, bytes (16 KiB .. 4 GiB, two points per octave).
MESSAGE_SIZES = 2.0 ** np.arange(14, 32.5, 0.5)
#: Group size of the "one GPU per domain" curves: a data-parallel-like group on the NICs only,
#: the setting of the InfiniBand calibration row (16 GPUs, one per node).
NIC_GROUP = 16

SCOPES = ("one NVLink domain", "two NVLink domains", "one GPU per domain")


# =========================================================================================
# Overlap
# =========================================================================================
def applied_overlap(overlap: Overlap | None = None) -> Overlap:
    """The overlap fractions the step-time model applies: ``overlap`` (default
    :class:`comm.Overlap`) times the calibrated ``overlap_scale``, capped at 1."""
    return efficiency.default_efficiency().overlap(overlap)


# =========================================================================================
# Best layout: one search per cell
# =========================================================================================
def best_search(model: Model, gpu, gpus: int, *, batch_tokens: int, domain: int | None = None,
                precision: str = "fp8", allowed: Sequence[str] = recipes.TRAINING, ep=None,
                software: Mapping[str, Any] | None = None) -> search.SearchResult:
    """The fastest layout that fits on ``gpus`` GPUs at the global batch of ``batch_tokens``, in the
    precision the GPU trains in (:func:`scaletax.inputs.recipes.training_precision` of ``precision``
    among ``allowed``): :func:`scaletax.model.plan.fastest` with ``domain`` the NVLink domain
    (``SearchSpace.domain``), ``ep`` the expert-parallel sizes to try and ``software`` the scenario's
    ``training.software`` (:func:`scaletax.model.plan.software_space`)."""
    g = hardware.get(gpu) if isinstance(gpu, str) else hardware.check(gpu)
    dom = int(g.nvlink_domain if domain is None else domain)
    eps = None if ep is None else tuple(int(e) for e in np.atleast_1d(ep))
    prec = recipes.training_precision(g, precision, allowed)
    return planning.fastest(model, g, prec, int(gpus), int(batch_tokens), space=planning.software_space(software, search.SearchSpace(domain=dom, ep=eps)))


def _row(model: Model, g, res: search.SearchResult, gpus: int, domain: int) -> dict:
    """One result row: layout, step terms, and traffic per group of the search's best layout."""
    lay, st, tr = res.best, res.step, res.traffic
    t_step, t_exposed = float(st.step_s[0]), float(st.exposed_comm_s[0])
    row = {
        "model": model.id, "gpu": g.id, "label": g.label, "status": g.status, "gpus": int(gpus),
        "domain": int(domain), "layout": label(lay, model), "tp": lay.tp, "pp": lay.pp,
        "cp": lay.cp, "dp": lay.dp, "ep": lay.ep, "etp": lay.etp, "edp": lay.edp, "vp": lay.vp,
        "mbs": lay.mbs, "zero_stage": lay.zero_stage, "recompute": lay.recompute, "gbs": lay.gbs,
        "n_micro": lay.n_micro, "precision": res.precision,
        "t_compute": float(st.compute_s[0] + st.other_s[0]), "t_bubble": float(st.bubble_s[0]),
        "t_comm": float(tr.seconds[0]), "t_exposed": t_exposed, "t_step": t_step, "share": t_exposed / t_step,
        "nic_gb": float(tr.nic_bytes[0]) / 1e9, "nvlink_gb": float(tr.nvlink_bytes[0]) / 1e9,
    }
    for name in GROUPS:
        gt = tr.groups[name]
        row[f"{name}_s"] = float(gt.seconds[0])
        row[f"{name}_exposed"] = float(st.comm_groups[name][0])
        row[f"{name}_nic_gb"] = float(gt.nic_bytes[0]) / 1e9
        row[f"{name}_nvlink_gb"] = float(gt.nvlink_bytes[0]) / 1e9
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
                software: Mapping[str, Any] | None = None) -> dict | None:
    """The fastest layout that fits on ``gpus`` GPUs (:func:`best_search`), as a result row;
    None when nothing fits."""
    g = hardware.get(gpu) if isinstance(gpu, str) else gpu
    res = best_search(model, g, gpus, batch_tokens=batch_tokens, domain=domain, precision=precision,
                      allowed=allowed, ep=ep, software=software)
    return _row(model, g, res, gpus, res.domain) if res.fits else None


# =========================================================================================
# Sweeps for the chapter
# =========================================================================================
def tax_rows(model_ids, gpu_ids, sizes, *, batch_tokens: int, precision: str = "fp8",
             allowed: Sequence[str] = recipes.TRAINING, software: Mapping[str, Any] | None = None) -> list[dict]:
    """Best layout and its communication tax per model, GPU (own domain) and cluster size.

    Cells where nothing fits are returned with ``fits=False`` and None metrics.
    """
    from scaletax.inputs import models as _models

    def cell(c) -> dict:
        m, gid, n = c
        r = best_layout(m, gid, n, batch_tokens=batch_tokens, precision=precision, allowed=allowed, software=software)
        return _fill(r, m, gid, n, hardware.get(gid).nvlink_domain)

    return [cell((_models.get(mid), gid, int(n))) for mid in model_ids for gid in gpu_ids for n in sizes]


def _fill(row, model, gpu_id, n, domain) -> dict:
    if row is not None:
        return {**row, "fits": True}
    g = hardware.get(gpu_id)
    return {"model": model.id, "gpu": g.id, "label": g.label, "status": g.status, "gpus": int(n),
            "domain": int(domain), "layout": None, "share": None, "t_step": None, "t_exposed": None,
            "fits": False}


def domain_rows(model_ids, gpu_id: str, sizes, domains=DOMAIN_SWEEP, *, batch_tokens: int,
                precision: str = "fp8", allowed: Sequence[str] = recipes.TRAINING,
                software: Mapping[str, Any] | None = None) -> list[dict]:
    """Best layout per model, cluster size and NVLink domain size, the GPU held fixed."""
    from scaletax.inputs import models as _models

    def cell(c) -> dict:
        m, n, d = c
        r = best_layout(m, gpu_id, n, batch_tokens=batch_tokens, domain=d, precision=precision, allowed=allowed,
                        software=software)
        return _fill(r, m, gpu_id, n, d)

    return [cell((_models.get(mid), int(n), int(d))) for mid in model_ids for n in sizes for d in domains]


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
            precision: str = "fp8", allowed: Sequence[str] = recipes.TRAINING,
            software: Mapping[str, Any] | None = None) -> list[dict]:
    """Best layout with the expert-parallel size held at each of ``eps``, per GPU and domain.

    For each GPU the domains are its own NVLink domain plus those of ``domains`` (the same GPU
    with another domain is a what-if; ``own_domain`` says which). Rows carry the EP traffic;
    EP sizes that do not divide the expert count are skipped.
    """
    eps = [int(e) for e in eps if model.moe_experts and model.moe_experts % int(e) == 0]

    def cell(c) -> dict:
        gid, d, e, own = c
        r = best_layout(model, gid, gpus, batch_tokens=batch_tokens, domain=d, precision=precision, allowed=allowed,
                        ep=[e], software=software)
        return {**_fill(r, model, gid, gpus, d), "ep_fixed": e, "own_domain": d == own}

    cells = []
    for gid in gpu_ids:
        own = hardware.get(gid).nvlink_domain
        cells += [(gid, d, e, own) for d in sorted(set(domains) | {own}) for e in eps]
    return [cell(c) for c in cells]


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
    follows the row's placement. Other rows are in :func:`scaletax.model.comm.calibration_table`.
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


def step_range_sentence(rows: list[dict], gpus: int, calibrated_max: int, checked_max: int) -> str:
    """Per model, the step times of its fitting cells at ``gpus`` GPUs (ms, the fastest to the
    slowest GPU), and whether ``gpus`` lies beyond the largest run of the calibration
    (``calibrated_max``) and the largest measured run the model is checked on at all, held-out runs
    included (``checked_max``): ``scaletax.chapters.validation.measured_gpus_max``."""
    parts = []
    for mid in dict.fromkeys(r["model"] for r in rows):
        cells = [r for r in rows if r["model"] == mid and r["gpus"] == gpus and r["fits"]]
        if not cells:
            parts.append(f"{_model_name(mid)} fits on no GPU type")
            continue
        lo, hi = min(cells, key=lambda r: r["t_step"]), max(cells, key=lambda r: r["t_step"])
        parts.append(f"one step of {_model_name(mid)} takes {1e3 * lo['t_step']:,.0f} ms ({lo['label']}) to "
                     f"{1e3 * hi['t_step']:,.0f} ms ({hi['label']})")
    text = f"At {gpus:,} GPUs " + "; ".join(parts) + "."
    if gpus > checked_max:
        text += (f" {gpus:,} GPUs is {gpus / calibrated_max:.1f} times the largest calibration run "
                 f"({calibrated_max:,} GPUs)" + (
                     f" and {gpus / checked_max:.1f} times the largest run the model is checked on at all "
                     f"({checked_max:,} GPUs, held out)" if checked_max != calibrated_max else "")
                 + ": these step times extrapolate its physics beyond the validated range, with no measurement "
                   "at that scale behind them.")
    return text


def growth(rows: list[dict], small: int, large: int) -> dict:
    """Exposed share at ``large`` over the share at ``small`` GPUs: mean, min and max over the
    model x GPU cells that fit at both sizes."""
    by = {(r["model"], r["gpu"], r["gpus"]): r for r in rows if r["fits"]}
    ratios = [by[(m, g, large)]["share"] / by[(m, g, small)]["share"]
              for (m, g, n) in by if n == small and (m, g, large) in by and by[(m, g, small)]["share"] > 0]
    if not ratios:
        return {"mean": None, "min": None, "max": None}
    return {"mean": float(np.mean(ratios)), "min": min(ratios), "max": max(ratios)}


def growth_sentence(rows: list[dict], sizes: Sequence[int]) -> str:
    """How the exposed share grows from the smallest of ``sizes`` (:func:`growth`, mean over the model x
    GPU cells that fit at both), as text: to the size where it grows most and, when the largest size
    grows less than that, to the largest too (a batch too small to fill the pipeline there: the bubble,
    not the communication, takes the step)."""
    small = sizes[0]
    means = {n: growth(rows, small, n)["mean"] for n in sizes[1:]}
    means = {n: m for n, m in means.items() if m is not None}
    if not means:
        return f"No model and GPU fits at both {small:,} and a larger size, so the share's growth is not measured here."
    peak = max(means, key=means.get)
    top = max(means)
    text = f"From {small:,} GPUs the share grows {means[peak]:.1f} times on average by {peak:,} GPUs"
    if top != peak and means[top] < means[peak] * 0.95:
        text += (f", and is {means[top]:.1f} times at {top:,}: there the global batch no longer fills the pipeline, "
                 "and the bubble, not the communication, takes the rest of the step")
    return text + "."


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


def traffic_table(model, layout, topo: Topology, wire: WireFormat | None = None,
                  t_compute=None, overlap: Overlap | None = None) -> list[dict]:
    """Rows (one per group, then 'total') for one layout: sizes, bytes and seconds per step.

    Columns: group, size, stride, per_domain, collectives (count per step), nvlink_gb, nic_gb,
    total_gb (GB = 1e9 bytes sent per GPU per step), seconds (not overlapped) and, when
    ``t_compute`` is given, exposed_s (after :func:`scaletax.model.comm.exposed_comm`).
    """
    arr = LayoutArray.from_layouts([layout]) if isinstance(layout, Layout) else layout
    if len(arr) != 1:
        raise ValueError("traffic_table takes one layout")
    step = comm.step_traffic(model, arr, topo, wire).take([0])
    exp = comm.exposed_comm(step, t_compute, overlap) if t_compute is not None else None
    rows = []
    for name in GROUPS:
        gt = step.groups[name]
        row = {"group": name, "size": int(gt.size[0]), "stride": int(gt.stride[0]),
               "per_domain": int(gt.per_domain[0]), "collectives": float(gt.count[0]),
               "nvlink_gb": float(gt.nvlink_bytes[0]) / 1e9, "nic_gb": float(gt.nic_bytes[0]) / 1e9,
               "total_gb": float(gt.bytes[0]) / 1e9, "seconds": float(gt.seconds[0])}
        if exp is not None:
            row["exposed_s"] = float(np.ravel(exp.groups[name])[0])
        rows.append(row)
    total = {"group": "total", "size": None, "stride": None, "per_domain": None,
             **{k: sum(r[k] for r in rows) for k in ("collectives", "nvlink_gb", "nic_gb", "total_gb", "seconds")}}
    if exp is not None:
        total["exposed_s"] = float(np.ravel(exp.seconds)[0])
    rows.append(total)
    return rows


#: The published layout of the per-group traffic example: Llama 3.1 405B on 512 H100 (64 DGX
#: nodes) in NVIDIA's MLPerf Training v5.0 submission eos-dfw_n64_ngc25.01_nemo (row
#: mlperf5.0-NVIDIA-eos-dfw_n64_ngc25.01_nemo-llama31_405b of data/published_runs.csv):
#: TP8 PP8 CP2 DP4, micro-batch 1, global batch 1152 sequences of 8192, FP8. The source row
#: gives no virtual-pipeline size, so vp = 1 here. Meta's own run used 2048 sequences of 8192
#: (16M tokens) per step at 16k GPUs (Llama 3 paper, arXiv 2407.21783, Sec. 3.3.2); pass gbs to
#: compare.
LLAMA405B_LAYOUT = dict(tp=8, pp=8, cp=2, dp=4, mbs=1, gbs=1152, vp=1)


def llama405b_traffic(gpu: str = "h100_sxm", *, gbs: int = 1152, precision: str = "fp8",
                      domain: int | None = None, t_compute=None, overlap: Overlap | None = None) -> list[dict]:
    """Per-group traffic table of Llama 3.1 405B in the MLPerf layout (:data:`LLAMA405B_LAYOUT`).

    Returns :func:`traffic_table` rows (bytes in GB = 1e9 per GPU per step, seconds per step) for
    the catalog model ``llama31_405b`` on ``gpu`` (its NVLink domain unless ``domain`` is given),
    with the wire format of ``precision`` (:meth:`WireFormat.for_recipe`).
    """
    from scaletax.inputs import models

    layout = Layout(**{**LLAMA405B_LAYOUT, "gbs": gbs})
    topo = Topology.from_gpu(hardware.get(gpu), domain=domain)
    return traffic_table(models.get("llama31_405b"), layout, topo, WireFormat.for_recipe(recipes.training(precision)),
                         t_compute=t_compute, overlap=overlap)


def llama_rows(gpu: str = "h100_sxm", precision: str = "fp8", allowed: Sequence[str] = recipes.TRAINING,
               overlap: Overlap | None = None) -> tuple[list[dict], float]:
    """Per-group traffic of Llama 3.1 405B in the MLPerf layout (:data:`LLAMA405B_LAYOUT`),
    groups with traffic only, plus the total; and the compute seconds per step used for overlap
    (the step-time model's tensor-core plus memory-bound time of that layout)."""
    from scaletax.inputs import models as _models

    lay = Layout(**LLAMA405B_LAYOUT)
    g = hardware.get(gpu)
    prec = recipes.training_precision(g, precision, allowed)
    st = perf.step_time(_models.get("llama31_405b"), lay, prec, g, overlap=overlap)
    tc = float(st.compute_s[0] + st.other_s[0])
    rows = llama405b_traffic(gpu, gbs=lay.gbs, precision=prec.name, t_compute=tc, overlap=applied_overlap(overlap))
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
    from scaletax.inputs import models as _models

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
    from scaletax.inputs import models as _models

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


__all__ = ["DOMAIN_SWEEP", "LLAMA405B_LAYOUT", "MESSAGE_SIZES", "NIC_GROUP", "SCOPES", "a2a_summary",
           "alltoall_rows", "applied_overlap", "best_layout", "best_search", "growth_sentence", "busbw_chart_rows", "busbw_rows",
           "busbw_summary", "calibration_rows", "domain_chart_rows", "domain_relative", "domain_rows",
           "dominant_group", "dp_rows", "dp_summary", "eight_gpu", "ep_compare", "ep_compare_text", "ep_rows",
           "ep_sizes", "ep_table", "extremes", "first_moe", "group_rows", "growth", "llama405b_traffic", "llama_rows",
           "step_range_sentence",
           "model_name", "model_sentence", "nvl72_gpu", "nvl72_note", "nvl72_rows", "nvl72_sentence",
           "nvl72_summary", "sizes_with", "sweep_gpu", "tax_rows", "tax_table", "traffic_table"]
