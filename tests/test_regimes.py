"""Cross-validation by regime (issue 29): the regime of a runs-table row, the leave-one-regime-out
folds, the per-regime summary with the worst regime, and the validation chapter's regime rows."""
from __future__ import annotations

import numpy as np
import pytest

from scaletax import DATA_DIR
from scaletax.inputs import runs
from scaletax.model import perf
from scaletax.fit import calibrate, validate
from scaletax.chapters import validation as vs


@pytest.fixture(scope="module")
def by_id():
    rows = runs.read_runs(runs.RUNS_CSV) + runs.read_runs(DATA_DIR / "heldout_runs.csv")
    return {r["run_id"]: r for r in rows}


def test_regime_of_concrete_rows(by_id):
    assert runs.row_regime(by_id["mbridge25.09-DeepSeek-V3671B-DGX-H100-1024-FP8"]) == "fine-grained MoE"
    assert runs.row_regime(by_id["deepseek-v3-paper-2048-h800-fp8"]) == "fine-grained MoE"
    assert runs.row_regime(by_id["llama3-paper-405b-16k-131k-h100-bf16"]) == "long context"
    assert runs.row_regime(by_id["narayanan2021-1.7B"]) == "small dense"
    assert runs.row_regime(by_id["mbridge25.11-Llama3-DGX-B200-8-FP8-CS"]) == "small dense"
    assert runs.row_regime(by_id["mlperf4.0-NVIDIA-eos_n64_ngc24.04_nemo-gpt3"]) == "large dense"
    assert runs.row_regime(by_id["narayanan2021-39.1B"]) == "large dense"
    # Megatron-FSDP: the stack column, or ZeRO stage 3 (a blank stack is Megatron-Core)
    assert runs.row_regime(by_id["mbridge26.04.01-Llama3-DGX-GB200-64-FP8"]) == "FSDP stack"  # zero_stage 3
    dense = by_id["mlperf4.0-NVIDIA-eos_n64_ngc24.04_nemo-gpt3"]
    assert runs.row_regime({**dense, "stack": "fsdp"}) == "FSDP stack"
    assert runs.row_regime({**dense, "stack": ""}) == runs.row_regime({**dense, "stack": None}) == "large dense"
    # first match wins: a long-context MoE is MoE; a coarse MoE is not fine-grained
    moe = by_id["mbridge25.09-DeepSeek-V3671B-DGX-H100-1024-FP8"]
    assert runs.row_regime({**moe, "seq_len": 131072}) == "fine-grained MoE"
    assert runs.row_regime({**moe, "moe_experts": 8}) == "coarse MoE"
    # a blank parameter count falls back to the architecture's
    assert runs.row_regime({**by_id["narayanan2021-1.7B"], "total_params_b": ""}) == "small dense"
    assert set(runs.REGIME_CRITERIA) == set(runs.REGIMES)
    assert {runs.row_regime(r) for r in by_id.values()} <= set(runs.REGIMES)


def test_leave_one_regime_out_leaves_the_whole_regime_out(prepared):
    inp, plans = prepared
    h = validate.holdout(prepared=prepared, scheme="regime")
    assert len(h) == sum(p.measured is not None for p in plans)  # every row tested
    assert all(r["fold"] == r["regime"] == runs.row_regime(next(p.row for p in plans if p.row["run_id"] == r["run_id"]))
               for r in h)
    # a regime's prediction is a calibration on the other regimes' rows only
    reg = "FSDP stack"
    test = [i for i, p in enumerate(plans) if runs.row_regime(p.row) == reg]
    train = [i for i, p in enumerate(plans) if runs.row_regime(p.row) != reg and p.measured is not None]
    assert test and train
    fold = calibrate.calibrate_fold(inp, plans, train)
    assert not any(runs.row_regime(plans[i].row) == reg for i in fold.calibration.rows)
    want = perf.evaluate(inp, fold.efficiency).tokens_per_s_per_gpu
    got = {r["run_id"]: r["predicted"] for r in h}
    for i in test:
        assert got[plans[i].row["run_id"]] == pytest.approx(float(want[i]), rel=1e-12)
    # every other regime keeps a run that identifies each parameter: no fold needs a prior
    assert not any(r["prior"] for r in h)


def _cv(errors):
    """A cross_validation-shaped dict: (run_id, regime, in-sample error, left-out error) rows."""
    left = [{"run_id": i, "regime": g, "error": o, "prior": ""} for i, g, _, o in errors]
    return {"tables": {"in_sample": [{"run_id": i, "error": e} for i, _, e, _ in errors], "source": left,
                       "regime": [{**r, "error": 2 * r["error"]} for r in left]}}


def test_regime_summary_and_worst_regime_picks_the_largest_out_of_sample_median():
    cv = _cv([("a", "small dense", 0.01, 0.05), ("b", "small dense", -0.02, -0.07),
              ("c", "large dense", 0.01, 0.12), ("d", "fine-grained MoE", 0.1, 0.2)])
    held = [{"run_id": "h1", "regime": "long context", "error": -0.3},
            {"run_id": "h2", "regime": "fine-grained MoE", "error": 0.02}]
    s = {r["regime"]: r for r in validate.regime_summary(cv, held)}
    assert list(s) == list(runs.REGIMES)
    assert s["small dense"]["rows"] == 2 and s["small dense"]["cv_median"] == pytest.approx(0.06)
    assert s["small dense"]["in_sample"] == pytest.approx(0.015) and s["small dense"]["heldout_rows"] == 0
    assert s["small dense"]["lro_median"] == pytest.approx(0.12)  # the leave-one-regime-out table
    assert s["fine-grained MoE"]["oos_rows"] == 2 and s["fine-grained MoE"]["oos_median"] == pytest.approx(0.11)
    assert s["long context"]["rows"] == 0 and s["long context"]["cv_median"] is None
    assert s["long context"]["heldout_median"] == pytest.approx(0.3)
    assert s["FSDP stack"]["oos_rows"] == 0 and s["FSDP stack"]["oos_median"] is None
    worst = validate.worst_regime(list(s.values()))
    assert worst["regime"] == "long context"
    assert worst["oos_median"] == max(r["oos_median"] for r in s.values() if r["oos_median"] is not None)
    # without the held-out runs the worst is the largest leave-one-source-out median
    assert validate.worst_regime(validate.regime_summary(cv))["regime"] == "fine-grained MoE"
    with pytest.raises(ValueError, match="source"):
        validate.regime_summary({"tables": {"in_sample": []}})
    with pytest.raises(ValueError, match="out-of-sample"):
        validate.worst_regime(validate.regime_summary(_cv([])))


def test_goals_met():
    g = validate.CV_GOALS
    assert validate.goals_met({"median_abs_error": g["median_abs_error"], "within_25": g["within_25"]})
    assert not validate.goals_met({"median_abs_error": g["median_abs_error"] + 0.01, "within_25": 1.0})
    assert not validate.goals_met({"median_abs_error": 0.0, "within_25": g["within_25"] - 0.01})


def test_chapter_regime_rows_list_every_regime():
    cv = _cv([("a", "small dense", 0.01, 0.05), ("d", "fine-grained MoE", 0.1, 0.2)])
    held = [{"run_id": "h1", "regime": "long context", "error": -0.3}]
    rows = vs.regime_rows(cv, held)
    assert [r["regime"] for r in rows] == list(runs.REGIMES)
    by = {r["regime"]: r for r in rows}
    assert by["FSDP stack"]["in_sample"] == vs.NO_REGIME_RUN and by["FSDP stack"]["empty"]
    assert by["long context"]["in_sample"] == vs.NO_REGIME_CALIBRATION and not by["long context"]["empty"]
    assert by["small dense"]["in_sample"] == pytest.approx(0.01)
    assert all(r["criterion"] == runs.REGIME_CRITERIA[r["regime"]] for r in rows)
    text = vs.empty_regimes_text(rows)
    assert vs.NO_REGIME_RUN in text and "FSDP stack" in text and "large dense" in text
    assert "without their source" in vs.worst_regime_text(by["fine-grained MoE"])
    assert vs.worst_regime_text(by["long context"]) == "its 1 held-out run"
    assert vs.regime_goals_text({"median_abs_error": 0.0, "within_25": 1.0}).endswith("meets both goals.")
    assert "median" in vs.regime_goals_text({"median_abs_error": 0.5, "within_25": 1.0})


def test_chapter_regime_rows_on_the_data(prepared):
    cv = validate.cross_validation(prepared=prepared, schemes=("source", "regime"))
    held = vs.heldout_rows()
    rows = vs.regime_rows(cv, held)
    assert [r["regime"] for r in rows] == list(runs.REGIMES)
    assert sum(r["rows"] for r in rows) == cv["source"]["rows"] == cv["regime"]["rows"]
    assert sum(r["heldout_rows"] for r in rows) == len(held)
    pooled = np.median([abs(r["error"]) for r in cv["tables"]["source"]])
    assert cv["source"]["median_abs_error"] == pytest.approx(pooled)
    worst = validate.worst_regime(rows)
    assert all(worst["oos_median"] >= r["oos_median"] for r in rows if r["oos_median"] is not None)


def test_goals_text_names_the_worst_regime_when_it_misses():
    worst = {"label": "Fine-grained MoE", "oos_median": 0.152, "oos_within_25": 0.75}
    text = vs.regime_goals_text({"median_abs_error": 0.05, "within_25": 0.96}, worst)
    assert text == ("Over all rows, leaving one regime out meets both goals. Fine-grained MoE alone misses the "
                    "median (at most 10%) and the share within 25% (at least 90%): its numbers carry the wider error.")
    ok = {"label": "Small dense", "oos_median": 0.05, "oos_within_25": 1.0}
    assert vs.regime_goals_text({"median_abs_error": 0.05, "within_25": 0.96}, ok).endswith("Small dense alone meets them too.")


def test_fp8_ceiling_bound_is_the_measured_ratio():
    """The 8-bit ceiling's upper bound: the measured 16-bit ceiling times the largest FP8 / BF16
    ratio of fractions of peak; the square 8192 GEMM, by hand from data/measured/gemm_h200.csv
    (BF16 738.97, FP8 1325.27 TFLOP/s; H200 dense peaks 989 and 1979), is one of those ratios."""
    r = calibrate.fp8_over_bf16_max()
    assert r >= (1325.2748678620087 / 1979) / (738.9667739035774 / 989)
    assert 1.0 <= r <= 1.03  # no measured FP8 GEMM holds a larger share of its peak by more than 3%
    lo, hi = calibrate.fit_bounds()["gemm_ceiling_8bit"]
    assert hi == pytest.approx(calibrate.fit_gemm_measurements()["ceiling_bf16"] * r)
    assert calibrate.FIT_BOUNDS["gemm_ceiling_8bit"][1] == 1.0  # the static bound is not the binding one


def test_leave_one_regime_out_with_the_bound(prepared):
    """Leaving one regime out of the 95 fitted runs: median |error| <= 10% (issue 29's goal), and >= 90%
    of the dense runs within 25% (the MoE regimes, far apart, do not reach it: the chapter says so).
    Without the measured bound the large dense fold fitted an 8-bit ceiling of 1.0; with it the fold
    stays at the bound."""
    inp, plans = prepared
    train = [i for i, p in enumerate(plans) if p.measured and runs.row_regime(p.row) != "large dense"]
    fold = calibrate.calibrate_fold(inp, plans, train).calibration
    assert fold.params["gemm_ceiling_8bit"] <= calibrate.fit_bounds()["gemm_ceiling_8bit"][1] + 1e-12
    h = validate.holdout(prepared=prepared, scheme="regime")
    assert validate.holdout_summary(h)["median_abs_error"] <= validate.CV_GOALS["median_abs_error"]
    dense = [r for r in h if "dense" in r["regime"]]
    assert validate.holdout_summary(dense)["within_25"] >= validate.CV_GOALS["within_25"]


def test_model_regime_is_row_regime_for_every_run_in_data():
    """A scenario's model gets the regime its runs-table row would: ``runs.model_regime`` on the
    row's architecture, sequence, ZeRO stage and stack equals ``runs.row_regime`` on every row
    of the four tables in data/ (one rule, two entry points)."""
    names = ("published_runs.csv", "heldout_runs.csv", "coverage_probes.csv", "production_moe_recipes.csv")
    rows = [r for n in names for r in runs.read_runs(DATA_DIR / n)]
    seen = set()
    for r in rows:
        zero = 3 if runs.row_stack(r) == "fsdp" else int(r.get("zero_stage") or 1)
        got = runs.model_regime(runs.row_model(r), int(r["seq_len"]), zero_stage=zero, stack=runs.row_stack(r))
        assert got == runs.row_regime(r), r["run_id"]
        seen.add(got)
    assert seen == set(runs.REGIMES)  # every regime has a row in data/ (coarse MoE: the Mixtral probe)


def test_model_regime_of_catalog_models():
    from scaletax.inputs import models

    assert runs.model_regime(models.get("kimi_k2")) == "fine-grained MoE"  # 384 routed experts
    assert runs.model_regime(models.get("megatron_1t")) == "large dense"
    assert runs.model_regime(models.get("llama31_8b")) == "small dense"
    assert runs.model_regime(models.get("llama31_8b"), 65536) == "long context"
    assert runs.model_regime(models.get("llama31_8b"), stack="fsdp") == "FSDP stack"
    assert runs.model_regime(models.get("llama31_70b"), zero_stage=3) == "FSDP stack"
    with pytest.raises(ValueError, match=r"^stack: must be one of megatron, fsdp \(got 'deepspeed'\)$"):
        runs.model_regime(models.get("llama31_8b"), stack="deepspeed")


def test_heldout_errors_are_the_chapters(prepared):
    """The held-out runs' errors: ``validate.heldout_errors`` (what the regime accuracy counts)
    gives the validation chapter's ``heldout_rows`` errors, row for row."""
    a = validate.heldout_errors()
    b = vs.heldout_rows()
    assert [r["run_id"] for r in a] == [r["run_id"] for r in b]
    for x, y in zip(a, b):
        assert x["regime"] == y["regime"] and x["error"] == pytest.approx(y["error"], rel=1e-12)


def test_regime_accuracy_is_one_answer(prepared):
    """The validation chapter's regime table (recomputed) and what data/efficiency.yaml states per
    regime (``validate.regime_accuracy``), which the executive summary's limits box and ``scaletax
    predict`` quote, are the same out-of-sample figures."""
    from scaletax.chapters import decision as d
    from scaletax.chapters import summary as s
    from scaletax.report.chapters import default_parameters
    from scaletax.report.predict import REGIME_COLUMNS, predict_rows

    cv = validate.cross_validation(prepared=prepared)
    table = {r["regime"]: r for r in vs.regime_rows(cv, vs.heldout_rows())}
    acc = {r["regime"]: r for r in validate.regime_accuracy()}
    assert list(acc) == list(runs.REGIMES)
    for reg, r in acc.items():
        for k in ("oos_rows", "oos_median", "oos_within_25", "rows", "heldout_rows"):
            if r[k] is None:
                assert table[reg][k] is None, (reg, k)
            else:  # data/efficiency.yaml states 4 decimals
                assert r[k] == pytest.approx(table[reg][k], abs=5e-5), (reg, k)
    plan = d.Plan.from_params(**default_parameters("summary"))
    lim = s.limits(plan)
    assert [m["model"] for m in lim["regimes"]] == list(plan.models)
    worst = validate.worst_regime(list(acc.values()))["regime"]
    for m in lim["regimes"]:
        r = acc[m["regime"]]
        assert (m["oos_rows"], m["oos_median"], m["oos_within_25"]) == (r["oos_rows"], r["oos_median"], r["oos_within_25"])
        assert m["worst"] == (m["regime"] == worst)
    text = s.limits_sentences(lim, "x")["regimes"]
    for m in lim["regimes"]:
        assert f"{m['name']} is a {m['regime']} model" in text
        assert f"{100 * m['oos_median']:.1f}% median error over {m['oos_rows']} runs" in text
    out = predict_rows(runs.read_runs(DATA_DIR / "coverage_probes.csv"))
    for o in out:
        r = acc[o["regime"]]
        assert set(REGIME_COLUMNS) <= set(o) and o["regime_oos_runs"] == r["oos_rows"]
        assert o["regime_oos_median_abs_error"] == (None if r["oos_median"] is None else round(r["oos_median"], 4))


def test_regime_sentence():
    from scaletax.chapters import summary as s

    regs = [{"name": "GPT 1T", "regime": "large dense", "oos_rows": 27, "oos_median": 0.0501, "oos_within_25": 1.0,
             "worst": False},
            {"name": "Kimi K2", "regime": "fine-grained MoE", "oos_rows": 4, "oos_median": 0.1521,
             "oos_within_25": 0.75, "worst": True},
            {"name": "Mixtral", "regime": "coarse MoE", "oos_rows": 0, "oos_median": None, "oos_within_25": None,
             "worst": False}]
    assert s.regime_sentence(regs, 0.1515) == (
        "out of sample by regime (a regime's calibration runs each predicted by a calibration without the regime, "
        "and its held-out runs): GPT 1T is a large dense model, 5.0% median error over 27 runs, all within 25%; "
        "Kimi K2 is a fine-grained MoE model, the regime predicted worst, 15.2% median error over 4 runs, 75% within "
        "25%; Mixtral is a coarse MoE model, a regime with no published run that has a measurement: not validated; "
        "the band (\u00b115%) is the spread over all model families")
