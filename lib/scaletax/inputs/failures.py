"""Published interruption rates of large training jobs and clusters (``data/failures.csv``).

Each row is one report: the scale of the job or cluster it describes (``scale_gpus``), the GPUs
and days its count covers, the unexpected interruptions (failures
that stop the job and lose the work since its last checkpoint) and, where reported, the planned
ones (maintenance: a restart, no lost work), with its source. The rates are per GPU-hour, the
unit the goodput model takes (:mod:`scaletax.model.goodput`): interruptions / (GPUs x days x 24).

Public API: ``Report`` (one row, with ``unexpected_per_gpu_hour`` and ``planned_per_gpu_hour``),
``reports()`` (all rows, in file order), ``get(id)``, ``ids()``, ``rate_range()`` (the lowest and
highest unexpected rate: the spread of the published evidence).
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache

from scaletax import DATA_DIR, unknown_id

FAILURES_CSV = DATA_DIR / "failures.csv"
HOURS_PER_DAY = 24.0


@dataclass(frozen=True)
class Report:
    """One published report: ``gpus`` over ``days`` saw ``unexpected`` interruptions (and
    ``planned`` ones, None when not reported)."""

    id: str
    label: str
    gpu: str
    #: GPUs of the job or cluster the report describes (its scale; ``gpus`` x ``days`` is its exposure)
    scale_gpus: int
    gpus: int
    days: float
    unexpected: float
    planned: float | None
    source: str
    notes: str

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.days * HOURS_PER_DAY

    @property
    def unexpected_per_gpu_hour(self) -> float:
        """Unexpected interruptions per GPU-hour."""
        return self.unexpected / self.gpu_hours

    @property
    def planned_per_gpu_hour(self) -> float:
        """Planned interruptions per GPU-hour (0 when the report gives none)."""
        return (self.planned or 0.0) / self.gpu_hours


def _number(row: dict, col: str, rownum: int, blank_ok: bool = False) -> float | None:
    text = (row.get(col) or "").strip()
    if not text and blank_ok:
        return None
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"{FAILURES_CSV.name}: row {rownum}, column {col!r}: expected a number (got {text!r})") from None
    if not v > 0:
        raise ValueError(f"{FAILURES_CSV.name}: row {rownum}, column {col!r}: must be positive (got {text!r})")
    return v


@lru_cache(maxsize=1)
def _load() -> dict[str, Report]:
    out: dict[str, Report] = {}
    rows = csv.DictReader(FAILURES_CSV.read_text(encoding="utf-8").splitlines())
    for rownum, row in enumerate(rows, start=2):
        if not (row.get("source") or "").strip():
            raise ValueError(f"{FAILURES_CSV.name}: row {rownum}: needs a source")
        rep = Report(id=row["id"], label=row["label"], gpu=row["gpu"],
                     scale_gpus=int(_number(row, "scale_gpus", rownum)), gpus=int(_number(row, "gpus", rownum)),
                     days=_number(row, "days", rownum), unexpected=_number(row, "unexpected", rownum),
                     planned=_number(row, "planned", rownum, blank_ok=True), source=row["source"].strip(),
                     notes=(row.get("notes") or "").strip())
        if rep.id in out:
            raise ValueError(f"{FAILURES_CSV.name}: row {rownum}: duplicate id {rep.id!r}")
        out[rep.id] = rep
    if not out:
        raise ValueError(f"{FAILURES_CSV.name}: no rows")
    return out


def reports() -> list[Report]:
    """Every report, in file order."""
    return list(_load().values())


def ids() -> list[str]:
    return list(_load())


def get(report_id: str) -> Report:
    """One report by id; a one-line error with the nearest id otherwise."""
    rows = _load()
    if report_id not in rows:
        raise KeyError(f"{unknown_id(report_id, list(rows), 'failure report')}; reports: {', '.join(rows)}")
    return rows[report_id]


def rate_range() -> tuple[float, float]:
    """(lowest, highest) unexpected interruptions per GPU-hour over the reports."""
    rates = [r.unexpected_per_gpu_hour for r in reports()]
    return min(rates), max(rates)


__all__ = ["FAILURES_CSV", "Report", "get", "ids", "rate_range", "reports"]
