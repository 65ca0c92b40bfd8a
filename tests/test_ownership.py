"""Owning instead of renting: the capital recovery factor and the owned price per GPU-hour by
hand, and the decision chapter's owned price beside the rental one."""
from __future__ import annotations

import pytest

from scaletax.model import cost, ownership
from scaletax.chapters import decision as d
from scaletax.report import chapters as toc
from scaletax.report.scenario import resolve


def _plan(*overrides):
    return d.Plan.from_params(**toc.chapter("decision").parameters(resolve(overrides=list(overrides))))


def test_capital_recovery_factor_by_hand():
    # 10% over 5 years: 0.1 x 1.1^5 / (1.1^5 - 1) = 0.263797
    assert ownership.capital_recovery_factor(0.10, 5) == pytest.approx(0.1 * 1.1**5 / (1.1**5 - 1)) == pytest.approx(
        0.263797, abs=1e-6)
    assert ownership.capital_recovery_factor(0.0, 5) == pytest.approx(0.2)  # straight-line at no cost of capital
    with pytest.raises(ValueError, match="capital recovery"):
        ownership.capital_recovery_factor(-0.1, 5)


def test_owned_price_per_gpu_hour_by_hand():
    # a DGX H100 at $270,000 (8 GPUs), 5 years at 10%, $2,208,720 per MW-year, 1,275 W per GPU, busy 80%
    out = ownership.owned_usd_per_gpu_hour(270_000 / 8, 5, 0.10, 2_208_720, 1275.0, 0.8, 0.11)
    hours = 8760 * 0.8
    assert out["capital"] == pytest.approx(33_750 * 0.263797 / hours, rel=1e-5)  # $1.27
    assert out["facility"] == pytest.approx(2_208_720 * 1275e-6 / hours)  # $0.40
    assert out["total"] == pytest.approx(out["capital"] + out["facility"] + 0.11)
    with pytest.raises(ValueError, match="busy_share"):
        ownership.owned_usd_per_gpu_hour(1.0, 5, 0.1, 1.0, 1.0, 0.0)


def test_the_decision_chapters_owned_price_beside_the_rental_price():
    plan = _plan()
    own = d.owned_price(plan, "h100_sxm")
    energy = cost.energy_mwh(1.0, plan.system_w("h100_sxm"), plan.utilization, plan.pue) * plan.usd_per_mwh
    o = plan.ownership
    expect = ownership.owned_usd_per_gpu_hour(o["capex"]["h100_sxm"]["usd_per_system"] / 8, o["depreciation_years"],
                                              o["cost_of_capital"], o["facility_usd_per_mw_year"], 1275.0,
                                              o["busy_share"], energy)
    assert own["total"] == pytest.approx(expect["total"]) and own["capex_basis"] == "published"
    assert own["rent_total"] == pytest.approx(plan.price("h100_sxm") + energy)
    assert d.owned_price(plan, "h800_sxm") is None  # no system price in the scenario
    assert d.owned_price(_plan("economics.ownership.capex.h200_sxm.usd_per_system=280000"), "h200_sxm")["capex_basis"] == \
        "your input"
    s = resolve(overrides=["economics.ownership.capex.h200_sxm.usd_per_system=280000"])
    cap = s.economics.ownership.capex["h200_sxm"]
    assert (cap.your_input, cap.assumption, cap.source) == (
        True, False, "your input (--set economics.ownership.capex.h200_sxm.usd_per_system=280000)")
    assert "system price of h200_sxm: $280,000" in " ".join(s.user_inputs())
