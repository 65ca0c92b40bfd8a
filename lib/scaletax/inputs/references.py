"""Published reference values from ``data/references.yaml``: the memory figures the memory
chapter reproduces (ZeRO Fig. 1, Korthikanti et al. 2022), the low-precision training results
shown beside the toy experiment, and vendor claims the decision chapter checks.

Every entry carries its source (a ``book/references.bib`` key or a document); none is an
output of the model. ``section(name)`` returns fresh copies (safe to mutate).
"""
from __future__ import annotations

import copy
from functools import lru_cache
from typing import Any

import yaml

from scaletax import DATA_DIR

REFERENCES_YAML = DATA_DIR / "references.yaml"
SECTIONS = ("memory", "low_precision_training", "claims")


@lru_cache(maxsize=1)
def _load() -> dict[str, Any]:
    data = yaml.safe_load(REFERENCES_YAML.read_text(encoding="utf-8"))
    missing = [s for s in SECTIONS if s not in (data or {})]
    if missing:
        raise ValueError(f"{REFERENCES_YAML.name}: missing section(s) {', '.join(missing)}")
    return data


def section(name: str) -> Any:
    """A copy of one section of ``data/references.yaml`` (see :data:`SECTIONS`)."""
    if name not in SECTIONS:
        raise KeyError(f"no reference section {name!r}; sections: {', '.join(SECTIONS)}")
    return copy.deepcopy(_load()[name])


def claim(key: str) -> dict[str, Any]:
    """One vendor claim (``claims.<key>``): what, the GPU pair, value, cite, verified."""
    claims = _load()["claims"]
    if key not in claims:
        raise KeyError(f"no claim {key!r} in {REFERENCES_YAML.name}; claims: {', '.join(claims)}")
    return dict(claims[key])


__all__ = ["REFERENCES_YAML", "SECTIONS", "claim", "section"]
