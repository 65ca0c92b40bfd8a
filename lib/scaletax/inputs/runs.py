"""Tables of training runs in the published-runs schema: read, validate, write; the column defaults.

Public API:

- ``read_runs(path) -> list[dict]``: every row validated; numeric columns parsed (int/float,
  None when blank), other cells kept as strings, unknown columns passed through. A table with
  bad rows raises ``RunsTableError`` (a ValueError) with ONE line listing every bad row as
  ``row N, column 'c': reason`` (the header is row 1).
- ``row_model(row) -> Model``, ``row_layout(row, recompute=None) -> Layout``: the architecture
  and the layout of a row, with the defaults of :data:`COLUMN_DEFAULTS`.
- ``write_runs(rows, path, columns=None)``: CSV with the columns in first-seen order.
- ``schema_text()``: the schema with every column's default (``scaletax predict --help``).
- ``row_family(row)``, ``row_generation(row)``, ``row_source(row)``: the model family, GPU
  generation and kind of source of a row (the cross-validation folds).
- ``measured_tokens_per_s(row, model) -> (value | None, basis)``: what a row measured, per GPU.
- ``row_regime(row)``: the regime of a run (:data:`REGIMES`, :data:`REGIME_CRITERIA`).

A row becomes model inputs in :mod:`scaletax.model.runplan` (``plan_row``, ``plan_rows``,
``predict_memory``), which applies these defaults.

Schema: ``data/sources/README.md``; required columns ``REQUIRED_COLUMNS``; the default of every
optional column in :data:`COLUMN_DEFAULTS` (stated once, applied by ``runplan.plan_row``).

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
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from scaletax import DATA_DIR, escape
from scaletax.inputs import hardware, models, pipeline_layout, recipes
from scaletax.inputs.layout import RECOMPUTE_CODE, Layout
from scaletax.inputs.options import (ATTN_KERNELS, DISPATCHERS, EXPERT_GEMMS, PP_SPLITS, RECOMPUTE_MODULES, RESERVE_GIB,
                                     SCHEDULES, STACKS)
from scaletax.files import InputFileError, read_bounded

REQUIRED_COLUMNS: tuple[str, ...] = ("layers", "hidden", "heads", "vocab", "seq_len",
                                     "hardware", "gpu_count", "tp", "pp", "precision")
#: Default of every optional column when its cell is blank or the column is absent. Stated once;
#: :func:`row_model`, :func:`row_layout` and ``runplan.plan_row`` apply exactly these.
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
                         "options.SELECTIVE_MODULES)",
    "recompute_num_layers": "blank: recompute full recomputes every layer; N (only with recompute full): Megatron-Core "
                            "recompute_method=block, recompute_num_layers=N, as the Megatron-Bridge recipes state it: "
                            "the first N layers of each virtual pipeline chunk fully recomputed, the others not at all",
    "fp8_param_gather": "false: 16-bit weights beside their low-precision copy; true (8-bit and 4-bit precisions "
                        "only): Megatron-Core fp8_param_gather as the Megatron-Bridge FP8 and MXFP8 benchmark "
                        "recipes set it, the linear weights held only as their low-precision copy "
                        "(memory.breakdown lowp_params)",
    "reserve_gib": f"{RESERVE_GIB:g} GiB per GPU kept free (CUDA context, NCCL buffers, allocator)",
    "moe_dispatcher": "deepep (DeepEP-class dispatch: one copy per destination GPU, once per node over the NIC, "
                      "as the Megatron-Bridge DeepSeek-V3 recipes run it); flex: Megatron-Core "
                      "moe_token_dispatcher_type=flex (MoEFlexTokenDispatcher, megatron-core 0.19.2 "
                      "token_dispatcher.py:1743-1800) with its DeepEP or HybridEP backend, the same traffic as deepep: "
                      "each token once per destination NVLink domain over RDMA, then to its GPUs over NVLink, the "
                      "combine reduced per domain before it returns (deepseek-ai/DeepEP "
                      "docs/Hybrid-EP_Implementation.md §8, \"Similar to DeepEP\"); alltoall: Megatron-Core's alltoall token dispatcher (k copies per "
                      "token, chunk sorts around the experts)",
    "schedule": "unknown (1f1b: Megatron-Core default, MoE all-to-all in line, not hidden; ep_overlap: "
                "Megatron-Core overlap_moe_expert_parallel_comm; dualpipe: DeepSeek-V3 DualPipe; both hide the "
                "all-to-all under the other micro-batch's compute; unknown: half of it, comm.SCHEDULE_EP_OVERLAP)",
    "stack": "megatron (Megatron-Core / Megatron-LM / NeMo / Megatron-Bridge with Transformer Engine, the stack of "
             "every row in data/); fsdp: PyTorch FSDP2 stacks (TorchTitan, llm-foundry / Composer): zero_stage 3 "
             "when blank (2 or 3 allowed), gradients reduce-scattered and held in fp32, fp32 parameter shards that are "
             "the master weights (16 bytes per parameter with Adam m, v), parameters gathered in "
             "bf16 (TorchTitan training.dtype / mixed_precision_reduce / mixed_precision_param), TP collectives not overlapped "
             "(no async TP by default); structural only, nothing calibrated (comm.STACK_TP_OVERLAP)",
    "pp_split": "a Megatron-Core pipeline_model_parallel_layout string (Et*3|(tt|)*29m|L: E embedding, t transformer "
                "layer, m MTP layer, L loss, | between virtual stages, *N repeats, (...)*N repeats a group; megatron-core "
                "0.19.2 pipeline_parallel_layer_layout.py:283-321, stage i = a*pp + b is virtual stage a of rank b; "
                "checked as Megatron-Core checks it: pp*vp stages, the model's layers, E first and L last once each), "
                "which sets each rank's layers for the slowest stage and the first and last stage's memory (a blank vp "
                "takes the layout's; MTP layers are placed, not modelled: the catalog models exclude them); or a split "
                "name. auto: the split Megatron-Core accepts for the layout: even where pp*vp divides the layers, else "
                "account where it divides layers + 2, else balanced (perf.pipeline_split). even: Megatron-Core's "
                "default, L / pp transformer layers per stage, the output layer and the loss on the last stage "
                "besides (megatron-core 0.19.2 transformer_config.py:130-134); account: "
                "account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split, the embedding and "
                "the loss each take a layer's slot; balanced: a custom pipeline_model_parallel_layout that spreads the "
                "output layer's work over the stages (options.PP_SPLITS); the slowest stage sets the pace",
    "tp_comm_overlap": "the stack's (megatron: Transformer Engine's tp_comm_overlap, half of the TP collectives "
                       "hidden before the fitted overlap scale; fsdp: none hidden); true / false: the run states its TP "
                       "collectives overlapped (Megatron-Core tp_comm_overlap, TorchTitan async TP) or not",
    "expert_gemm": "auto: the stack's (megatron: per_expert, fsdp: grouped); per_expert: one GEMM call per local "
                   "expert, Transformer Engine's GroupedLinear (nvte_multi_tensor_gemm, one cuBLAS GEMM per expert "
                   "on a few streams), what Megatron-Core runs; grouped: one kernel for all local experts "
                   "(torch._grouped_mm; Megatron-Bridge 0.5's cutedsl_fused_grouped_mlp inside a full-iteration "
                   "CUDA graph); perf.expert_call_layers counts the extra calls at the fixed time per layer pass",
    "attn_kernel": "flash (fused attention, scores on chip: every stack since FlashAttention, 2022; Transformer "
                   "Engine's cuDNN kernels, measured on an H200, perf.ATTN_KERNEL_CONSTANTS); fa2: FlashAttention-2 "
                   "(PyTorch SDPA's flash backend, TorchTitan on Hopper), slower on Hopper only; unfused: "
                   "Megatron-LM before it (batched QK^T / PV GEMMs over the full score matrix, softmax and "
                   "dropout as memory-bound kernels; perf.ATTN_KERNELS), which also stores the scores for the "
                   "backward: 2as^2b softmax output, with dropout as^2b mask and 2as^2b output (Korthikanti et al. "
                   "2022 §4.1; memory attention='paper')",
    "dropout": "true with attn_kernel unfused (Megatron-LM's GPT defaults, hidden_dropout and attention_dropout 0.1: "
               "megatron-core 0.19.2 transformer_config.py:181-184, as the Megatron papers trained), else false (the "
               "LLM pre-training recipes set both to 0): the dropout masks, 1 byte per element, are stored for the "
               "backward (two per layer of h per token, and the attention's a s per token with unfused attention; "
               "Korthikanti et al. 2022 §4.1)",
    "grad_reduce_in_fp32": "false: 16-bit main gradients, reduced in place in 16 bits (recipes.GRAD_BYTES); true: "
                           "Megatron-Core DistributedDataParallelConfig.grad_reduce_in_fp32 (Megatron-LM "
                           "--accumulate-allreduce-grads-in-fp32): fp32 main gradients in memory and on the wire, "
                           "4 bytes per parameter (the 2 + 4 + 12 of Korthikanti et al. 2022's 18 bytes)",
    "include_embeddings": "true: the first and last stage hold the embedding and the output layer (parameters "
                          "and activations, Korthikanti et al. 2022 §4.3); false: transformer layers only, the "
                          "accounting of ZeRO's Fig. 1 and Korthikanti et al. 2022 §4.1-4.2, to reproduce those papers' "
                          "numbers (data/reference_runs.csv)",
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
#: Every published run the book states a measurement of (its MFU, its precision tax) and the model
#: fits: the calibration table and the validation table, in that order.
FITTED_TABLES: tuple[Path, ...] = (RUNS_CSV, VALIDATION_CSV)
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


def is_blank(v: Any) -> bool:
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
    if is_blank(row.get("ffn_hidden")):
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


def cached_model(row: dict[str, Any], cache: dict) -> tuple[tuple, models.Model]:
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
    if is_blank(v):
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

    A row whose recompute is "unknown"/empty gets "none" here (``runplan.plan_row`` resolves it).
    """
    tp, pp, cp, ep, etp, dp, vp, mbs, gbs, sp, zero, rc = layout_values(row, recompute)
    return Layout(tp=tp, pp=pp, cp=cp, dp=dp, ep=ep, etp=etp, vp=vp, mbs=mbs, gbs=gbs,
                  sequence_parallel=sp, zero_stage=zero, recompute=rc)


def layout_values(row: dict[str, Any], recompute: str | None = None) -> tuple:
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
    if is_blank(row.get("vp")):
        layers = _int(row, "layers")
        vp = layout_vp(row, pp) or (default_vp(layers, pp, gbs // (mbs * dp)) if layers else 1)
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
    sp = None if is_blank(sp) else _parse_bool("sequence_parallel", sp)
    rc = recompute
    if rc is None:
        rc = stated_recompute(row)
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


def layout_table(rows: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`layout_values`, :func:`stated_recompute` and :func:`block_layers` of every row at
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
    try:
        stages = np.array(_by_cell(rows, "pp_split", lambda r: layout_vp(r, 1)), dtype=np.int64)  # stages of a layout
    except ValueError:
        return None
    lay_vp = np.where((stages > 0) & (stages % pp == 0), stages // pp, 0)
    vp = np.where(given["vp"], cols["vp"][0], np.where(lay_vp > 0, lay_vp, auto))
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
        sp = _by_cell(rows, "sequence_parallel", lambda r: None if is_blank(r.get("sequence_parallel"))
                      else _parse_bool("sequence_parallel", r.get("sequence_parallel")))
        stated = _by_cell(rows, "recompute", stated_recompute)
    except ValueError:
        return None
    sp_on = np.array([v is None or v for v in sp], dtype=bool) & (tp > 1)
    rc = np.array([RECOMPUTE_CODE["none" if v == "unknown" else v] for v in stated], dtype=np.int64)
    n_blk, blk_g = cols["recompute_num_layers"]
    if ((n_blk < 1) & blk_g).any() or (blk_g & (rc != RECOMPUTE_CODE["full"])).any():
        return None
    vals = np.stack([tp, pp, cp, ep, etp, dp, vp, mbs, gbs, sp_on.astype(np.int64), zero, rc], axis=1)
    return vals, np.array([v == "unknown" for v in stated], dtype=bool), np.where(blk_g, n_blk, 0)


def block_layers(row: dict[str, Any]) -> int | None:
    """``recompute_num_layers`` of a row (None when blank), checked: >= 1 and only with recompute full."""
    rc = stated_recompute(row)
    n = _int(row, "recompute_num_layers")
    if n is None:
        return None
    if n < 1:
        raise _CellError("recompute_num_layers", f"must be >= 1 (got {n})")
    if rc != "full":
        raise _CellError("recompute_num_layers", f"needs recompute full (got {rc!r}): Megatron-Core "
                                                 "recompute_method=block recomputes whole layers")
    return n


def stated_recompute(row: dict[str, Any]) -> str:
    rc = str(row.get("recompute") or "unknown").strip().lower() or "unknown"
    if rc not in RECOMPUTE_VALUES:
        raise _CellError("recompute", f"must be one of {', '.join(RECOMPUTE_VALUES)} or empty (got {rc!r})")
    return rc


def memory_options(row: dict[str, Any]) -> dict[str, Any]:
    """Per-row options of ``memory.breakdown``: ``reserve_gib``, ``recompute_modules``,
    ``fp8_param_gather`` (``lowp_params``), ``stack`` (fsdp: :func:`fsdp_memory_options`),
    ``attn_kernel`` (unfused: the stored scores, ``attention="paper"``), ``dropout``,
    ``grad_reduce_in_fp32`` (``grad_bytes`` 4), ``include_embeddings`` and a ``pp_split`` layout
    string (``pp_layout``) columns (:data:`COLUMN_DEFAULTS`)."""
    opts: dict[str, Any] = {}
    unfused = row_attn_kernel(row) == "unfused"
    if unfused:
        opts["attention"] = "paper"
    dropout = _flag(row, "dropout", unfused)
    if dropout != unfused:  # memory's default: dropout with the stored scores only
        opts["dropout"] = dropout
    if _flag(row, "grad_reduce_in_fp32", False):
        opts["grad_bytes"] = recipes.FP32_BYTES
    if not _flag(row, "include_embeddings", True):
        opts["include_embeddings"] = False
    split = row_pp_split(row)
    if pipeline_layout.is_layout(split):
        opts["pp_layout"] = split
    mods = _modules(row)
    if mods is not None:
        opts["selective_modules"] = mods
    if not is_blank(row.get("reserve_gib")):
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


def _flag(row: dict[str, Any], col: str, default: bool) -> bool:
    """A true/false column of a row (``default`` when blank or absent)."""
    v = row.get(col)
    return default if is_blank(v) else _parse_bool(col, v)


def _param_gather(row: dict[str, Any]) -> bool:
    """``fp8_param_gather`` of a row (false when blank), checked: only with a low-precision recipe."""
    v = row.get("fp8_param_gather")
    if is_blank(v) or not _parse_bool("fp8_param_gather", v):
        return False
    prec = str(row.get("precision") or "").strip().lower()
    if prec in recipes.TRAINING and not recipes.training(prec).lowp_copy_bytes:
        raise _CellError("fp8_param_gather", f"needs an 8-bit or 4-bit precision (got {prec!r}): a {prec} "
                                             "recipe has no low-precision weight copy")
    return True


def row_gpu(row: dict[str, Any]) -> hardware.GPU:
    """The GPU of a row's ``hardware`` id: where a runs table's ids become GPUs (one lookup per row)."""
    return hardware.get(str(row["hardware"]).strip())


def row_recipe(row: dict[str, Any]) -> recipes.Recipe:
    """The training recipe of a row's ``precision`` name (lower case)."""
    return recipes.training(str(row["precision"]).strip().lower())


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
    model = row_model(row) if model is None else model
    tps = row.get("measured_tokens_per_s_per_gpu")
    if not is_blank(tps):
        return float(tps), "tokens/s per GPU (reported)"
    l, h, s, V = model.layers, model.hidden, model.seq_len, model.vocab
    rid = str(row.get("run_id", ""))
    tf, mfu = row.get("measured_model_tflops_per_gpu"), row.get("measured_mfu")
    peak = row_gpu(row).peak_flops(row_recipe(row))
    if rid.startswith("narayanan") and not is_blank(tf):
        per_tok = 96.0 * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
        return float(tf) * 1e12 / per_tok, "TFLOP/s incl. recompute / Narayanan 2021 eq. 3 (full recompute, non-causal)"
    if rid.startswith("korthikanti") and not is_blank(mfu):
        per_tok = 72.0 * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
        return float(mfu) * peak / per_tok, "MFU x 16-bit peak / Korthikanti 2022 model FLOPs (non-causal)"
    if not is_blank(tf):
        return float(tf) * 1e12 / model.model_flops_per_token(), "model TFLOP/s / model FLOPs per token (causal)"
    if not is_blank(mfu):
        return float(mfu) * peak / model.model_flops_per_token(), "MFU x peak / model FLOPs per token (causal)"
    return None, ""


def _choice(row: dict[str, Any], column: str, choices, default: str) -> str:
    """A row's value of a column that takes one of ``choices``, lower case; ``default`` when blank
    or absent; a one-line cell error otherwise."""
    v = str(row.get(column) or "").strip().lower() or default
    if v not in choices:
        raise _CellError(column, f"must be one of {', '.join(choices)} or empty (got {v!r})")
    return v


def row_schedule(row: dict[str, Any]) -> str:
    """The training schedule a row states (``schedule`` column, :data:`COLUMN_DEFAULTS`), lower case;
    "unknown" when blank or absent."""
    return _choice(row, "schedule", SCHEDULES, "unknown")


def row_stack(row: dict[str, Any]) -> str:
    """The software stack a row states (``stack`` column, :data:`COLUMN_DEFAULTS`), lower case;
    "megatron" when blank or absent."""
    return _choice(row, "stack", STACKS, "megatron")


def row_pp_split(row: dict[str, Any]) -> str:
    """How a row's pipeline stages split the model (``pp_split`` column, :data:`COLUMN_DEFAULTS`):
    a split name of ``PP_SPLITS``, lower case ("auto" when blank or absent: the split
    Megatron-Core accepts for the row's layout, ``perf.pipeline_split``), or a Megatron-Core
    ``pipeline_model_parallel_layout`` as written (its grammar checked here; against the model and
    layout by :func:`row_pipeline_layout`)."""
    raw = str(row.get("pp_split") or "").strip()
    v = raw.lower() or "auto"
    if v in PP_SPLITS:
        return v
    if not pipeline_layout.is_layout(raw):
        raise _CellError("pp_split", f"must be one of {', '.join(PP_SPLITS)}, a pipeline_model_parallel_layout "
                                     f"(Et*4|(t*4|)*14tmL) or empty (got {raw[:40]!r})")
    try:
        pipeline_layout.expand(raw)
    except pipeline_layout.LayoutError as exc:
        raise _CellError("pp_split", f"layout {raw[:40]!r}: {exc}") from None
    return raw


def row_pipeline_layout(row: dict[str, Any], model: models.Model, pp: int, vp: int | None):
    """The row's ``pipeline_model_parallel_layout`` (``pipeline_layout.PipelineLayout``) checked against
    the model's layers, ``pp`` and a stated ``vp`` (None: blank); None when ``pp_split`` is a split name."""
    split = row_pp_split(row)
    if not pipeline_layout.is_layout(split):
        return None
    try:
        return pipeline_layout.parse(split, pp, layers=model.layers, vp=vp)
    except pipeline_layout.LayoutError as exc:
        raise _CellError("pp_split", f"layout {split[:40]!r}: {exc}") from None


def layout_vp(row: dict[str, Any], pp: int) -> int:
    """The vp a row's layout string sets (stages / pp, Megatron-LM arguments.py sets
    virtual_pipeline_model_parallel_size so), 0 for a split name or stages that pp does not divide
    (the row's check then says why)."""
    split = row_pp_split(row)
    if not pipeline_layout.is_layout(split):
        return 0
    n = len(pipeline_layout.expand(split))
    return n // pp if pp > 0 and n % pp == 0 else 0


def row_expert_gemm(row: dict[str, Any]) -> str:
    """How a row's routed experts run their GEMMs (``expert_gemm`` column, :data:`COLUMN_DEFAULTS`,
    ``EXPERT_GEMMS``), lower case; "auto" (the stack's) when blank or absent."""
    return _choice(row, "expert_gemm", EXPERT_GEMMS, "auto")


def row_attn_kernel(row: dict[str, Any]) -> str:
    """The attention kernel a row ran (``attn_kernel`` column, :data:`COLUMN_DEFAULTS`,
    ``ATTN_KERNELS``), lower case; "flash" when blank or absent."""
    return _choice(row, "attn_kernel", ATTN_KERNELS, "flash")


def row_tp_overlap(row: dict[str, Any]) -> bool | None:
    """Whether a row states its tensor-parallel collectives overlapped with the GEMMs
    (``tp_comm_overlap`` column, :data:`COLUMN_DEFAULTS`: Megatron-Core's ``tp_comm_overlap``,
    TorchTitan's async TP); None when blank (the stack's default, ``comm.STACK_TP_OVERLAP``)."""
    v = row.get("tp_comm_overlap")
    return None if is_blank(v) else _parse_bool("tp_comm_overlap", v)


def row_dispatch(row: dict[str, Any]) -> str:
    """``perf.prepare``'s ``ep_dispatch`` for a row's ``moe_dispatcher`` (``options.DISPATCHERS``;
    :data:`COLUMN_DEFAULTS`: blank or absent is "deepep", :data:`ROW_CONVENTIONS` "ep_dispatch"; its
    permutations are ``perf.moe_permute_bytes``' "dedup")."""
    return DISPATCHERS[_choice(row, "moe_dispatcher", DISPATCHERS, "deepep")]


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
        if v is None or is_blank(v):
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
    return row_gpu(row).family


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
        large = (row_model(row).total_params / 1e9 if is_blank(size) else float(size)) > SMALL_DENSE_PARAMS_B
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
    _check_ranges(row)
    hw = str(row.get("hardware") or "").strip()
    if not hardware.known(hw):  # a read of this row's GPU only; the list of ids only in the error
        raise _CellError("hardware", f"unknown hardware id {hw!r}; valid ids: {', '.join(hardware.ids())}")
    prec = str(row.get("precision") or "").strip().lower()
    if prec not in recipes.TRAINING:
        raise _CellError("precision", f"unknown precision {prec!r}; valid: {', '.join(recipes.TRAINING)}")
    gpu = hardware.get(hw)
    if not gpu.supports(recipes.training(prec)):
        raise _CellError("precision", f"{hw} has no tensor cores for {prec}")
    block_layers(row)
    _param_gather(row)
    row_schedule(row)
    row_stack(row)
    memory_options(row)  # the memory columns: stack, attn_kernel, dropout, grad_reduce_in_fp32, include_embeddings,
    # pp_split's grammar, fp8_param_gather, reserve_gib
    row_tp_overlap(row)
    row_dispatch(row)
    mods = _modules(row)
    if mods is not None:
        bad = set(mods) - set(RECOMPUTE_MODULES)
        if bad:
            raise _CellError("recompute_modules", f"unknown module(s) {sorted(bad)}; valid: {', '.join(RECOMPUTE_MODULES)}")
    model = row_model(row) if cache is None else cached_model(row, cache)[1]
    if all(is_blank(row.get(c)) for c in SEARCHABLE_LAYOUT):
        if pipeline_layout.is_layout(row_pp_split(row)):
            raise _CellError("pp_split", "a pipeline_model_parallel_layout needs the row's pp (tp and pp are blank: "
                                         "scaletax predict searches the layout); give tp and pp or a split name")
        return  # no layout given: nothing more to check here
    layout = row_layout(row)
    row_pipeline_layout(row, model, layout.pp, None if is_blank(row.get("vp")) else layout.vp)
    try:
        layout.check(model)
    except ValueError as exc:
        col, _, msg = str(exc).partition(": ")
        raise _CellError(col, msg) from None


def _modules(row: dict[str, Any]) -> tuple[str, ...] | None:
    v = row.get("recompute_modules")
    if is_blank(v):
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
    twice = [h for h in dict.fromkeys(header) if header.count(h) > 1]
    if twice:  # csv.DictReader would keep the last of them without a word
        raise RunsTableError(f"{name}: row 1: duplicate column(s) {', '.join(repr(h) for h in twice)}; "
                             "each column may appear once")
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
        if all(is_blank(v) for v in raw.values()):
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


def fitted_runs(paths: Sequence[str | Path] = FITTED_TABLES) -> list[dict[str, Any]]:
    """The rows of ``paths`` (:func:`read_runs`, in order), less those naming ``same_run_as``
    (a held-out run measured again, which ``HELDOUT_CSV`` states once): the one list of published
    runs that every chapter and the fit read."""
    return [r for p in paths for r in read_runs(p) if not str(r.get("same_run_as") or "").strip()]


def schema_text() -> str:
    """The runs-table schema: required columns and every optional column's default (plain text)."""
    lines = ["Required columns: " + ", ".join(REQUIRED_COLUMNS) + " (tp and pp may both be blank).",
             "Optional columns and their defaults when blank or absent:"]
    lines += [f"  {k}: {v}" for k, v in COLUMN_DEFAULTS.items()]
    lines.append("A table with bad rows is refused, every bad row listed (row, column, reason); nothing is written.")
    return "\n".join(lines)


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
    return escape.csv_cell(str(v))


def runs_csv(rows: Iterable[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Rows as CSV text (columns: ``columns`` or every key in first-seen order); a text cell
    that a spreadsheet would read as a formula is neutralized (:func:`scaletax.escape.csv_cell`)."""
    rows = list(rows)
    if columns is None:
        seen: dict[str, None] = {}
        for r in rows:
            for k in r:
                seen.setdefault(k, None)
        columns = list(seen)
    return "".join([escape.csv_line([escape.csv_cell(c) for c in columns])]
                   + [escape.csv_line([_cell(r.get(c)) for c in columns]) for r in rows])


def write_runs(rows: Iterable[dict[str, Any]], path: str | Path, columns: Sequence[str] | None = None) -> Path:
    """Write rows as CSV (:func:`runs_csv`); returns the path."""
    path = Path(path)
    path.write_text(runs_csv(rows, columns), encoding="utf-8")
    return path
