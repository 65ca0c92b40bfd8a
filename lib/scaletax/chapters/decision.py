"""The decision: which GPU, how many, how long, at what cost, and why, for the scenario.

The analysis of the decision chapter and the executive summary. Every number comes from the
layout search (:func:`scaletax.model.search.search`: the fastest layout that fits, with the
throughput band of the calibrated step-time model) and the arithmetic of :mod:`scaletax.model.cost`;
this module chooses the cases, runs them once (results are memoized per process) and turns
them into rows of numbers. Sentences and text cells are in :mod:`scaletax.chapters.summary`.

Public API
----------
- ``Plan``: the scenario inputs both notebooks read (:meth:`Plan.from_params` takes the
  notebook parameters); ``run_precision`` / ``fastest_precision`` per GPU.
- ``best(...)``: one memoized search; ``outcome(...)`` one case as a row with time, GPU-hours,
  energy and cost and their low/high bands; ``economics(rows, plan)`` fills those columns for
  many rows at once (numpy arrays through :mod:`scaletax.model.cost`).
- ``decision_rows(plan)``: every model x GPU type on the scenario's cluster, with the GPU count
  that finishes in the target time (:func:`gpus_for_target`, searched, not extrapolated).
- ``fitting`` / ``cheapest`` / ``fastest``: picks from those rows; ``cheapest_choice``: which GPU
  is cheapest, or which tie on cost (their cost ratio's band holds 1), the one answer every
  chapter naming "the cheapest" uses.
- ``Plan.goodput_at`` / ``goodput_detail``: the goodput of a model on a GPU count (the planner's
  ``cluster.goodput``, else the scale model of :mod:`scaletax.model.goodput`), which every day count and
  cost of this module uses; ``cluster_power``: IT and facility MW in whole systems
  (:mod:`scaletax.model.power`, the system power energy uses too); ``owned_price``: USD per GPU-hour of
  an owned GPU beside the rental price (:mod:`scaletax.model.ownership`).
- ``waterfall(plan, model, target)``: where a GPU's advantage over H100 comes from, by swapping
  one group of hardware properties at a time in the model (:data:`FACTORS`).
- ``breakeven_rows``: cost per trained token against the reference Hopper, and the price per
  GPU-hour at which each newer GPU matches it.
- ``top_rows``: the largest cluster of the scenario; ``heq_rows``: H-equivalents;
  ``rubin_claim``: GPUs to train an MoE budget in a fixed time, Rubin against GB200;
  ``tornado_rows``: one-at-a-time sensitivity (:func:`scaletax.model.cost.training_sensitivity`).
- ``*_chart_rows``: the numbers each figure encodes.

Conventions: the cost of a run is GPU-hours x price per GPU-hour plus facility energy x the
scenario's electricity price (:func:`scaletax.model.cost.train_estimate`); the price is treated as
excluding power. Bands: the efficiency band's low/high corners of the step-time model; for a
ratio of two GPUs both at the same corner (the parameters are shared), min/max of the two.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence


from scaletax.inputs import hardware, recipes, references
from scaletax.inputs import models as catalog
from scaletax.inputs.layout import label
from scaletax.model import cost, efficiency, goodput, search
from scaletax.model import plan as planning
from scaletax.render import whatif, wording

# =========================================================================================
# Constants
# =========================================================================================
#: The vendor claim the Rubin section checks (``data/references.yaml``, ``claims``): the GPU
#: ratio ``new`` / ``old`` for the same MoE training in the same time, with its source.
CLAIM_KEY = "rubin_moe_gpus"
#: Families counted as Blackwell (the waterfall targets, the "best Blackwell").
BLACKWELL_FAMILIES = ("blackwell", "blackwell_ultra")
#: Hardware fields swapped by each factor of the waterfall, in order: memory capacity, the
#: NVLink domain and links, then compute (dense peaks, HBM bandwidth and the family's
#: calibrated sustained fraction of peak); the last factor, precision, changes the format.
FACTORS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("memory", "memory capacity", ("hbm_gib",)),
    ("communication", "NVLink domain and links", ("nvlink_domain", "nvlink_gb_s_bidir", "nic_gbit_s")),
    ("compute", "compute and HBM bandwidth", ("tf32_tflops", "bf16_tflops", "fp8_tflops", "hbm_tb_s", "family")),
)
#: Resolution of a searched GPU count (``plan.RESOLUTION_BITS``: about 1/16 of the count).
RESOLUTION_BITS = planning.RESOLUTION_BITS

# =========================================================================================
# Scenario inputs
# =========================================================================================
@dataclass(frozen=True, kw_only=True)
class Plan(planning.Terms):
    """What the decision needs from the scenario: the planning terms (:class:`scaletax.model.plan.Terms`:
    token budget, batch, target days, precision policy, prices, energy, goodput or its scale model)
    plus the models and GPUs to compare, the cluster sizes, the reference GPUs of the comparisons
    (ids, as the scenario names them; ``price_pairs``: [newer, older] pairs for the price-ratio
    curves), power_mw (the facility power budget) and fleets (the scenario's fleets)."""

    name: str
    models: tuple[str, ...]
    gpus: tuple[str, ...]
    cluster_gpus: int
    sizes: tuple[int, ...]
    baseline: str
    hopper_ref: str
    heq_hopper: tuple[str, ...]
    heq_blackwell: tuple[str, ...]
    power_mw: float | None = None
    fleets: tuple[Mapping[str, Any], ...] = ()
    price_pairs: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_params(cls, *, name: str, models, gpus, cluster_sizes, cluster_gpus, comparisons,
                    cluster_power_mw: float | None = None, fleets=(), **params: Any) -> "Plan":
        """Build from the notebook parameters (scenario keys with '_' for '.')."""
        return cls(name=str(name), models=tuple(models), gpus=tuple(gpus), cluster_gpus=int(cluster_gpus),
                   sizes=tuple(int(n) for n in cluster_sizes), baseline=str(comparisons["baseline"]),
                   hopper_ref=str(comparisons["hopper_reference"]), heq_hopper=tuple(comparisons["heq_hopper"]),
                   heq_blackwell=tuple(comparisons["heq_blackwell"]),
                   price_pairs=tuple((str(a), str(b)) for a, b in comparisons.get("price_pairs") or ()),
                   power_mw=None if cluster_power_mw is None else float(cluster_power_mw),
                   fleets=tuple(dict(f) for f in (fleets or ())), **planning.Terms.params_of(**params))

    @property
    def top(self) -> int:
        """The largest cluster of the scenario (its sizes and its reference count)."""
        return max(set(self.sizes) | {self.cluster_gpus})

    def economics(self, gpu_id: str | None = None, model=None, gpus: int | None = None) -> cost.Economics:
        """:meth:`scaletax.model.plan.Terms.economics` with the model as an id or a ``Model``."""
        return super().economics(gpu_id, None if model is None else _model(model), gpus)

    def system_w(self, gpu) -> float:
        """All-in system power per GPU of ``gpu`` (an id or a ``GPU``), W (:meth:`Terms.system_w`)."""
        return super().system_w(_gpu(gpu))

    def goodput_at(self, model, gpus):
        """:meth:`scaletax.model.plan.Terms.goodput_at` of ``model`` (an id or a ``Model``)."""
        return super().goodput_at(_model(model), gpus)

    def goodput_band_at(self, model, gpus) -> tuple:
        """:meth:`scaletax.model.plan.Terms.goodput_band_at` of ``model`` (an id or a ``Model``)."""
        return super().goodput_band_at(_model(model), gpus)

    def run_precision(self, gpu) -> str:
        """The name of the precision the GPU trains in (:meth:`scaletax.model.plan.Terms.recipe`)."""
        return self.recipe(_gpu(gpu)).name

    def fastest_precision(self, gpu) -> str:
        """The name of the GPU's fastest native format among the scenario's precisions
        (:meth:`scaletax.model.plan.Terms.fastest_recipe`)."""
        return self.fastest_recipe(_gpu(gpu)).name


def _gpu(gpu) -> hardware.GPU:
    """A scenario's GPU id as the GPU (where this chapter's ids become objects); a GPU as is."""
    return hardware.get(gpu) if isinstance(gpu, str) else hardware.check(gpu)


def _model(model):
    """A scenario's model id as the ``Model`` (where this chapter's ids become objects); a ``Model`` as is."""
    return catalog.get(model) if isinstance(model, str) else model


def _state_bytes(model) -> float:
    """Bytes a restart of ``model`` (an id or a ``Model``) loads (:func:`scaletax.model.goodput.checkpoint_bytes`)."""
    return goodput.checkpoint_bytes(_model(model).total_params)


def model_name(mid: str) -> str:
    """Short display name (:func:`scaletax.render.wording.model_name` of the catalog model)."""
    return wording.model_name(catalog.get(mid))


def gpu_label(gpu) -> str:
    """Table label; announced parts are marked as projections (:func:`scaletax.render.wording.gpu_label`)."""
    return wording.gpu_label(_gpu(gpu))


# =========================================================================================
# Searches
# =========================================================================================
def best(plan: Plan, model_id: str, gpu, precision: str, gpus: int) -> search.SearchResult:
    """The fastest layout of ``model_id`` on ``gpus`` GPUs of ``gpu`` (an id or a ``GPU``,
    possibly a hypothetical one) in ``precision`` (a name) at the plan's global batch, timed with
    its training software: :func:`scaletax.model.plan.fastest`."""
    return planning.fastest(catalog.get(model_id), _gpu(gpu), recipes.training(precision), int(gpus),
                            int(plan.batch_tokens), space=plan.space())


def clear_cache() -> None:
    planning.clear_cache()


def software_phrase(plan: Plan) -> str:
    """The training software every MoE layout is timed with, in words, and its source
    (:func:`scaletax.render.wording.software_text` of the scenario's ``training.software``)."""
    return wording.software_text(plan.software)


def _tps(res: search.SearchResult) -> tuple[float, float, float] | None:
    if not res.fits:
        return None
    m = res.metrics
    return m["tokens_per_s_per_gpu"], m["tokens_per_s_per_gpu_low"], m["tokens_per_s_per_gpu_high"]


def gpus_for_target(p: Plan, model_id: str, gpu, precision: str | None = None, days: float | None = None) -> dict[str, Any]:
    """Fewest GPUs that train the token budget in ``days`` (default: the scenario's target):
    :func:`scaletax.model.plan.gpus_for_deadline` (monotone in ``days``; the nearby global batch
    where the scenario's costs GPUs)."""
    g = _gpu(gpu)
    return planning.gpus_for_deadline(p, catalog.get(model_id), g, None if precision is None else recipes.training(precision),
                                  days)


# =========================================================================================
# Rows with time, GPU-hours, energy and cost
# =========================================================================================
def outcome(p: Plan, model_id: str, gpu, gpus: int | None = None, precision: str | None = None) -> dict[str, Any]:
    """One case as a row (:func:`scaletax.model.plan.case`) with its labels and price; no
    economics yet (see :func:`economics`)."""
    g = _gpu(gpu)
    n = int(gpus or p.cluster_gpus)
    row = planning.case(p, catalog.get(model_id), g, n, None if precision is None else recipes.training(precision))
    row.update(model_name=model_name(model_id), label=gpu_label(g), family=g.family, announced=g.announced,
               domain=g.nvlink_domain, price=p.price(g.id), price_assumed=p.price_assumed(g.id),
               price_basis=p.price_basis(g.id))
    row["layout"] = label(row["layout"]) if row["fits"] else _nofit_text(row)
    return row


def _nofit_text(row: dict[str, Any]) -> str:
    return (f"does not fit; needs at least {row['min_gpus']:,}" if row["min_gpus"] is not None
            else "no layout fits")


def economics(rows: list[dict[str, Any]], p: Plan) -> list[dict[str, Any]]:
    """Add days, GPU-hours, energy (MWh), cost (USD), USD per million tokens and tokens per day,
    each with ``_low`` / ``_high``, to every row that fits (:func:`scaletax.model.plan.add_costs`,
    goodput of each row's scale included; a row without the GPU's system power or the model's
    restart bytes gets them from its ids here)."""
    for r in rows:
        if r.get("tps"):
            r.setdefault("system_w", p.system_w(r["gpu"]))
            r.setdefault("state_bytes", _state_bytes(r["model"]))
    return planning.add_costs(rows, p)


def decision_rows(plan: Plan, target: bool = True) -> list[dict[str, Any]]:
    """Every model x GPU type of the scenario on ``cluster_gpus``: layout, throughput, time,
    GPU-hours, energy, cost (with bands) and, with ``target``, the GPUs that finish in the
    target time (``need``, ``need_low``, ``need_high``)."""
    rows = [outcome(plan, m, g) for m in plan.models for g in plan.gpus]
    economics(rows, plan)
    if not target:
        return rows
    needs = [gpus_for_target(plan, r["model"], r["gpu"], r["precision"]) for r in rows]
    for r, t in zip(rows, needs):
        r.update(need=t["gpus"], need_low=t["low"], need_high=t["high"], need_memory_bound=t["memory_bound"],
                 need_layout=label(t["result"].best) if t["gpus"] else t["message"], need_linear=t["linear"],
                 need_batch=t["batch"], need_nearby=t["nearby_gpus"], need_nearby_batch=t["nearby_batch"],
                 **capacity(r["gpu"], t["gpus"]))
    return rows


def capacity(gpu, gpus: int | None) -> dict[str, Any]:
    """How ``gpus`` GPUs are bought: whole systems (:func:`scaletax.model.plan.capacity`)."""
    return planning.capacity(_gpu(gpu), gpus)


# =========================================================================================
# Power, goodput and owning
# =========================================================================================
def cluster_power(plan: Plan, gpu, gpus) -> dict[str, Any]:
    """IT and facility megawatts of ``gpus`` GPUs of ``gpu`` (:func:`scaletax.model.plan.cluster_power`)."""
    return planning.cluster_power(plan, _gpu(gpu), gpus)


def goodput_detail(plan: Plan, model_id, gpus) -> dict[str, Any]:
    """The goodput of ``model_id`` on ``gpus`` GPUs and what makes it (:func:`scaletax.model.plan.goodput_detail`)."""
    return planning.goodput_detail(plan, _model(model_id), gpus)


def owned_price(plan: Plan, gpu_id: str) -> dict[str, Any] | None:
    """USD per GPU-hour of an owned ``gpu_id`` beside the rental price (:func:`scaletax.model.plan.owned_price`)."""
    return planning.owned_price(plan, _gpu(gpu_id))


def scale_sizes(plan: Plan) -> list[int]:
    """The cluster sizes of the scale figures: the scenario's sizes and its reference count."""
    return sorted(set(plan.sizes) | {plan.cluster_gpus})


def scale_rows(plan: Plan) -> list[dict[str, Any]]:
    """Every model x GPU type of the scenario on every size of :func:`scale_sizes`, with
    economics (goodput of each size, :func:`economics`) and the cluster's IT and facility MW in
    whole systems (:func:`cluster_power`): the rows of the goodput, days-by-size and days-by-MW
    figures and of the power table."""
    cases = [(m, g, n) for m in plan.models for g in plan.gpus for n in scale_sizes(plan)]
    rows = economics([outcome(plan, c[0], c[1], c[2]) for c in cases], plan)
    for r in rows:
        pw = cluster_power(plan, r["gpu"], r["gpus"])
        r.update(systems=pw["systems"], system=pw["system"], it_mw=pw["it_mw"], facility_mw=pw["facility_mw"])
    return rows


def power_rows(plan: Plan, gpu_ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Per GPU type: its system (name, GPUs, kW), the system power per GPU, and on the scenario's
    reference count and its largest cluster the whole systems and IT and facility MW
    (:func:`cluster_power`); with a power budget, the largest cluster that fits it
    (:func:`scaletax.model.plan.largest_cluster`)."""
    out = []
    for gid in gpu_ids or plan.gpus:
        g = _gpu(gid)
        row = {"gpu": gid, "label": gpu_label(g), "announced": g.announced}
        for key, n in (("ref", plan.cluster_gpus), ("top", plan.top)):
            pw = cluster_power(plan, g, n)
            row.update({f"{key}_gpus": n, f"{key}_systems": pw["systems"], f"{key}_it_mw": pw["it_mw"],
                        f"{key}_facility_mw": pw["facility_mw"]})
        row.update(system=pw["system"], per_system=pw["per_system"], system_kw=pw["system_kw"], w_per_gpu=pw["w_per_gpu"],
                   budget_gpus=None, budget_systems=None, budget_facility_mw=None)
        if plan.power_mw:
            lc = planning.largest_cluster(plan, g, plan.power_mw)
            row.update(budget_gpus=lc["gpus"], budget_systems=lc["systems"], budget_facility_mw=lc["facility_mw"])
        out.append(row)
    return out


def budget_rows(plan: Plan) -> list[dict[str, Any]]:
    """Every model x GPU type on the largest cluster of that GPU that fits the scenario's power
    budget (``cluster.power_mw``): :func:`scaletax.model.plan.runnable_case` on it (the most of its GPUs
    that run the scenario's global batch) with economics; ``budget_gpus`` the cluster,
    ``gpus`` what the layout runs on. Empty without a budget."""
    if not plan.power_mw:
        return []
    lc = {g: planning.largest_cluster(plan, _gpu(g), plan.power_mw) for g in plan.gpus}
    cases = [(m, g) for m in plan.models for g in plan.gpus if lc[g]["gpus"] >= 8]
    rows = [_runnable(plan, c[0], c[1], lc[c[1]]["gpus"]) for c in cases]
    economics(rows, plan)
    for r in rows:
        pw = cluster_power(plan, r["gpu"], r["gpus"])
        r.update(budget_gpus=lc[r["gpu"]]["gpus"], budget_systems=lc[r["gpu"]]["systems"],
                 budget_facility_mw=lc[r["gpu"]]["facility_mw"], facility_mw=pw["facility_mw"], it_mw=pw["it_mw"])
    return rows


def _runnable(plan: Plan, model_id: str, gpu, gpus: int) -> dict[str, Any]:
    """:func:`outcome` on the most GPUs up to ``gpus`` that run the scenario's batch
    (:func:`scaletax.model.plan.runnable_case`)."""
    g = _gpu(gpu)
    row = planning.runnable_case(plan, catalog.get(model_id), g, int(gpus))
    row.update(model_name=model_name(model_id), label=gpu_label(g), family=g.family, announced=g.announced,
               domain=g.nvlink_domain, price=plan.price(g.id), price_assumed=plan.price_assumed(g.id),
               price_basis=plan.price_basis(g.id))
    row["layout"] = label(row["layout"]) if row["fits"] else _nofit_text(row)
    return row


def headline_cases(plan: Plan, rows: list[dict]) -> list[dict[str, Any]]:
    """The headline cases: per model, the cheapest Hopper and the cheapest Blackwell of the
    scenario on its cluster (:func:`cheapest_choice`: of GPUs tied on cost, the fastest), as
    {model, kind ("hopper" | "blackwell"), row, choice} (row and choice None where none fits)."""
    out = []
    for mid in plan.models:
        for kind, ids in (("hopper", hopper_ids), ("blackwell", blackwell_ids)):
            c = cheapest_choice(plan, rows, mid, ids(plan.gpus))
            out.append({"model": mid, "kind": kind, "row": None if c is None else c["row"], "choice": c})
    return out


def own_rent_rows(plan: Plan, rows: list[dict]) -> list[dict[str, Any]]:
    """The headline cases (:func:`headline_cases`) rented and owned: the case's row with
    :func:`scaletax.model.plan.own_vs_rent` (owned and rented price per GPU-hour, total cost both
    ways with bands), for the cases whose GPU has ownership inputs."""
    out = []
    for h in headline_cases(plan, rows):
        r = h["row"]
        if r is None:
            continue
        o = planning.own_vs_rent(plan, _gpu(r["gpu"]), r)
        if o is not None:
            out.append({**r, "kind": h["kind"], **o})
    return out


def fleet_rows(plan: Plan) -> list[dict[str, Any]]:
    """Per fleet of the scenario (``fleets``) and model: days and cost to train the budget on it
    (:func:`scaletax.model.plan.runnable_case`: the most of its GPUs that run the scenario's batch),
    its facility MW (the whole fleet, :func:`cluster_power`), and its size in equivalents of the
    scenario's baseline GPU (``comparisons.baseline``, H100): the count x tokens/s per GPU over the
    baseline's on as many GPUs (:func:`scaletax.model.plan.throughput_ratio`, with its band; exactly
    the count, no band, for a fleet of the baseline GPU). A fleet counted in equivalents
    (``equivalent``) is taken as that many GPUs of its type and says so."""
    base = _gpu(plan.baseline)
    cases = [(i, f, m) for i, f in enumerate(plan.fleets) for m in plan.models]
    runs = [_runnable(plan, c[2], c[1]["gpu"], int(c[1]["count"])) for c in cases]
    refs = [None if r["gpu"] == base.id or not r["fits"] else outcome(plan, r["model"], base, r["gpus"]) for r in runs]
    economics(runs, plan)
    out = []
    for (i, f, mid), r, ref in zip(cases, runs, refs):
        g = _gpu(f["gpu"])
        n = int(f["count"])
        pw = cluster_power(plan, g, n)
        eq = {"heq": None, "heq_low": None, "heq_high": None}
        if r["gpu"] == base.id:
            eq = {"heq": float(n), "heq_low": float(n), "heq_high": float(n)}
        elif ref is not None:
            q = planning.throughput_ratio(r, ref)
            if q is not None:
                eq = {"heq": n * q["ratio"], "heq_low": n * q["ratio_low"], "heq_high": n * q["ratio_high"]}
        out.append({**r, "fleet": i, "fleet_name": str(f["name"]), "fleet_gpu": g.id, "fleet_label": gpu_label(g),
                    "count": n, "equivalent": bool(f.get("equivalent")), "verified": bool(f.get("verified")),
                    "source": str(f["source"]), "fleet_facility_mw": pw["facility_mw"], "fleet_it_mw": pw["it_mw"],
                    "fleet_systems": pw["systems"], "base": base.id, "base_label": gpu_label(base), **eq})
    return out


#: Price ratios (newer / older GPU) the price-ratio curves are drawn over.
PRICE_RATIOS = tuple(round(0.25 + 0.05 * i, 2) for i in range(76))  # 0.25 .. 4.0


def price_pair_rows(plan: Plan, rows: list[dict]) -> list[dict[str, Any]]:
    """Per model and price pair (``comparisons.price_pairs``, [newer, older]): the cost per trained
    token of the newer GPU over the older one's on the scenario's cluster against their price ratio
    (:func:`scaletax.model.plan.cost_ratio_curve`: ``curve`` with its band, the break-even price ratio
    with its band, and the scenario's point ``at``), the older GPU's price ``ref_price`` (the
    break-even price per GPU-hour is the break-even ratio times it), the price basis of each GPU
    and ``verdict`` at the scenario's prices ("pays", "does not pay", "within band")."""
    out = []
    for mid in plan.models:
        for new, old in plan.price_pairs:
            a, b = (next((r for r in rows if r["model"] == mid and r["gpu"] == g), None) or
                    economics([outcome(plan, mid, g)], plan)[0] for g in (new, old))
            c = planning.cost_ratio_curve(plan, _gpu(new), _gpu(old), a, b, PRICE_RATIOS)
            basis = {plan.price_basis(new), plan.price_basis(old)}
            row = {"model": mid, "model_name": model_name(mid), "gpu": new, "ref": old, "label": gpu_label(new),
                   "ref_label": gpu_label(old), "pair": f"{gpu_label(new)} vs {gpu_label(old)}",
                   "ref_price": plan.price(old),
                   "price_basis": "your input" if "your input" in basis else "assumed" if "assumed" in basis
                   else "published", "new_basis": plan.price_basis(new), "old_basis": plan.price_basis(old),
                   "curve": c, "verdict": "no comparison", "message": None}
            if c is None:
                row["message"] = a["message"] if not a.get("tps") else b["message"] if not b.get("tps") else \
                    f"no price for {gpu_label(old)}"
            elif c["at"] is not None:
                row["verdict"] = cost_verdict(c["at"])
            out.append(row)
    return out


def price_curve_chart_rows(rows: list[dict]) -> list[dict]:
    """The curves of :func:`price_pair_rows` as points (``kind`` "curve"), and the scenario's price
    ratio of each pair (``kind`` "scenario", with its price basis)."""
    out = []
    for r in rows:
        c = r["curve"]
        if c is None:
            continue
        common = {"model_name": r["model_name"], "pair": r["pair"], "gpu": r["gpu"], "ref": r["ref"]}
        for i, x in enumerate(c["price_ratio"]):
            out.append({**common, "kind": "curve", "price_ratio": float(x), "cost_ratio": float(c["ratio"][i]),
                        "cost_ratio_low": float(c["ratio_low"][i]), "cost_ratio_high": float(c["ratio_high"][i]),
                        "price_basis": None})
        if c["at"] is not None:
            at = c["at"]
            out.append({**common, "kind": "scenario", "price_ratio": at["price_ratio"], "cost_ratio": at["ratio"],
                        "cost_ratio_low": at["ratio_low"], "cost_ratio_high": at["ratio_high"],
                        "price_basis": f"scenario prices ({r['price_basis']})"})
    return out


# =========================================================================================
# Picks from the rows
# =========================================================================================
def fitting(rows, **where):
    """The rows that fit (have a throughput) and match every ``key=value`` of ``where``."""
    return [r for r in rows if r.get("tps") and all(r.get(k) == v for k, v in where.items())]


def cost_verdict(at: Mapping[str, float]) -> str:
    """Whether GPU a costs less per trained token than GPU b, from their cost ratio a / b with its
    band (``at`` of :func:`scaletax.model.plan.cost_ratio_curve`): "pays" (the whole band below 1),
    "does not pay" (above 1) or "within band" (the band holds 1: the model cannot tell which
    costs less)."""
    return "pays" if at["ratio_high"] < 1 else "does not pay" if at["ratio_low"] > 1 else "within band"


def cheapest_choice(plan: Plan, rows: list[dict], model_id: str, gpu_ids: Iterable[str] | None = None,
                    shipping: bool = True) -> dict[str, Any] | None:
    """Which GPU is the cheapest for a model among ``gpu_ids`` (default all; shipping ones only
    with ``shipping``), the one answer every chapter that names "the cheapest" uses.

    ``lowest``: the row with the lowest central cost. ``tied``: the rows whose cost the model
    cannot tell from ``lowest``'s, ``lowest`` first and the rest by cost: each one's cost ratio
    over ``lowest`` (:func:`scaletax.model.plan.cost_ratio_curve` at the scenario's prices, the
    band of a ratio of two predictions, :func:`scaletax.model.plan.ratio_band`) has a band that
    holds 1 (:func:`cost_verdict` "within band"); ``ratios``: those ratios by GPU id (``ratio``,
    ``ratio_low``, ``ratio_high``). ``row``: the case the numbers use: ``lowest`` without a tie,
    else the fastest of ``tied`` (fewest days; all run on the same count), a pick that does not
    flip when costs inside the band swap places. ``rule``: None, or "faster" / "fastest" for a
    tie of two / more. Without any price (no cost), ``row`` is the fastest and nothing ties.
    None when no case fits."""
    ids = set(gpu_ids) if gpu_ids is not None else None
    cands = [r for r in fitting(rows, model=model_id) if (ids is None or r["gpu"] in ids)
             and (not shipping or not r["announced"])]
    if not cands:
        return None
    priced = [r for r in cands if r.get("cost_usd") is not None]
    if not priced:
        row = min(cands, key=lambda r: (r["days"], r["gpu"]))
        return {"row": row, "lowest": row, "tied": [row], "ratios": {}, "rule": None}
    priced.sort(key=lambda r: (r["cost_usd"], r["days"], r["gpu"]))
    low = priced[0]
    tied, ratios = [low], {}
    for r in priced[1:]:
        at = planning.cost_ratio_curve(plan, _gpu(r["gpu"]), _gpu(low["gpu"]), r, low, ())["at"]
        if cost_verdict(at) == "within band":
            tied.append(r)
            ratios[r["gpu"]] = {k: at[k] for k in ("ratio", "ratio_low", "ratio_high")}
    row = min(tied, key=lambda r: (r["days"], r["gpu"]))
    rule = None if len(tied) == 1 else "faster" if len(tied) == 2 else "fastest"
    return {"row": row, "lowest": low, "tied": tied, "ratios": ratios, "rule": rule}


def cheapest(plan: Plan, rows: list[dict], model_id: str, gpu_ids: Iterable[str] | None = None,
             shipping: bool = True) -> dict | None:
    """The row of the case that stands for the cheapest GPU: ``row`` of :func:`cheapest_choice`
    (the lowest cost, or of GPUs tied on cost the fastest); None when none fits."""
    c = cheapest_choice(plan, rows, model_id, gpu_ids, shipping)
    return None if c is None else c["row"]


def price_candidates(rows: list[dict], model_id: str) -> list[dict]:
    """The rows that ``cheapest(plan, rows, model_id) or cheapest(plan, rows, model_id, shipping=False)``
    can pick under some prices: the fitting shipping cases of the model, else all its fitting
    ones (which GPU is cheapest depends on the prices, these rows do not)."""
    fit = fitting(rows, model=model_id)
    return [r for r in fit if not r["announced"]] or fit


def fastest(rows: list[dict], model_id: str, gpu_ids: Iterable[str] | None = None, shipping: bool = True) -> dict | None:
    ids = set(gpu_ids) if gpu_ids is not None else None
    cands = [r for r in fitting(rows, model=model_id) if (ids is None or r["gpu"] in ids)
             and (not shipping or not r["announced"])]
    return max(cands, key=lambda r: r["tps"]) if cands else None


def hopper_ids(gpu_ids: Iterable[str]) -> list[str]:
    return [g for g in gpu_ids if hardware.get(g).family == "hopper"]


def blackwell_ids(gpu_ids: Iterable[str]) -> list[str]:
    return [g for g in gpu_ids if hardware.get(g).family in BLACKWELL_FAMILIES]


def waterfall_targets(plan: Plan) -> tuple[list[str], bool]:
    """The Blackwell GPUs of the waterfall: the scenario's first 8-GPU-domain and first
    NVL72-class Blackwell; (the comparison's ``heq_blackwell`` GPUs, False) when it has none."""
    bw = blackwell_ids(plan.gpus)
    picks = [next((g for g in bw if hardware.get(g).nvlink_domain <= 8), None),
             next((g for g in bw if hardware.get(g).nvlink_domain > 8), None)]
    picks = [g for g in picks if g]
    return (picks, True) if picks else (list(plan.heq_blackwell), False)


# =========================================================================================
# Where the advantage comes from
# =========================================================================================
def hybrid(base, target, fields: Iterable[str], tag: str) -> hardware.GPU:
    """``base`` with the ``fields`` of ``target`` (a hypothetical GPU for the waterfall)."""
    b, t = _gpu(base), _gpu(target)
    upd = {f: getattr(t, f) for f in fields}
    return b.model_copy(update={**upd, "id": f"{b.id}_{tag}", "label": f"{b.label} + {tag}"[:24]})


def waterfall(plan: Plan, model_id: str, target: str, base: str | None = None, gpus: int | None = None,
              alone: bool = True) -> list[dict[str, Any]]:
    """Tokens/s per GPU from ``base`` (default the scenario's ``comparisons.baseline``) to
    ``target`` swapping one factor at a time.

    Rows, in order: the base GPU at its run precision; each factor of :data:`FACTORS` added to
    the previous hypothetical GPU (after the last one it is the target GPU at the base's
    precision); the target at its fastest format. Each row: tokens/s per GPU and band,
    ``gain`` over the previous row, ``cumulative`` ratio over the base (with ``_low`` / ``_high``
    at the band's corners), ``alone`` (the factor applied to the base by itself; for precision,
    the same as ``gain``) and ``share`` of the total log-gain. Rows whose case does not fit have
    tps None.
    """
    n = int(gpus or plan.cluster_gpus)
    b, t = hardware.get(base or plan.baseline), hardware.get(target)
    prec = plan.run_precision(b)
    if not t.supports(recipes.training(prec)):
        prec = "bf16"
    cases = [("base", f"{b.label} {prec.upper()}", b, prec)]
    cur, fields = b, []
    for key, label, fs in FACTORS:
        fields += list(fs)
        cur = hybrid(b, t, fields, key)
        cases.append((key, label, cur, prec))
    fast = plan.fastest_precision(t)
    cases.append(("precision", f"precision {prec.upper()} to {fast.upper()}", t, fast))
    out, prev = [], None
    base_tps = None
    for key, label, g, p in cases:
        tp = _tps(best(plan, model_id, g, p, n))
        row = {"model": model_id, "model_name": model_name(model_id), "target": t.id, "target_label": gpu_label(t),
               "step": key, "label": label, "precision": p, "tps": None, "tps_low": None, "tps_high": None,
               "gain": None, "cumulative": None, "cumulative_low": None, "cumulative_high": None, "alone": None}
        if tp is not None:
            row.update(tps=tp[0], tps_low=tp[1], tps_high=tp[2])
            if key == "base":
                base_tps = tp
            if base_tps is not None:
                q = planning.throughput_ratio(dict(zip(("tps", "tps_low", "tps_high"), tp)),
                                              dict(zip(("tps", "tps_low", "tps_high"), base_tps)))
                row["cumulative"], row["cumulative_low"], row["cumulative_high"] = q["ratio"], q["ratio_low"], q["ratio_high"]
            if prev is not None and prev["tps"]:
                row["gain"] = tp[0] / prev["tps"]
        if alone and key in {f[0] for f in FACTORS} and base_tps is not None:
            fs = next(f[2] for f in FACTORS if f[0] == key)
            ta = _tps(best(plan, model_id, hybrid(b, t, fs, key + "_alone"), prec, n))
            row["alone"] = None if ta is None else ta[0] / base_tps[0]
        elif key == "precision":
            row["alone"] = row["gain"]
        out.append(row)
        prev = row
    total = out[-1]["cumulative"]
    for r in out:
        r["share"] = (math.log(r["gain"]) / math.log(total) if (r["gain"] and total and total > 0 and abs(math.log(total)) > 1e-12)
                      else None)
    return out


def waterfall_check(plan: Plan, model_id: str, target: str, base: str | None = None,
                    gpus: int | None = None) -> float | None:
    """Relative difference between the waterfall after its hardware factors and the real
    target GPU at the same precision (0 when every property that matters was swapped)."""
    rows = waterfall(plan, model_id, target, base, gpus, alone=False)
    real = _tps(best(plan, model_id, target, rows[0]["precision"], int(gpus or plan.cluster_gpus)))
    last = rows[len(FACTORS)]["tps"]
    if real is None or last is None:
        return None
    return abs(last / real[0] - 1.0)


def blackwell_factor() -> float:
    """The calibrated sustained fraction of peak of the Blackwell family relative to Hopper
    (``family_factor_blackwell`` of ``data/efficiency.yaml``)."""
    return float(efficiency.default_efficiency().family_factor["blackwell"])


def main_source(rows: list[dict]) -> dict | None:
    """The factor of a waterfall with the largest gain (ties: the earlier)."""
    steps = [r for r in rows if r["step"] != "base" and r["gain"]]
    return max(steps, key=lambda r: r["gain"]) if steps else None




def waterfall_chart_rows(rows: list[dict]) -> list[dict]:
    """Bars of a waterfall chart per model and target: the base (1.0), each factor from the
    previous cumulative ratio to its own, the target at the base precision (a total), the
    precision step and the target at its fastest format (a total). ``order`` sorts the bars."""
    out = []
    for key in dict.fromkeys((r["model"], r["target"]) for r in rows):
        rs = [r for r in rows if (r["model"], r["target"]) == key]
        if any(r["cumulative"] is None for r in rs):
            continue
        short = rs[0]["target_label"].split(" (")[0]
        common = {"model": key[0], "model_name": rs[0]["model_name"], "target": rs[0]["target_label"]}
        bars = [(rs[0]["label"], "total", 0.0, 1.0)]
        prev = 1.0
        for r in rs[1:]:
            cum = r["cumulative"]
            if r["step"] == "precision":
                if r["precision"] == rs[0]["precision"]:
                    break
                bars.append(("+ " + r["label"], "gain" if cum >= prev else "loss", prev, cum))
                bars.append((f"= {short} {r['precision'].upper()}", "total", 0.0, cum))
            else:
                bars.append(("+ " + r["label"], "gain" if cum >= prev else "loss", prev, cum))
                if r["step"] == FACTORS[-1][0]:
                    bars.append((f"= {short} {r['precision'].upper()}", "total", 0.0, cum))
            prev = cum
        for i, (step, kind, a, b) in enumerate(bars):
            text = f"{b:.2f}x" if kind == "total" else f"x{b / a:.2f}"
            out.append({**common, "order": i, "step": step, "kind": kind, "start": a, "end": b, "text": text})
    return out


# =========================================================================================
# When the older GPU is enough
# =========================================================================================
def hopper_reference(plan: Plan, rows: list[dict], model_id: str) -> tuple[str, bool]:
    """The Hopper to compare with: the scenario's ``comparisons.hopper_reference`` if the
    scenario has it, else its cheapest Hopper per token, else that reference from the catalog;
    and whether it is from the scenario."""
    if plan.hopper_ref in plan.gpus:
        return plan.hopper_ref, True
    r = cheapest(plan, rows, model_id, hopper_ids(plan.gpus))
    if r is not None:
        return r["gpu"], True
    return plan.hopper_ref, False


def breakeven_rows(plan: Plan, rows: list[dict]) -> list[dict[str, Any]]:
    """Per model, every non-Hopper GPU against the reference Hopper (:func:`hopper_reference`).

    ratio: tokens/s per GPU over the reference's (band at the shared corners); price_ratio;
    cost per million tokens of both; breakeven: the price per GPU-hour at which the GPU's cost
    per token equals the reference's, (p_ref + e_ref) x ratio - e_gpu with e the electricity
    cost per GPU-hour (band from the ratio's band); verdict: "pays" (price below the band),
    "does not pay" (above) or "within band"; deadline_ref: whether the reference finishes in the
    target time on the scenario cluster.
    """
    out = []
    for mid in plan.models:
        ref_id, in_scen = hopper_reference(plan, rows, mid)
        ref = next((r for r in rows if r["model"] == mid and r["gpu"] == ref_id), None)
        if ref is None:
            ref = economics([outcome(plan, mid, ref_id)], plan)[0]
        others = [g for g in plan.gpus if hardware.get(g).family not in ("hopper", "ampere")]
        if not others:
            others = list(plan.heq_blackwell)
        for gid in others:
            r = next((x for x in rows if x["model"] == mid and x["gpu"] == gid), None)
            if r is None:
                r = economics([outcome(plan, mid, gid)], plan)[0]
            row = {"model": mid, "model_name": model_name(mid), "gpu": gid, "label": gpu_label(gid),
                   "ref": ref_id, "ref_label": gpu_label(ref_id), "ref_in_scenario": in_scen,
                   "in_scenario": gid in plan.gpus, "announced": hardware.get(gid).announced,
                   "price": plan.price(gid), "price_assumed": plan.price_assumed(gid),
                   "price_basis": plan.price_basis(gid), "ref_price": plan.price(ref_id),
                   "ratio": None, "ratio_low": None, "ratio_high": None, "price_ratio": None,
                   "usd_per_mtok": r.get("usd_per_mtok"), "ref_usd_per_mtok": ref.get("usd_per_mtok"),
                   "breakeven": None, "breakeven_low": None, "breakeven_high": None, "verdict": "no comparison",
                   "ref_days": ref.get("days"), "days": r.get("days"),
                   "deadline_ref": (ref.get("days") is not None and ref["days"] <= plan.target_days)}
            if r.get("tps") and ref.get("tps"):
                row.update(planning.throughput_ratio(r, ref))
                if row["price"] is not None and row["ref_price"] is not None:
                    # the break-even of the price-ratio curve (one formula), in $ per GPU-hour
                    c = planning.cost_ratio_curve(plan, _gpu(gid), _gpu(ref_id), r, ref, ())
                    be = [c[k] * row["ref_price"] for k in ("breakeven", "breakeven_low", "breakeven_high")]
                    row.update(price_ratio=row["price"] / row["ref_price"], breakeven=be[0], breakeven_low=be[1],
                               breakeven_high=be[2])
                    row["verdict"] = ("pays" if row["price"] < be[1] else "does not pay" if row["price"] > be[2]
                                      else "within band")
            out.append(row)
    return out


# =========================================================================================
# The largest cluster, H-equivalents, the Rubin claim
# =========================================================================================
def top_rows(plan: Plan, gpu_ids: Sequence[str] | None = None, base_rows: list[dict] | None = None) -> list[dict]:
    """Every model on the scenario's largest cluster for ``gpu_ids`` (default: the scenario's
    GPUs), with economics and ``scaling``: tokens/s per GPU there over that on the scenario
    cluster (from ``base_rows`` when given)."""
    ids = list(gpu_ids or plan.gpus)
    rows = economics([outcome(plan, m, g, plan.top) for m in plan.models for g in ids], plan)
    for r in rows:
        b = next((x for x in (base_rows or []) if x["model"] == r["model"] and x["gpu"] == r["gpu"]), None)
        if b is None:
            b = outcome(plan, r["model"], r["gpu"])
        r["scaling"] = (r["tps"] / b["tps"]) if (r.get("tps") and b.get("tps")) else None
    return rows


def nvl72_ids(gpu_ids: Sequence[str]) -> tuple[list[str], bool]:
    """The scenario's GPUs with an NVLink domain larger than 8; (catalog GB200, False) if none."""
    big = [g for g in gpu_ids if hardware.get(g).nvlink_domain > 8]
    return (big, True) if big else (["gb200"], False)


def heq_rows(plan: Plan, hopper: Sequence[str] | None = None, blackwell: Sequence[str] | None = None,
             gpus: int | None = None) -> list[dict[str, Any]]:
    """How many of each Hopper GPU match one Blackwell GPU in tokens/s, per model, on the same
    cluster size: tokens/s per GPU of the Blackwell over that of the Hopper, each GPU at its run
    precision (``mode`` "scenario") and at its fastest format ("fastest"). Columns
    ``<hopper id>``, ``<hopper id>_low``, ``<hopper id>_high`` (None where one does not fit).
    Defaults: the scenario's ``comparisons.heq_hopper`` and ``heq_blackwell``."""
    n = int(gpus or plan.cluster_gpus)
    hopper = plan.heq_hopper if hopper is None else hopper
    blackwell = plan.heq_blackwell if blackwell is None else blackwell
    out = []
    for mid in plan.models:
        for bw in blackwell:
            for mode in ("scenario", "fastest"):
                pick = plan.run_precision if mode == "scenario" else plan.fastest_precision
                tb = _tps(best(plan, mid, bw, pick(bw), n))
                row = {"model": mid, "model_name": model_name(mid), "gpu": bw, "label": gpu_label(bw), "mode": mode,
                       "precision": pick(bw), "gpus": n}
                for h in hopper:
                    th = _tps(best(plan, mid, h, pick(h), n))
                    row[f"{h}_precision"] = pick(h)
                    if tb is None or th is None:
                        row[h] = row[f"{h}_low"] = row[f"{h}_high"] = None
                        continue
                    q = planning.throughput_ratio(dict(zip(("tps", "tps_low", "tps_high"), tb)),
                                                  dict(zip(("tps", "tps_low", "tps_high"), th)))
                    row.update({h: q["ratio"], f"{h}_low": q["ratio_low"], f"{h}_high": q["ratio_high"]})
                out.append(row)
    return out


def first_moe(model_ids: Sequence[str]) -> tuple[str, bool]:
    """The scenario's first MoE model, else the catalog's trillion-parameter MoE; and whether
    it is one of the scenario's models."""
    for mid in model_ids:
        if catalog.get(mid).is_moe:
            return mid, True
    return catalog.MOE_1T, False


def rubin_claim(plan: Plan, model_id: str | None = None, pair: tuple[str, str] | None = None,
                days: float | None = None) -> dict[str, Any]:
    """GPUs to train ``model_id``'s token budget (default: the scenario's first MoE) in
    ``days`` (default the target) on the announced GPU against the Blackwell one, at each GPU's
    run precision and at its fastest format (:func:`gpus_for_target`). ``ratio``: GPUs the new one
    needs over GPUs the old one needs (:func:`scaletax.model.plan.gpu_count_ratio`, the claim's
    quantity: :data:`CLAIM_KEY`, default ``pair``); ``tps_ratio``: the new GPU's tokens/s per GPU
    over the old one's on those clusters (:func:`scaletax.model.plan.throughput_ratio`), what the
    GPU-count ratio would be on a continuous count; each with its band."""
    mid, in_scen = (model_id, model_id in plan.models) if model_id else first_moe(plan.models)
    days = plan.target_days if days is None else float(days)
    claim = references.claim(CLAIM_KEY)
    new, old = pair or (claim["new"], claim["old"])
    rows = []
    for mode in ("scenario", "fastest"):
        pick = plan.run_precision if mode == "scenario" else plan.fastest_precision
        cells = {}
        for g in (new, old):
            t = gpus_for_target(plan, mid, g, pick(g), days)
            cells[g] = t
            rows.append({"model": mid, "model_name": model_name(mid), "gpu": g, "label": gpu_label(g), "mode": mode,
                         "precision": pick(g), "gpus": t["gpus"], "gpus_low": t["low"], "gpus_high": t["high"],
                         "tps": t["tokens_per_s_per_gpu"], "days": t["days"], "memory_bound": t["memory_bound"],
                         "layout": label(t["result"].best) if t["gpus"] else t["message"]})
        a, b = cells[new], cells[old]
        count = planning.gpu_count_ratio(a, b) or {"ratio": None, "ratio_low": None, "ratio_high": None}
        tps = (planning.throughput_ratio({"tps": a["tokens_per_s_per_gpu"], "tps_low": a["tps_low"],
                                          "tps_high": a["tps_high"]},
                                         {"tps": b["tokens_per_s_per_gpu"], "tps_low": b["tps_low"],
                                          "tps_high": b["tps_high"]})
               or {"ratio": None, "ratio_low": None, "ratio_high": None})
        for r in rows[-2:]:
            r.update(**count, tps_ratio=tps["ratio"], tps_ratio_low=tps["ratio_low"], tps_ratio_high=tps["ratio_high"])
    sc = rows[0]
    return {"model": mid, "model_name": model_name(mid), "in_scenario": in_scen, "days": days,
            "new": new, "old": old, "new_label": hardware.get(new).label, "old_label": hardware.get(old).label,
            "new_in_scenario": new in plan.gpus, "old_in_scenario": old in plan.gpus,
            "claim": float(claim["value"]), "claim_cite": claim["cite"], "ratio": sc["ratio"], "ratio_low": sc["ratio_low"],
            "ratio_high": sc["ratio_high"], "tps_ratio": sc["tps_ratio"], "tps_ratio_low": sc["tps_ratio_low"],
            "tps_ratio_high": sc["tps_ratio_high"],
            "ratio_fastest": rows[2]["ratio"], "ratio_fastest_low": rows[2]["ratio_low"],
            "ratio_fastest_high": rows[2]["ratio_high"], "rows": rows}


# =========================================================================================
# Sensitivity
# =========================================================================================
def tornado_rows(plan: Plan, rows: list[dict], outputs: Sequence[str] = ("cost_usd", "days"),
                 options: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """One-at-a-time sensitivity of each model's cheapest shipping case (:func:`cheapest`; of GPUs
    tied on cost, the fastest), for cost, then days:
    :func:`scaletax.model.cost.training_sensitivity` with the efficiency band of its search and the
    cluster size re-searched at its low and high value. One row per model, output and input."""
    # searched whatever the prices (a price change searches nothing)
    for mid in plan.models:
        for c in price_candidates(rows, mid):
            for n in cost.sensitivity_gpus(c["gpus"], options):
                best(plan, c["model"], c["gpu"], c["precision"], n)
    out = []
    for mid in plan.models:
        r = cheapest(plan, rows, mid) or cheapest(plan, rows, mid, shipping=False)
        if r is None:
            continue

        def tps_at(n, _r=r):
            t = _tps(best(plan, _r["model"], _r["gpu"], _r["precision"], n))
            return t[0] if t else float("nan")

        for o in outputs:
            for s in cost.training_sensitivity(plan.tokens, r["tps"], r["gpus"], _gpu(r["gpu"]),
                                               plan.economics(r["gpu"], mid, r["gpus"]), low=r["tps_low"],
                                               high=r["tps_high"], output=o, tps_at_gpus=tps_at,
                                               goodput_at_gpus=lambda n, _m=mid: float(plan.goodput_at(_m, n)),
                                               goodput_range=tuple(float(g) for g in
                                                                   plan.goodput_band_at(mid, r["gpus"])[1:]),
                                               options=options):
                swing = 100 * abs(s["high_change"] - s["low_change"])
                out.append({**s, "model": mid, "model_name": model_name(mid), "gpu": r["gpu"], "gpu_label": r["label"],
                            "low_pct": 100 * s["low_change"], "high_pct": 100 * s["high_change"],
                            "swing_pct": swing if math.isfinite(swing) else 0.0})
    return out


def tornado_chart_rows(rows: list[dict]) -> list[dict]:
    """Two bars per input (input at its low and at its high end), change of the output in %."""
    names = {"cost_usd": "cost", "days": "days to train", "energy_mwh": "energy", "gpu_hours": "GPU-hours"}
    out = []
    for r in rows:
        for end in ("low", "high"):
            v = r[f"{end}_pct"]
            out.append({"model_name": r["model_name"], "output": names.get(r["output"], r["output"]),
                        "input": r["label"], "end": f"input at its {end} value", "change_pct": v if math.isfinite(v) else None,
                        "swing_pct": r["swing_pct"], "value": f"{r[f'{end}_value']:,.4g}"})
    return out


def top_input(rows: list[dict], model_id: str, output: str = "cost_usd") -> dict | None:
    rs = [r for r in rows if r["model"] == model_id and r["output"] == output]
    return max(rs, key=lambda r: r["swing_pct"]) if rs else None


def tornado_notes(tornado: list[dict], rows: list[dict], plan: Plan) -> dict[str, float]:
    """For the cases of :func:`tornado_rows`: the largest change of cost (%) that an energy input
    (PUE, power utilization, system overhead) causes, and the range of electricity's share of the
    cost (%)."""
    swing = [max(abs(r["low_pct"]), abs(r["high_pct"])) for r in tornado
             if r["output"] == "cost_usd" and r["input"] in ("pue", "utilization", "system_w")
             and math.isfinite(r["low_pct"]) and math.isfinite(r["high_pct"])]
    shares = []
    for mid in plan.models:
        r = cheapest(plan, rows, mid) or cheapest(plan, rows, mid, shipping=False)
        if r is not None and r.get("cost_usd"):
            shares.append(100 * r["energy_mwh"] * plan.usd_per_mwh / r["cost_usd"])
    nan = float("nan")
    return {"energy_swing_max": max(swing) if swing else nan, "energy_share_min": min(shares) if shares else nan,
            "energy_share_max": max(shares) if shares else nan}


# =========================================================================================
# Chart rows (numbers; the notebooks encode them)
# =========================================================================================
def breakeven_chart_rows(rows: list[dict]) -> list[dict]:
    """Break-even price (with band) and the scenario's price per GPU-hour, per model and GPU."""
    out = []
    for r in rows:
        if r["breakeven"] is None:
            continue
        out.append({"model_name": r["model_name"], "label": r["label"], "gpu": r["gpu"], "kind": "break-even price",
                    "usd": r["breakeven"], "low": r["breakeven_low"], "high": r["breakeven_high"]})
        out.append({"model_name": r["model_name"], "label": r["label"], "gpu": r["gpu"],
                    "kind": f"scenario price ({r.get('price_basis') or ('assumed' if r['price_assumed'] else 'published')})",
                    "usd": r["price"], "low": r["price"], "high": r["price"]})
    return out


def cost_time_chart_rows(rows: list[dict], plan: Plan) -> list[dict]:
    """Points with bands for the cost-against-time figure (fitting cases with a price), with what
    its controls recompute from (:func:`scaletax.render.whatif.cost_time_data`: the price, goodput
    with its band, days, GPU-hours and energy with their bands and each at its goodput)."""
    out = [{"model_id": r["model"], "model_name": r["model_name"], "gpu": r["gpu"], "label": r["label"],
            "gpus": r["gpus"], "precision": r["precision"],
            "status": "announced (projection)" if r["announced"] else "shipping", "tps": r["tps"],
            "price": r["price"], "goodput": r["goodput"], "goodput_low": r["goodput_low"],
            "goodput_high": r["goodput_high"],
            **{f + b: r[f + b] for f in ("days", "gpu_hours", "energy_mwh", "cost_usd") for b in ("", "_low", "_high")},
            "cost_musd": r["cost_usd"] / 1e6, "cost_low": r["cost_usd_low"] / 1e6,
            "cost_high": r["cost_usd_high"] / 1e6}
           for r in rows if r.get("tps") and r.get("cost_usd") is not None]
    return whatif.cost_time_data(out)


def cost_time_controls(plan: Plan, chart_rows: list[dict]) -> dict[str, Any]:
    """The what-if controls of the cost-and-time figure (:mod:`scaletax.render.whatif`): a price per
    GPU-hour for each GPU of ``chart_rows`` (from its scenario price), the electricity price (none
    when the prices include power) and the goodput (starting at the modelled goodput of the
    scenario's cluster for its first model, or the planner's): ``controls``, ``prices`` (GPU id ->
    control name), ``electricity`` (a control name or None), ``goodput``."""
    controls, prices = [], {}
    for r in chart_rows:
        gid = r["gpu"]
        if gid in prices or r.get("price") is None:
            continue
        name = "price_" + re.sub(r"[^a-z0-9_]", "_", gid.lower())
        if any(c.name == name for c in controls):
            name += f"_{len(controls)}"
        p = float(r["price"])
        controls.append(whatif.Control(name, f"{r['label']} $/GPU-hour ", p, 0.0, max(12.0, math.ceil(2 * p)), 0.05))
        prices[gid] = name
    electricity = None
    if not (plan.price_includes_power or plan.usd_per_mwh == 0):
        electricity = "usd_per_mwh"
        controls.append(whatif.Control(electricity, "electricity $/MWh ", plan.usd_per_mwh, 0.0,
                                       max(400.0, math.ceil(2 * plan.usd_per_mwh)), 5.0))
    good = plan.goodput if plan.goodput is not None else float(plan.goodput_at(plan.models[0], plan.cluster_gpus))
    return {"controls": controls, "prices": prices, "electricity": electricity, "goodput": good}


__all__ = ["BLACKWELL_FAMILIES", "CLAIM_KEY", "FACTORS",
            "Plan", "RESOLUTION_BITS", "best", "blackwell_factor", "blackwell_ids",
           "breakeven_chart_rows", "breakeven_rows", "capacity", "cheapest", "cheapest_choice", "cost_verdict", "clear_cache", "cluster_power",
           "cost_time_chart_rows", "cost_time_controls", "goodput_detail", "owned_price", "scale_sizes", "scale_rows",
           "power_rows", "budget_rows", "headline_cases", "own_rent_rows", "fleet_rows", "PRICE_RATIOS",
           "price_pair_rows", "price_curve_chart_rows",
           "decision_rows", "economics", "fastest", "first_moe", "fitting", "gpu_label", "gpus_for_target",
           "heq_rows", "hopper_ids", "hopper_reference", "hybrid", "main_source", "model_name", "nvl72_ids",
           "outcome", "price_candidates", "rubin_claim", "software_phrase", "top_input", "top_rows",
           "tornado_chart_rows", "tornado_notes",
           "tornado_rows", "waterfall", "waterfall_chart_rows", "waterfall_check", "waterfall_targets"]
