"""Facility power: what a cluster draws, in whole systems, and the largest cluster a power
budget holds.

One per-GPU system power feeds both the megawatts here and the energy (MWh) of
:mod:`scaletax.cost`: :func:`system_w`, the GPU's all-in system power, W. It is the maximum power
of the system the GPU is bought in (``data/systems.csv``: DGX H100 10.2 kW for 8 GPUs, GB200
NVL72 132 kW for 72, each with its source) divided by its GPUs, i.e. TDP plus the system's
non-GPU power per GPU (:attr:`scaletax.hardware.GPU.non_gpu_w`). A scenario's
``economics.energy.system_overhead`` (all-in system power / TDP), when set, replaces it for every
GPU as the planner's figure.

- IT power of a cluster: the whole systems that hold its GPUs (a node or a rack is bought and
  powered whole) x the system's power; facility power: IT power x PUE (The Green Grid, "PUE: a
  comprehensive examination of the metric", 2012). Both are nameplate (maximum) figures, what a
  site is provisioned for; energy uses the average draw (:func:`scaletax.cost.energy_mwh`).
  The scale-out network and storage outside the systems are not counted.
- :func:`largest_cluster`: the most whole systems whose facility power fits a budget.

Public API: :func:`system_w`, :func:`cluster_power`, :func:`largest_cluster`.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from scaletax.inputs import hardware


class NoSystemPower(ValueError):
    """A GPU with no known system power and no scenario overhead to stand in for it."""


def system_w(gpu: hardware.GPU, overhead: float | None = None) -> float:
    """All-in system power per GPU, W: TDP x ``overhead`` when given (the scenario's
    ``economics.energy.system_overhead``), else the GPU's system power (``data/systems.csv``)."""
    g = hardware.check(gpu)
    if overhead is not None:
        if not (math.isfinite(overhead) and overhead >= 1):
            raise ValueError(f"system_overhead: must be >= 1 (got {overhead!r})")
        return g.tdp_w * float(overhead)
    if g.system_w is None:
        raise NoSystemPower(f"GPU {g.id!r} has no system power: give non_gpu_w (W per GPU beyond its TDP) "
                            "in its definition, derive it with base: <catalog id>, or set "
                            "economics.energy.system_overhead")
    return float(g.system_w)


def cluster_power(gpu: hardware.GPU, gpus, pue: float, overhead: float | None = None) -> dict[str, Any]:
    """Power of a cluster of ``gpus`` GPUs (an int or an array): ``systems`` (whole systems
    holding them), ``gpus_bought``, ``per_system``, ``system_kw`` (one system), ``w_per_gpu``,
    ``it_mw`` (systems x system power) and ``facility_mw`` (x PUE)."""
    if not (math.isfinite(pue) and pue >= 1):
        raise ValueError(f"pue: must be >= 1 (got {pue!r})")
    g = hardware.check(gpu)
    w = system_w(g, overhead)
    per = g.gpus_per_system
    n = np.asarray(gpus, dtype=float)
    if np.any(~np.isfinite(n)) or np.any(n <= 0):
        raise ValueError(f"gpus: must be positive (got {gpus!r})")
    systems = np.ceil(n / per * (1 - 1e-12))
    it = systems * per * w / 1e6
    out = {"systems": systems.astype(np.int64), "gpus_bought": (systems * per).astype(np.int64), "per_system": per,
           "system": g.system or f"{per}-GPU system", "system_kw": per * w / 1e3, "w_per_gpu": w,
           "it_mw": it, "facility_mw": it * pue}
    return _scalars(out) if np.ndim(gpus) == 0 else out


def largest_cluster(gpu: hardware.GPU, facility_mw, pue: float, overhead: float | None = None) -> dict[str, Any]:
    """The most whole systems of ``gpu`` whose facility power fits ``facility_mw`` (an int or an
    array): :func:`cluster_power` of that cluster (``gpus`` its GPUs; 0 systems when not one fits)."""
    g = hardware.check(gpu)
    budget = np.asarray(facility_mw, dtype=float)
    if np.any(~np.isfinite(budget)) or np.any(budget <= 0):
        raise ValueError(f"facility_mw: must be positive (got {facility_mw!r})")
    per_system_mw = g.gpus_per_system * system_w(g, overhead) / 1e6 * pue
    systems = np.floor(budget / per_system_mw * (1 + 1e-12))
    gpus = systems * g.gpus_per_system
    out = cluster_power(g, np.maximum(gpus, 1), pue, overhead)
    out.update(gpus=gpus.astype(np.int64), systems=systems.astype(np.int64), gpus_bought=gpus.astype(np.int64),
               it_mw=systems * per_system_mw / pue, facility_mw=systems * per_system_mw)
    return _scalars(out) if np.ndim(facility_mw) == 0 else out


def _scalars(row: dict[str, Any]) -> dict[str, Any]:
    """Plain ints (counts) and floats for a single cluster."""
    ints = ("gpus", "systems", "gpus_bought", "per_system")
    return {k: (int(v) if k in ints else float(v)) if isinstance(v, (np.ndarray, np.generic)) else v
            for k, v in row.items()}


__all__ = ["NoSystemPower", "cluster_power", "largest_cluster", "system_w"]
