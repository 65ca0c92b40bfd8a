"""Parallel layouts: one validated ``Layout`` and a struct-of-arrays ``LayoutArray``.

Public API (stable; `memory`, `comm`, `perf`, `search` build on it):

- ``Layout(tp, pp, dp, cp=1, ep=1, etp=None, vp=1, mbs=1, gbs=None, sequence_parallel=None,
  zero_stage=1, recompute="none", gpus=None)``: frozen pydantic model.
  ``layout.check(model)`` raises ValueError naming the field and the rule; ``gpus``,
  ``n_micro`` (micro-batches per step per data-parallel rank), ``edp`` (expert data-parallel
  size) are derived.
- ``LayoutArray``: numpy int64 arrays ``tp, pp, cp, ep, etp, dp, vp, mbs, gbs, sp, zero_stage,
  recompute`` (recompute coded by ``RECOMPUTE_CODE``: none 0, selective 1, full 2);
  ``from_layouts(list)``, ``from_arrays(**arrays)`` (every valid combination of choices is
  :func:`scaletax.model.search.candidates`: the one enumeration), ``len()``, indexing, ``layout(i)``, ``valid_mask(model, gpus=None)``,
  ``reasons(model, gpus=None)`` and derived arrays ``gpus``, ``n_micro``, ``edp``.
- ``LayoutArray.concat(parts)``, ``la.take(idx)``: join arrays in order / the entries at an
  index array or mask (what every struct of arrays in the library offers).
- ``LayoutGrid(base, zero_stage, recompute)``: base layouts x ZeRO stages x recompute codes as
  broadcastable arrays (elementwise terms computed once per base row), ``expand()`` -> LayoutArray.
- ``label(layout, model=None, schedule=True, recompute=True)``: the one text form of a layout,
  ``TP8 PP16 DP128 VP8 MBS2 GBS8192 ZeRO-2, selective recompute``.
- ``RANK_ORDER``, ``EXPERT_RANK_ORDER``: placement of groups on consecutive ranks, innermost
  first. ``group_strides(layout_or_array)`` -> ``{group: (size, stride)}`` for groups
  ``tp, cp, dp, dp_cp, pp, etp, ep, edp``; ``members_per_domain(size, stride, domain)`` ->
  how many members of such a group share one NVLink domain of ``domain`` GPUs.

Conventions (Megatron-LM / Megatron-Core):
- ``gpus = tp * pp * cp * dp``. ``dp`` is the pure data-parallel size (context-parallel
  ranks are not counted in it); gradients are reduced and the distributed optimizer shards
  over the ``dp * cp`` group, as Megatron does.
- MoE parallel folding (Megatron-Core "MoE Parallel Folding"; parallel_state.py): the
  expert layers re-partition the same ``tp * cp * dp`` ranks of a pipeline stage as
  ``etp * ep * edp``, so ``ep * etp`` must divide ``tp * cp * dp`` (with ``etp = tp`` this is
  "ep divides dp * cp"); ``edp = tp * cp * dp / (ep * etp)`` is the expert data-parallel size.
  ``etp`` defaults to ``tp`` (Megatron-Core's default for expert_tensor_parallel_size).
- ``gbs`` defaults to ``mbs * dp * pp`` (pp micro-batches, enough to fill a 1F1B pipeline).
- ``sequence_parallel`` defaults to on when ``tp > 1`` (Korthikanti et al. 2022).
- ``zero_stage``: 0 replicated, 1 optimizer state sharded (= Megatron distributed optimizer,
  the default), 2 + gradients, 3 + parameters (FSDP / Megatron-FSDP).
- Uneven pipeline split: ``layers`` need not divide by ``pp * vp``; the heaviest stage holds
  ``ceil(layers / pp)`` layers (Megatron's account-for-embedding/loss split and custom
  pipeline layouts put fewer layers on the first/last stage, so this is an upper bound).
  Allowed when ``pp <= layers`` and ``pp * vp <= layers + 2`` (embedding and loss may take a
  virtual stage each, Megatron ``account_for_{embedding,loss}_in_pipeline_split``).
- Megatron requires ``heads % tp == 0`` and ``kv_heads % tp == 0`` (num_query_groups), and for
  context parallelism ``seq_len % (2 * cp) == 0`` (load-balanced causal split).
"""
from __future__ import annotations

import functools
import math
from typing import Any, Iterable, Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from scaletax.inputs.models import Model

Recompute = Literal["none", "selective", "full"]
#: recompute name -> integer code used in ``LayoutArray.recompute``.
RECOMPUTE_CODE: dict[str, int] = {"none": 0, "selective": 1, "full": 2}
RECOMPUTE_NAME: tuple[str, ...] = ("none", "selective", "full")

#: Dense (attention) groups on consecutive ranks, innermost first (Megatron-Core
#: RankGenerator order "tp-cp-ep-dp-pp", where ep is folded into the dp*cp ranks).
RANK_ORDER: tuple[str, ...] = ("tp", "cp", "dp", "pp")
#: Expert-layer groups on the same ranks, innermost first: Megatron-Core builds a second
#: RankGenerator for expert layers with tp = etp, cp = 1 and the same order (parallel_state.py),
#: so the ep group has stride etp (with etp = tp and cp = 1: stride tp, as "tp-cp-ep-dp-pp").
EXPERT_RANK_ORDER: tuple[str, ...] = ("etp", "ep", "edp", "pp")

FIELDS: tuple[str, ...] = ("tp", "pp", "cp", "ep", "etp", "dp", "vp", "mbs", "gbs", "sp",
                           "zero_stage", "recompute")


class Layout(BaseModel):
    """One training layout (sizes are GPU counts; ``mbs``/``gbs`` are sequences)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tp: PositiveInt = 1
    pp: PositiveInt = 1
    dp: PositiveInt | None = None
    cp: PositiveInt = 1
    ep: PositiveInt = 1
    etp: PositiveInt | None = None
    vp: PositiveInt = 1
    mbs: PositiveInt = 1
    gbs: PositiveInt | None = None
    sequence_parallel: bool | None = None
    zero_stage: int = Field(default=1, ge=0, le=3)
    recompute: Recompute = "none"
    gpus: PositiveInt | None = None

    @model_validator(mode="before")
    @classmethod
    def _fill(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        d = {k: v for k, v in data.items() if v is not None}
        try:
            tp, pp, cp = (int(d.get(k, 1)) for k in ("tp", "pp", "cp"))
            dp = int(d["dp"]) if "dp" in d else None
            mbs = int(d.get("mbs", 1))
        except (TypeError, ValueError):
            return d  # field validation reports the bad value
        if min(tp, pp, cp, mbs, dp or 1) <= 0:
            return d
        if "dp" not in d:
            if "gpus" not in d:
                raise ValueError("dp: give dp or gpus")
            g = int(d["gpus"])
            if g % (tp * pp * cp):
                raise ValueError(f"gpus: tp*pp*cp={tp * pp * cp} must divide gpus={g}")
            dp = d["dp"] = g // (tp * pp * cp)
        d.setdefault("gpus", tp * pp * cp * dp)
        d.setdefault("etp", tp)
        d["sequence_parallel"] = bool(d.get("sequence_parallel", True)) and tp > 1  # SP needs TP
        d.setdefault("gbs", mbs * dp * pp)
        return d

    @model_validator(mode="after")
    def _rules(self) -> "Layout":
        g = self.tp * self.pp * self.cp * self.dp
        if self.gpus != g:
            raise ValueError(f"gpus: tp*pp*cp*dp = {g} must equal gpus = {self.gpus}")
        if self.gbs % (self.mbs * self.dp):
            raise ValueError(f"gbs: must be a multiple of mbs*dp = {self.mbs * self.dp} (got {self.gbs})")
        if (self.tp * self.cp * self.dp) % (self.ep * self.etp):
            raise ValueError(f"ep: ep*etp = {self.ep * self.etp} must divide tp*cp*dp = "
                             f"{self.tp * self.cp * self.dp} (MoE parallel folding)")
        return self

    @property
    def n_micro(self) -> int:
        """Micro-batches per step on each data-parallel rank (gbs / (mbs * dp))."""
        return self.gbs // (self.mbs * self.dp)

    @property
    def edp(self) -> int:
        """Expert data-parallel size, tp*cp*dp / (ep*etp)."""
        return self.tp * self.cp * self.dp // (self.ep * self.etp)

    def check(self, model: Model) -> "Layout":
        """Raise ValueError naming the field and rule if this layout cannot run ``model``."""
        msgs = _reasons(model, *(np.asarray([v]) for v in _values(self)))
        for field, (bad, rule) in msgs:
            if np.any(bad):
                raise ValueError(f"{field}: {rule}")
        return self

    def replace(self, **changes: Any) -> "Layout":
        """A copy with some fields changed, re-validated. Changing tp resets etp and
        sequence_parallel to their defaults unless given; changing tp/pp/cp/dp resets gpus."""
        d = self.model_dump()
        derived = {"gpus": ("tp", "pp", "cp", "dp"), "etp": ("tp",), "sequence_parallel": ("tp",)}
        for key, deps in derived.items():
            if key not in changes and any(k in changes for k in deps):
                d.pop(key)
        d.update(changes)
        return Layout(**d)


def _values(lay: Layout) -> tuple[int, ...]:
    return (lay.tp, lay.pp, lay.cp, lay.ep, lay.etp, lay.dp, lay.vp, lay.mbs, lay.gbs,
            int(bool(lay.sequence_parallel)), lay.zero_stage, RECOMPUTE_CODE[lay.recompute])


def _reasons(model: Model, tp, pp, cp, ep, etp, dp, vp, mbs, gbs, sp, zero, rc):
    """(field, (bad_mask, rule)) for every model-dependent and structural rule."""
    L = model.layers
    rules = [
        ("tp", (model.heads % tp != 0, f"heads={model.heads} must be divisible by tp")),
        ("tp", (model.kv_heads % tp != 0, f"kv_heads={model.kv_heads} must be divisible by tp (Megatron num_query_groups)")),
        ("pp", (pp > L, f"pp must be <= layers={L}")),
        ("vp", (pp * vp > L + 2, f"pp*vp must be <= layers+2={L + 2} (each virtual stage needs a layer, embedding or loss)")),
        ("cp", ((cp > 1) & (model.seq_len % (2 * cp) != 0), f"seq_len={model.seq_len} must be divisible by 2*cp")),
        ("gbs", (gbs % (mbs * dp) != 0, "gbs must be a multiple of mbs*dp")),
        ("ep", ((tp * cp * dp) % (ep * etp) != 0, "ep*etp must divide tp*cp*dp (MoE parallel folding)")),
        ("zero_stage", ((zero < 0) | (zero > 3), "zero_stage must be 0, 1, 2 or 3")),
        ("recompute", ((rc < 0) | (rc > 2), "recompute code must be 0 (none), 1 (selective) or 2 (full)")),
    ]
    if model.is_moe:
        rules.append(("ep", (model.moe_experts % ep != 0, f"moe_experts={model.moe_experts} must be divisible by ep")))
        rules.append(("etp", (model.moe_ffn_hidden % etp != 0, f"moe_ffn_hidden={model.moe_ffn_hidden} must be divisible by etp")))
    else:
        rules.append(("ep", (ep != 1, "ep must be 1 for a dense model")))
    return rules


class LayoutArray:
    """Struct of arrays: one int64 numpy array per field, all the same length.

    Fields: ``tp, pp, cp, ep, etp, dp, vp, mbs, gbs, sp`` (0/1), ``zero_stage``,
    ``recompute`` (0 none, 1 selective, 2 full). Build with ``from_layouts`` or
    ``from_arrays`` (defaults as in ``Layout``).
    """

    __slots__ = FIELDS

    def __init__(self, **arrays: np.ndarray):
        n = None
        for f in FIELDS:
            a = np.asarray(arrays[f], dtype=np.int64)
            if a.ndim != 1:
                raise ValueError(f"{f}: expected a 1-D array")
            if n is None:
                n = a.shape[0]
            elif a.shape[0] != n:
                raise ValueError(f"{f}: length {a.shape[0]} differs from {n}")
            object.__setattr__(self, f, a)
        extra = set(arrays) - set(FIELDS)
        if extra:
            raise ValueError(f"unknown field(s): {', '.join(sorted(extra))}")

    @classmethod
    def from_layouts(cls, layouts: Iterable[Layout]) -> "LayoutArray":
        vals = np.array([_values(x) for x in layouts], dtype=np.int64).reshape(-1, len(FIELDS))
        return cls(**{f: vals[:, i] for i, f in enumerate(FIELDS)})

    @classmethod
    def from_arrays(cls, *, tp, pp, dp, cp=1, ep=1, etp=None, vp=1, mbs=1, gbs=None, sp=None,
                    zero_stage=1, recompute=0) -> "LayoutArray":
        """Broadcast scalars/arrays to a LayoutArray; ``recompute`` may be names or codes."""
        if isinstance(recompute, str) or (np.ndim(recompute) and np.asarray(recompute).dtype.kind in "UO"):
            recompute = np.vectorize(RECOMPUTE_CODE.__getitem__, otypes=[np.int64])(recompute)
        tp = np.asarray(tp)
        pp = np.asarray(pp)
        dp = np.asarray(dp)
        mbs = np.asarray(mbs)
        etp = tp if etp is None else etp
        sp = (tp > 1) if sp is None else np.asarray(sp) & (tp > 1)
        gbs = mbs * dp * pp if gbs is None else gbs
        arrs = np.broadcast_arrays(tp, pp, cp, ep, etp, dp, vp, mbs, gbs, sp, zero_stage, recompute)
        return cls(**{f: np.array(a, dtype=np.int64) for f, a in zip(FIELDS, arrs)})

    # --- container protocol ----------------------------------------------------------
    def __len__(self) -> int:
        return int(self.tp.shape[0])

    def __getitem__(self, idx) -> "LayoutArray":
        if isinstance(idx, (int, np.integer)):
            idx = [int(idx)]
        return LayoutArray(**{f: getattr(self, f)[idx] for f in FIELDS})

    def take(self, idx) -> "LayoutArray":
        """The entries at ``idx`` (index array, boolean mask or one index) as a LayoutArray."""
        return self[idx]

    @classmethod
    def concat(cls, parts: Sequence["LayoutArray"]) -> "LayoutArray":
        """One LayoutArray holding every entry of ``parts`` in order."""
        parts = list(parts)
        if not parts:
            return cls.from_layouts([])
        return cls(**{f: np.concatenate([getattr(p, f) for p in parts]) for f in FIELDS})

    def __setattr__(self, name, value):
        raise AttributeError("LayoutArray is read-only; build a new one")

    def __reduce__(self):
        # pickle (scaletax.memo's disk cache) rebuilds through __init__: the default slot
        # restore would go through the read-only __setattr__
        return (_layout_array, ({f: getattr(self, f) for f in FIELDS},))

    def __repr__(self) -> str:
        return f"LayoutArray(n={len(self)})"

    def layout(self, i: int) -> Layout:
        """Row ``i`` as a validated scalar ``Layout``."""
        d = {f: int(getattr(self, f)[i]) for f in FIELDS}
        return Layout(tp=d["tp"], pp=d["pp"], cp=d["cp"], ep=d["ep"], etp=d["etp"], dp=d["dp"],
                      vp=d["vp"], mbs=d["mbs"], gbs=d["gbs"], sequence_parallel=bool(d["sp"]),
                      zero_stage=d["zero_stage"], recompute=RECOMPUTE_NAME[d["recompute"]])

    def to_layouts(self) -> list[Layout]:
        return [self.layout(i) for i in range(len(self))]

    def replace(self, **arrays) -> "LayoutArray":
        """A copy with some field arrays replaced (broadcast to this length)."""
        d = {f: getattr(self, f) for f in FIELDS}
        for k, v in arrays.items():
            if k not in FIELDS:
                raise ValueError(f"unknown field {k!r}")
            if k == "recompute" and isinstance(v, str):
                v = RECOMPUTE_CODE[v]
            d[k] = np.broadcast_to(np.asarray(v, dtype=np.int64), (len(self),)).copy()
        return LayoutArray(**d)

    # --- derived -----------------------------------------------------------------------
    @property
    def gpus(self) -> np.ndarray:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def n_micro(self) -> np.ndarray:
        """Micro-batches per step on each data-parallel rank (0 where gbs is not a multiple)."""
        return np.where(self.gbs % (self.mbs * self.dp) == 0, self.gbs // (self.mbs * self.dp), 0)

    @property
    def edp(self) -> np.ndarray:
        """Expert data-parallel size tp*cp*dp/(ep*etp) (floor division where invalid)."""
        return (self.tp * self.cp * self.dp) // (self.ep * self.etp)

    _SIZES = ("tp", "pp", "cp", "ep", "etp", "dp", "vp", "mbs", "gbs")

    def _positive(self) -> tuple[np.ndarray, "LayoutArray"]:
        """(mask of rows with all sizes positive, a copy with non-positive sizes set to 1)."""
        pos = np.ones(len(self), dtype=bool)
        for f in self._SIZES:
            pos &= getattr(self, f) > 0
        if pos.all():
            return pos, self
        return pos, self.replace(**{f: np.where(pos, getattr(self, f), 1) for f in self._SIZES})

    def reasons(self, model: Model, gpus: int | np.ndarray | None = None) -> dict[str, np.ndarray]:
        """``{"field: rule": bad_mask}`` for every rule (what ``valid_mask`` combines)."""
        pos, safe = self._positive()
        out: dict[str, np.ndarray] = {"all sizes must be positive": ~pos}
        for field, (bad, rule) in _reasons(model, *(getattr(safe, f) for f in FIELDS)):
            key = f"{field}: {rule}"
            out[key] = out.get(key, np.zeros(len(self), dtype=bool)) | (np.broadcast_to(bad, (len(self),)) & pos)
        if gpus is not None:
            out["gpus: tp*pp*cp*dp must equal gpus"] = self.gpus != np.asarray(gpus)
        return out

    def valid_mask(self, model: Model, gpus: int | np.ndarray | None = None) -> np.ndarray:
        """Boolean array: layouts that satisfy every rule for ``model`` (and ``gpus`` if given)."""
        pos, safe = self._positive()
        ok = pos.copy()
        for _, (bad, _) in _reasons(model, *(getattr(safe, f) for f in FIELDS)):
            ok &= ~np.asarray(bad)
        if gpus is not None:
            ok &= self.gpus == np.asarray(gpus)
        return ok


#: Fields of a :class:`LayoutGrid` row (all but ZeRO stage and recompute).
BASE_FIELDS: tuple[str, ...] = FIELDS[:-2]


class LayoutGrid:
    """Every combination of base layouts x ZeRO stages x recompute codes, as broadcastable arrays.

    ``base``: a ``LayoutArray`` whose ZeRO stage and recompute are ignored; ``zero_stage``,
    ``recompute``: the choices (int codes). The base fields (``BASE_FIELDS``) have shape
    (n, 1, 1), ``zero_stage`` (1, z, 1) and ``recompute`` (1, 1, r), so elementwise model code
    written for a ``LayoutArray`` (``memory``'s terms) computes a term that depends on neither
    once per base row and broadcasts it, with the same value in every bit. Row order of
    :meth:`expand` (and of a C-order ravel): base slowest, then ZeRO stage, recompute fastest.
    """

    __slots__ = BASE_FIELDS + ("zero_stage", "recompute", "base")

    def __init__(self, base: LayoutArray, zero_stage, recompute):
        set_ = object.__setattr__
        set_(self, "base", base)
        for f in BASE_FIELDS:
            set_(self, f, getattr(base, f).reshape(-1, 1, 1))
        set_(self, "zero_stage", np.asarray(zero_stage, dtype=np.int64).reshape(1, -1, 1))
        set_(self, "recompute", np.asarray(recompute, dtype=np.int64).reshape(1, 1, -1))

    def __setattr__(self, name, value):
        raise AttributeError("LayoutGrid is read-only; build a new one")

    @property
    def shape(self) -> tuple[int, int, int]:
        return (len(self.base), self.zero_stage.shape[1], self.recompute.shape[2])

    def __len__(self) -> int:
        nb, nz, nr = self.shape
        return nb * nz * nr

    @property
    def n_micro(self) -> np.ndarray:
        """``LayoutArray.n_micro`` of the base rows, shape (n, 1, 1)."""
        return self.base.n_micro.reshape(-1, 1, 1)

    def take(self, idx) -> LayoutArray:
        """The rows at flat positions ``idx`` (an index array into :meth:`expand`) as a ``LayoutArray``."""
        nb, nz, nr = self.shape
        idx = np.asarray(idx, dtype=np.int64)
        b = idx // (nz * nr)
        return LayoutArray(**{f: getattr(self.base, f)[b] for f in BASE_FIELDS},
                           zero_stage=self.zero_stage.ravel()[(idx // nr) % nz], recompute=self.recompute.ravel()[idx % nr])

    def expand(self) -> LayoutArray:
        """The grid as a ``LayoutArray``, one row per combination (order in the class doc)."""
        nb, nz, nr = self.shape
        arrays = {f: np.repeat(getattr(self.base, f), nz * nr) for f in BASE_FIELDS}
        return LayoutArray(**arrays, zero_stage=np.tile(np.repeat(self.zero_stage.ravel(), nr), nb),
                           recompute=np.tile(self.recompute.ravel(), nb * nz))


def _layout_array(arrays: dict) -> LayoutArray:
    """Unpickle a :class:`LayoutArray`."""
    return LayoutArray(**arrays)


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order."""
    return list(_divisors(int(n)))


@functools.lru_cache(maxsize=1024)
def _divisors(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0] if n >= 1 else []
    return tuple(small + [n // d for d in reversed(small) if d * d != n])


def label(lay: Layout, model: Model | None = None, *, schedule: bool = True, recompute: bool = True) -> str:
    """The text form of a layout used everywhere in the book.

    ``TP8 PP16 CP2 EP8 ETP1 DP128 VP8 MBS2 GBS8192 ZeRO-2, selective recompute``: the parallel
    sizes (CP when > 1; EP for a MoE ``model`` or when > 1; ETP when it differs from TP; VP when
    > 1), then with ``schedule`` the micro-batch, global batch (sequences) and ZeRO stage, then
    with ``recompute`` the recompute mode.
    """
    parts = [f"TP{lay.tp}", f"PP{lay.pp}"]
    if lay.cp > 1:
        parts.append(f"CP{lay.cp}")
    if lay.ep > 1 or (model is not None and model.is_moe):
        parts.append(f"EP{lay.ep}")
        if lay.etp != lay.tp:
            parts.append(f"ETP{lay.etp}")
    parts.append(f"DP{lay.dp}")
    if lay.vp > 1:
        parts.append(f"VP{lay.vp}")
    if schedule:
        parts += [f"MBS{lay.mbs}", f"GBS{lay.gbs}", f"ZeRO-{lay.zero_stage}"]
    text = " ".join(parts)
    if recompute:
        text += ", no recompute" if lay.recompute == "none" else f", {lay.recompute} recompute"
    return text


def group_strides(layout: Layout | LayoutArray) -> dict[str, tuple[Any, Any]]:
    """``{group: (size, stride)}``: a group's members are ``stride`` ranks apart.

    Dense groups follow ``RANK_ORDER`` (tp innermost, then cp, dp, pp); ``dp_cp`` is the
    gradient-reduction / distributed-optimizer group (cp and dp together, stride tp).
    Expert groups follow ``EXPERT_RANK_ORDER`` on the same ranks (etp, ep, edp, pp).
    Works on a ``Layout`` (ints) or a ``LayoutArray`` (arrays).
    """
    tp, pp, cp, dp, ep, etp = (layout.tp, layout.pp, layout.cp, layout.dp, layout.ep, layout.etp)
    edp = (tp * cp * dp) // (ep * etp)
    return {
        "tp": (tp, tp // tp),
        "cp": (cp, tp),
        "dp": (dp, tp * cp),
        "dp_cp": (dp * cp, tp),
        "pp": (pp, tp * cp * dp),
        "etp": (etp, etp // etp),
        "ep": (ep, etp),
        "edp": (edp, etp * ep),
    }


def members_per_domain(size, stride, domain):
    """Members of a (size, stride) group that share one NVLink domain of ``domain`` GPUs.

    Ranks are packed into domains in order (rank r is in domain r // domain). With
    ``stride >= domain`` every member is in a different domain (1); otherwise up to
    ``min(size, domain // stride)`` members share one (exactly that when ``domain`` is a
    multiple of ``stride * size`` or of ``stride``-aligned blocks; otherwise the split is uneven). The group fits in one domain when
    this equals ``size``. Vectorized over numpy arrays.
    """
    size, stride, domain = np.asarray(size), np.asarray(stride), np.asarray(domain)
    return np.where(stride >= domain, 1, np.minimum(size, domain // np.maximum(stride, 1)))
