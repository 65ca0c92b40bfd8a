"""Tables of training runs in the published-runs schema: read, validate, plan, predict memory, write.

Public API:

- ``read_runs(path) -> list[dict]``: every row validated; numeric columns parsed (int/float,
  None when blank), other cells kept as strings, unknown columns passed through. A table with
  bad rows raises ``RunsTableError`` (a ValueError) with ONE line listing every bad row as
  ``row N, column 'c': reason`` (the header is row 1).
- ``row_model(row) -> Model``, ``row_layout(row, recompute=None) -> Layout``: the architecture
  and the layout of a row, with the defaults of :data:`COLUMN_DEFAULTS`.
- ``plan_row(row, layout=None) -> RowPlan``: model, layout, resolved recompute (unknown: the
  least that fits), memory options and the defaults applied: the one function calibration,
  validation and ``scaletax predict`` all use to turn a row into model inputs.
- ``plan_rows(rows) -> TablePlan``: :func:`plan_row` of a whole table, vectorized (rows grouped
  by architecture, GPU, precision, memory options, dispatcher, schedule and stack; the models run once per group).
- ``predict_memory(rows, **memory_options) -> list[dict]``: new rows (inputs untouched) with
  ``MEMORY_COLUMNS`` appended; composable with other ``predict_*`` functions.
- ``write_runs(rows, path, columns=None)``: CSV with the columns in first-seen order.
- ``schema_text()``: the schema with every column's default (``scaletax predict --help``).
- ``row_family(row)``, ``row_generation(row)``, ``row_source(row)``: the model family, GPU
  generation and kind of source of a row (the cross-validation folds).
- ``measured_tokens_per_s(row, model) -> (value | None, basis)``: what a row measured, per GPU;
  ``step_inputs(plans) -> perf.StepInputs``: the plans' step-time inputs, concatenated.

Schema: ``data/sources/README.md``; required columns ``REQUIRED_COLUMNS``; the default of every
optional column in :data:`COLUMN_DEFAULTS` (stated once, applied by :func:`plan_row`).

A blank ``etp`` is ``tp``, Megatron-Core's default (megatron-core 0.19.2
``megatron/core/model_parallel_config.py``: ``expert_tensor_parallel_size: Optional[int] = None``,
line 130, "set to the value of tensor_model_parallel_size" in ``__post_init__``, lines 506-507),
capped at the largest divisor of tp that keeps ep*etp dividing tp*cp*dp (:func:`default_etp`);
rows taken from a recipe that states it carry it. The ``stack`` column (:func:`row_stack`) says
which training software ran the row: "megatron" (blank; every row in data/) or "fsdp" (PyTorch
FSDP2: TorchTitan, llm-foundry). What fsdp changes is structural and read from TorchTitan 0.3.0's
source, not fitted (no FSDP-stack row with a measurement is in data/, so nothing can be
calibrated for it): ZeRO-3 by default (``fully_shard``), fp32 gradient reduce-scatter and shards
(``recipes.FSDP_GRAD_BYTES``), fp32 parameter shards that are the master weights, Adam m and v
(16 bytes per parameter over the shard group, :func:`fsdp_memory_options`), bf16 parameter
all-gather, TP collectives not overlapped (``comm.STACK_TP_OVERLAP``).
"""
from __future__ import annotations

import csv
import io
import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from scaletax import DATA_DIR, memory, models, recipes
from scaletax.files import InputFileError, read_bounded
from scaletax.layout import FIELDS, RECOMPUTE_CODE, RECOMPUTE_NAME, Layout, LayoutArray

REQUIRED_COLUMNS: tuple[str, ...] = ("layers", "hidden", "heads", "vocab", "seq_len",
                                     "hardware", "gpu_count", "tp", "pp", "precision")
#: Default of every optional column when its cell is blank or the column is absent. Stated once;
#: :func:`row_model`, :func:`row_layout` and :func:`plan_row` apply exactly these.
COLUMN_DEFAULTS: dict[str, str] = {
    "ffn_hidden": "required for dense layers; blank allowed when every layer is MoE (moe_experts > 0 and "
                  "moe_dense_layers 0 or blank): then unused",
    "kv_heads": "heads (multi-head attention)",
    "head_dim": "hidden / heads",
    "attention": "mha when kv_heads = heads, else gqa (mla needs the MLA rank columns or a catalog match)",
    "moe_experts": "blank or 0: dense model (the other moe_* columns are then ignored)",
    "moe_shared_experts": "0",
    "moe_dense_layers": "0 (every layer MoE)",
    "cp": "1",
    "ep": "1",
    "etp": "tp (expert tensor parallel size; Megatron-Core's default: megatron-core 0.19.2 "
           "megatron/core/model_parallel_config.py:130 expert_tensor_parallel_size = None, set to "
           "tensor_model_parallel_size in __post_init__, lines 506-507); where ep*tp does not divide tp*cp*dp "
           "(Megatron-Core refuses that layout) the largest divisor of tp that does, gcd(tp, tp*cp*dp/ep). "
           "The Megatron-Bridge MoE recipes state expert_tensor_parallel_size (1 in every one, "
           "data/bridge_recipes.csv): rows taken from them carry it",
    "vp": "pp = 1: 1; pp > 1: the interleaving of the published recipes, LAYERS_PER_VIRTUAL_STAGE = 2 layers per "
          "virtual stage, vp = round(layers / (2 pp)), where Megatron's interleaved schedule allows it (micro-batches a "
          "multiple of pp, pp*vp <= layers), else 1",
    "mbs": "1",
    "dp": "gpu_count / (tp pp cp)",
    "gbs": "one sequence per GPU: gpu_count rounded to a whole number (>= 1) of mbs*dp micro-batches (the "
           "Megatron papers' convention, Narayanan 2021 Table 1: 1T on 3072 GPUs with batch 3072)",
    "zero_stage": "1 (Megatron distributed optimizer over dp*cp; 3 for FSDP / Megatron-FSDP); stack fsdp: 3",
    "sequence_parallel": "on when tp > 1",
    "recompute": "unknown or blank: the least recompute that fits memory: none, selective, then full "
                 "recompute of the fewest layers per virtual pipeline chunk (Megatron recompute_method=block)",
    "recompute_modules": "Megatron-Core module names separated by ';' that 'selective' recomputes (default "
                         "memory.SELECTIVE_MODULES)",
    "recompute_num_layers": "blank: recompute full recomputes every layer; N (only with recompute full): Megatron-Core "
                            "recompute_method=block, recompute_num_layers=N, as the Megatron-Bridge recipes state it: "
                            "the first N layers of each virtual pipeline chunk fully recomputed, the others not at all",
    "fp8_param_gather": "false: 16-bit weights beside their low-precision copy; true (8-bit and 4-bit precisions "
                        "only): Megatron-Core fp8_param_gather as the Megatron-Bridge FP8 and MXFP8 benchmark "
                        "recipes set it, the linear weights held only as their low-precision copy "
                        "(memory.breakdown lowp_params)",
    "reserve_gib": f"{memory.RESERVE_GIB:g} GiB per GPU kept free (CUDA context, NCCL buffers, allocator)",
    "moe_dispatcher": "deepep (DeepEP-class dispatch: one copy per destination GPU, once per node over the NIC, "
                      "as the Megatron-Bridge DeepSeek-V3 recipes run it); alltoall: Megatron-Core's alltoall "
                      "token dispatcher (k copies per token, chunk sorts around the experts)",
    "schedule": "unknown (1f1b: Megatron-Core default, MoE all-to-all in line, not hidden; ep_overlap: "
                "Megatron-Core overlap_moe_expert_parallel_comm; dualpipe: DeepSeek-V3 DualPipe; both hide the "
                "all-to-all under the other micro-batch's compute; unknown: half of it, comm.SCHEDULE_EP_OVERLAP)",
    "stack": "megatron (Megatron-Core / Megatron-LM / NeMo / Megatron-Bridge with Transformer Engine, the stack of "
             "every row in data/); fsdp: PyTorch FSDP2 stacks (TorchTitan, llm-foundry / Composer): zero_stage 3 "
             "when blank (2 or 3 allowed), gradients reduce-scattered and held in fp32, fp32 parameter shards that are "
             "the master weights (16 bytes per parameter with Adam m, v), parameters gathered in "
             "bf16 (TorchTitan training.dtype / mixed_precision_reduce / mixed_precision_param), TP collectives not overlapped "
             "(no async TP by default); structural only, nothing calibrated (comm.STACK_TP_OVERLAP)",
    "pp_split": "auto: the split Megatron-Core accepts for the layout: even where pp*vp divides the layers, else "
                "account where it divides layers + 2, else balanced (perf.pipeline_split). even: Megatron-Core's "
                "default, L / pp transformer layers per stage, the output layer and the loss on the last stage "
                "besides (megatron-core 0.19.2 transformer_config.py:130-134); account: "
                "account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split, the embedding and "
                "the loss each take a layer's slot; balanced: a custom pipeline_model_parallel_layout that spreads the "
                "output layer's work over the stages (perf.PP_SPLITS); the slowest stage sets the pace",
    "tp_comm_overlap": "the stack's (megatron: Transformer Engine's tp_comm_overlap, half of the TP collectives "
                       "hidden before the fitted overlap scale; fsdp: none hidden); true / false: the run states its TP "
                       "collectives overlapped (Megatron-Core tp_comm_overlap, TorchTitan async TP) or not",
    "attn_kernel": "flash (fused attention, scores on chip: every stack since FlashAttention, 2022); unfused: "
                   "Megatron-LM before it (batched QK^T / PV GEMMs over the full score matrix, softmax and "
                   "dropout as memory-bound kernels; perf.ATTN_KERNELS)",
    "tp, pp": "both blank: scaletax predict searches the best layout on gpu_count GPUs",
    "tokens": "blank: no time or cost columns; a token budget (e.g. 1.5e13): scaletax predict adds the days, "
              "GPU-hours and cost of training on it at the predicted throughput (cost.run_costs)",
    "price_per_gpu_hour": "the default scenario's price of the row's GPU (economics.prices), with the scenario's "
                          "energy factors, electricity price and goodput",
    "measured_*": "optional: measured_tokens_per_s_per_gpu, else measured_model_tflops_per_gpu, else measured_mfu",
}
INT_COLUMNS: tuple[str, ...] = (
    "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab", "seq_len",
    "moe_experts", "moe_top_k", "moe_ffn_hidden", "moe_shared_experts", "moe_dense_layers",
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
    "gpu_count", "tp", "pp", "cp", "ep", "etp", "vp", "dp", "mbs", "gbs", "zero_stage", "recompute_num_layers",
)
FLOAT_COLUMNS: tuple[str, ...] = (
    "total_params_b", "active_params_b", "measured_tokens_per_s_per_gpu",
    "measured_model_tflops_per_gpu", "measured_mfu", "reserve_gib", "tokens", "price_per_gpu_hour",
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

#: The project's published-runs table (calibration and validation).
RUNS_CSV = DATA_DIR / "published_runs.csv"
#: Published training runs outside the calibration table (runs-table schema, with their
#: measurement), never calibrated on: predicted out of sample by ``validate.heldout_predictions``.
HELDOUT_CSV = DATA_DIR / "heldout_runs.csv"
#: 72 more published runs (runs-table schema; ``data/sources/validation_runs.py`` builds it from the
#: source table and says where every filled column comes from): the validation table.
VALIDATION_CSV = DATA_DIR / "published_runs_validation.csv"
#: How a runs-table row becomes a step-time input (stated once, applied to every row; the column
#: defaults of :data:`COLUMN_DEFAULTS` plus the MoE modelling choices):
ROW_CONVENTIONS: dict[str, str] = {
    "recompute": COLUMN_DEFAULTS["recompute"],
    "gbs": COLUMN_DEFAULTS["gbs"],
    "etp": COLUMN_DEFAULTS["etp"],
    "ep_dispatch": "MoE all-to-all with per-node deduplication (DeepEP / HybridEP, used by the "
                   "Megatron-Bridge DeepSeek-V3 recipes; perf.ep_dedup_factor) unless the row's moe_dispatcher "
                   "says alltoall",
    "routing": "balanced routing (the Megatron-Bridge MoE rows force-balance routing)",
}


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


def _all_moe(row: dict[str, Any]) -> bool:
    """Every layer is MoE: moe_experts > 0 and moe_dense_layers 0 or blank."""
    e, d = _int(row, "moe_experts", 0), _int(row, "moe_dense_layers", 0)
    return bool(e) and not d


def row_model(row: dict[str, Any]) -> models.Model:
    """The architecture of a row (``models.from_row``); errors name the column.

    ``ffn_hidden`` blank on an all-MoE row (:data:`COLUMN_DEFAULTS`): the dense width is unused;
    the catalog model of the same shape gives it when there is one, else ``moe_ffn_hidden``.
    """
    if _blank(row.get("ffn_hidden")):
        if not _all_moe(row):
            raise _CellError("ffn_hidden", "required (a dense model or moe_dense_layers > 0) but empty")
        row = {**row, "ffn_hidden": _unused_ffn(row)}
    try:
        return models.from_row(row)
    except ValueError as exc:
        msg = str(exc)
        col = msg.split("'")[1] if msg.startswith("column") and "'" in msg else "layers"
        raise _CellError(col, msg.split(": ", 1)[-1] if msg.startswith("column") else msg) from None


#: Every column :func:`row_model` reads (rows equal on these have the same architecture).
MODEL_COLUMNS: tuple[str, ...] = tuple(dict.fromkeys((*models.ROW_REQUIRED, *models.ROW_INT_COLUMNS,
                                                       *models._STYLE_FIELDS, "attention", "total_params_b",
                                                       "active_params_b", "model")))


def _cached_model(row: dict[str, Any], cache: dict) -> tuple[tuple, models.Model]:
    """(model key, :func:`row_model` of ``row``), reusing ``cache`` for rows of the same architecture."""
    key = tuple(map(row.get, MODEL_COLUMNS))
    model = cache.get(key)
    if model is None:
        model = cache[key] = row_model(row)
    return key, model


def _unused_ffn(row: dict[str, Any]) -> int:
    """The dense FFN width of an all-MoE row: the catalog's for the same shape, else the expert width."""
    shape = {c: _int(row, c) for c in ("layers", "hidden", "heads", "moe_experts", "moe_top_k", "moe_ffn_hidden")}
    try:
        hits = [m for m in models.catalog().values() if m.n_dense_layers == 0 and m.is_moe
                and all(getattr(m, c) == v for c, v in shape.items())]
    except Exception:  # noqa: BLE001 - a broken catalog only loses the match
        hits = []
    if len(hits) == 1:
        return int(hits[0].ffn_hidden)
    fe = shape["moe_ffn_hidden"]
    if not fe:
        raise _CellError("moe_ffn_hidden", "required for an MoE model but empty")
    return int(fe)


def _int(row: dict[str, Any], col: str, default: int | None = None) -> int | None:
    v = row.get(col)
    if type(v) is int:  # the common case first (read_runs parses integer columns)
        return v
    if _blank(v):
        return default
    return v if isinstance(v, int) and not isinstance(v, bool) else _parse_int(col, str(v))


def default_etp(tp, cp, dp, ep):
    """``etp`` of a row that leaves it blank (:data:`COLUMN_DEFAULTS`): tp, Megatron-Core's default
    (megatron-core 0.19.2 ``model_parallel_config.py``: ``expert_tensor_parallel_size`` None is set to
    ``tensor_model_parallel_size`` in ``__post_init__``); where ep*tp does not divide tp*cp*dp, the
    largest divisor of tp that does, gcd(tp, tp*cp*dp/ep) (1 where ep does not divide tp*cp*dp: the
    folding rule then fails as with any etp). Scalars or int arrays."""
    n = tp * cp * dp
    return np.where(n % ep == 0, np.gcd(tp, n // np.maximum(ep, 1)), 1) if isinstance(n, np.ndarray) else (
        math.gcd(tp, n // ep) if n % ep == 0 else 1)


def default_gbs(gpus: int, mbs: int, dp: int) -> int:
    """``gbs`` of a row that leaves it blank (:data:`COLUMN_DEFAULTS`): one sequence per GPU,
    rounded to a whole number (>= 1) of ``mbs * dp`` micro-batches."""
    q = mbs * dp
    return max(1, round(gpus / q)) * q


#: Layers per virtual pipeline stage of the published recipes, the default interleaving of a row whose
#: ``vp`` is blank: the median over the rows of data/published_runs.csv that state vp with pp > 1
#: (NVIDIA's MLPerf and Megatron-Bridge configurations: GPT-3 96/(6x8) and 96/(8x6) = 2, Llama 3.1 405B
#: 126/(8x8) and 126/(16x4) = 1.97, 126/(16x8) = 0.98, Llama 3 70B 80/(8x5) = 2, DeepSeek-V3 61/(8x4) =
#: 1.9, 61/(8x2) and 61/(4x4) = 3.8). A pipelined run that states no schedule is assumed to be tuned
#: like them, not to run plain 1F1B with a (pp - 1)/n_micro bubble (tests/test_runs.py holds it to the table).
LAYERS_PER_VIRTUAL_STAGE = 2


def default_vp(layers: int, pp: int, n_micro: int) -> int:
    """Interleaving assumed for a blank ``vp`` (:data:`COLUMN_DEFAULTS`): round(layers / (2 pp))
    virtual stages per rank when pp > 1 and Megatron's interleaved 1F1B accepts it (n_micro a
    multiple of pp, pp * vp <= layers), else 1."""
    if pp <= 1 or n_micro % pp:
        return 1
    vp = max(1, int(layers / (LAYERS_PER_VIRTUAL_STAGE * pp) + 0.5))
    return vp if pp * vp <= layers else 1


def row_layout(row: dict[str, Any], recompute: str | None = None) -> Layout:
    """The layout of a row with :data:`COLUMN_DEFAULTS`; ``recompute`` overrides the row's.

    A row whose recompute is "unknown"/empty gets "none" here (:func:`plan_row` resolves it).
    """
    tp, pp, cp, ep, etp, dp, vp, mbs, gbs, sp, zero, rc = _layout_values(row, recompute)
    return Layout(tp=tp, pp=pp, cp=cp, dp=dp, ep=ep, etp=etp, vp=vp, mbs=mbs, gbs=gbs,
                  sequence_parallel=sp, zero_stage=zero, recompute=rc)


def _layout_values(row: dict[str, Any], recompute: str | None = None) -> tuple:
    """The checked fields of :func:`row_layout` (tp, pp, cp, ep, etp, dp, vp, mbs, gbs,
    sequence_parallel or None, zero_stage, recompute name), without building a ``Layout``."""
    tp, pp = _int(row, "tp"), _int(row, "pp")
    gpus = _int(row, "gpu_count")
    for col, v in (("tp", tp), ("pp", pp), ("gpu_count", gpus)):
        if v is None:
            raise _CellError(col, "required for the layout but empty")
        if v <= 0:
            raise _CellError(col, f"must be positive (got {v})")
    cp = _int(row, "cp", 1)
    dp = _int(row, "dp")
    ep, etp, vp, mbs, gbs = (_int(row, "ep", 1), _int(row, "etp"), _int(row, "vp", 1), _int(row, "mbs", 1),
                             _int(row, "gbs"))
    for col, v in (("cp", cp), ("dp", dp), ("ep", ep), ("vp", vp), ("mbs", mbs), ("gbs", gbs), ("etp", etp)):
        if v is not None and v <= 0:
            raise _CellError(col, f"must be positive (got {v})")
    if dp is None:
        if gpus % (tp * pp * cp):
            raise _CellError("gpu_count", f"gpu_count={gpus} is not divisible by tp*pp*cp={tp * pp * cp} (dp empty)")
        dp = gpus // (tp * pp * cp)
    if tp * pp * cp * dp != gpus:
        raise _CellError("gpu_count", f"tp*pp*cp*dp = {tp}*{pp}*{cp}*{dp} = {tp * pp * cp * dp} must equal gpu_count={gpus}")
    if gbs is None:
        gbs = default_gbs(gpus, mbs, dp)
    if gbs % (mbs * dp):
        raise _CellError("gbs", f"gbs={gbs} must be a multiple of mbs*dp={mbs * dp}")
    if etp is None:
        etp = default_etp(tp, cp, dp, ep)
    if _blank(row.get("vp")):
        layers = _int(row, "layers")
        vp = default_vp(layers, pp, gbs // (mbs * dp)) if layers else 1
    if (tp * cp * dp) % (ep * etp):
        raise _CellError("ep", f"ep*etp={ep}*{etp} must divide tp*cp*dp={tp * cp * dp} (MoE parallel folding)")
    fsdp = row_stack(row) == "fsdp"
    zero = _int(row, "zero_stage", 3 if fsdp else 1)
    if zero not in (0, 1, 2, 3):
        raise _CellError("zero_stage", f"must be 0, 1, 2 or 3 (got {zero})")
    if fsdp and zero < 2:
        raise _CellError("zero_stage", f"must be 2 or 3 with stack fsdp (got {zero}): FSDP2 fully_shard shards "
                                       "gradients and optimizer state (2) and parameters (3)")
    sp = row.get("sequence_parallel")
    sp = None if _blank(sp) else _parse_bool("sequence_parallel", sp)
    rc = recompute
    if rc is None:
        rc = _stated_recompute(row)
        rc = "none" if rc == "unknown" else rc
    return tp, pp, cp, ep, etp, dp, vp, mbs, gbs, sp, zero, rc


def _int_columns(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
    """{column: (values, given)} of integer columns whose every cell is an int or None (what
    :func:`read_runs` makes of them), int64 with 0 where blank; None when a cell is anything else
    (text, a float, a bool: :func:`_int` then parses it row by row) or too large for int64."""
    cells = [tuple(map(r.get, columns)) for r in rows]
    if not set(map(type, itertools.chain.from_iterable(cells))) <= {int, type(None)}:
        return None
    obj = np.array(cells, dtype=object).reshape(len(rows), len(columns))
    given = obj != None  # noqa: E711 - elementwise test of the object array
    try:
        vals = np.where(given, obj, 0).astype(np.int64)
    except OverflowError:
        return None
    return {c: (vals[:, j], given[:, j]) for j, c in enumerate(columns)}


def _by_cell(rows: Sequence[dict[str, Any]], col: str, fn) -> list:
    """``fn(row)`` of every row, where ``fn`` reads only the cell ``col``: called once per distinct cell value."""
    seen: dict = {}
    out = []
    for r in rows:
        v = r.get(col)
        key = (type(v), v)  # True and 1 are equal keys, not equal cells
        try:
            y = seen[key]
        except KeyError:
            y = seen[key] = fn(r)
        except TypeError:  # an unhashable cell
            y = fn(r)
        out.append(y)
    return out


def _layout_table(rows: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`_layout_values`, :func:`_stated_recompute` and :func:`_block_layers` of every row at
    once: (n x 12 int64 in ``plan_rows``' column order, recompute unknown, recompute_num_layers or 0).
    None when a row breaks a rule or has a cell :func:`_int_column` leaves to the row-by-row path
    (which then raises the row's error, worded as always)."""
    cols = _int_columns(rows, ("tp", "pp", "gpu_count", "cp", "dp", "ep", "etp", "vp", "mbs", "gbs", "zero_stage",
                               "recompute_num_layers", "layers"))
    if cols is None:
        return None
    (tp, tp_g), (pp, pp_g), (gpus, gpus_g) = cols["tp"], cols["pp"], cols["gpu_count"]
    if not (tp_g.all() and pp_g.all() and gpus_g.all()) or (tp <= 0).any() or (pp <= 0).any() or (gpus <= 0).any():
        return None
    given = {c: cols[c][1] for c in ("cp", "dp", "ep", "etp", "vp", "mbs", "gbs")}
    if any(((cols[c][0] <= 0) & g).any() for c, g in given.items()):
        return None
    big = MAX_GPU_COUNT  # products below stay far inside int64
    if any((cols[c][0] > big).any() for c in ("tp", "pp", "gpu_count", "cp", "dp", "ep", "etp", "mbs")):
        return None
    cp, ep, mbs = (np.where(given[c], cols[c][0], 1) for c in ("cp", "ep", "mbs"))
    tpc = tp * pp * cp
    if (tpc > gpus).any() or (~given["dp"] & (gpus % tpc != 0)).any():
        return None
    dp = np.where(given["dp"], cols["dp"][0], gpus // np.maximum(tpc, 1))
    if (tpc * dp != gpus).any():
        return None
    etp = np.where(given["etp"], cols["etp"][0], default_etp(tp, cp, dp, ep))
    q = mbs * dp
    gbs = np.where(given["gbs"], cols["gbs"][0], np.maximum(1, np.rint(gpus / q)).astype(np.int64) * q)
    if (gbs % q != 0).any():
        return None
    # default_vp, vectorized: round(layers / (2 pp)) where pp > 1 and the micro-batches are a multiple of pp
    layers = cols["layers"][0]
    n_micro = gbs // q
    auto = np.maximum(1, np.floor(layers / (LAYERS_PER_VIRTUAL_STAGE * pp) + 0.5)).astype(np.int64)
    auto = np.where((pp <= 1) | (n_micro % pp != 0) | (pp * auto > layers) | (layers == 0), 1, auto)
    vp = np.where(given["vp"], cols["vp"][0], auto)
    if ((tp * cp * dp) % (ep * etp) != 0).any():
        return None
    try:
        fsdp = np.array([v == "fsdp" for v in _by_cell(rows, "stack", row_stack)], dtype=bool)
    except ValueError:
        return None
    zero = np.where(cols["zero_stage"][1], cols["zero_stage"][0], np.where(fsdp, 3, 1))
    if ((zero < 0) | (zero > 3)).any() or (fsdp & (zero < 2)).any():
        return None
    try:
        sp = _by_cell(rows, "sequence_parallel", lambda r: None if _blank(r.get("sequence_parallel"))
                      else _parse_bool("sequence_parallel", r.get("sequence_parallel")))
        stated = _by_cell(rows, "recompute", _stated_recompute)
    except ValueError:
        return None
    sp_on = np.array([v is None or v for v in sp], dtype=bool) & (tp > 1)
    rc = np.array([RECOMPUTE_CODE["none" if v == "unknown" else v] for v in stated], dtype=np.int64)
    n_blk, blk_g = cols["recompute_num_layers"]
    if ((n_blk < 1) & blk_g).any() or (blk_g & (rc != RECOMPUTE_CODE["full"])).any():
        return None
    vals = np.stack([tp, pp, cp, ep, etp, dp, vp, mbs, gbs, sp_on.astype(np.int64), zero, rc], axis=1)
    return vals, np.array([v == "unknown" for v in stated], dtype=bool), np.where(blk_g, n_blk, 0)


def _block_layers(row: dict[str, Any]) -> int | None:
    """``recompute_num_layers`` of a row (None when blank), checked: >= 1 and only with recompute full."""
    rc = _stated_recompute(row)
    n = _int(row, "recompute_num_layers")
    if n is None:
        return None
    if n < 1:
        raise _CellError("recompute_num_layers", f"must be >= 1 (got {n})")
    if rc != "full":
        raise _CellError("recompute_num_layers", f"needs recompute full (got {rc!r}): Megatron-Core "
                                                 "recompute_method=block recomputes whole layers")
    return n


def block_fraction(layers: int, pp, vp, num_layers) -> np.ndarray:
    """Share of layers fully recomputed by Megatron-Core ``recompute_method=block`` with
    ``recompute_num_layers`` N: the first N of each virtual pipeline chunk's ceil(L / (pp vp))
    layers (Megatron-LM ``TransformerBlock._checkpointed_forward``: layer l of a chunk is
    checkpointed when l < N), i.e. min(N, c) / c (the chunk size :func:`perf.least_recompute` uses)."""
    c = np.ceil(layers / (np.asarray(pp, dtype=np.float64) * np.asarray(vp, dtype=np.float64)))
    return np.minimum(np.asarray(num_layers, dtype=np.float64), c) / c


def _stated_recompute(row: dict[str, Any]) -> str:
    rc = str(row.get("recompute") or "unknown").strip().lower() or "unknown"
    if rc not in RECOMPUTE_VALUES:
        raise _CellError("recompute", f"must be one of {', '.join(RECOMPUTE_VALUES)} or empty (got {rc!r})")
    return rc


def memory_options(row: dict[str, Any]) -> dict[str, Any]:
    """Per-row options of ``memory.breakdown``: ``reserve_gib``, ``recompute_modules``,
    ``fp8_param_gather`` (``lowp_params``) and ``stack`` (fsdp: :func:`fsdp_memory_options`) columns."""
    opts: dict[str, Any] = {}
    mods = _modules(row)
    if mods is not None:
        opts["selective_modules"] = mods
    if not _blank(row.get("reserve_gib")):
        opts["reserve_gib"] = float(row["reserve_gib"])
    if _param_gather(row):
        opts["lowp_params"] = True
    if row_stack(row) == "fsdp":
        opts.update(fsdp_memory_options())
    return opts


def fsdp_memory_options() -> dict[str, Any]:
    """``memory.breakdown`` options of a PyTorch FSDP2 stack (TorchTitan's defaults, ``recipes``):
    fp32 sharded parameters that are the master weights (``FSDP_PARAM_BYTES``), fp32 gradient
    shards (``FSDP_GRAD_BYTES``, reduce_dtype float32), Adam m and v only (``FSDP_OPTIMIZER_BYTES``),
    and the layers in flight gathered in bf16 (``mixed_precision_param``): 16 bytes per parameter
    over the shard group plus the gathered layers, where Megatron's distributed optimizer with
    ZeRO-3 holds 2 + 4 + 12."""
    return {"grad_bytes": recipes.FSDP_GRAD_BYTES, "param_bytes": recipes.FSDP_PARAM_BYTES,
            "optimizer_bytes": recipes.FSDP_OPTIMIZER_BYTES, "gather_bytes": recipes.HALF_BYTES}


def _param_gather(row: dict[str, Any]) -> bool:
    """``fp8_param_gather`` of a row (false when blank), checked: only with a low-precision recipe."""
    v = row.get("fp8_param_gather")
    if _blank(v) or not _parse_bool("fp8_param_gather", v):
        return False
    prec = str(row.get("precision") or "").strip().lower()
    if prec in memory.PRECISIONS and not recipes.training(prec).lowp_copy_bytes:
        raise _CellError("fp8_param_gather", f"needs an 8-bit or 4-bit precision (got {prec!r}): a {prec} "
                                             "recipe has no low-precision weight copy")
    return True


@dataclass(frozen=True)
class RowPlan:
    """What the model runs for one row.

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


def _default_notes(row: dict[str, Any], gbs: int, vp: int, is_moe: bool, etp: int = 1) -> list[str]:
    """The :data:`COLUMN_DEFAULTS` a row's layout took, as text (for :attr:`RowPlan.assumptions`)."""
    notes = []
    if _blank(row.get("gbs")):
        notes.append(f"gbs={gbs} (one sequence per GPU)")
    if _blank(row.get("vp")) and vp > 1:
        notes.append(f"vp={vp} (assumed: {LAYERS_PER_VIRTUAL_STAGE} layers per virtual stage)")
    if is_moe and _blank(row.get("etp")):
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
    from scaletax import perf

    model = row_model(row)
    gpu = str(row["hardware"]).strip()
    prec = str(row["precision"]).strip().lower()
    notes: list[str] = []
    lay = row_layout(row) if layout is None else layout
    if layout is None:
        notes += _default_notes(row, lay.gbs, lay.vp, model.is_moe, lay.etp)
    opts = {**memory_opts, **memory_options(row)}
    stated = _stated_recompute(row)
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
        n_block = _block_layers(row) if layout is None else None
        if n_block is not None:
            # Megatron block recompute: full on the first N layers of each chunk, none on the others
            frac = float(block_fraction(model.layers, lay.pp, lay.vp, n_block))
            rest = "none"
            gib = float(mixed_recompute_gib(model, LayoutArray.from_layouts([lay]), prec, [frac],
                                            [RECOMPUTE_CODE[rest]], **opts)["total"][0])
        else:
            gib = float(memory.breakdown(model, lay, prec, **opts).total[0] / memory.GIB)
    measured, basis = measured_tokens_per_s(row, model)
    return RowPlan(row=row, model=model, layout=lay, recompute_fraction=frac if lay.recompute == "full" else 0.0,
                   recompute_assumed=assumed, assumptions=tuple(notes), options=opts, memory_gib=gib,
                   measured=measured, basis=basis, recompute_rest=rest)


def mixed_recompute_gib(model, la: LayoutArray, precision: str, fraction, rest, **options: Any) -> dict[str, np.ndarray]:
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
    hardware: str
    precision: str
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
        from scaletax import perf

        return perf.prepare(self.model, self.layouts, self.precision, self.hardware,
                            recompute_fraction=self.recompute_fraction, recompute_rest=self.rest,
                            ep_dispatch=self.ep_dispatch, schedule=self.schedule, stack=self.stack,
                            pp_split=self.pp_split, attn_kernel=self.attn_kernel,
                            tp_comm_overlap=self.tp_comm_overlap)


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
        from scaletax import hardware, perf

        batches: dict[tuple, list[PlanGroup]] = {}
        for g in self.groups:
            gpu = hardware.get(g.hardware)  # the first unsupported precision in table order raises, as per group
            gpu.peak_flops(g.precision), gpu.peak_flops(perf.compute_precision(gpu, g.precision))
            batches.setdefault((id(g.model), g.precision, g.ep_dispatch, g.schedule, g.stack, g.pp_split,
                                  g.attn_kernel, g.tp_comm_overlap), []).append(g)
        parts, index = [], []
        for gs in batches.values():
            index += [g.index for g in gs]
            if len(gs) == 1:
                parts.append(gs[0].step_inputs())
                continue
            gpus: list[str] = []
            for g in gs:
                gpus += [g.hardware] * len(g.index)
            g0 = gs[0]
            parts.append(perf.prepare(g0.model, LayoutArray.concat([g.layouts for g in gs]), g0.precision, gpus,
                                      recompute_fraction=np.concatenate([g.recompute_fraction for g in gs]),
                                      recompute_rest=np.concatenate([g.rest for g in gs]),
                                      ep_dispatch=g0.ep_dispatch, schedule=g0.schedule, stack=g0.stack,
                                      pp_split=g0.pp_split, attn_kernel=g0.attn_kernel,
                                      tp_comm_overlap=g0.tp_comm_overlap))
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
_OPTION_COLUMNS: tuple[str, ...] = ("recompute_modules", "reserve_gib", "fp8_param_gather", "stack")
_RUN_COLUMNS: tuple[str, ...] = ("moe_dispatcher", "schedule", "stack", "pp_split", "attn_kernel", "tp_comm_overlap")


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
    from scaletax import hardware, perf

    rows = list(rows)
    n = len(rows)
    nums = list(row_numbers) if row_numbers is not None else [i + 2 for i in range(n)]
    cache: dict = {}
    table = _layout_table(rows)  # every row's layout at once; None: row by row (and its error)
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
            mkey, model = _cached_model(row, cache)
            is_moe = moe_of.get(mkey)
            if is_moe is None:
                is_moe = moe_of[mkey] = model.is_moe
            moe.append(is_moe)
            if table is None:
                tp, pp, cp, ep, etp, dp, vp, mbs, gbs, sp, zero, rc = _layout_values(row)
            gpu = str(row["hardware"]).strip()
            prec = str(row["precision"]).strip().lower()
            opts, opt_key = _cached_cells(opt_cache, ("opts", prec, *map(row.get, _OPTION_COLUMNS)), lambda: (
                opts := {**memory_opts, **memory_options(row)}, tuple(sorted(opts.items()))))
            if table is None:
                unknown[i] = _stated_recompute(row) == "unknown"
                n_block[i] = _block_layers(row) or 0
            m, b = measured_tokens_per_s(row, model)
            dispatch, schedule, stack, split, kernel, tpov = _cached_cells(
                opt_cache, ("run", is_moe, *map(row.get, _RUN_COLUMNS)),
                lambda: (row_dispatch(row) if is_moe else "alltoall", row_schedule(row), row_stack(row),
                         row_pp_split(row), row_attn_kernel(row), row_tp_overlap(row)))
        except (ValueError, hardware.HardwareError) as exc:
            raise RunsTableError(f"row {nums[i]}: {exc}") from None
        if table is None:
            vals[i] = (tp, pp, cp, ep, etp, dp, vp, mbs, gbs, int((True if sp is None else sp) and tp > 1), zero,
                       RECOMPUTE_CODE[rc])
        measured.append(m)
        basis.append(b)
        key = (mkey, gpu, prec, opt_key, dispatch, schedule, stack, split, kernel, tpov)
        if key not in by_key:
            by_key[key] = []
            info[key] = (model, gpu, prec, opts, dispatch, schedule, stack, split, kernel, tpov)
        by_key[key].append(i)
    assumed = [""] * n
    frac_all = np.ones(n)
    groups = []
    for key, members in by_key.items():
        model, gpu, prec, opts, dispatch, schedule, stack, split, kernel, tpov = info[key]
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
        groups.append(PlanGroup(model=model, hardware=gpu, precision=prec, options=opts, index=idx, layouts=la,
                                recompute_fraction=frac, ep_dispatch=dispatch, schedule=schedule,
                                recompute_rest=rest if np.any(blk) else None, stack=stack, pp_split=split,
                                attn_kernel=kernel, tp_comm_overlap=tpov))
    notes: list[tuple[str, ...]] = []
    for row, gbs, vp, etp, is_moe, unk, a, f in zip(rows, vals[:, 8].tolist(), vals[:, 6].tolist(), vals[:, 4].tolist(),
                                                    moe, unknown.tolist(), assumed, frac_all.tolist()):
        note = _default_notes(row, gbs, vp, is_moe, etp)
        if unk:
            note.append(_recompute_note(a, f))
        notes.append(tuple(note))
    return TablePlan(rows=rows, groups=tuple(groups), recompute_assumed=assumed, assumptions=notes,
                     measured=measured, basis=basis)


def measured_tokens_per_s(row: dict[str, Any], model: models.Model | None = None) -> tuple[float | None, str]:
    """(measured tokens/s per GPU, how it was obtained); (None, "") when the row has nothing.

    Priority: ``measured_tokens_per_s_per_gpu``; else TFLOP/s of a Narayanan-2021-style row
    (recompute included, eq. 3 with full recompute) or MFU of a Korthikanti-2022-style row (eq. 3
    without recompute), both with the papers' non-causal attention count (module docstring).
    Other rows with only TFLOP/s or MFU use the model's own (causal) counts.

    Measured quantity: tokens/s per GPU. Rows that do not report it are converted with the
    formula their source used, so the comparison is on what they measured:
    - Narayanan et al. 2021 (arXiv 2104.04473) report TFLOP/s per GPU *including* the recomputed
      forward pass, counted with their eq. 3, 96 B s l h^2 (1 + s / 6h + V / 16 l h) per iteration:
      tokens/s = TFLOP/s / (96 l h^2 (1 + s / 6h + V / 16 l h)).
    - Korthikanti et al. 2022 (arXiv 2205.05198) report MFU against the 16-bit dense peak with the
      same formula without recompute, 72 B s l h^2 (1 + s / 6h + V / 12 l h):
      tokens/s = MFU x peak / (72 l h^2 (1 + s / 6h + V / 12 l h)).
    (Both are non-causal counts; ``models.Model.hardware_flops_per_token("full", causal=False)`` and
    ``model_flops_per_token(causal=False)`` reproduce them to < 0.01%.)
    """
    from scaletax import hardware

    model = row_model(row) if model is None else model
    tps = row.get("measured_tokens_per_s_per_gpu")
    if not _blank(tps):
        return float(tps), "tokens/s per GPU (reported)"
    l, h, s, V = model.layers, model.hidden, model.seq_len, model.vocab
    rid = str(row.get("run_id", ""))
    tf, mfu = row.get("measured_model_tflops_per_gpu"), row.get("measured_mfu")
    peak = hardware.get(str(row["hardware"]).strip()).peak_flops(str(row["precision"]).strip().lower())
    if rid.startswith("narayanan") and not _blank(tf):
        per_tok = 96.0 * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
        return float(tf) * 1e12 / per_tok, "TFLOP/s incl. recompute / Narayanan 2021 eq. 3 (full recompute, non-causal)"
    if rid.startswith("korthikanti") and not _blank(mfu):
        per_tok = 72.0 * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
        return float(mfu) * peak / per_tok, "MFU x 16-bit peak / Korthikanti 2022 model FLOPs (non-causal)"
    if not _blank(tf):
        return float(tf) * 1e12 / model.model_flops_per_token(), "model TFLOP/s / model FLOPs per token (causal)"
    if not _blank(mfu):
        return float(mfu) * peak / model.model_flops_per_token(), "MFU x peak / model FLOPs per token (causal)"
    return None, ""


def row_schedule(row: dict[str, Any]) -> str:
    """The training schedule a row states (``schedule`` column, :data:`COLUMN_DEFAULTS`), lower case;
    "unknown" when blank or absent."""
    from scaletax import comm

    v = str(row.get("schedule") or "").strip().lower() or "unknown"
    if v not in comm.SCHEDULES:
        raise _CellError("schedule", f"must be one of {', '.join(comm.SCHEDULES)} or empty (got {v!r})")
    return v


#: ``stack`` column values (:data:`COLUMN_DEFAULTS`; ``perf.prepare``'s ``stack``, ``comm.STACKS``).
STACKS: tuple[str, ...] = ("megatron", "fsdp")


def row_stack(row: dict[str, Any]) -> str:
    """The software stack a row states (``stack`` column, :data:`COLUMN_DEFAULTS`), lower case;
    "megatron" when blank or absent."""
    v = str(row.get("stack") or "").strip().lower() or "megatron"
    if v not in STACKS:
        raise _CellError("stack", f"must be one of {', '.join(STACKS)} or empty (got {v!r})")
    return v


def row_pp_split(row: dict[str, Any]) -> str:
    """How a row's pipeline stages split the model (``pp_split`` column, :data:`COLUMN_DEFAULTS`,
    ``perf.PP_SPLITS``), lower case; "auto" when blank or absent: the split Megatron-Core accepts for
    the row's layout (``perf.pipeline_split``)."""
    from scaletax import perf

    v = str(row.get("pp_split") or "").strip().lower() or "auto"
    if v not in perf.PP_SPLITS:
        raise _CellError("pp_split", f"must be one of {', '.join(perf.PP_SPLITS)} or empty (got {v!r})")
    return v


def row_attn_kernel(row: dict[str, Any]) -> str:
    """The attention kernel a row ran (``attn_kernel`` column, :data:`COLUMN_DEFAULTS`,
    ``perf.ATTN_KERNELS``), lower case; "flash" when blank or absent."""
    from scaletax import perf

    v = str(row.get("attn_kernel") or "").strip().lower() or "flash"
    if v not in perf.ATTN_KERNELS:
        raise _CellError("attn_kernel", f"must be one of {', '.join(perf.ATTN_KERNELS)} or empty (got {v!r})")
    return v


def row_tp_overlap(row: dict[str, Any]) -> bool | None:
    """Whether a row states its tensor-parallel collectives overlapped with the GEMMs
    (``tp_comm_overlap`` column, :data:`COLUMN_DEFAULTS`: Megatron-Core's ``tp_comm_overlap``,
    TorchTitan's async TP); None when blank (the stack's default, ``comm.STACK_TP_OVERLAP``)."""
    v = row.get("tp_comm_overlap")
    return None if _blank(v) else _parse_bool("tp_comm_overlap", v)


#: ``moe_dispatcher`` column values and the ``perf.prepare`` ``ep_dispatch`` each runs.
DISPATCHERS: dict[str, str] = {"deepep": "dedup", "alltoall": "alltoall"}


def row_dispatch(row: dict[str, Any]) -> str:
    """``perf.prepare``'s ``ep_dispatch`` for a row's ``moe_dispatcher`` (:data:`COLUMN_DEFAULTS`:
    blank or absent is "deepep", :data:`ROW_CONVENTIONS` "ep_dispatch")."""
    v = str(row.get("moe_dispatcher") or "").strip().lower() or "deepep"
    if v not in DISPATCHERS:
        raise _CellError("moe_dispatcher", f"must be one of {', '.join(DISPATCHERS)} or empty (got {v!r})")
    return DISPATCHERS[v]


def step_inputs(plans: Sequence[RowPlan]):
    """Step-time inputs (``perf.StepInputs``) of every plan, concatenated (one entry per row).
    MoE rows use the row's dispatcher (:func:`row_dispatch`, default DeepEP-class, :data:`ROW_CONVENTIONS`
    "ep_dispatch"); the row's ``schedule`` sets the MoE all-to-all overlap (:func:`row_schedule`)."""
    from scaletax import perf

    parts = []
    for su in plans:
        ep_dispatch = row_dispatch(su.row) if su.model.is_moe else "alltoall"
        parts.append(perf.prepare(su.model, su.layout, str(su.row["precision"]).strip().lower(),
                                  str(su.row["hardware"]).strip(), recompute_fraction=su.recompute_fraction,
                                  recompute_rest=RECOMPUTE_CODE[su.recompute_rest],
                                  ep_dispatch=ep_dispatch, schedule=row_schedule(su.row), stack=row_stack(su.row),
                                  pp_split=row_pp_split(su.row), attn_kernel=row_attn_kernel(su.row),
                                  tp_comm_overlap=row_tp_overlap(su.row)))
    return perf.StepInputs.concat(parts)


#: (column, lowest, highest, lowest allowed itself) of the measured and size columns.
RANGES: tuple[tuple[str, float, float, bool], ...] = (
    ("gpu_count", 1, MAX_GPU_COUNT, True),
    ("measured_tokens_per_s_per_gpu", 0.0, math.inf, False),
    ("measured_model_tflops_per_gpu", 0.0, math.inf, False),
    ("measured_mfu", 0.0, 1.0, False),
    ("tokens", 0.0, math.inf, False),
    ("price_per_gpu_hour", 0.0, math.inf, True),
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
#: Model family of a row, from its ``model`` name (first match; else the name itself).
FAMILY_PATTERNS: tuple[tuple[str, str], ...] = (
    ("deepseek", "DeepSeek-V3"), ("llama", "Llama 3 / 3.1"), ("gpt-3", "GPT-3"), ("gpt3", "GPT-3"),
    ("qwen", "Qwen3"), ("gpt-oss", "GPT-OSS"), ("megatron", "Megatron GPT"), ("gpt", "Megatron GPT"),
)


def row_family(row: dict[str, Any]) -> str:
    """Model family of a row (:data:`FAMILY_PATTERNS` on the ``model`` column)."""
    name = str(row.get("model", "")).lower()
    for pat, fam in FAMILY_PATTERNS:
        if pat in name:
            return fam
    return str(row.get("model", "")) or "other"


def row_generation(row: dict[str, Any]) -> str:
    """GPU generation of a row: the hardware family (ampere, hopper, blackwell, ...)."""
    from scaletax import hardware

    return hardware.get(str(row["hardware"]).strip()).family


#: Where a row's measurement was published (:func:`row_source`): (text in its ``source_url`` or
#: ``run_id``, source), the first match wins. The leave-one-source-out folds hold each out whole.
SOURCE_PATTERNS: tuple[tuple[str, str], ...] = (
    ("mlcommons", "MLPerf"), ("mlperf", "MLPerf"), ("Megatron-MoE-ModelZoo", "Megatron MoE model zoo"),
    ("Megatron-Bridge", "Megatron-Bridge"), ("mbridge", "Megatron-Bridge"), ("Automodel", "NeMo AutoModel"),
    ("NVIDIA/NeMo/", "NeMo"), ("torchtitan", "TorchTitan"), ("llm-foundry", "llm-foundry"), ("FlagPerf", "FlagPerf"),
    ("2407.21783", "Llama 3 paper"), ("2412.19437", "DeepSeek-V3 report"),
)


def row_source(row: dict[str, Any]) -> str:
    """Where a row's measurement was published (:data:`SOURCE_PATTERNS` on ``source_url``, then on
    ``run_id``): MLPerf Training, the Megatron-Bridge tables, TorchTitan, ...; the Megatron papers
    (Narayanan 2021, Korthikanti 2022) and any other row: "papers"."""
    url, rid = str(row.get("source_url", "")), str(row.get("run_id", ""))
    for text in (url, rid):
        for pat, src in SOURCE_PATTERNS:
            if pat in text:
                return src
    return "papers"


#: Regimes of a run (:func:`row_regime`), in the order they are tested (first match wins).
REGIMES: tuple[str, ...] = ("fine-grained MoE", "coarse MoE", "long context", "FSDP stack", "small dense",
                            "large dense")
#: Above this many routed experts an MoE is fine-grained (DeepSeekMoE, Qwen3-MoE, gpt-oss: many small
#: experts, so the token all-to-all and permutations, not the GEMMs, set the step); Mixtral-style
#: MoEs with 8-16 experts are coarse.
FINE_MOE_EXPERTS = 64
#: From this sequence length on a run is long context (context parallelism, attention-dominated FLOPs).
LONG_CONTEXT_TOKENS = 32768
#: Up to this many parameters (billions) a dense model fits one NVLink domain without pipelining
#: (TP <= 8, PP 1), so it scales by data parallelism on few tokens per GPU.
SMALL_DENSE_PARAMS_B = 20.0
#: Regime -> the criterion :func:`row_regime` applies (after every regime listed before it fails).
REGIME_CRITERIA: dict[str, str] = {
    "fine-grained MoE": f"MoE with \u2265 {FINE_MOE_EXPERTS} routed experts",
    "coarse MoE": f"MoE with fewer than {FINE_MOE_EXPERTS} routed experts",
    "long context": f"dense, sequence \u2265 {LONG_CONTEXT_TOKENS:,} tokens",
    "FSDP stack": "dense, stack column fsdp (blank: Megatron-Core) or ZeRO stage 3",
    "small dense": f"dense, \u2264 {SMALL_DENSE_PARAMS_B:g} B parameters",
    "large dense": f"dense, > {SMALL_DENSE_PARAMS_B:g} B parameters",
}


def row_regime(row: dict[str, Any]) -> str:
    """Regime of a runs-table row: the first of :data:`REGIMES` whose criterion
    (:data:`REGIME_CRITERIA`) the row meets. MoE first (any sequence or stack), then long context,
    then the FSDP stack (:func:`row_stack` "fsdp", a blank cell is Megatron-Core; or ``zero_stage``
    3: Megatron-FSDP), then dense by size (``total_params_b``, else the architecture's count)."""
    size = row.get("total_params_b")
    experts, seq = _int(row, "moe_experts", 0) or 0, int(row["seq_len"])
    fsdp = row_stack(row) == "fsdp" or _int(row, "zero_stage", 0) == 3
    large = None
    if not (experts or fsdp or seq >= LONG_CONTEXT_TOKENS):  # the size only where it decides
        large = (row_model(row).total_params / 1e9 if _blank(size) else float(size)) > SMALL_DENSE_PARAMS_B
    return regime_of(experts, seq, fsdp, large)


def model_regime(model: Any, seq_len: int | None = None, zero_stage: int = 1, stack: str = "megatron") -> str:
    """Regime (:data:`REGIMES`) of training ``model`` (a ``models.Model``) at ``seq_len`` (default
    its own) with ``stack`` and ``zero_stage``: what :func:`row_regime` gives a row of that run (a
    scenario's model on Megatron-Core with the distributed optimizer by default)."""
    if stack not in STACKS:
        raise ValueError(f"stack: must be one of {', '.join(STACKS)} (got {stack!r})")
    return regime_of(model.moe_experts if model.is_moe else 0, model.seq_len if seq_len is None else int(seq_len),
                     stack == "fsdp" or zero_stage == 3, model.total_params / 1e9 > SMALL_DENSE_PARAMS_B)


def regime_of(experts: int, seq_len: int, fsdp: bool, large: bool | None) -> str:
    """The first regime of :data:`REGIMES` whose :data:`REGIME_CRITERIA` a run meets: routed
    ``experts`` (0: dense), ``seq_len`` tokens, ``fsdp`` (FSDP stack or ZeRO-3), ``large`` (more than
    :data:`SMALL_DENSE_PARAMS_B` billion parameters; read only for a dense run at a short sequence)."""
    if experts:
        return "fine-grained MoE" if experts >= FINE_MOE_EXPERTS else "coarse MoE"
    if seq_len >= LONG_CONTEXT_TOKENS:
        return "long context"
    if fsdp:
        return "FSDP stack"
    return "large dense" if large else "small dense"


def _validate_row(row: dict[str, Any], cache: dict | None = None) -> None:
    from scaletax import hardware

    _check_ranges(row)
    hw = str(row.get("hardware") or "").strip()
    if not hardware.known(hw):  # a read of this row's GPU only; the list of ids only in the error
        raise _CellError("hardware", f"unknown hardware id {hw!r}; valid ids: {', '.join(hardware.ids())}")
    prec = str(row.get("precision") or "").strip().lower()
    if prec not in memory.PRECISIONS:
        raise _CellError("precision", f"unknown precision {prec!r}; valid: {', '.join(memory.PRECISIONS)}")
    gpu = hardware.get(hw)
    if not gpu.supports(prec):
        raise _CellError("precision", f"{hw} has no tensor cores for {prec}")
    _block_layers(row)
    _param_gather(row)
    row_schedule(row)
    row_stack(row)
    row_pp_split(row)
    row_attn_kernel(row)
    row_tp_overlap(row)
    row_dispatch(row)
    mods = _modules(row)
    if mods is not None:
        bad = set(mods) - set(memory.RECOMPUTE_MODULES)
        if bad:
            raise _CellError("recompute_modules", f"unknown module(s) {sorted(bad)}; valid: {', '.join(memory.RECOMPUTE_MODULES)}")
    model = row_model(row) if cache is None else _cached_model(row, cache)[1]
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


def _parse_row(raw: dict[str, Any], header: Sequence[str]) -> tuple[dict[str, Any], list[_CellError]]:
    """Cells parsed by column type; every cell error of the row (not only the first)."""
    row: dict[str, Any] = {}
    errors: list[_CellError] = []
    layout_blank = all(not (raw.get(c) or "").strip() for c in SEARCHABLE_LAYOUT)
    for col in header:
        v = raw.get(col)
        v = "" if v is None else v.strip()
        row[col] = v
        try:
            if col in REQUIRED_COLUMNS and v == "" and not (col in SEARCHABLE_LAYOUT and layout_blank):
                raise _CellError(col, "required but empty")
            if col in INT_COLUMNS:
                row[col] = None if v == "" else _parse_int(col, v)
            elif col in FLOAT_COLUMNS:
                row[col] = None if v == "" else _parse_float(col, v)
        except _CellError as exc:
            errors.append(exc)
            row[col] = None
    return row, errors


def read_runs(path: str | Path) -> list[dict[str, Any]]:
    """Read and validate a runs table (CSV).

    Raises ``RunsTableError`` listing every bad row (``row N, column 'c': reason``; every cell
    that does not parse, else the first rule the row breaks) in one line.
    """
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
    model_cache: dict = {}
    rows: list[dict[str, Any]] = []
    bad: list[str] = []
    for rownum, raw in enumerate(reader, start=2):
        if rownum - 1 > MAX_RUNS_ROWS:
            raise RunsTableError(f"{name}: more than {MAX_RUNS_ROWS:,} rows")
        if None in raw:
            bad.append(f"row {rownum}: more cells than header columns")
            continue
        if all(_blank(v) for v in raw.values()):
            continue
        row, errors = _parse_row(raw, header)
        if not errors:
            try:
                _validate_row(row, model_cache)
            except _CellError as exc:
                errors.append(exc)
        if errors:
            bad += [f"row {rownum}, column {e.column!r}: {e}" for e in errors]
            continue
        rows.append(row)
    if bad:
        n = len({b.split(",")[0].split(":")[0] for b in bad})
        raise RunsTableError(f"{name}: {n} bad row(s): " + "; ".join(bad))
    if not rows:
        raise RunsTableError(f"{name}: no data rows (header only)")
    return rows


def predict_memory(rows: Iterable[dict[str, Any]], **memory_options: Any) -> list[dict[str, Any]]:
    """Rows with predicted bytes per GPU by term (GiB) and whether they fit their hardware.

    Adds ``MEMORY_COLUMNS``. ``recompute`` unknown/empty: the least recompute that fits
    (:func:`plan_row`), reported in ``recompute_assumed`` (empty for rows that state it); with
    full recompute on part of the layers the terms are those of that mix.
    ``memory_options`` go to ``memory.breakdown`` (row columns ``reserve_gib`` and
    ``recompute_modules`` override them per row). Vectorized (:func:`plan_rows`); ``rows`` may
    also be a :class:`TablePlan` already made.
    """
    from scaletax import hardware

    plan = rows if isinstance(rows, TablePlan) else plan_rows(list(rows), **memory_options)
    g = {k: v.tolist() for k, v in plan.memory_gib().items()}  # Python floats once, not per element
    caps: dict[str, float] = {}
    out = []
    for i, row in enumerate(plan.rows):
        hw = str(row["hardware"]).strip()
        cap = caps.get(hw)
        if cap is None:
            cap = caps[hw] = float(hardware.get(hw).hbm_gib)
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


def schema_text() -> str:
    """The runs-table schema: required columns and every optional column's default (plain text)."""
    lines = ["Required columns: " + ", ".join(REQUIRED_COLUMNS) + " (tp and pp may both be blank).",
             "Optional columns and their defaults when blank or absent:"]
    lines += [f"  {k}: {v}" for k, v in COLUMN_DEFAULTS.items()]
    lines.append("A table with bad rows is refused, every bad row listed (row, column, reason); nothing is written.")
    return "\n".join(lines)


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
