"""``scaletax predict``: a runs table in, the same rows with the model's columns out."""
from __future__ import annotations

from typing import Any

from scaletax import runs


def predict_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Memory columns for every row (the step-time model adds throughput columns)."""
    return runs.predict_memory(rows)
