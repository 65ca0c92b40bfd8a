"""The training-precision recipes: one frozen :class:`Recipe` per precision name, and the one
policy that says which precision a GPU trains in.

A recipe is what "train in FP8" (or BF16, MXFP8, NVFP4, ...) means to every part of the model:
the number format of its GEMM operands (:mod:`scaletax.model.precision`), the hardware peak it runs at
(a ``data/hardware.csv`` column) and the format class of its calibrated GEMM ceiling, and the
bytes it stores and moves. Byte counts are derived from the formats, never typed: a block-scaled
operand costs ``element bits + scale bits / block size`` (``formats.format_info``: MXFP8
8 + 8/32 bits, NVFP4 4 + 8/16, MXFP4 4 + 8/32; OCP MX v1.0, arXiv 2509.25149).

Bytes per parameter (Megatron-LM distributed optimizer, docs/source/api-guide/dist_optimizer.md):
16-bit parameters; 16-bit main gradients (:data:`GRAD_BYTES`: the gradient buffer is reduced in
place in bf16, ``grad_reduce_in_fp32=False``, as NVIDIA's performance configurations run; the
"bf16 param, bf16 grads" row, "4 + 16/d"); an fp32 master copy and Adam's m and v (12 B), plus an
fp32 copy of the gradient shard because gradients are reduced in 16 bits (16 B). Low-precision recipes cache
``lowp_copies`` quantized copies of each linear weight (row-wise and column-wise, Transformer
Engine). A cast kernel reads the 16-bit input once and writes those copies with their scales;
NVFP4 reads it once more for the random Hadamard transform of the weight-gradient operands
(arXiv 2509.25149 §4.2). Wire (ASSUMPTION): FP8 gathers FP8 parameters and dispatches FP8
tokens; MX and FP4 recipes move MXFP8 (their TP/DP/EP traffic formats are not modelled
separately); activations stay 16-bit on the wire; gradients are reduced in the main-gradient
dtype (``grad_bytes``: Megatron-Core reduces its grad buffer in place).

Public API
----------
- ``get(name) -> Recipe`` (unknown names list the valid ones); ``RECIPES`` (name -> Recipe),
  ``NAMES`` (every precision with a hardware peak), ``TRAINING`` (the precisions the step-time
  and memory models train in).
- ``runs_on(gpu, name)``: native tensor-core support (the GPU has the peak column, and
  block-scaled formats need ``native_mx``).
- ``training_precision(gpu, wanted, allowed)``: the precision a GPU trains in;
  ``fastest_precision(gpu, wanted, allowed)``: its fastest native format among ``allowed``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

from scaletax.inputs import formats

#: Bytes of a 16-bit element (the parameters, activations and the input of a cast).
HALF_BYTES = 2.0
#: Bytes of an fp32 element (master weights, Adam moments).
FP32_BYTES = 4.0
#: Bytes per main-gradient element, stored (Megatron-Core DDP grad buffer) and reduced over DP
#: (``comm.WireFormat.grad``): one choice for memory and wire. ASSUMPTION: 16-bit, Megatron-Core
#: ``DistributedDataParallelConfig.grad_reduce_in_fp32=False`` (its default; the buffer dtype is
#: the parameter dtype, distributed/distributed_data_parallel.py), taken for the runs in
#: data/published_runs.csv (NVIDIA's tuned configurations; not every one states it). Megatron-LM's own
#: command line forces fp32 for bf16
#: (``accumulate_allreduce_grads_in_fp32``) and NeMo's ``bf16_mixed`` sets ``grad_reduce_in_fp32=True``:
#: pass ``grad_bytes=4`` to ``memory`` and ``WireFormat(grad=4)`` to model those (2x DP gradient
#: bytes, 2 B more per parameter, 4 B less optimizer state). Evidence: with fp32 the published runs fit
#: worse (calibration cost, the sum of squared log errors, 0.21 against 0.14) and several predicted to need
#: recompute that their configurations do not use.
GRAD_BYTES = HALF_BYTES
#: Main-gradient bytes of a PyTorch FSDP2 stack (runs column ``stack`` = fsdp), stored (the sharded
#: gradient) and reduce-scattered (``comm.WireFormat.grad``): fp32. TorchTitan 0.3.0
#: torchtitan/config/configs.py:93 ``mixed_precision_reduce: Literal["float32"] = "float32"`` (the only
#: value allowed), passed as ``MixedPrecisionPolicy(reduce_dtype=...)`` (torchtitan/distributed/fsdp.py:165-167);
#: its parameters are gathered in ``mixed_precision_param`` = "bfloat16" (configs.py:85), 16 bits.
FSDP_GRAD_BYTES = FP32_BYTES
#: Stored parameter bytes of a PyTorch FSDP2 stack: the sharded parameter is the fp32 master weight
#: (TorchTitan 0.3.0 builds the model in ``training.dtype`` = "float32", torchtitan/config/configs.py:78,
#: trainer.py:363-366, and fully_shard keeps the sharded parameter in that dtype; the bf16 copy,
#: ``mixed_precision_param``, exists only gathered, layer by layer), and AdamW's m and v follow the
#: parameter's dtype: 4 + 8 bytes of optimizer-side state, no separate master or 16-bit shard.
FSDP_PARAM_BYTES = FP32_BYTES
FSDP_OPTIMIZER_BYTES = 2 * FP32_BYTES


@dataclass(frozen=True)
class Recipe:
    """One training precision. Bytes are per element (operands, wire) or per parameter (state).

    name / label      scenario name ("nvfp4") and display label ("NVFP4")
    operand_format    number format of the GEMM operands (:func:`scaletax.inputs.formats.format_info`)
    peak_column       ``data/hardware.csv`` column of the dense peak its GEMMs run at
    wire_format       number format of parameter gathers and MoE dispatch on the wire
    half              the 16-bit precision of the parts that stay in 16 bits ("bf16" or "fp16")
    trains            True when the step-time and memory models train in it (MXFP6 has a
                      hardware peak but no published training recipe and no calibrated ceiling)
    grad_bytes        main-gradient bytes per parameter
    lowp_copies       cached quantized copies per linear weight (0 for 16-bit recipes)
    cast_extra_reads  extra 16-bit reads per cast element (NVFP4's Hadamard transform)
    """

    name: str
    label: str
    operand_format: str
    peak_column: str
    wire_format: str
    half: str = "bf16"
    trains: bool = True
    grad_bytes: float = GRAD_BYTES
    lowp_copies: int = 2
    cast_extra_reads: float = 0.0

    @cached_property
    def _info(self) -> formats.FormatInfo:
        return formats.format_info(self.operand_format)

    @property
    def element_bits(self) -> int:
        """Bits of one operand element, scales excluded (16, 8, 6 or 4)."""
        return self._info.element_bits

    @property
    def format_class(self) -> str:
        """The GEMM format class of the step-time model's ceiling parameters ("16bit", "8bit", "4bit")."""
        return f"{self.element_bits}bit"

    @property
    def block_scaled(self) -> bool:
        """True for MX / NV block formats, which need native block-scale hardware."""
        return self._info.block_size is not None

    @property
    def low_precision(self) -> bool:
        """True when the GEMMs run below 16 bits (quantized copies, casts)."""
        return self.element_bits < 16

    @property
    def operand_bytes(self) -> float:
        """Bytes per GEMM operand element, block scales included (1 + 1/32 for MXFP8)."""
        return self._info.bits_per_element / 8

    @property
    def wire_bytes(self) -> float:
        """Bytes per element of a parameter gather or an MoE dispatch (scales included)."""
        return formats.format_info(self.wire_format).bits_per_element / 8

    @property
    def param_bytes(self) -> float:
        """Bytes per parameter of the weights the model keeps (16-bit in every recipe)."""
        return HALF_BYTES

    def optimizer_bytes(self, grad_bytes: float | None = None) -> float:
        """Optimizer state per parameter: fp32 master + Adam m, v (12 B), plus an fp32 copy of
        the gradient shard when gradients (``grad_bytes``, default the recipe's) are 16-bit."""
        gb = self.grad_bytes if grad_bytes is None else grad_bytes
        return 3 * FP32_BYTES + (FP32_BYTES if gb < FP32_BYTES else 0.0)

    @property
    def lowp_copy_bytes(self) -> float:
        """Bytes per linear-weight parameter of the cached quantized copies (0 for 16-bit)."""
        return self.lowp_copies * self.operand_bytes if self.low_precision else 0.0

    @property
    def half_recipe(self) -> "Recipe":
        """The 16-bit recipe of the parts that stay in 16 bits (attention, the output layer)."""
        return RECIPES[self.half]

    @property
    def cast_bytes(self) -> float:
        """HBM bytes per element of one cast kernel of a GEMM input: read 16 bits (plus the
        extra reads), write the quantized copies with their scales (0 for 16-bit recipes)."""
        if not self.low_precision:
            return 0.0
        return HALF_BYTES * (1 + self.cast_extra_reads) + self.lowp_copies * self.operand_bytes


_MXFP8 = "mxfp8_e4m3"
#: The registry, in the order tables list precisions.
RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("bf16", "BF16", "bf16", "bf16_tflops", "bf16", lowp_copies=0),
    Recipe("fp16", "FP16", "fp16", "bf16_tflops", "fp16", half="fp16", lowp_copies=0),
    Recipe("fp8", "FP8", "fp8_e4m3", "fp8_tflops", "fp8_e4m3"),
    Recipe("mxfp8", "MXFP8", _MXFP8, "fp8_tflops", _MXFP8),
    Recipe("mxfp6", "MXFP6", "mxfp6_e3m2", "fp6_tflops", _MXFP8, trains=False),
    Recipe("nvfp4", "NVFP4", "nvfp4", "fp4_tflops", _MXFP8, cast_extra_reads=1.0),
    Recipe("mxfp4", "MXFP4", "mxfp4", "fp4_tflops", _MXFP8),
)}
#: Every precision with a hardware peak.
NAMES: tuple[str, ...] = tuple(RECIPES)
#: The precisions the step-time and memory models train in.
TRAINING: tuple[str, ...] = tuple(n for n, r in RECIPES.items() if r.trains)


def get(name: str) -> Recipe:
    """The recipe of ``name``; an unknown name lists the valid ones."""
    r = RECIPES.get(name)
    if r is None:
        raise ValueError(f"precision: unknown {name!r}; valid: {', '.join(NAMES)}")
    return r


def training(name: str) -> Recipe:
    """The recipe of ``name`` if the models train in it; else a ValueError naming the valid ones."""
    r = RECIPES.get(name)
    if r is None or not r.trains:
        raise ValueError(f"precision: unknown {name!r}; valid: {', '.join(TRAINING)}")
    return r


def label(name: str) -> str:
    """Display label of a precision ("NVFP4"); an unknown name upper-cased."""
    r = RECIPES.get(name)
    return r.label if r is not None else str(name).upper()


def check(recipe: Recipe) -> Recipe:
    """``recipe`` itself when it is a :class:`Recipe`; a TypeError otherwise: the model takes
    recipes, resolved from their names once where the names come in (:func:`training`)."""
    if not isinstance(recipe, Recipe):
        raise TypeError(f"expected a recipes.Recipe, got {type(recipe).__name__} {recipe!r}: resolve a precision "
                        "name once where it comes in (recipes.training)")
    return recipe


def runs_on(gpu, recipe: Recipe) -> bool:
    """True when ``gpu`` (a ``hardware.GPU``) runs ``recipe`` natively on its tensor cores: it has
    a dense peak in the recipe's column, and block-scaled formats need ``native_mx``."""
    if check(recipe).block_scaled and not gpu.native_mx:
        return False
    return getattr(gpu, recipe.peak_column) is not None


def training_precision(gpu, wanted: str, allowed: Sequence[str] = TRAINING) -> Recipe:
    """The recipe ``gpu`` (a ``hardware.GPU``) trains in, from the scenario's precision names.

    ``wanted`` where the GPU runs it natively; else the fastest native one of ``allowed`` (the
    scenario's precisions; ties: the first listed), e.g. FP8 on Hopper for an NVFP4 scenario that
    allows FP8; else BF16, which every GPU runs.
    """
    want = training(wanted)
    if runs_on(gpu, want):
        return want
    ok = [RECIPES[p] for p in allowed if p in TRAINING and runs_on(gpu, RECIPES[p])]
    return max(ok, key=gpu.peak_flops) if ok else RECIPES["bf16"]  # max keeps the first of equal peaks


def fastest_precision(gpu, wanted: str, allowed: Sequence[str] = TRAINING) -> Recipe:
    """The native recipe with the highest dense peak among ``allowed`` and the training
    precision (ties: the training precision, then list order)."""
    base = training_precision(gpu, wanted, allowed)
    ok = [base] + [RECIPES[p] for p in allowed if p in TRAINING and p != base.name and runs_on(gpu, RECIPES[p])]
    return max(ok, key=gpu.peak_flops)


__all__ = ["FP32_BYTES", "FSDP_GRAD_BYTES", "FSDP_OPTIMIZER_BYTES", "FSDP_PARAM_BYTES", "GRAD_BYTES", "HALF_BYTES", "NAMES", "RECIPES", "Recipe", "TRAINING", "fastest_precision", "get",
           "check", "label", "runs_on", "training", "training_precision"]
