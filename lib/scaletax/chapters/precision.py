"""Rows, derived numbers and sentences for the precision chapter.

Everything returns plain rows (lists of dicts), small dicts of numbers, or sentences built
from computed values, so that the notebook only draws, tabulates and glues. Public API:

Formats
- ``format_label(fmt)``, ``format_rows(names)``: the format table (bits per element with
  the scale overhead, element range, block size, scale format) from ``formats.format_info``.
- ``spec_check(path)``: the element parameters of the table against the spec-derived vectors
  in ``data/precision_vectors.json``.

Error on realistic tensors
- ``scheme_label(fmt, rule)``, ``error_rows(seed, magnitudes)``: ``precision.error_table``
  with labels, shares in percent and a chart-safe SNR.
- ``error_facts(rows)``: the named numbers the prose quotes.

The training experiment (``lowp_training``)
- ``experiment_seeds(base, n)``, ``task_config(steps, **overrides)``, ``run(...)`` (every
  training, cached).
- ``describe(recipe)``: what a recipe quantizes, generated from its fields.
- ``curve_rows(results)``: smoothed mean and one-standard-deviation band per recipe and step.
- ``gap_rows(results, cfg)``: final loss gap vs BF16 (mean and std over seeds), the paired
  change against the full NVFP4 recipe, and the share of BF16's steps that reach the same loss.
- ``experiment_facts(rows, results, cfg)`` and the ``*_text`` sentences.
- ``published_rows(rows, results, cfg)``: the published large-scale results beside the toy.

What a format buys
- ``peak_rows(gpus, precisions)``: dense FLOP/s by format per GPU (None where not native).
- ``bytes_rows(precisions, gpus)``: bytes per element stored or moved, per format.
- ``read_runs(path)``, ``achieved_rows(runs, gpus)``, ``share_rows(runs, gpus)``: what
  published runs reach, per run and per GPU and format.
- ``tax_rows(runs, gpus)``: the precision tax, the peak ratio against the achieved ratio of
  runs that differ only in precision.
- ``guidance_rows(...)``: "FP4 where it pays", from the numbers above; ``time_ratio`` (an FP4
  format's training time relative to its baseline for an extra-token penalty) and
  ``penalty_rows`` (its curve, with a what-if control in the HTML).
"""
from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from statistics import median
from typing import Any, Iterable, Sequence

import numpy as np

from scaletax import DATA_DIR, memo
from scaletax.inputs import formats, hardware, recipes, references
from scaletax.inputs import runs as runs_table
from scaletax.model import lowp_training as L
from scaletax.model import plan as planning
from scaletax.model import precision as P

VECTORS_JSON = DATA_DIR / "precision_vectors.json"

#: Tensor magnitudes of the error study (the test tensor's scale; 1.0 is the reference).
MAGNITUDES: tuple[float, ...] = (1e-6, 1e-3, 1.0, 1e3)
REFERENCE_MAGNITUDE = 1.0
#: Test tensor shape: 128 tokens x 2048 channels (divisible by every block and tile size).
ERROR_SHAPE = (128, 2048)
DISTRIBUTION_LABELS = {"gaussian": "Gaussian", "student_t": "Student-t (3 dof)",
                       "outlier_channels": "outlier channels"}

#: Short names of the experiment's recipes.
RECIPE_LABELS = {
    "bf16": "BF16", "fp8_tensor": "FP8 per-tensor", "mxfp8": "MXFP8", "nvfp4": "NVFP4 recipe",
    "nvfp4_no_sr": "NVFP4 without SR", "nvfp4_no_bf16_last": "NVFP4 without BF16 last layer",
    "nvfp4_no_2d": "NVFP4 without 2D weights", "nvfp4_naive": "NVFP4 naive",
    "mxfp4": "MXFP4 recipe", "nvfp4_rht": "NVFP4 recipe + Hadamard",
}
RECIPE_COLORS = {
    "bf16": "#333333", "fp8_tensor": "#4e79a7", "mxfp8": "#76b7b2", "nvfp4": "#e15759",
    "nvfp4_no_sr": "#f28e2b", "nvfp4_no_bf16_last": "#b07aa1", "nvfp4_no_2d": "#59a14f",
    "nvfp4_naive": "#9c755f", "mxfp4": "#edc948", "nvfp4_rht": "#ff9da7",
}
#: Panels of the loss-curve figure: (title, recipes); BF16 is the reference in each.
PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("8-bit formats", ("bf16", "fp8_tensor", "mxfp8")),
    ("NVFP4 recipe and ablations", ("bf16", "nvfp4", "nvfp4_no_sr", "nvfp4_no_bf16_last",
                                    "nvfp4_no_2d")),
    ("4-bit without the recipe, or in MX blocks", ("bf16", "nvfp4", "nvfp4_naive", "mxfp4")),
)
ABLATIONS = ("nvfp4_no_sr", "nvfp4_no_bf16_last", "nvfp4_no_2d")
#: The four NVFP4 recipe elements (arXiv 2509.25149), as ``Recipe`` fields and in words.
RECIPE_ELEMENTS = (("sr_grads", "stochastic rounding of gradients"),
                   ("bf16_last_layers", "a BF16 last layer"),
                   ("weight_2d", "2D weight tiles"),
                   ("hadamard_wgrad", "a Hadamard transform on wgrad operands"))
ELEMENT_NAMES = dict(RECIPE_ELEMENTS)
ABLATION_ELEMENT = {"nvfp4_no_sr": "sr_grads", "nvfp4_no_bf16_last": "bf16_last_layers",
                    "nvfp4_no_2d": "weight_2d"}


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------

def _join(items: Iterable[str]) -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def seeds_text(n: int) -> str:
    """"3 seeds", "1 seed"."""
    return f"{n:,} seed" + ("" if n == 1 else "s")


def _finite(v) -> float | None:
    return float(v) if v is not None and math.isfinite(float(v)) else None


# --------------------------------------------------------------------------------------------
# Formats
# --------------------------------------------------------------------------------------------

def _elem_code(info: formats.FormatInfo) -> str:
    return f"E{info.exp_bits}M{info.man_bits}"


def format_label(fmt: str) -> str:
    """"BF16", "FP8 E4M3", "MXFP8 E4M3", "MXFP4", "NVFP4"."""
    info = formats.format_info(fmt)
    if fmt in ("bf16", "fp16"):
        return fmt.upper()
    if fmt in formats.ELEMENT_FORMATS:
        return f"FP{info.element_bits} {_elem_code(info)}"
    if fmt in ("mxfp4", "nvfp4"):
        return fmt.upper()
    return f"MXFP{info.element_bits} {_elem_code(info)}"


def scale_label(info: formats.FormatInfo) -> str:
    """The shared-scale format of a block format in words ("–" for plain element formats)."""
    if info.scale_format is None:
        return "–"
    if info.scale_format == "e8m0":
        return "E8M0 (power of two)"
    return "E4M3 per block + FP32 per tensor"


def format_rows(names: Sequence[str] = formats.FORMATS) -> list[dict[str, Any]]:
    """One row per format: bits per element (scales included), element range, block, scale."""
    rows = []
    for f in names:
        i = formats.format_info(f)
        rows.append({
            "format": f, "label": format_label(f), "bits": i.bits_per_element,
            "bytes": i.bits_per_element / 8, "element": _elem_code(i), "max": i.max_finite,
            "min_normal": i.min_normal, "min_subnormal": i.min_subnormal,
            "range_binades": i.dynamic_range_binades, "block": i.block_size,
            "scale": scale_label(i),
            "block_scale": "–" if i.block_size is None else f"{i.block_size}, {scale_label(i)}",
        })
    return rows


def spec_check(path: Path | str = VECTORS_JSON) -> dict[str, Any]:
    """Compare format_info's element parameters with the spec-derived vectors file.

    Returns n_formats and n_values compared, and the mismatches as "format.key" strings.
    """
    params = json.loads(Path(path).read_text(encoding="utf-8"))["format_parameters"]
    keys = {"exp_bits": "exp_bits", "man_bits": "man_bits", "max_normal": "max_finite",
            "min_normal": "min_normal", "min_subnormal": "min_subnormal"}
    n_fmt, n_val, bad = 0, 0, []
    for fmt, p in params.items():
        if fmt not in formats.ELEMENT_FORMATS:
            continue
        info = formats.format_info(fmt)
        n_fmt += 1
        for k, attr in keys.items():
            if k in p:
                n_val += 1
                if float(p[k]) != float(getattr(info, attr)):
                    bad.append(f"{fmt}.{k}")
    return {"n_formats": n_fmt, "n_values": n_val, "mismatches": bad}


def spec_text(check: dict[str, Any]) -> str:
    """One sentence on the spec check."""
    if not check["mismatches"]:
        return (f"All {check['n_values']} element parameters of the {check['n_formats']} element "
                f"formats agree exactly with the spec-derived vectors the tests use.")
    return (f"{len(check['mismatches'])} of {check['n_values']} element parameters disagree with "
            f"the spec-derived vectors: {', '.join(check['mismatches'])}.")


# --------------------------------------------------------------------------------------------
# Error on realistic tensors
# --------------------------------------------------------------------------------------------

_RULE_WORDS = {"none": "cast", "tensor": "per-tensor", "1x128": "1x128 tiles",
               "128x128": "128x128 blocks", "ocp": "OCP floor scale", "ceil": "round-up scale",
               "two_level": "two-level scale"}


def scheme_label(fmt: str, rule: str) -> str:
    """"FP8 E4M3 cast", "FP8 E4M3 per-tensor", "MXFP4 round-up scale", "NVFP4 two-level scale"."""
    return f"{format_label(fmt)} {_RULE_WORDS[rule]}"


def scheme_order(schemes: Sequence[tuple[str, str]] = P.SCHEMES) -> list[str]:
    """Scheme labels from most to fewest bits per element (then in ``SCHEMES`` order)."""
    idx = sorted(range(len(schemes)),
                 key=lambda k: (-formats.format_info(schemes[k][0]).bits_per_element, k))
    return [scheme_label(*schemes[k]) for k in idx]


def error_rows(seed: int, magnitudes: Sequence[float] = MAGNITUDES,
               schemes: Sequence[tuple[str, str]] = P.SCHEMES,
               shape: tuple[int, int] = ERROR_SHAPE) -> list[dict[str, Any]]:
    """``precision.error_table`` rows with labels, percent shares and a chart-safe SNR.

    snr_plot is the SNR in dB with an exact result (inf) shown as None; flushed_pct and
    saturated_pct are the zero and saturation shares in percent.
    """
    rows = P.error_table(schemes, P.DISTRIBUTIONS, magnitudes, shape=shape, seed=seed)
    out = []
    for r in rows:
        out.append({**r, "scheme": scheme_label(r["format"], r["scale_rule"]),
                    "dist_label": DISTRIBUTION_LABELS[r["distribution"]],
                    "magnitude_label": mag_text(r["magnitude"]),
                    "snr_plot": _finite(r["snr_db"]),
                    "flushed_pct": 100 * r["zero_share"],
                    "saturated_pct": None if math.isnan(r["sat_share"]) else 100 * r["sat_share"]})
    return out


def mag_text(m: float) -> str:
    """A magnitude as short text: 1e-6, 1e-3, 1, 1e3."""
    return f"{m:g}" if 1e-2 <= abs(m) < 1e2 else f"{m:.0e}".replace("e-0", "e-").replace("e+0", "e").replace("e+", "e")


def _pick(rows, fmt, rule, dist, mag=REFERENCE_MAGNITUDE) -> dict:
    for r in rows:
        if (r["format"], r["scale_rule"], r["distribution"]) == (fmt, rule, dist) and \
                r["magnitude"] == mag:
            return r
    raise KeyError(f"no error row for {fmt}/{rule}/{dist} at magnitude {mag:g}")


def error_facts(rows: Sequence[dict]) -> dict[str, float]:
    """Named numbers of the error study (magnitude 1 unless the key says lo/hi).

    snr_*: dB on the Gaussian tensor; nvfp4_over_mxfp4_*: NVFP4's SNR minus the better MXFP4
    scale rule's, min and max over the three tensor families; *_flushed/_saturated: percent.
    """
    mags = sorted({r["magnitude"] for r in rows})
    lo, hi = mags[0], mags[-1]
    g = "gaussian"
    f: dict[str, float] = {"mag_lo": lo, "mag_hi": hi}
    f["snr_bf16"] = _pick(rows, "bf16", "none", g)["snr_db"]
    f["snr_e4m3"] = _pick(rows, "fp8_e4m3", "tensor", g)["snr_db"]
    f["snr_e5m2"] = _pick(rows, "fp8_e5m2", "tensor", g)["snr_db"]
    f["db_per_mantissa_bit"] = f["snr_e4m3"] - f["snr_e5m2"]
    f["snr_nvfp4"] = _pick(rows, "nvfp4", "two_level", g)["snr_db"]
    f["snr_mxfp4"] = max(_pick(rows, "mxfp4", r, g)["snr_db"] for r in formats.SCALE_RULES)
    f["snr_fp4_cast"] = _pick(rows, "fp4_e2m1", "none", g)["snr_db"]
    adv = [_pick(rows, "nvfp4", "two_level", d)["snr_db"]
           - max(_pick(rows, "mxfp4", r, d)["snr_db"] for r in formats.SCALE_RULES)
           for d in P.DISTRIBUTIONS]
    f["nvfp4_over_mxfp4_min"], f["nvfp4_over_mxfp4_max"] = min(adv), max(adv)
    f["nvfp4_extra_bits"] = (formats.format_info("nvfp4").bits_per_element
                             - formats.format_info("mxfp4").bits_per_element)
    f["e4m3_cast_flushed_lo"] = _pick(rows, "fp8_e4m3", "none", g, lo)["flushed_pct"]
    f["e4m3_cast_saturated_hi"] = _pick(rows, "fp8_e4m3", "none", g, hi)["saturated_pct"]
    f["e4m3_tensor_flushed_lo"] = _pick(rows, "fp8_e4m3", "tensor", g, lo)["flushed_pct"]
    f["bf16_snr_lo"] = _pick(rows, "bf16", "none", g, lo)["snr_db"]
    f["fp16_outlier_snr_hi"] = _pick(rows, "fp16", "none", "outlier_channels", hi)["snr_db"]
    f["mxfp4_ocp_saturated"] = _pick(rows, "mxfp4", "ocp", g)["saturated_pct"]
    f["mxfp4_ceil_saturated"] = _pick(rows, "mxfp4", "ceil", g)["saturated_pct"]
    f["nvfp4_saturated"] = _pick(rows, "nvfp4", "two_level", g)["saturated_pct"]
    f["nvfp4_flushed"] = _pick(rows, "nvfp4", "two_level", g)["flushed_pct"]
    f["nvfp4_flushed_outlier"] = _pick(rows, "nvfp4", "two_level", "outlier_channels")["flushed_pct"]
    f["mxfp4_flushed_outlier"] = min(_pick(rows, "mxfp4", r, "outlier_channels")["flushed_pct"]
                                     for r in formats.SCALE_RULES)
    f["e4m3_tensor_outlier"] = _pick(rows, "fp8_e4m3", "tensor", "outlier_channels")["snr_db"]
    f["e4m3_1x128_outlier"] = _pick(rows, "fp8_e4m3", "1x128", "outlier_channels")["snr_db"]
    f["e4m3_128x128_outlier"] = _pick(rows, "fp8_e4m3", "128x128", "outlier_channels")["snr_db"]
    scaled = [r for r in rows if r["scale_rule"] != "none" and r["distribution"] == g]
    spread = {}
    for r in scaled:
        spread.setdefault(r["scheme"], []).append(r["snr_db"])
    f["scaled_magnitude_spread_db"] = max(max(v) - min(v) for v in spread.values())
    return f


# --------------------------------------------------------------------------------------------
# The training experiment
# --------------------------------------------------------------------------------------------

def experiment_seeds(base: int, n: int) -> list[int]:
    """The scenario's seeds: base, base + 1, ..., base + n - 1."""
    if n < 1:
        raise ValueError(f"need at least one seed, got {n}")
    return [int(base) + i for i in range(int(n))]


def task_config(steps: int, **overrides) -> L.TaskConfig:
    """The toy's TaskConfig with the scenario's number of steps (and optional overrides)."""
    return replace(L.TaskConfig(), steps=int(steps), **overrides)


#: One training of the experiment, cached on disk by recipe, seed, TaskConfig and the code of
#: lowp_training and precision (``scaletax.memo``): a change of anything else reuses it.
train = memo.cached(L.train)


def run(base_seed: int, n_seeds: int, steps: int, recipes: Sequence[str] = L.DEFAULT_RECIPES, **overrides):
    """Every recipe trained from every seed, one after another in this process, each training read
    from the result cache or computed and written to it (:data:`train`). Returns (results as
    ``lowp_training.run_experiment`` returns, TaskConfig). Worker processes made the build slower
    on this 2-core machine (``training_workers`` in ``benchmarks/results/ablation.json``)."""
    cfg = task_config(steps, **overrides)
    seeds = experiment_seeds(base_seed, n_seeds)
    recipes = tuple(recipes)
    return L.collect(recipes, seeds, [train(r, s, cfg) for r in recipes for s in seeds]), cfg


def toy_parameters(cfg: L.TaskConfig) -> int:
    """Trainable parameters of the toy MLP (weights and biases of its linear layers)."""
    dims = [2 * cfg.embed_dim] + [cfg.width] * (cfg.depth - 1) + [cfg.vocab]
    return int(sum(a * b + b for a, b in zip(dims[:-1], dims[1:])))


def describe(name: str) -> str:
    """What a named recipe quantizes, in words generated from its ``Recipe`` fields."""
    r = L.RECIPES[name]
    if r.fwd_fmt == r.grad_fmt == "bf16":
        return "every GEMM operand in BF16 (the reference)"

    def operand(fmt):
        i = formats.format_info(fmt)
        if r.scaling == "tensor":
            return f"{format_label(fmt)} (per-tensor scale)"
        if i.block_size is None:
            return format_label(fmt)
        scale = "E4M3 + FP32" if i.scale_format != "e8m0" else \
            ("E8M0 round-up" if r.scale_rule == "ceil" else "E8M0 OCP")
        return f"{format_label(fmt)} ({i.block_size}-element blocks, {scale} scales)"

    if r.fwd_fmt == r.grad_fmt:
        ops = f"{operand(r.fwd_fmt)} in every GEMM"
    else:
        ops = f"{operand(r.fwd_fmt)} activations and weights, {operand(r.grad_fmt)} gradients"
    if formats.format_info(r.fwd_fmt).element_bits > 4:
        return ops
    on = [t for a, t in RECIPE_ELEMENTS if getattr(r, a)]
    off = [t for a, t in RECIPE_ELEMENTS if not getattr(r, a)]
    if not on:
        return f"{ops}; none of the recipe elements"
    return f"{ops}; with {_join(on)}" + (f"; without {_join(off)}" if off else "")


def smooth(curves: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average along the last axis (shorter windows over the first steps)."""
    c = np.cumsum(np.asarray(curves, dtype=float), axis=-1)
    n = c.shape[-1]
    out = np.empty_like(c)
    w = max(1, int(window))
    out[..., :w] = c[..., :w] / np.arange(1, min(w, n) + 1)
    if n > w:
        out[..., w:] = (c[..., w:] - c[..., :-w]) / w
    return out


def smooth_window(steps: int) -> int:
    """Smoothing window of the loss curves: 5% of the run, at least one step."""
    return max(1, int(round(steps / 20)))


def curve_rows(results: dict, cfg: L.TaskConfig | None = None, *, window: int | None = None,
               points: int = 120, panels=PANELS) -> list[dict[str, Any]]:
    """Smoothed training loss per recipe and step: mean over seeds and a mean +- std band.

    One row per (panel, recipe, plotted step); ``points`` steps at most per curve (the last
    step always included). Steps count from 1. With ``cfg``, every row also carries
    ``uniform`` (log vocab, the loss of a uniform guess) and ``bayes`` (the source entropy).
    """
    extra = {}
    if cfg is not None:
        extra = {"uniform": math.log(cfg.vocab),
                 "bayes": next(iter(results.values())).bayes_loss}
    rows = []
    for title, names in panels:
        for name in names:
            if name not in results:
                continue
            res = results[name]
            steps = res.curves.shape[1]
            s = smooth(res.curves, window or smooth_window(steps))
            mean = s.mean(axis=0)
            std = s.std(axis=0, ddof=1) if s.shape[0] > 1 else np.zeros_like(mean)
            idx = np.unique(np.r_[np.linspace(0, steps - 1, min(points, steps)).round().astype(int),
                                  steps - 1])
            for t in idx:
                rows.append({"panel": title, "recipe": name, "label": RECIPE_LABELS.get(name, name),
                             "step": int(t) + 1, "loss": float(mean[t]),
                             "lo": float(mean[t] - std[t]), "hi": float(mean[t] + std[t]),
                             **extra})
    return rows


def steps_to_reach(curve: np.ndarray, target: float) -> int | None:
    """First step (1-based) at which a (smoothed) curve is at or below target; None if never."""
    hit = np.nonzero(np.asarray(curve) <= target)[0]
    return int(hit[0]) + 1 if hit.size else None


def _paired(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """Mean, std and standard error over seeds of the relative change (a - b) / b in percent."""
    d = (np.asarray(a) - np.asarray(b)) / np.asarray(b) * 100
    sd = float(d.std(ddof=1)) if d.size > 1 else 0.0
    return float(d.mean()), sd, sd / math.sqrt(d.size)


def gap_rows(results: dict, cfg: L.TaskConfig, baseline: str = "bf16",
             reference: str = "nvfp4") -> list[dict[str, Any]]:
    """``lowp_training.summary`` rows, labelled, with derived columns.

    gap_pct / gap_std_pct: final held-out loss vs BF16, mean and std over seeds (percent);
    gap_se_pct: its standard error; vs_ref_*: the same paired against the full NVFP4 recipe
    (for the other FP4 recipes); bf16_steps_pct: the share of its steps BF16 needs for its
    smoothed training loss to reach the recipe's final smoothed training loss (None when BF16
    never does within the run); above_uniform: the final loss exceeds log(vocab), the loss
    of a uniform guess (the run diverged).
    """
    window = smooth_window(cfg.steps)
    base = results.get(baseline)
    base_curve = smooth(base.curves, window).mean(axis=0) if base is not None else None
    ref = results.get(reference)
    rows = []
    for row in L.summary(results, baseline=baseline):
        name = row["recipe"]
        r = results[name]
        n = len(r.seeds)
        row = {**row, "label": RECIPE_LABELS.get(name, name), "description": describe(name)
               if name in L.RECIPES else name, "n_seeds": n}
        row.setdefault("gap_pct", None)
        row.setdefault("gap_std_pct", None)
        row["gap_se_pct"] = None if row["gap_std_pct"] is None else row["gap_std_pct"] / math.sqrt(n)
        row["vs_ref_pct"] = row["vs_ref_std_pct"] = row["vs_ref_se_pct"] = None
        if ref is not None and name != reference and ref.seeds == r.seeds and \
                formats.format_info(L.RECIPES[name].fwd_fmt if name in L.RECIPES else "bf16").element_bits == 4:
            row["vs_ref_pct"], row["vs_ref_std_pct"], row["vs_ref_se_pct"] = \
                _paired(r.final_loss, ref.final_loss)
        final = smooth(r.curves, window).mean(axis=0)[-1]
        row["final_train_loss"] = float(final)
        if base_curve is not None:
            k = steps_to_reach(base_curve, final)
            row["bf16_steps_pct"] = None if k is None else 100 * k / cfg.steps
        else:
            row["bf16_steps_pct"] = None
        row["above_uniform"] = bool(row["final_loss_mean"] > math.log(cfg.vocab))
        rows.append(row)
    return rows


def clear(mean: float | None, se: float | None, n: int) -> str | None:
    """"up", "down" when |mean| exceeds two standard errors, "none" otherwise; None for 1 seed."""
    if mean is None or n < 2:
        return None
    if abs(mean) > 2 * se:
        return "up" if mean > 0 else "down"
    return "none"


def _row(rows, name) -> dict:
    for r in rows:
        if r["recipe"] == name:
            return r
    raise KeyError(f"no experiment row for recipe {name!r}")


def experiment_facts(rows: Sequence[dict], results: dict, cfg: L.TaskConfig) -> dict[str, Any]:
    """Named numbers of the experiment for the prose and the comparison with published results.

    nvfp4_vs_fp8_pct: mean over seeds of (NVFP4 - FP8 per-tensor) / FP8 per-tensor final
    loss, percent. mxfp4_extra_steps_pct: how many more steps MXFP4's smoothed training loss
    needs than NVFP4's to reach NVFP4's final level (None when it never gets there).
    """
    window = smooth_window(cfg.steps)
    n = len(next(iter(results.values())).seeds)
    f: dict[str, Any] = {"n_seeds": n, "steps": cfg.steps, "window": window,
                         "bayes": _row(rows, "bf16")["bayes_loss"], "log_vocab": math.log(cfg.vocab),
                         "bf16_loss": _row(rows, "bf16")["final_loss_mean"]}
    f["bf16_excess"] = f["bf16_loss"] - f["bayes"]
    f["nvfp4_vs_fp8_pct"], f["nvfp4_vs_fp8_std"], f["nvfp4_vs_fp8_se"] = _paired(
        results["nvfp4"].final_loss, results["fp8_tensor"].final_loss)
    nv = smooth(results["nvfp4"].curves, window).mean(axis=0)
    mx = smooth(results["mxfp4"].curves, window).mean(axis=0)
    k_nv, k_mx = steps_to_reach(nv, nv[-1]), steps_to_reach(mx, nv[-1])
    f["nvfp4_steps"], f["mxfp4_steps"] = k_nv, k_mx
    f["mxfp4_extra_steps_pct"] = None if k_mx is None else 100 * (k_mx / k_nv - 1)
    f["mxfp4_minus_nvfp4_pts"] = _row(rows, "mxfp4")["gap_pct"] - _row(rows, "nvfp4")["gap_pct"]
    return f


def budget_text(facts: dict[str, Any]) -> str:
    """Whether BF16 is near the source entropy at the end of the run (excess below 5% of the
    way from a uniform guess down to the entropy), in one clause."""
    span = facts["log_vocab"] - facts["bayes"]
    if facts["bf16_excess"] > 0.05 * span:
        return ("the toy is not trained to convergence, so the gaps are those of a fixed, "
                "short budget")
    return "the toy is close to convergence, so the gaps are close to those of the formats' limits"


def worth_text(rows: Sequence[dict], name: str = "nvfp4") -> str:
    """How many BF16 steps a recipe's run is worth (``bf16_steps_pct``), in one sentence."""
    r = _row(rows, name)
    if r["bf16_steps_pct"] is None:
        return (f"BF16's own curve never gets down to the {r['label']}'s final training loss "
                f"within the run.")
    return (f"BF16's own curve reaches the {r['label']}'s final training loss after "
            f"{r['bf16_steps_pct']:.0f}% of its steps: at this scale, the {r['label']} run is worth "
            f"that share of the BF16 run.")


def _pm(mean: float, sd: float, digits: int = 2, n: int = 2) -> str:
    """"+1.23% ± 0.45" (the spread left out for a single seed)."""
    return f"{mean:+.{digits}f}%" if n < 2 else f"{mean:+.{digits}f}% ± {sd:.{digits}f}"


def eight_bit_text(rows: Sequence[dict]) -> str:
    """How far the 8-bit recipes end from BF16, and whether that is beyond the seed noise."""
    parts = []
    for name in ("fp8_tensor", "mxfp8"):
        r = _row(rows, name)
        c = clear(r["gap_pct"], r["gap_se_pct"], r["n_seeds"])
        verdict = {None: "one seed, so no spread to judge it by",
                   "none": "within two standard errors of zero, so not distinguishable from BF16 "
                           "with these seeds",
                   "up": "more than two standard errors above zero",
                   "down": "more than two standard errors below zero"}[c]
        parts.append(f"{r['label']} ends {_pm(r['gap_pct'], r['gap_std_pct'], n=r['n_seeds'])} from BF16, "
                     f"{verdict}")
    return "; ".join(parts) + "."


def ablation_text(rows: Sequence[dict]) -> str:
    """Each ablation's paired change against the full NVFP4 recipe, with a verdict."""
    parts = []
    for name in ABLATIONS:
        r = _row(rows, name)
        c = clear(r["vs_ref_pct"], r["vs_ref_se_pct"], r["n_seeds"])
        verdict = {None: "one seed cannot separate that from noise",
                   "none": "within two standard errors: no clear effect at this scale",
                   "up": "a clear loss (beyond two standard errors)",
                   "down": "a clear gain (beyond two standard errors), so this element does not "
                           "help here"}[c]
        what = ELEMENT_NAMES[ABLATION_ELEMENT[name]]
        parts.append(f"dropping {what} moves the final loss "
                     f"{_pm(r['vs_ref_pct'], r['vs_ref_std_pct'], n=r['n_seeds'])} "
                     f"against the full recipe, {verdict}")
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def fp4_text(rows: Sequence[dict], facts: dict[str, Any]) -> str:
    """Naive NVFP4 and MXFP4 against the recipe, in one or two sentences."""
    nv, naive, mx = _row(rows, "nvfp4"), _row(rows, "nvfp4_naive"), _row(rows, "mxfp4")
    if naive["above_uniform"]:
        s1 = (f"Without any recipe element, NVFP4 training fails: it ends at "
              f"{naive['final_loss_mean']:.2f} nats, above the {facts['log_vocab']:.2f} nats of a "
              f"uniform guess ({naive['gap_pct']:+.0f}% from BF16).")
    else:
        s1 = (f"Without any recipe element, NVFP4 ends {naive['gap_pct']:+.1f}% from BF16 against "
              f"{nv['gap_pct']:+.1f}% with the recipe.")
    if facts["mxfp4_extra_steps_pct"] is None:
        s2 = (f"MXFP4 with the same recipe ends {mx['gap_pct']:+.1f}% from BF16, "
              f"{facts['mxfp4_minus_nvfp4_pts']:.1f} points behind NVFP4, and its training loss "
              f"never reaches NVFP4's final level within the {facts['steps']:,} steps.")
    elif facts["mxfp4_extra_steps_pct"] <= 0:
        s2 = (f"MXFP4 with the same recipe ends {mx['gap_pct']:+.1f}% from BF16 "
              f"({facts['mxfp4_minus_nvfp4_pts']:+.1f} points against NVFP4), and its training loss "
              f"reaches NVFP4's final level no later than NVFP4's own: at this budget the toy "
              f"does not separate the two formats.")
    else:
        s2 = (f"MXFP4 with the same recipe ends {mx['gap_pct']:+.1f}% from BF16, "
              f"{facts['mxfp4_minus_nvfp4_pts']:.1f} points behind NVFP4; its training loss needs "
              f"{facts['mxfp4_extra_steps_pct']:.0f}% more steps to reach NVFP4's final level.")
    return f"{s1} {s2}"


def scale_text(facts: dict[str, Any], pub: dict[str, float]) -> str:
    """The toy's NVFP4-vs-FP8 gap set against the published range at 12B parameters."""
    v, sd = facts["nvfp4_vs_fp8_pct"], facts["nvfp4_vs_fp8_std"]
    lo, hi = pub["nvfp4_vs_fp8_lo_pct"], pub["nvfp4_vs_fp8_hi_pct"]
    rng = f"the published {lo:.0f}% to {hi:.1f}%"
    where = (f"above {rng}, as expected of a small model trained briefly" if v > hi else
             f"below {rng}" if v < lo else f"inside {rng}")
    return f"The toy's NVFP4 ends {v:+.1f}% ± {sd:.1f} from FP8 per-tensor, {where}."


def _paper_point(key: str) -> dict:
    pts = references.section("low_precision_training")
    words = {"deepseek": "DeepSeek", "nvfp4_fp8": "12B parameters", "mxfp4": "MXFP4 needs",
             "ablation": "without the recipe"}[key]
    for p in pts:
        if words in p["claim"] or words in p["source"]:
            return p
    raise KeyError(key)


def published_numbers() -> dict[str, float]:
    """The published reference values in percent (``data/references.yaml``, ``low_precision_training``)."""
    lo, hi = _paper_point("nvfp4_fp8")["value"]
    return {"fp8_vs_bf16_pct": 100 * _paper_point("deepseek")["value"],
            "nvfp4_vs_fp8_lo_pct": 100 * lo, "nvfp4_vs_fp8_hi_pct": 100 * hi,
            "mxfp4_tokens_pct": 100 * _paper_point("mxfp4")["value"]}


def published_rows(rows: Sequence[dict], facts: dict[str, Any]) -> list[dict[str, Any]]:
    """The published large-scale results beside what this toy measures for the same question."""
    fp8 = _row(rows, "fp8_tensor")
    mx8 = _row(rows, "mxfp8")
    naive = _row(rows, "nvfp4_naive")
    n = facts["n_seeds"]
    toy = {
        "deepseek": f"FP8 per-tensor {_pm(fp8['gap_pct'], fp8['gap_std_pct'], n=n)}, MXFP8 "
                    f"{_pm(mx8['gap_pct'], mx8['gap_std_pct'], n=n)} vs BF16 ({seeds_text(n)}; no 1x128 tile "
                    f"recipe in the toy)",
        "nvfp4_fp8": f"NVFP4 {_pm(facts['nvfp4_vs_fp8_pct'], facts['nvfp4_vs_fp8_std'], n=n)} vs FP8 "
                     f"per-tensor",
        "mxfp4": ("MXFP4 never reaches NVFP4's final loss in "
                  f"{facts['steps']:,} steps" if facts["mxfp4_extra_steps_pct"] is None else
                  "MXFP4 reaches NVFP4's final loss no later than NVFP4"
                  if facts["mxfp4_extra_steps_pct"] <= 0 else
                  f"MXFP4 needs {facts['mxfp4_extra_steps_pct']:.0f}% more steps than NVFP4"),
        "ablation": f"naive NVFP4 {naive['gap_pct']:+.0f}% vs BF16"
                    + (" (diverged)" if naive["above_uniform"] else "")
                    + "; ablations in the ablation table",
    }
    out = []
    for key in ("deepseek", "nvfp4_fp8", "mxfp4", "ablation"):
        p = _paper_point(key)
        out.append({"claim": p["claim"], "figure": p["figure"], "model": p["model"],
                    "source": p["source"], "verified": p["verified"], "toy": toy[key]})
    return out


# --------------------------------------------------------------------------------------------
# What a format buys
# --------------------------------------------------------------------------------------------

def peak_rows(gpu_ids: Sequence[str], precisions: Sequence[str]) -> list[dict[str, Any]]:
    """Dense peak TFLOP/s per GPU and precision (None where not native), with ratios."""
    rows = []
    for g in map(hardware.get, gpu_ids):
        bf16 = g.peak_flops("bf16")
        fp8 = g.peak_flops("fp8") if g.supports("fp8") else None
        for p in precisions:
            ok = g.supports(p)
            fl = g.peak_flops(p) if ok else None
            rows.append({"gpu": g.id, "label": g.label, "family": g.family, "status": g.status,
                         "precision": p, "precision_label": recipes.label(p), "native": ok,
                         "tflops": fl / 1e12 if ok else None,
                         "vs_bf16": fl / bf16 if ok else None,
                         "vs_fp8": fl / fp8 if ok and fp8 else None})
    return rows


def peak_table_rows(peaks: Sequence[dict], precisions: Sequence[str]) -> list[dict[str, Any]]:
    """One row per GPU, one text cell per precision: "5,000 (4.0x)" or "not native"."""
    out = {}
    for r in peaks:
        row = out.setdefault(r["gpu"], {"gpu": r["gpu"], "label": r["label"],
                                        "status": r["status"]})
        row[r["precision"]] = (f"{r['tflops']:,.0f} ({r['vs_bf16']:.1f}x)" if r["native"]
                               else "not native")
    return list(out.values())


def bytes_rows(precisions: Sequence[str], gpu_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Bytes per element stored in HBM or moved over links, per precision (scales included)."""
    rows = []
    for p in precisions:
        i = formats.format_info(recipes.get(p).operand_format)
        native = [hardware.get(g).label for g in gpu_ids if hardware.get(g).supports(p)]
        rows.append({"precision": p, "precision_label": recipes.label(p),
                     "format": format_label(recipes.get(p).operand_format), "bits": i.bits_per_element,
                     "bytes": i.bits_per_element / 8, "vs_bf16": i.bits_per_element / 16,
                     "native_on": ", ".join(native) if native else "none of this scenario's GPUs"})
    return rows


def read_runs(paths: Sequence[Path | str] = runs_table.FITTED_TABLES) -> list[dict[str, Any]]:
    """Every published run (``runs.fitted_runs``: the calibration and validation tables), the
    same list whose MFU the validation chapter plots."""
    return runs_table.fitted_runs(paths)


def achieved_rows(runs: Sequence[dict], gpu_ids: Sequence[str] | None = None) -> list[dict]:
    """One row per published run with a measurement (on ``gpu_ids`` if given): its MFU, the share of
    the dense peak of its precision (``plan.mfu`` of the measured tokens/s per GPU,
    ``runs.measured_tokens_per_s``: the one MFU every chapter states for a run, never a source's
    own FLOP count), and the model TFLOP/s it implies."""
    out = []
    for r in runs:
        if gpu_ids is not None and r["hardware"] not in gpu_ids:
            continue
        model = runs_table.row_model(r)
        tps, _ = runs_table.measured_tokens_per_s(r, model)
        if tps is None:
            continue
        g, rec = runs_table.row_gpu(r), runs_table.row_recipe(r)
        u = planning.mfu(tps, model, g, rec)
        out.append({"run_id": r["run_id"], "gpu": r["hardware"], "label": g.label, "model": r["model"],
                    "gpu_count": r["gpu_count"], "precision": r["precision"],
                    "precision_label": recipes.label(r["precision"]),
                    "tflops": u * g.peak_flops(rec) / 1e12, "mfu": u, "tokens_per_s": tps})
    return out


def share_rows(runs: Sequence[dict], gpu_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Per GPU (of ``gpu_ids``, in order) and precision: how many published runs, and the
    median and range of their share of the dense peak of that precision."""
    pts = achieved_rows(runs, gpu_ids)
    out = []
    for g in gpu_ids:
        for p in dict.fromkeys(r["precision"] for r in pts if r["gpu"] == g):
            sel = [r for r in pts if r["gpu"] == g and r["precision"] == p]
            mfu = [r["mfu"] for r in sel]
            out.append({"gpu": g, "label": hardware.get(g).label, "precision": p,
                        "precision_label": sel[0]["precision_label"], "n_runs": len(sel),
                        "mfu_median_pct": 100 * median(mfu), "mfu_min_pct": 100 * min(mfu),
                        "mfu_max_pct": 100 * max(mfu),
                        "tflops_median": median(r["tflops"] for r in sel),
                        "models": ", ".join(dict.fromkeys(r["model"] for r in sel))})
    return out


#: Columns that must agree for two runs to differ only in precision.
MATCH_COLUMNS = ("model", "hardware", "gpu_count", "seq_len", "gbs")


def tax_rows(runs: Sequence[dict], gpu_ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The precision tax: runs that differ only in precision (``MATCH_COLUMNS`` equal).

    Baseline per group: FP8 if present, else BF16; each other precision p is paired with it,
    the lower-peak format of the pair as the baseline (so BF16 runs give "FP8 vs BF16"):
    peak_ratio = peak(p) / peak(baseline); achieved_ratio = tokens/s ratio; tax_pct =
    100 (1 - achieved / peak); realized_pct = share of the promised speed-up realized,
    100 (achieved - 1) / (peak - 1) (None when the peaks are equal); amdahl_pct = the share
    of the baseline step that would have to run at the full peak ratio (the rest unchanged)
    to give the achieved ratio, 100 (1 - 1/achieved) / (1 - 1/peak) (Amdahl's law; an
    interpretation, not a measurement). in_scenario: the GPU is one of ``gpu_ids``.
    """
    groups: dict[tuple, dict[str, list[dict]]] = {}
    for r in runs:
        if r.get("measured_tokens_per_s_per_gpu") is None:
            continue
        key = tuple(r.get(c) for c in MATCH_COLUMNS)
        groups.setdefault(key, {}).setdefault(r["precision"], []).append(r)
    out = []
    for key, by_p in groups.items():
        if len(by_p) < 2:
            continue
        base = "fp8" if "fp8" in by_p else "bf16" if "bf16" in by_p else None
        if base is None:
            continue
        g = hardware.get(key[1])
        for p0 in by_p:
            if p0 == base or not g.supports(p0):
                continue
            # the lower-peak format of the pair is its baseline (BF16 against FP8)
            p, b = (p0, base) if g.peak_flops(p0) >= g.peak_flops(base) else (base, p0)
            rs, rb = by_p[p], by_p[b]
            tok = float(np.mean([r["measured_tokens_per_s_per_gpu"] for r in rs]))
            tok_b = float(np.mean([r["measured_tokens_per_s_per_gpu"] for r in rb]))
            peak = g.peak_flops(p) / g.peak_flops(b)
            ach = tok / tok_b
            out.append({
                "model": key[0], "gpu": g.id, "label": g.label, "gpu_count": key[2],
                "precision": p, "baseline": b,
                "pair": f"{recipes.label(p)} vs {recipes.label(b)}",
                "tokens_per_s": tok, "baseline_tokens_per_s": tok_b,
                "mfu_pct": _mean_pct(rs), "baseline_mfu_pct": _mean_pct(rb),
                "peak_ratio": peak, "achieved_ratio": ach, "tax_pct": 100 * (1 - ach / peak),
                "realized_pct": None if peak == 1 else 100 * (ach - 1) / (peak - 1),
                "amdahl_pct": None if peak == 1 else 100 * (1 - 1 / ach) / (1 - 1 / peak),
                "in_scenario": gpu_ids is None or g.id in gpu_ids,
                "run_ids": "; ".join(r["run_id"] for r in rs + rb)})
    return out


def _mean_pct(rs: Sequence[dict]) -> float | None:
    """Mean MFU (``plan.mfu`` of the measured tokens/s) of runs ``rs``, in percent."""
    v = [r["mfu"] for r in achieved_rows(rs)]
    return 100 * float(np.mean(v)) if v else None


def fp4_tax(tax: Sequence[dict]) -> dict[str, Any] | None:
    """The FP4 (NVFP4, else MXFP4) row of the tax table with the most GPUs, or None."""
    for p in ("nvfp4", "mxfp4"):
        rows = [r for r in tax if r["precision"] == p]
        if rows:
            return max(rows, key=lambda r: r["gpu_count"])
    return None


def tax_text(tax: Sequence[dict]) -> str:
    """One sentence per published setup of the tax table, naming each format pair."""
    if not tax:
        return ("The runs table holds no pair of runs that differ only in precision, so the "
                "precision tax cannot be measured from it.")
    setups: dict[tuple, list[dict]] = {}
    for r in tax:
        setups.setdefault((r["model"], r["label"], r["gpu_count"], r["baseline"]), []).append(r)
    out = []
    for (model, label, count, base), rs in setups.items():
        b = recipes.label(base)
        parts = []
        for r in rs:
            s = (f"{recipes.label(r['precision'])} has {r['peak_ratio']:.2f}x "
                 f"the dense peak of {b} and reached {r['achieved_ratio']:.2f}x its tokens per second")
            if r["realized_pct"] is not None:
                s += f", {r['realized_pct']:.0f}% of the promised speed-up"
            parts.append(s)
        out.append(f"On {count:,} {label} GPUs training {model}, {'; '.join(parts)}.")
    return " ".join(out)


def native_text(gpu_ids: Sequence[str]) -> str:
    """Which scenario GPUs run the block-scaled formats natively, from the catalog."""
    yes = [hardware.get(g).label for g in gpu_ids if hardware.get(g).supports("nvfp4")]
    no = [hardware.get(g).label for g in gpu_ids if not hardware.get(g).supports("nvfp4")]
    if not yes:
        return (f"None of this scenario's GPUs ({_join(no)}) has native MXFP8 or NVFP4 tensor "
                f"cores: for them FP8 is the floor, and the FP4 numbers below are evidence from "
                f"published Blackwell runs outside this scenario.")
    if not no:
        return f"Every GPU of this scenario ({_join(yes)}) runs MXFP8 and NVFP4 natively."
    return (f"{_join(no)} {'has' if len(no) == 1 else 'have'} no native MXFP8 or NVFP4 tensor "
            f"cores (those formats would run as emulation, so the model treats them as "
            f"unsupported); {_join(yes)} {'runs' if len(yes) == 1 else 'run'} them natively.")


def fp4_peak_text(peaks: Sequence[dict]) -> str:
    """The FP4-over-FP8 dense peak ratio of each scenario GPU that has native NVFP4."""
    by = {}
    for r in peaks:
        if r["precision"] == "nvfp4" and r["native"] and r["vs_fp8"]:
            by.setdefault(f"{r['vs_fp8']:.1f}x", []).append(r["label"])
    if not by:
        return "No GPU of this scenario has a native NVFP4 peak to compare with FP8."
    parts = [f"{ratio} on {_join(labels)}" for ratio, labels in by.items()]
    return f"The dense NVFP4 peak over the FP8 peak is {_join(parts)}."


#: The Hopper GPU and format every generation ratio is taken against.
REFERENCE_GPU, REFERENCE_PRECISION = "h100_sxm", "fp8"


def generation_model(runs: Sequence[dict]) -> str | None:
    """The model whose published runs best compare generations: it has a run on the reference
    GPU in the reference format, and the most other (GPU, format) pairs; None if none has."""
    best, n_best = None, 0
    for m in dict.fromkeys(r["model"] for r in runs):
        rs = [r for r in runs if r["model"] == m and r.get("measured_tokens_per_s_per_gpu")]
        if not any(r["hardware"] == REFERENCE_GPU and r["precision"] == REFERENCE_PRECISION
                   for r in rs):
            continue
        n = len({(r["hardware"], r["precision"]) for r in rs} -
                {(REFERENCE_GPU, REFERENCE_PRECISION)})
        if n > n_best:
            best, n_best = m, n
    return best


def generation_rows(runs: Sequence[dict], gpu_ids: Sequence[str],
                    precisions: Sequence[str]) -> list[dict[str, Any]]:
    """Hopper against Blackwell: per GPU of ``gpu_ids`` and precision, the dense peak and the
    tokens per second per GPU of ``generation_model`` (best published run), both relative to
    the reference (H100 SXM, FP8). peak_ratio is None where the format is not native;
    achieved_ratio None where no run was published."""
    ref = hardware.get(REFERENCE_GPU)
    ref_peak = ref.peak_flops(REFERENCE_PRECISION)
    model = generation_model(runs)
    rs = [r for r in runs if r["model"] == model and r.get("measured_tokens_per_s_per_gpu")]
    ref_tok = max((r["measured_tokens_per_s_per_gpu"] for r in rs if r["hardware"] == REFERENCE_GPU
                   and r["precision"] == REFERENCE_PRECISION), default=None)
    out = []
    for g in map(hardware.get, gpu_ids):
        for p in precisions:
            ok = g.supports(p)
            sel = [r for r in rs if r["hardware"] == g.id and r["precision"] == p]
            top = max(sel, key=lambda r: r["measured_tokens_per_s_per_gpu"]) if sel else None
            out.append({
                "gpu": g.id, "label": g.label, "family": g.family, "precision": p,
                "precision_label": recipes.label(p), "native": ok,
                "peak_ratio": g.peak_flops(p) / ref_peak if ok else None,
                "model": model if top else None,
                "gpu_count": top["gpu_count"] if top else None,
                "tokens_per_s": top["measured_tokens_per_s_per_gpu"] if top else None,
                "achieved_ratio": top["measured_tokens_per_s_per_gpu"] / ref_tok
                if top and ref_tok else None,
                "run_id": top["run_id"] if top else None})
    return out


def generation_text(rows: Sequence[dict]) -> str:
    """The Hopper-vs-Blackwell comparison of ``generation_rows`` in one sentence."""
    pts = [r for r in rows if r["achieved_ratio"] is not None and r["peak_ratio"] is not None
           and not (r["gpu"] == REFERENCE_GPU and r["precision"] == REFERENCE_PRECISION)]
    ref = hardware.get(REFERENCE_GPU).label
    if not pts:
        return (f"No published run of this scenario's GPUs can be set against {ref} in "
                f"{recipes.label(REFERENCE_PRECISION)} for the same model, so the comparison "
                f"shows peaks only.")
    model = pts[0]["model"]
    parts = [f"{r['label']} in {r['precision_label']} reaches {r['achieved_ratio']:.2f}x the tokens "
             f"per second per GPU for {r['peak_ratio']:.2f}x the dense peak "
             f"({100 * r['achieved_ratio'] / r['peak_ratio']:.0f}% of the peak ratio)" for r in pts]
    return (f"Training {model}, against {ref} in {recipes.label(REFERENCE_PRECISION)}: "
            f"{'; '.join(parts)}.")


# --------------------------------------------------------------------------------------------
# FP4 where it pays
# --------------------------------------------------------------------------------------------

def guidance_rows(err: dict[str, float], rows: Sequence[dict], facts: dict[str, Any],
                  tax: Sequence[dict], gpu_ids: Sequence[str]) -> list[dict[str, str]]:
    """"FP4 where it pays": (question, evidence from this chapter, guidance), from the numbers."""
    pub = published_numbers()
    nv, mx = _row(rows, "nvfp4"), _row(rows, "mxfp4")
    last = _row(rows, "nvfp4_no_bf16_last")
    out = []
    # which format
    out.append({
        "question": "Which 4-bit format",
        "evidence": (f"NVFP4 has {err['nvfp4_over_mxfp4_min']:.1f} to "
                     f"{err['nvfp4_over_mxfp4_max']:.1f} dB more SNR than the better MXFP4 scale "
                     f"rule for {err['nvfp4_extra_bits']:.2f} more bits per element; in the toy "
                     f"MXFP4 ends {facts['mxfp4_minus_nvfp4_pts']:.1f} points further from BF16; "
                     f"published: MXFP4 needs {pub['mxfp4_tokens_pct']:.0f}% more tokens."),
        "advice": "NVFP4, not MXFP4: both use the same FP4 tensor-core peak, and MXFP4's extra "
                  "tokens are paid in full."})
    # which layers
    c = clear(last["vs_ref_pct"], last["vs_ref_se_pct"], last["n_seeds"])
    effect = {None: "a change of", "none": "no clear change,", "up": "a clear loss of",
              "down": "a clear gain of"}[c]
    out.append({
        "question": "Which layers",
        "evidence": (f"Quantizing the last layer too: {effect} "
                     f"{last['vs_ref_pct']:+.2f}% against the recipe in the toy; outlier "
                     f"channels flush {err['nvfp4_flushed_outlier']:.1f}% of NVFP4 elements to "
                     f"zero (Gaussian: {err['nvfp4_flushed']:.1f}%)."),
        "advice": "Linear layers of the transformer blocks in FP4; the last layers (and the "
                  "output projection) in BF16, as the NVFP4 recipe prescribes."})
    # which GEMMs
    bits = []
    for name in ("nvfp4_no_sr", "nvfp4_no_2d"):
        r = _row(rows, name)
        bits.append(f"without {ELEMENT_NAMES[ABLATION_ELEMENT[name]]} "
                    f"{r['vs_ref_pct']:+.2f}% ± {r['vs_ref_std_pct']:.2f}")
    out.append({
        "question": "Which GEMMs",
        "evidence": f"Toy ablations against the recipe: {'; '.join(bits)}; naive NVFP4 "
                    f"{_row(rows, 'nvfp4_naive')['gap_pct']:+.0f}% vs BF16.",
        "advice": "All three GEMMs of a linear layer (forward, dgrad, wgrad) in NVFP4 with "
                  "stochastic rounding on gradients, 2D weight tiles and the Hadamard transform "
                  "on wgrad; never FP4 without the recipe."})
    # which GPUs
    native = [hardware.get(g).label for g in gpu_ids if hardware.get(g).supports("nvfp4")]
    none = [hardware.get(g).label for g in gpu_ids if not hardware.get(g).supports("nvfp4")]
    ev = f"Native NVFP4: {_join(native) if native else 'none of this scenario'}"
    ev += f"; FP8 floor: {_join(none)}." if none else "."
    out.append({"question": "Which GPUs", "evidence": ev,
                "advice": "FP4 only where the tensor cores run it natively (Blackwell and "
                          "later); on Hopper, FP8 with per-tensor or tile scaling."})
    # when it pays
    t = fp4_tax(tax)
    if t is not None:
        margin = 100 * (t["achieved_ratio"] - 1)
        out.append({
            "question": "When it pays",
            "evidence": (f"{t['pair']} on {t['label']}: {t['achieved_ratio']:.2f}x the tokens per "
                         f"second of {t['peak_ratio']:.1f}x peak; MXFP4's "
                         f"+{pub['mxfp4_tokens_pct']:.0f}% tokens would leave "
                         f"{(1 + pub['mxfp4_tokens_pct'] / 100) / t['achieved_ratio']:.2f}x "
                         f"FP8's time."),
            "advice": (f"NVFP4 saves time only while the extra tokens it needs to match the "
                       f"{recipes.label(t['baseline'])} loss stay below {margin:.0f}%.")})
    return out


def time_ratio(extra_tokens_pct, achieved_ratio):
    """Training time (and GPU-hours, so cost on the same GPUs) of a format relative to its
    baseline when it needs ``extra_tokens_pct`` % more tokens to reach the same loss and runs at
    ``achieved_ratio`` times the baseline's tokens per second: (1 + pct / 100) / ratio (arrays
    broadcast). The HTML's penalty control evaluates the same expression
    (:func:`time_ratio_expr`, held to this by tests/test_whatif.py)."""
    out = (1.0 + np.asarray(extra_tokens_pct, dtype=float) / 100.0) / np.asarray(achieved_ratio, dtype=float)
    return float(out) if out.ndim == 0 else out


def time_ratio_expr(param: str) -> str:
    """:func:`time_ratio` as a Vega expression of the penalty parameter ``param`` (percent) and the
    row's ``achieved_ratio``."""
    return f"(1 + {param} / 100) / datum.achieved_ratio"


#: The penalty control of the FP4 chart (extra tokens in percent): where it starts (no penalty),
#: its range and step, and the penalties the curve is drawn over.
PENALTY_CONTROL = {"name": "nvfp4_extra_tokens_pct", "value": 0.0, "lo": 0.0, "hi": 60.0, "step": 1.0}
PENALTY_PCTS = tuple(range(0, 61, 2))


def penalty_rows(tax: Sequence[dict]) -> list[dict[str, Any]]:
    """The FP4 pair of the tax table (:func:`fp4_tax`) as a curve of its training time relative to
    the baseline format against the extra tokens it needs (``kind`` "curve", :data:`PENALTY_PCTS`),
    plus one row (``kind`` "point") that the chart's penalty control places (the library's value at
    the control's starting penalty). Empty without an FP4 pair."""
    t = fp4_tax(tax)
    if t is None:
        return []
    common = {"pair": t["pair"], "label": t["label"], "model": t["model"], "achieved_ratio": t["achieved_ratio"]}
    out = [{**common, "kind": "curve", "extra_tokens_pct": float(p), "time_ratio": time_ratio(p, t["achieved_ratio"])}
           for p in PENALTY_PCTS]
    p0 = PENALTY_CONTROL["value"]
    out.append({**common, "kind": "point", "extra_tokens_pct": p0, "time_ratio": time_ratio(p0, t["achieved_ratio"])})
    return out


def breakeven(tax: Sequence[dict]) -> dict[str, float | None]:
    """The FP4 break-even numbers the prose quotes (None when the runs table has no FP4 pair)."""
    t = fp4_tax(tax)
    pub = published_numbers()
    if t is None:
        return {"margin_pct": None, "mxfp4_time_ratio": None}
    return {"margin_pct": 100 * (t["achieved_ratio"] - 1),
            "mxfp4_time_ratio": time_ratio(pub["mxfp4_tokens_pct"], t["achieved_ratio"])}
