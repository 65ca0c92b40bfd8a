"""Planning: the questions a planner asks of the model, each answered in one place.

- ``Terms``: the scenario's planning terms (token budget, global batch, target days, the
  precision policy, prices, energy factors, goodput or the reliability inputs of its scale model),
  plain data built from the scenario's values (``Terms.from_params``); ``goodput_at(model, gpus)``
  the share of scheduled time that trains at a scale (:mod:`scaletax.model.goodput`),
  ``system_w(gpu)`` the all-in system power per GPU (:mod:`scaletax.model.power`),
  ``economics(gpu_id, model, gpus)`` the :class:`cost.Economics` of one case.
- ``fastest(model, gpu, recipe, gpus, batch_tokens, space=None)``: the fastest layout that fits
  (:func:`search.cached_search`, kept per process too), a ``search.SearchResult``.
- ``case(terms, model, gpu, gpus, recipe=None) -> dict``: one model on ``gpus`` GPUs as a row:
  layout, tokens/s per GPU, MFU and step time with their bands; ``add_costs(rows, terms)`` adds
  days, scheduled GPU-hours, energy and cost with their bands and the goodput of each row's scale
  (:func:`cost.run_costs`, one numpy pass; the band pairs the throughput band with the goodput
  band). ``runnable_case``: :func:`case` on the most GPUs of a cluster that run the scenario's
  global batch (a power budget's or a fleet's cluster; ``prev_count`` steps down the count grid).
- ``gpus_for_deadline(terms, model, gpu, recipe, days=None) -> dict``: the fewest GPUs (on the
  count grid, :func:`round_count`) that train the budget in ``days``, monotone in ``days`` (a
  longer deadline never needs more GPUs), with the nearby global batch when the scenario's batch
  is what costs GPUs (:data:`NEARBY_BATCH_TOLERANCE`).
- ``mfu(tokens_per_s_per_gpu, model, gpu, recipe)``: model FLOPs utilization, the one definition
  (PaLM, Chowdhery et al. 2022, arXiv 2204.02311, App. B: causal attention, unpadded vocabulary,
  no recompute, over the dense peak of the recipe), for predicted and measured throughput alike.
- Ratios, each with its own band (:func:`ratio_band`, the one place a ratio's band comes from):
  ``throughput_ratio(a, b)`` (tokens/s per GPU of ``a`` over ``b``) and ``gpu_count_ratio(a, b)``
  (GPUs ``a`` needs over GPUs ``b`` needs).
- ``cost_ratio_curve(terms, gpu_a, gpu_b, a, b, price_ratios)``: cost per trained token of ``a``
  over ``b`` against their price ratio, with its band and the break-even price ratio.
- ``capacity(gpu, gpus)``: the whole systems (nodes, racks) that hold ``gpus`` GPUs;
  ``cluster_power`` their IT and facility MW; ``largest_cluster`` the most that a facility
  power budget holds.
- ``owned_price(terms, gpu)``: USD per GPU-hour of an owned GPU beside the rental price;
  ``own_vs_rent(terms, gpu, row)``: a case's cost both ways.
- ``least_parallel(model, gpu, recipe, gpus, space, batch_seqs)`` and
  ``fewest_gpus(model, gpu, recipe, space, batch_seqs)``: the least model-parallel layout that
  fits a count, and the smallest count that holds the model (the memory chapter's questions).

Every layout is enumerated and ranked by :mod:`scaletax.model.search`; nothing outside the model
layer searches layouts or solves for GPU counts.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from scaletax.inputs import failures, hardware, options, recipes
from scaletax.inputs.models import Model
from scaletax.model import cost, efficiency, goodput, ownership, power, runplan, search

#: Resolution of a searched GPU count: multiples of 2^(floor(log2 n) - RESOLUTION_BITS), at
#: least 8 (whole 8-GPU nodes), i.e. about 1/16 of the count.
RESOLUTION_BITS = 4
#: Largest GPU count a deadline search tries.
MAX_COUNT = 4_000_000
#: Counts whose throughput bounds a deadline search from below (:func:`gpus_for_deadline`), besides
#: the smallest count that holds the model and twice and four times it; fixed, so that neither the
#: answer nor the searches behind it depend on the deadline or the scenario's cluster size (a
#: cluster-size rebuild searches only the new size).
PROBE_COUNTS: tuple[int, ...] = (4_096, 16_384)
#: ASSUMPTION: no count trains faster per GPU than this times the fastest probe: the deadline
#: search scans every count from the one that would meet the deadline at that throughput up.
#: Tokens/s per GPU falls with the count at a fixed global batch (more data-parallel ranks, fewer
#: micro-batches each) once the model fits comfortably; the probes near the smallest count that
#: holds it find the fastest per GPU (Kimi K2 on GB200 NVL72: 6,014 tokens/s per GPU on 128 GPUs,
#: 6,124 on 256, 5,666 on 1,024, 4,666 on 4,096).
PROBE_MARGIN = 1.25
#: How far (relative) a deadline search may move the global batch to show what the scenario's
#: batch costs: on counts where it does not divide into whole micro-batches per data-parallel rank
#: that are a multiple of the pipeline depth, the interleaved schedule (Narayanan et al. 2021,
#: arXiv 2104.04473, §2.2) is not available and the pipeline bubble grows.
NEARBY_BATCH_TOLERANCE = 0.10


# =========================================================================================
# The scenario's terms
# =========================================================================================
@dataclass(frozen=True, kw_only=True)
class Terms:
    """What planning needs from a scenario (plain data, validated by the scenario).

    tokens: the token budget; batch_tokens: the global batch (tokens per step); target_days;
    precision / precisions: the precision wanted and those allowed (:func:`recipes.training_precision`);
    prices: GPU id -> {"usd_per_gpu_hour", "assumption", "source", "your_input"}; pue and
    utilization (average / peak power): energy factors; system_overhead: the planner's all-in
    system power / TDP (None: each GPU's system power, :func:`scaletax.model.power.system_w`);
    usd_per_mwh: electricity price; goodput: the planner's share of scheduled time that trains
    (None: the scale model of :mod:`scaletax.model.goodput` with ``reliability``, the scenario's
    ``cluster.reliability``); price_includes_power: all-in rental prices; ownership: the
    scenario's ``economics.ownership`` (None when it has none).
    """

    tokens: float
    batch_tokens: int
    target_days: float
    precision: str
    precisions: tuple[str, ...]
    prices: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    pue: float
    utilization: float
    usd_per_mwh: float
    reliability: Mapping[str, Any] = field(default_factory=dict)
    goodput: float | None = None
    price_includes_power: bool = False
    system_overhead: float | None = None
    ownership: Mapping[str, Any] | None = None
    software: Mapping[str, Any] = field(default_factory=dict)

    @staticmethod
    def params_of(*, training_tokens, training_global_batch_tokens, training_precision, training_precisions,
                  cluster_target_days, economics_prices, economics_energy, economics_usd_per_mwh,
                  cluster_goodput: float | None, economics_price_includes_power: bool,
                  cluster_reliability: Mapping[str, Any], economics_ownership: Mapping[str, Any] | None = None,
                  training_software: Mapping[str, Any] | None = None, **_ignored: Any) -> dict[str, Any]:
        """The fields of :class:`Terms` from a chapter's notebook parameters (scenario keys with '_'
        for '.'), which ``report.chapters`` gives every chapter that reads them."""
        e = economics_energy
        over = e.get("system_overhead")
        return dict(tokens=float(training_tokens), batch_tokens=int(training_global_batch_tokens),
                    target_days=float(cluster_target_days), precision=str(training_precision),
                    precisions=tuple(training_precisions),
                    prices={k: dict(v) for k, v in (economics_prices or {}).items()},
                    pue=float(e["pue"]), system_overhead=None if over is None else float(over),
                    utilization=float(e["utilization"]), usd_per_mwh=float(economics_usd_per_mwh),
                    reliability=dict(cluster_reliability),
                    goodput=None if cluster_goodput is None else float(cluster_goodput),
                    price_includes_power=bool(economics_price_includes_power),
                    ownership=None if economics_ownership is None else dict(economics_ownership),
                    software=dict(training_software or {}))

    @classmethod
    def from_params(cls, **params: Any) -> "Terms":
        """:class:`Terms` from the notebook parameters (:meth:`params_of`)."""
        return cls(**cls.params_of(**params))

    def price(self, gpu_id: str) -> float | None:
        p = self.prices.get(gpu_id)
        return None if p is None else float(p["usd_per_gpu_hour"])

    def price_assumed(self, gpu_id: str) -> bool:
        p = self.prices.get(gpu_id)
        return True if p is None else bool(p.get("assumption", False))

    def price_basis(self, gpu_id: str) -> str:
        """Where the GPU's price comes from: "published", "assumed" or "your input"."""
        p = self.prices.get(gpu_id)
        if p is not None and p.get("your_input"):
            return "your input"
        return "assumed" if self.price_assumed(gpu_id) else "published"

    def economics(self, gpu_id: str | None = None, model: Model | None = None, gpus: int | None = None) -> cost.Economics:
        """The scenario's economics with this GPU's price (0 when it has none or no GPU is given)
        and the goodput of ``model`` on ``gpus`` GPUs (:meth:`goodput_at`; without them the
        planner's goodput, else 1)."""
        good = self.goodput_at(model, gpus) if model is not None and gpus else (self.goodput or 1.0)
        return cost.Economics(usd_per_gpu_hour=(self.price(gpu_id) if gpu_id else None) or 0.0,
                              system_overhead=self.system_overhead, utilization=self.utilization, pue=self.pue,
                              usd_per_mwh=self.usd_per_mwh, goodput=float(good),
                              price_includes_power=self.price_includes_power)

    def system_w(self, gpu: hardware.GPU) -> float:
        """All-in system power per GPU, W (:func:`scaletax.model.power.system_w`; the energy of every
        case and the megawatts of every cluster come from it)."""
        return power.system_w(gpu, self.system_overhead)

    def energy_usd_per_gpu_hour(self, gpu: hardware.GPU, *, owned: bool = False) -> float:
        """What the electricity of one GPU-hour adds to the cost: 0 with all-in rental prices, unless
        ``owned`` (an owned GPU pays its electricity whatever the rental prices include)."""
        usd = self.usd_per_mwh if owned else self.economics().energy_usd_per_mwh
        return cost.energy_mwh(1.0, self.system_w(gpu), self.utilization, self.pue) * usd

    def failure_report(self) -> failures.Report:
        """The published report whose interruption rates the goodput model uses."""
        return failures.get(str(self.reliability["failure_report"]))

    def reliability_inputs(self) -> goodput.Reliability:
        """The goodput model's inputs: the report's rates per GPU-hour (or the planner's own
        unexpected rate), restart time, storage bandwidth, and the spread of the published
        unexpected rates (with the planner's rate in it) for the band."""
        rep, rel = self.failure_report(), self.reliability
        rate = rel.get("failures_per_gpu_hour") or rep.unexpected_per_gpu_hour
        lo, hi = failures.rate_range()
        return goodput.Reliability(unexpected_per_gpu_hour=float(rate), planned_per_gpu_hour=rep.planned_per_gpu_hour,
                                   restart_s=60.0 * float(rel["restart_minutes"]),
                                   storage_bytes_per_s=1e12 * float(rel["storage_tb_s"]),
                                   unexpected_low=min(lo, rate), unexpected_high=max(hi, rate))

    def goodput_at(self, model: Model, gpus) -> float | np.ndarray:
        """Share of scheduled time that trains for ``model`` on ``gpus`` GPUs (an int or an array):
        the planner's ``cluster.goodput`` when set, else the scale model
        (:func:`scaletax.model.goodput.goodput`: interruptions grow with the GPU count, the
        checkpoint with the model's parameters)."""
        return self._goodput_band(goodput.checkpoint_bytes(model.total_params), gpus)[0]

    def goodput_band_at(self, model: Model, gpus) -> tuple:
        """(goodput, low, high) of :meth:`goodput_at`: the band spans the published interruption
        rates (:func:`scaletax.model.goodput.goodput_band`); the planner's goodput has none."""
        return self._goodput_band(goodput.checkpoint_bytes(model.total_params), gpus)

    def _goodput_band(self, state_bytes: float, gpus) -> tuple:
        if self.goodput is not None:
            g = self.goodput if np.ndim(gpus) == 0 else np.full(np.shape(gpus), self.goodput)
            return g, g, g
        return goodput.goodput_band(gpus, state_bytes, self.reliability_inputs())

    def space(self, base: search.SearchSpace | None = None) -> search.SearchSpace:
        """``base`` (default the search's) timed with the scenario's training software
        (:func:`software_space`)."""
        return software_space(self.software, base)

    def recipe(self, gpu: hardware.GPU) -> recipes.Recipe:
        """The recipe ``gpu`` trains in (:func:`recipes.training_precision` of the terms' policy)."""
        return recipes.training_precision(gpu, self.precision, self.precisions)

    def fastest_recipe(self, gpu: hardware.GPU) -> recipes.Recipe:
        """The GPU's fastest native recipe among the allowed ones (:func:`recipes.fastest_precision`)."""
        return recipes.fastest_precision(gpu, self.precision, self.precisions)


# =========================================================================================
# The fastest layout
# =========================================================================================
_FASTEST: dict[tuple, search.SearchResult] = {}
_FASTEST_LOCK = threading.Lock()


def software_space(software: Mapping[str, Any] | None, base: search.SearchSpace | None = None) -> search.SearchSpace:
    """``base`` (default the search's) with the software of a scenario's ``training.software``
    (``moe_dispatcher``, ``schedule``, ``expert_gemm``; a key it lacks keeps ``base``'s): every
    layout is timed as that stack runs it (``SearchSpace.ep_dispatch``, ``schedule``, ``expert_gemm``)."""
    space = search.SearchSpace() if base is None else base
    sw = dict(software or {})
    changes: dict[str, Any] = {}
    if sw.get("moe_dispatcher") is not None:
        disp = options.DISPATCHERS[str(sw["moe_dispatcher"])]
        if not (disp == "dedup" and space.ep_dispatch is None):  # None is the search's "dedup": one cache entry
            changes["ep_dispatch"] = disp
    for key in ("schedule", "expert_gemm"):
        if sw.get(key) is not None and sw[key] != getattr(space, key):
            changes[key] = str(sw[key])
    return space.with_(**changes) if changes else space


def validated_space(model: Model, space: search.SearchSpace | None = None) -> search.SearchSpace:
    """``space`` (default: the search's) with the floors it leaves unset (None) at what the measured
    runs span: an MoE model's fewest tokens per local expert and layers per pipeline chunk of any
    published MoE run with a measurement (``runplan.moe_envelope``), and any model's fewest tokens
    per context-parallel rank of any measured run with context parallelism
    (``runplan.cp_envelope``): the search keeps to layouts the validation checked the model on."""
    space = search.SearchSpace() if space is None else space
    changes: dict[str, Any] = {}
    if space.min_tokens_per_cp_rank is None:
        changes["min_tokens_per_cp_rank"] = runplan.cp_envelope()["tokens_min"]
    if model.is_moe:
        env = runplan.moe_envelope()
        if space.min_tokens_per_expert is None:
            changes["min_tokens_per_expert"] = env["tpe_min"]
        if space.min_layers_per_chunk is None:
            changes["min_layers_per_chunk"] = env["lps_min"]
    return space.with_(**changes) if changes else space


def fastest(model: Model, gpu: hardware.GPU, recipe: recipes.Recipe, gpus: int, batch_tokens: int | None = None,
            *, gbs: int | None = None, space: search.SearchSpace | None = None) -> search.SearchResult:
    """The fastest layout of ``model`` on ``gpus`` GPUs of ``gpu`` in ``recipe`` at a global batch
    of ``batch_tokens`` tokens (or ``gbs`` sequences), in ``space`` (default: the search's) within
    what the measured runs span (:func:`validated_space`; where no layout inside fits, the fastest
    outside it, so that a count that holds the model never reads as one that does not):
    ``search.cached_search`` (on disk, keyed by the model's, GPU's and recipe's fields) and kept
    per process."""
    space = validated_space(model, space)
    key = (model, hardware.check(gpu), recipes.check(recipe), int(gpus), batch_tokens, gbs, space)
    res = _FASTEST.get(key)
    if res is None:
        res = search.cached_search(model, recipe, gpu, int(gpus), tokens_per_step=batch_tokens, gbs=gbs,
                                   space=space, pareto=False)
        if not res.fits and any(getattr(space, f) for f in search.FLOORS):
            res = search.cached_search(model, recipe, gpu, int(gpus), tokens_per_step=batch_tokens, gbs=gbs,
                                       space=space.with_(**{f: 0.0 for f in search.FLOORS}), pareto=False)
        with _FASTEST_LOCK:
            _FASTEST[key] = res
    return res


def clear_cache() -> None:
    """Forget this process's searches (the disk cache stays)."""
    _FASTEST.clear()


def mfu(tokens_per_s_per_gpu, model: Model, gpu: hardware.GPU, recipe: recipes.Recipe):
    """Model FLOPs utilization: tokens/s per GPU x model FLOPs per token (causal, unpadded, no
    recompute: ``Model.model_flops_per_token``) / the dense peak of ``recipe`` on ``gpu``. The
    step-time model's ``StepTime.mfu`` is this (a test holds them equal); a measured run's MFU is
    this of its measured tokens/s (never a source's own count)."""
    return tokens_per_s_per_gpu * model.model_flops_per_token(causal=True) / gpu.peak_flops(recipe)


def case(terms: Terms, model: Model, gpu: hardware.GPU, gpus: int, recipe: recipes.Recipe | None = None,
         res: search.SearchResult | None = None) -> dict[str, Any]:
    """One model on ``gpus`` GPUs of ``gpu`` (in ``recipe``, default the one it trains in) as a row:
    model, gpu and precision (ids), gpus, fits, message, min_gpus, layout (a ``Layout`` or None),
    tps / tps_low / tps_high (tokens/s per GPU), mfu / mfu_low / mfu_high (the band of the
    throughput: the FLOPs and the peak are fixed), step_s / step_s_low / step_s_high (s; the band
    of the throughput at the fixed batch), comm_share (exposed communication /
    step), sequences_per_gpu, system_w (all-in system power per GPU, W) and state_bytes (what a
    restart loads, :func:`scaletax.model.goodput.checkpoint_bytes`). No economics yet
    (:func:`add_costs`)."""
    rec = terms.recipe(gpu) if recipe is None else recipe
    n = int(gpus)
    res = fastest(model, gpu, rec, n, terms.batch_tokens, space=terms.space()) if res is None else res
    row = {"model": model.id, "gpu": gpu.id, "precision": rec.name, "gpus": n, "fits": res.fits,
           "message": res.message, "min_gpus": res.min_gpus, "system_w": terms.system_w(gpu),
           "state_bytes": goodput.checkpoint_bytes(model.total_params), "layout": res.best,
           "tps": None, "tps_low": None, "tps_high": None, "mfu": None, "mfu_low": None, "mfu_high": None,
           "step_s": None, "step_s_low": None, "step_s_high": None, "comm_share": None}
    if res.fits:
        m = res.metrics
        t, lo, hi = m["tokens_per_s_per_gpu"], m["tokens_per_s_per_gpu_low"], m["tokens_per_s_per_gpu_high"]
        u, step = mfu(t, model, gpu, rec), m["step_s"]
        # the step carries a fixed batch: its band is the throughput's, inverted
        row.update(tps=t, tps_low=lo, tps_high=hi, mfu=u, mfu_low=u * lo / t, mfu_high=u * hi / t, step_s=step,
                   step_s_low=step * t / hi, step_s_high=step * t / lo,
                   comm_share=m["exposed_comm_s"] / step, sequences_per_gpu=res.sequences / n)
    return row


#: The quantities :func:`add_costs` adds, each with ``_low`` and ``_high``.
COSTS: tuple[str, ...] = ("days", "gpu_hours", "energy_mwh", "cost_usd", "usd_per_mtok", "tokens_per_day")


def add_costs(rows: list[dict[str, Any]], terms: Terms) -> list[dict[str, Any]]:
    """Add days, scheduled GPU-hours, energy (MWh), cost (USD), USD per million tokens and tokens
    per day, each with ``_low`` / ``_high``, and the goodput of the row's scale (``goodput``, with
    ``goodput_low`` / ``goodput_high`` over the published interruption rates), to every row with a
    throughput (``tps``, ``gpus``, ``system_w``, ``state_bytes`` and ``price``, None without one);
    one pass of :func:`cost.run_costs` over all rows (days and GPU-hours are scheduled ones).

    The band holds both uncertainties the numbers rest on: low throughput with low goodput gives
    the high end of days, GPU-hours, energy and cost, and high with high the low end (the
    goodput band is the spread of published interruption rates; none when the planner set
    ``cluster.goodput``). The goodput band is folded in rather than shown apart because it is
    the larger one at scale (at 100,000 GPUs it spans about 0.24-0.73 against a throughput band
    of about +-15%): a days band without it would promise a precision the inputs do not have
    exactly where the answer is least certain."""
    fit = [r for r in rows if r.get("tps")]
    for r in rows:
        if not r.get("tps"):
            r.update({k + s: None for k in (*COSTS, "goodput") for s in ("", "_low", "_high")})
    if not fit:
        return rows
    n = np.array([r["gpus"] for r in fit], dtype=float)
    watts = np.array([r["system_w"] for r in fit], dtype=float)
    price = np.array([np.nan if r.get("price") is None else r["price"] for r in fit])
    good, good_lo, good_hi = np.empty(len(fit)), np.empty(len(fit)), np.empty(len(fit))
    for sb in {r["state_bytes"] for r in fit}:
        idx = [i for i, r in enumerate(fit) if r["state_bytes"] == sb]
        g, lo, hi = (np.atleast_1d(x) for x in terms._goodput_band(sb, n[idx]))
        good[idx], good_lo[idx], good_hi[idx] = g, lo, hi
        for i, a, b, c in zip(idx, g, lo, hi):
            fit[i].update(goodput=float(a), goodput_low=float(b), goodput_high=float(c))

    def cols(tps, goodput):
        c = cost.run_costs(terms.tokens, tps, n, watts, terms.economics(), usd_per_gpu_hour=np.nan_to_num(price),
                           goodput=goodput)
        for k in ("cost_usd", "usd_per_mtok"):
            c[k] = np.where(np.isnan(price), np.nan, c[k])
        return c

    # the band's ends: low throughput with the low goodput, high throughput with the high goodput
    mid, slow, fast = (cols(np.array([r[k] for r in fit], dtype=float), g)
                       for k, g in (("tps", good), ("tps_low", good_lo), ("tps_high", good_hi)))
    for k in COSTS:
        a, b = np.atleast_1d(slow[k]), np.atleast_1d(fast[k])
        for suffix, v in (("", np.atleast_1d(mid[k])), ("_low", np.minimum(a, b)), ("_high", np.maximum(a, b))):
            for r, x in zip(fit, v):
                r[k + suffix] = float(x) if np.isfinite(x) else None
    return rows


# =========================================================================================
# GPUs for a deadline
# =========================================================================================
def round_count(n: float) -> int:
    """``n`` rounded up to the count grid (:data:`RESOLUTION_BITS`: about 1/16 of the count, at
    least whole 8-GPU nodes)."""
    n = max(8.0, float(n))
    step = max(8, 2 ** max(0, int(math.floor(math.log2(n))) - RESOLUTION_BITS))
    return int(step * math.ceil(n / step - 1e-12))


def next_count(n: int) -> int:
    """The next count of the grid above ``n``."""
    return round_count(n + 1)


def prev_count(n: int) -> int:
    """The largest count of the grid below ``n`` (at least 8)."""
    m = max(8, int(n) - 1)
    step = max(8, 2 ** max(0, int(math.floor(math.log2(m))) - RESOLUTION_BITS))
    return max(8, int(step * (m // step)))


#: How many counts of the grid below a cluster's size :func:`runnable_case` tries when the scenario's
#: global batch does not split over the whole cluster: 16 steps of about 1/16, down to about half.
STEP_DOWN = 16


def runnable_case(terms: Terms, model: Model, gpu: hardware.GPU, gpus: int,
                  recipe: recipes.Recipe | None = None) -> dict[str, Any]:
    """:func:`case` on the most GPUs, up to ``gpus``, that run the scenario's global batch:
    ``gpus`` itself, else the counts of the grid below it, largest first (at most
    :data:`STEP_DOWN`; never below the smallest count that holds the model). A cluster larger
    than the batch can use (a power budget's, a fleet's) trains on part of it. ``asked``: ``gpus``;
    the row's ``gpus``: the count it runs on (``asked`` and not fitting when none does)."""
    n = int(gpus)
    row = case(terms, model, gpu, n, recipe)
    k = n
    for _ in range(STEP_DOWN):
        if row["fits"] or k <= 8 or (row["min_gpus"] is not None and prev_count(k) < row["min_gpus"]):
            break
        k = prev_count(k)
        alt = case(terms, model, gpu, k, recipe)
        if alt["fits"]:
            row = alt
    row["asked"] = n
    return row


def largest_cluster(terms: Terms, gpu: hardware.GPU, facility_mw: float) -> dict[str, Any]:
    """The most whole systems of ``gpu`` whose facility power at the scenario's PUE fits
    ``facility_mw`` (:func:`scaletax.model.power.largest_cluster`, the system power every energy
    figure uses)."""
    return power.largest_cluster(gpu, facility_mw, terms.pue, terms.system_overhead)


def _days(terms: Terms, model: Model, res: search.SearchResult, n: int) -> float:
    return cost.days_to_train(terms.tokens, res.metrics["tokens_per_s_per_gpu"], n, terms.goodput_at(model, n)) \
        if res.fits else math.inf


def _scan(terms: Terms, model: Model, gpu: hardware.GPU, recipe: recipes.Recipe, days: float,
          space: search.SearchSpace | None) -> tuple[int | None, int | None, dict[int, search.SearchResult], str]:
    """(the fewest GPUs of the grid from the probe bound up that train the budget in ``days``, the
    count scanned just before it (None: it was the first; 0: the first, and the smallest count that
    holds the model), the searches by count, a message when there is none)."""
    seen: dict[int, search.SearchResult] = {}
    space = terms.space(space)

    def run(k: int) -> search.SearchResult:
        if k not in seen:
            seen[k] = fastest(model, gpu, recipe, k, terms.batch_tokens, space=space)
        return seen[k]

    smallest = search.cached_min_gpus(model, recipe, gpu, space=space,
                                      sequences=search.target_sequences(model, terms.batch_tokens))
    if not smallest.fits:
        return None, None, seen, f"{model.name or model.id} does not fit on any count up to {search.MAX_GPUS:,} GPUs"
    memory_min = smallest.gpus[0]
    probes = [run(k) for k in sorted({memory_min, 2 * memory_min, 4 * memory_min, *PROBE_COUNTS}) if k >= memory_min]
    tps = [r.metrics["tokens_per_s_per_gpu"] for r in probes if r.fits]
    # the goodput at the smallest count is the highest (interruptions grow with the count)
    best_good = float(terms.goodput_at(model, memory_min))
    bound = cost.gpus_for_days(terms.tokens, PROBE_MARGIN * max(tps), days, best_good) if tps else 8
    n = round_count(max(bound, memory_min))  # no count below holds the model or could meet the deadline
    prev = None if n > round_count(memory_min) else 0  # 0: the first count is the smallest that holds it
    while n <= MAX_COUNT:
        if _days(terms, model, run(n), n) <= days * (1 + 1e-9):
            return n, prev, seen, ""
        r = seen[n]
        prev = n
        # skip counts where nothing fits: the memory minimum the search reports
        n = round_count(r.min_gpus) if (not r.fits and r.min_gpus is not None and r.min_gpus > n) else next_count(n)
    return None, prev, seen, f"needs more than {MAX_COUNT:,} GPUs"


def gpus_for_deadline(terms: Terms, model: Model, gpu: hardware.GPU, recipe: recipes.Recipe | None = None,
                      days: float | None = None) -> dict[str, Any]:
    """The fewest GPUs (on the count grid, :func:`round_count`) that train ``terms.tokens`` in
    ``days`` (default the target), the layout searched again at each count.

    Every count of the grid is tried from the one that would meet the deadline at
    :data:`PROBE_MARGIN` times the fastest per-GPU throughput of :data:`PROBE_COUNTS` up to the
    first that meets it: a longer deadline starts lower and accepts every count a shorter one
    accepts, so it never needs more GPUs (monotone; tokens/s per GPU is not monotone in the count,
    since the global batch divides better on some counts than on others). Band: GPUs needed at
    the band's throughputs and goodputs on the found count (held fixed; the ends paired as in
    :func:`add_costs`), never narrower than the count grid.

    ``linear``: the count that linear scaling of the found count's throughput gives. Where the
    answer is above it, the counts in between fit but miss the deadline at the scenario's global
    batch (``batch`` sequences); on each of them, from the smallest, the nearest batch that splits
    into whole micro-batches per rank in multiples of the best layout's pipeline depth (within
    :data:`NEARBY_BATCH_TOLERANCE`) is searched, and the first count that meets the deadline
    with it is ``nearby_gpus`` at ``nearby_batch`` sequences (None when no count does).
    """
    rec = terms.recipe(gpu) if recipe is None else recipe
    days = terms.target_days if days is None else float(days)
    n, prev, seen, msg = _scan(terms, model, gpu, rec, days, None)
    base = {"gpus": None, "low": None, "high": None, "days": None, "exact": None, "exact_low": None,
            "exact_high": None, "result": None, "memory_bound": False, "tokens_per_s_per_gpu": None, "tps_low": None,
            "tps_high": None, "searches": len(seen), "message": msg, "target_days": days, "precision": rec.name,
            "linear": None, "nearby_gpus": None, "nearby_batch": None, "batch": None}
    if n is None:
        base["result"] = seen[max(seen)] if seen else None
        return base
    res = seen[n]
    m = res.metrics
    t, tlo, thi = m["tokens_per_s_per_gpu"], m["tokens_per_s_per_gpu_low"], m["tokens_per_s_per_gpu_high"]
    good, good_lo, good_hi = (float(x) for x in terms.goodput_band_at(model, n))
    # the band's ends as in add_costs: high throughput with high goodput, low with low
    exact = [terms.tokens / (x * days * cost.SECONDS_PER_DAY * g) for x, g in ((t, good), (thi, good_hi), (tlo, good_lo))]
    low, high = (round_count(x) for x in exact[1:])
    linear = round_count(exact[0])
    out = {**base, "gpus": n, "low": min(low, n), "high": max(high, n),
           "days": _days(terms, model, res, n), "goodput": good, "exact": exact[0], "exact_low": exact[1], "exact_high": exact[2],
           "result": res, "memory_bound": prev == 0 or (prev is not None and not seen[prev].fits),
           "tokens_per_s_per_gpu": t, "tps_low": tlo, "tps_high": thi, "linear": linear,
           "batch": res.sequences}
    if linear < n and not out["memory_bound"]:  # the counts in between fit but miss at the scenario's batch
        near = _nearby_batch(terms, model, gpu, rec, days, [k for k in sorted(seen) if linear <= k < n], seen)
        out["searches"] += near[2]
        if near[0] is not None:
            out.update(nearby_gpus=near[0], nearby_batch=near[1])
    return out


def _nearby_batch(terms: Terms, model: Model, gpu: hardware.GPU, recipe: recipes.Recipe, days: float,
                  counts: Sequence[int], seen: Mapping[int, search.SearchResult]) -> tuple[int | None, int | None, int]:
    """(the first of ``counts`` that meets ``days`` at the nearest global batch whose micro-batches
    per rank are a multiple of its best layout's pipeline depth, that batch in sequences, searches)."""
    searches = 0
    for k in counts:
        res = seen[k]
        if not res.fits:
            continue
        lay, s = res.best, res.sequences
        unit = int(lay.mbs) * int(lay.dp) * int(lay.pp)
        gbs = max(1, int(round(s / unit))) * unit
        if gbs == lay.gbs or abs(gbs / s - 1) > NEARBY_BATCH_TOLERANCE:
            continue
        searches += 1
        alt = fastest(model, gpu, recipe, k, gbs=gbs, space=terms.space())
        if _days(terms, model, alt, k) <= days * (1 + 1e-9):
            return k, gbs, searches
    return None, None, searches


# =========================================================================================
# Ratios
# =========================================================================================
def ratio_band(value: float, corners: Iterable[float], spread: float | None = None) -> tuple[float, float]:
    """The band of a ratio of two predictions: the range of ``corners`` (the ratio at each end of
    the inputs' bands) and ``value``, widened to at least ``value`` / (1 + w) .. ``value`` x (1 + w),
    w = ``spread`` (default the model's error on measured pairs of runs, ``EfficiencyBand.ratio_spread``:
    ``data/efficiency.yaml`` ``band.ratio_half_width``, the split-conformal 80% quantile of the leave-one-source-out
    error of the ratio of the same model's throughput on two GPUs, ``calibrate.ratio_half_width``).
    Two predictions sharing the calibrated parameters leave the ratio's corners nearly equal, which
    is no evidence that the ratio is known that well. The one place a ratio's band comes from."""
    w = efficiency.default_band().ratio_spread if spread is None else float(spread)
    v = np.asarray(value, dtype=float)
    vals = np.stack(np.broadcast_arrays(v, *(np.asarray(c, dtype=float) for c in corners)))
    lo, hi = np.minimum(vals.min(axis=0), v / (1.0 + w)), np.maximum(vals.max(axis=0), v * (1.0 + w))
    return (float(lo), float(hi)) if lo.ndim == 0 else (lo, hi)


def throughput_ratio(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, float] | None:
    """Tokens/s per GPU of row ``a`` over row ``b`` (rows of :func:`case`), with its band
    (:func:`ratio_band` of the same-corner ratios); None when either has no throughput."""
    if not (a.get("tps") and b.get("tps")):
        return None
    r = a["tps"] / b["tps"]
    lo, hi = ratio_band(r, (a["tps_low"] / b["tps_low"], a["tps_high"] / b["tps_high"]))
    return {"ratio": r, "ratio_low": lo, "ratio_high": hi}


def gpu_count_ratio(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, float] | None:
    """GPUs ``a`` needs over GPUs ``b`` needs (results of :func:`gpus_for_deadline`, counts on the
    grid), with its band (:func:`ratio_band` of the ratios at the band's ends of both); None when
    either has no count."""
    if not (a.get("gpus") and b.get("gpus")):
        return None
    r = a["gpus"] / b["gpus"]
    lo, hi = ratio_band(r, (a["low"] / b["low"], a["high"] / b["high"]))
    return {"ratio": r, "ratio_low": lo, "ratio_high": hi}


def cost_ratio_curve(terms: Terms, gpu_a: hardware.GPU, gpu_b: hardware.GPU, a: Mapping[str, Any],
                     b: Mapping[str, Any], price_ratios) -> dict[str, Any] | None:
    """Cost per trained token of row ``a`` (on ``gpu_a``) over row ``b`` (on ``gpu_b``, with a
    price), rows of :func:`case` of the same model on the same count (so the same goodput), as
    ``a``'s price per GPU-hour runs over ``price_ratios`` (an array) times ``b``'s.

    Cost per token is (price + electricity per GPU-hour) / (tokens/s per GPU x goodput)
    (:func:`cost.run_costs` per token), so the ratio is c(x) / R with c(x) = (x p_b + e_a) /
    (p_b + e_b) and R :func:`throughput_ratio` (band from :func:`ratio_band`): ``ratio``,
    ``ratio_low`` = c / R_high, ``ratio_high`` = c / R_low. ``breakeven``: the price ratio where
    the ratio is 1, ((p_b + e_b) R - e_a) / p_b, with ``breakeven_low`` / ``breakeven_high`` at
    R's band (below ``breakeven_low`` ``a`` is cheaper per token at every end of the band, above
    ``breakeven_high`` dearer). ``at``: the same at the scenario's price ratio (None when ``a`` has
    no price). None when either row has no throughput or ``b`` no price."""
    q = throughput_ratio(a, b)
    if q is None or b.get("price") is None:
        return None
    if (a["model"], a["gpus"]) != (b["model"], b["gpus"]):
        raise ValueError("cost_ratio_curve: compare the same model on the same GPU count")
    pb = float(b["price"])
    ea, eb = terms.energy_usd_per_gpu_hour(gpu_a), terms.energy_usd_per_gpu_hour(gpu_b)

    def curve(x):
        c = (np.asarray(x, dtype=float) * pb + ea) / (pb + eb)
        return {"ratio": c / q["ratio"], "ratio_low": c / q["ratio_high"], "ratio_high": c / q["ratio_low"]}

    def breakeven(r):
        return ((pb + eb) * r - ea) / pb

    x = np.asarray(price_ratios, dtype=float)
    out = {"price_ratio": x, **curve(x), "tps_ratio": q["ratio"], "tps_ratio_low": q["ratio_low"],
           "tps_ratio_high": q["ratio_high"], "breakeven": breakeven(q["ratio"]),
           "breakeven_low": breakeven(q["ratio_low"]), "breakeven_high": breakeven(q["ratio_high"]), "at": None}
    if a.get("price") is not None:
        xa = float(a["price"]) / pb
        out["at"] = {"price_ratio": xa, **{k: float(v) for k, v in curve(xa).items()}}
    return out


# =========================================================================================
# Whole systems; the memory chapter's searches
# =========================================================================================
def capacity(gpu: hardware.GPU, gpus: int | None) -> dict[str, Any]:
    """How ``gpus`` GPUs are bought: whole systems (8-GPU nodes, 72-GPU racks; ``data/systems.csv``).

    need_systems: systems holding the count; need_bought: their GPUs (the layout runs on
    ``gpus``; the rest are spares); system: the system's name; per_system.
    """
    if not gpus:
        return {"need_systems": None, "need_bought": None, "system": gpu.system, "per_system": gpu.gpus_per_system}
    n = cost.whole_systems(gpus, gpu.gpus_per_system)
    return {"need_systems": n, "need_bought": n * gpu.gpus_per_system,
            "system": gpu.system or f"{gpu.gpus_per_system}-GPU system", "per_system": gpu.gpus_per_system}


def cluster_power(terms: Terms, gpu: hardware.GPU, gpus) -> dict[str, Any]:
    """IT and facility megawatts of ``gpus`` GPUs of ``gpu`` in whole systems, at the scenario's
    PUE (:func:`scaletax.model.power.cluster_power`, the system power every energy figure uses)."""
    return power.cluster_power(gpu, gpus, terms.pue, terms.system_overhead)


def goodput_detail(terms: Terms, model: Model, gpus) -> dict[str, Any]:
    """The goodput of ``model`` on ``gpus`` GPUs with its band and what makes it (mean time
    between unexpected interruptions in hours, checkpoint write and interval in s,
    :func:`scaletax.model.goodput.breakdown`); ``yours``: the planner's ``cluster.goodput`` (no model)."""
    g, lo, hi = terms.goodput_band_at(model, gpus)
    out = {"goodput": g, "goodput_low": lo, "goodput_high": hi, "yours": terms.goodput is not None,
           "mtbf_h": None, "checkpoint_s": None, "interval_s": None}
    if terms.goodput is None:
        b = goodput.breakdown(gpus, goodput.checkpoint_bytes(model.total_params), terms.reliability_inputs())
        out.update(mtbf_h=b["mtbf_h"], checkpoint_s=b["checkpoint_s"], interval_s=b["interval_s"])
    return out


def owned_price(terms: Terms, gpu: hardware.GPU) -> dict[str, Any] | None:
    """USD per GPU-hour of paid work of an owned ``gpu`` (:func:`scaletax.model.ownership.owned_usd_per_gpu_hour`:
    capital, facility, energy and total) beside the rental price with the same energy
    (``rent_total``); None when the scenario has no ownership inputs or no system price for it."""
    own = terms.ownership
    cap = (own or {}).get("capex", {}).get(gpu.id)
    if own is None or cap is None:
        return None
    out = ownership.owned_usd_per_gpu_hour(float(cap["usd_per_system"]) / gpu.gpus_per_system,
                                           float(own["depreciation_years"]), float(own["cost_of_capital"]),
                                           float(own["facility_usd_per_mw_year"]), terms.system_w(gpu),
                                           float(own["busy_share"]), terms.energy_usd_per_gpu_hour(gpu, owned=True))
    rent = terms.price(gpu.id)
    basis = "your input" if cap.get("your_input") else "assumed" if cap.get("assumption") else "published"
    return {**out, "capex_per_system": float(cap["usd_per_system"]), "capex_basis": basis, "rent": rent,
            "rent_total": None if rent is None else rent + terms.energy_usd_per_gpu_hour(gpu)}


def own_vs_rent(terms: Terms, gpu: hardware.GPU, row: Mapping[str, Any]) -> dict[str, Any] | None:
    """The cost of one case (a row of :func:`add_costs` on ``gpu``) rented and owned, with their
    bands: ``rented_usd`` is the row's cost; ``owned_usd`` its scheduled GPU-hours at the owned
    price less energy (:func:`owned_price`: capital and facility) plus its energy at the
    electricity price (:func:`cost.cost_usd`, as the rented cost; an owned GPU pays its
    electricity whatever the rental prices include). Also the prices per GPU-hour (``owned``,
    ``rent_total``, both with energy) and ``capex_basis``. None without ownership inputs for
    the GPU or without a throughput."""
    own = owned_price(terms, gpu)
    if own is None or not row.get("gpu_hours"):
        return None
    hourly = own["capital"] + own["facility"]
    out = {"owned": own["total"], "capital": own["capital"], "facility": own["facility"], "energy": own["energy"],
           "rent": own["rent"], "rent_total": own["rent_total"], "capex_basis": own["capex_basis"],
           "capex_per_system": own["capex_per_system"]}
    for b in ("", "_low", "_high"):
        out["owned_usd" + b] = float(cost.cost_usd(row["gpu_hours" + b], hourly, row["energy_mwh" + b],
                                                   terms.usd_per_mwh))
        out["rented_usd" + b] = row.get("cost_usd" + b)
    return out


def least_parallel(model: Model, gpu: hardware.GPU, recipe: recipes.Recipe, gpus: int, space: search.SearchSpace,
                   batch_seqs: int | None = None) -> dict[str, Any]:
    """The least model-parallel layout of ``space`` that fits ``gpus`` GPUs of ``gpu`` (``layout``,
    None where none does), its ``gib``, and what sets its model-parallel size mp = tp x pp x cp
    (``bound``): "batch" where a less model-parallel layout would fit in memory but not run the
    global batch of ``batch_seqs`` sequences, "memory" where the less model-parallel layouts do
    not fit, "none" where it is the least parallel layout there is. ``space`` has objective
    "least_parallel"; without ``batch_seqs`` there is no batch rule."""
    def run(seqs):
        sp = space if seqs is not None else space.with_(batch_tolerance=None)
        return search.cached_search(model, recipe, gpu, int(gpus), gbs=seqs, space=sp, pareto=False)

    res = run(batch_seqs)
    if not res.fits:
        return {"layout": None, "gib": None, "bound": None}
    lay = res.best
    mp = lay.tp * lay.pp * lay.cp
    free = res if batch_seqs is None else run(None)
    if free.fits and free.best.tp * free.best.pp * free.best.cp < mp:
        bound = "batch"
    else:  # the least model parallelism of any candidate, memory aside
        la = search.candidates(model, int(gpus), space.with_(batch_tolerance=None), None, domain=res.domain)
        bound = "memory" if mp > int((la.tp * la.pp * la.cp).min()) else "none"
    return {"layout": lay, "gib": res.metrics["memory_gib"], "bound": bound}


def fewest_gpus(model: Model, gpu: hardware.GPU, recipe: recipes.Recipe, space: search.SearchSpace,
                batch_seqs: int | None = None) -> search.SearchResult:
    """The smallest count (1, 2, 4, then whole 8-GPU nodes up to ``space.max_gpus``) where
    ``space`` has a layout of ``model`` that fits ``gpu`` (``search.cached_min_gpus``)."""
    sp = space if batch_seqs is not None else space.with_(batch_tolerance=None)
    return search.cached_min_gpus(model, recipe, gpu, space=sp, sequences=batch_seqs)


__all__ = ["COSTS", "MAX_COUNT", "NEARBY_BATCH_TOLERANCE", "PROBE_COUNTS", "PROBE_MARGIN", "RESOLUTION_BITS",
           "Terms", "software_space", "validated_space", "add_costs", "capacity", "cluster_power", "goodput_detail", "owned_price", "case", "clear_cache", "fastest", "fewest_gpus",
           "cost_ratio_curve", "gpu_count_ratio", "gpus_for_deadline", "own_vs_rent", "least_parallel", "largest_cluster", "mfu",
           "next_count", "prev_count", "runnable_case", "STEP_DOWN", "ratio_band",
           "round_count", "throughput_ratio"]
