"""Rows for the validation chapter: the runs table with display labels, errors per hardware type
against the accuracy targets, the worst rows with their caveats and a recompute what-if, the
cross-validated errors (per scheme, per family, generation and source, per row), the calibrated parameters, step-time breakdowns, measured MFU per
row, the H200 single-GEMM measurement beside the model's GEMM ceilings, and a refit with the 8-bit
ceiling pinned to that measurement.

Everything here shapes the output of :mod:`scaletax.fit.validate` (and ``perf``) for the book; no new
model.

Public API
----------
- ``run_rows(table, rows)``: one display row per runs-table row (numbered as in the memory chapter).
- ``hardware_rows(table)``, ``target_rows(summary)``, ``targets_met(summary)``.
- ``worst_rows(runs, n)``, ``caveats(notes)``, ``recompute_whatif(rows, run_ids)``.
- Cross-validation (the headline): ``cv_scheme_rows(cv)``, ``cv_category_rows(cv, by)``, ``cv_rows(runs, cv)``
  (``cv`` = ``validate.cross_validation``); ``stack_rows(cv, rows)``.
- By regime (issue 29): ``regime_rows(cv, held)`` (every ``runs.REGIMES`` regime, empty ones
  included), ``worst_regime_text(worst)``, ``regime_goals_text(summary)``, ``empty_regimes_text(regimes)``.
- ``parameter_rows(band)``, ``representative(runs)``, ``breakdown_rows(runs)``, ``mfu_rows(runs)``.
- ``gemm_points(...)``, ``gemm_summary(points, band)``, ``gemm_curves(summary, points)``, ``copy_fraction(...)``.
- Seed claims ``b200_vs_h100(table)``, ``gb300_vs_gb200(table)``, ``mfu_by_precision(table)``, and
  ``claim_rows(b200_vs_h100, gb300_vs_gb200)``.
- ``pinned_fit(prepared, pins)``.
- Coverage (issue 12): ``COVERAGE``, ``coverage_rows(rows)`` (how many runs-table rows fall in each
  category the model was found off on), ``probe_rows(path)`` (predictions for the layouts of
  ``data/coverage_probes.csv``: NVIDIA's Megatron-Bridge benchmark recipes, exactly as stated, and a
  few paper layouts), ``probe_sources(probes)`` and ``probe_fit_text(probes)``.
- Held-out runs (issue 12): ``heldout_rows(path)`` (published production pre-training runs of
  ``data/heldout_runs.csv``, never calibrated on, predicted against their measurement),
  ``heldout_group(run_id)`` and ``heldout_summary(held, group)``.
- The search against NVIDIA's layouts: ``recipe_search_rows(path)`` (Kimi K2 and DeepSeek-V3 benchmark
  recipes of ``data/production_moe_recipes.csv``: the recipe's layout predicted, the search's best for
  the same model, GPUs, batch and precision, and their ratio; ``search.in_space`` says whether the
  search enumerates the recipe's layout).
- Display text: ``spct(x)`` (signed percent with a true minus), ``source_md(url)``.
"""
from __future__ import annotations

import csv
import math
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from scaletax import DATA_DIR, escape
from scaletax.inputs import hardware, models, recipes, runs
from scaletax.inputs.layout import Layout, label
from scaletax.model import comm, efficiency, memory, perf, runplan, search
from scaletax.model import plan as planning
from scaletax.fit import calibrate, validate

#: Source of a run (``runs.row_source``: the leave-one-source-out folds) and how the chapter names it.
SOURCE_KINDS: dict[str, str] = {"MLPerf": "MLPerf Training (closed division)",
                                "Megatron-Bridge": "Megatron-Bridge performance tables",
                                "papers": "Megatron papers (A100)", "TorchTitan": "TorchTitan benchmark pages",
                                "llm-foundry": "llm-foundry benchmark tables", "NeMo": "NeMo 24.07 performance summary",
                                "FlagPerf": "FlagPerf", "NeMo AutoModel": "NeMo AutoModel performance summary",
                                "Megatron MoE model zoo": "Megatron MoE model zoo",
                                "Llama 3 paper": "Llama 3 paper", "DeepSeek-V3 report": "DeepSeek-V3 report"}
SOURCE_SHORT: dict[str, str] = {k: ("Megatron papers" if k == "papers" else k) for k in SOURCE_KINDS}
#: Step-time components of ``perf.StepTime`` in display order, with their labels.
COMPONENTS: dict[str, str] = {"compute_s": "compute (tensor cores)", "exposed_comm_s": "exposed communication",
                              "bubble_s": "pipeline bubble", "other_s": "other (memory-bound, optimizer)"}
COMPONENT_COLORS: dict[str, str] = {"compute_s": "#4e79a7", "exposed_comm_s": "#e15759", "bubble_s": "#f28e2b",
                                    "other_s": "#bab0ac"}
#: Clauses of a row's notes that bear on its measured speed (matched case-insensitively).
CAVEAT_WORDS: tuple[str, ...] = ("contradiction", "caution", "not checked", "recompute", "recipe", "fsdp",
                                 "preview", "force-balanced", "synthetic")
#: GEMM rows of ``data/measured/gemm_h200.csv``: dtype -> (precision of the peak, label).
GEMM_DTYPES: dict[str, tuple[str, str]] = {"bf16": ("bf16", "BF16"), "fp8_e4m3": ("fp8", "FP8 E4M3"),
                                           "fp8_e4m3_fastaccum": ("fp8", "FP8 E4M3, fast accumulation")}


def source_kind(row: dict[str, Any]) -> str:
    """The source of a runs-table row (``runs.row_source``), a key of :data:`SOURCE_KINDS`."""
    return runs.row_source(row)


def model_short(model: str) -> str:
    """``'GPT-3 175B (MLPerf gpt3 reference)'`` -> ``'GPT-3 175B'``."""
    return str(model).split(" (")[0]


def source_md(url: str):
    """A short MyST link to a row's source (:func:`scaletax.escape.myst_link`); "–" for none."""
    url = str(url).strip()
    if not url:
        return "–"
    m = re.search(r"arxiv\.org/abs/([\d.]+)", url)
    if m:
        return escape.myst_link(f"arXiv:{m.group(1)}", url)
    link = url.split(" ")[0]
    m = re.search(r"training_results_v([\d.]+)/tree/[^/]+/([^/]+)/results", url)
    if m:
        return escape.myst_link(f"MLPerf Training v{m.group(1)} results, {m.group(2)}", link)
    for pat, name in (("Megatron-Bridge", "Megatron-Bridge performance summary"), ("torchtitan", "TorchTitan benchmarks"),
                      ("llm-foundry", "llm-foundry benchmarks"), ("NVIDIA/NeMo/", "NeMo performance summary"),
                      ("FlagPerf", "FlagPerf"), ("Automodel", "NeMo AutoModel performance summary"),
                      ("Megatron-MoE-ModelZoo", "Megatron MoE model zoo")):
        if pat in url:
            return escape.myst_link(name, link)
    return escape.myst_link(link, link)


def spct(x: float | None) -> str:
    """A signed percentage with a true minus sign (LaTeX does not break a line after it):
    ``+1.7%``, ``\u22129.0%``."""
    if x is None:
        return "–"
    s = f"{100 * x:+.1f}%"
    return "\u2212" + s[1:] if s.startswith("-") else s


_pct = spct


def run_rows(table: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Display rows for ``validate.validation_table(rows)``: numbered labels (``#i model, tag`` as in
    the memory chapter), GPUs, layout with recompute, band, error, source, caveats."""
    if len(table) != len(rows):
        raise ValueError(f"run_rows: {len(table)} table rows but {len(rows)} runs rows")
    out = []
    for i, (t, r) in enumerate(zip(table, rows), start=1):
        if t["run_id"] != r.get("run_id", ""):
            raise ValueError(f"run_rows: table row {i} is {t['run_id']!r}, runs row is {r.get('run_id')!r}")
        hw = hardware.get(str(t["hardware"]))
        assumed = "recompute assumed" in t["assumptions"]
        lay = t["layout"]
        rec = t["recompute"].replace("full on ", "full ").replace(" of layers, selective on the rest", ", sel. rest")
        short = model_short(t["model"])
        kind = source_kind(r)
        meas, pred = t["measured"], t["predicted"]
        out.append({
            "n": i, "run_id": t["run_id"], "run": f"#{i} {short}, {str(t['run_id']).split('-')[0]}",
            "label": f"#{i} {short}, {hw.label} ×{t['gpus']:,}, {str(t['precision']).upper()}",
            "model_short": short, "arch": "dense" if _blank(r.get("moe_experts")) else "MoE", "kind": kind, "kind_label": SOURCE_KINDS[kind], "kind_short": SOURCE_SHORT[kind], "group": t["group"],
            "hardware": hw.id, "hw_label": hw.label, "family": hw.family, "gpus": t["gpus"],
            "gpus_text": f"{t['gpus']:,} × {hw.label}", "precision": str(t["precision"]).upper(),
            "layout_text": f"{lay}; recompute {rec}{' (assumed)' if assumed else ''}",
            "recompute": t["recompute"], "recompute_assumed": assumed, "assumptions": t["assumptions"] or "–",
            "measured": meas, "predicted": pred, "predicted_low": t["predicted_low"],
            "predicted_high": t["predicted_high"],
            "predicted_text": f"{pred:,.{_dec(pred)}f} [{t['predicted_low']:,.{_dec(pred)}f}, "
                              f"{t['predicted_high']:,.{_dec(pred)}f}]",
            "error": t["error"], "abs_error": None if t["error"] is None else abs(t["error"]),
            "error_text": _pct(t["error"]), "in_band": t["in_band"],
            "error_low": None if meas is None else t["predicted_low"] / meas - 1.0,
            "error_high": None if meas is None else t["predicted_high"] / meas - 1.0,
            "basis": t["basis"], "source_md": source_md(r.get("source_url", "")),
            "caveats": caveats(r.get("notes", "")),
            "mfu_pred": t["mfu"], "mfu_measured": t["mfu_measured"], "step_s": t["step_s"],
            "model_flops_per_token": t["model_flops_per_token"],
            **{f"{k}_share": t[f"{k}_share"] for k in COMPONENTS},
        })
    return out


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip()) or (isinstance(v, float) and math.isnan(v))


def _dec(v: float) -> int:
    """Decimals that show a tokens/s value to about three significant figures."""
    return max(0, 2 - int(math.floor(math.log10(abs(v))))) if v else 0


def caveats(notes: str) -> str:
    """The clauses of a row's notes (``;``-separated) that bear on its speed (:data:`CAVEAT_WORDS`)."""
    parts = [p.strip() for p in str(notes or "").split(";")]
    keep = [p for p in parts if p and any(w in p.lower() for w in CAVEAT_WORDS)]
    return "; ".join(keep) or "–"


# =========================================================================================
# Errors against the targets
# =========================================================================================
def hardware_rows(table: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Error statistics per hardware type (in table order) and over all rows (first row)."""
    rows = [r for r in table if r.get("error") is not None]
    groups: dict[str, list[dict]] = {"all": rows}
    for r in rows:
        groups.setdefault(r["hardware"], []).append(r)
    out = []
    for hw, rs in groups.items():
        e = np.array([r["error"] for r in rs], dtype=np.float64)
        a = np.abs(e)
        out.append({"hardware": hw, "label": "all rows" if hw == "all" else hardware.get(hw).label,
                    "rows": len(rs), "median_abs_error": float(np.median(a)), "max_abs_error": float(a.max()),
                    "median_signed_error": float(np.median(e)),
                    "in_band": int(sum(bool(r["in_band"]) for r in rs)),
                    "within_10": int(np.sum(a <= 0.10)), "within_25": int(np.sum(a <= 0.25))})
    return out


def target_rows(summary: dict[str, Any], targets: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """Each accuracy target (``validate.TARGETS``), what the table achieves, and whether it is met."""
    t = validate.TARGETS if targets is None else targets
    worst_hw = max(summary["per_hardware"].items(), key=lambda kv: kv[1]["median_abs_error"])
    rows = [
        {"target": "median absolute error, all rows", "limit": t["median_abs_error"],
         "achieved": summary["median_abs_error"], "where": f"{summary['rows']} rows"},
        {"target": "median absolute error, every hardware type", "limit": t["per_hardware_median_abs_error"],
         "achieved": worst_hw[1]["median_abs_error"], "where": f"worst: {hardware.get(worst_hw[0]).label}"},
        {"target": "absolute error, every large dense run", "limit": t["large_dense_max_abs_error"],
         "achieved": summary["per_regime"]["large dense"]["max_abs_error"],
         "where": f"worst: {summary['per_regime']['large dense']['worst']}"},
    ]
    for r in rows:
        r["met"] = bool(r["achieved"] <= r["limit"])
    return rows


def targets_met(summary: dict[str, Any]) -> str:
    """One sentence: are all targets met, or which are not."""
    rows = target_rows(summary)
    missed = [r["target"] for r in rows if not r["met"]]
    if not missed:
        return f"All {len(rows)} accuracy targets are met."
    return f"Not met: {'; '.join(missed)}."


# =========================================================================================
# Worst rows
# =========================================================================================
def worst_rows(runs: Sequence[dict[str, Any]], n: int = 5) -> list[dict[str, Any]]:
    """The ``n`` rows with the largest absolute error, largest first."""
    rows = [r for r in runs if r["error"] is not None]
    return sorted(rows, key=lambda r: -abs(r["error"]))[:n]


_MODES = ("none", "selective", "full")


def recompute_whatif(rows: Sequence[dict[str, Any]], run_ids: Sequence[str],
                     band: efficiency.EfficiencyBand | None = None) -> list[dict[str, Any]]:
    """Each named row predicted with its layout and recompute none / selective / full (every layer),
    at the calibrated parameters: error, GiB per GPU and whether that fits the GPU's capacity."""
    eff = (efficiency.default_band() if band is None else band).value
    by_id = {r["run_id"]: r for r in rows}
    out = []
    for rid in run_ids:
        row = by_id[rid]
        base = validate.row_setup(row)
        setups = [validate.row_setup(row, layout=base.layout.replace(recompute=m)) for m in _MODES]
        st = perf.evaluate(validate.prepare_setups(setups), eff)
        cap = memory.capacity_gib(base.gpu)
        rec = {"run_id": rid, "capacity_gib": cap, "used": base.recompute_label,
               "assumed": any(a.startswith("recompute assumed") for a in base.assumptions)}
        for m, su, tps in zip(_MODES, setups, st.tokens_per_s_per_gpu):
            err = float(tps) / base.measured - 1.0
            fits = bool(su.memory_gib <= cap)
            rec[f"{m}_error"], rec[f"{m}_gib"], rec[f"{m}_fits"] = err, su.memory_gib, fits
            rec[f"{m}_text"] = f"{_pct(err)} ({su.memory_gib:.0f} GiB{'' if fits else ', no fit'})"
        fit_err = [rec[f"{m}_error"] for m in _MODES if rec[f"{m}_fits"]]
        # does some recompute choice that fits bracket the measurement?
        rec["brackets"] = bool(fit_err) and min(fit_err) <= 0.0 <= max(fit_err)
        out.append(rec)
    return out


# =========================================================================================
# Hold-out
# =========================================================================================
#: Cross-validation schemes shown in the chapter, with their labels.
CV_SCHEMES: dict[str, str] = {"in_sample": "in sample (all rows)", "row": "leave one row out",
                              "family": "leave one model family out", "generation": "leave one GPU generation out",
                              "source": "leave one source out", "regime": "leave one regime out"}
#: What the regime table says of a regime without any published run that has a measurement.
NO_REGIME_RUN = "no published run with a measurement in data/"
#: ... and of a regime with held-out runs but no calibration row (nothing to fit or leave out).
NO_REGIME_CALIBRATION = "no calibration row"


def cv_scheme_rows(cv: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per scheme of ``validate.cross_validation``: rows, median and largest absolute
    error, share within 10% / 25%, median signed error, coverage of the out-of-sample band,
    whether the goals (``validate.CV_GOALS``) are met."""
    goals = validate.CV_GOALS
    out = []
    for key, label in CV_SCHEMES.items():
        s = cv[key]
        met = s["median_abs_error"] <= goals["median_abs_error"] and s["within_25"] >= goals["within_25"]
        out.append({"scheme": key, "label": label, "rows": s["rows"], "median_abs_error": s["median_abs_error"],
                    "within_10": s["within_10"], "within_25": s["within_25"], "max_abs_error": s["max_abs_error"],
                    "median_signed_error": s["median_signed_error"], "band_coverage": cv["band_coverage"][key],
                    "met": "yes" if met else "no"})
    return out


def cv_category_rows(cv: dict[str, Any], by: str) -> list[dict[str, Any]]:
    """Per value of ``by`` ("family", "generation" or "source"): rows, in-sample median absolute
    error and the median absolute error when that category is left out (scheme ``by``)."""
    key = {"family": validate.row_family, "generation": validate.row_generation, "source": validate.row_source}[by]
    held = cv["tables"][by]
    ins = {r["run_id"]: r for r in cv["tables"]["in_sample"]}
    cats: dict[str, list[dict[str, Any]]] = {}
    for r in held:
        cats.setdefault(str(r[by]), []).append(r)
    out = []
    for cat, rs in cats.items():
        e_out = np.array([abs(r["error"]) for r in rs])
        e_in = np.array([abs(ins[r["run_id"]]["error"]) for r in rs])
        out.append({"category": cat, "rows": len(rs), "in_sample": float(np.median(e_in)),
                    "held_out": float(np.median(e_out)), "held_out_max": float(e_out.max()),
                    "within_25": float(np.mean(e_out <= 0.25)),
                    "prior": ", ".join(sorted({r["prior"] for r in rs if r["prior"]})) or "–"})
    return out


def regime_rows(cv: dict[str, Any], held: Sequence[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One display row per regime of ``runs.REGIMES`` (every one, in order):
    ``validate.regime_summary(cv, held)`` with, where a regime has no calibration row, the in-sample
    cell saying so (:data:`NO_REGIME_CALIBRATION`, or :data:`NO_REGIME_RUN` when it has no held-out
    run either); ``held``: :func:`heldout_rows`."""
    out = []
    for r in validate.regime_summary(cv, held):
        rec = {**r, "label": r["regime"][:1].upper() + r["regime"][1:], "empty": r["oos_rows"] == 0}
        if not r["rows"]:
            rec["in_sample"] = NO_REGIME_RUN if rec["empty"] else NO_REGIME_CALIBRATION
        out.append(rec)
    return out


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def worst_regime_text(worst: dict[str, Any]) -> str:
    """What the worst regime's out-of-sample error is taken over (a row of :func:`regime_rows` /
    ``validate.worst_regime``): its fitted runs each predicted by a calibration without their source,
    and its held-out runs, as it has them."""
    parts = []
    if worst["rows"]:
        parts.append(f"its {_count(worst['rows'], 'fitted run')} each predicted by a calibration without their "
                     "source")
    if worst["heldout_rows"]:
        parts.append(f"{'its ' if not parts else ''}{_count(worst['heldout_rows'], 'held-out run')}")
    return " and ".join(parts)


def regime_goals_text(summary: dict[str, Any], worst: dict[str, Any] | None = None) -> str:
    """Sentences: does leaving one regime out (a ``validate.holdout_summary``) meet
    ``validate.CV_GOALS`` over all rows, and if not, which goal it misses; with ``worst``
    (``validate.worst_regime``), whether that regime alone meets them."""
    g = validate.CV_GOALS

    def missed(median: float, w25: float) -> list[str]:
        out = []
        if median > g["median_abs_error"]:
            out.append(f"the median (at most {g['median_abs_error']:.0%})")
        if w25 < g["within_25"]:
            out.append(f"the share within 25% (at least {g['within_25']:.0%})")
        return out

    m = missed(summary["median_abs_error"], summary["within_25"])
    text = ("Over all rows, leaving one regime out meets both goals." if not m
            else f"Over all rows, leaving one regime out misses {' and '.join(m)}.")
    if worst is not None:
        mw = missed(worst["oos_median"], worst["oos_within_25"])
        text += (f" {worst['label']} alone meets them too." if not mw
                 else f" {worst['label']} alone misses {' and '.join(mw)}: its numbers carry the wider error.")
    return text


def empty_regimes_text(regimes: Sequence[dict[str, Any]]) -> str:
    """One sentence naming the regimes without any published run with a measurement (or saying
    that every regime has one)."""
    empty = [r["regime"] for r in regimes if r["empty"]]
    if not empty:
        return "Every regime has at least one published run with a measurement."
    names = empty[0] if len(empty) == 1 else ", ".join(empty[:-1]) + " and " + empty[-1]
    one = len(empty) == 1
    return (f"The {names} {'regime has' if one else 'regimes have'} {NO_REGIME_RUN}: "
            f"{'its' if one else 'their'} error is not measured.")


def stack_label(row: dict[str, Any]) -> str:
    """Training stack of a runs-table row: PyTorch FSDP2 where its ``stack`` is fsdp (TorchTitan,
    llm-foundry, NeMo AutoModel), Megatron-FSDP (ZeRO-3) where ``zero_stage`` is 3, else Megatron-Core
    with the distributed optimizer (MLPerf NeMo submissions, Megatron-Bridge, the Megatron papers)."""
    if runs.row_stack(row) == "fsdp":
        return "PyTorch FSDP2 (TorchTitan, llm-foundry, NeMo AutoModel)"
    return "Megatron-FSDP (ZeRO-3)" if row.get("zero_stage") == 3 else "Megatron-Core, distributed optimizer"


def stack_rows(cv: dict[str, Any], rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per training stack (:func:`stack_label`): rows, median signed and absolute error in sample and
    leaving one model family out."""
    stack = {str(r.get("run_id", "")): stack_label(r) for r in rows}
    out = []
    for label in dict.fromkeys(stack.values()):
        ins = [r["error"] for r in cv["tables"]["in_sample"] if stack.get(r["run_id"]) == label]
        fam = [r["error"] for r in cv["tables"]["family"] if stack.get(r["run_id"]) == label]
        out.append({"stack": label, "rows": len(ins), "in_sample_signed": float(np.median(ins)),
                    "in_sample_abs": float(np.median(np.abs(ins))), "family_signed": float(np.median(fam)),
                    "family_abs": float(np.median(np.abs(fam)))})
    return out


def cv_rows(runs: Sequence[dict[str, Any]], cv: dict[str, Any]) -> list[dict[str, Any]]:
    """Per run: in-sample error and the error under every cross-validation scheme."""
    by = {k: {r["run_id"]: r for r in cv["tables"][k]} for k in CV_SCHEMES if k != "in_sample"}
    out = []
    for r in runs:
        if r["error"] is None:
            continue
        rec = {"n": r["n"], "run_id": r["run_id"], "label": r["label"], "group": r["group"],
               "hardware": r["hardware"], "error": r["error"]}
        for k, t in by.items():
            rec[f"{k}_error"] = t[r["run_id"]]["error"] if r["run_id"] in t else None
        rec["prior"] = ", ".join(sorted({t[r["run_id"]]["prior"] for t in by.values()
                                         if r["run_id"] in t and t[r["run_id"]]["prior"]}))
        out.append(rec)
    return out


# =========================================================================================
# Coverage: the categories of runs the table has none of (issue 12), and what the model predicts
# =========================================================================================
#: Layouts of the categories the runs table lacks (runs-table schema, no measurement): Megatron-Bridge
#: benchmark and long-context training recipes as ``data/bridge_recipes.csv`` states them, and paper layouts.
PROBES_CSV = DATA_DIR / "coverage_probes.csv"
#: ``layout_source`` values of the probes, in the order the chapter names them.
PROBE_SOURCES: tuple[str, ...] = ("benchmark recipe", "training recipe", "paper", "representative")


def _row_gpu_family(row: dict[str, Any]) -> str:
    return hardware.get(str(row["hardware"]).strip()).family


#: Category -> (label, criterion text, predicate on a runs-table row): the issue-12 categories of
#: independent published runs on which the model was found off, in the order the chapter lists them.
#: A fine-grained MoE is the regime's (``runs.row_regime``, ``runs.REGIME_CRITERIA``): one definition.
COVERAGE: dict[str, tuple[str, str, Any]] = {
    "fine_moe": ("Fine-grained MoE", runs.REGIME_CRITERIA["fine-grained MoE"],
                 lambda r: runs.row_regime(r) == "fine-grained MoE"),
    "long_context": ("Long context", "sequence ≥ 32,768 tokens", lambda r: int(r["seq_len"]) >= 32768),
    "small_dense_dp": ("Small dense model at large data parallelism",
                       f"dense, ≤ {runs.SMALL_DENSE_PARAMS_B:g} B parameters, ≥ 256 data-parallel ranks",
                       lambda r: not (r.get("moe_experts") or 0)
                       and float(r.get("total_params_b") or 1e9) <= runs.SMALL_DENSE_PARAMS_B
                       and int(r["gpu_count"]) // (int(r["tp"]) * int(r["pp"])) >= 256),
    "blackwell_ultra": ("Blackwell Ultra", "a B300 or GB300 row", lambda r: _row_gpu_family(r) == "blackwell_ultra"),
    "production": ("Runs at production scale", "≥ 2,048 GPUs", lambda r: int(r["gpu_count"]) >= 2048),
}


#: Probe category -> label: the :data:`COVERAGE` categories, ``production_moe`` (NVIDIA's benchmark
#: recipes for the headline MoE models, :data:`PRODUCTION_MOE_CSV`) and ``memory_fit`` (a published
#: layout the memory model once failed to fit, issue 29: Mixtral 8x7B TP8 PP2 on 32 H100).
PROBE_LABELS: dict[str, str] = {**{k: v[0] for k, v in COVERAGE.items()}, "production_moe": "Production MoE recipe",
                                "memory_fit": "Memory-fit check"}


def measured_gpus_max(paths: Sequence[Path | str] = (runs.RUNS_CSV, runs.HELDOUT_CSV)) -> int:
    """The most GPUs of any measured run the model is checked on, calibration (``runs.RUNS_CSV``)
    and held-out (:data:`HELDOUT_CSV`) alike: where its validated range of cluster sizes ends."""
    return max(int(r["gpu_count"]) for p in paths for r in runs.read_runs(p))


def coverage_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per :data:`COVERAGE` category: how many rows of the runs table ``rows`` fall in it, and the
    sources of those rows (MLPerf Training, Megatron-Bridge, Megatron papers)."""
    out = []
    for key, (name, criterion, pred) in COVERAGE.items():
        hit = [r for r in rows if pred(r)]
        kinds = sorted({SOURCE_SHORT[source_kind(r)] for r in hit})
        out.append({"category": key, "label": name, "criterion": criterion, "rows": len(hit),
                    "sources": ", ".join(kinds) if kinds else "–"})
    return out


def probe_rows(path: Path | str = PROBES_CSV) -> list[dict[str, Any]]:
    """Predictions for the layouts of ``path`` (:data:`PROBES_CSV`): each row planned as a runs-table
    row (``runplan.plan_row``: the recompute a recipe states, else the least that fits), its tokens/s per
    GPU, model TFLOP/s, MFU, the step-time shares and whether it fits; ``recipe`` and ``source`` (the
    row's ``layout_source``: :data:`PROBE_SOURCES`); ``reported_tflops`` where the source of the
    layout reports a throughput (not converted: its FLOP count may differ). A projection."""
    rows = runs.read_runs(path)
    plans = [runplan.plan_row(r) for r in rows]
    st = perf.evaluate(runplan.step_inputs(plans))
    out = []
    for i, (r, pl) in enumerate(zip(rows, plans)):
        step = float(st.step_s[i])
        cap = memory.capacity_gib(pl.gpu)
        out.append({"run_id": r["run_id"], "category": r["category"], "label": PROBE_LABELS[r["category"]],
                    "model": r["model"], "gpu_label": hardware.get(r["hardware"]).label, "gpus": int(pl.layout.gpus),
                    "layout": label(pl.layout, recompute=False), "precision": str(r["precision"]).upper(),
                    "seq_len": int(r["seq_len"]), "recompute": pl.recompute_label,
                    "memory_gib": pl.memory_gib, "capacity_gib": cap, "fits": pl.memory_gib <= cap,
                    "tokens_per_s_per_gpu": float(st.tokens_per_s_per_gpu[i]),
                    "model_tflops_per_gpu": float(st.model_tflops_per_gpu[i]), "mfu": float(st.mfu[i]),
                    "reported_tflops": r.get("measured_model_tflops_per_gpu"), "cp": int(pl.layout.cp),
                    "vp": int(pl.layout.vp), "layers": int(r["layers"]),
                    "recompute_num_layers": r.get("recompute_num_layers"), "recipe": str(r.get("recipe") or ""),
                    "source": str(r.get("layout_source") or ""), "version": str(r.get("megatron_bridge_version") or ""),
                    **{f"{k}_share": float(getattr(st, k)[i]) / step for k in COMPONENTS}})
    return out


#: What the notes of a runs-table row say when it took a Megatron-Bridge recipe's settings.
RECIPE_NOTE = "recipe as of megatron-bridge 0.6.2, layout identical"


def recipe_matched(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Run ids of the rows whose layout is a 0.6.2 benchmark recipe's and that took its settings
    (their notes carry :data:`RECIPE_NOTE`)."""
    return [str(r["run_id"]) for r in rows if RECIPE_NOTE in str(r.get("notes", ""))]


def probe_sources(probes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """How many probes come from each :data:`PROBE_SOURCES` kind, and the Megatron-Bridge version(s)
    of the recipe ones ("0.6.2"; several joined with ", ")."""
    out: dict[str, Any] = {k: sum(p["source"] == k for p in probes) for k in PROBE_SOURCES}
    out["total"] = len(probes)
    out["version"] = ", ".join(sorted({p["version"] for p in probes if p["recipe"]}))
    return out


def probe_fit_text(probes: Sequence[dict[str, Any]]) -> str:
    """Whether the memory model fits every probe, as a clause ("every one of them fits ..." or the
    layouts that do not)."""
    bad = [p for p in probes if not p["fits"]]
    if not bad:
        return ("every one of them fits in the memory model, the recipes with the recompute they state and "
                "the other layouts with the least that fits")
    names = "; ".join(f"{p['model']} on {p['gpus']:,} {p['gpu_label']} ({p['memory_gib']:.1f} of "
                      f"{p['capacity_gib']:.1f} GiB)" for p in bad)
    return (f"{len(bad)} of them do not fit in the memory model although their source runs them: {names}; "
            "the memory model is pessimistic there")


# =========================================================================================
# Held-out runs (issue 12): published runs the calibration never sees
# =========================================================================================
#: Published training runs outside the calibration table (runs-table schema, with their
#: measurement): production pre-training with other stacks (Meta's, DeepSeek's HAI-LLM) on 2,048
#: to 16,384 GPUs, up to 131k tokens, and the rest of Megatron's 2021 weak-scaling series (1.7B to
#: 530B on A100). Read by :func:`heldout_rows`; ``scaletax predict --runs data/heldout_runs.csv``
#: gives the same predictions and errors.
HELDOUT_CSV = runs.HELDOUT_CSV


def heldout_rows(path: Path | str = HELDOUT_CSV, band: efficiency.EfficiencyBand | None = None) -> list[dict[str, Any]]:
    """Each row of ``path`` (:data:`HELDOUT_CSV`) planned and predicted with the calibrated band
    (``validate.heldout_predictions``; ``validate.heldout_errors`` gives the same errors): measured and predicted tokens/s per GPU (the
    measurement converted as ``runs.measured_tokens_per_s`` says, ``basis``), the band, the error
    (predicted / measured - 1), whether the band holds the measurement, memory per GPU and the
    layout with what was assumed for it. Out of sample by construction: no row is in the table.
    ``error_dp_unhidden``: a what-if, not a model the book uses: the error with no data-parallel
    communication hidden under compute (``comm.Overlap`` dp = 0, the other fractions as
    calibrated), gradients reduced after the backward pass as Megatron-LM did before
    ``overlap_grad_reduce``."""
    rows, plan, pred = validate.heldout_predictions(path, band)
    inp = plan.step_inputs()
    eff = (band or efficiency.default_band()).value
    unhidden = perf.evaluate(inp, eff, overlap=eff.overlap(comm.Overlap(dp=0.0))).tokens_per_s_per_gpu
    gib = plan.memory_gib()["total"]
    words = plan.recompute_labels()
    lays = plan.layouts()
    out = []
    for i, r in enumerate(rows):
        measured = plan.measured[i]
        p = float(pred.value.tokens_per_s_per_gpu[i])
        lo, hi = float(pred.low.tokens_per_s_per_gpu[i]), float(pred.high.tokens_per_s_per_gpu[i])
        out.append({"run_id": r["run_id"], "model": r["model"], "gpu_label": hardware.get(r["hardware"]).label,
                    "gpus": int(r["gpu_count"]), "layout": label(lays.layout(i), recompute=False), "recompute": words[i],
                    "assumptions": "; ".join(plan.assumptions[i]), "precision": str(r["precision"]).upper(),
                    "seq_len": int(r["seq_len"]), "source": source_md(r["source_url"]), "regime": runs.row_regime(r),
                    "measured": measured, "basis": plan.basis[i], "predicted": p, "low": lo, "high": hi,
                    "error": p / measured - 1.0, "in_band": lo <= measured <= hi,
                    "error_dp_unhidden": float(unhidden[i]) / measured - 1.0,
                    "memory_gib": float(gib[i]), "capacity_gib": memory.capacity_gib(runs.row_gpu(r)),
                    "fits": float(gib[i]) <= memory.capacity_gib(runs.row_gpu(r))})
    return out


#: Run-id prefix of the held-out rows of Megatron's 2021 weak-scaling series (Narayanan et al.
#: 2021, Table 1; its 1T row is the calibration row ``narayanan2021-1T``); the others are
#: production pre-training runs of other stacks.
SCALING_SERIES_PREFIX = "narayanan2021-"


def heldout_group(run_id: str) -> str:
    """"scaling series" (Megatron 2021 weak scaling, :data:`SCALING_SERIES_PREFIX`) or "production"."""
    return "scaling series" if str(run_id).startswith(SCALING_SERIES_PREFIX) else "production"


def heldout_summary(held: Sequence[dict[str, Any]], group: str | None = None) -> dict[str, Any]:
    """Median absolute error, the largest, the share within 25% and the share the band holds,
    over :func:`heldout_rows` (only those of :func:`heldout_group` ``group`` when given)."""
    held = [h for h in held if group is None or heldout_group(h["run_id"]) == group]
    err = np.abs([h["error"] for h in held])
    return {"n": len(held), "median_abs_error": float(np.median(err)), "max_abs_error": float(err.max()),
            "within_25": float(np.mean(err <= 0.25)), "in_band": float(np.mean([h["in_band"] for h in held]))}


# =========================================================================================
# The search against NVIDIA's own layouts (issue 12): Kimi K2 and DeepSeek-V3 benchmark recipes
# =========================================================================================
#: Megatron-Bridge 0.6.2 benchmark recipes of Kimi K2 and DeepSeek-V3 (BF16, one per GPU), as runs-table
#: rows (category ``production_moe``), read by :func:`probe_rows`.
PRODUCTION_MOE_CSV = DATA_DIR / "production_moe_recipes.csv"


#: Megatron-Bridge's recipes as extracted (``data/bridge_recipes.csv``): the flex dispatcher backend a
#: recipe names beside the dispatcher it states (:func:`recipe_search_rows` ``flex_backend``).
BRIDGE_RECIPES_CSV = DATA_DIR / "bridge_recipes.csv"


def flex_backends(path: Path | str = BRIDGE_RECIPES_CSV) -> dict[str, str]:
    """Recipe name -> the flex dispatcher backend it names ("deepep", "hybridep"; "" for none)."""
    with open(path, newline="", encoding="utf-8") as fh:
        return {r["recipe"]: (r.get("moe_flex_dispatcher_backend") or "").strip().lower() for r in csv.DictReader(fh)}


def recipe_search_rows(path: Path | str = PRODUCTION_MOE_CSV) -> list[dict[str, Any]]:
    """Per benchmark recipe of ``path``: (a) the prediction for the recipe's own layout with its stated
    recompute modules, dispatcher and schedule (:func:`probe_rows`, ``recipe_tps``); (a') the same
    layout as the search models it (``plan.fastest`` on a space holding only that layout:
    the search's selective recompute, MoE dispatch and schedule; ``recipe_search_tps``, None if it
    does not fit there); (b) the search's fastest layout for the same model, GPU, GPU count, global
    batch and precision (``search_tps``, its label and MFU), and ``ratio`` = (b)/(a) and
    ``layout_ratio`` = (b)/(a'). ``in_space``: the recipe's layout is one the default search
    enumerates, so (b) >= (a') by construction. (c) Like for like with the recipe's software: the
    search run with the recipe's MoE dispatcher and schedule (``SearchSpace.ep_dispatch`` /
    ``schedule``, :func:`runs.row_dispatch` / :func:`runs.row_schedule`), its fastest layout
    (``software_layout``, ``software_tps``, its expert-parallel span in NVLink domains
    ``software_ep_domains``) against the recipe's layout timed the same way (``software_own_tps``):
    ``software_ratio``. (d) The flex reading: a recipe that states the alltoall dispatcher but names a
    flex backend (``flex_backend``, :func:`flex_backends`) runs the flex one (DeepEP-class dispatch)
    when Megatron-Bridge 0.6's ``scripts/performance/run_recipe.py`` launches it
    (``utils.finalize_config_overrides`` sets ``moe_token_dispatcher_type = "flex"`` whenever a
    backend is named) and alltoall when ``run_script.py`` does: ``flex_ratio``, (c) with "dedup"
    dispatch and the recipe's schedule (None where the recipe states flex or names no backend).
    Tokens/s per GPU. A projection."""
    rows = runs.read_runs(path)
    backends = flex_backends()
    out = []
    for r, p in zip(rows, probe_rows(path)):
        model = runs.row_model(r)
        lay = runplan.plan_row(r).layout
        prec, gpu, gpus, gbs = runs.row_recipe(r), runs.row_gpu(r), int(lay.gpus), int(lay.gbs)
        domain = int(gpu.nvlink_domain)

        def pair(**software):
            """(the search's fastest, the recipe's layout) timed with ``software``; each None where nothing fits."""
            best = planning.fastest(model, gpu, prec, gpus, gbs=gbs, space=search.SearchSpace(**software))
            own = planning.fastest(model, gpu, prec, gpus, gbs=gbs, space=search.only(lay).with_(**software))
            return best if best.fits else None, own if own.fits else None

        def tps(res):
            return None if res is None else float(res.metrics["tokens_per_s_per_gpu"])

        def ratio(x, y):
            return x / y if x is not None and y else None

        best, own = pair()
        soft = {"ep_dispatch": runs.row_dispatch(r), "schedule": runs.row_schedule(r)}
        sw, sw_own = pair(**soft)
        backend = backends.get(str(r.get("recipe") or ""), "")
        fl, fl_own = (pair(**{**soft, "ep_dispatch": "dedup"})
                      if soft["ep_dispatch"] == "alltoall" and backend in ("deepep", "hybridep") else (None, None))
        b, a_s, a, c, c_own = tps(best), tps(own), p["tokens_per_s_per_gpu"], tps(sw), tps(sw_own)
        out.append({**{k: p[k] for k in ("run_id", "recipe", "model", "gpu_label", "gpus", "layout", "precision",
                                         "recompute", "fits", "mfu")},
                    "gbs": gbs, "recipe_tps": a, "recipe_search_tps": a_s,
                    "in_space": search.in_space(lay, model, planning.validated_space(model), domain),
                    "recipe_tpe": float(search.tokens_per_expert(model, lay)),
                    "recipe_lps": float(search.layers_per_chunk(model, lay)),
                    "search_layout": label(best.best, model, recompute=False) if best else "–",
                    "search_recompute": str(best.best.recompute) if best else "–",
                    "search_tps": b, "search_mfu": float(best.metrics["mfu"]) if best else None,
                    "search_ep_domains": ep_domains(best.best, domain) if best else None,
                    "recipe_remote_domains": remote_domains(model, ep_domains(lay, domain)),
                    "search_remote_domains": remote_domains(model, ep_domains(best.best, domain)) if best else None,
                    "ratio": b / a if b is not None and a > 0 else None,
                    "layout_ratio": ratio(b, a_s),
                    "dispatcher": soft["ep_dispatch"], "schedule": soft["schedule"],
                    "software_layout": label(sw.best, model, recompute=False) if sw else "–",
                    "domain": domain, "recipe_ep_domains": ep_domains(lay, domain),
                    "software_ep_domains": ep_domains(sw.best, domain) if sw else None,
                    "software_tps": c, "software_own_tps": c_own, "software_ratio": ratio(c, c_own),
                    "flex_backend": backend,
                    "flex_layout": label(fl.best, model, recompute=False) if fl else None,
                    "flex_ep_domains": ep_domains(fl.best, domain) if fl else None,
                    "flex_ratio": ratio(tps(fl), tps(fl_own))})
    return out


def ep_domains(lay, domain: int) -> float:
    """NVLink domains a layout's expert-parallel group spans, ep x etp / domain (at least 1)."""
    return max(1.0, float(lay.ep * lay.etp) / int(domain))


def remote_domains(model, domains: float) -> float:
    """Other NVLink domains a token's routed experts reach when the expert-parallel group spans
    ``domains`` of them, expected under uniform routing (``perf.distinct_groups`` x (D - 1) / D):
    the copies of it a DeepEP-class dispatch sends over the NIC."""
    d = float(domains)
    return float(perf.distinct_groups(model.moe_experts, model.moe_top_k, d)) * (d - 1.0) / d if d > 1 else 0.0


def moe_span() -> dict[str, float]:
    """What the measured MoE runs (every published run with a measurement) span: tokens per local
    expert per micro-batch (``tpe_min``, ``tpe_max``) and transformer layers per pipeline chunk
    (``lps_min``, ``lps_max``, layers / (pp vp)): ``runplan.moe_envelope``, whose minima are the
    floors of every search the book runs (``plan.validated_space``)."""
    env = runplan.moe_envelope()
    return {k: env[k] for k in ("tpe_min", "tpe_max", "lps_min", "lps_max")}


def cp_span() -> dict[str, float]:
    """What the measured runs with context parallelism span: tokens per rank per micro-batch
    (``tokens_min``, ``tokens_max``) and the number of runs: ``runplan.cp_envelope``, whose minimum is
    the context-parallel floor of every search the book runs (``plan.validated_space``)."""
    return dict(runplan.cp_envelope())


#: Expert parallelism over at most this many NVLink domains counts as "few domains" in
#: :func:`ep_span_bias` (the search's H100 MoE layouts: 16-way over two 8-GPU nodes).
EP_FEW_DOMAINS = 2


def ep_span_bias(acc: validate.RunAccuracy) -> dict[str, dict[str, float]]:
    """How the model errs on the measured MoE runs of 8-GPU NVLink domains (HGX H100, H800, B200,
    B300) by how many domains their expert-parallel group spans, ep x etp / domain: ``few`` (at most
    :data:`EP_FEW_DOMAINS`) and ``many``. Per group: runs, median signed error out of sample (a
    calibration without the run's source; positive: predicted too fast), the largest, and the most
    domains any run of the group spans (``span_max``)."""
    rows, _ = validate.published_runs()
    errs = {r["run_id"]: r["oos_error"] for r in acc.select()}
    out: dict[str, list[float]] = {"few": [], "many": []}
    spans: dict[str, list[float]] = {"few": [], "many": []}
    for r in rows:
        if r["run_id"] not in errs or not r.get("moe_experts"):
            continue
        p = runplan.plan_row(r)
        domain = int(p.gpu.nvlink_domain)
        if domain != 8:
            continue
        span = ep_domains(p.layout, domain)
        key = "few" if span <= EP_FEW_DOMAINS else "many"
        out[key].append(float(errs[r["run_id"]]))
        spans[key].append(span)
    return {k: {"runs": float(len(v)), "median": float(np.median(v)) if v else float("nan"),
                "max": float(max(v)) if v else float("nan"),
                "span_max": float(max(spans[k])) if v else float("nan")} for k, v in out.items()}


def span_text(group: dict[str, float]) -> str:
    """How far the runs of one :func:`ep_span_bias` group spread their experts, in words."""
    m = group["span_max"]
    if math.isnan(m):
        return "no run"
    return "every one of them inside one node" if m <= 1 else f"the widest over {m:.0f} nodes"


def span_adjusted_ratio(row: dict[str, Any], bias: dict[str, dict[str, float]], reading: str = "software") -> float | None:
    """A :func:`recipe_search_rows` row's like-for-like ratio (``reading`` "software": as the recipe
    states its dispatcher; "flex": the flex reading) with each layout's measured optimism taken off:
    ratio x (1 + b_recipe) / (1 + b_search), b the median out-of-sample signed error
    (:func:`ep_span_bias`) of the MoE runs whose expert parallelism spans as many 8-GPU domains as
    that layout's ("few": at most :data:`EP_FEW_DOMAINS`, else "many"). None off 8-GPU domains (no
    such measurement) or without a ratio."""
    ratio, span = row.get(f"{reading}_ratio"), row.get(f"{reading}_ep_domains")
    if ratio is None or int(row["domain"]) != 8:
        return None

    def b(x: float) -> float:
        return float(bias["few" if x <= EP_FEW_DOMAINS else "many"]["median"])

    return float(ratio) * (1.0 + b(row["recipe_ep_domains"])) / (1.0 + b(span))


def over_under_both_readings(rows: Sequence[dict[str, Any]], bias: dict[str, dict[str, float]],
                             limit: float = 1.3) -> list[dict[str, Any]]:
    """The :func:`recipe_search_rows` rows whose search is over ``limit`` times the recipe's layout
    under the stated dispatcher and, where there is one, under the flex reading too, each ratio with
    the measured span optimism taken off where it is measured (:func:`span_adjusted_ratio`)."""
    def over(r, reading):
        x = span_adjusted_ratio(r, bias, reading)
        x = r[f"{reading}_ratio"] if x is None else x
        return x is not None and x > limit

    return [r for r in rows if over(r, "software") and (r["flex_ratio"] is None or over(r, "flex"))]


def bias_adjusted_text(rows: Sequence[dict[str, Any]], bias: dict[str, dict[str, float]], reading: str = "software") -> str:
    """The :func:`span_adjusted_ratio` of each row as text ("Kimi-K2 on 1,024 H100 SXM: 1.47 ...")."""
    parts = []
    for r in rows:
        x = span_adjusted_ratio(r, bias, reading)
        if x is None:
            parts.append(f"{r['model']} on {r['gpus']:,} {r['gpu_label']}: no measured span bias")
            continue
        same = (r["recipe_ep_domains"] <= EP_FEW_DOMAINS) == (r[f"{reading}_ep_domains"] <= EP_FEW_DOMAINS)
        note = " (both layouts in the same span, so nothing to take off)" if same else ""
        parts.append(f"{r['model']} on {r['gpus']:,} {r['gpu_label']}: {x:.2f}{note}")
    return "; ".join(parts) if parts else "nothing"


# =========================================================================================
# Parameters, breakdown, MFU
# =========================================================================================
#: Local experts per GPU from which :func:`local_expert_runs` lists a run (8-way expert parallelism
#: of a 128-expert model inside one node leaves 16).
MANY_LOCAL_EXPERTS = 8


def local_expert_runs(acc: validate.RunAccuracy, least: int = MANY_LOCAL_EXPERTS) -> list[dict[str, Any]]:
    """The measured MoE runs whose routed experts run one GEMM call each (``perf.expert_call_layers``:
    Megatron-Core's Transformer Engine experts) with at least ``least`` local experts, most first: run id,
    model, GPU label, GPUs, local experts, GEMM calls more than one grouped kernel per MoE layer pass
    (forward and backward), and the error in sample and out of sample (positive: predicted too fast)."""
    rows, _ = validate.published_runs()
    errs = {r["run_id"]: r for r in acc.select()}
    out = []
    for r in rows:
        a = errs.get(r["run_id"])
        if a is None or not r.get("moe_experts"):
            continue
        p = runplan.plan_row(r)
        local = p.model.moe_experts / int(p.layout.ep)
        extra = float(perf.expert_call_layers(p.model, int(p.layout.ep), runs.row_stack(r),
                                             runs.row_expert_gemm(r))) * perf.LAYER_GEMM_CALLS
        if extra <= 0 or local < least:
            continue
        out.append({"run_id": r["run_id"], "model": model_short(a["model"]), "gpu": p.gpu.label, "gpus": a["gpus"],
                    "local": int(local), "extra_calls": int(round(extra)), "error": a["error"],
                    "oos_error": a["oos_error"]})
    return sorted(out, key=lambda x: (-x["local"], x["run_id"]))


def local_expert_text(items: Sequence[dict[str, Any]]) -> str:
    """:func:`local_expert_runs` as one clause per run: model on GPUs (local experts, extra calls): error in
    sample (out of sample)."""
    return "; ".join(f"{i['model']} on {i['gpus']} {i['gpu']} ({i['local']} local experts, {i['extra_calls']} "
                     f"calls more per layer pass): {spct(i['error'])} ({spct(i['oos_error'])} out of sample)"
                     for i in items)


def parameter_rows(band: efficiency.EfficiencyBand | None = None) -> list[dict[str, Any]]:
    """The parameters of ``data/efficiency.yaml`` in file order: value, range, kind, source."""
    band = efficiency.default_band() if band is None else band
    out = []
    for name, e in band.meta["parameters"].items():
        out.append({"parameter": name, "value": float(e["value"]),
                    "low": float(e["low"]), "high": float(e["high"]), "kind": str(e.get("kind", "")),
                    "range_text": f"{float(e['low']):.3f} – {float(e['high']):.3f}", "source": str(e["source"])})
    return out


def representative(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One run per (group, GPU family): the one with the most GPUs (first in table order on ties)."""
    best: dict[tuple[str, str], dict] = {}
    for r in runs:
        key = (r["group"], r["family"])
        if key not in best or r["gpus"] > best[key]["gpus"]:
            best[key] = r
    return sorted(best.values(), key=lambda r: r["n"])


def breakdown_rows(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Long rows (run x component) of step-time shares for a stacked bar."""
    out = []
    for r in runs:
        for order, (k, name) in enumerate(COMPONENTS.items()):
            out.append({"label": r["label"], "n": r["n"], "component": name, "order": order,
                        "share": r[f"{k}_share"], "seconds": r[f"{k}_share"] * r["step_s"], "step_s": r["step_s"]})
    return out


def mfu_rows(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Measured MFU per row (``plan.mfu`` of the measured tokens/s, as every chapter states a run's
    MFU; :func:`mfu_by_precision` per row) and the model's."""
    out = []
    for r in runs:
        if r["measured"] is None:
            continue
        out.append({"label": r["label"], "n": r["n"], "hardware": r["hardware"], "hw_label": r["hw_label"],
                    "family": r["family"], "precision": r["precision"], "arch": r["arch"],
                    "mfu": r["mfu_measured"], "mfu_pred": r["mfu_pred"]})
    return out


# =========================================================================================
# The H200 single-GEMM measurement beside the model's ceilings
# =========================================================================================
def gemm_points(path: Path | str = calibrate.GEMM_CSV, gpu: str = "h200_sxm", min_m: int = 1024,
                band: efficiency.EfficiencyBand | None = None) -> list[dict[str, Any]]:
    """Every GEMM of the measurement that the fit uses (m >= ``min_m``; squares from 2048), all three
    dtypes: achieved fraction of the dense peak, the single-GEMM fit's rule at that shape, and the
    step-time model's rule (calibrated ceiling of the format class, Hopper basis) at that shape.

    The single-GEMM ceiling of each dtype is the geometric mean of ``frac x (1 + k n_ref / n)`` with
    the fit's ``k`` (``calibrate.fit_gemm_measurements``): for BF16 and FP8 it equals that fit; the
    fast-accumulation rows, which the fit leaves out, get theirs the same way.
    """
    band = efficiency.default_band() if band is None else band
    g = hardware.get(gpu)
    fit = calibrate.fit_gemm_measurements(path, min_m=min_m, gpu=gpu)
    with Path(path).open(encoding="utf-8", newline="") as fh:
        raw = [r for r in csv.DictReader(fh) if r["dtype"] in GEMM_DTYPES]
    m, n, k = (np.array([float(r[c]) for r in raw]) for c in ("m", "n", "k"))
    keep = (m >= min_m) & ~((np.array([r["label"] for r in raw]) == "square") & (m < 2048))
    dt = np.array([r["dtype"] for r in raw])
    prec = np.array([GEMM_DTYPES[d][0] for d in dt])
    peak = np.array([g.peak_flops(p) for p in prec])
    frac = np.array([float(r["tflops"]) for r in raw]) * 1e12 / peak
    n_hm = 3.0 / (1.0 / m + 1.0 / n + 1.0 / k)
    recs = [recipes.training(p) for p in prec]
    n_ref = np.array([perf.gemm_reference_size(g, r) for r in recs])
    kr = fit["gemm_roofline"]
    implied = frac * (1.0 + kr * n_ref / n_hm)
    single = {d: float(np.exp(np.mean(np.log(implied[keep & (dt == d)])))) for d in GEMM_DTYPES}
    eff = band.value
    model_ceiling = np.array([eff.ceiling(r, g.family) for r in recs])
    model_frac = model_ceiling / (1.0 + eff.gemm_roofline * n_ref / n_hm)
    single_frac = np.array([single[d] for d in dt]) / (1.0 + kr * n_ref / n_hm)
    out = []
    for i in np.flatnonzero(keep):
        out.append({"label": raw[i]["label"], "dtype": dt[i], "dtype_label": GEMM_DTYPES[dt[i]][1],
                    "m": int(m[i]), "n": int(n[i]), "k": int(k[i]), "n_hm": float(n_hm[i]),
                    "frac": float(frac[i]), "single_fit_frac": float(single_frac[i]),
                    "single_ceiling": single[dt[i]], "model_frac": float(model_frac[i]),
                    "model_ceiling": float(model_ceiling[i]), "format_class": recs[i].format_class})
    return out


def gemm_summary(points: Sequence[dict[str, Any]], band: efficiency.EfficiencyBand | None = None) -> list[dict[str, Any]]:
    """Per dtype: how many shapes, median / quartiles / best achieved fraction of the dense peak,
    the single-GEMM fitted ceiling, and the model's ceiling for the format class with its range."""
    band = efficiency.default_band() if band is None else band
    params = {p["parameter"]: p for p in parameter_rows(band)}
    out = []
    for d, (prec, label) in GEMM_DTYPES.items():
        pts = [p for p in points if p["dtype"] == d]
        if not pts:
            continue
        f = np.array([p["frac"] for p in pts])
        q1, med, q3 = (float(x) for x in np.percentile(f, [25, 50, 75]))
        par = params[f"gemm_ceiling_{recipes.training(prec).format_class}"]
        model_med = float(np.median([p["model_frac"] for p in pts]))
        out.append({"dtype": d, "dtype_label": label, "shapes": len(pts), "median": med, "q1": q1, "q3": q3,
                    "best": float(f.max()), "achieved_text": f"{med:.2f} ({q1:.2f}–{q3:.2f}; best {f.max():.2f})",
                    "single_ceiling": pts[0]["single_ceiling"], "model_ceiling": par["value"],
                    "model_low": par["low"], "model_high": par["high"], "model_kind": par["kind"],
                    "model_text": f"{par['value']:.3f} [{par['low']:.3f}, {par['high']:.3f}] ({par['kind']})",
                    "model_median_frac": model_med, "model_over_measured": par["value"] / pts[0]["single_ceiling"]})
    return out


def gemm_curves(summary: Sequence[dict[str, Any]], points: Sequence[dict[str, Any]], gpu: str = "h200_sxm",
                band: efficiency.EfficiencyBand | None = None, num: int = 60) -> list[dict[str, Any]]:
    """Lines for the GEMM chart: fraction of the dense peak against the GEMM size n for the model's
    16- and 8-bit ceilings and the single-GEMM FP8 fits, ``ceiling / (1 + k n_ref / n)``
    (the model's ``k`` for the model, the measurement fit's ``k`` for the fits)."""
    band = efficiency.default_band() if band is None else band
    g = hardware.get(gpu)
    n_hm = np.array([p["n_hm"] for p in points])
    grid = np.geomspace(n_hm.min(), n_hm.max(), num)
    k_fit = calibrate.fit_gemm_measurements(gpu=gpu)["gemm_roofline"]
    by = {s["dtype"]: s for s in summary}
    bf16, fp8 = recipes.training("bf16"), recipes.training("fp8")
    lines = [("model: 16-bit ceiling (measured)", band.value.ceiling(bf16, g.family), band.value.gemm_roofline, bf16),
             ("model: 8-bit ceiling (calibrated on runs)", band.value.ceiling(fp8, g.family),
              band.value.gemm_roofline, fp8)]
    for d in ("fp8_e4m3", "fp8_e4m3_fastaccum"):
        if d in by:
            lines.append((f"single-GEMM fit: {by[d]['dtype_label']}", by[d]["single_ceiling"], k_fit, fp8))
    out = []
    for name, ceil, kr, prec in lines:
        y = ceil / (1.0 + kr * perf.gemm_reference_size(g, prec) / grid)
        out += [{"curve": name, "n_hm": float(a), "frac": float(b)} for a, b in zip(grid, y)]
    return out


def claim_rows(b200: dict[str, Any], gb300: dict[str, Any]) -> list[dict[str, Any]]:
    """The two generation claims side by side: measured ratio (or why none), model, dense peak."""
    return [
        {"claim": "B200 / H100 per GPU, MLPerf GPT-3 175B, FP8",
         "measured": b200["measured_ratio"] if b200.get("available") else None,
         "predicted": b200.get("predicted_ratio"), "peak": b200.get("peak_ratio"),
         "rows": f"{len(b200.get('b200_rows', []))} B200 row vs median of {len(b200.get('h100_rows', []))} H100 rows (≤ 512 GPUs)"
         if b200.get("available") else b200.get("reason", "")},
        {"claim": "GB300 / GB200 per GPU, same model, precision and GPU count (median of the pairs)",
         "measured": gb300.get("measured_ratio"), "predicted": gb300.get("predicted_ratio"),
         "peak": None,
         "rows": f"{gb300['pairs']} pairs of fitted runs" if gb300["available"] else "no pair of GB300 and GB200 runs"},
        {"claim": "GB300 / GB200 per GPU, Llama 3.1 405B, NVFP4, one layout (projection)",
         "measured": None, "predicted": gb300["predicted_ratio_nvfp4_llama405b"], "peak": gb300["peak_ratio_fp4"],
         "rows": "model only"},
    ]


def copy_fraction(path: Path | str = calibrate.GEMM_CSV, gpu: str = "h200_sxm") -> float:
    """The measured device copy (read + write bytes per second) over the GPU's HBM bandwidth."""
    with Path(path).open(encoding="utf-8", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["label"].startswith("device copy")]
    if not rows:
        raise ValueError(f"{path}: no device copy row")
    return float(rows[0]["tflops"]) * 1e12 / hardware.get(gpu).hbm_bw


def pinned_fit(prepared, pins: dict[str, float]) -> dict[str, Any]:
    """``calibrate.calibrate`` with ``pins`` held at the given values (``fixed``), and the errors."""
    cal = calibrate.calibrate(prepared=prepared, fixed=pins)
    params = {k: float(v) for k, v in cal.params.items()}
    eff = efficiency.Efficiency.from_params(params)
    table = validate.validation_table(prepared=prepared, band=efficiency.EfficiencyBand(eff, eff, eff))
    summary = validate.error_summary(table)
    return {"params": params, "cost": float(cal.cost), "table": table, "summary": summary,
            "targets": target_rows(summary)}


# =========================================================================================
# Seed claims (the report's comparisons checked against the runs table)
# =========================================================================================
def b200_vs_h100(table: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Per-GPU tokens/s of B200 over H100 on the MLPerf GPT-3 175B rows: measured and predicted.

    The only B200 GPT-3 row (64 GPUs, MLPerf 4.1 preview) is compared with the H100 GPT-3 rows
    at <= 512 GPUs (the large-scale 10k-GPU H100 rows have 6 micro-batches per step: a different
    regime). Returns the ratio of B200 to the median H100 row, measured and predicted.
    """
    table = validate.validation_table() if table is None else table
    g = [r for r in table if r["group"] == "MLPerf GPT-3 175B"]
    b = [r for r in g if r["hardware"] == "b200"]
    h = [r for r in g if r["hardware"] == "h100_sxm" and r["gpus"] <= 512]
    if not b or not h:
        return {"available": False, "reason": "no B200 and H100 MLPerf GPT-3 rows"}
    mh, ph = float(np.median([r["measured"] for r in h])), float(np.median([r["predicted"] for r in h]))
    return {"available": True, "b200_rows": [r["run_id"] for r in b], "h100_rows": [r["run_id"] for r in h],
            "measured_ratio": float(np.median([r["measured"] for r in b])) / mh,
            "predicted_ratio": float(np.median([r["predicted"] for r in b])) / ph,
            "peak_ratio": hardware.get("b200").peak_flops("fp8") / hardware.get("h100_sxm").peak_flops("fp8")}


def gb300_vs_gb200(table: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
    """GB300 vs GB200 per GPU: measured on the fitted runs of the same model, precision and GPU count
    on both (median of the pairs' ratios, with the model's beside it), and the model's ratio for
    Llama 3.1 405B NVFP4 in one layout on both."""
    table = validate.validation_table() if table is None else table
    by: dict[tuple, dict[str, dict[str, Any]]] = {}
    for r in table:
        if r["hardware"] in ("gb200", "gb300") and r["measured"]:
            by.setdefault((r["model"], str(r["precision"]).lower(), r["gpus"]), {})[r["hardware"]] = r
    pairs = [v for v in by.values() if len(v) == 2]
    lay = Layout(tp=4, pp=16, dp=4, vp=8, mbs=1, gbs=1536, recompute="none")
    m = models.get("llama31_405b")
    nvfp4 = recipes.training("nvfp4")
    res = {gpu: float(perf.step_time(m, lay, nvfp4, hardware.get(gpu)).tokens_per_s_per_gpu[0]) for gpu in ("gb200", "gb300")}
    meas = [p["gb300"]["measured"] / p["gb200"]["measured"] for p in pairs]
    pred = [p["gb300"]["predicted"] / p["gb200"]["predicted"] for p in pairs]
    return {"available": bool(pairs), "measured_rows": [p[g]["run_id"] for p in pairs for g in ("gb300", "gb200")],
            "pairs": len(pairs), "measured_ratio": float(np.median(meas)) if meas else None,
            "predicted_ratio": float(np.median(pred)) if pred else None,
            "predicted_ratio_nvfp4_llama405b": res["gb300"] / res["gb200"],
            "peak_ratio_fp4": hardware.get("gb300").peak_flops("nvfp4") / hardware.get("gb200").peak_flops("nvfp4")}


def mfu_by_precision(table: Sequence[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Achieved MFU (model FLOPs / dense peak of the row's precision) by precision and family,
    from the measurements (with the model's MFU beside them)."""
    table = validate.validation_table() if table is None else table
    groups: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in table:
        if r["measured"] is None:
            continue
        groups.setdefault((r["precision"], hardware.get(r["hardware"]).family), []).append((r["mfu_measured"], r["mfu"]))
    return [{"precision": p, "family": f, "rows": len(v), "measured_mfu_median": float(np.median([a for a, _ in v])),
             "measured_mfu_max": float(max(a for a, _ in v)), "predicted_mfu_median": float(np.median([b for _, b in v]))}
            for (p, f), v in sorted(groups.items())]


__all__ = ["CAVEAT_WORDS", "COMPONENTS", "COMPONENT_COLORS", "GEMM_DTYPES", "SOURCE_KINDS", "SOURCE_SHORT",
           "CV_SCHEMES", "b200_vs_h100", "breakdown_rows", "caveats", "claim_rows", "copy_fraction", "cv_category_rows",
           "cv_rows", "cv_scheme_rows", "gb300_vs_gb200", "gemm_curves", "gemm_points", "gemm_summary",
           "hardware_rows", "mfu_by_precision", "mfu_rows", "stack_label", "stack_rows",
           "model_short", "parameter_rows", "pinned_fit", "recompute_whatif", "representative", "run_rows",
           "source_kind", "source_md", "spct", "target_rows", "targets_met", "worst_rows",
           "COVERAGE", "HELDOUT_CSV", "PROBE_SOURCES", "RECIPE_NOTE", "coverage_rows", "heldout_group", "heldout_rows", "heldout_summary", "measured_gpus_max", "probe_fit_text", "probe_rows", "probe_sources",
           "recipe_matched", "PROBE_LABELS", "PRODUCTION_MOE_CSV", "recipe_search_rows",
           "NO_REGIME_CALIBRATION", "NO_REGIME_RUN", "empty_regimes_text", "regime_goals_text", "regime_rows",
           "worst_regime_text", "moe_span", "cp_span", "local_expert_runs", "local_expert_text", "MANY_LOCAL_EXPERTS", "ep_span_bias", "remote_domains", "span_text", "span_adjusted_ratio", "bias_adjusted_text",
           "BRIDGE_RECIPES_CSV", "flex_backends", "ep_domains",
           "over_under_both_readings"]
