"""``scaletax predict``'s time and cost columns for rows with a token budget (cost.run_costs with
the default scenario's economics; the row's price or the scenario's)."""
from __future__ import annotations

import math

from scaletax.inputs import hardware, runs
from scaletax.model import cost, goodput
from scaletax.chapters.decision import Plan
from scaletax.report.chapters import default_parameters
from scaletax.report.predict import COST_COLUMNS, predict_rows


def _rows():
    base = runs.read_runs(runs.RUNS_CSV)
    h100 = next(r for r in base if r["hardware"] == "h100_sxm")
    a100 = next(r for r in base if r["hardware"] == "a100_sxm_80gb")
    return [{**h100, "tokens": 1.5e13, "price_per_gpu_hour": 2.0}, {**h100, "tokens": 1.5e13, "price_per_gpu_hour": None},
            {**a100, "tokens": 1e12, "price_per_gpu_hour": None}, {**h100, "tokens": None, "price_per_gpu_hour": None}]


def test_days_and_cost_follow_cost_run_costs():
    plan = Plan.from_params(**default_parameters("decision"))
    econ = plan.economics(None)
    out = predict_rows(_rows())
    own, scen, a100, none = out
    for r, price in ((own, 2.0), (scen, plan.price("h100_sxm"))):
        tps = r["predicted_tokens_per_s_per_gpu"]  # rounded to 3 decimals: compare to 1e-6
        # the goodput of the row's model at its GPU count, as the decision chapter's (the scale model)
        good = plan.goodput_at(runs.row_model(r), r["gpu_count"])
        assert good == goodput.goodput(r["gpu_count"], goodput.checkpoint_bytes(runs.row_model(r).total_params),
                                       plan.reliability_inputs()) and 0.9 < good < 1
        days = r["tokens"] / (tps * r["gpu_count"] * 86_400 * good)
        assert math.isclose(r["predicted_days"], days, rel_tol=1e-6)
        hours = r["tokens"] / tps / 3600 / good
        assert math.isclose(r["predicted_gpu_hours"], hours, rel_tol=1e-6)
        mwh = cost.energy_mwh(hours, hardware.get("h100_sxm").system_w, econ.utilization, econ.pue)
        assert math.isclose(r["predicted_cost_usd"], hours * price + mwh * econ.energy_usd_per_mwh, rel_tol=1e-6)
    assert own["cost_basis"].startswith("2 USD per GPU-hour from the row")
    assert scen["cost_basis"].startswith(f"{plan.price('h100_sxm'):g} USD per GPU-hour from the default scenario")
    # a GPU the scenario has no price for: days and GPU-hours, no cost, and why
    assert a100["predicted_days"] > 0 and a100["predicted_cost_usd"] is None
    assert a100["cost_basis"] == "no price for a100_sxm_80gb in the default scenario: give price_per_gpu_hour"
    assert all(none[c] is None for c in COST_COLUMNS)


def test_no_tokens_column_no_cost_columns():
    out = predict_rows(runs.read_runs(runs.RUNS_CSV)[:2])
    assert not set(COST_COLUMNS) & set(out[0])


def test_bad_budget_refused(tmp_path):
    import pytest

    rows = runs.read_runs(runs.RUNS_CSV)
    text = runs.runs_csv([{**rows[0], "tokens": -1.0}])
    p = tmp_path / "t.csv"
    p.write_text(text)
    with pytest.raises(runs.RunsTableError, match=r"row 2, column 'tokens': must be > 0"):
        runs.read_runs(p)
