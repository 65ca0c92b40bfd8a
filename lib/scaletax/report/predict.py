"""``scaletax predict``: a runs table in, the same rows with the model's columns out.

Columns added to every row (inputs are never modified):

- memory (``runplan.MEMORY_COLUMNS``): bytes per GPU by term for the row's layout;
- throughput (:data:`PERF_COLUMNS`): ``predicted_tokens_per_s_per_gpu`` with its band
  ``_low`` / ``_high`` (efficiency parameters at the ends of their ranges, widened to at least the
  out-of-sample band of ``data/efficiency.yaml``),
  ``predicted_model_tflops_per_gpu``, ``predicted_mfu`` (model FLOPs / dense peak of the row's
  precision), ``predicted_step_time_s`` and its breakdown ``compute_s, exposed_comm_s,
  bubble_s, other_s`` (they sum to the step time); ``recompute_modelled`` (what the step-time
  model ran, e.g. full recompute on part of the layers), ``layout_assumptions`` (the
  ``validate.ROW_CONVENTIONS`` applied), ``error_vs_measured`` (predicted / measured - 1 where the
  row has a measurement, converted as ``validate.measured_tokens_per_s`` says);
- ``layout_searched``: for a row with no layout (``tp`` and ``pp`` empty) the best layout of
  ``search.search`` on the row's GPU count, timed with the software the row states (dispatcher,
  schedule, expert GEMMs), written into the layout columns too; the global
  batch is the row's ``gbs`` or, when empty, :data:`DEFAULT_TOKENS_PER_STEP` tokens. A model
  that fits no layout gets "does not fit on N GPUs of type X; needs at least M" there, no
  layout and empty throughput columns;
- time and cost (:data:`COST_COLUMNS`, only when the table has a ``tokens`` column), for rows
  with a token budget: ``predicted_days``, ``predicted_gpu_hours``, ``predicted_cost_usd``
  (``cost.run_costs`` at the predicted tokens/s per GPU, with the row's ``price_per_gpu_hour`` or
  the default scenario's price of its GPU, the scenario's energy factors and electricity price,
  the GPU's system power and the goodput of the row's model on its GPU count: ``decision.Plan``)
  and ``cost_basis`` (the price, where it comes from, and the goodput);
- regime (:data:`REGIME_COLUMNS`): the row's regime and the model's out-of-sample accuracy on it,
  the numbers the validation chapter's regime table shows.
"""
from __future__ import annotations

import math
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np

from scaletax import files
from scaletax.inputs import hardware, runs
from scaletax.inputs.layout import label
from scaletax.model import efficiency, perf, runplan, search
from scaletax.model import plan as planning
from scaletax.fit import validate

#: Tokens per step for a row with neither a layout nor a global batch: 16M, the Llama 3.1
#: 405B final batch (arXiv 2407.21783, Sec. 3.4.1), as the default scenario.
DEFAULT_TOKENS_PER_STEP = 16_777_216

PERF_COLUMNS: tuple[str, ...] = (
    "predicted_tokens_per_s_per_gpu", "predicted_tokens_per_s_per_gpu_low", "predicted_tokens_per_s_per_gpu_high",
    "predicted_model_tflops_per_gpu", "predicted_mfu", "predicted_step_time_s", "compute_s", "exposed_comm_s",
    "bubble_s", "other_s", "recompute_modelled", "layout_assumptions", "error_vs_measured", "layout_searched",
)
#: The row's regime (``runs.row_regime``) and how well the model predicts that regime out of sample
#: (``validate.regime_accuracy``: its calibration runs predicted by a calibration without the regime,
#: and its held-out runs): how many runs, their median |error| and the share within 25% (empty when
#: the regime has no run with a measurement).
REGIME_COLUMNS: tuple[str, ...] = ("regime", "regime_oos_runs", "regime_oos_median_abs_error", "regime_oos_within_25")
COST_COLUMNS: tuple[str, ...] = ("predicted_days", "predicted_gpu_hours", "predicted_cost_usd", "cost_basis")


def _add_costs(out: list[dict[str, Any]], keep: list[int], tps: list[float]) -> None:
    """:data:`COST_COLUMNS` into ``out`` (in place): rows ``keep`` have throughput ``tps``."""
    from scaletax.model import cost
    from scaletax.model.plan import Terms
    from scaletax.report.chapters import default_parameters

    plan = Terms.from_params(**default_parameters("decision"))
    econ = plan.economics(None)
    for r in out:
        r.update({c: None for c in COST_COLUMNS})
    todo, price, watts, good = [], [], [], []
    for k, p in zip(keep, tps):
        r = out[k]
        if _blank(r.get("tokens")):
            continue
        hw = str(r["hardware"]).strip()
        if not _blank(r.get("price_per_gpu_hour")):
            usd, src = float(r["price_per_gpu_hour"]), "the row"
        elif plan.price(hw) is not None:
            usd, src = plan.price(hw), "the default scenario"
        else:
            r["cost_basis"] = f"no price for {hw} in the default scenario: give price_per_gpu_hour"
            usd, src = None, ""
        todo.append((k, p))
        price.append(float("nan") if usd is None else usd)
        watts.append(plan.system_w(runs.row_gpu(r)))
        good.append(float(plan.goodput_at(runs.row_model(r), int(r["gpu_count"]))))
        if usd is not None:
            r["cost_basis"] = f"{usd:g} USD per GPU-hour from {src}; goodput {good[-1]:.3g}"
    if not todo:
        return
    tokens = [float(out[k]["tokens"]) for k, _ in todo]
    gpus = [float(out[k]["gpu_count"]) for k, _ in todo]
    c = cost.run_costs(np.array(tokens), np.array([p for _, p in todo]), np.array(gpus), np.array(watts), econ,
                       usd_per_gpu_hour=np.array(price), goodput=np.array(good))
    for j, (k, _) in enumerate(todo):
        r = out[k]
        r["predicted_days"] = float(c["days"][j])
        r["predicted_gpu_hours"] = float(c["gpu_hours"][j])
        r["predicted_cost_usd"] = None if math.isnan(price[j]) else float(c["cost_usd"][j])


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, str) and v.strip() == "") or (isinstance(v, float) and math.isnan(v))


def _searched(row: dict[str, Any]) -> tuple[dict[str, Any], str, bool]:
    """(row with the searched layout filled in, label, found). The search times every layout with the
    software the row states (its dispatcher, schedule and expert GEMMs), as the row is then timed."""
    model = runs.row_model(row)
    gbs = None if _blank(row.get("gbs")) else int(row["gbs"])
    tokens = None if gbs is not None else DEFAULT_TOKENS_PER_STEP
    disp = runs.row_dispatch(row)
    space = search.SearchSpace(ep_dispatch=None if disp == "dedup" else disp, schedule=runs.row_schedule(row),
                               expert_gemm=runs.row_expert_gemm(row))
    res = planning.fastest(model, runs.row_gpu(row), runs.row_recipe(row), int(row["gpu_count"]), tokens, gbs=gbs,
                           space=space)
    if not res.fits:
        return dict(row), res.message, False
    lay = res.best
    new = dict(row)
    new.update({"tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "ep": lay.ep, "etp": lay.etp, "dp": lay.dp, "vp": lay.vp,
                "mbs": lay.mbs, "gbs": lay.gbs, "zero_stage": lay.zero_stage, "recompute": lay.recompute})
    return new, label(lay), True


def predict_rows(rows: list[dict[str, Any]], band: efficiency.EfficiencyBand | None = None) -> list[dict[str, Any]]:
    """Memory and throughput columns for every row (module docstring); rows without a layout
    get the searched one. Errors name the row (the header is row 1) and the column."""
    filled, labels, ok = [], [], []
    for i, row in enumerate(rows):
        if all(_blank(row.get(c)) for c in runs.SEARCHABLE_LAYOUT):
            try:
                new, label, found = _searched(row)
            except (ValueError, hardware.HardwareError) as exc:
                raise runs.RunsTableError(f"row {i + 2}, column 'precision': {exc}") from None
            filled.append(new)
            labels.append(label)
            ok.append(found)
        else:
            filled.append(row)  # read, never written: runplan.predict_memory copies it
            labels.append("")
            ok.append(True)
    keep = [i for i, f in enumerate(ok) if f]
    plan = runplan.plan_rows([filled[i] for i in keep], row_numbers=[i + 2 for i in keep])
    mem_rows = runplan.predict_memory(plan)
    out: list[dict[str, Any]] = []
    for i, found in enumerate(ok):
        if found:
            out.append({})
            continue
        new = dict(rows[i])
        new.update({c: None for c in runplan.MEMORY_COLUMNS})
        new["fits"] = False
        new.update({c: None for c in PERF_COLUMNS})
        new["layout_searched"] = labels[i]
        out.append(new)
    if keep:
        try:
            inp = plan.step_inputs()
        except hardware.UnsupportedPrecision as exc:
            bad = next(k for k in keep
                       if not runs.row_gpu(filled[k]).supports(runs.row_recipe(filled[k])))
            raise runs.RunsTableError(f"row {bad + 2}, column 'precision': {exc}") from None
        pred = perf.evaluate_band(inp, band)
        v, lo, hi = pred.value, pred.low.tokens_per_s_per_gpu, pred.high.tokens_per_s_per_gpu
        cols = {k: getattr(v, k).tolist() for k in ("tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "step_s",
                                                    "compute_s", "exposed_comm_s", "bubble_s", "other_s")}
        lo, hi = lo.tolist(), hi.tolist()
        words = plan.recompute_labels()
        for j, k in enumerate(keep):
            p = cols["tokens_per_s_per_gpu"][j]
            measured = plan.measured[j]
            new = mem_rows[j]
            new.update({
                "predicted_tokens_per_s_per_gpu": round(p, 3),
                "predicted_tokens_per_s_per_gpu_low": round(lo[j], 3),
                "predicted_tokens_per_s_per_gpu_high": round(hi[j], 3),
                "predicted_model_tflops_per_gpu": round(cols["model_tflops_per_gpu"][j], 3),
                "predicted_mfu": round(cols["mfu"][j], 4),
                "predicted_step_time_s": cols["step_s"][j],
                "compute_s": cols["compute_s"][j], "exposed_comm_s": cols["exposed_comm_s"][j],
                "bubble_s": cols["bubble_s"][j], "other_s": cols["other_s"][j],
                "recompute_modelled": words[j],
                "layout_assumptions": "; ".join(plan.assumptions[j]),
                "error_vs_measured": round(p / measured - 1.0, 4) if measured else None,
                "layout_searched": labels[k],
            })
            out[k] = new
    if any("tokens" in r for r in rows):
        _add_costs(out, keep, cols["tokens_per_s_per_gpu"] if keep else [])
    _add_regimes(out, [filled[i] if found else rows[i] for i, found in enumerate(ok)])
    return out


def _add_regimes(out: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    """:data:`REGIME_COLUMNS` into ``out`` (in place), from the rows as predicted (``rows``)."""
    if not out:
        return
    acc = {r["regime"]: r for r in validate.regime_accuracy()}
    for o, row in zip(out, rows):
        a = acc[runs.row_regime(row)]
        o.update({"regime": a["regime"], "regime_oos_runs": a["oos_rows"],
                  "regime_oos_median_abs_error": None if a["oos_median"] is None else round(a["oos_median"], 4),
                  "regime_oos_within_25": None if a["oos_within_25"] is None else round(a["oos_within_25"], 4)})


def check_out(path: Path, build_root: Path | None = None) -> None:
    """Refuse an output path that is not a new path or a regular file (a symbolic link, a
    device, a FIFO, a folder): ``--out`` replaces the file, never what a link points to. Refuse
    too a path inside a folder of ``build_root`` (a book, the cache: the build owns them) and a
    book's manifest wherever it is."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not path.parent.is_dir():
            raise ValueError(f"--out {path}: folder {path.parent} does not exist") from None
        st = None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise ValueError(f"--out {path}: is a symbolic link; give a regular file or a new path")
        if stat.S_ISDIR(st.st_mode):
            raise ValueError(f"--out {path}: is a folder")
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"--out {path}: is not a regular file (a device, FIFO or socket)")
    if build_root is not None:
        target = path.parent.resolve() / path.name
        root = build_root.resolve()
        if target.is_relative_to(root) and len(target.relative_to(root).parts) > 1:
            owner = root / target.relative_to(root).parts[0]
            raise ValueError(f"--out {path}: inside {owner}, which scaletax builds and replaces; write it elsewhere")
    if st is not None and path.name == "manifest.json" and _is_manifest(path):
        raise ValueError(f"--out {path}: is a book's manifest; write it elsewhere")


def _is_manifest(path: Path) -> bool:
    """Whether ``path`` holds a scaletax book manifest (JSON naming a scenario hash)."""
    import json

    try:
        data = json.loads(files.read_bounded(path, 64 * 1024**2, "manifest"))
    except (ValueError, OSError):
        return False
    return isinstance(data, dict) and "scenario_sha256" in data


def write_out(rows: list[dict[str, Any]], path: Path, build_root: Path | None = None) -> None:
    """Write the predicted rows to ``path`` (checked by :func:`check_out`): into a new
    temporary file beside it, then renamed over it, so the path is the old file or the new."""
    check_out(path, build_root)
    files.replace_atomically(path, runs.runs_csv(rows), prefix=f".{path.name}.", suffix=".tmp")
