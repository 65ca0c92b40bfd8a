"""Number formats: the element types (ml_dtypes) and the OCP MX / NVFP4 block formats, with their
storage cost and range (:func:`format_info`). Facts only: the quantizers that round to them are
in :mod:`scaletax.model.precision`; the training recipes built on them in
:mod:`scaletax.inputs.recipes`.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import ml_dtypes
import numpy as np

__all__ = ["FORMATS", "ELEMENT_FORMATS", "MX_FORMATS", "SCALE_RULES", "Elem", "ELEMS", "BLOCK",
           "FormatInfo", "check_format", "format_info", "representable_values"]


@dataclass(frozen=True)
class Elem:
    """An element type: ml_dtypes dtype plus the numbers derived from it."""

    name: str
    dtype: np.dtype
    bits: int
    exp_bits: int
    man_bits: int
    max: float
    min_normal: float
    min_subnormal: float

    @cached_property
    def emax(self) -> int:
        """Exponent of the largest binade, floor(log2(max)) (OCP MX 'emax_elem')."""
        return int(np.frexp(self.max)[1]) - 1

    @cached_property
    def emin(self) -> int:
        """Exponent of the smallest normal binade, log2(min_normal)."""
        return int(np.frexp(self.min_normal)[1]) - 1


def _elem(name: str, dtype, bits: int) -> Elem:
    fi = ml_dtypes.finfo(dtype)
    return Elem(name, np.dtype(dtype), bits, int(fi.nexp), int(fi.nmant), float(fi.max),
                 float(fi.smallest_normal), float(fi.smallest_subnormal))


ELEMS: dict[str, Elem] = {
    e.name: e for e in (
        _elem("bf16", ml_dtypes.bfloat16, 16),
        _elem("fp16", np.float16, 16),
        _elem("fp8_e4m3", ml_dtypes.float8_e4m3fn, 8),
        _elem("fp8_e5m2", ml_dtypes.float8_e5m2, 8),
        _elem("fp6_e3m2", ml_dtypes.float6_e3m2fn, 6),
        _elem("fp6_e2m3", ml_dtypes.float6_e2m3fn, 6),
        _elem("fp4_e2m1", ml_dtypes.float4_e2m1fn, 4),
    )
}

#: Block formats: name -> (element type, default block size, scale format).
#: MX: OCP Microscaling Formats v1.0 (blocks of 32, E8M0 scale); NVFP4: arXiv 2509.25149
#: (blocks of 16, E4M3 block scale plus an FP32 per-tensor scale).
BLOCK: dict[str, tuple[str, int, str]] = {
    "mxfp8_e4m3": ("fp8_e4m3", 32, "e8m0"),
    "mxfp8_e5m2": ("fp8_e5m2", 32, "e8m0"),
    "mxfp6_e3m2": ("fp6_e3m2", 32, "e8m0"),
    "mxfp6_e2m3": ("fp6_e2m3", 32, "e8m0"),
    "mxfp4": ("fp4_e2m1", 32, "e8m0"),
    "nvfp4": ("fp4_e2m1", 16, "e4m3+fp32"),
}

ELEMENT_FORMATS: tuple[str, ...] = tuple(ELEMS)
MX_FORMATS: tuple[str, ...] = tuple(k for k in BLOCK if k.startswith("mx"))
#: Every format `quantize` accepts.
FORMATS: tuple[str, ...] = ELEMENT_FORMATS + tuple(BLOCK)
#: MX shared-scale rules: "ocp" = floor(log2(amax)) - emax_elem (OCP MX v1.0, arXiv 2310.10537
#: Alg. 1); "ceil" = 2^ceil(log2(amax/max_elem)) (NVIDIA round-up, arXiv 2506.08027).
SCALE_RULES: tuple[str, ...] = ("ocp", "ceil")

#: Bits of the E8M0 shared scale of an MX block (OCP MX v1.0).
E8M0_BITS = 8


@dataclass(frozen=True)
class FormatInfo:
    """Storage cost and range of one format.

    bits_per_element counts the shared scales (E8M0 per 32 for MX, E4M3 per 16 for NVFP4; the
    NVFP4 per-tensor FP32 scale amortises to ~0 and is not counted). max_finite, min_normal
    and min_subnormal are those of the element type (before block scaling);
    dynamic_range_binades = log2(max_finite / min_subnormal) of the element type.
    """

    name: str
    bits_per_element: float
    element_format: str
    element_bits: int
    exp_bits: int
    man_bits: int
    max_finite: float
    min_normal: float
    min_subnormal: float
    dynamic_range_binades: float
    block_size: int | None
    scale_format: str | None


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; valid formats: {', '.join(FORMATS)}")


def format_info(fmt: str) -> FormatInfo:
    """Bits per element (scale overhead included), element exponent/mantissa bits and range."""
    check_format(fmt)
    if fmt in ELEMS:
        e, bs, sf = ELEMS[fmt], None, None
        bits = float(e.bits)
    else:
        en, bs, sf = BLOCK[fmt]
        e = ELEMS[en]
        scale_bits = E8M0_BITS if sf == "e8m0" else ELEMS["fp8_e4m3"].bits
        bits = e.bits + scale_bits / bs  # MX: 8 + 8/32 = 8.25; NVFP4: 4 + 8/16 = 4.5
    return FormatInfo(fmt, bits, e.name, e.bits, e.exp_bits, e.man_bits, e.max, e.min_normal,
                      e.min_subnormal, float(np.log2(e.max / e.min_subnormal)), bs, sf)


def representable_values(fmt: str) -> np.ndarray:
    """Sorted non-negative finite values of an element format (float64), from ml_dtypes."""
    check_format(fmt)
    if fmt not in ELEMS:
        raise ValueError(f"{fmt!r} is block-scaled; pass its element format "
                         f"{BLOCK[fmt][0]!r} instead")
    e = ELEMS[fmt]
    codes = np.arange(2 ** e.bits, dtype=np.uint16 if e.bits == 16 else np.uint8)
    with np.errstate(invalid="ignore"):
        v = codes.view(e.dtype).astype(np.float64)
    return np.unique(v[np.isfinite(v) & (v >= 0)])
