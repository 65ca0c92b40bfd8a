"""Time to train, GPUs for a deadline, GPU-hours, energy, cost, bands and the tornado rows."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataclasses import replace

from scaletax.inputs import hardware
from scaletax.model import cost

from objects import as_gpu

ECON = cost.Economics(usd_per_gpu_hour=2.35, utilization=0.9, pue=1.2, usd_per_mwh=80.0)


def test_days_arithmetic():
    # 15T tokens at 400 tokens/s per GPU on 16,384 GPUs
    d = cost.days_to_train(15e12, 400.0, 16384)
    assert d == pytest.approx(15e12 / (400 * 16384 * 86400))
    assert cost.days_to_train(86400 * 1000, 1.0, 1000) == pytest.approx(1.0)
    np.testing.assert_allclose(cost.days_to_train(1e12, np.array([100.0, 200.0]), 1000), [1e12 / 100 / 1000 / 86400,
                                                                                         1e12 / 200 / 1000 / 86400])


@settings(max_examples=80, deadline=None)
@given(tokens=st.floats(1e9, 1e14), tps=st.floats(10, 1e5), days=st.floats(1, 1000))
def test_gpus_for_days_is_the_inverse(tokens, tps, days):
    n = cost.gpus_for_days(tokens, tps, days)
    assert isinstance(n, int) and n >= 1
    assert cost.days_to_train(tokens, tps, n) <= days * (1 + 1e-9)
    if n > 1:
        assert cost.days_to_train(tokens, tps, n - 1) > days * (1 - 1e-9)


def test_gpus_for_days_exact_quotient():
    assert cost.gpus_for_days(86400 * 1000, 1.0, 1.0) == 1000


def test_gpu_hours_energy_and_cost_arithmetic():
    gh = cost.gpu_hours(3.6e9, 1000.0)  # 3.6e6 GPU-seconds
    assert gh == pytest.approx(1000.0)
    e = cost.energy_mwh(gh, 1275.0, 0.9, 1.2)  # DGX H100: 10.2 kW / 8 GPUs
    assert e == pytest.approx(1000 * 1275 * 0.9 * 1.2 / 1e6)
    assert cost.cost_usd(gh, 2.0) == pytest.approx(2000.0)
    assert cost.cost_usd(gh, 2.0, e, 80.0) == pytest.approx(2000.0 + e * 80)
    for bad in (lambda: cost.energy_mwh(1, 0.0, 0.9, 1.2), lambda: cost.energy_mwh(1, 1275, 1.2, 1.2),
                lambda: cost.energy_mwh(1, 1275, 0.9, 0.8), lambda: cost.cost_usd(1, -1.0),
                lambda: cost.Economics(usd_per_gpu_hour=1.0, utilization=0.9, pue=1.2, system_overhead=0.9),
                lambda: cost.days_to_train(1e9, 0.0, 8), lambda: cost.days_to_train(float("nan"), 1.0, 8)):
        with pytest.raises(ValueError):
            bad()


def test_train_estimate_and_band():
    est = cost.train_estimate(15e12, 400.0, 16384, as_gpu("h100_sxm"), ECON, target_days=90, low=350.0, high=450.0)
    assert est["days"] == pytest.approx(cost.days_to_train(15e12, 400.0, 16384))
    assert est["gpu_hours"] == pytest.approx(15e12 / 400 / 3600)
    # the DGX H100's 10.2 kW over its 8 GPUs (data/systems.csv), the figure its megawatts use too
    assert est["system_w"] == 1275.0
    assert est["energy_mwh"] == pytest.approx(est["gpu_hours"] * 1275 * 0.9 * 1.2 / 1e6)
    assert est["cost_usd"] == pytest.approx(est["gpu_hours"] * 2.35 + est["energy_mwh"] * 80)
    assert est["gpus_for_target_days"] == cost.gpus_for_days(15e12, 400.0, 90)
    for k in ("days", "gpu_hours", "energy_mwh", "cost_usd", "gpus_for_target_days"):
        assert est[f"{k}_low"] <= est[k] <= est[f"{k}_high"], k
    assert est["days_high"] == pytest.approx(cost.days_to_train(15e12, 350.0, 16384))  # low throughput: more days
    assert est["tdp_w"] == hardware.get("h100_sxm").tdp_w
    # the planner's system overhead replaces the system power of every GPU
    mine = cost.train_estimate(15e12, 400.0, 16384, as_gpu("h100_sxm"), replace(ECON, system_overhead=1.7))
    assert mine["system_w"] == 700 * 1.7 and mine["energy_mwh"] == pytest.approx(est["energy_mwh"] * 1190 / 1275)
    with pytest.raises(ValueError, match="band"):
        cost.train_estimate(1e12, 400.0, 8, as_gpu("h100_sxm"), ECON, low=500.0)


def test_sensitivity_rows_sorted_by_swing():
    rows = cost.training_sensitivity(15e12, 400.0, 16384, as_gpu("gb200"), ECON, low=320.0, high=460.0)
    names = [r["input"] for r in rows]
    assert set(names) == {"tokens_per_s_per_gpu", "tokens", "usd_per_gpu_hour", "pue", "utilization",
                          "system_w", "gpus"}
    swings = [r["swing"] for r in rows]
    assert swings == sorted(swings, reverse=True)
    by = {r["input"]: r for r in rows}
    base = by["tokens"]["output_base"]
    assert by["tokens"]["output_high"] > base > by["tokens"]["output_low"]  # more tokens, more cost
    assert by["tokens_per_s_per_gpu"]["output_low"] > base > by["tokens_per_s_per_gpu"]["output_high"]
    assert by["gpus"]["swing"] == 0.0  # cluster size does not change cost at fixed per-GPU throughput
    days = cost.training_sensitivity(15e12, 400.0, 16384, as_gpu("gb200"), ECON, low=320.0, high=460.0, output="days")
    d = {r["input"]: r for r in days}
    assert d["gpus"]["output_low"] == pytest.approx(2 * d["gpus"]["output_base"], rel=1e-3)
    assert d["usd_per_gpu_hour"]["swing"] == 0.0
    # with a throughput model for other cluster sizes, cluster size moves cost too
    slower = cost.training_sensitivity(15e12, 400.0, 16384, as_gpu("gb200"), ECON, low=320.0, high=460.0,
                                       tps_at_gpus=lambda n: 400.0 * (16384 / n) ** 0.05)
    assert {r["input"]: r for r in slower}["gpus"]["swing"] > 0
    # system power +-15% moves energy by +-15%; a goodput that falls with size stretches days at 2x GPUs
    energy = {r["input"]: r for r in cost.training_sensitivity(15e12, 400.0, 16384, as_gpu("gb200"), ECON, low=320.0,
                                                                high=460.0, output="energy_mwh")}
    assert energy["system_w"]["high_change"] == pytest.approx(0.15) and energy["system_w"]["low_value"] == pytest.approx(
        0.85 * 132e3 / 72)
    fail = cost.training_sensitivity(15e12, 400.0, 16384, as_gpu("gb200"), ECON, low=320.0, high=460.0, output="days",
                                     goodput_at_gpus=lambda n: 0.5)
    assert {r["input"]: r for r in fail}["gpus"]["high_change"] == pytest.approx(2 * 0.5 - 1)  # half the days, / 0.5


def test_generic_sensitivity_rejects_unknown_inputs():
    with pytest.raises(ValueError, match="not an input"):
        cost.sensitivity(lambda x: x["a"], {"a": 1.0}, {"b": (0.0, 2.0)})
    rows = cost.sensitivity(lambda x: x["a"] * x["b"] ** 2, {"a": 1.0, "b": 1.0}, {"a": (0.5, 1.5), "b": (0.5, 1.5)})
    assert rows[0]["input"] == "b"
