"""Sweeps, tables and sentences for the memory chapter, on top of ``memory``.

Everything here returns plain rows (lists of dicts) or short strings built from computed
values, so that the notebook only draws, tabulates and glues. Public API:

- ``assumptions(precision) -> dict``: the named assumptions of ``memory`` as numbers.
- ``REFERENCES``, ``reference_rows() -> list[dict]``: published memory figures (ZeRO Fig. 1,
  Korthikanti et al. 2022) next to what the model computes for the same setup: the Korthikanti
  settings are rows of ``data/reference_runs.csv`` predicted by ``runplan.predict_memory``, the
  function ``scaletax predict`` calls (``reference_runs``); ``reference_agreement_text``.
- ``state_rows(model_ids, precision)``: model state per parameter and in total.
- ``SPACE``, ``space(batch_seqs)``: the chapter's question to :func:`scaletax.model.search.search`.
- ``fit(model, gpus, gpu_ids, precisions, batch_sequences)``: for one GPU count, the least
  model-parallel layout that fits each GPU, and whether memory or the batch sets it.
- ``min_gpus(...)``, ``min_gpus_rows(...)``: the smallest count that holds a model.
- ``fit_map_rows(...)``: GPU type x GPU count -> fits and the layout it forces.
- ``term_rows(...)``: bytes per GPU by term for chosen layouts (stacked-bar rows).
- ``reference_layout(...)``, ``sweep_rows(...)``, ``limit_rows(...)``: sensitivity to sequence
  length, micro-batch and recompute at a fixed layout.
- ``breakdown_rows(...)``: stacked-bar rows at the smallest count and at the cluster size.
- ``sensitivity(...)``: the reference layouts, sweep rows and limit rows for every model.
- ``run_rows(path)``, ``run_table_rows``, ``run_term_rows``: the published runs with predicted
  GiB by term (``runplan.predict_memory``) and display fields.
- ``*_text(...)``: sentences for the prose, computed from the rows above.

Every layout comes from the book's one layout search (:mod:`scaletax.model.search`) with the
restrictions of :data:`SPACE` and the search's batch rule: the scenario's global batch in
whole sequences, rounded to whole micro-batches per data-parallel rank (within the search's
tolerance), so ``min(pp, n_micro)`` micro-batches are in flight on the first stage.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from scaletax import DATA_DIR, escape, jobserver
from scaletax.inputs import hardware, models, options, recipes, references, runs
from scaletax.inputs.layout import RECOMPUTE_CODE, RECOMPUTE_NAME, Layout, LayoutArray, label
from scaletax.inputs.models import Model
from scaletax.model import memory, runplan, search
from scaletax.model import plan as planning

GIB = memory.GIB
TERMS = memory.TERMS
#: Largest GPU count searched for the smallest count that holds a model.
MAX_GPUS = search.MAX_GPUS
#: Largest tensor-parallel size tried (one HGX node).
MAX_TP = 8
#: The chapter's question to the layout search: the least model-parallel layout that fits, with
#: tensor parallelism up to one HGX node (in whole NVLink domains), any pipeline depth, expert
#: parallelism over the divisors of the expert count with etp = tp (Megatron-Core's default), no
#: context parallelism or interleaving, one sequence per micro-batch, ZeRO-1 (Megatron's
#: distributed optimizer) and any recompute mode; the search's batch rule.
SPACE = search.SearchSpace(tp=tuple(t for t in search.TP_CHOICES if t <= MAX_TP), cp=(1,), etp_tp=(True,),
                           vp=(1,), mbs=(1,), zero_stage=(1,), objective="least_parallel")
#: Sequence lengths of the sensitivity sweep (tokens).
SEQ_LENS: tuple[int, ...] = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
#: Micro-batch sizes of the sensitivity sweep (sequences).
MICRO_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16)
#: Recompute modes, in increasing order of recomputation.
RECOMPUTE: tuple[str, ...] = RECOMPUTE_NAME
#: Colour per memory term (plain hex strings for the chapter's charts).
TERM_COLORS = {"weights": "#4e79a7", "gradients": "#f28e2b", "optimizer": "#e15759",
               "activations": "#59a14f", "reserve": "#bab0ac"}
#: Colour per recompute mode.
RECOMPUTE_COLORS = {"none": "#000000", "selective": "#8c8c8c", "full": "#9c755f"}


def short_name(model: Model) -> str:
    """The model name without its parenthesised note: "GPT 1T", "Kimi K2"."""
    return model.name.split(" (")[0]


# --- published reference values -------------------------------------------------------------

@dataclass(frozen=True)
class Reference:
    """A published memory figure: ``value`` in ``unit`` (``GB`` = 1e9 bytes, ``GiB`` = 2**30) of
    ``term`` (model_state or activations); ``run``: the row of :data:`REFERENCE_RUNS_CSV` stating its
    setting ("" for ZeRO Fig. 1, which states a parameter count, not an architecture)."""

    key: str
    what: str
    value: float
    unit: str
    cite: str
    where: str
    term: str = "model_state"
    run: str = ""


#: Published values the chapter reproduces (``data/references.yaml``, section ``memory``, with
#: the setups and sources).
REFERENCES: tuple[Reference, ...] = tuple(Reference(**r) for r in references.section("memory"))
#: The papers' settings as runs-table rows (``scaletax predict --runs`` reads the same file).
REFERENCE_RUNS_CSV = DATA_DIR / "reference_runs.csv"
#: ``runs.predict_memory`` columns (GiB) that make up each reference term.
TERM_COLUMNS: dict[str, tuple[str, ...]] = {
    "model_state": ("memory_weights_gib", "memory_gradients_gib", "memory_optimizer_gib"),
    "activations": ("memory_activations_gib",),
}

#: ZeRO Fig. 1's parameter count: the figure states Psi = 7.5B parameters, not an architecture.
ZERO_FIG1_PARAMS = 7.5e9
#: A GPT block stack on which the model state per parameter is computed (37 layers of
#: 12 h^2 + 13 h, h = 4096: ~7.45B parameters); every term is per parameter, times Psi.
ZERO_FIG1_MODEL = Model(id="zero_fig1", name="ZeRO Fig. 1 block stack", layers=37, hidden=4096, heads=32,
                        ffn_hidden=16384, vocab=50257, seq_len=1024, gated=False, bias=True,
                        norm="layernorm", tied_embeddings=True, position_embedding="learned")
#: ZeRO counts fp16 params + fp16 grads + K = 12 and only the transformer blocks.
ZERO_OPTIONS = dict(grad_bytes=2, optimizer_bytes=12, include_embeddings=False, fsdp_prefetch_layers=0)
#: The recipe of ZeRO's published setup: its mixed precision (BF16 here, the same 2 + 2 + 12 bytes).
BF16 = recipes.training("bf16")
#: ZeRO Fig. 1's data-parallel size.
ZERO_FIG1_DP = 64


def reference_runs() -> list[dict[str, Any]]:
    """The rows of :data:`REFERENCE_RUNS_CSV` with their predicted memory (``runplan.predict_memory``,
    what ``scaletax predict`` writes for them)."""
    return runplan.predict_memory(runs.read_runs(REFERENCE_RUNS_CSV))


def reference_setup() -> dict[str, Any]:
    """The setups of ``REFERENCES`` as numbers, for the prose (the 1T setting from its runs row)."""
    k = next(r for r in runs.read_runs(REFERENCE_RUNS_CSV) if r["run_id"] == _ref("k_act_tp").run)
    return {"zero_params_b": ZERO_FIG1_PARAMS / 1e9, "zero_dp": ZERO_FIG1_DP, "k_tp": k["tp"], "k_pp": k["pp"],
            "k_seq": k["seq_len"], "k_params_b": runs.row_model(k).total_params / 1e9}


def _ref(key: str) -> Reference:
    return next(r for r in REFERENCES if r.key == key)


def _zero_state_bytes(stage: int) -> float:
    """Model state per GPU (bytes) of ZeRO ``stage`` for Fig. 1's Psi: ``memory.breakdown``'s bytes
    per parameter of the block stack on :data:`ZERO_FIG1_DP` GPUs, times :data:`ZERO_FIG1_PARAMS`."""
    mem = memory.breakdown(ZERO_FIG1_MODEL, Layout(dp=ZERO_FIG1_DP, zero_stage=stage), BF16, **ZERO_OPTIONS)
    return float(mem.model_state()[0]) / (ZERO_FIG1_MODEL.layers * ZERO_FIG1_MODEL.dense_layer_params) * ZERO_FIG1_PARAMS


def reference_rows() -> list[dict[str, Any]]:
    """Each published value with the value the model computes for the same setup: the runs rows
    through ``runplan.predict_memory`` (the function ``scaletax predict`` calls), ZeRO Fig. 1 through
    ``memory.breakdown`` per parameter."""
    unit = {"GB": 1e9, "GiB": GIB}
    predicted = {r["run_id"]: r for r in reference_runs()}
    rows = []
    for ref in REFERENCES:
        if ref.run:
            calc = sum(predicted[ref.run][c] for c in TERM_COLUMNS[ref.term]) * GIB / unit[ref.unit]
        else:
            calc = _zero_state_bytes(int(ref.key.removeprefix("zero"))) / unit[ref.unit]
        rows.append({"key": ref.key, "what": ref.what, "source": f"{ref.cite}, {ref.where}", "cite": ref.cite,
                     "source_md": escape.markup(escape.myst_role("cite", ref.cite), f", {ref.where}"),
                     "unit": ref.unit, "published": ref.value, "computed": calc,
                     "error_pct": 100.0 * (calc - ref.value) / ref.value})
    return rows


def half_printed_unit(value: float) -> float:
    """Half a unit in the last decimal a paper prints ``value`` with (131.25 -> 0.005, 1.9 -> 0.05,
    120.0 -> 0.05): a computed value within it rounds to the printed one."""
    decimals = len(repr(float(value)).split(".")[1])
    return 0.5 * 10.0 ** -decimals


def reference_agreement_text(rows: Sequence[dict[str, Any]]) -> str:
    """How the computed reference values agree with the printed ones (rows of :func:`reference_rows`)."""
    ok = [abs(r["computed"] - r["published"]) <= half_printed_unit(r["published"]) for r in rows]
    worst = max(rows, key=lambda r: abs(r["error_pct"]))
    lead = ("Every computed value rounds to the published one" if all(ok) else
            f"{sum(ok)} of {len(rows)} computed values round to the published ones")
    return (f"{lead}; the largest relative difference, {abs(worst['error_pct']):.1f}%, is {worst['what']}: "
            f"{worst['computed']:g} {worst['unit']} against the {worst['published']:g} printed.")


# --- assumptions and precision ---------------------------------------------------------------

def precision_note(gpu_ids: Sequence[str], precision: str, allowed: Sequence[str] = recipes.TRAINING) -> str:
    """One sentence on which GPUs fall back from ``precision`` (:func:`recipes.training_precision`
    among the scenario's ``allowed`` precisions)."""
    fall = {}
    for g in gpu_ids:
        p = _train_name(g, precision, allowed)
        if p != precision:
            fall.setdefault(p, []).append(hardware.get(g).label)
    if not fall:
        return f"Every GPU of this scenario runs {precision.upper()} natively."
    parts = [f"{_join(labels)} {'lacks' if len(labels) == 1 else 'lack'} native {precision.upper()} "
             f"and {'is' if len(labels) == 1 else 'are'} modelled in {p.upper()}" for p, labels in fall.items()]
    return "; ".join(parts) + "."


def announced_note(gpu_ids: Sequence[str]) -> str:
    """One sentence naming the announced (not shipping) GPUs of the scenario, if any."""
    ann = [hardware.get(g).label for g in gpu_ids if hardware.get(g).announced]
    if not ann:
        return "Every GPU of this scenario ships today."
    verb = "is" if len(ann) == 1 else "are"
    return (f"{_join(ann)} {verb} announced, not shipping: {'its' if len(ann) == 1 else 'their'} rows are "
            f"projections from vendor figures.")


def assumptions(precision: str) -> dict[str, Any]:
    """The memory model's named assumptions for ``precision`` (a name), as plain numbers and text."""
    o = memory.resolve_options(recipes.training(precision))
    return {
        "reserve_gib": options.RESERVE_GIB,
        "param_bytes": o["param_bytes"],
        "grad_bytes": o["grad_bytes"],
        "optimizer_bytes": o["optimizer_bytes"],
        "lowp_bytes": o["lowp"],
        "state_bytes": o["param_bytes"] + o["grad_bytes"] + o["optimizer_bytes"] + o["lowp"],
        "act_bytes": memory.ACT_BYTES,
        "attention": o["attention"],
        "selective": ", ".join(o["selective_modules"]),
        "max_tp": MAX_TP,
        "zero_stage": SPACE.zero_stage[0],
        "batch_tolerance_pct": 100 * SPACE.batch_tolerance,
        "max_gpus": MAX_GPUS,
    }


def _train_name(gpu_id: str, precision: str, allowed: Sequence[str]) -> str:
    """The name of the precision GPU ``gpu_id`` trains in (:func:`recipes.training_precision`)."""
    return recipes.training_precision(hardware.get(gpu_id), precision, allowed).name


# --- formatting helpers ---------------------------------------------------------------------

def _join(items: Sequence[str]) -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def count_text(n: int | None, limit: int = MAX_GPUS) -> str:
    """A GPU count as text, or "more than <limit>" when nothing fits up to the search limit."""
    return f"{n:,}" if n is not None else f"more than {limit:,}"


def layout_label(lay: Layout | None, model: Model | None = None, recompute: bool = True) -> str:
    """:func:`scaletax.inputs.layout.label` without the schedule (``TP8 PP16 EP8 DP128, selective
    recompute``), or "none fits"."""
    return "none fits" if lay is None else label(lay, model, schedule=False, recompute=recompute)


def recompute_phrase(mode: str) -> str:
    """"no recompute", "selective recompute", "full recompute"."""
    return "no recompute" if mode == "none" else f"{mode} recompute"


def _cell_label(lay: Layout | None, model: Model) -> str:
    if lay is None:
        return "–"
    s = f"{lay.tp}·{lay.pp}"
    if model.is_moe:
        s += f" e{lay.ep}"
    return f"{s} {lay.recompute[0]}"


def batch_sequences(model: Model, batch_tokens: int | None) -> int | None:
    """Sequences per optimizer step for a global batch of ``batch_tokens`` (None: unbounded),
    :func:`scaletax.model.search.target_sequences`."""
    return None if batch_tokens is None else search.target_sequences(model, batch_tokens)


# --- the fit search --------------------------------------------------------------------------

def space(batch_seqs: int | None, max_gpus: int = MAX_GPUS) -> search.SearchSpace:
    """:data:`SPACE` with the search's batch rule when there is a batch, without one when not."""
    out = SPACE if batch_seqs is not None else SPACE.with_(batch_tolerance=None)
    return out if max_gpus == out.max_gpus else out.with_(max_gpus=max_gpus)


def fit(model: Model, gpus: int, gpu_ids: Sequence[str], precisions: dict[str, recipes.Recipe],
        batch_seqs: int | None = None) -> dict[str, dict[str, Any]]:
    """For each GPU of ``gpu_ids``: the least model-parallel layout of :data:`SPACE` on ``gpus``
    GPUs that fits, its GiB and what sets its model-parallel size
    (:func:`scaletax.model.plan.least_parallel`: ``layout``, ``gib``, ``bound``). ``precisions``:
    GPU id -> the recipe it trains in."""
    return {g: planning.least_parallel(model, hardware.get(g), precisions[g], gpus, SPACE, batch_seqs)
            for g in gpu_ids}


def min_gpus(model: Model, gpu_id: str, precision: str, batch_tokens: int | None = None,
             max_gpus: int = MAX_GPUS, allowed: Sequence[str] = recipes.TRAINING) -> dict[str, Any]:
    """Smallest GPU count (1, 2, 4, then whole 8-GPU nodes) that holds ``model`` on ``gpu_id``
    in its training precision (:func:`recipes.training_precision` of ``precision`` and ``allowed``):
    :func:`scaletax.model.search.min_gpus` on :data:`SPACE`, with the global batch of ``batch_tokens``."""
    g = hardware.get(gpu_id)
    cap = float(g.hbm_gib)
    prec = recipes.training_precision(g, precision, allowed)
    B = batch_sequences(model, batch_tokens)
    res = planning.fewest_gpus(model, g, prec, SPACE if max_gpus == SPACE.max_gpus else SPACE.with_(max_gpus=max_gpus), B)
    n, lay = (res.gpus[0], res.best) if res.fits else (None, None)
    return {"model": model.id, "model_name": model.name, "model_short": short_name(model), "gpu": gpu_id,
            "label": g.label, "status": g.status, "capacity_gib": cap,
            "precision": prec.name, "gpus": n, "gpus_text": count_text(n, max_gpus), "max_gpus": max_gpus, "layout": lay,
            "layout_label": layout_label(lay, model), "memory_gib": res.metrics.get("memory_gib"),
            "mp": None if lay is None else lay.tp * lay.pp * lay.cp}


def min_gpus_rows(model_ids: Sequence[str], gpu_ids: Sequence[str], precision: str,
                  batch_tokens: int | None = None, allowed: Sequence[str] = recipes.TRAINING) -> list[dict[str, Any]]:
    """``min_gpus`` for every model x GPU, with the aggregate HBM bought at that count."""
    def row(c) -> dict[str, Any]:
        m, g = c
        r = min_gpus(m, g, precision, batch_tokens, allowed=allowed)
        state = _full_state_bytes(m, r["precision"])
        r["state_tib"] = state / 2**40
        if r["gpus"] is not None:
            r["hbm_tib"] = r["gpus"] * r["capacity_gib"] / 1024
            r["hbm_per_state"] = r["gpus"] * r["capacity_gib"] * GIB / state
        else:
            r["hbm_tib"] = r["hbm_per_state"] = None
        return r

    return jobserver.map(row, [(models.get(mid), g) for mid in model_ids for g in gpu_ids])


def _full_state_bytes(model: Model, precision: str) -> float:
    """Weights + gradients + optimizer of the whole model (one copy, unsharded) in ``precision``
    (a name), bytes."""
    lay = Layout(tp=1, pp=1, dp=1, zero_stage=0)
    return float(memory.breakdown(model, lay, recipes.training(precision), fsdp_prefetch_layers=0).model_state()[0])


def fit_map_rows(model_ids: Sequence[str], gpu_ids: Sequence[str], counts: Iterable[int], precision: str,
                 batch_tokens: int | None = None, min_rows: Sequence[dict] | None = None,
                 allowed: Sequence[str] = recipes.TRAINING) -> list[dict[str, Any]]:
    """GPU type x GPU count -> fits, and the least model-parallel layout it forces.

    Rows: ``model, model_name, gpu, label, gpus, capacity_gib, precision, fits, layout,
    layout_label, cell, tp, pp, cp, ep, dp, recompute, mp (tp*pp*cp), memory_gib, status`` where
    ``status`` says in words why nothing fits (``min_rows`` from ``min_gpus_rows`` give the
    smallest count; computed here when not given).
    """
    counts = sorted(set(int(c) for c in counts))
    if min_rows is None:
        min_rows = min_gpus_rows(model_ids, gpu_ids, precision, batch_tokens, allowed=allowed)
    need = {(r["model"], r["gpu"]): (r["gpus"], r.get("max_gpus", MAX_GPUS)) for r in min_rows}
    rows = []
    for mid in model_ids:
        m = models.get(mid)
        B = batch_sequences(m, batch_tokens)
        caps = {g: float(hardware.get(g).hbm_gib) for g in gpu_ids}
        precs = {g: recipes.training_precision(hardware.get(g), precision, allowed) for g in gpu_ids}
        per_count = dict(zip(counts, jobserver.map(lambda n, m=m, B=B, precs=precs: fit(m, n, gpu_ids, precs, B), counts)))
        for g in gpu_ids:
            label = hardware.get(g).label
            for n in counts:
                res = per_count[n][g]
                lay, gib = res["layout"], res["gib"]
                row = {"model": mid, "model_name": m.name, "model_short": short_name(m), "gpu": g, "label": label, "gpus": n,
                       "capacity_gib": caps[g], "precision": precs[g].name, "fits": lay is not None, "layout": lay,
                       "layout_label": layout_label(lay, m), "cell": _cell_label(lay, m), "memory_gib": gib}
                for f in ("tp", "pp", "cp", "ep", "dp", "recompute"):
                    row[f] = getattr(lay, f) if lay is not None else None
                row["mp"] = lay.tp * lay.pp * lay.cp if lay is not None else None
                row["bound"] = res["bound"]
                row["status"] = "fits" if lay is not None else _why_not(m, label, n, *need.get((mid, g), (None, MAX_GPUS)), B)
                rows.append(row)
    return rows


def _why_not(model: Model, label: str, n: int, need: int | None, limit: int, batch_seqs: int | None) -> str:
    head = f"{short_name(model)} does not fit on {n:,} {label} GPUs"
    if need is None:
        return f"{head}; it needs {count_text(None, limit)}"
    if n < need:
        return f"{head}; it needs at least {need:,}"
    why = "no valid layout of exactly that count fits"
    if batch_seqs is not None:
        why += f" with a global batch of {batch_seqs:,} sequences"
    return f"{head}: {why} (the smallest count that fits is {need:,})"


# --- bytes by term ---------------------------------------------------------------------------

def term_rows(model: Model, layout: Layout, gpu_id: str, precision: str, allowed: Sequence[str] = recipes.TRAINING,
              **extra: Any) -> list[dict[str, Any]]:
    """GiB per GPU by term (one row per term, stacking order ``order``) plus capacity."""
    gpu = hardware.get(gpu_id)
    g = memory.breakdown(model, layout, recipes.training_precision(gpu, precision, allowed)).gib()
    cap = float(gpu.hbm_gib)
    return [{"model": model.id, "model_name": model.name, "model_short": short_name(model), "gpu": gpu_id, "label": gpu.label,
             "term": t, "order": i, "gib": float(g[t][0]), "total_gib": float(g["total"][0]),
             "capacity_gib": cap, "layout_label": layout_label(layout, model), **extra}
            for i, t in enumerate(TERMS)]


def breakdown_rows(min_rows: Sequence[dict], map_rows: Sequence[dict], cluster_gpus: int,
                   precision: str, allowed: Sequence[str] = recipes.TRAINING) -> list[dict[str, Any]]:
    """Stacked-bar rows at the smallest count that fits and at ``cluster_gpus`` (where it fits)."""
    out = []
    for r in min_rows:
        if r["layout"] is not None:
            out += term_rows(models.get(r["model"]), r["layout"], r["gpu"], precision, allowed,
                             basis="fewest GPUs that fit", gpus=r["gpus"])
    for r in map_rows:
        if r["gpus"] == cluster_gpus and r["layout"] is not None:
            out += term_rows(models.get(r["model"]), r["layout"], r["gpu"], precision, allowed,
                             basis=f"{cluster_gpus:,} GPUs", gpus=cluster_gpus)
    return out


def state_rows(model_ids: Sequence[str], precision: str) -> list[dict[str, Any]]:
    """Model state of each model: parameters, bytes per parameter by term, total TiB."""
    rows = []
    rec = recipes.training(precision)
    for mid in model_ids:
        m = models.get(mid)
        mem = memory.breakdown(m, Layout(tp=1, pp=1, dp=1, zero_stage=0), rec, fsdp_prefetch_layers=0)
        n = m.total_params
        # the optimizer's bytes at its step, the transient fp32 gradient copy included (memory docstring)
        opt = memory.resolve_options(rec)["optimizer_bytes"]
        state = float(mem.weights[0] + mem.gradients[0]) + opt * n
        rows.append({"model": mid, "model_name": m.name, "model_short": short_name(m), "params_b": n / 1e9, "active_b": m.active_params / 1e9,
                     "weights_bpp": float(mem.weights[0]) / n, "gradients_bpp": float(mem.gradients[0]) / n,
                     "optimizer_bpp": opt, "state_bpp": state / n, "state_tib": state / 2**40})
    return rows


# --- sensitivity -----------------------------------------------------------------------------

def reference_layout(model_id: str, gpu_ids: Sequence[str], map_rows: Sequence[dict], min_rows: Sequence[dict],
                     cluster_gpus: int) -> dict[str, Any] | None:
    """The layout the sensitivity sweeps hold fixed for ``model_id``.

    The layout forced at ``cluster_gpus`` on the smallest-memory GPU where the model fits
    there; else the smallest-count layout on the smallest-memory GPU that holds it at all.
    None when the model fits nowhere.
    """
    by_cap = sorted(gpu_ids, key=lambda g: (hardware.get(g).hbm_gib, list(gpu_ids).index(g)))
    for g in by_cap:
        for r in map_rows:
            if r["model"] == model_id and r["gpu"] == g and r["gpus"] == cluster_gpus and r["layout"] is not None:
                return {"model": model_id, "gpu": g, "label": r["label"], "gpus": cluster_gpus,
                        "layout": r["layout"], "basis": f"forced on {r['label']} at {cluster_gpus:,} GPUs"}
    for g in by_cap:
        for r in min_rows:
            if r["model"] == model_id and r["gpu"] == g and r["layout"] is not None:
                return {"model": model_id, "gpu": g, "label": r["label"], "gpus": r["gpus"], "layout": r["layout"],
                        "basis": f"forced on the fewest {r['label']} GPUs that hold it ({r['gpus']:,})"}
    return None


def _with_seq(model: Model, seq_len: int) -> Model:
    return Model(**{**model.model_dump(), "seq_len": int(seq_len)})


def sweep_rows(model: Model, layout: Layout, precision: recipes.Recipe, *, seq_lens: Sequence[int] = SEQ_LENS,
               micro_batches: Sequence[int] = MICRO_BATCHES) -> list[dict[str, Any]]:
    """GiB per GPU at ``layout`` (recompute varied) against sequence length and micro-batch.

    ``knob`` is "sequence length" (tokens, micro-batch held) or "micro-batch" (sequences, the
    number of micro-batches per step held). Rows: ``knob, x, recompute, total_gib,
    activations_gib, state_gib``.
    """
    rows = []
    modes = LayoutArray.from_layouts([layout.replace(recompute=r) for r in RECOMPUTE])
    for s in seq_lens:
        mem = memory.breakdown(_with_seq(model, s), modes, precision).gib()
        for i, r in enumerate(RECOMPUTE):
            rows.append({"model": model.id, "model_short": short_name(model), "knob": "sequence length", "x": int(s),
                         "recompute": r, "total_gib": float(mem["total"][i]),
                         "activations_gib": float(mem["activations"][i]),
                         "state_gib": float(mem["weights"][i] + mem["gradients"][i] + mem["optimizer"][i])})
    nm = layout.n_micro
    mb = np.asarray(micro_batches, dtype=np.int64)
    codes = np.asarray([RECOMPUTE_CODE[r] for r in RECOMPUTE], dtype=np.int64)
    m_grid, c_grid = (a.ravel() for a in np.meshgrid(mb, codes, indexing="ij"))
    base = LayoutArray.from_layouts([layout])
    la = base[np.zeros(len(m_grid), dtype=np.int64)].replace(
        mbs=m_grid, gbs=m_grid * layout.dp * nm, recompute=c_grid)
    mem = memory.breakdown(model, la, precision).gib()
    for i in range(len(la)):
        rows.append({"model": model.id, "model_short": short_name(model), "knob": "micro-batch", "x": int(m_grid[i]),
                     "recompute": RECOMPUTE_NAME[int(c_grid[i])], "total_gib": float(mem["total"][i]),
                     "activations_gib": float(mem["activations"][i]),
                     "state_gib": float(mem["weights"][i] + mem["gradients"][i] + mem["optimizer"][i])})
    return rows


def limit_rows(model: Model, layout: Layout, gpu_ids: Sequence[str], precision: str, *,
               seq_lens: Sequence[int] = SEQ_LENS, allowed: Sequence[str] = recipes.TRAINING) -> list[dict[str, Any]]:
    """Per GPU at a fixed ``layout``: least recompute that fits, largest micro-batch and
    longest sequence (of ``seq_lens``) per recompute mode (0 / None where even the least fails)."""
    modes = LayoutArray.from_layouts([layout.replace(recompute=r) for r in RECOMPUTE])
    seq_tot = {}
    rows = []
    for g in gpu_ids:
        gpu = hardware.get(g)
        prec = recipes.training_precision(gpu, precision, allowed)
        cap = float(gpu.hbm_gib)
        if prec not in seq_tot:
            seq_tot[prec] = np.stack([memory.breakdown(_with_seq(model, s), modes, prec).total for s in seq_lens])
        ok = seq_tot[prec] <= cap * GIB  # (seq, recompute)
        longest = [max((s for s, f in zip(seq_lens, ok[:, j]) if f), default=None) for j in range(len(RECOMPUTE))]
        least = memory.least_recompute(model, layout, cap, prec)[0]
        mbs = memory.max_micro_batch(model, modes, cap, prec)
        rows.append({"model": model.id, "model_short": short_name(model), "gpu": g, "label": gpu.label,
                     "capacity_gib": cap, "least_recompute": RECOMPUTE_NAME[least] if least >= 0 else "does not fit",
                     **{f"mbs_{r}": int(mbs[j]) for j, r in enumerate(RECOMPUTE)},
                     **{f"seq_{r}": longest[j] for j, r in enumerate(RECOMPUTE)}})
    return rows


def sensitivity(model_ids: Sequence[str], gpu_ids: Sequence[str], map_rows: Sequence[dict],
                min_rows: Sequence[dict], cluster_gpus: int, precision: str,
                allowed: Sequence[str] = recipes.TRAINING) -> tuple[dict[str, dict | None], list[dict], list[dict]]:
    """Reference layout per model (``reference_layout``), sweep rows and limit rows at it."""
    refs, sweeps, limits = {}, [], []
    for mid in model_ids:
        ref = reference_layout(mid, gpu_ids, map_rows, min_rows, cluster_gpus)
        refs[mid] = ref
        if ref is None:
            continue
        m = models.get(mid)
        sweeps += sweep_rows(m, ref["layout"], recipes.training_precision(hardware.get(ref["gpu"]), precision, allowed))
        limits += limit_rows(m, ref["layout"], gpu_ids, precision, allowed=allowed)
    return refs, sweeps, limits


def capacity_rows(model_ids: Sequence[str], gpu_ids: Sequence[str]) -> list[dict[str, Any]]:
    """One row per model x GPU with its capacity (horizontal rules in the sweep charts)."""
    return [{"model_short": short_name(models.get(mid)), "gpu": g, "label": hardware.get(g).label,
             "capacity_gib": float(hardware.get(g).hbm_gib)} for mid in model_ids for g in gpu_ids]


def reference_text(refs: dict[str, dict | None]) -> str:
    """Which layout the sensitivity sweeps hold fixed, per model."""
    parts = []
    for mid, ref in refs.items():
        m = models.get(mid)
        if ref is None:
            parts.append(f"{short_name(m)} fits on no GPU of this scenario, so it has no sweep")
        else:
            parts.append(f"{short_name(m)} at {layout_label(ref['layout'], m, recompute=False)}, the layout {ref['basis']}")
    return "; ".join(parts) + "."


def recompute_text(sweeps: Sequence[dict], refs: dict[str, dict | None]) -> str:
    """Per model, at its own sequence length and one sequence per micro-batch: the activation
    GiB that selective and full recompute free at the reference layout."""
    parts = []
    for mid, ref in refs.items():
        if ref is None:
            continue
        m = models.get(mid)
        rs = {r["recompute"]: r for r in sweeps if r["model"] == mid and r["knob"] == "micro-batch"
              and r["x"] == ref["layout"].mbs}
        none, sel, full = (rs[k]["activations_gib"] for k in RECOMPUTE)
        parts.append(f"for {short_name(m)} (sequence {m.seq_len:,}) activations take {none:.1f} GiB per GPU without "
                     f"recompute; selective recompute frees {none - sel:.1f} GiB ({100 * (none - sel) / none:.0f}%) "
                     f"and full recompute {none - full:.1f} GiB ({100 * (none - full) / none:.0f}%)")
    if not parts:
        return "No model of this scenario fits, so there is no recompute comparison."
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def bound_text(map_rows: Sequence[dict], cluster_gpus: int, batch_tokens: int | None) -> str:
    """Where the global batch, not memory, sets the model parallelism at ``cluster_gpus``
    ("" where it sets none)."""
    batch = [r for r in map_rows if r["gpus"] == cluster_gpus and r["fits"] and r["bound"] == "batch"]
    if not batch:
        return ""
    parts = []
    for mid in dict.fromkeys(r["model"] for r in batch):
        m = models.get(mid)
        labels = [r["label"] for r in batch if r["model"] == mid]
        B = batch_sequences(m, batch_tokens)
        parts.append(f"{short_name(m)} on {_join(labels)} (the {B:,} sequences of a step allow at most "
                     f"{B:,} data-parallel ranks)")
    return (f"At {cluster_gpus:,} GPUs, the global batch, not memory, sets the model parallelism of "
            f"{'; '.join(parts)}: a less model-parallel layout would fit in memory but would need more "
            f"data-parallel ranks than there are sequences.")


def map_text(map_rows: Sequence[dict], gpu_ids: Sequence[str], cluster_gpus: int, batch_tokens: int | None) -> str:
    """The fit map in words: what ``cluster_gpus`` forces (``forced_text``), where the global
    batch rather than memory decides (``bound_text``), and every other cell that does not fit."""
    parts = [forced_text(map_rows, gpu_ids, cluster_gpus), bound_text(map_rows, cluster_gpus, batch_tokens)]
    others = [r for r in map_rows if r["gpus"] != cluster_gpus]
    if all(r["fits"] for r in map_rows):
        parts.append("Every model fits on every GPU type at every cluster size of this scenario.")
    elif others:
        parts.append(nofit_text(others) if not all(r["fits"] for r in others)
                     else "At the other cluster sizes every model fits on every GPU type.")
    return " ".join(p for p in parts if p)


def triple(row: dict, prefix: str, fmt=str) -> str:
    """``a / b / c`` of ``prefix_none, prefix_selective, prefix_full`` ("–" for None/0)."""
    vals = [row[f"{prefix}_{r}"] for r in RECOMPUTE]
    return " / ".join("–" if not v else fmt(v) for v in vals)


def limit_table_rows(limits: Sequence[dict]) -> list[dict[str, Any]]:
    """``limit_rows`` with the per-recompute columns joined as ``mbs`` and ``seq`` text."""
    return [dict(r, mbs=triple(r, "mbs"), seq=triple(r, "seq", seq_text)) for r in limits]


def seq_text(n: int | None) -> str:
    """A sequence length as ``4k`` (tokens / 1024)."""
    return "–" if not n else (f"{n // 1024}k" if n % 1024 == 0 else f"{n:,}")


# --- published runs --------------------------------------------------------------------------

def run_rows(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The published runs with predicted GiB by term, whether they fit, and display fields."""
    rows = runplan.predict_memory(runs.read_runs(path or DATA_DIR / "published_runs.csv"))
    out = []
    for i, r in enumerate(rows, start=1):
        lay = runs.row_layout(r, recompute=r["recompute_assumed"] or None)
        tag = str(r["run_id"]).split("-")[0]
        hw = hardware.get(str(r["hardware"]).strip())
        extras = [f"mbs {lay.mbs}"]
        stated = str(r.get("recompute") or "unknown").strip().lower()
        out.append({
            "run_id": r["run_id"], "run": f"#{i} {str(r['model']).split(' (')[0]}, {tag}",
            "kind": "mlperf" if tag.lower().startswith("mlperf") else "other", "hardware": hw.id,
            "gpus_text": f"{r['gpu_count']:,} × {hw.label}",
            "layout_text": f"{layout_label(lay, runs.row_model(r), recompute=False)}, {', '.join(extras)}, "
                           f"{str(r['precision']).upper()}",
            "weights_gib": r["memory_weights_gib"], "gradients_gib": r["memory_gradients_gib"],
            "optimizer_gib": r["memory_optimizer_gib"], "activations_gib": r["memory_activations_gib"],
            "reserve_gib": r["memory_reserve_gib"], "total_gib": r["memory_total_gib"],
            "capacity_gib": r["memory_capacity_gib"], "fits": r["fits"],
            "terms_text": " / ".join(f"{r[f'memory_{t}_gib']:.1f}" for t in ("weights", "gradients", "optimizer", "activations")),
            "recompute_text": (f"{r['recompute_assumed']} (assumed)" if r["recompute_assumed"] else f"{stated} (stated)"),
            "recompute_assumed": r["recompute_assumed"], "use_pct": 100.0 * r["memory_total_gib"] / r["memory_capacity_gib"],
        })
    return out


def run_table_rows(rows: Sequence[dict], kind: str) -> list[dict[str, Any]]:
    """The runs of one ``kind`` ("mlperf": MLPerf Training submissions, "other": framework
    recipes and papers)."""
    return [r for r in rows if r["kind"] == kind]


def run_term_rows(rows: Sequence[dict]) -> list[dict[str, Any]]:
    """Long-format rows (one per run and term) for a stacked bar of the published runs."""
    out = []
    for i, r in enumerate(rows):
        for j, t in enumerate(TERMS):
            out.append({"idx": i + 1, "run": r["run"], "gpus_text": r["gpus_text"], "term": t,
                        "order": j, "gib": r[f"{t}_gib"], "capacity_gib": r["capacity_gib"],
                        "total_gib": r["total_gib"]})
    return out


def runs_text(rows: Sequence[dict]) -> str:
    """One sentence: how many published runs the model predicts to fit, and the closest call."""
    n = len(rows)
    fit_n = sum(1 for r in rows if r["fits"])
    tight = max(rows, key=lambda r: r["use_pct"])
    lead = (f"All {n} published runs are predicted to fit" if fit_n == n
            else f"{fit_n} of {n} published runs are predicted to fit; the model overestimates the memory of "
                 f"{_join([r['run'] + ' on ' + r['gpus_text'] for r in rows if not r['fits']])}, which ran")
    text = (f"{lead}. The tightest is {tight['run']} on {tight['gpus_text']} at {tight['use_pct']:.1f}% of "
            f"capacity ({tight['total_gib']:.1f} of {tight['capacity_gib']:.1f} GiB).")
    assumed = [r["recompute_assumed"] for r in rows if r["recompute_assumed"]]
    if assumed:
        counts = ", ".join(f"{assumed.count(m)} with {recompute_phrase(m)}" for m in RECOMPUTE if assumed.count(m))
        text += (f" For the {len(assumed)} runs that do not state their recompute setting the check is weaker: "
                 f"it shows that some recompute mode fits ({counts}).")
    return text


# --- sentences for the prose -------------------------------------------------------------------

def extremes(gpu_ids: Sequence[str]) -> tuple[str, str]:
    """(smallest-memory GPU, largest-memory *shipping* GPU) of the scenario; the largest
    announced one only when none ships. Ties go to the GPU listed first."""
    order = list(gpu_ids)
    small = min(order, key=lambda g: (hardware.get(g).hbm_gib, order.index(g)))
    shipping = [g for g in order if not hardware.get(g).announced] or order
    big = max(shipping, key=lambda g: (hardware.get(g).hbm_gib, -order.index(g)))
    return small, big


def min_gpus_text(min_rows: Sequence[dict], gpu_ids: Sequence[str]) -> str:
    """Per model: the fewest GPUs on the smallest- and the largest-memory part."""
    small, big = extremes(gpu_ids)
    sentences = []
    for mid in dict.fromkeys(r["model"] for r in min_rows):
        rs = {r["gpu"]: r for r in min_rows if r["model"] == mid}
        a, b = rs[small], rs[big]
        if small == big:
            sentences.append(f"{a['model_short']} needs at least {a['gpus_text']} {a['label']} GPUs "
                             f"({a['layout_label']})")
            continue
        s = (f"{a['model_short']} needs at least {a['gpus_text']} {a['label']} GPUs ({a['layout_label']}) "
             f"but {b['gpus_text']} {b['label']} GPUs ({b['layout_label']})")
        if a["gpus"] and b["gpus"]:
            s += f", {a['gpus'] / b['gpus']:.1f}x fewer"
        sentences.append(s)
    return "; ".join(sentences) + "."


def tax_text(min_rows: Sequence[dict]) -> str:
    """Per model: the range of HBM bought per byte of model state over the scenario's GPUs."""
    sentences = []
    for mid in dict.fromkeys(r["model"] for r in min_rows):
        rs = [r for r in min_rows if r["model"] == mid and r["hbm_per_state"]]
        name = short_name(models.get(mid))
        if not rs:
            sentences.append(f"{name} fits on none of these GPUs")
            continue
        lo = min(rs, key=lambda r: r["hbm_per_state"])
        hi = max(rs, key=lambda r: r["hbm_per_state"])
        if lo is hi:
            sentences.append(f"{name}: {lo['hbm_per_state']:.2f} bytes of HBM per byte of model state on "
                             f"{lo['label']} ({lo['hbm_tib']:,.1f} TiB)")
        else:
            sentences.append(f"{name}: from {lo['hbm_per_state']:.2f} bytes of HBM per byte of model state on "
                             f"{lo['label']} ({lo['hbm_tib']:,.1f} TiB) to {hi['hbm_per_state']:.2f} on "
                             f"{hi['label']} ({hi['hbm_tib']:,.1f} TiB)")
    return "; ".join(sentences) + "."


def reserve_text(gpu_ids: Sequence[str]) -> str:
    """The share of capacity the reserve takes on the smallest- and largest-memory part."""
    small, big = extremes(gpu_ids)
    parts = [f"{100 * options.RESERVE_GIB / hardware.get(g).hbm_gib:.1f}% of the {hardware.get(g).hbm_gib:.1f} GiB "
             f"of the {hardware.get(g).label}" for g in dict.fromkeys((small, big))]
    return f"The reserve alone takes {' but '.join(parts)}."


def forced_text(map_rows: Sequence[dict], gpu_ids: Sequence[str], cluster_gpus: int) -> str:
    """Per model: the model-parallel size (TP x PP) forced at ``cluster_gpus`` on the smallest-
    and the largest-memory part, or why nothing fits."""
    small, big = extremes(gpu_ids)
    sentences = []
    for mid in dict.fromkeys(r["model"] for r in map_rows):
        rs = {r["gpu"]: r for r in map_rows if r["model"] == mid and r["gpus"] == cluster_gpus}
        if not rs:
            continue
        parts = []
        for g in dict.fromkeys((small, big)):
            r = rs[g]
            if r["fits"]:
                parts.append(f"TP×PP = {r['mp']} on {r['label']} ({r['layout_label']})")
            else:
                parts.append(_drop_name(r["status"], r["model_short"]))
        name = next(iter(rs.values()))["model_short"]
        sentences.append(f"{name}: {' against '.join(parts)}")
    return "; ".join(sentences) + "."


def _drop_name(status: str, name: str) -> str:
    """A ``status`` sentence without its leading model name."""
    return status[len(name) + 1:] if status.startswith(name + " ") else status


def nofit_text(map_rows: Sequence[dict]) -> str:
    """Every GPU type x count of the fit map where a model does not fit, in words."""
    bad = [r for r in map_rows if not r["fits"]]
    if not bad:
        return "Every model fits on every GPU type at every cluster size of this scenario."
    return "; ".join(r["status"] for r in bad) + "."


def buys_text(map_rows: Sequence[dict], limits: Sequence[dict], refs: dict[str, dict | None],
              gpu_ids: Sequence[str], cluster_gpus: int) -> str:
    """Per model: the model-parallel ways and recompute the largest-memory part saves against the
    smallest-memory part at ``cluster_gpus`` and at the reference layout."""
    small, big = extremes(gpu_ids)
    if small == big:
        return "This scenario has a single GPU memory size, so there is no larger memory to compare against."
    out = []
    for mid, ref in refs.items():
        m = models.get(mid)
        rows = {r["gpu"]: r for r in map_rows if r["model"] == mid and r["gpus"] == cluster_gpus}
        lim = {r["gpu"]: r for r in limits if r["model"] == mid}
        a, b = rows.get(small), rows.get(big)
        if a is None or b is None:
            continue
        head = f"{short_name(m)} at {cluster_gpus:,} GPUs: "
        if not (a["fits"] and b["fits"]):
            out.append(head + _drop_name(a["status"] if not a["fits"] else b["status"], short_name(m)))
            continue
        if a["mp"] > b["mp"]:
            ratio = a["mp"] / b["mp"]
            s = (f"{b['label']} needs {ratio:g}x fewer model-parallel ways than {a['label']} "
                 f"(TP×PP {b['mp']} against {a['mp']})")
        else:
            s = f"{a['label']} and {b['label']} both need TP×PP = {a['mp']}"
            if b["bound"] == "batch":
                s += " (set by the global batch)"
            if m.is_moe and b["ep"] != a["ep"]:
                s += f", but {b['label']} holds the experts on EP{b['ep']} instead of EP{a['ep']}"
        if a["recompute"] == b["recompute"]:
            s += f", with {recompute_phrase(a['recompute'])} on either"
        else:
            s += (f", with {recompute_phrase(a['recompute'])} on {a['label']} and "
                  f"{recompute_phrase(b['recompute'])} on {b['label']}")
        if ref is not None and small in lim and big in lim:
            need = {g: lim[g]["least_recompute"] for g in (small, big)}
            phrase = {g: ("does not fit" if v == "does not fit" else f"needs {recompute_phrase(v)}") for g, v in need.items()}
            lay = layout_label(ref["layout"], m, recompute=False)
            if need[small] == need[big]:
                s += f"; at the fixed layout {lay}, both {phrase[small].replace('needs', 'need')}"
            else:
                s += f"; at the fixed layout {lay}, {lim[small]['label']} {phrase[small]} and {lim[big]['label']} {phrase[big]}"
            s += (f", and {lim[big]['label']} fits a micro-batch of {lim[big]['mbs_none'] or 'no'} sequences without "
                  f"recompute against {lim[small]['mbs_none'] or 'none'}")
        out.append(head + s)
    if not out:
        return "No model of this scenario fits on both GPU types."
    return (f"Comparing the {hardware.get(small).label} with the {hardware.get(big).label}: "
            + "; ".join(out) + ".")


__all__ = ["GIB", "MAX_GPUS", "MAX_TP", "MICRO_BATCHES", "RECOMPUTE", "RECOMPUTE_COLORS", "Reference",
           "REFERENCES", "SEQ_LENS", "TERM_COLORS", "TERMS", "ZERO_FIG1_MODEL", "announced_note",
           "assumptions", "batch_sequences", "bound_text", "breakdown_rows", "buys_text", "candidates",
           "capacity_rows", "count_text", "extremes", "fit", "fit_map_rows", "forced_text",
           "layout_label", "limit_rows", "limit_table_rows", "map_text", "min_gpus", "min_gpus_rows", "min_gpus_text",
           "nofit_text", "precision_note", "recompute_phrase", "recompute_text", "reference_layout",
           "reference_rows", "reference_setup", "reference_text", "reserve_text", "run_rows", "run_table_rows",
           "run_term_rows", "runs_text", "sensitivity", "seq_text", "short_name", "state_rows",
           "sweep_rows", "tax_text", "term_rows", "triple"]
