"""Owning a cluster instead of renting it: the cost of one GPU-hour of an owned GPU.

An owned GPU costs, per year: its share of the system's price spread over the depreciation
life at the cost of capital (the capital recovery factor, the annuity that repays a loan of 1
over ``years`` at ``rate``: r (1 + r)^n / ((1 + r)^n - 1), 1 / n at r = 0), and its share of
the facility, priced per MW of IT power a year (a data-centre lease is priced per kW of critical
IT load) at the GPU's all-in system power (:func:`scaletax.model.power.system_w`). Those yearly costs
fall on the hours the GPU does paid work, a ``busy_share`` of the 8,760 hours of a year. Energy
is counted per GPU-hour of training, as for a rented GPU whose price excludes power
(:func:`scaletax.cost.energy_mwh`).

Public API: :func:`capital_recovery_factor`, :func:`owned_usd_per_gpu_hour` (the parts and their
sum; arrays broadcast).
"""
from __future__ import annotations

import numpy as np

HOURS_PER_YEAR = 8760.0


def capital_recovery_factor(rate, years):
    """Yearly payment per unit of capital over ``years`` at ``rate``: r (1 + r)^n / ((1 + r)^n - 1),
    1 / n at r = 0."""
    r, n = np.broadcast_arrays(np.asarray(rate, dtype=float), np.asarray(years, dtype=float))
    if np.any(r < 0) or np.any(~np.isfinite(r)) or np.any(n <= 0) or np.any(~np.isfinite(n)):
        raise ValueError(f"capital recovery: need rate >= 0 and years > 0 (got {rate!r}, {years!r})")
    growth = np.power(1.0 + r, n)
    safe = np.where(r > 0, r, 1.0)
    crf = np.where(r > 0, safe * growth / np.where(r > 0, growth - 1.0, 1.0), 1.0 / n)
    return float(crf) if crf.ndim == 0 else crf


def owned_usd_per_gpu_hour(capex_usd_per_gpu, years, rate, facility_usd_per_mw_year, system_w, busy_share,
                           energy_usd_per_gpu_hour=0.0) -> dict:
    """USD per GPU-hour of paid work of an owned GPU: ``capital`` (capex x capital recovery factor
    / busy hours), ``facility`` (facility USD per MW-year x system power / busy hours), ``energy``
    (as given: facility energy of a training hour x electricity price) and ``total``."""
    busy = np.asarray(busy_share, dtype=float)
    if np.any(busy <= 0) or np.any(busy > 1):
        raise ValueError(f"busy_share: must be in (0, 1] (got {busy_share!r})")
    for name, v in (("capex_usd_per_gpu", capex_usd_per_gpu), ("facility_usd_per_mw_year", facility_usd_per_mw_year),
                    ("system_w", system_w), ("energy_usd_per_gpu_hour", energy_usd_per_gpu_hour)):
        if np.any(np.asarray(v, dtype=float) < 0) or np.any(~np.isfinite(np.asarray(v, dtype=float))):
            raise ValueError(f"{name}: must be a finite number >= 0 (got {v!r})")
    hours = HOURS_PER_YEAR * busy
    capital = np.asarray(capex_usd_per_gpu, dtype=float) * capital_recovery_factor(rate, years) / hours
    facility = np.asarray(facility_usd_per_mw_year, dtype=float) * np.asarray(system_w, dtype=float) / 1e6 / hours
    energy = np.asarray(energy_usd_per_gpu_hour, dtype=float)
    out = {"capital": capital, "facility": facility, "energy": energy, "total": capital + facility + energy}
    return {k: (float(v) if np.ndim(v) == 0 else v) for k, v in out.items()}


__all__ = ["HOURS_PER_YEAR", "capital_recovery_factor", "owned_usd_per_gpu_hour"]
