"""Runs-table rows as model inputs: the one place a row becomes a layout, a recompute, memory options
and step-time inputs, for calibration, validation and ``scaletax predict`` alike.

- ``plan_row(row, layout=None) -> RowPlan``: model, layout, resolved recompute (unknown: the least
  that fits, ``perf.least_recompute``), memory options and the defaults applied.
- ``plan_rows(rows) -> TablePlan``: :func:`plan_row` of a whole table, vectorized (rows grouped by
  architecture, GPU, precision, memory options, dispatcher, schedule and stack; the models run once
  per group); a test holds it to :func:`plan_row` row by row.
- ``predict_memory(rows, **memory_options) -> list[dict]``: new rows with :data:`MEMORY_COLUMNS`.
- ``step_inputs(plans) -> perf.StepInputs``: the plans' step-time inputs, concatenated.

The table's schema, its parsing and the column defaults are :mod:`scaletax.inputs.runs`.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from scaletax.inputs import hardware, models, recipes
from scaletax.inputs.layout import FIELDS, RECOMPUTE_CODE, RECOMPUTE_NAME, Layout, LayoutArray
from scaletax.inputs.runs import (HELDOUT_CSV, LAYERS_PER_VIRTUAL_STAGE, RUNS_CSV, VALIDATION_CSV, RunsTableError,
                                  block_layers, cached_model, is_blank, read_runs,
                                  layout_table, layout_values, layout_vp, measured_tokens_per_s, memory_options,
                                  row_attn_kernel, row_dispatch, row_expert_gemm, row_gpu, row_layout, row_model, row_pp_split, row_recipe,
                                  row_schedule, row_stack, row_tp_overlap, stated_recompute)
from scaletax.model import memory, perf, search

MEMORY_COLUMNS: tuple[str, ...] = (
    "memory_weights_gib", "memory_gradients_gib", "memory_optimizer_gib", "memory_activations_gib",
    "memory_reserve_gib", "memory_total_gib", "memory_capacity_gib", "fits", "recompute_assumed",
)


def block_fraction(layers: int, pp, vp, num_layers) -> np.ndarray:
    """Share of layers fully recomputed by Megatron-Core ``recompute_method=block`` with
    ``recompute_num_layers`` N: the first N of each virtual pipeline chunk's ceil(L / (pp vp))
    layers (Megatron-LM ``TransformerBlock._checkpointed_forward``: layer l of a chunk is
    checkpointed when l < N), i.e. min(N, c) / c (the chunk size :func:`perf.least_recompute` uses)."""
    c = np.ceil(layers / (np.asarray(pp, dtype=np.float64) * np.asarray(vp, dtype=np.float64)))
    return np.minimum(np.asarray(num_layers, dtype=np.float64), c) / c


@dataclass(frozen=True)
class RowPlan:
    """What the model runs for one row.

    model, gpu, precision: the row's architecture, GPU and recipe (its ids resolved once, here);
    layout: the row's layout with :data:`COLUMN_DEFAULTS` (recompute resolved);
    recompute_fraction: share of layers fully recomputed where recompute is "full" (the rest
    selective); recompute_assumed: the level chosen for an unknown recompute ("" when stated);
    assumptions: the defaults applied (text); options: ``memory.breakdown`` options of the row;
    memory_gib: predicted bytes per GPU of that layout (GiB); measured / basis: tokens/s per
    GPU the row measured and how (:func:`measured_tokens_per_s`; None / "" without one);
    recompute_rest: what the layers not fully recomputed do, "selective" (the least-recompute
    mix) or "none" (a stated ``recompute_num_layers``: Megatron's block method).
    """

    row: dict[str, Any]
    model: models.Model
    gpu: hardware.GPU
    precision: recipes.Recipe
    layout: Layout
    recompute_fraction: float
    recompute_assumed: str
    assumptions: tuple[str, ...]
    options: dict[str, Any]
    memory_gib: float
    measured: float | None = None
    basis: str = ""
    recompute_rest: str = "selective"

    @property
    def recompute_label(self) -> str:
        return _recompute_label(RECOMPUTE_CODE[self.layout.recompute], self.recompute_fraction,
                                RECOMPUTE_CODE[self.recompute_rest])


def _default_notes(row: dict[str, Any], gbs: int, vp: int, is_moe: bool, etp: int = 1, pp: int = 1) -> list[str]:
    """The :data:`COLUMN_DEFAULTS` a row's layout took, as text (for :attr:`RowPlan.assumptions`)."""
    notes = []
    if is_blank(row.get("gbs")):
        notes.append(f"gbs={gbs} (one sequence per GPU)")
    if is_blank(row.get("vp")) and vp > 1:
        notes.append(f"vp={vp} (the pp_split layout's {vp * pp} stages on pp {pp})" if layout_vp(row, pp) else
                     f"vp={vp} (assumed: {LAYERS_PER_VIRTUAL_STAGE} layers per virtual stage)")
    if is_moe and is_blank(row.get("etp")):
        notes.append(f"etp={etp} (default: tp, Megatron-Core)")
    return notes


def _recompute_label(code: int, frac: float, rest: int) -> str:
    """The recompute of a plan in words: "full on 16% of layers, none on the rest" etc."""
    if code == 2 and frac < 1.0:
        return f"full on {frac:.0%} of layers, {RECOMPUTE_NAME[rest]} on the rest"
    return RECOMPUTE_NAME[code]


def _recompute_note(assumed: str, frac: float) -> str:
    return "recompute assumed: " + (f"full on {frac:.0%} of layers" if assumed == "full" else assumed)


def plan_row(row: dict[str, Any], layout: Layout | None = None, **memory_opts: Any) -> RowPlan:
    """Model inputs of a runs-table row (``layout`` overrides the row's, e.g. a searched one).

    Applies :data:`COLUMN_DEFAULTS`; a row whose recompute is unknown gets the least recompute
    that fits its hardware (``perf.least_recompute``: none, selective, then full on the fewest
    layers). ``memory_opts`` go to ``memory.breakdown`` (the row's columns override them).
    """
    model = row_model(row)
    gpu, prec = row_gpu(row), row_recipe(row)
    notes: list[str] = []
    lay = row_layout(row) if layout is None else layout
    if layout is None:
        notes += _default_notes(row, lay.gbs, lay.vp, model.is_moe, lay.etp, lay.pp)
    opts = {**memory_opts, **memory_options(row)}
    stated = stated_recompute(row)
    assumed = ""
    frac = 1.0
    rest = "selective"
    if stated == "unknown" and layout is None:
        code, fr, gib = perf.least_recompute(model, lay, gpu, prec, **opts)
        code, frac, gib = int(code[0]), float(fr[0]), float(gib[0])
        assumed = RECOMPUTE_NAME[code]
        lay = lay.replace(recompute=assumed)
        notes.append(_recompute_note(assumed, frac))
    else:
        n_block = block_layers(row) if layout is None else None
        if n_block is not None:
            # Megatron block recompute: full on the first N layers of each chunk, none on the others
            frac = float(block_fraction(model.layers, lay.pp, lay.vp, n_block))
            rest = "none"
            gib = float(mixed_recompute_gib(model, LayoutArray.from_layouts([lay]), prec, [frac],
                                            [RECOMPUTE_CODE[rest]], **opts)["total"][0])
        else:
            gib = float(memory.breakdown(model, lay, prec, **opts).total[0] / memory.GIB)
    measured, basis = measured_tokens_per_s(row, model)
    return RowPlan(row=row, model=model, gpu=gpu, precision=prec, layout=lay, recompute_fraction=frac if lay.recompute == "full" else 0.0,
                   recompute_assumed=assumed, assumptions=tuple(notes), options=opts, memory_gib=gib,
                   measured=measured, basis=basis, recompute_rest=rest)


def mixed_recompute_gib(model, la: LayoutArray, precision: recipes.Recipe, fraction, rest, **options: Any) -> dict[str, np.ndarray]:
    """GiB per GPU by term and total (``memory.breakdown``) of layouts ``la``; where recompute is
    full on only a ``fraction`` of the layers (< 1), each term is the per-layer mix of the full
    terms and those of the other layers' recompute code ``rest`` (1 selective, 0 none), by that share."""
    x, rest = np.asarray(fraction, dtype=np.float64), np.asarray(rest, dtype=np.int64)
    partial = (la.recompute == 2) & (x < 1.0)
    n = len(la)
    if not partial.any():
        return memory.breakdown(model, la, precision, **options).gib()
    # the layouts and, after them, the partial ones with the other layers' recompute: one breakdown
    both = LayoutArray.concat([la, la[partial].replace(recompute=rest[partial])])
    gib = memory.breakdown(model, both, precision, **options).gib()
    g = {k: v[:n].copy() for k, v in gib.items()}
    xp = x[partial]
    for k in g:
        g[k][partial] = (1.0 - xp) * gib[k][n:] + xp * g[k][partial]
    return g


@dataclass(frozen=True)
class PlanGroup:
    """Rows of a :class:`TablePlan` with the same architecture, GPU, precision, memory options,
    MoE dispatcher, schedule, stack and pipeline split (:func:`step_inputs`' conventions): their positions in the table (``index``), layouts (recompute resolved as
    :func:`plan_row` does) and full-recompute fractions, as arrays."""

    model: models.Model
    gpu: hardware.GPU
    precision: recipes.Recipe
    options: dict[str, Any]
    index: np.ndarray
    layouts: LayoutArray
    recompute_fraction: np.ndarray
    ep_dispatch: str = "alltoall"
    schedule: str = "unknown"
    recompute_rest: np.ndarray | None = None
    stack: str = "megatron"
    pp_split: str = "auto"
    attn_kernel: str = "flash"
    tp_comm_overlap: bool | None = None
    expert_gemm: str = "auto"

    @property
    def rest(self) -> np.ndarray:
        """Recompute code of the layers not fully recomputed, per row (1 selective unless a stated
        ``recompute_num_layers`` makes it 0, none)."""
        if self.recompute_rest is not None:
            return self.recompute_rest
        ones = self.__dict__.get("_rest_ones")
        if ones is None:
            ones = np.ones(len(self.index), np.int64)
            ones.flags.writeable = False
            object.__setattr__(self, "_rest_ones", ones)
        return ones

    def memory_gib(self) -> dict[str, np.ndarray]:
        """GiB per GPU by term and total (``memory.breakdown``); rows with full recompute on part
        of the layers mix the full terms with those of the other layers' recompute (:attr:`rest`)
        by that share, as :func:`predict_memory` says."""
        return mixed_recompute_gib(self.model, self.layouts, self.precision, self.recompute_fraction,
                                   self.rest, **self.options)

    def step_inputs(self):
        """``perf.prepare`` of the group (:func:`step_inputs`' conventions)."""
        return perf.prepare(self.model, self.layouts, self.precision, self.gpu,
                            recompute_fraction=self.recompute_fraction, recompute_rest=self.rest,
                            ep_dispatch=self.ep_dispatch, schedule=self.schedule, stack=self.stack,
                            pp_split=self.pp_split, attn_kernel=self.attn_kernel,
                            tp_comm_overlap=self.tp_comm_overlap, expert_gemm=self.expert_gemm,
                            grad_bytes=self.options.get("grad_bytes"))


@dataclass(frozen=True)
class TablePlan:
    """:func:`plan_row` of every row of a table, grouped (:class:`PlanGroup`) so that the memory
    and step-time models run once per group. Per row (table order): ``recompute_assumed``,
    ``assumptions``, ``measured`` and ``basis`` as in :class:`RowPlan`."""

    rows: list[dict[str, Any]]
    groups: tuple[PlanGroup, ...]
    recompute_assumed: list[str]
    assumptions: list[tuple[str, ...]]
    measured: list[float | None]
    basis: list[str]

    def __len__(self) -> int:
        return len(self.rows)

    def _scatter(self, per_group) -> np.ndarray:
        out = np.empty(len(self.rows))
        for g, v in zip(self.groups, per_group):
            out[g.index] = v
        return out

    def memory_gib(self) -> dict[str, np.ndarray]:
        """GiB per GPU by term and total of every row (:meth:`PlanGroup.memory_gib`), table order:
        one ``memory.breakdown`` per architecture, precision and memory options (the memory model
        does not read the GPU), the groups of different GPUs side by side."""
        batches: dict[tuple, list[PlanGroup]] = {}
        for g in self.groups:
            batches.setdefault((id(g.model), g.precision, tuple(sorted(g.options.items()))), []).append(g)
        out: dict[str, np.ndarray] = {}
        for gs in batches.values():
            g0 = gs[0]
            gib = g0.memory_gib() if len(gs) == 1 else mixed_recompute_gib(
                g0.model, LayoutArray.concat([g.layouts for g in gs]), g0.precision,
                np.concatenate([g.recompute_fraction for g in gs]), np.concatenate([g.rest for g in gs]), **g0.options)
            idx = np.concatenate([g.index for g in gs])
            for k, v in gib.items():
                out.setdefault(k, np.empty(len(self.rows)))[idx] = v
        return out

    def layouts(self) -> LayoutArray:
        """The resolved layouts, table order."""
        return LayoutArray.concat([g.layouts for g in self.groups]).take(self._order())

    def recompute_fraction(self) -> np.ndarray:
        return self._scatter([g.recompute_fraction for g in self.groups])

    def _order(self) -> np.ndarray:
        pos = np.concatenate([g.index for g in self.groups]) if self.groups else np.zeros(0, np.int64)
        inv = np.empty_like(pos)
        inv[pos] = np.arange(len(pos))
        return inv

    def step_inputs(self):
        """``perf.StepInputs`` of every row, table order: one ``perf.prepare`` per architecture,
        precision, dispatcher and schedule, the groups of different GPUs side by side (one GPU per
        layout; elementwise the same as one call per group)."""
        batches: dict[tuple, list[PlanGroup]] = {}
        for g in self.groups:
            # the first unsupported precision in table order raises, as per group
            g.gpu.peak_flops(g.precision), g.gpu.peak_flops(perf.compute_precision(g.precision))
            batches.setdefault((id(g.model), g.precision, g.ep_dispatch, g.schedule, g.stack, g.pp_split,
                                  g.attn_kernel, g.options.get("grad_bytes"), g.tp_comm_overlap, g.expert_gemm),
                                 []).append(g)
        parts, index = [], []
        for gs in batches.values():
            index += [g.index for g in gs]
            if len(gs) == 1:
                parts.append(gs[0].step_inputs())
                continue
            gpus: list[hardware.GPU] = []
            for g in gs:
                gpus += [g.gpu] * len(g.index)
            g0 = gs[0]
            parts.append(perf.prepare(g0.model, LayoutArray.concat([g.layouts for g in gs]), g0.precision, gpus,
                                      recompute_fraction=np.concatenate([g.recompute_fraction for g in gs]),
                                      recompute_rest=np.concatenate([g.rest for g in gs]),
                                      ep_dispatch=g0.ep_dispatch, schedule=g0.schedule, stack=g0.stack,
                                      pp_split=g0.pp_split, attn_kernel=g0.attn_kernel,
                                      tp_comm_overlap=g0.tp_comm_overlap, expert_gemm=g0.expert_gemm,
                                      grad_bytes=g0.options.get("grad_bytes")))
        pos = np.concatenate(index) if index else np.zeros(0, np.int64)
        inv = np.empty_like(pos)
        inv[pos] = np.arange(len(pos))
        return perf.StepInputs.concat(parts).take(inv)

    def recompute_label(self, i: int) -> str:
        """:attr:`RowPlan.recompute_label` of row ``i``."""
        g, j = self._where[i]
        grp = self.groups[g]
        return _recompute_label(int(grp.layouts.recompute[j]), float(grp.recompute_fraction[j]), int(grp.rest[j]))

    def recompute_labels(self) -> list[str]:
        """:meth:`recompute_label` of every row, table order (each distinct recompute worded once)."""
        out = [""] * len(self.rows)
        for grp in self.groups:
            words: dict[tuple, str] = {}
            for i, key in zip(grp.index.tolist(), zip(grp.layouts.recompute.tolist(), grp.recompute_fraction.tolist(),
                                                      grp.rest.tolist())):
                w = words.get(key)
                if w is None:
                    w = words[key] = _recompute_label(*key)
                out[i] = w
        return out

    @property
    def _where(self) -> dict[int, tuple[int, int]]:
        w = self.__dict__.get("_where_cache")
        if w is None:
            w = {int(i): (g, j) for g, grp in enumerate(self.groups) for j, i in enumerate(grp.index)}
            object.__setattr__(self, "_where_cache", w)
        return w


#: The cells :func:`memory_options` reads (besides the precision), and those :func:`row_dispatch` and
#: :func:`row_schedule` read.
_OPTION_COLUMNS: tuple[str, ...] = ("recompute_modules", "reserve_gib", "fp8_param_gather", "stack", "attn_kernel",
                                    "dropout", "grad_reduce_in_fp32", "include_embeddings", "pp_split")
_RUN_COLUMNS: tuple[str, ...] = ("moe_dispatcher", "schedule", "stack", "pp_split", "attn_kernel", "tp_comm_overlap",
                                  "expert_gemm")


def _cached_cells(cache: dict, key: tuple, fn):
    """``cache[key]``, computed by ``fn()`` the first time (``key``: the cells ``fn`` reads, with
    their types: True and 1 are different cells); unhashable cells are not cached."""
    key = (*key, *map(type, key))
    try:
        return cache[key]
    except KeyError:
        out = cache[key] = fn()
        return out
    except TypeError:
        return fn()


def plan_rows(rows: Sequence[dict[str, Any]], row_numbers: Sequence[int] | None = None,
              **memory_opts: Any) -> TablePlan:
    """:func:`plan_row` of every row (no layout override), vectorized: rows are grouped by
    architecture, GPU, precision, memory options, MoE dispatcher and schedule, and the recompute of rows that leave it
    unknown is resolved once per group (``perf.least_recompute`` on the group's layouts).
    Same results as :func:`plan_row` row by row. A bad row raises ``RunsTableError``
    "row N: reason" (N from ``row_numbers``, default position + 2: the header is row 1)."""
    rows = list(rows)
    n = len(rows)
    nums = list(row_numbers) if row_numbers is not None else [i + 2 for i in range(n)]
    cache: dict = {}
    table = layout_table(rows)  # every row's layout at once; None: row by row (and its error)
    if table is None:
        vals = np.zeros((n, 12), dtype=np.int64)
        unknown = np.zeros(n, dtype=bool)
        n_block = np.zeros(n, dtype=np.int64)  # stated recompute_num_layers (0: none stated)
    else:
        vals, unknown, n_block = table
    by_key: dict[tuple, list[int]] = {}
    info: dict[tuple, tuple] = {}
    measured: list[float | None] = []
    basis: list[str] = []
    moe: list[bool] = []
    moe_of: dict[tuple, bool] = {}
    # memory options, dispatcher and schedule of a row read only these cells: worked out once per distinct value
    opt_cache: dict = {}
    for i, row in enumerate(rows):
        try:
            mkey, model = cached_model(row, cache)
            is_moe = moe_of.get(mkey)
            if is_moe is None:
                is_moe = moe_of[mkey] = model.is_moe
            moe.append(is_moe)
            if table is None:
                tp, pp, cp, ep, etp, dp, vp, mbs, gbs, sp, zero, rc = layout_values(row)
            gpu, prec = _cached_cells(opt_cache, ("ids", row["hardware"], row["precision"]),
                                      lambda: (row_gpu(row), row_recipe(row)))
            opts, opt_key = _cached_cells(opt_cache, ("opts", prec, *map(row.get, _OPTION_COLUMNS)), lambda: (
                opts := {**memory_opts, **memory_options(row)}, tuple(sorted(opts.items()))))
            if table is None:
                unknown[i] = stated_recompute(row) == "unknown"
                n_block[i] = block_layers(row) or 0
            m, b = measured_tokens_per_s(row, model)
            dispatch, schedule, stack, split, kernel, tpov, xgemm = _cached_cells(
                opt_cache, ("run", is_moe, *map(row.get, _RUN_COLUMNS)),
                lambda: (row_dispatch(row) if is_moe else "alltoall", row_schedule(row), row_stack(row),
                         row_pp_split(row), row_attn_kernel(row), row_tp_overlap(row), row_expert_gemm(row)))
        except (ValueError, hardware.HardwareError) as exc:
            raise RunsTableError(f"row {nums[i]}: {exc}") from None
        if table is None:
            vals[i] = (tp, pp, cp, ep, etp, dp, vp, mbs, gbs, int((True if sp is None else sp) and tp > 1), zero,
                       RECOMPUTE_CODE[rc])
        measured.append(m)
        basis.append(b)
        key = (mkey, gpu, prec, opt_key, dispatch, schedule, stack, split, kernel, tpov, xgemm)
        if key not in by_key:
            by_key[key] = []
            info[key] = (model, gpu, prec, opts, dispatch, schedule, stack, split, kernel, tpov, xgemm)
        by_key[key].append(i)
    assumed = [""] * n
    frac_all = np.ones(n)
    groups = []
    for key, members in by_key.items():
        model, gpu, prec, opts, dispatch, schedule, stack, split, kernel, tpov, xgemm = info[key]
        idx = np.asarray(members, dtype=np.int64)
        v = vals[idx]
        code = v[:, 11].copy()
        frac = np.ones(len(idx))
        unk = unknown[idx]
        if np.any(unk):
            sub = LayoutArray(**{f: v[unk, j] for j, f in enumerate(FIELDS)})
            try:
                c, fr, _ = perf.least_recompute(model, sub, gpu, prec, **opts)
            except (ValueError, hardware.HardwareError) as exc:
                raise RunsTableError(f"row {nums[int(idx[unk][0])]}: {exc}") from None
            code[unk], frac[unk] = c, fr
            for i, ci in zip(idx[unk], c):
                assumed[int(i)] = RECOMPUTE_NAME[int(ci)]
        v[:, 11] = code
        blk = n_block[idx] > 0
        if np.any(blk):  # stated block recompute: full on the first N layers of each chunk, none on the rest
            frac[blk] = block_fraction(model.layers, v[blk, 1], v[blk, 6], n_block[idx][blk])
        rest = np.where(blk, 0, 1).astype(np.int64)
        frac = np.where(code == 2, frac, 0.0)
        frac_all[idx] = frac
        la = LayoutArray(**{f: v[:, j] for j, f in enumerate(FIELDS)})
        groups.append(PlanGroup(model=model, gpu=gpu, precision=prec, options=opts, index=idx, layouts=la,
                                recompute_fraction=frac, ep_dispatch=dispatch, schedule=schedule,
                                recompute_rest=rest if np.any(blk) else None, stack=stack, pp_split=split,
                                attn_kernel=kernel, tp_comm_overlap=tpov, expert_gemm=xgemm))
    notes: list[tuple[str, ...]] = []
    for row, gbs, vp, etp, pp, is_moe, unk, a, f in zip(rows, vals[:, 8].tolist(), vals[:, 6].tolist(),
                                                        vals[:, 4].tolist(), vals[:, 1].tolist(), moe, unknown.tolist(),
                                                        assumed, frac_all.tolist()):
        note = _default_notes(row, gbs, vp, is_moe, etp, pp)
        if unk:
            note.append(_recompute_note(a, f))
        notes.append(tuple(note))
    return TablePlan(rows=rows, groups=tuple(groups), recompute_assumed=assumed, assumptions=notes,
                     measured=measured, basis=basis)


def step_inputs(plans: Sequence[RowPlan]):
    """Step-time inputs (``perf.StepInputs``) of every plan, concatenated (one entry per row).
    MoE rows use the row's dispatcher (:func:`row_dispatch`, default DeepEP-class, :data:`ROW_CONVENTIONS`
    "ep_dispatch"); the row's ``schedule`` sets the MoE all-to-all overlap (:func:`row_schedule`)."""
    parts = []
    for su in plans:
        ep_dispatch = row_dispatch(su.row) if su.model.is_moe else "alltoall"
        parts.append(perf.prepare(su.model, su.layout, su.precision, su.gpu, recompute_fraction=su.recompute_fraction,
                                  recompute_rest=RECOMPUTE_CODE[su.recompute_rest],
                                  ep_dispatch=ep_dispatch, schedule=row_schedule(su.row), stack=row_stack(su.row),
                                  pp_split=row_pp_split(su.row), attn_kernel=row_attn_kernel(su.row),
                                  tp_comm_overlap=row_tp_overlap(su.row), expert_gemm=row_expert_gemm(su.row),
                                  grad_bytes=su.options.get("grad_bytes")))
    return perf.StepInputs.concat(parts)


def predict_memory(rows: Iterable[dict[str, Any]], **memory_options: Any) -> list[dict[str, Any]]:
    """Rows with predicted bytes per GPU by term (GiB) and whether they fit their hardware.

    Adds ``MEMORY_COLUMNS``. ``recompute`` unknown/empty: the least recompute that fits
    (:func:`plan_row`), reported in ``recompute_assumed`` (empty for rows that state it); with
    full recompute on part of the layers the terms are those of that mix.
    ``memory_options`` go to ``memory.breakdown`` (row columns ``reserve_gib`` and
    ``recompute_modules`` override them per row). Vectorized (:func:`plan_rows`); ``rows`` may
    also be a :class:`TablePlan` already made.
    """
    plan = rows if isinstance(rows, TablePlan) else plan_rows(list(rows), **memory_options)
    g = {k: v.tolist() for k, v in plan.memory_gib().items()}  # Python floats once, not per element
    caps = plan._scatter([g.gpu.hbm_gib for g in plan.groups]).tolist()
    out = []
    for i, row in enumerate(plan.rows):
        cap = caps[i]
        total = g["total"][i]
        new = dict(row)
        new.update({
            "memory_weights_gib": round(g["weights"][i], 3),
            "memory_gradients_gib": round(g["gradients"][i], 3),
            "memory_optimizer_gib": round(g["optimizer"][i], 3),
            "memory_activations_gib": round(g["activations"][i], 3),
            "memory_reserve_gib": round(g["reserve"][i], 3),
            "memory_total_gib": round(total, 3),
            "memory_capacity_gib": cap,
            "fits": bool(total <= cap),
            "recompute_assumed": plan.recompute_assumed[i],
        })
        out.append(new)
    return out


#: The published-run tables whose measured MoE runs set the search's envelope (:func:`moe_envelope`):
#: calibration, held-out and validation (``scaletax.fit.validate.RUN_TABLES``; a test holds them equal).
MEASURED_TABLES: tuple[str, ...] = (str(RUNS_CSV), str(HELDOUT_CSV), str(VALIDATION_CSV))


@functools.lru_cache(maxsize=4)
def moe_envelope(paths: tuple[str, ...] = MEASURED_TABLES) -> dict[str, float]:
    """What the measured MoE runs of ``paths`` span, each run's layout as :func:`plan_row` resolves it
    (``runs.row_layout``: the column defaults; the recompute, which plan_row resolves on the GPU, does
    not enter, so no GPU row is read): tokens per local expert per micro-batch (``tpe_min``,
    ``tpe_max``, ``search.tokens_per_expert``) and transformer layers per pipeline chunk
    (``lps_min``, ``lps_max``, ``search.layers_per_chunk``), and the number of runs. The search's MoE floors
    (``plan.validated_space``) are the two minima: below them no published run checks the model."""
    tpe, lps = [], []
    for path in paths:
        for r in read_runs(path):
            if not r.get("moe_experts"):
                continue
            model = row_model(r)
            if measured_tokens_per_s(r, model)[0] is None:
                continue
            lay = row_layout(r)
            tpe.append(float(search.tokens_per_expert(model, lay)))
            lps.append(float(search.layers_per_chunk(model, lay)))
    if not tpe:
        raise ValueError(f"no measured MoE run in {', '.join(paths)}")
    return {"tpe_min": min(tpe), "tpe_max": max(tpe), "lps_min": min(lps), "lps_max": max(lps), "runs": float(len(tpe))}


@functools.lru_cache(maxsize=4)
def cp_envelope(paths: tuple[str, ...] = MEASURED_TABLES) -> dict[str, float]:
    """What the measured runs of ``paths`` with context parallelism span (any model; the layout as
    ``runs.row_layout`` resolves it): tokens a context-parallel rank holds per micro-batch
    (``tokens_min``, ``tokens_max``, ``search.tokens_per_cp_rank``) and the number of runs. The search's
    context-parallel floor (``plan.validated_space``) is the minimum: below it no published run checks
    the ring's terms."""
    toks = []
    for path in paths:
        for r in read_runs(path):
            model = row_model(r)
            lay = row_layout(r)
            if int(lay.cp) <= 1 or measured_tokens_per_s(r, model)[0] is None:
                continue
            toks.append(float(search.tokens_per_cp_rank(model, lay)))
    if not toks:
        raise ValueError(f"no measured run with context parallelism in {', '.join(paths)}")
    return {"tokens_min": min(toks), "tokens_max": max(toks), "runs": float(len(toks))}
