"""GPU catalog loaded from ``data/hardware.csv`` and validated row by row.

Units in the CSV are the ones datasheets use (TFLOP/s dense, TB/s, GB/s bidirectional,
Gb/s); the :class:`GPU` object converts them to SI base units (FLOP/s, B/s, one
direction) so that the rest of the model never converts again.

Conventions (DESIGN.md): FLOP/s are dense (datasheet figures quoted with 2:4 sparsity
are halved in the data); ``hbm_gib`` is usable memory in GiB (the MLPerf-reported value
where one exists); bandwidth is decimal bytes per second.

Reads of the catalog are recorded (:func:`reads`): :func:`get` records the id it looks up,
:func:`catalog` and :func:`ids` (the whole catalog handed out) record :data:`ALL`. With
``SCALETAX_HARDWARE_READS`` set (the chapter runner sets it to a file in the chapter's work
folder) each newly recorded id is appended to that file at once, one line each, so a chapter
kernel and the worker processes it starts write to the same record. The runner keys a chapter's
cache entry on exactly the rows it read (``report/execute.py``).
"""
from __future__ import annotations

import contextlib
import csv
import difflib
import json
import os
import re
import threading
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from scaletax import DATA_DIR, memo, unknown_id
from scaletax.inputs import recipes

HARDWARE_CSV = DATA_DIR / "hardware.csv"
SYSTEMS_CSV = DATA_DIR / "systems.csv"
#: Environment variable naming a JSON file of user definitions (``{"gpus": {...}, "models": {...}}``)
#: that the chapter runner writes for a kernel; see :func:`register`.
DEFINITIONS_ENV = "SCALETAX_DEFINITIONS"
#: Marker on the label and verification of a GPU defined or changed in a scenario.
USER_MARK = "your input"
#: Environment variable naming the file this process (and its children) appends its catalog
#: reads to, one id per line (see :func:`reads`).
READS_ENV = "SCALETAX_HARDWARE_READS"
#: The recorded read of the whole catalog (not a valid GPU id: ids match :data:`ID_PATTERN`).
ALL = "*"
#: A GPU id: lowercase letters, digits and ``_``, to the end of the text (``\Z``: no trailing
#: newline, which ``$`` would let through).
ID_PATTERN = re.compile(r"[a-z0-9_]{1,64}\Z")


class HardwareError(ValueError):
    """A hardware data file or lookup is wrong; the message names file, row and column."""


class UnknownHardware(HardwareError):
    """A GPU id that is not in the catalog."""


class UnsupportedPrecision(HardwareError):
    """The GPU has no native tensor-core support for the precision."""


class GPU(BaseModel):
    """One GPU as the model sees it. Raw CSV units; properties give SI units."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9_]{1,64}$")  # pydantic's regex: $ is the end of the text
    name: str = Field(min_length=1)
    label: str = Field(min_length=1, max_length=24, description="short name for tables and charts")
    family: Literal["ampere", "hopper", "blackwell", "blackwell_ultra", "rubin"]
    status: Literal["shipping", "announced"]
    nvlink_domain: int = Field(gt=0, le=1024)
    hbm_gib: float = Field(gt=0, le=4096)
    hbm_tb_s: float = Field(gt=0, le=100)
    tf32_tflops: float | None = Field(default=None, gt=0, le=1e5)
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
    #: The system capacity is bought in (``data/systems.csv``): its name and GPUs per system.
    system: str = ""
    system_gpus: int | None = Field(default=None, gt=0, le=100_000)
    #: Power of the system beyond its GPUs' TDP, per GPU, W (host CPUs and memory, NICs, NVLink
    #: switches, fans, conversion losses): the system's maximum power (``data/systems.csv``,
    #: ``system_kw``) / GPUs per system - TDP. A GPU derived with ``base:`` keeps its base's, so a
    #: new ``tdp_w`` moves the system power by the TDP's change. None: no system power known.
    non_gpu_w: float | None = Field(default=None, ge=0, le=1e5)
    #: Where the system power comes from (``data/systems.csv`` ``power_source``).
    power_source: str = ""
    #: Fields a scenario set (empty for a catalog row): what the book marks as the user's.
    user_fields: tuple[str, ...] = ()

    @field_validator("sources")
    @classmethod
    def _has_source(cls, v: str) -> str:
        if v.startswith(USER_MARK):
            return v
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

    @property
    def user_defined(self) -> bool:
        """True for a GPU defined or changed in a scenario (not a catalog row)."""
        return bool(self.user_fields)

    @property
    def system_w(self) -> float | None:
        """All-in system power per GPU, W: TDP + :attr:`non_gpu_w` (the system's maximum power
        over its GPUs); None when no system power is known."""
        return None if self.non_gpu_w is None else self.tdp_w + self.non_gpu_w

    @property
    def gpus_per_system(self) -> int:
        """GPUs in the smallest unit sold (a node or rack); the NVLink domain when not listed."""
        return self.system_gpus or self.nvlink_domain

    def supports(self, recipe: recipes.Recipe | str) -> bool:
        """True when the GPU runs ``recipe`` (a recipe or its name) natively on its tensor cores
        (:func:`recipes.runs_on`); False for a name no recipe has."""
        if isinstance(recipe, str) and recipe not in recipes.RECIPES:
            return False
        return recipes.runs_on(self, _recipe(recipe))

    def peak_flops(self, recipe: recipes.Recipe | str) -> float:
        """Dense peak FLOP/s of ``recipe`` (a recipe or its name: the catalog's column of its
        format); raises UnsupportedPrecision if not native."""
        r = _recipe(recipe)
        if not self.supports(r):
            raise UnsupportedPrecision(
                f"{self.id} has no native {r.name} tensor cores"
                f" (supported: {', '.join(p for p, x in recipes.RECIPES.items() if self.supports(x))})"
            )
        return getattr(self, r.peak_column) * 1e12

    def ridge_point(self, recipe: recipes.Recipe | str) -> float:
        """Roofline ridge point, FLOP per byte of HBM traffic (peak FLOP/s / HBM B/s)."""
        return self.peak_flops(recipe) / self.hbm_bw


def _recipe(recipe: recipes.Recipe | str) -> recipes.Recipe:
    """A recipe, or the recipe of a precision name (a catalog query by format; the model passes recipes)."""
    if isinstance(recipe, recipes.Recipe):
        return recipe
    if recipe not in recipes.RECIPES:
        raise HardwareError(f"unknown precision {recipe!r}; valid: {', '.join(recipes.NAMES)}")
    return recipes.RECIPES[recipe]


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
    required = {k for k, f in GPU.model_fields.items() if f.is_required()}
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


def load_systems(path: Path | str = SYSTEMS_CSV) -> dict[str, tuple[str, int, float, str]]:
    """GPU id -> (system name, GPUs per system, maximum system power in kW, its source) from a
    systems CSV (sourced rows)."""
    path = Path(path)
    out: dict[str, tuple[str, int, float, str]] = {}
    for rownum, row in enumerate(csv.DictReader(path.read_text(encoding="utf-8").splitlines()), start=2):
        try:
            n = int(row["gpus_per_system"])
        except (KeyError, TypeError, ValueError):
            raise HardwareError(f"{path.name}: row {rownum}, column 'gpus_per_system': expected an integer") from None
        if n <= 0 or not (row.get("source") or "").strip():
            raise HardwareError(f"{path.name}: row {rownum}: needs a positive gpus_per_system and a source")
        try:
            kw = float(row["system_kw"])
        except (KeyError, TypeError, ValueError):
            raise HardwareError(f"{path.name}: row {rownum}, column 'system_kw': expected a number") from None
        if not 0 < kw < 1e5 or not (row.get("power_source") or "").strip():
            raise HardwareError(f"{path.name}: row {rownum}: needs a positive system_kw and a power_source")
        out[row["gpu"]] = (row["system"], n, kw, row["power_source"].strip())
    return out


@lru_cache(maxsize=1)
def _data_catalog() -> dict[str, GPU]:
    cat = load_catalog(HARDWARE_CSV)
    systems = load_systems(SYSTEMS_CSV) if SYSTEMS_CSV.exists() else {}
    for gid, (system, n, kw, power_source) in systems.items():
        if gid not in cat:
            raise HardwareError(f"{SYSTEMS_CSV.name}: unknown GPU id {gid!r}")
        other = kw * 1e3 / n - cat[gid].tdp_w
        if other < 0:
            raise HardwareError(f"{SYSTEMS_CSV.name}: {gid}: system_kw {kw:g} is less than {n} x its TDP "
                                f"({cat[gid].tdp_w:g} W)")
        cat[gid] = cat[gid].model_copy(update={"system": system, "system_gpus": n, "non_gpu_w": other,
                                               "power_source": power_source})
    return cat


#: GPUs defined in a scenario (see :func:`register`), consulted before the catalog.
_USER: dict[str, GPU] = {}


def _load_env_definitions() -> None:
    path = os.environ.get(DEFINITIONS_ENV)
    if path and not _USER:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        register({k: GPU(**v) for k, v in data.get("gpus", {}).items()})


# --- the record of what this process read ------------------------------------------------
#: Catalog ids (or :data:`ALL`) this process read, in the order first read.
_READS: dict[str, None] = {}
class _Scopes(threading.local):
    """The open :func:`reads_during` scopes of one thread (threads of one chapter search side by
    side, ``scaletax.jobserver.map``): a read is added to each of its own thread's."""

    def __init__(self) -> None:
        self.open: list[set[str]] = []


_SCOPES = _Scopes()


def _record(gpu_id: str) -> None:
    """Record a read of ``gpu_id`` (or :data:`ALL`); append it to the :data:`READS_ENV` file
    the first time (one ``write`` of one line in append mode: safe across processes)."""
    for scope in _SCOPES.open:
        scope.add(gpu_id)
    if gpu_id in _READS:
        return
    _READS[gpu_id] = None
    path = os.environ.get(READS_ENV)
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (gpu_id + "\n").encode())
        finally:
            os.close(fd)


def reads() -> tuple[str, ...]:
    """The catalog ids this process read through :func:`get` (first-read order), with
    :data:`ALL` when it was handed the whole catalog. GPUs a scenario defined are not catalog
    reads (their definitions are inputs of their own)."""
    return tuple(_READS)


def forget_reads() -> None:
    """Start a new record (tests; the file named by :data:`READS_ENV` is left as it is)."""
    _READS.clear()


@contextlib.contextmanager
def reads_during():
    """``with reads_during() as seen:`` collects into ``seen`` every read made in the block
    (also those already recorded before it) by this thread: what ``memo`` checks a cached call
    against."""
    seen: set[str] = set()
    _SCOPES.open.append(seen)
    try:
        yield seen
    finally:
        _SCOPES.open.remove(seen)


def read_file(path: Path | str) -> tuple[str, ...]:
    """The reads a :data:`READS_ENV` file holds: sorted unique ids, or ``(ALL,)`` when the
    whole catalog was read; ``()`` for a missing or empty file."""
    try:
        lines = Path(path).read_text(encoding="utf-8").split()
    except FileNotFoundError:
        return ()
    return (ALL,) if ALL in lines else tuple(sorted(set(lines)))


#: A cached call (``scaletax.memo``) reads GPUs only through its arguments: memo checks it with these.
memo.guard_catalog(reads_during, lambda: catalog())


def catalog() -> dict[str, GPU]:
    """The project catalog (``data/hardware.csv`` + ``data/systems.csv``), then the GPUs a
    scenario defined (:func:`register`). Records a read of the whole catalog (:data:`ALL`):
    look single GPUs up with :func:`get`."""
    _load_env_definitions()
    _record(ALL)
    return {**_data_catalog(), **_USER}


catalog.cache_clear = _data_catalog.cache_clear  # type: ignore[attr-defined]  # reload the data files


def register(gpus: dict[str, GPU]) -> None:
    """Make scenario-defined GPUs (from :func:`define`) visible to :func:`get` in this process.

    A chapter kernel gets them from the JSON file named by ``SCALETAX_DEFINITIONS``.
    """
    for gid, g in gpus.items():
        if gid in _data_catalog():
            raise HardwareError(f"GPU id {gid!r} is a catalog id; give your GPU another id")
        _USER[gid] = g


def unregister() -> None:
    """Forget the scenario-defined GPUs of this process."""
    _USER.clear()


def ids() -> list[str]:
    """All GPU ids in catalog order (scenario-defined ones last); records :data:`ALL`."""
    return list(catalog())


def _unknown(gpu_id: str, valid: list[str], what: str = "GPU id") -> str:
    return unknown_id(gpu_id, valid, what)


def get(gpu_id: str) -> GPU:
    """Look up a GPU by id; an unknown id lists the valid ones (and the nearest match).

    Records the read of ``gpu_id`` (a catalog id, or one the catalog lacks: its absence is what
    was read); a GPU the scenario defined is not a catalog read."""
    _load_env_definitions()
    if gpu_id in _USER:
        return _USER[gpu_id]
    _record(gpu_id)
    cat = _data_catalog()
    if gpu_id in cat:
        return cat[gpu_id]
    valid = [*cat, *_USER]
    raise UnknownHardware(f"{_unknown(gpu_id, valid)}; valid ids: {', '.join(valid)}")


def check(gpu: GPU) -> GPU:
    """``gpu`` itself when it is a :class:`GPU`; a TypeError otherwise: the model takes GPUs,
    looked up from their ids once where the ids come in (:func:`get`)."""
    if not isinstance(gpu, GPU):
        raise TypeError(f"expected a hardware.GPU, got {type(gpu).__name__} {gpu!r}: look a GPU id up once "
                        "where it comes in (hardware.get)")
    return gpu


def known(gpu_id: str) -> bool:
    """Whether ``gpu_id`` is a GPU :func:`get` finds, recorded as a read of that id only."""
    try:
        get(gpu_id)
    except UnknownHardware:
        return False
    return True


#: Fields a scenario may not set on a GPU (bookkeeping, not hardware).
_NOT_SETTABLE = ("user_fields",)


def define(spec: dict) -> GPU:
    """A GPU from a scenario entry: ``id`` plus GPU fields (the :class:`GPU` schema, CSV units),
    or ``base: <catalog id>`` plus the fields that differ (``nic_gbit_s: 800``, ``tdp_w: 500``).

    Types are strict, as in the rest of the scenario (pydantic strict mode): ``true`` or
    ``"700"`` is not a number, ``1`` or ``"yes"`` is not a boolean, and every number has bounds.
    The result is marked as the user's: ``user_fields`` lists what the scenario set, the label
    ends with "(yours)", ``verification`` and ``sources`` start with "your input". A ``source``
    key (text) says where the user's values come from. Raises HardwareError (one line).
    """
    if not isinstance(spec, dict):
        raise HardwareError(f"a GPU definition must be a mapping or a catalog id (got {spec!r})")
    spec = dict(spec)
    gid = spec.pop("id", None)
    if not isinstance(gid, str) or not ID_PATTERN.match(gid):
        raise HardwareError(f"a GPU definition needs an 'id' of lowercase letters, digits or '_' (got {gid!r})")
    base_id = spec.pop("base", None)
    note = spec.pop("source", None)
    for key, value in (("base", base_id), ("source", note), ("label", spec.get("label"))):
        if value is not None and not isinstance(value, str):
            raise HardwareError(f"GPU {gid!r}: field {key!r}: Input should be a valid string (got {value!r})")
    for key in spec:
        if key not in GPU.model_fields or key in _NOT_SETTABLE:
            near = difflib.get_close_matches(str(key), [f for f in GPU.model_fields if f not in _NOT_SETTABLE], n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise HardwareError(f"GPU {gid!r}: unknown field {key!r}{hint}")
    changed = tuple(sorted(spec))
    if base_id is not None:
        cat = _data_catalog()
        _record(str(base_id))  # the base row is read
        if base_id not in cat:
            raise HardwareError(f"GPU {gid!r}: base: {_unknown(base_id, list(cat), 'GPU id')}")
        base = cat[base_id]
        if not changed:
            raise HardwareError(f"GPU {gid!r}: base {base_id!r} with no field changed; use the id {base_id!r}")
        fields = base.model_dump()
        what = ", ".join(f"{k}={spec[k]}" for k in changed)
        fields.update(name=f"{base.name} with your {', '.join(changed)}", label=base.label,
                      verification=f"{USER_MARK} ({what}); other values as {base_id}: {base.verification}",
                      sources=f"{USER_MARK}{': ' + note if note else ''} ({what}); other values: {base.sources}")
    else:
        fields = {"verification": f"{USER_MARK}: defined in the scenario",
                  "sources": f"{USER_MARK}{': ' + note if note else ''}", "hbm_basis": USER_MARK}
    fields.update(spec)
    label = str(fields.get("label") or gid)
    if len(label) > 16:
        raise HardwareError(f"GPU {gid!r}: label: at most 16 characters (got {label!r}); the book appends ' (yours)'")
    fields.update(id=gid, label=f"{label} (yours)", user_fields=changed or ("id",))
    try:
        return GPU.model_validate(fields, strict=True)
    except ValidationError as exc:
        err = exc.errors()[0]
        col = ".".join(str(p) for p in err["loc"]) or "?"
        raise HardwareError(f"GPU {gid!r}: field {col!r}: {err['msg']} (got {fields.get(col)!r})") from None
