"""Goodput that depends on scale: the share of scheduled time a synchronous training job spends
training when interruptions stop it, for a given number of GPUs and model state.

The model (every input a published rate, a stated assumption or the planner's own):

- Interruptions. Unexpected ones (failures: the job stops and loses its work since the last
  checkpoint) arrive as a Poisson process at ``unexpected_per_gpu_hour`` per GPU, so a job on
  ``N`` GPUs has a mean time between failures M = 1 / (rate x N): each GPU and its share of
  host and network is a failure domain, and one failure stops the whole synchronous job (Llama 3:
  about 78% of unexpected interruptions hardware, arXiv 2407.21783 Sec. 3.3.4). Planned ones
  (maintenance) at ``planned_per_gpu_hour`` cost a restart and lose no work. Rates come from
  published reports (:mod:`scaletax.inputs.failures`).
- Checkpoint write time delta = model state / storage bandwidth: the job waits while the state
  is written (a synchronous checkpoint, as Kokolis et al. model it, arXiv 2410.21680; an
  asynchronous one hides most of it). The state is every parameter's bf16 weight, fp32 master
  weight and two fp32 Adam moments (:data:`CHECKPOINT_BYTES_PER_PARAM`, 14 bytes).
- Restart time R: from a failure to training again (detection, rescheduling, loading the
  checkpoint).
- The checkpoint interval tau (work between checkpoints) is Daly's higher-order optimum
  (Daly 2006, "A higher order estimate of the optimum checkpoint interval for restart dumps",
  Future Generation Computer Systems 22(3):303-312, eq. 37):
  tau = sqrt(2 delta M) [1 + (delta / 2M)^(1/2) / 3 + (delta / 2M) / 9] - delta for delta < 2M,
  else M; its leading term sqrt(2 delta M) is Young's first-order optimum (Young 1974, "A first
  order approximation to the optimum checkpoint interval", Communications of the ACM
  17(9):530-531).
- Goodput. Daly's expected wall time for T_s of work with exponential failures (failures during
  checkpoints and restarts included) is T_w = M e^(R/M) (e^((tau + delta)/M) - 1) T_s / tau, so
  without planned stops the goodput is tau / (M e^(R/M) (e^((tau + delta)/M) - 1)); planned stops
  take planned rate x N x R of the wall time on top: G = that x (1 - planned rate x N x R).

Everything is numpy and broadcasts over GPU counts and model states. Public API:
:class:`Reliability` (the inputs), :func:`checkpoint_bytes`, :func:`mtbf_s`,
:func:`young_interval`, :func:`daly_interval`, :func:`wall_per_work`, :func:`goodput`,
:func:`goodput_band` (the goodput at the lowest and highest published rate) and
:func:`breakdown` (the intermediate quantities, for tables).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from scaletax.inputs import recipes

SECONDS_PER_HOUR = 3600.0
#: Bytes per parameter a restart needs: the bf16 weights, the fp32 master weights and Adam's two
#: fp32 moments (Megatron-Core's distributed checkpoint of the model and optimizer state; the
#: memory model's persistent state, :mod:`scaletax.memory`, less the gradients).
CHECKPOINT_BYTES_PER_PARAM = recipes.HALF_BYTES + 3 * recipes.FP32_BYTES


@dataclass(frozen=True)
class Reliability:
    """Inputs of the goodput model. Rates per GPU-hour; ``restart_s`` in s; ``storage_bytes_per_s``
    the sustained write bandwidth of checkpoint storage, B/s; ``unexpected_low`` /
    ``unexpected_high`` the spread of published unexpected rates (the band; the rate itself when
    not given)."""

    unexpected_per_gpu_hour: float
    planned_per_gpu_hour: float
    restart_s: float
    storage_bytes_per_s: float
    unexpected_low: float | None = None
    unexpected_high: float | None = None

    def __post_init__(self) -> None:
        for name in ("unexpected_per_gpu_hour", "restart_s", "storage_bytes_per_s"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"{name}: must be a positive finite number (got {v!r})")
        if not (np.isfinite(self.planned_per_gpu_hour) and self.planned_per_gpu_hour >= 0):
            raise ValueError(f"planned_per_gpu_hour: must be >= 0 (got {self.planned_per_gpu_hour!r})")


def checkpoint_bytes(params) -> np.ndarray | float:
    """Bytes a restart needs for a model of ``params`` parameters (:data:`CHECKPOINT_BYTES_PER_PARAM`)."""
    return _out(np.asarray(params, dtype=float) * CHECKPOINT_BYTES_PER_PARAM)


def mtbf_s(gpus, per_gpu_hour) -> np.ndarray | float:
    """Mean time between interruptions of a job on ``gpus`` GPUs, s: 3,600 / (rate x GPUs)."""
    return _out(SECONDS_PER_HOUR / (np.asarray(per_gpu_hour, dtype=float) * np.asarray(gpus, dtype=float)))


def young_interval(checkpoint_s, mtbf) -> np.ndarray | float:
    """Young's (1974) first-order optimal work between checkpoints, s: sqrt(2 delta M)."""
    return _out(np.sqrt(2.0 * np.asarray(checkpoint_s, dtype=float) * np.asarray(mtbf, dtype=float)))


def daly_interval(checkpoint_s, mtbf) -> np.ndarray | float:
    """Daly's (2006, eq. 37) higher-order optimal work between checkpoints, s:
    sqrt(2 delta M) [1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9] - delta for delta < 2M, else M."""
    d, m = np.broadcast_arrays(np.asarray(checkpoint_s, dtype=float), np.asarray(mtbf, dtype=float))
    x = d / (2.0 * m)
    tau = np.sqrt(2.0 * d * m) * (1.0 + np.sqrt(x) / 3.0 + x / 9.0) - d
    return _out(np.where(d < 2.0 * m, tau, m))


def wall_per_work(interval_s, checkpoint_s, restart_s, mtbf) -> np.ndarray | float:
    """Daly's expected wall time per unit of work, T_w / T_s = M e^(R/M) (e^((tau + delta)/M) - 1) / tau
    (exponential failures, failures during checkpoints and restarts included)."""
    tau, d, r, m = (np.asarray(v, dtype=float) for v in (interval_s, checkpoint_s, restart_s, mtbf))
    return _out(m * np.exp(r / m) * np.expm1((tau + d) / m) / tau)


def breakdown(gpus, state_bytes, rel: Reliability) -> dict[str, np.ndarray | float]:
    """The goodput and what makes it, for ``gpus`` GPUs and ``state_bytes`` of model state
    (arrays broadcast): ``mtbf_h`` (unexpected interruptions), ``checkpoint_s``, ``interval_s``
    (Daly), ``checkpoint_share`` (delta / (tau + delta)), ``planned_share`` (planned rate x N x
    R), ``goodput``. Raises ValueError where the job would never finish."""
    n = np.asarray(gpus, dtype=float)
    m = np.asarray(mtbf_s(n, rel.unexpected_per_gpu_hour))
    d = np.asarray(state_bytes, dtype=float) / rel.storage_bytes_per_s
    tau = np.asarray(daly_interval(d, m))
    planned = rel.planned_per_gpu_hour * n * rel.restart_s / SECONDS_PER_HOUR
    g = (1.0 / np.asarray(wall_per_work(tau, d, rel.restart_s, m))) * (1.0 - planned)
    if np.any(~np.isfinite(g)) or np.any(g <= 0):
        raise ValueError("goodput: interruptions leave no time to train at this scale "
                         f"(planned stops take {np.max(planned):.0%} of the time)")
    return {"mtbf_h": _out(m / SECONDS_PER_HOUR), "checkpoint_s": _out(d), "interval_s": _out(tau),
            "checkpoint_share": _out(d / (tau + d)), "planned_share": _out(planned), "goodput": _out(g)}


def goodput(gpus, state_bytes, rel: Reliability) -> np.ndarray | float:
    """Share of scheduled time that trains on ``gpus`` GPUs with ``state_bytes`` of model state."""
    return breakdown(gpus, state_bytes, rel)["goodput"]


def goodput_band(gpus, state_bytes, rel: Reliability) -> tuple:
    """(goodput, low, high): at the scenario's rate and at the highest and lowest published
    unexpected rate (``rel.unexpected_high`` gives the low goodput)."""
    mid = goodput(gpus, state_bytes, rel)
    lo_rate = rel.unexpected_high or rel.unexpected_per_gpu_hour
    hi_rate = rel.unexpected_low or rel.unexpected_per_gpu_hour
    low = goodput(gpus, state_bytes, replace(rel, unexpected_per_gpu_hour=max(lo_rate, rel.unexpected_per_gpu_hour)))
    high = goodput(gpus, state_bytes, replace(rel, unexpected_per_gpu_hour=min(hi_rate, rel.unexpected_per_gpu_hour)))
    return mid, low, high


def _out(a):
    a = np.asarray(a)
    return float(a) if a.ndim == 0 else a


__all__ = ["CHECKPOINT_BYTES_PER_PARAM", "Reliability", "breakdown", "checkpoint_bytes", "daly_interval",
           "goodput", "goodput_band", "mtbf_s", "wall_per_work", "young_interval"]
