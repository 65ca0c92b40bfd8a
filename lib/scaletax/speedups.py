"""Switches for the build's speed-only pieces, read in this one place.

``SCALETAX_WITHOUT=piece,piece`` turns pieces off; the book is the same either way, only slower
or faster. ``benchmarks/run.py``'s ablation builds with each piece off in turn and records what
it saves. An unknown name is an error (a typo would otherwise measure nothing).
"""
from __future__ import annotations

import os

ENV = "SCALETAX_WITHOUT"
#: Each speed-only piece of the build, and what turning it off does instead.
PIECES = {
    "chapter_parallel": "chapters execute one at a time (not --jobs at once)",
    "sphinx_once": "Sphinx unpickles a doctree at every lookup (no read-only doctree cache)",
    "one_thread": "numeric libraries use their default thread pools",
    "memo": "no result cache: every search and training is computed again",
}


def off() -> frozenset[str]:
    """The pieces turned off in this process's environment."""
    names = frozenset(p.strip() for p in os.environ.get(ENV, "").split(",") if p.strip())
    unknown = sorted(names - set(PIECES))
    if unknown:
        raise ValueError(f"{ENV}: unknown piece {unknown[0]!r}; pieces: {', '.join(PIECES)}")
    return names


def on(piece: str) -> bool:
    """Whether ``piece`` (a key of :data:`PIECES`) is in use."""
    if piece not in PIECES:
        raise KeyError(piece)
    return piece not in off()
