"""The calibrated parameters of the step-time model (``scaletax.model.perf``): GEMM ceilings per
format class and GPU family, the GEMM roofline weight, the memory-bound and MoE routing overheads,
the overlap scale and the fixed time per layer pass, each with its range (``data/efficiency.yaml``,
written by ``scaletax.fit.calibrate``).

- ``Efficiency`` (one point of the parameters), ``EfficiencyBand`` (value / low / high corners and
  the out-of-sample spread, pooled and per regime: ``spreads(regime_idx)``),
  ``load_efficiency(path=EFFICIENCY_YAML)``, ``default_band()``,
  ``default_efficiency()``.
- ``power_per_flop(family)``: the rated power per peak FLOP behind Blackwell Ultra's family factor.
  ``EfficiencyBand.ratio_spread`` is the half-width of a ratio of two predictions (the model's error
  on measured pairs of runs), which ``scaletax.model.plan.ratio_band`` applies. (The ceiling a
  recipe's GEMMs run at is its ``Recipe.format_class``.)
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import yaml

from scaletax import DATA_DIR
from scaletax.inputs import hardware, recipes
from scaletax.inputs.runs import REGIMES
from scaletax.model.comm import Overlap

EFFICIENCY_YAML = DATA_DIR / "efficiency.yaml"
#: PyYAML's safe loader, in C (libyaml) where PyYAML was built with it: the same documents, ~10x
#: faster than the pure-Python ``yaml.safe_load`` (the first prediction of a process reads the file).
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: GEMM format classes, one ceiling parameter each (``recipes.Recipe.format_class``).
FORMAT_CLASSES: tuple[str, ...] = ("16bit", "8bit", "4bit")
FAMILIES: tuple[str, ...] = ("ampere", "hopper", "blackwell", "blackwell_ultra", "rubin")
FP4_CLASS = FORMAT_CLASSES.index("4bit")
#: Format classes with tensor-core support per family (Ampere: no FP8; FP4 from Blackwell on).
FAMILY_CLASSES: dict[str, tuple[str, ...]] = {"ampere": ("16bit",), "hopper": ("16bit", "8bit"),
                                              "blackwell": FORMAT_CLASSES, "blackwell_ultra": FORMAT_CLASSES,
                                              "rubin": FORMAT_CLASSES}


@dataclass(frozen=True)
class Efficiency:
    """The calibrated parameters of the step-time model (one point of ``data/efficiency.yaml``).

    gemm_ceiling   format class -> fraction of the dense peak a large GEMM sustains (Hopper basis;
                   the 4-bit class is absolute)
    family_factor  GPU family -> multiplier on the 16- and 8-bit ceilings (Hopper = 1)
    gemm_roofline  k in (1 + k n_ref / n): how much operand traffic adds to a GEMM of size n
    memory_overhead  time / ideal HBM time of the memory-bound kernels
    overlap_scale  multiplier on the default overlap fractions of :class:`comm.Overlap` (clipped to 1)
    moe_overhead   time / ideal HBM time of the MoE routing kernels (router, token permutations)
    layer_overhead_us  fixed time per transformer layer per micro-batch (forward and backward), microseconds
    """

    gemm_ceiling: Mapping[str, float]
    family_factor: Mapping[str, float]
    gemm_roofline: float
    memory_overhead: float
    overlap_scale: float
    moe_overhead: float = 1.0
    layer_overhead_us: float = 0.0

    def __post_init__(self) -> None:
        missing = set(FORMAT_CLASSES) - set(self.gemm_ceiling)
        if missing:
            raise ValueError(f"gemm_ceiling: missing format class(es) {sorted(missing)}")
        missing = set(FAMILIES) - set(self.family_factor)
        if missing:
            raise ValueError(f"family_factor: missing famil(ies) {sorted(missing)}")
        for fam in FAMILIES:
            for k in FAMILY_CLASSES[fam]:
                c = self.gemm_ceiling[k] * (1.0 if k == "4bit" else self.family_factor[fam])
                if not 0.0 < c <= 1.0:
                    raise ValueError(f"gemm_ceiling[{k}] x family_factor[{fam}] = {c:.3f} must be in (0, 1]")
        if self.gemm_roofline < 0:
            raise ValueError(f"gemm_roofline must be >= 0 (got {self.gemm_roofline})")
        if self.memory_overhead <= 0:
            raise ValueError(f"memory_overhead must be > 0 (got {self.memory_overhead})")
        if self.overlap_scale < 0:
            raise ValueError(f"overlap_scale must be >= 0 (got {self.overlap_scale})")
        if self.moe_overhead <= 0:
            raise ValueError(f"moe_overhead must be > 0 (got {self.moe_overhead})")
        if self.layer_overhead_us < 0:
            raise ValueError(f"layer_overhead_us must be >= 0 (got {self.layer_overhead_us})")

    def ceiling(self, precision: recipes.Recipe, family: str) -> float:
        """Fraction of the dense peak of ``precision`` (a recipe) a large GEMM sustains on ``family``:
        ``gemm_ceiling[class] * family_factor[family]`` for 16- and 8-bit formats, the 4-bit
        ceiling as is (FP4 tensor cores exist only from Blackwell on)."""
        cls = precision.format_class
        return self.gemm_ceiling[cls] * (1.0 if cls == "4bit" else self.family_factor[family])

    def overlap(self, base: Overlap | None = None) -> Overlap:
        """``base`` (default :class:`comm.Overlap`) with every fraction times ``overlap_scale``."""
        b = Overlap() if base is None else base
        s = self.overlap_scale
        return Overlap(**{f: min(1.0, getattr(b, f) * s) for f in ("tp", "etp", "cp", "ep", "pp", "dp")},
                       fwd_share=b.fwd_share)

    # flat parameter vector (for calibration) -------------------------------------------------
    def to_params(self) -> dict[str, float]:
        """Flat ``{name: value}`` as named in ``data/efficiency.yaml``."""
        out = {f"gemm_ceiling_{k}": float(v) for k, v in self.gemm_ceiling.items()}
        out.update({f"family_factor_{k}": float(v) for k, v in self.family_factor.items()})
        out.update(gemm_roofline=float(self.gemm_roofline), memory_overhead=float(self.memory_overhead),
                   overlap_scale=float(self.overlap_scale), moe_overhead=float(self.moe_overhead),
                   layer_overhead_us=float(self.layer_overhead_us))
        return out

    @classmethod
    def from_params(cls, p: Mapping[str, float]) -> "Efficiency":
        """Inverse of :meth:`to_params`."""
        try:
            return cls(gemm_ceiling={k: float(p[f"gemm_ceiling_{k}"]) for k in FORMAT_CLASSES},
                       family_factor={k: float(p[f"family_factor_{k}"]) for k in FAMILIES},
                       gemm_roofline=float(p["gemm_roofline"]), memory_overhead=float(p["memory_overhead"]),
                       overlap_scale=float(p["overlap_scale"]), moe_overhead=float(p["moe_overhead"]),
                       layer_overhead_us=float(p["layer_overhead_us"]))
        except KeyError as exc:
            raise ValueError(f"efficiency parameter {exc.args[0]!r} missing") from None

    def with_params(self, **changes: float) -> "Efficiency":
        p = self.to_params()
        unknown = set(changes) - set(p)
        if unknown:
            raise ValueError(f"unknown efficiency parameter(s) {sorted(unknown)}; valid: {', '.join(p)}")
        p.update(changes)
        return Efficiency.from_params(p)


#: Direction in which each parameter raises throughput (+1: larger is faster, -1: slower).
PARAM_SIGN: dict[str, int] = {**{f"gemm_ceiling_{k}": 1 for k in FORMAT_CLASSES},
                              **{f"family_factor_{k}": 1 for k in FAMILIES},
                              "gemm_roofline": -1, "memory_overhead": -1, "overlap_scale": 1, "moe_overhead": -1,
                              "layer_overhead_us": -1}


@dataclass(frozen=True)
class EfficiencyBand:
    """Central value and range of every parameter; ``low`` / ``high`` are the pessimistic /
    optimistic corners (each parameter at the end of its range that lowers / raises throughput)."""

    value: Efficiency
    low: Efficiency
    high: Efficiency
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)
    #: relative half-width w of the out-of-sample band (``data/efficiency.yaml`` ``band``): every
    #: prediction's low / high is at most value / (1 + w) and at least value x (1 + w) in throughput
    spread: float = 0.0
    #: the same per regime (``data/efficiency.yaml`` ``regimes``, ``runs.REGIMES``): the regime's
    #: leave-one-source-out half-width; a regime not in it takes ``spread``
    regime_spread: Mapping[str, float] = field(default_factory=dict)
    #: relative half-width of a ratio of two predictions (``data/efficiency.yaml`` ``band.ratio_half_width``:
    #: the model's error on measured pairs of runs, one model on two GPUs; the pooled ``spread`` where
    #: the file has none); ``scaletax.model.plan.ratio_band`` applies it
    ratio_spread: float = 0.0

    def __post_init__(self) -> None:
        for name, w in {"": self.spread, "ratio": self.ratio_spread, **dict(self.regime_spread)}.items():
            if not (0.0 <= w < 10.0):
                raise ValueError(f"EfficiencyBand.spread{'[' + repr(name) + ']' if name else ''} must be in [0, 10) "
                                 f"(got {w})")

    def spreads(self, regime_idx) -> np.ndarray:
        """Half-width per entry of ``regime_idx`` (indices into ``runs.REGIMES``)."""
        table = np.array([float(self.regime_spread.get(r, self.spread)) for r in REGIMES])
        return table[np.asarray(regime_idx, dtype=np.int64)]

    @classmethod
    def from_ranges(cls, value: Mapping[str, float], lo: Mapping[str, float], hi: Mapping[str, float],
                    meta: Mapping[str, Any] | None = None) -> "EfficiencyBand":
        """Build from per-parameter ``value``, range ends ``lo`` <= value <= ``hi``."""
        slow, fast = {}, {}
        for k, v in value.items():
            a, b = float(lo[k]), float(hi[k])
            if not a <= float(v) <= b:
                raise ValueError(f"efficiency parameter {k}: value {v} outside its range [{a}, {b}]")
            s = PARAM_SIGN[k]
            slow[k], fast[k] = (a, b) if s > 0 else (b, a)
        return cls(Efficiency.from_params(value), Efficiency.from_params(slow),
                   Efficiency.from_params(fast), dict(meta or {}))


def load_efficiency(path: Path | str = EFFICIENCY_YAML) -> EfficiencyBand:
    """Read ``data/efficiency.yaml``: every parameter needs value, low, high and a source."""
    path = Path(path)
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read efficiency file ({exc.strerror})") from None
    params = (raw or {}).get("parameters") if isinstance(raw, dict) else None
    if not isinstance(params, dict) or not params:
        raise ValueError(f"{path.name}: expected a 'parameters:' mapping")
    value, lo, hi = {}, {}, {}
    for name, entry in params.items():
        if not isinstance(entry, dict):
            raise ValueError(f"{path.name}: parameter {name!r}: expected a mapping")
        for key in ("value", "low", "high", "source"):
            if key not in entry or entry[key] in (None, ""):
                raise ValueError(f"{path.name}: parameter {name!r}: field {key!r} is required")
        if name not in PARAM_SIGN:
            raise ValueError(f"{path.name}: unknown parameter {name!r}; valid: {', '.join(PARAM_SIGN)}")
        value[name], lo[name], hi[name] = float(entry["value"]), float(entry["low"]), float(entry["high"])
    missing = set(PARAM_SIGN) - set(value)
    if missing:
        raise ValueError(f"{path.name}: missing parameter(s) {sorted(missing)}")
    meta = {k: v for k, v in raw.items() if k != "parameters"}
    meta["parameters"] = params
    band = EfficiencyBand.from_ranges(value, lo, hi, meta)
    sec = raw.get("band") or {}
    try:
        spread = float(sec.get("relative_half_width", 0.0)) if isinstance(sec, dict) else 0.0
        ratio = float(sec.get("ratio_half_width", spread)) if isinstance(sec, dict) else spread
    except (TypeError, ValueError):
        raise ValueError(f"{path.name}: band.relative_half_width and band.ratio_half_width must be numbers") from None
    regimes = raw.get("regimes") or {}
    per: dict[str, float] = {}
    for name, rec in (regimes.items() if isinstance(regimes, dict) else ()):
        if isinstance(rec, dict) and rec.get("band_half_width") is not None:
            try:
                per[str(name)] = float(rec["band_half_width"])
            except (TypeError, ValueError):
                raise ValueError(f"{path.name}: regimes.{name}.band_half_width must be a number") from None
    return replace(band, spread=spread, regime_spread=per, ratio_spread=ratio)


@lru_cache(maxsize=1)
def default_band() -> EfficiencyBand:
    """The project's calibrated parameters (``data/efficiency.yaml``), loaded once."""
    return load_efficiency(EFFICIENCY_YAML)


def default_efficiency() -> Efficiency:
    return default_band().value


def power_per_flop(family: str) -> float:
    """Rated board power per dense 16-bit TFLOP/s of a GPU family, W / (TFLOP/s): the mean of
    ``tdp_w / bf16 peak`` over the family's GPUs in ``data/hardware.csv``.

    Used for Blackwell Ultra's family factor (``calibrate``): same silicon generation as
    Blackwell (TSMC 4NP, same FP8/BF16 dense peaks per GPU), more rated power (B300 1100 W vs
    B200 1000 W, GB300 1400 W vs GB200 1200 W). Under a power cap the sustained tensor-core clock
    falls short of the one the datasheet peak assumes; at the voltage floor dynamic power is
    linear in clock (P = C V^2 f), so the sustained fraction of peak scales with power per peak
    FLOP (ASSUMPTION: linear DVFS regime; the ratio is only applied within one silicon generation).
    """
    bf16 = recipes.training("bf16")
    gpus = [g for g in hardware.catalog().values() if g.family == family and not g.variant_of and g.peak_flops(bf16)]
    if not gpus:
        raise ValueError(f"power_per_flop: no GPU of family {family!r} in the catalog")
    return float(np.mean([g.tdp_w / (g.peak_flops(bf16) / 1e12) for g in gpus]))


__all__ = ["EFFICIENCY_YAML", "FAMILIES", "FAMILY_CLASSES", "FORMAT_CLASSES", "FP4_CLASS", "PARAM_SIGN", "SAFE_LOADER",
           "Efficiency", "EfficiencyBand", "default_band", "default_efficiency", "load_efficiency",
           "power_per_flop"]
