"""Calibration: the step-time model's free parameters fitted to measurements and written, ALL
of them, into ``data/efficiency.yaml`` (the communication efficiencies included).

``validate`` only compares predictions with measurements; everything fitted is fitted here.
Regenerate the file after a model change with::

    .venv/bin/python -m scaletax.fit.calibrate

Public API
----------
- ``fit_gemm_measurements(path, min_m=1024) -> dict``: Hopper GEMM ceilings and the roofline
  constant from ``data/measured/gemm_h200.csv``.
- ``prepare_rows(rows) -> (StepInputs, [RowPlan])``, ``load_rows(path)``: the runs table as one
  vectorized input (``runplan.plan_row`` + ``runplan.step_inputs``).
- ``calibrate(rows=None, fit=FIT_PARAMS, fixed=None, subset=None) -> Calibration``: the
  run-calibrated parameters (Levenberg-Marquardt on log errors, numpy only); ``subset`` and
  ``fixed`` serve the cross-validation folds of ``validate``.
- ``efficiency_ranges(...)``, ``band_from_ranges``, ``efficiency_yaml_text(...)``,
  ``write_efficiency_yaml(path)``: how ``data/efficiency.yaml`` is produced (with the
  ``collectives`` section: ``comm.fit_calibration`` on ``data/collectives.csv``).
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from scaletax import DATA_DIR
from scaletax.inputs import hardware, recipes, runs
from scaletax.inputs.runs import ROW_CONVENTIONS
from scaletax.fit import kernels
from scaletax.model import comm, efficiency, perf, runplan
from scaletax.model.runplan import RowPlan

GEMM_CSV = DATA_DIR / "measured" / "gemm_h200.csv"


#: The tables calibrate fits on: the calibration table and the validation table (72 runs of other
#: sources, stacks and regimes). The held-out production runs (``runs.HELDOUT_CSV``) are never fitted,
#: nor a validation row that measures one of them again (its ``same_run_as``).
FIT_TABLES: tuple[Path, ...] = runs.FITTED_TABLES


def load_rows(path: Path | str | Sequence[Path | str] = FIT_TABLES) -> list[dict[str, Any]]:
    """The rows calibrate fits (default :data:`FIT_TABLES`): ``runs.fitted_runs``, rows naming a
    ``same_run_as`` (a held-out run measured again) left out."""
    return runs.fitted_runs([path] if isinstance(path, (str, Path)) else list(path))


def prepare_rows(rows: Iterable[dict[str, Any]]) -> tuple[perf.StepInputs, list[RowPlan]]:
    """Every row planned (``runplan.plan_row``) and its step-time inputs, concatenated."""
    plans = [runplan.plan_row(r) for r in rows]
    return runplan.step_inputs(plans), plans


# =========================================================================================
# Measured GEMMs -> Hopper ceilings and the roofline constant
# =========================================================================================
_GEMM_DTYPE = {"bf16": recipes.training("bf16"), "fp8_e4m3": recipes.training("fp8")}



def fit_gemm_measurements(path: Path | str = GEMM_CSV, min_m: int = 1024, gpu: str = "h200_sxm") -> dict[str, float]:
    """Fit ``ceiling / (1 + k n_ref / n)`` (perf's GEMM rule) to single-GEMM measurements.

    Rows with m >= ``min_m`` (tokens per micro-batch in training are >= 1024) and the square
    sweep from 2048 up (smaller squares are launch-latency bound). For each k on a 0.01 grid in
    [0, 3] the ceilings are the geometric means of the implied per-shape ceilings; k minimizes
    the squared log error. Returns ``gemm_roofline`` (k), ``ceiling_bf16``, ``ceiling_fp8``,
    ``rms_log_error`` and the number of points.

    The fit is a pure function of the file's text, ``min_m`` and the GPU's record, kept once per
    process for each (the cross-validation folds ask for it about 80 times per validation).
    """
    text = Path(path).read_bytes().decode("utf-8")
    return dict(_fit_gemm(text, str(path), min_m, hardware.get(gpu)))


@lru_cache(maxsize=16)
def _fit_gemm(text: str, path: str, min_m: int, g: hardware.GPU) -> dict[str, float]:
    """:func:`fit_gemm_measurements` on the CSV ``text`` (read from ``path``) for GPU ``g``."""
    pts = []
    for r in csv.DictReader(io.StringIO(text, newline="")):
        d = _GEMM_DTYPE.get(r["dtype"])
        if d is None:
            continue
        m, n, k = float(r["m"]), float(r["n"]), float(r["k"])
        if m < min_m or (r["label"] == "square" and m < 2048):
            continue
        eff = float(r["tflops"]) * 1e12 / g.peak_flops(d)
        n_hm = 3.0 / (1 / m + 1 / n + 1 / k)
        pts.append((d, eff, perf.gemm_reference_size(g, d) / n_hm))
    if not pts:
        raise ValueError(f"{path}: no GEMM rows with m >= {min_m}")
    dt = np.array([p[0].name for p in pts])
    eff = np.array([p[1] for p in pts])
    x = np.array([p[2] for p in pts])
    best = None
    for kr in np.round(np.arange(0.0, 3.0001, 0.01), 2):
        implied = eff * (1.0 + kr * x)
        err, cs = [], {}
        for d in ("bf16", "fp8"):
            lg = np.log(implied[dt == d])
            cs[d] = float(np.exp(lg.mean()))
            err.append(lg - lg.mean())
        sse = float(np.sum(np.square(np.concatenate(err))))
        if best is None or sse < best[0] - 1e-12:
            best = (sse, float(kr), cs)
    sse, kr, cs = best
    return {"gemm_roofline": kr, "ceiling_bf16": cs["bf16"], "ceiling_fp8": cs["fp8"],
            "rms_log_error": math.sqrt(sse / len(pts)), "points": len(pts), "min_m": min_m}


# =========================================================================================
# Calibration on the runs table
# =========================================================================================
#: Parameters fitted to the runs table (the others come from the GEMM measurements or are stated).
FIT_PARAMS: tuple[str, ...] = ("gemm_ceiling_8bit", "gemm_ceiling_4bit", "family_factor_ampere",
                               "family_factor_blackwell", "memory_overhead", "overlap_scale", "layer_overhead_us")
#: Search bounds of the fit (physical limits, not ranges of the result).
FIT_BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_ceiling_16bit": (0.3, 1.0), "gemm_ceiling_8bit": (0.3, 1.0), "gemm_ceiling_4bit": (0.15, 1.0),
    "family_factor_ampere": (0.5, 1.3), "family_factor_blackwell": (0.5, 1.3),
    "family_factor_blackwell_ultra": (0.5, 1.3), "family_factor_rubin": (0.5, 1.3),
    "family_factor_hopper": (1.0, 1.0), "gemm_roofline": (0.0, 3.0), "memory_overhead": (0.5, 8.0),
    "moe_overhead": (0.5, 30.0),
    "overlap_scale": (0.0, 2.0), "layer_overhead_us": (0.0, 1000.0),
}


def fp8_over_bf16_max(path: Path | str = GEMM_CSV) -> float:
    """The largest ratio, over the shapes measured in both formats, of the fraction of the dense
    peak an FP8 GEMM sustains to the fraction the BF16 GEMM of the same shape sustains (both FP8
    columns of ``data/measured/gemm_h200.csv``, plain and fast accumulation; H200 dense peaks).

    Every measured shape has it at or below about 1: an FP8 GEMM does not reach a larger share of
    its (twice as high) peak than BF16 does under the same power limit.
    """
    return _fp8_over_bf16_max(Path(path).read_bytes().decode("utf-8"), str(path), hardware.get("h200_sxm"))


@lru_cache(maxsize=4)
def _fp8_over_bf16_max(text: str, path: str, g: hardware.GPU) -> float:
    """:func:`fp8_over_bf16_max` of the CSV ``text`` (kept per process: every fit asks for it)."""
    by: dict[tuple[str, ...], dict[str, float]] = {}
    for r in csv.DictReader(io.StringIO(text, newline="")):
        if r["dtype"] in ("bf16", "fp8_e4m3", "fp8_e4m3_fastaccum"):
            by.setdefault((r["label"], r["m"], r["n"], r["k"]), {})[r["dtype"]] = float(r["tflops"]) * 1e12
    fp8, bf16 = recipes.training("fp8"), recipes.training("bf16")
    ratios = [v[d] / g.peak_flops(fp8) / (v["bf16"] / g.peak_flops(bf16))
              for v in by.values() if "bf16" in v for d in ("fp8_e4m3", "fp8_e4m3_fastaccum") if d in v]
    if not ratios:
        raise ValueError(f"{path}: no shape measured in both BF16 and FP8")
    return float(max(ratios))


def fit_bounds() -> dict[str, tuple[float, float]]:
    """:data:`FIT_BOUNDS` with the 8-bit ceiling's upper end from the H200 measurement: the
    measured 16-bit ceiling times :func:`fp8_over_bf16_max` (on the Hopper basis the 8-bit
    ceiling is a fraction of the FP8 peak, which no measured FP8 GEMM holds above the BF16 one).
    Without it a fold that keeps few 8-bit rows trades the 8-bit ceiling against the
    memory-bound overhead up to a ceiling of 1 (leaving the large dense runs out did). The fixed
    time per layer pass stays below :data:`LAYER_GEMM_CALLS` idle GEMM calls (:func:`gemm_call_floor_us`)."""
    b = dict(FIT_BOUNDS)
    top = fit_gemm_measurements()["ceiling_bf16"] * fp8_over_bf16_max()
    b["gemm_ceiling_8bit"] = (b["gemm_ceiling_8bit"][0], min(b["gemm_ceiling_8bit"][1], top))
    # a layer pass costs less than its GEMM calls on an idle GPU (gemm_call_floor_us)
    b["layer_overhead_us"] = (b["layer_overhead_us"][0], LAYER_GEMM_CALLS * gemm_call_floor_us())
    return b


#: Families without rows in the table take the Blackwell factor (stated, not calibrated); Blackwell
#: Ultra times its power headroom over Blackwell (:data:`DERIVED_FAMILIES`, ``efficiency.power_per_flop``).
TIED_FAMILIES: tuple[str, ...] = ("blackwell_ultra", "rubin")
#: Families whose factor is Blackwell's times the ratio of rated power per peak FLOP (same silicon).
DERIVED_FAMILIES: dict[str, str] = {"blackwell_ultra": "blackwell"}
#: Prior of a parameter in a cross-validation fold with no row that identifies it: what a
#: planner assumes for a generation or format before any measurement. A family factor: 1 (the
#: new generation sustains the Hopper fraction of its datasheet peak); the 8-bit ceiling: the FP8
#: GEMM ceiling measured on the H200 (data/measured/gemm_h200.csv); the 4-bit ceiling: the fold's
#: 8-bit ceiling times the Blackwell factor (the same fraction as the previous format).
PRIORS: dict[str, Any] = {
    "gemm_ceiling_4bit": lambda p: min(1.0, p["gemm_ceiling_8bit"] * p["family_factor_blackwell"]),
    "family_factor_ampere": lambda p: 1.0,
    "family_factor_blackwell": lambda p: 1.0,
    "gemm_ceiling_8bit": lambda p: fit_gemm_measurements()["ceiling_fp8"],
}
#: Which rows identify a parameter (a cross-validation fold without such a row uses the prior).
IDENTIFIED_BY: dict[str, Any] = {
    "gemm_ceiling_4bit": lambda su: su.precision.format_class == "4bit",
    "family_factor_ampere": lambda su: su.gpu.family == "ampere",
    "family_factor_blackwell": lambda su: su.gpu.family == "blackwell",
    # Hopper is the basis (factor 1): only Hopper 8-bit rows separate the 8-bit ceiling from a factor
    "gemm_ceiling_8bit": lambda su: su.precision.format_class == "8bit" and su.gpu.family == "hopper",
}


def measured_base() -> dict[str, float]:
    """Start point and fixed values: Hopper 16-bit ceiling and roofline constant measured on an
    H200 (:func:`fit_gemm_measurements`), the MoE routing overhead measured there
    (``kernels.routing_overhead``), Hopper family factor 1 (the reference)."""
    m = fit_gemm_measurements()
    base = {f"gemm_ceiling_{k}": v for k, v in (("16bit", m["ceiling_bf16"]), ("8bit", m["ceiling_fp8"]),
                                                 ("4bit", 0.6))}
    base.update({f"family_factor_{f}": 1.0 for f in efficiency.FAMILIES})
    base.update(gemm_roofline=m["gemm_roofline"], memory_overhead=2.0, overlap_scale=1.0,
                moe_overhead=kernels.routing_overhead()["value"],
                layer_overhead_us=gemm_call_floor_us())
    return base


#: GEMM calls of a dense transformer layer's forward and backward (``perf.LAYER_GEMM_CALLS``).
LAYER_GEMM_CALLS = perf.LAYER_GEMM_CALLS


@lru_cache(maxsize=4)
def gemm_call_floor_us(path: Path | str = GEMM_CSV) -> float:
    """The shortest GEMM call measured on an idle H200 (``data/measured/gemm_h200.csv``, the
    ``seconds`` of every GEMM row), microseconds: however small the GEMM, host dispatch and launch
    take about this long on an idle GPU (the 512^3 and 1024^3 GEMMs both ~22 us). The start of the
    fitted ``layer_overhead_us``, and ``LAYER_GEMM_CALLS`` of it bound that fit from above (a step
    queues its kernels ahead of the GPU, so a layer pass pays less than its calls idle)."""
    with open(path, newline="", encoding="utf-8") as f:
        secs = [float(r["seconds"]) for r in csv.DictReader(f) if r["dtype"] in _GEMM_DTYPE]
    if not secs:
        raise ValueError(f"{path}: no GEMM rows")
    return min(secs) * 1e6



def _tie(p: dict[str, float], ratios: dict[str, float] | None = None) -> dict[str, float]:
    """Tied and derived family factors from Blackwell's (:data:`TIED_FAMILIES`), every ceiling x
    factor kept at or below 1; ``ratios``: :func:`tie_ratios`, computed once per fit (it reads the
    catalog) and passed in."""
    ratios = tie_ratios() if ratios is None else ratios
    q = dict(p)
    cap = (1.0 - 1e-9) / max(q["gemm_ceiling_16bit"], q["gemm_ceiling_8bit"])  # no ceiling x factor above 1
    for f in efficiency.FAMILIES:
        q[f"family_factor_{f}"] = min(q[f"family_factor_{f}"], cap)
    for f in TIED_FAMILIES:
        q[f"family_factor_{f}"] = min(q["family_factor_blackwell"] * ratios[f], cap)
    return q


def tie_ratios() -> dict[str, float]:
    """:func:`power_ratio` of every tied family (:data:`TIED_FAMILIES`)."""
    return {f: power_ratio(f) for f in TIED_FAMILIES}


def power_ratio(family: str) -> float:
    """Multiplier on Blackwell's factor for a tied family: rated power per peak FLOP over
    Blackwell's for :data:`DERIVED_FAMILIES` (``efficiency.power_per_flop``), else 1 (tied)."""
    ref = DERIVED_FAMILIES.get(family)
    if ref is None:
        return 1.0
    return efficiency.power_per_flop(family) / efficiency.power_per_flop(ref)


def _residuals(inp: perf.StepInputs, measured: np.ndarray, p: dict[str, float],
               ratios: dict[str, float] | None = None) -> np.ndarray:
    st = perf.evaluate(inp, efficiency.Efficiency.from_params(_tie(p, ratios)))
    return np.log(st.tokens_per_s_per_gpu / measured)


@dataclass(frozen=True)
class Calibration:
    """Fitted parameters (all of them, fixed ones included), cost = sum of squared log errors,
    and the indices of the rows used."""

    params: dict[str, float]
    cost: float
    rows: tuple[int, ...]
    fitted: tuple[str, ...]

    @property
    def efficiency(self) -> efficiency.Efficiency:
        return efficiency.Efficiency.from_params(self.params)


def _lm(inp, meas, names, base, idx, iters=80, ratios=None):
    """Levenberg-Marquardt on log(parameter), bounds by clipping; returns (params, cost)."""
    ratios = tie_ratios() if ratios is None else ratios
    bounds = fit_bounds()
    lo = np.array([max(bounds[n][0], 1e-6) for n in names])
    hi = np.array([bounds[n][1] for n in names])

    def unpack(x):
        return {**base, **dict(zip(names, np.clip(np.exp(x), lo, hi)))}

    def res(x):
        return _residuals(inp, meas, unpack(x), ratios)[idx]

    x = np.log(np.clip([base[n] for n in names], lo, hi))
    f = res(x)
    c = float(f @ f)
    lam = 1e-2
    for _ in range(iters):
        J = np.empty((f.size, x.size))
        for j in range(x.size):
            d = np.zeros_like(x)
            d[j] = 1e-5
            J[:, j] = (res(x + d) - f) / 1e-5
        A = J.T @ J
        g = J.T @ f
        improved = False
        while lam < 1e8:
            step = -np.linalg.solve(A + lam * (np.diag(np.diag(A)) + 1e-9 * np.eye(x.size)), g)
            xn = np.log(np.clip(np.exp(x + step), lo, hi))
            fn = res(xn)
            cn = float(fn @ fn)
            if cn < c - 1e-12:
                x, f, c, improved = xn, fn, cn, True
                lam = max(lam / 3.0, 1e-7)
                break
            lam *= 4.0
        if not improved or np.max(np.abs(step)) < 1e-7:
            break
    return unpack(x), c


#: Deterministic start points of the multi-start fit (multipliers on the base values).
_STARTS = ({}, {"gemm_ceiling_8bit": 1.25, "family_factor_blackwell": 0.85, "memory_overhead": 1.6},
           {"gemm_ceiling_8bit": 1.1, "gemm_ceiling_4bit": 1.2, "memory_overhead": 0.6, "overlap_scale": 0.7})


def calibrate(rows: Sequence[dict[str, Any]] | None = None, fit: Sequence[str] = FIT_PARAMS,
              fixed: dict[str, float] | None = None, subset: Sequence[int] | None = None,
              prepared: tuple[perf.StepInputs, list[RowSetup]] | None = None) -> Calibration:
    """Fit ``fit`` to the log error of tokens/s per GPU on the rows (all, or ``subset``).

    Other parameters: :func:`measured_base`, then ``fixed``. Multi-start Levenberg-Marquardt
    (:data:`_STARTS`), numpy only, deterministic. Rows without a measurement are skipped.
    """
    rows = load_rows() if rows is None and prepared is None else rows
    inp, setups = prepared if prepared is not None else prepare_rows(rows)
    meas = np.array([su.measured if su.measured else np.nan for su in setups])
    idx = np.array([i for i in (range(len(setups)) if subset is None else subset) if np.isfinite(meas[i])])
    base = {**measured_base(), **(fixed or {})}
    names = [n for n in fit if n not in (fixed or {})]
    ratios = tie_ratios()
    best = None
    for mult in _STARTS:
        start = {k: (v * mult.get(k, 1.0) if k in names else v) for k, v in base.items()}  # fixed stay fixed
        p, c = _lm(inp, np.where(np.isfinite(meas), meas, 1.0), names, start, idx, ratios=ratios)
        if best is None or c < best[1] - 1e-10:
            best = (p, c)
    return Calibration(params=_tie(best[0], ratios), cost=best[1], rows=tuple(int(i) for i in idx), fitted=tuple(names))


@dataclass(frozen=True)
class FoldFit:
    """A cross-validation fold's calibration and the parameters that took their prior."""

    calibration: Calibration
    priors: tuple[str, ...]

    @property
    def efficiency(self) -> efficiency.Efficiency:
        return self.calibration.efficiency


def calibrate_fold(inp: perf.StepInputs, plans: Sequence[RowPlan], train: Sequence[int]) -> FoldFit:
    """Calibration on the rows ``train`` only; a fitted parameter that no training row
    identifies (:data:`IDENTIFIED_BY`) is fixed at its prior (:data:`PRIORS`), not fitted."""
    base = measured_base()
    priors = [n for n, ident in IDENTIFIED_BY.items() if n in FIT_PARAMS and not any(ident(plans[i]) for i in train)]
    fixed: dict[str, float] = {}
    for n in priors:
        fixed[n] = float(PRIORS[n]({**base, **fixed}))
    return FoldFit(calibrate(prepared=(inp, list(plans)), subset=train, fixed=fixed), tuple(priors))


def fold_predictions(inp: perf.StepInputs, plans: Sequence[RowPlan], key_of=None,
                     fits: dict[tuple[int, ...], FoldFit] | None = None,
                     train: Sequence[int] | None = None) -> tuple[np.ndarray, list[str]]:
    """Out-of-fold tokens/s per GPU of every row: each fold (rows with one value of
    ``key_of(row)``; ``None``: each row alone) predicted by :func:`calibrate_fold` on the rest.
    Returns (predictions, per row the comma-joined parameters that took their prior); rows
    without a measurement get NaN.

    ``train``: the rows a calibration may use (default all with a measurement): a fold is fitted on
    those of them outside it, and every row with a measurement, in ``train`` or not, is predicted by
    the fit without its fold (rows of a held-out table are then predicted without their whole source).
    ``fits``: fold fits by training rows, shared between calls on the same ``inp`` and ``plans``
    (two schemes often hold out the same rows: a family with one run is also a leave-one-row-out
    fold); a training set already in it is not fitted again."""
    fits = {} if fits is None else fits
    keys = [i if key_of is None else key_of(p.row) for i, p in enumerate(plans)]
    ok = [p.measured is not None for p in plans]
    pool = set(range(len(plans))) if train is None else set(int(i) for i in train)
    pred = np.full(len(plans), np.nan)
    prior = [""] * len(plans)
    for key in dict.fromkeys(keys):
        test = [i for i, k in enumerate(keys) if k == key and ok[i]]
        if not test:
            continue
        fold_train = tuple(i for i, k in enumerate(keys) if k != key and ok[i] and i in pool)
        if fold_train not in fits:
            fits[fold_train] = calibrate_fold(inp, plans, list(fold_train))
        fit = fits[fold_train]
        st = perf.evaluate(inp, fit.efficiency)
        for i in test:
            pred[i] = float(st.tokens_per_s_per_gpu[i])
            prior[i] = ", ".join(n for n in fit.priors if IDENTIFIED_BY[n](plans[i]))
    return pred, prior


#: The planning band: this quantile of |log(predicted / measured)| over the runs predicted without
#: their source (leave one source out: a planner's run comes from a stack and cluster no fit has seen).
BAND_QUANTILE = 0.8
#: A regime with fewer fitted runs than this takes the pooled half-width, widened to its largest error.
BAND_MIN_RUNS = 8


def source_predictions(prepared=None, fits: dict | None = None) -> np.ndarray:
    """Tokens/s per GPU of every fitted run predicted by a calibration without its source
    (``runs.row_source``; :func:`fold_predictions`): the residuals the bands are made of."""
    inp, plans = prepare_rows(load_rows()) if prepared is None else prepared
    return fold_predictions(inp, plans, runs.row_source, fits)[0]


def conformal_quantile(a, level: float = BAND_QUANTILE) -> float:
    """The split-conformal quantile of the scores ``a``: the ceil((n + 1) level)-th smallest of n (the
    largest where that exceeds n). A new run exchangeable with the n falls at or below it with
    probability >= ``level`` (Lei et al. 2018, JASA 113:1094, Thm 2.2; Angelopoulos & Bates,
    arXiv 2107.07511, §1), where the plain empirical quantile covers less at small n."""
    x = np.sort(np.asarray(a, dtype=np.float64).ravel())
    if not x.size:
        raise ValueError("conformal_quantile: no score")
    return float(x[min(x.size, math.ceil((x.size + 1) * level - 1e-9)) - 1])


def band_widths(log_err: np.ndarray, regimes: Sequence[str]) -> tuple[float, dict[str, float]]:
    """(pooled, {regime: half-width w}) from |log(predicted / measured)| of out-of-sample runs:
    w = expm1 of the :data:`BAND_QUANTILE` :func:`conformal_quantile`, per regime where it has
    :data:`BAND_MIN_RUNS` runs or more, else the pooled w widened to the regime's largest error (a
    regime of few runs cannot show its quantile; it is not narrowed below what it shows)."""
    a = np.abs(np.asarray(log_err, dtype=np.float64))
    regs = np.asarray(list(regimes))
    pooled = float(np.expm1(conformal_quantile(a))) if a.size else 0.0
    out = {}
    for reg in runs.REGIMES:
        x = a[regs == reg]
        if x.size >= BAND_MIN_RUNS:
            out[reg] = float(np.expm1(conformal_quantile(x)))
        else:
            out[reg] = max(pooled, float(np.expm1(x.max()))) if x.size else pooled
    return pooled, out


def out_of_sample_spread(prepared=None, pred: np.ndarray | None = None) -> dict[str, Any]:
    """The bands: :func:`band_widths` of the leave-one-source-out errors of the fitted runs
    (``relative_half_width`` pooled, ``regimes`` per regime), ``rows``, and ``coverage``: the share of
    those runs inside a band derived without their source (nested: each source's runs against the
    half-widths of the other sources' residuals), so the coverage is out of sample too."""
    inp, plans = prepare_rows(load_rows()) if prepared is None else prepared
    pred = source_predictions((inp, plans)) if pred is None else pred
    meas = np.array([p.measured if p.measured else np.nan for p in plans])
    ok = np.isfinite(pred) & np.isfinite(meas)
    err = np.log(pred[ok] / meas[ok])
    regs = [runs.row_regime(p.row) for p, k in zip(plans, ok) if k]
    srcs = np.array([runs.row_source(p.row) for p, k in zip(plans, ok) if k])
    pooled, per = band_widths(err, regs)
    inside = nested_inside(err, regs, srcs)
    return {"relative_half_width": pooled, "regimes": per, "coverage": float(np.mean(inside)),
            "rows": int(ok.sum())}


def nested_inside(log_err, regimes: Sequence[str], sources: Sequence[str]) -> np.ndarray:
    """Per run, whether its out-of-sample error ``log_err`` (log(predicted / measured)) falls inside
    its regime's band made by :func:`band_widths` from the other sources' runs only: the band's
    coverage out of sample, overall or per regime (the mean over a regime's runs)."""
    err = np.asarray(log_err, dtype=np.float64)
    regs, srcs = list(regimes), np.asarray(list(sources))
    inside = np.zeros(err.size, dtype=bool)
    for src in dict.fromkeys(srcs.tolist()):
        rest = srcs != src
        _, w = band_widths(err[rest], [r for r, k in zip(regs, rest) if k])
        for i in np.flatnonzero(~rest):
            inside[i] = abs(err[i]) <= math.log1p(w[regs[i]]) + 1e-12
    return inside


def measured_pairs(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pair of runs of the same model (``model`` column), precision, GPU count and source on two
    different GPUs (each run once; ``records``: dicts with run_id, model, precision, gpus, source,
    hardware, measured, predicted, oos_predicted): the measured per-GPU throughput ratio (first /
    second, GPUs in ``hardware.csv`` order reversed: the newer first) and the model's, in sample and
    leave one source out (``ratio_error``, ``oos_ratio_error``: predicted / measured ratio - 1). What
    a ratio the book quotes (GB200 over H100, H-equivalents) can be held to."""
    order = {g: i for i, g in enumerate(hardware.ids())}
    keyed: dict[tuple, list[dict[str, Any]]] = {}
    for r in records:
        keyed.setdefault((r["model"], r["precision"], r["gpus"], r["source"]), []).append(r)
    out = []
    for rs in keyed.values():
        rs = sorted(rs, key=lambda r: -order.get(r["hardware"], 0))
        for i, a in enumerate(rs):
            for b in rs[i + 1:]:
                if a["hardware"] == b["hardware"]:
                    continue
                m = a["measured"] / b["measured"]
                p, q = a["predicted"] / b["predicted"], a["oos_predicted"] / b["oos_predicted"]
                out.append({"first": a["run_id"], "second": b["run_id"], "model": a["model"],
                            "gpus_first": a["hardware"], "gpus_second": b["hardware"], "measured_ratio": m,
                            "predicted_ratio": p, "oos_ratio": q, "ratio_error": p / m - 1.0,
                            "oos_ratio_error": q / m - 1.0})
    return out


def ratio_half_width(pairs: Sequence[dict[str, Any]]) -> float:
    """Relative half-width of the band of a ratio of two predictions: the :data:`BAND_QUANTILE`
    :func:`conformal_quantile` of |log(predicted / measured ratio)| over :func:`measured_pairs`, leave one source out
    (never zero: the two predictions' errors do not cancel)."""
    if not pairs:
        raise ValueError("ratio_half_width: no measured pair")
    a = np.abs(np.log1p([p["oos_ratio_error"] for p in pairs]))
    return float(np.expm1(conformal_quantile(a)))


def pair_records(plans: Sequence[RowPlan], pred: np.ndarray, oos: np.ndarray) -> list[dict[str, Any]]:
    """:func:`measured_pairs`' records of the fitted runs with a measurement: in-sample ``pred`` and
    leave-one-source-out ``oos`` tokens/s per GPU."""
    return [{"run_id": p.row["run_id"], "model": str(p.row.get("model") or ""), "precision": str(p.row["precision"]).lower(),
             "gpus": int(p.layout.gpus), "source": runs.row_source(p.row), "hardware": str(p.row["hardware"]).strip(),
             "measured": float(p.measured), "predicted": float(a), "oos_predicted": float(b)}
            for p, a, b in zip(plans, pred, oos) if p.measured and np.isfinite(b)]


def abs_error_stats(errors: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    """(median |error|, share within 25%, largest |error|) of relative ``errors``; Nones when empty."""
    if not len(errors):
        return None, None, None
    a = np.abs(np.asarray(errors, dtype=np.float64))
    return float(np.median(a)), float(np.mean(a <= 0.25)), float(a.max())


def heldout_predictions(path: Path | str = runs.HELDOUT_CSV, band: efficiency.EfficiencyBand | None = None
                        ) -> tuple[list[dict[str, Any]], runplan.TablePlan, perf.Prediction]:
    """The rows of ``path`` (runs-table schema, with measurements; default the held-out runs), their
    plan (``runplan.plan_rows``: blank columns take their documented defaults) and their prediction
    with ``band`` (default the calibrated one; ``perf.evaluate_band``): out of sample by
    construction, no row is in the calibration table."""
    rows = runs.read_runs(path)
    plan = runplan.plan_rows(rows)
    return rows, plan, perf.evaluate_band(plan.step_inputs(), band)


def heldout_errors(path: Path | str = runs.HELDOUT_CSV, band: efficiency.EfficiencyBand | None = None) -> list[dict[str, Any]]:
    """Per row of ``path`` (:func:`heldout_predictions`): ``run_id``, ``regime``
    (``runs.row_regime``) and ``error``, predicted (the band's central value) / measured tokens/s
    per GPU - 1 (the measurement converted as ``runs.measured_tokens_per_s`` says)."""
    rows, plan, pred = heldout_predictions(path, band)
    tps = pred.value.tokens_per_s_per_gpu
    return [{"run_id": r["run_id"], "regime": runs.row_regime(r), "error": float(tps[i]) / plan.measured[i] - 1.0}
            for i, r in enumerate(rows)]


def regime_spread(prepared=None, band: efficiency.EfficiencyBand | None = None,
                  heldout: Path | str = runs.HELDOUT_CSV, pred: np.ndarray | None = None,
                  fits: dict | None = None) -> dict[str, dict[str, Any]]:
    """Out-of-sample accuracy per regime of ``runs.REGIMES`` (``runs.row_regime``), in order:
    ``rows`` (fitted runs, each predicted by a calibration without its source: :func:`source_predictions`,
    ``pred`` when given), ``heldout_rows`` (rows of ``heldout``, never fitted, predicted with ``band``'s
    central value), and over both ``oos_rows``, ``oos_median`` (median |error|) and ``oos_within_25``;
    ``lro_median``: the fitted runs predicted by a calibration without their whole regime (leave one
    regime out); None without a row. What ``data/efficiency.yaml`` states per regime and
    ``validate.regime_summary`` recomputes for the validation chapter."""
    inp, plans = prepare_rows(load_rows()) if prepared is None else prepared
    pred = source_predictions((inp, plans), fits) if pred is None else pred
    lro, _ = fold_predictions(inp, plans, runs.row_regime, fits)
    held = heldout_errors(heldout, band)
    out = {}
    for reg in runs.REGIMES:
        mine = [i for i, p in enumerate(plans) if p.measured is not None and runs.row_regime(p.row) == reg]
        cal = [float(pred[i]) / plans[i].measured - 1.0 for i in mine]
        ho = [h["error"] for h in held if h["regime"] == reg]
        med, within, _ = abs_error_stats(cal + ho)
        lmed, _, _ = abs_error_stats([float(lro[i]) / plans[i].measured - 1.0 for i in mine])
        out[reg] = {"rows": len(cal), "heldout_rows": len(ho), "oos_rows": len(cal) + len(ho),
                    "oos_median": med, "oos_within_25": within, "lro_median": lmed}
    return out


# =========================================================================================
# Parameter ranges and data/efficiency.yaml
# =========================================================================================
#: Likelihood-ratio threshold of the parameter ranges: 3.84 = chi-square(1 dof) 95% quantile.
RANGE_CHI2 = 3.84


def efficiency_ranges(prepared=None) -> dict[str, Any]:
    """Value, low and high of every parameter, and how each was obtained.

    Run-calibrated parameters: value from :func:`calibrate` on every row; range = the values of
    that parameter (others at their best values) that raise the sum of squared log errors by at
    most ``RANGE_CHI2`` x s^2, s^2 = cost / (rows - fitted parameters): a one-parameter 95%
    likelihood-ratio interval (searched on a 0.5% grid in log space, within :func:`fit_bounds`).
    Measured parameters: value from :func:`fit_gemm_measurements` (m >= 1024); range = the values
    with the minimum-m cut at 1024, 2048 and 4096. Stated: Hopper factor 1 (the reference);
    Blackwell Ultra and Rubin take Blackwell's value with its range widened by 10%; the 4-bit ceiling
    is the 8-bit ceiling x the Blackwell factor (:func:`_tie`), its range both at their ends.
    """
    prepared = prepare_rows(load_rows()) if prepared is None else prepared
    inp, setups = prepared
    full = calibrate(prepared=prepared)
    meas = np.array([su.measured if su.measured else np.nan for su in setups])
    idx = np.array(full.rows)
    s2 = full.cost / max(len(idx) - len(full.fitted), 1)
    limit = full.cost + RANGE_CHI2 * s2
    ratios = tie_ratios()
    bounds = fit_bounds()
    out: dict[str, Any] = {}
    for n in full.fitted:
        v = full.params[n]
        ends = []
        for sign in (-1.0, 1.0):
            last = v
            for step in np.arange(1, 301) * 0.005:
                t = v * math.exp(sign * step)
                if not bounds[n][0] <= t <= bounds[n][1]:
                    break
                try:
                    r = _residuals(inp, meas, {**full.params, n: t}, ratios)[idx]
                except ValueError:  # a ceiling x factor above 1
                    break
                if float(r @ r) > limit:
                    break
                last = t
            ends.append(last)
        out[n] = {"value": v, "low": ends[0], "high": ends[1], "kind": "calibrated"}
    gm = {m: fit_gemm_measurements(min_m=m) for m in (1024, 2048, 4096)}
    for n, key in (("gemm_ceiling_16bit", "ceiling_bf16"), ("gemm_roofline", "gemm_roofline")):
        vals = [g[key] for g in gm.values()]
        out[n] = {"value": gm[1024][key], "low": min(vals), "high": max(vals), "kind": "measured"}
    ro = kernels.routing_overhead()
    out["moe_overhead"] = {"value": ro["value"], "low": ro["low"], "high": ro["high"], "kind": "measured"}
    out["family_factor_hopper"] = {"value": 1.0, "low": 1.0, "high": 1.0, "kind": "reference"}
    b = out["family_factor_blackwell"]
    for f in TIED_FAMILIES:
        r = power_ratio(f)
        out[f"family_factor_{f}"] = {"value": b["value"] * r, "low": b["low"] * r * 0.9,
                                     "high": min(b["high"] * r * 1.1, FIT_BOUNDS[f"family_factor_{f}"][1],
                                                 math.floor(1e4 / math.ceil(1e4 * max(out["gemm_ceiling_8bit"]["high"],
                                                                                      out["gemm_ceiling_16bit"]["high"])) * 1e4) / 1e4),
                                     "kind": "derived" if f in DERIVED_FAMILIES else "tied"}
    out["_gemm_measurement"] = gm[1024]
    out["_full"] = full
    out["_sigma"] = math.sqrt(s2)
    return out


def band_from_ranges(ranges: dict[str, Any], digits: int | None = None) -> efficiency.EfficiencyBand:
    """The band of :func:`efficiency_ranges`' parameters; ``digits``: each rounded as
    ``data/efficiency.yaml`` writes it (4), so predictions made with it are those of the file."""
    names = [k for k in ranges if not k.startswith("_")]

    def r(x: float) -> float:
        return x if digits is None else round(x, digits)

    return efficiency.EfficiencyBand.from_ranges({n: r(ranges[n]["value"]) for n in names},
                                           {n: r(ranges[n]["low"]) for n in names},
                                           {n: r(ranges[n]["high"]) for n in names})


_SOURCES = {
    "gemm_ceiling_16bit": "MEASURED: fit of perf's GEMM rule to the BF16 rows of data/measured/gemm_h200.csv "
                          "(m >= 1024; range: cuts m >= 2048, 4096). Hopper basis; applies to every 16-bit GEMM, "
                          "the attention core and the output layer.",
    "gemm_ceiling_8bit": "CALIBRATED on the FP8/MXFP8 rows of data/published_runs.csv (Hopper basis; Blackwell "
                         "multiplies by its family factor). The single-GEMM H200 measurement gives {fp8_meas:.3f} "
                         "(torch._scaled_mm, random data; about 0.70 with fast accumulation); the training runs "
                         "need more: an open question discussed in the validation chapter. Fitted below {fp8_top:.3f}, "
                         "the measured 16-bit ceiling x {fp8_ratio:.3f}, the largest FP8 / BF16 ratio of "
                         "fractions of peak over the measured shapes (calibrate.fit_bounds).",
    "gemm_ceiling_4bit": "CALIBRATED on the NVFP4 rows (Llama 3 and 3.1 on GB200, GB300 and B200; only dense runs "
                         "constrain it): fraction of the dense FP4 peak (absolute: FP4 tensor cores start with "
                         "Blackwell, so no Hopper basis). A fold without an NVFP4 row takes the 8-bit ceiling x the "
                         "Blackwell factor (calibrate.PRIORS).",
    "family_factor_ampere": "CALIBRATED on the two A100 rows (Narayanan 2021, Korthikanti 2022; both Megatron-LM "
                            "before FlashAttention, runs column attn_kernel unfused): A100 16-bit GEMMs relative to "
                            "the H200-measured Hopper ceiling.",
    "family_factor_hopper": "REFERENCE: 1 by definition (ceilings are on the Hopper basis).",
    "family_factor_blackwell": "CALIBRATED on the B200 and GB200 rows: sustained fraction of the datasheet peak "
                               "relative to Hopper (clocks under tensor-core load, kernel maturity).",
    "family_factor_blackwell_ultra": "DERIVED: family_factor_blackwell x {ultra_ratio:.3f}, the ratio of rated power per "
                                     "dense BF16 TFLOP/s of Blackwell Ultra (B300, GB300) over Blackwell (B200, GB200) in "
                                     "data/hardware.csv (efficiency.power_per_flop: same silicon, same peaks, more power; "
                                     "sustained clock linear in power at the voltage floor); range Blackwell's widened 10%. "
                                     "No B300/GB300 row.",
    "family_factor_rubin": "TIED to family_factor_blackwell (Rubin is announced, not measured); range widened 10%.",
    "gemm_roofline": "MEASURED: k of ceiling / (1 + k n_ref / n), n_ref = 1.5 b P / B (perf.gemm_reference_size), "
                     "fitted to all rows of data/measured/gemm_h200.csv (m >= 1024; range: cuts m >= 2048, 4096).",
    "memory_overhead": "CALIBRATED on all rows: time of the memory-bound kernels over their ideal HBM time for the "
                       "bytes perf.memory_bound_bytes counts (absorbs unfused and uncounted elementwise work, launch "
                       "gaps; the H200 device copy measured at ~0.86 of peak HBM bandwidth alone gives ~1.16).",
    "overlap_scale": "CALIBRATED on all rows: multiplier on comm.Overlap's assumed overlap fractions of the TP, CP, PP "
                     "and DP collectives (clipped to 1); the MoE all-to-all of a paired schedule is not scaled "
                     "(perf.ep_hidden_share).",
    "layer_overhead_us": "CALIBRATED on all rows: a fixed time per transformer layer per micro-batch (its forward and "
                         "backward, on the slowest pipeline stage), microseconds, whatever the layer's work: the gaps "
                         "between its few dozen kernels and each kernel's last-wave tail, which the FLOP and byte terms "
                         "do not see and which dominate where a GPU gets few tokens per step (small models at large "
                         "data parallelism, about 2 layers per pipeline stage). Bounded above by the {calls} GEMM calls "
                         "of a dense layer's forward and backward at the shortest call an idle H200 takes "
                         "({call_us:.1f} us, data/measured/gemm_h200.csv): {bound:.0f} us (calibrate.gemm_call_floor_us)"
                         "{at_bound}. An MoE layer whose routed experts run one GEMM call each (Transformer "
                         "Engine's GroupedLinear under Megatron-Core) counts its extra calls in these units "
                         "(perf.expert_call_layers).",
    "moe_overhead": "MEASURED: one MoE layer's routing on an H200 (router forward and backward, the token "
                    "permutation around the all-to-all and its inverse, forward and backward, in gather-only "
                    "PyTorch ops; data/measured/routing_h200.csv, benchmarks/device/moe_kernels_h200.py) over "
                    "the ideal HBM time of the bytes perf.memory_bound_bytes counts for it: the median over the "
                    "four fine-grained models measured (gpt-oss-120b, Qwen3-235B, DeepSeek-V3, Kimi K2; range: "
                    "their extremes; kernels.routing_overhead). Megatron-Core runs Transformer Engine's fused "
                    "permute kernels, which move the same bytes in fewer passes: a stated upper bound of theirs. "
                    "Fitted on the MoE runs instead (before this measurement) it came out at 7.1, inside the "
                    "measured range.",
}


#: Communication efficiencies fitted by ``comm.fit_calibration`` (read by ``topology``).
COLLECTIVE_PARAMS: tuple[str, ...] = ("nvlink_eff", "nvls_eff", "nic_eff")
_COLLECTIVE_SOURCES = {
    "nvlink_eff": "CALIBRATED on data/collectives.csv row h100_nvlink_allreduce_ring (NCCL ring all-reduce busbw "
                  "~370 of 450 GB/s on 8x H100): achieved fraction of the NVLink rate at large messages.",
    "nvls_eff": "CALIBRATED on data/collectives.csv row h100_nvlink_allreduce_nvls (~480 GB/s busbw with NVLink "
                "SHARP on 8x H100; unverified row): NVLS all-reduce charged m / (nvlink_bw x nvls_eff).",
    "nic_eff": "CALIBRATED on data/collectives.csv row ndr_ib_allreduce_internode (40-46 GB/s per 400 Gb/s NDR "
               "NIC, midpoint 43): achieved fraction of the NIC rate.",
}


def efficiency_yaml_text(ranges: dict[str, Any] | None = None, prepared=None) -> str:
    """The text of ``data/efficiency.yaml`` from a fresh calibration (deterministic)."""
    prepared = prepare_rows(load_rows()) if prepared is None else prepared
    ranges = efficiency_ranges(prepared) if ranges is None else ranges
    gm = ranges["_gemm_measurement"]
    inp, plans = prepared
    fits: dict = {}  # the source and regime folds share fits
    oos = source_predictions(prepared, fits)
    spread = out_of_sample_spread(prepared, oos)
    band = replace(band_from_ranges(ranges), spread=spread["relative_half_width"], regime_spread=spread["regimes"])
    meas = np.array([p.measured if p.measured else np.nan for p in plans])
    ok = np.isfinite(meas)
    pred = perf.evaluate_band(inp, band)
    err = np.abs(pred.value.tokens_per_s_per_gpu[ok] / meas[ok] - 1.0)
    in_band = (pred.low.tokens_per_s_per_gpu[ok] <= meas[ok]) & (meas[ok] <= pred.high.tokens_per_s_per_gpu[ok])
    summ = {"median_abs_error": float(np.median(err)), "max_abs_error": float(err.max()),
            "band_coverage": float(np.mean(in_band))}
    pairs = measured_pairs(pair_records(plans, pred.value.tokens_per_s_per_gpu, oos))
    coll = comm.fit_calibration()
    file_band = replace(band_from_ranges(ranges, digits=4), spread=round(spread["relative_half_width"], 4),
                        regime_spread={k: round(v, 4) for k, v in spread["regimes"].items()})
    regimes = regime_spread(prepared, file_band, pred=oos, fits=fits)  # held out: the file's parameters
    lines = [
        "# Efficiency parameters of the step-time model (scaletax.model.efficiency, used by scaletax.model.perf), with ranges.",
        "# GENERATED by scaletax.fit.calibrate (every fitted parameter of the model) from data/published_runs.csv and",
        "# data/published_runs_validation.csv (calibrate.FIT_TABLES), data/measured/gemm_h200.csv and",
        "# data/collectives.csv, with its accuracy out of sample (band, regimes; data/heldout_runs.csv too);",
        "# do not edit by hand (a test checks this file against a refit).",
        "# Regenerate: .venv/bin/python -m scaletax.fit.calibrate",
        "# Predictions use `value`; the band uses every parameter at the end of its range that lowers",
        "# (low) or raises (high) throughput, widened to at least its regime's out-of-sample half-width.",
        "parameters:",
    ]
    order = ["gemm_ceiling_16bit", "gemm_ceiling_8bit", "gemm_ceiling_4bit", "family_factor_ampere",
             "family_factor_hopper", "family_factor_blackwell", "family_factor_blackwell_ultra", "family_factor_rubin",
             "gemm_roofline", "memory_overhead", "overlap_scale", "moe_overhead", "layer_overhead_us"]
    for n in order:
        r = ranges[n]
        src = _SOURCES[n].format(fp8_meas=gm["ceiling_fp8"], ultra_ratio=power_ratio("blackwell_ultra"),
                                 fp8_top=fit_bounds()["gemm_ceiling_8bit"][1], fp8_ratio=fp8_over_bf16_max(),
                                 calls=LAYER_GEMM_CALLS, call_us=gemm_call_floor_us(),
                                 bound=LAYER_GEMM_CALLS * gemm_call_floor_us(),
                                 at_bound=(": the fit sits at this bound (unbounded it takes more, and predicts runs of "
                                           "sources it did not see worse)" if r["value"] >= fit_bounds()[n][1] * (1 - 1e-6)
                                           else "") if n == "layer_overhead_us" else "")
        lines.append(f"  {n}:")
        lines.append(f"    value: {r['value']:.4f}")
        lines.append(f"    low: {r['low']:.4f}")
        lines.append(f"    high: {r['high']:.4f}")
        lines.append(f"    kind: {r['kind']}")
        lines.append(f"    source: \"{src}\"")
    full = ranges["_full"]
    lines += [
        "fit:",
        "  method: \"multi-start Levenberg-Marquardt on log(parameter), minimizing the sum of squared log errors "
        "of tokens/s per GPU over every row with a measurement (numpy only)\"",
        f"  rows: {len(full.rows)}",
        f"  cost: {full.cost:.5f}",
        "  range_method: \"calibrated: one-parameter 95% likelihood-ratio interval (cost + 3.84 s^2, others at their "
        "best values); measured: min-m cuts 1024/2048/4096; tied / derived: Blackwell's range widened 10%\"",
        f"  residual_sigma_log: {ranges['_sigma']:.4f}",
        f"  gemm_measurement: {{points: {gm['points']}, rms_log_error: {gm['rms_log_error']:.4f}, "
        f"ceiling_fp8_measured: {gm['ceiling_fp8']:.4f}}}",
        f"  median_abs_error: {summ['median_abs_error']:.4f}",
        f"  max_abs_error: {summ['max_abs_error']:.4f}",
        f"  band_coverage: {summ['band_coverage']:.4f}",
        "  row_conventions:",
    ]
    for k, v in ROW_CONVENTIONS.items():
        lines.append(f"    {k}: \"{v}\"")
    lines += [
        "band:",
        f"  relative_half_width: {spread['relative_half_width']:.4f}",
        f"  coverage: {spread['coverage']:.4f}",
        f"  rows: {spread['rows']}",
        f"  method: \"{BAND_QUANTILE:.0%} split-conformal quantile (the ceil((n + 1) 0.8)-th smallest of n; calibrate."
        "conformal_quantile) of |log(predicted / measured)| over the fitted runs each predicted "
        "by a calibration without its source (runs.row_source; calibrate.out_of_sample_spread), per regime (regimes."
        f"band_half_width; a regime of fewer than {BAND_MIN_RUNS} runs: this pooled value widened to its largest error); "
        "every prediction's low / high is at least value / (1 + w) and value x (1 + w); coverage: the share of the "
        "fitted runs inside a band derived without their source\"",
        f"  ratio_half_width: {ratio_half_width(pairs):.4f}",
        f"  ratio_pairs: {len(pairs)}",
        f"  ratio_method: \"a ratio of two predictions (one GPU over another): at least value / (1 + w) to value x "
        f"(1 + w), w the {BAND_QUANTILE:.0%} split-conformal quantile of |log(predicted / measured ratio)| over the pairs of fitted runs "
        "of one model, precision, GPU count and source on two GPUs, each run predicted without its source "
        "(calibrate.measured_pairs, ratio_half_width; plan.ratio_band)\"",
    ]
    lines += [
        "regimes:",
        "  method: \"per regime (scaletax.inputs.runs.row_regime): its fitted runs each predicted by a calibration "
        "without their source (calibrate.fold_predictions), and its runs of data/heldout_runs.csv (never fitted) predicted "
        "with these parameters; median |predicted / measured - 1| and the share within 25% over both; lro_median: its "
        "fitted runs predicted by a calibration without the whole regime; band_half_width: the regime's band "
        "(calibrate.regime_spread, calibrate.out_of_sample_spread)\"",
    ]
    for reg, r in regimes.items():
        num = ("null" if r["oos_median"] is None else f"{r['oos_median']:.4f}",
               "null" if r["oos_within_25"] is None else f"{r['oos_within_25']:.4f}")
        lmed = "null" if r["lro_median"] is None else f"{r['lro_median']:.4f}"
        lines.append(f"  \"{reg}\": {{rows: {r['rows']}, heldout_rows: {r['heldout_rows']}, oos_rows: {r['oos_rows']}, "
                     f"oos_median: {num[0]}, oos_within_25: {num[1]}, lro_median: {lmed}, "
                     f"band_half_width: {spread['regimes'][reg]:.4f}}}")
    lines.append("collectives:")
    for n in COLLECTIVE_PARAMS:
        lines.append(f"  {n}:")
        lines.append(f"    value: {coll[n]:.4f}")
        lines.append("    kind: calibrated")
        lines.append(f"    source: \"{_COLLECTIVE_SOURCES[n]}\"")
    return "\n".join(lines) + "\n"


def write_efficiency_yaml(path: Path | str = efficiency.EFFICIENCY_YAML) -> Path:
    """Recalibrate and write ``data/efficiency.yaml``; returns the path."""
    path = Path(path)
    path.write_text(efficiency_yaml_text(), encoding="utf-8")
    efficiency.default_band.cache_clear()
    return path


__all__ = ["COLLECTIVE_PARAMS", "Calibration", "DERIVED_FAMILIES", "FIT_BOUNDS", "FIT_PARAMS", "FoldFit", "GEMM_CSV",
           "fit_bounds", "fp8_over_bf16_max",
           "IDENTIFIED_BY", "PRIORS", "RANGE_CHI2", "TIED_FAMILIES", "band_from_ranges", "calibrate", "calibrate_fold",
           "efficiency_ranges", "efficiency_yaml_text", "fit_gemm_measurements", "fold_predictions", "load_rows",
           "measured_base", "out_of_sample_spread", "conformal_quantile", "nested_inside", "BAND_QUANTILE", "BAND_MIN_RUNS", "band_widths",
           "source_predictions", "FIT_TABLES", "abs_error_stats", "heldout_errors", "heldout_predictions",
           "regime_spread",
           "power_ratio", "prepare_rows", "tie_ratios", "write_efficiency_yaml"]


if __name__ == "__main__":
    print(f"wrote {write_efficiency_yaml()}")

