"""Tables of training runs in the published-runs schema: read, validate, predict memory, write.

Public API:

- ``read_runs(path) -> list[dict]``: every row validated; numeric columns parsed (int/float,
  None when blank), other cells kept as strings, unknown columns passed through. Errors raise
  ``RunsTableError`` (a ValueError) with a one-line message naming file, row (the header is
  row 1) and column.
- ``row_model(row) -> Model``, ``row_layout(row, recompute=None) -> Layout``: the architecture
  and the layout of a row, with the defaults below.
- ``predict_memory(rows, **memory_options) -> list[dict]``: new rows (inputs untouched) with
  ``MEMORY_COLUMNS`` appended; composable with other ``predict_*`` functions.
- ``write_runs(rows, path, columns=None)``: CSV with the columns in first-seen order.

Schema: ``data/sources/README.md`` (the ``published_runs_calibration.csv`` columns). Required
columns: ``REQUIRED_COLUMNS``. Defaults for empty layout cells: ``cp`` 1, ``ep`` 1, ``vp`` 1,
``mbs`` 1, ``dp`` = gpu_count / (tp * pp * cp), ``gbs`` = mbs * dp * pp (``layout.Layout``).
Optional columns read when present: ``sequence_parallel`` (default on when tp > 1),
``zero_stage`` (default 1: Megatron's distributed optimizer over dp * cp; 3 for FSDP),
``etp`` (default tp), ``reserve_gib`` (default ``memory.RESERVE_GIB``), ``recompute_modules``
(Megatron-Core module names separated by ``;``: what "selective" recomputes for that row,
default ``memory.SELECTIVE_MODULES``), and the architecture extras of ``models.from_row``.
``recompute`` "unknown" or empty: ``predict_memory`` uses the least recompute (none <
selective < full) that fits and reports it in ``recompute_assumed``.
"""
from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from scaletax import memory, models
from scaletax.files import InputFileError, read_bounded
from scaletax.layout import RECOMPUTE_NAME, Layout, LayoutArray

REQUIRED_COLUMNS: tuple[str, ...] = ("layers", "hidden", "heads", "ffn_hidden", "vocab", "seq_len",
                                     "hardware", "gpu_count", "tp", "pp", "precision")
INT_COLUMNS: tuple[str, ...] = (
    "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab", "seq_len",
    "moe_experts", "moe_top_k", "moe_ffn_hidden", "moe_shared_experts", "moe_dense_layers",
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
    "gpu_count", "tp", "pp", "cp", "ep", "etp", "vp", "dp", "mbs", "gbs", "zero_stage",
)
FLOAT_COLUMNS: tuple[str, ...] = (
    "total_params_b", "active_params_b", "measured_tokens_per_s_per_gpu",
    "measured_model_tflops_per_gpu", "measured_mfu", "reserve_gib",
)
RECOMPUTE_VALUES: tuple[str, ...] = ("none", "selective", "full", "unknown")
#: Layout columns a row may leave empty together: "no layout given" (``scaletax predict`` then
#: searches one, ``report.predict``); ``row_layout`` and ``predict_memory`` still need them.
SEARCHABLE_LAYOUT: tuple[str, ...] = ("tp", "pp")
MEMORY_COLUMNS: tuple[str, ...] = (
    "memory_weights_gib", "memory_gradients_gib", "memory_optimizer_gib", "memory_activations_gib",
    "memory_reserve_gib", "memory_total_gib", "memory_capacity_gib", "fits", "recompute_assumed",
)


#: Bounds of a runs table, checked before and while parsing (the errors state them).
MAX_RUNS_BYTES = 64 * 1024**2
MAX_RUNS_ROWS = 200_000
#: Integers above this are not exact in float64, where the model computes.
MAX_INT = 2**53
MAX_GPU_COUNT = 1_000_000


class RunsTableError(ValueError):
    """A runs table is malformed; the one-line message names file, row and column."""


class _CellError(ValueError):
    def __init__(self, column: str, message: str):
        super().__init__(message)
        self.column = column


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, str) and v.strip() == "") or (isinstance(v, float) and math.isnan(v))


def _parse_int(col: str, v: str) -> int:
    if len(v) > 32:
        raise _CellError(col, f"expected an integer, got {v[:32]!r}... ({len(v)} characters)")
    try:
        f = float(v)
    except ValueError:
        raise _CellError(col, f"expected an integer, got {v!r}") from None
    if not math.isfinite(f) or not f.is_integer():
        raise _CellError(col, f"expected an integer, got {v!r}")
    if abs(f) > MAX_INT:
        raise _CellError(col, f"{v} is larger than 2**53, the largest integer the model computes exactly")
    return int(f)


def _parse_float(col: str, v: str) -> float:
    try:
        f = float(v)
    except ValueError:
        raise _CellError(col, f"expected a number, got {v!r}") from None
    if not math.isfinite(f):
        raise _CellError(col, f"expected a finite number, got {v!r}")
    return f


def _parse_bool(col: str, v: Any) -> bool:
    try:
        return models._to_bool(col, v)
    except ValueError:
        raise _CellError(col, f"expected true/false, got {v!r}") from None


def _hardware_ids() -> list[str]:
    from scaletax import hardware
    return hardware.ids()


def row_model(row: dict[str, Any]) -> models.Model:
    """The architecture of a row (``models.from_row``); errors name the column."""
    try:
        return models.from_row(row)
    except ValueError as exc:
        msg = str(exc)
        col = msg.split("'")[1] if msg.startswith("column") and "'" in msg else "layers"
        raise _CellError(col, msg.split(": ", 1)[-1] if msg.startswith("column") else msg) from None


def _int(row: dict[str, Any], col: str, default: int | None = None) -> int | None:
    v = row.get(col)
    if _blank(v):
        return default
    return v if isinstance(v, int) and not isinstance(v, bool) else _parse_int(col, str(v))


def row_layout(row: dict[str, Any], recompute: str | None = None) -> Layout:
    """The layout of a row with the module's defaults; ``recompute`` overrides the row's.

    A row whose recompute is "unknown"/empty gets "none" unless ``recompute`` is given.
    """
    tp, pp = _int(row, "tp"), _int(row, "pp")
    gpus = _int(row, "gpu_count")
    for col, v in (("tp", tp), ("pp", pp), ("gpu_count", gpus)):
        if v is None:
            raise _CellError(col, "required for the layout but empty")
        if v <= 0:
            raise _CellError(col, f"must be positive (got {v})")
    cp = _int(row, "cp", 1)
    dp = _int(row, "dp")
    for col, v in (("cp", cp), ("dp", dp), ("ep", _int(row, "ep", 1)), ("vp", _int(row, "vp", 1)),
                   ("mbs", _int(row, "mbs", 1)), ("gbs", _int(row, "gbs", 1)), ("etp", _int(row, "etp", 1))):
        if v is not None and v <= 0:
            raise _CellError(col, f"must be positive (got {v})")
    if dp is None:
        if gpus % (tp * pp * cp):
            raise _CellError("gpu_count", f"gpu_count={gpus} is not divisible by tp*pp*cp={tp * pp * cp} (dp empty)")
        dp = gpus // (tp * pp * cp)
    if tp * pp * cp * dp != gpus:
        raise _CellError("gpu_count", f"tp*pp*cp*dp = {tp}*{pp}*{cp}*{dp} = {tp * pp * cp * dp} must equal gpu_count={gpus}")
    mbs, gbs = _int(row, "mbs", 1), _int(row, "gbs")
    if gbs is not None and gbs % (mbs * dp):
        raise _CellError("gbs", f"gbs={gbs} must be a multiple of mbs*dp={mbs * dp}")
    ep, etp = _int(row, "ep", 1), _int(row, "etp")
    if (tp * cp * dp) % (ep * (etp or tp)):
        raise _CellError("ep", f"ep*etp={ep * (etp or tp)} must divide tp*cp*dp={tp * cp * dp} (MoE parallel folding)")
    zero = _int(row, "zero_stage", 1)
    if zero not in (0, 1, 2, 3):
        raise _CellError("zero_stage", f"must be 0, 1, 2 or 3 (got {zero})")
    sp = row.get("sequence_parallel")
    sp = None if _blank(sp) else _parse_bool("sequence_parallel", sp)
    rc = recompute
    if rc is None:
        rc = str(row.get("recompute") or "unknown").strip().lower()
        if rc not in RECOMPUTE_VALUES:
            raise _CellError("recompute", f"must be one of {', '.join(RECOMPUTE_VALUES)} (got {rc!r})")
        rc = "none" if rc == "unknown" else rc
    return Layout(tp=tp, pp=pp, cp=cp, dp=dp, ep=ep, etp=etp, vp=_int(row, "vp", 1), mbs=mbs, gbs=gbs,
                  sequence_parallel=sp, zero_stage=zero, recompute=rc)


#: (column, lowest, highest, lowest allowed itself) of the measured and size columns.
RANGES: tuple[tuple[str, float, float, bool], ...] = (
    ("gpu_count", 1, MAX_GPU_COUNT, True),
    ("measured_tokens_per_s_per_gpu", 0.0, math.inf, False),
    ("measured_model_tflops_per_gpu", 0.0, math.inf, False),
    ("measured_mfu", 0.0, 1.0, False),
)


def _check_ranges(row: dict[str, Any]) -> None:
    for col, lo, hi, lo_ok in RANGES:
        v = row.get(col)
        if v is None or _blank(v):
            continue
        if not ((v >= lo if lo_ok else v > lo) and v <= hi):
            low = f">= {lo:g}" if lo_ok else f"> {lo:g}"
            high = "" if math.isinf(hi) else f" and <= {hi:g}"
            raise _CellError(col, f"must be {low}{high} (got {v:g})")


def _validate_row(row: dict[str, Any], hw_ids: Sequence[str]) -> None:
    _check_ranges(row)
    hw = str(row.get("hardware") or "").strip()
    if hw not in hw_ids:
        raise _CellError("hardware", f"unknown hardware id {hw!r}; valid ids: {', '.join(hw_ids)}")
    prec = str(row.get("precision") or "").strip().lower()
    if prec not in memory.PRECISIONS:
        raise _CellError("precision", f"unknown precision {prec!r}; valid: {', '.join(memory.PRECISIONS)}")
    rc = str(row.get("recompute") or "").strip().lower()
    if rc and rc not in RECOMPUTE_VALUES:
        raise _CellError("recompute", f"must be one of {', '.join(RECOMPUTE_VALUES)} or empty (got {rc!r})")
    mods = _modules(row)
    if mods is not None:
        bad = set(mods) - set(memory.RECOMPUTE_MODULES)
        if bad:
            raise _CellError("recompute_modules", f"unknown module(s) {sorted(bad)}; valid: {', '.join(memory.RECOMPUTE_MODULES)}")
    model = row_model(row)
    if all(_blank(row.get(c)) for c in SEARCHABLE_LAYOUT):
        return  # no layout given: nothing more to check here
    layout = row_layout(row)
    try:
        layout.check(model)
    except ValueError as exc:
        col, _, msg = str(exc).partition(": ")
        raise _CellError(col, msg) from None


def _modules(row: dict[str, Any]) -> tuple[str, ...] | None:
    v = row.get("recompute_modules")
    if _blank(v):
        return None
    return tuple(m.strip() for m in str(v).replace(",", ";").split(";") if m.strip())


def read_runs(path: str | Path) -> list[dict[str, Any]]:
    """Read and validate a runs table (CSV). Raises ``RunsTableError`` on the first problem."""
    path = Path(path)
    name = path.name
    try:
        text = read_bounded(path, MAX_RUNS_BYTES, "runs table").decode("utf-8-sig")
    except InputFileError as exc:
        raise RunsTableError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise RunsTableError(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not text.strip():
        raise RunsTableError(f"{name}: empty file (expected a header row and at least one run)")
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in (reader.fieldnames or [])]
    reader.fieldnames = header
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise RunsTableError(f"{name}: row 1: missing required column(s) {', '.join(missing)}")
    hw_ids = _hardware_ids()
    rows: list[dict[str, Any]] = []
    for rownum, raw in enumerate(reader, start=2):
        if rownum - 1 > MAX_RUNS_ROWS:
            raise RunsTableError(f"{name}: more than {MAX_RUNS_ROWS:,} rows")
        if None in raw:
            raise RunsTableError(f"{name}: row {rownum}: more cells than header columns")
        if all(_blank(v) for v in raw.values()):
            continue
        row: dict[str, Any] = {}
        try:
            for col in header:
                v = raw.get(col)
                v = "" if v is None else v.strip()
                if col in REQUIRED_COLUMNS and v == "" and not (
                        col in SEARCHABLE_LAYOUT and all(not (raw.get(c) or "").strip() for c in SEARCHABLE_LAYOUT)):
                    raise _CellError(col, "required but empty")
                if col in INT_COLUMNS:
                    row[col] = None if v == "" else _parse_int(col, v)
                elif col in FLOAT_COLUMNS:
                    row[col] = None if v == "" else _parse_float(col, v)
                else:
                    row[col] = v
            _validate_row(row, hw_ids)
        except _CellError as exc:
            raise RunsTableError(f"{name}: row {rownum}, column {exc.column!r}: {exc}") from None
        rows.append(row)
    if not rows:
        raise RunsTableError(f"{name}: no data rows (header only)")
    return rows


def predict_memory(rows: Iterable[dict[str, Any]], **memory_options: Any) -> list[dict[str, Any]]:
    """Rows with predicted bytes per GPU by term (GiB) and whether they fit their hardware.

    Adds ``MEMORY_COLUMNS``. ``recompute`` unknown/empty: the least recompute that fits (full
    when none does), reported in ``recompute_assumed`` (empty for rows that state it).
    ``memory_options`` go to ``memory.breakdown`` (row columns ``reserve_gib`` and
    ``recompute_modules`` override them per row).
    """
    from scaletax import hardware
    out = []
    for row in rows:
        model = row_model(row)
        cap = float(hardware.get(str(row["hardware"]).strip()).hbm_gib)
        prec = str(row["precision"]).strip().lower()
        opts = dict(memory_options)
        if not _blank(row.get("reserve_gib")):
            opts["reserve_gib"] = float(row["reserve_gib"])
        mods = _modules(row)
        if mods is not None:
            opts["selective_modules"] = mods
        stated = str(row.get("recompute") or "unknown").strip().lower()
        base = row_layout(row)
        assumed = ""
        if stated in ("", "unknown"):
            la = LayoutArray.from_layouts([base.replace(recompute=r) for r in RECOMPUTE_NAME])
            mem = memory.breakdown(model, la, prec, **opts)
            ok = mem.total <= cap * memory.GIB
            i = int(np.argmax(ok)) if ok.any() else len(RECOMPUTE_NAME) - 1
            assumed = RECOMPUTE_NAME[i]
        else:
            mem = memory.breakdown(model, base, prec, **opts)
            i = 0
        g = {k: float(v[i]) for k, v in mem.gib().items()}
        new = dict(row)
        new.update({
            "memory_weights_gib": round(g["weights"], 3),
            "memory_gradients_gib": round(g["gradients"], 3),
            "memory_optimizer_gib": round(g["optimizer"], 3),
            "memory_activations_gib": round(g["activations"], 3),
            "memory_reserve_gib": round(g["reserve"], 3),
            "memory_total_gib": round(g["total"], 3),
            "memory_capacity_gib": cap,
            "fits": bool(g["total"] <= cap),
            "recompute_assumed": assumed,
        })
        out.append(new)
    return out


#: A cell starting with one of these is a formula to a spreadsheet (OWASP "CSV injection").
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isnan(v):
            return ""
        return str(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)
    if isinstance(v, (int, np.integer, np.floating)):
        return str(v)
    return safe_text_cell(str(v))


def safe_text_cell(text: str) -> str:
    """A text cell a spreadsheet shows as text: one that would start a formula gets a leading
    apostrophe (``=HYPERLINK(..)`` -> ``'=HYPERLINK(..)``); text that is a number is kept."""
    if text.startswith(FORMULA_START) and not _NUMBER.match(text):
        return "'" + text
    return text


def runs_csv(rows: Iterable[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Rows as CSV text (columns: ``columns`` or every key in first-seen order)."""
    rows = list(rows)
    if columns is None:
        seen: dict[str, None] = {}
        for r in rows:
            for k in r:
                seen.setdefault(k, None)
        columns = list(seen)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([safe_text_cell(str(c)) for c in columns])
    for r in rows:
        w.writerow([_cell(r.get(c)) for c in columns])
    return buf.getvalue()


def write_runs(rows: Iterable[dict[str, Any]], path: str | Path, columns: Sequence[str] | None = None) -> Path:
    """Write rows as CSV (:func:`runs_csv`); returns the path."""
    path = Path(path)
    path.write_text(runs_csv(rows, columns), encoding="utf-8")
    return path
