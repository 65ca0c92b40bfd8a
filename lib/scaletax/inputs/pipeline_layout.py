"""Megatron-Core's ``pipeline_model_parallel_layout``: parse, check against a model, count per stage.

A runs-table row may state, in its ``pp_split`` column, the exact layout string a Megatron-Core
run was given (``"Et*3|(tt|)*29m|L"``, as the Megatron-Bridge DeepSeek-V3 recipes write it). This
module reads it with Megatron-Core's own grammar (megatron-core 0.19.2,
``megatron/core/transformer/pipeline_parallel_layer_layout.py``):

- ``parse_str_to_list`` (lines 283-321): commas are removed (cosmetic); ``(X)*n`` is unrolled
  first, by one pass of the regular expression ``\\(([^)]+)\\)\\*(\\d+)`` (parentheses do not
  nest), then ``c*n`` for one character ``c``; ``|`` separates virtual pipeline stages; each
  remaining character is one layer: ``E`` embedding, ``t`` transformer (decoder) layer, ``m``
  multi-token-prediction (MTP) layer, ``L`` loss (with the output layer); nothing else.
- ``__init__`` (lines 24-83): the number of stages must be a multiple of ``pp``; ``vp`` is
  stages / pp; stage ``i = a * pp + b`` is virtual stage ``a`` of pipeline rank ``b`` (lines 47-54).
- ``validate_layer_layout`` (lines 85-151): the first layer is ``E`` and the last ``L``, each
  exactly once; as many ``t`` as the model has layers; every ``m`` after every ``t``; ``m`` only in
  a rank's last virtual stage, all of them in one stage, and not in the first rank's earlier stages.
- ``transformer_config.py`` lines 1970-1981: a stated ``virtual_pipeline_model_parallel_size``
  must equal the layout's ``vp`` (a blank one takes it).

Public API: :class:`PipelineLayout` (``pp``, ``vp``, ``counts``: layers of each kind per rank and
virtual stage, ``rank_layers()``), :func:`parse`, :func:`is_layout`, :class:`LayoutError` (one line);
vectorized over pp: :func:`end_stage_layers` (the first and last stage's layers, what memory
holds) and :func:`slowest_stage` (the rank with the most work, what sets the pipeline's pace).

The MTP layers are placed and checked but not modelled as work: the catalog's architectures
exclude the MTP module (DeepSeek-V3's 671B is counted without it, data/models.yaml), so an ``m``
adds no FLOPs or memory to its stage here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

#: Layer characters of the grammar, in ``counts``' order (Megatron-Core ``char2layer_type``).
KINDS: tuple[str, ...] = ("E", "t", "m", "L")
KIND_NAMES: dict[str, str] = {"E": "embedding", "t": "transformer layer", "m": "MTP layer", "L": "loss"}
#: Longest layout text read, and longest expansion (layers and separators) built: ``t*99999999``
#: is refused, not built.
MAX_TEXT = 4096
MAX_LAYERS = 100_000
#: Megatron-Core's two unrolling passes (parse_str_to_list, lines 297-298), in order.
_UNROLL = (re.compile(r"\(([^)]+)\)\*(\d+)"), re.compile(r"(.)\*(\d+)"))


class LayoutError(ValueError):
    """A layout string Megatron-Core would refuse; the message is one line."""


@dataclass(frozen=True)
class PipelineLayout:
    """A parsed layout: ``counts[r, v, k]`` layers of kind ``KINDS[k]`` in virtual stage ``v`` of
    pipeline rank ``r`` (int array of shape (pp, vp, 4)); ``text`` as given."""

    text: str
    pp: int
    vp: int
    counts: np.ndarray

    def rank_layers(self, kind: str = "t") -> np.ndarray:
        """Layers of ``kind`` on each pipeline rank (all its virtual stages), int array (pp,)."""
        return self.counts[:, :, KINDS.index(kind)].sum(axis=1)

    @property
    def stages(self) -> int:
        """Virtual stages in all, pp * vp."""
        return self.pp * self.vp


def is_layout(value: str) -> bool:
    """True when ``value`` is written as a layout (it has a stage separator or a layer character
    besides the split names): what :func:`parse` reads."""
    return "|" in value or any(c in value for c in "EL")


def expand(text: str) -> list[str]:
    """The stages of ``text``, each as its string of layer characters (Megatron-Core
    ``parse_str_to_list``, bounded: a text over :data:`MAX_TEXT` characters or an expansion over
    :data:`MAX_LAYERS` layers raises)."""
    if len(text) > MAX_TEXT:
        raise LayoutError(f"longer than {MAX_TEXT} characters ({len(text)})")
    s = text.replace(",", "")
    for rx in _UNROLL:
        size = len(s)

        def unroll(m: re.Match) -> str:
            nonlocal size
            n = int(m.group(2)) if len(m.group(2)) <= 7 else MAX_LAYERS + 1
            size += len(m.group(1)) * n - len(m.group(0))
            if size > MAX_LAYERS:
                raise LayoutError(f"expands to more than {MAX_LAYERS:,} characters")
            return m.group(1) * n

        s = rx.sub(unroll, s)
    stages = s.split("|")
    for i, st in enumerate(stages):
        bad = next((c for c in st if c not in KINDS), None)
        if bad is not None:
            raise LayoutError(f"invalid layer character {bad!r} in stage {i} ({st[:40]!r}); known: "
                              + ", ".join(f"{k} {KIND_NAMES[k]}" for k in KINDS))
    return stages


def parse(text: str, pp: int, *, layers: int | None = None, vp: int | None = None) -> PipelineLayout:
    """The layout ``text`` on ``pp`` pipeline ranks, checked as Megatron-Core checks it (module
    docstring): against the model's transformer ``layers`` and the stated ``vp`` when given.
    Raises :class:`LayoutError` with one line."""
    return _parse(str(text).strip(), int(pp), None if layers is None else int(layers), None if vp is None else int(vp))


@lru_cache(maxsize=256)
def _parse(text: str, pp: int, layers: int | None, vp: int | None) -> PipelineLayout:
    if pp < 1:
        raise LayoutError(f"pp must be positive (got {pp})")
    stages = expand(text)
    n = len(stages)
    if n % pp:
        raise LayoutError(f"{n} stages (the '|'-separated parts) are not a multiple of pp={pp}")
    nvp = n // pp
    if vp is not None and vp != nvp:
        raise LayoutError(f"{n} stages on pp={pp} make vp={nvp}, but the row's vp is {vp} (leave vp blank to take "
                          "the layout's)")
    counts = np.zeros((pp, nvp, len(KINDS)), dtype=np.int64)
    for i, st in enumerate(stages):  # stage i = a * pp + b: virtual stage a of rank b
        for k, c in enumerate(KINDS):
            counts[i % pp, i // pp, k] = st.count(c)
    flat = "".join(stages)
    if not flat or flat[0] != "E":
        raise LayoutError(f"the first layer must be E (embedding), got {flat[:1]!r}")
    if flat[-1] != "L":
        raise LayoutError(f"the last layer must be L (loss), got {flat[-1]!r}")
    for c in "EL":
        if flat.count(c) != 1:
            raise LayoutError(f"{c} ({KIND_NAMES[c]}) must appear exactly once (got {flat.count(c)})")
    n_t = flat.count("t")
    if layers is not None and n_t != layers:
        raise LayoutError(f"places {n_t} transformer layers (t); the model has {layers}")
    first_m = flat.find("m")
    if first_m >= 0:
        if "t" in flat[first_m:]:
            raise LayoutError("transformer layers (t) must come before every MTP layer (m)")
        m = counts[:, :, KINDS.index("m")]
        if np.any(m[:, :-1]):
            raise LayoutError("MTP layers (m) must be in the last virtual stage of their pipeline rank")
        if np.count_nonzero(m) > 1:
            raise LayoutError("all MTP layers (m) must be in one virtual stage")
    return PipelineLayout(text=text, pp=pp, vp=nvp, counts=counts)




def end_stage_layers(text: str, pp) -> tuple[np.ndarray, np.ndarray]:
    """(transformer layers of the first pipeline rank, of the last) of the layout ``text`` on ``pp``
    ranks (float arrays of ``pp``'s shape): what the first and last stage hold in memory."""
    pp = np.asarray(pp, dtype=np.float64)
    first, last = np.zeros(pp.shape), np.zeros(pp.shape)
    for p in np.unique(pp):
        t = parse(text, int(p)).rank_layers()
        first[pp == p], last[pp == p] = t[0], t[-1]
    return first, last


def slowest_stage(text: str, pp, head_layers) -> tuple[np.ndarray, np.ndarray]:
    """(transformer layers, output layers 0 or 1) of the pipeline rank with the most work under the
    layout ``text`` on ``pp`` ranks: rank r does t_r + ``head_layers`` x L_r layers' worth (the loss
    rank also runs the output layer; E and m add none, module docstring). Arrays of the broadcast
    shape of ``pp`` and ``head_layers``."""
    pp, h = np.broadcast_arrays(np.asarray(pp, dtype=np.float64), np.asarray(head_layers, dtype=np.float64))
    t_out, l_out = np.zeros(pp.shape), np.zeros(pp.shape)
    for p in np.unique(pp):
        lay = parse(text, int(p))
        sel = pp == p
        t, loss = lay.rank_layers().astype(np.float64), lay.rank_layers("L").astype(np.float64)
        work = t[None, :] + h[sel][:, None] * loss[None, :]
        r = np.argmax(work, axis=1)
        t_out[sel], l_out[sel] = t[r], loss[r]
    return t_out, l_out


__all__ = ["KINDS", "KIND_NAMES", "MAX_LAYERS", "MAX_TEXT", "LayoutError", "PipelineLayout", "end_stage_layers", "expand",
           "is_layout", "parse", "slowest_stage"]
