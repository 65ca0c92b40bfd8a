"""The unit of every number column the book exports (``figures/<label>.csv``).

:func:`unit` answers for a column of an exported CSV: first what that file says (:data:`BY_FILE`,
for names that mean different things in different files: ``n`` is a GPU count in one and a row
number in another), then the name alone (:data:`BY_NAME`), then its ending (:data:`BY_SUFFIX`).
A band's ``<name>_low`` and ``<name>_high`` have the unit of ``<name>``. The units are written
into each CSV's metadata (``report/exports.py``); a test builds the book and requires a unit for
every number column, so a new column needs its unit here.

Words used: "fraction" is a share between 0 and 1 (an MFU, a share of the step, a relative
error: 0.05 is 5%); "ratio" is one quantity over another of the same kind; "count" is a number
of things (rows, runs, collectives); "index" orders rows and has no unit.
"""
from __future__ import annotations

TOKENS_PER_S = "tokens/s per GPU"
FRACTION = "fraction"
RATIO = "ratio"
COUNT = "count"
INDEX = "index (no unit)"
GPUS = "GPUs"
SECONDS = "s"

BY_NAME: dict[str, str] = {
    # throughput and time
    "tps": TOKENS_PER_S, "tokens_per_s": TOKENS_PER_S, "tokens_per_s_per_gpu": TOKENS_PER_S,
    "hopper_tps": TOKENS_PER_S, "blackwell_tps": TOKENS_PER_S, "recipe_tps": TOKENS_PER_S,
    "search_tps": TOKENS_PER_S, "recipe_search_tps": TOKENS_PER_S,
    "measured": TOKENS_PER_S, "predicted": TOKENS_PER_S,
    "days": "days", "hopper_days": "days", "blackwell_days": "days",
    "step": SECONDS, "seconds": SECONDS, "ms": "ms",
    "per_day": "billion tokens per day",
    # money and energy
    "cost_musd": "million USD", "cost": "million USD", "hopper_cost": "million USD",
    "blackwell_cost": "million USD", "per_mtok": "USD per million tokens",
    "usd": "USD per GPU-hour", "energy": "MWh", "gpu_hours": "million GPU-hours",
    "price": "USD per GPU-hour", "breakeven": "USD per GPU-hour", "breakeven_usd": "USD per GPU-hour",
    "cost_usd": "USD", "cost_owned": "million USD", "energy_mwh": "MWh", "energy_mwh_work": "MWh",
    "days_work": "days", "gpu_hours_work": "GPU-hours",
    # power, goodput and failures
    "goodput": FRACTION, "goodput_for": FRACTION, "mtbf_h": "hours", "interval_min": "minutes",
    "heq": "H100-equivalent GPUs",
    # GPU counts and parallel sizes
    "gpus": GPUS, "gpu_count": GPUS, "n_gpus": GPUS, "need": GPUS, "gpus_text": GPUS,
    "hopper_gpus": GPUS, "blackwell_gpus": GPUS, "mp": GPUS, "ep": GPUS, "domain": GPUS,
    "nvlink_domain": GPUS, "size": GPUS, "per_domain": GPUS,
    # counts and order
    "rows": COUNT, "runs": COUNT, "n_runs": COUNT, "heldout_rows": COUNT, "collectives": COUNT,
    "domains": "NVLink domains", "ep_domains": "NVLink domains", "shapes": COUNT,
    "idx": INDEX, "order": INDEX, "n": INDEX,
    # shares, efficiencies and errors (0.05 = 5%)
    "mfu": FRACTION, "mfu_pred": FRACTION, "hopper_mfu": FRACTION, "blackwell_mfu": FRACTION,
    "measured_mfu_median": FRACTION, "measured_mfu_max": FRACTION, "predicted_mfu_median": FRACTION,
    "frac": FRACTION, "model_frac": FRACTION, "single_ceiling": FRACTION, "achieved": FRACTION,
    "limit": FRACTION, "share": FRACTION, "share_ref": FRACTION, "share_top": FRACTION,
    "share_small": FRACTION, "share_large": FRACTION, "nic_share": FRACTION,
    "exposed": FRACTION, "exposed_cut": FRACTION, "exposed_top": FRACTION, "ep_exposed": FRACTION,
    "error": FRACTION, "rel_err": FRACTION, "rel_error": FRACTION, "median_abs_error": FRACTION,
    "median_signed_error": FRACTION, "max_abs_error": FRACTION, "in_sample": FRACTION,
    "in_sample_abs": FRACTION, "in_sample_signed": FRACTION, "held_out": FRACTION,
    "held_out_max": FRACTION, "family_abs": FRACTION, "family_signed": FRACTION,
    "cv_median": FRACTION, "heldout_median": FRACTION, "within_10": FRACTION,
    "within_25": FRACTION, "cv_within_25": FRACTION, "band_coverage": FRACTION,
    "median": FRACTION, "max": FRACTION, "signed_median": FRACTION, "in_band": FRACTION,
    "oos_median": FRACTION, "oos_within_25": FRACTION, "oos_in_band": FRACTION, "lro_median": FRACTION,
    "band": "fraction (relative half-width)",
    # ratios
    "ratio": RATIO, "speedup": RATIO, "peak_ratio": RATIO, "achieved_ratio": RATIO,
    "price_ratio": RATIO, "layout_ratio": RATIO, "model_over_measured": RATIO, "tps_ratio": RATIO,
    "nvlink_over_nic": RATIO, "hbm_per_state": RATIO, "vs_bf16": RATIO, "peak": RATIO,
    "bf16_vs_prev": RATIO, "best_vs_prev": RATIO, "hbm_gib_vs_prev": RATIO,
    "hbm_bw_vs_prev": RATIO, "nvlink_bw_vs_prev": RATIO, "nic_bw_vs_prev": RATIO,
    # fitted efficiency parameters (dimensionless)
    "c8": "fraction of peak", "family_factor_blackwell": RATIO, "memory_overhead": RATIO,
    "overlap_scale": RATIO,
    # hardware, formats, model shape
    "bits": "bits", "bytes": "bytes per value", "params_b": "billion parameters",
    "active_b": "billion parameters", "seq_len": "tokens", "tdp_w": "W",
    "ridge_flop_per_byte": "FLOP/byte", "range_binades": "binades (powers of two)",
    "min_normal": "value (format units)", "min_subnormal": "value (format units)",
    "magnitude": "value (relative to the tensor's largest)", "magnitude_label": "value (relative to the tensor's largest)",
    "gib": "GiB", "pct": "%", "model_tflops_per_gpu": "TFLOP/s per GPU",
    "snr_plot": "dB", "m": "elements", "k": "elements", "n_hm": "elements",
    "loss": "nats", "lo": "nats", "hi": "nats", "uniform": "nats", "bayes": "nats",
    "excess_loss_mean": "nats",
    # waterfall bars: throughput relative to the first bar
    "start": RATIO, "end": RATIO,
}
"""Units by column name, where the name means one thing in every file."""

BY_SUFFIX: tuple[tuple[str, str], ...] = (
    ("_pct", "%"), ("_gib", "GiB"), ("_tib", "TiB"), ("_gb_s", "GB/s"), ("_tb_s", "TB/s"),
    ("_gb", "GB"), ("_mb", "MB"), ("_bpp", "bytes per parameter"), ("_tflops", "TFLOP/s"),
    ("_s", SECONDS), ("_s_share", FRACTION), ("_bytes", "bytes"), ("_share", FRACTION),
    ("_mfu", FRACTION), ("_ratio", RATIO), ("_days", "days"), ("_tps", TOKENS_PER_S),
    ("_cost", "million USD"), ("_gpus", GPUS), ("_mw", "MW"), ("_kw", "kW"), ("_mwh", "MWh"),
)
"""Units by the name's ending (the longest matching ending wins)."""

BY_PREFIX: tuple[tuple[str, str], ...] = (
    ("t_", SECONDS), ("tflops", "TFLOP/s"),
)

BY_FILE: dict[str, dict[str, str]] = {
    # fig-comm-busbw: n GPUs in the collective
    "fig-comm-busbw": {"n": GPUS},
    # the GEMM dimensions
    "fig-val-gemm": {"n": "elements"},
    # the tornado's value is the input's own (price, tokens, ...): see its input column
    "fig-dec-tornado": {"value": "the input's unit (see column input)"},
    # one metric per row: see the metric column
    "fig-comm-domain": {"value": "per row: % of step or ratio (see column metric)"},
    # the input parameters: each in its own unit
    "tbl-val-params": {"value": "per row (see column parameter_md)"},
    "tbl-mem-reference": {"published": "per row (see column unit)", "computed": "per row (see column unit)"},
    # break-even chart: a price per GPU-hour and its band
    "fig-dec-breakeven": {"low": "USD per GPU-hour", "high": "USD per GPU-hour"},
    # held-out runs: tokens/s per GPU and the band around the prediction
    "tbl-val-heldout": {"low": TOKENS_PER_S, "high": TOKENS_PER_S},
    # the claims table: ratios between GPUs
    "tbl-val-claims": {"measured": RATIO, "predicted": RATIO, "peak": RATIO},
    # the pinned fits: the fit's objective and its errors
    "tbl-val-pinned": {"cost": "fit objective (sum of squared log errors)"},
    # counts of rows there
    "tbl-val-hardware": {"within_10": COUNT, "in_band": COUNT},
    # the largest finite value of the format
    "tbl-prec-formats": {"max": "value (format units)"},
    # the memory sweeps: x is the swept knob
    "fig-mem-seq": {"x": "tokens (sequence length)"},
    "fig-mem-micro": {"x": "sequences (micro-batch size)"},
    # the what-if figures carry GPU-hours whole (the cost table states millions)
    "fig-dec-cost-time": {"gpu_hours": "GPU-hours"}, "fig-dec-power": {"gpu_hours": "GPU-hours"},
    "fig-dec-scale": {"gpu_hours": "GPU-hours"},
    # the training-step index of the loss curves
    "fig-prec-curves": {"step": "training step"},
}
"""Units of the names that mean different things in different files."""


def _base(column: str) -> str:
    for end in ("_low", "_high"):
        if column.endswith(end):
            return column[: -len(end)]
    return column


def unit(label: str, column: str) -> str | None:
    """The unit of number column ``column`` of ``figures/<label>.csv``; None when not known."""
    for name in dict.fromkeys((column, _base(column))):
        if name in BY_FILE.get(label, {}):
            return BY_FILE[label][name]
        if name in BY_NAME:
            return BY_NAME[name]
    base = _base(column)
    ends = [(end, u) for end, u in BY_SUFFIX if base.endswith(end)]
    if ends:
        return max(ends, key=lambda e: len(e[0]))[1]
    for start, u in BY_PREFIX:
        if base.startswith(start):
            return u
    return None
