"""Time to train, GPU-hours, energy and cost for a token budget, with low/high bands and a
one-at-a-time sensitivity analysis (rows for a tornado chart).

Public API
----------
Arithmetic (scalars or numpy arrays, broadcasting):

- ``days_to_train(tokens, tokens_per_s_per_gpu, gpus, goodput=1)``: tokens / (tokens/s per GPU x
  GPUs x 86,400 x goodput).
- ``gpus_for_days(tokens, tokens_per_s_per_gpu, days, goodput=1, per_system=1)``: the inverse,
  rounded up to whole GPUs, or to whole systems of ``per_system`` GPUs (8-GPU nodes, 72-GPU
  racks); at fixed tokens/s per GPU (a planner re-runs the search at that count: per-GPU
  throughput falls as the cluster grows).
- ``whole_systems(gpus, per_system)``: systems holding ``gpus`` GPUs (ceil).
- ``gpu_hours(tokens, tokens_per_s_per_gpu, goodput=1)``: scheduled (billed) GPU-hours,
  tokens / (tokens/s per GPU) / 3,600 / goodput.
- ``energy_mwh(hours, system_w, utilization, pue)``:
  GPU-hours x all-in system power per GPU (W) x utilization x PUE / 1e6.
- ``cost_usd(hours, usd_per_gpu_hour, mwh=0, usd_per_mwh=0)``: GPU-hours x price + MWh x price.
- ``run_costs(tokens, tokens_per_s_per_gpu, gpus, system_w, economics, usd_per_gpu_hour=None,
  goodput=None)``: days, GPU-hours, energy, cost (GPU and energy parts) and USD per million
  tokens of a run, vectorized over arrays; what every chapter and ``scaletax plan`` use.

Goodput: the share of scheduled time that trains (the rest is lost to failures, restarts and
checkpoints): the scale model of :mod:`scaletax.model.goodput` for the run's GPU count and model, or
the scenario's ``cluster.goodput`` when the planner sets one. Days and billed GPU-hours are the
productive ones divided by goodput; energy is counted on the scheduled hours too (an upper
bound: a restarting cluster draws less than a training one).

Estimates:

- ``Economics``: price per GPU-hour, energy factors, electricity price, goodput and whether the
  price includes power (scenario inputs).
- ``train_estimate(tokens, tokens_per_s_per_gpu, gpus, gpu, economics, target_days=None,
  low=None, high=None) -> dict``: every quantity with ``_low`` / ``_high`` from the throughput
  band (low throughput gives the high cost, and so on).
- ``sensitivity(fn, base, ranges) -> list[dict]``: one input at a time to its low and high
  value, sorted by swing (largest first); ``training_sensitivity(...)`` builds it for the
  training estimate (efficiency band, token budget, price, PUE, utilization, overhead, cluster).

Energy: a GPU's share of its system's power, ``system_w`` (:func:`scaletax.model.power.system_w`: the
system's maximum power over its GPUs, DGX H100 10.2 kW / 8 = 1,275 W; the same figure the
facility megawatts of :mod:`scaletax.model.power` use), drawn at ``utilization`` of peak on average,
times the facility PUE (The Green Grid, PUE: a comprehensive examination of the metric, 2012).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Mapping

import numpy as np

from scaletax.inputs import hardware
from scaletax.model import power

SECONDS_PER_DAY = 86_400.0


def _pos(name: str, v) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64)
    if np.any(~np.isfinite(a)) or np.any(a <= 0):
        raise ValueError(f"{name}: must be a positive finite number (got {v!r})")
    return a


def _out(a):
    return float(a) if np.ndim(a) == 0 else a


def _goodput(goodput) -> np.ndarray:
    g = np.asarray(goodput, dtype=np.float64)
    if np.any(~np.isfinite(g)) or np.any((g <= 0) | (g > 1)):
        raise ValueError(f"goodput: must be in (0, 1] (got {goodput!r})")
    return g


def days_to_train(tokens, tokens_per_s_per_gpu, gpus, goodput=1.0):
    """Days to train ``tokens`` on ``gpus`` GPUs at ``tokens_per_s_per_gpu``, when ``goodput``
    of the scheduled time trains."""
    return _out(_pos("tokens", tokens) / (_pos("tokens_per_s_per_gpu", tokens_per_s_per_gpu)
                                          * _pos("gpus", gpus) * SECONDS_PER_DAY * _goodput(goodput)))


def whole_systems(gpus, per_system):
    """Systems of ``per_system`` GPUs (a node, a rack) needed to hold ``gpus`` GPUs (ceil)."""
    n = np.ceil(_pos("gpus", gpus) / _pos("per_system", per_system) * (1 - 1e-12))
    return int(n) if np.ndim(n) == 0 else n.astype(np.int64)


def gpus_for_days(tokens, tokens_per_s_per_gpu, days, goodput=1.0, per_system=1):
    """GPUs needed to train ``tokens`` in ``days`` at ``tokens_per_s_per_gpu``: rounded up to
    whole GPUs, or to whole systems of ``per_system`` GPUs (then a multiple of it)."""
    need = _pos("tokens", tokens) / (_pos("tokens_per_s_per_gpu", tokens_per_s_per_gpu)
                                     * _pos("days", days) * SECONDS_PER_DAY * _goodput(goodput))
    g = np.ceil(need * (1 - 1e-12))  # tolerate round-off when the quotient is an integer
    g = whole_systems(g, per_system) * np.asarray(per_system) if np.any(np.asarray(per_system) != 1) else g
    return int(g) if np.ndim(g) == 0 else np.asarray(g).astype(np.int64)


def gpu_hours(tokens, tokens_per_s_per_gpu, goodput=1.0):
    """Scheduled (billed) GPU-hours to process ``tokens`` at ``tokens_per_s_per_gpu`` when
    ``goodput`` of the time trains (independent of cluster size)."""
    return _out(_pos("tokens", tokens) / _pos("tokens_per_s_per_gpu", tokens_per_s_per_gpu) / 3600.0
                / _goodput(goodput))


def energy_mwh(hours, system_w, utilization, pue):
    """Facility energy, MWh: GPU-hours x all-in system power per GPU (W,
    :func:`scaletax.model.power.system_w`) x utilization (average / peak draw) x PUE / 1e6."""
    if np.any(np.asarray(pue, dtype=float) < 1):
        raise ValueError(f"pue: must be >= 1 (got {pue!r})")
    u = np.asarray(utilization, dtype=np.float64)
    if np.any((u <= 0) | (u > 1)):
        raise ValueError(f"utilization: must be in (0, 1] (got {utilization!r})")
    return _out(_pos("hours", hours) * _pos("system_w", system_w) * u * np.asarray(pue, dtype=float) / 1e6)


def cost_usd(hours, usd_per_gpu_hour, mwh=0.0, usd_per_mwh=0.0):
    """GPU rental cost plus (optionally) electricity: GPU-hours x $/GPU-h + MWh x $/MWh.

    Rental prices usually include power; pass ``usd_per_mwh`` only for owned clusters.
    """
    for name, v in (("usd_per_gpu_hour", usd_per_gpu_hour), ("mwh", mwh), ("usd_per_mwh", usd_per_mwh)):
        if np.any(np.asarray(v, dtype=float) < 0):
            raise ValueError(f"{name}: must be >= 0 (got {v!r})")
    return _out(_pos("hours", hours) * np.asarray(usd_per_gpu_hour, dtype=float)
                + np.asarray(mwh, dtype=float) * np.asarray(usd_per_mwh, dtype=float))


@dataclass(frozen=True)
class Economics:
    """Scenario economics. usd_per_gpu_hour: rental or amortized price; utilization: average /
    peak power; pue: facility power usage effectiveness; usd_per_mwh: electricity price (0:
    included in the GPU-hour price); price_includes_power: all-in rental price, so no energy cost
    is added whatever usd_per_mwh; goodput: share of scheduled time that trains;
    system_overhead: the planner's all-in system power / GPU TDP, which replaces every GPU's
    system power (None: ``data/systems.csv``, :func:`scaletax.model.power.system_w`). The energy
    factors have no defaults: they are scenario inputs (``economics.energy`` of
    data/scenarios/default.yaml, with sources)."""

    usd_per_gpu_hour: float
    utilization: float
    pue: float
    usd_per_mwh: float = 0.0
    goodput: float = 1.0
    price_includes_power: bool = False
    system_overhead: float | None = None

    def __post_init__(self) -> None:
        if not self.usd_per_gpu_hour >= 0:
            raise ValueError(f"usd_per_gpu_hour: must be >= 0 (got {self.usd_per_gpu_hour})")
        energy_mwh(1.0, 1.0, self.utilization, self.pue)  # validates
        if self.system_overhead is not None and not self.system_overhead >= 1:
            raise ValueError(f"system_overhead: must be >= 1 (got {self.system_overhead!r})")
        if not self.usd_per_mwh >= 0:
            raise ValueError(f"usd_per_mwh: must be >= 0 (got {self.usd_per_mwh})")
        _goodput(self.goodput)

    @property
    def energy_usd_per_mwh(self) -> float:
        """What one MWh adds to the cost: 0 when the GPU-hour price includes power."""
        return 0.0 if self.price_includes_power else self.usd_per_mwh

    def system_w(self, gpu) -> float:
        """All-in system power per GPU of ``gpu``, W (:func:`scaletax.model.power.system_w` with this
        scenario's override)."""
        return power.system_w(gpu, self.system_overhead)


def run_costs(tokens, tokens_per_s_per_gpu, gpus, system_w, economics: Economics, usd_per_gpu_hour=None,
              goodput=None) -> dict:
    """Days, scheduled GPU-hours, energy (MWh), cost (USD: total, GPU part, energy part), USD per
    million tokens and tokens per day of a run; arrays broadcast. ``system_w``: all-in system power
    per GPU, W (``economics.system_w(gpu)``); ``usd_per_gpu_hour`` and ``goodput`` override the
    economics' (e.g. one per row: the goodput of each row's scale)."""
    econ = economics
    price = np.asarray(econ.usd_per_gpu_hour if usd_per_gpu_hour is None else usd_per_gpu_hour, dtype=float)
    good = np.asarray(econ.goodput if goodput is None else goodput, dtype=float)
    tps = _pos("tokens_per_s_per_gpu", tokens_per_s_per_gpu)
    hours = np.asarray(gpu_hours(tokens, tps, good))
    mwh = np.asarray(energy_mwh(hours, system_w, econ.utilization, econ.pue))
    gpu_usd, energy_usd = hours * price, mwh * econ.energy_usd_per_mwh
    out = {"days": days_to_train(tokens, tps, gpus, good), "gpu_hours": hours, "energy_mwh": mwh,
           "gpu_cost_usd": gpu_usd, "energy_cost_usd": energy_usd, "cost_usd": gpu_usd + energy_usd,
           "usd_per_mtok": (gpu_usd + energy_usd) / np.asarray(tokens, dtype=float) * 1e6,
           "tokens_per_day": tps * np.asarray(gpus, dtype=float) * SECONDS_PER_DAY * good}
    return {k: _out(v) for k, v in out.items()}


def _one(tokens, tps, gpus, system_w, econ: Economics, target_days) -> dict[str, float]:
    r = run_costs(tokens, tps, gpus, system_w, econ)
    out = {"tokens_per_s_per_gpu": float(tps), **{k: r[k] for k in ("days", "gpu_hours", "energy_mwh", "cost_usd",
                                                                     "energy_cost_usd", "gpu_cost_usd")}}
    if target_days is not None:
        out["gpus_for_target_days"] = gpus_for_days(tokens, tps, target_days, econ.goodput)
    return out


def train_estimate(tokens: float, tokens_per_s_per_gpu: float, gpus: int, gpu, economics: Economics,
                   target_days: float | None = None, low: float | None = None,
                   high: float | None = None) -> dict[str, Any]:
    """Days, GPU-hours, energy (MWh) and cost (USD) to train ``tokens`` on ``gpus`` of ``gpu``.

    ``low`` / ``high``: the throughput band (tokens/s per GPU). Every output gets ``_low`` and
    ``_high`` versions: the range over the band (low throughput gives more days, GPU-hours,
    energy and cost). ``gpu``: a ``hardware.GPU`` (for its system power).
    """
    g = hardware.check(gpu)
    w = economics.system_w(g)
    mid = _one(tokens, tokens_per_s_per_gpu, gpus, w, economics, target_days)
    out: dict[str, Any] = {"tokens": float(tokens), "gpus": int(gpus), "gpu": g.id, "tdp_w": g.tdp_w,
                           "system_w": w, **asdict(economics), **mid}
    if target_days is not None:
        out["target_days"] = float(target_days)
    lo_t = tokens_per_s_per_gpu if low is None else low
    hi_t = tokens_per_s_per_gpu if high is None else high
    if not lo_t <= tokens_per_s_per_gpu <= hi_t:
        raise ValueError(f"throughput band: need low <= value <= high (got {lo_t}, {tokens_per_s_per_gpu}, {hi_t})")
    slow = _one(tokens, lo_t, gpus, w, economics, target_days)
    fast = _one(tokens, hi_t, gpus, w, economics, target_days)
    for k in mid:
        a, b = slow[k], fast[k]
        out[f"{k}_low"], out[f"{k}_high"] = (min(a, b), max(a, b))
    return out


def sensitivity(fn: Callable[[dict[str, Any]], float], base: Mapping[str, Any],
                ranges: Mapping[str, tuple[Any, Any]], labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """One-at-a-time sensitivity: ``fn`` with each input at its low and high value, others at base.

    Returns one row per input, sorted by ``swing`` = |output at high - output at low| (largest
    first, the order of a tornado chart): input, label, base / low / high input values,
    output at base, at low, at high, and the relative changes ``low_change`` / ``high_change``.
    """
    out0 = float(fn(dict(base)))
    rows = []
    for name, (lo, hi) in ranges.items():
        if name not in base:
            raise ValueError(f"sensitivity: {name!r} is not an input of the base case ({', '.join(base)})")
        o_lo = float(fn({**base, name: lo}))
        o_hi = float(fn({**base, name: hi}))
        rows.append({"input": name, "label": (labels or {}).get(name, name), "base_value": base[name],
                     "low_value": lo, "high_value": hi, "output_base": out0, "output_low": o_lo, "output_high": o_hi,
                     "low_change": o_lo / out0 - 1.0, "high_change": o_hi / out0 - 1.0, "swing": abs(o_hi - o_lo)})
    rows.sort(key=lambda r: -r["swing"])
    return rows


#: Default one-at-a-time ranges of :func:`training_sensitivity` (relative unless stated; ASSUMPTIONS
#: about what a planner is unsure of). ``system_power_pct``: the system power per GPU +-15% (the
#: sourced system figures are maximum ratings, with reported ranges such as GB200 NVL72's
#: 120-132 kW).
SENSITIVITY_DEFAULTS: dict[str, Any] = {"tokens_pct": 0.25, "price_pct": 0.30, "pue": (1.1, 1.5),
                                        "utilization": (0.7, 1.0), "system_power_pct": 0.15,
                                        "cluster_factor": 2.0}


def sensitivity_gpus(gpus: int, options: Mapping[str, Any] | None = None) -> tuple[int, int]:
    """The cluster sizes :func:`training_sensitivity` varies ``gpus`` to: (floor(gpus / f), at
    least 1, and ceil(gpus x f)), f the ``cluster_factor`` of :data:`SENSITIVITY_DEFAULTS` or ``options``."""
    f = float({**SENSITIVITY_DEFAULTS, **(options or {})}["cluster_factor"])
    return max(1, int(math.floor(gpus / f))), int(math.ceil(gpus * f))


def training_sensitivity(tokens: float, tokens_per_s_per_gpu: float, gpus: int, gpu, economics: Economics,
                         *, low: float, high: float, output: str = "cost_usd",
                         tps_at_gpus: Callable[[int], float] | None = None,
                         goodput_at_gpus: Callable[[int], float] | None = None,
                         goodput_range: tuple[float, float] | None = None,
                         options: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Tornado rows for one output of :func:`train_estimate` (``cost_usd``, ``days``,
    ``energy_mwh``, ``gpu_hours``).

    Inputs varied: efficiency (tokens/s per GPU at the band's ``low`` and ``high``), token budget
    (+-``tokens_pct``), price per GPU-hour (+-``price_pct``), PUE, utilization (absolute ranges),
    system power per GPU (+-``system_power_pct``) and cluster size (/ and x ``cluster_factor``;
    tokens/s per GPU from ``tps_at_gpus`` and goodput from ``goodput_at_gpus`` when given, else
    held fixed, which moves only ``days``) and, with ``goodput_range`` (low, high), the goodput
    (the band of the scale model over the published failure rates). Defaults:
    :data:`SENSITIVITY_DEFAULTS`, overridden by ``options``.
    """
    o = {**SENSITIVITY_DEFAULTS, **(options or {})}
    g = hardware.check(gpu)
    w = economics.system_w(g)
    base = {"tokens_per_s_per_gpu": tokens_per_s_per_gpu, "tokens": tokens, "usd_per_gpu_hour": economics.usd_per_gpu_hour,
            "pue": economics.pue, "utilization": economics.utilization, "system_w": w, "gpus": gpus,
            "goodput": economics.goodput}

    def fn(x):
        tps, econ = x["tokens_per_s_per_gpu"], replace(economics, goodput=x["goodput"])
        if x["gpus"] != gpus and tps_at_gpus is not None:
            tps = tps_at_gpus(int(x["gpus"]))
        if x["gpus"] != gpus and goodput_at_gpus is not None:
            econ = replace(econ, goodput=goodput_at_gpus(int(x["gpus"])))
        econ = replace(econ, usd_per_gpu_hour=x["usd_per_gpu_hour"], pue=x["pue"], utilization=x["utilization"])
        return _one(x["tokens"], tps, x["gpus"], x["system_w"], econ, None)[output]

    ranges = {
        "tokens_per_s_per_gpu": (low, high),
        "tokens": (tokens * (1 - o["tokens_pct"]), tokens * (1 + o["tokens_pct"])),
        "usd_per_gpu_hour": (economics.usd_per_gpu_hour * (1 - o["price_pct"]), economics.usd_per_gpu_hour * (1 + o["price_pct"])),
        "pue": tuple(o["pue"]), "utilization": tuple(o["utilization"]),
        "system_w": (w * (1 - o["system_power_pct"]), w * (1 + o["system_power_pct"])),
        "gpus": sensitivity_gpus(gpus, o),
    }
    if goodput_range is not None and goodput_range[0] < goodput_range[1]:
        ranges["goodput"] = (float(goodput_range[0]), float(goodput_range[1]))
    labels = {"tokens_per_s_per_gpu": "efficiency (throughput band)", "tokens": "token budget",
              "usd_per_gpu_hour": "price per GPU-hour", "pue": "PUE", "utilization": "power utilization",
              "system_w": "system power per GPU", "gpus": "cluster size",
              "goodput": "goodput (published failure rates)"}
    rows = sensitivity(fn, base, ranges, labels)
    for r in rows:
        r["output"] = output
    return rows


__all__ = ["Economics", "SECONDS_PER_DAY", "SENSITIVITY_DEFAULTS", "cost_usd", "days_to_train", "energy_mwh",
           "gpu_hours", "gpus_for_days", "run_costs", "sensitivity", "train_estimate", "training_sensitivity",
           "whole_systems"]
