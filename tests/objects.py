"""Tests name GPUs and precisions by id; the model takes objects (resolved once where ids come
in). These two turn a test's id into the object, and pass an object through."""
from __future__ import annotations

from scaletax.inputs import hardware, recipes


def as_gpu(g) -> hardware.GPU:
    """The catalog GPU of id ``g`` (or ``g`` itself when it is a GPU already)."""
    return hardware.get(g) if isinstance(g, str) else g


def as_recipe(p) -> recipes.Recipe:
    """The training recipe of name ``p`` (or ``p`` itself when it is a recipe already)."""
    return recipes.training(p) if isinstance(p, str) else p
