"""GPU catalog loaded from ``data/hardware.csv`` and validated row by row.

Units in the CSV are the ones datasheets use (TFLOP/s dense, TB/s, GB/s bidirectional,
Gb/s); the :class:`GPU` object converts them to SI base units (FLOP/s, B/s, one
direction) so that the rest of the model never converts again.

Conventions (DESIGN.md): FLOP/s are dense (datasheet figures quoted with 2:4 sparsity
are halved in the data); ``hbm_gib`` is usable memory in GiB (the MLPerf-reported value
where one exists); bandwidth is decimal bytes per second.
"""
from __future__ import annotations

import csv
import difflib
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from scaletax import DATA_DIR

HARDWARE_CSV = DATA_DIR / "hardware.csv"

#: Precision name -> the CSV column holding its dense peak. MX / NV block formats run on
#: the same tensor-core paths as their element type, but only where ``native_mx`` is true.
PRECISION_COLUMN = {
    "tf32": "tf32_tflops",
    "bf16": "bf16_tflops",
    "fp16": "bf16_tflops",
    "fp8": "fp8_tflops",
    "mxfp8": "fp8_tflops",
    "mxfp6": "fp6_tflops",
    "nvfp4": "fp4_tflops",
    "mxfp4": "fp4_tflops",
}
BLOCK_SCALED = {"mxfp8", "mxfp6", "nvfp4", "mxfp4"}


class HardwareError(ValueError):
    """A hardware data file or lookup is wrong; the message names file, row and column."""


class UnknownHardware(HardwareError):
    """A GPU id that is not in the catalog."""


class UnsupportedPrecision(HardwareError):
    """The GPU has no native tensor-core support for the precision."""


class GPU(BaseModel):
    """One GPU as the model sees it. Raw CSV units; properties give SI units."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9_]+$")
    name: str = Field(min_length=1)
    label: str = Field(min_length=1, max_length=24, description="short name for tables and charts")
    family: Literal["ampere", "hopper", "blackwell", "blackwell_ultra", "rubin"]
    status: Literal["shipping", "announced"]
    nvlink_domain: int = Field(gt=0, le=1024)
    hbm_gib: float = Field(gt=0, le=4096)
    hbm_tb_s: float = Field(gt=0, le=100)
    tf32_tflops: float | None = Field(default=None, gt=0)
    bf16_tflops: float = Field(gt=0, le=1e5)
    fp8_tflops: float | None = Field(default=None, gt=0, le=1e5)
    fp6_tflops: float | None = Field(default=None, gt=0, le=1e5)
    fp4_tflops: float | None = Field(default=None, gt=0, le=1e5)
    native_mx: bool
    nvlink_gb_s_bidir: float = Field(gt=0, le=1e5)
    nic_gbit_s: float = Field(gt=0, le=1e5)
    tdp_w: float = Field(gt=0, le=1e5)
    hbm_basis: str = Field(min_length=1)
    verification: str = Field(min_length=1)
    sources: str = Field(min_length=5)
    conflicts: str = ""
    assumptions: str = ""

    @field_validator("sources")
    @classmethod
    def _has_source(cls, v: str) -> str:
        if not any(tok in v for tok in (".", "arXiv", "MLPerf")):
            raise ValueError("must name a document or URL")
        return v

    # --- SI-unit views -------------------------------------------------------------
    @property
    def hbm_bytes(self) -> float:
        """Usable HBM in bytes (GiB * 2**30)."""
        return self.hbm_gib * 2**30

    @property
    def hbm_bw(self) -> float:
        """HBM bandwidth, B/s (decimal)."""
        return self.hbm_tb_s * 1e12

    @property
    def nvlink_bw(self) -> float:
        """NVLink bandwidth per GPU, one direction, B/s (half the bidirectional figure)."""
        return self.nvlink_gb_s_bidir / 2 * 1e9

    @property
    def nic_bw(self) -> float:
        """Scale-out NIC bandwidth per GPU, one direction, B/s (Gb/s / 8)."""
        return self.nic_gbit_s / 8 * 1e9

    @property
    def announced(self) -> bool:
        return self.status == "announced"

    def supports(self, precision: str) -> bool:
        """True when the GPU runs ``precision`` natively on its tensor cores."""
        col = PRECISION_COLUMN.get(precision)
        if col is None:
            return False
        if precision in BLOCK_SCALED and not self.native_mx:
            return False
        return getattr(self, col) is not None

    def peak_flops(self, precision: str) -> float:
        """Dense peak FLOP/s for ``precision``; raises UnsupportedPrecision if not native."""
        if precision not in PRECISION_COLUMN:
            raise HardwareError(
                f"unknown precision {precision!r}; valid: {', '.join(PRECISION_COLUMN)}"
            )
        if not self.supports(precision):
            raise UnsupportedPrecision(
                f"{self.id} has no native {precision} tensor cores"
                f" (supported: {', '.join(p for p in PRECISION_COLUMN if self.supports(p))})"
            )
        return getattr(self, PRECISION_COLUMN[precision]) * 1e12

    def ridge_point(self, precision: str) -> float:
        """Roofline ridge point, FLOP per byte of HBM traffic (peak FLOP/s / HBM B/s)."""
        return self.peak_flops(precision) / self.hbm_bw


def _parse_cell(value: str):
    value = value.strip()
    return None if value == "" else value


def load_catalog(path: Path | str = HARDWARE_CSV) -> dict[str, GPU]:
    """Read and validate every row of a hardware CSV; errors name file, row and column."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise HardwareError(f"{path}: cannot read hardware file ({exc.strerror})") from None
    reader = csv.DictReader(text.splitlines())
    required = set(GPU.model_fields) - {"conflicts", "assumptions", "tf32_tflops",
                                         "fp8_tflops", "fp6_tflops", "fp4_tflops"}
    missing = required - set(reader.fieldnames or [])
    if missing:
        raise HardwareError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
    catalog: dict[str, GPU] = {}
    for rownum, row in enumerate(reader, start=2):  # row 1 is the header
        fields = {k: _parse_cell(v or "") for k, v in row.items() if k is not None}
        fields = {k: v for k, v in fields.items() if v is not None}
        try:
            gpu = GPU(**fields)
        except ValidationError as exc:
            err = exc.errors()[0]
            col = ".".join(str(p) for p in err["loc"]) or "?"
            raise HardwareError(
                f"{path.name}: row {rownum}, column {col!r}: {err['msg']}"
                f" (got {fields.get(col)!r})"
            ) from None
        if gpu.id in catalog:
            raise HardwareError(f"{path.name}: row {rownum}, column 'id': duplicate id {gpu.id!r}")
        catalog[gpu.id] = gpu
    if not catalog:
        raise HardwareError(f"{path}: no rows")
    return catalog


@lru_cache(maxsize=1)
def catalog() -> dict[str, GPU]:
    """The project catalog (``data/hardware.csv``), loaded once."""
    return load_catalog(HARDWARE_CSV)


def ids() -> list[str]:
    """All GPU ids in catalog order."""
    return list(catalog())


def get(gpu_id: str) -> GPU:
    """Look up a GPU by id; an unknown id lists the valid ones (and the nearest match)."""
    cat = catalog()
    if gpu_id in cat:
        return cat[gpu_id]
    near = difflib.get_close_matches(str(gpu_id), list(cat), n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    raise UnknownHardware(f"unknown GPU id {gpu_id!r}{hint}; valid ids: {', '.join(cat)}")
