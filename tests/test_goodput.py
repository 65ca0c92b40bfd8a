"""Goodput that depends on scale: the published interruption rates it starts from, Young's and
Daly's checkpoint intervals by hand, Daly's expected wall time, and the goodput the default
scenario gives from 1,024 to 100,000 GPUs."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaletax.inputs import failures, models
from scaletax.model import goodput
from scaletax.chapters import decision as d
from scaletax.report import chapters as toc
from scaletax.report.scenario import resolve


def _plan(*overrides):
    return d.Plan.from_params(**toc.chapter("decision").parameters(resolve(overrides=list(overrides))))


def test_llama3_rate_is_reproduced():
    # arXiv 2407.21783 Sec. 3.3.4: 419 unexpected (466 in all, 47 planned) in 54 days on 16,384 H100
    r = failures.get("llama3_405b")
    assert r.unexpected_per_gpu_hour == pytest.approx(419 / (54 * 24 * 16384))
    assert r.planned_per_gpu_hour == pytest.approx(47 / (54 * 24 * 16384))
    # one unexpected interruption every 3.09 hours on the job's 16,384 GPUs
    assert goodput.mtbf_s(16384, r.unexpected_per_gpu_hour) / 3600 == pytest.approx(54 * 24 / 419)


def test_meta_research_cluster_projections_are_reproduced():
    # arXiv 2410.21680: RSC-1's 6.50 failures per 1000 node-days (8-GPU nodes) project a mean time
    # to failure of 1.8 h at 16,384 GPUs and 0.23 h at 131,072 GPUs
    rate = failures.get("meta_rsc1").unexpected_per_gpu_hour
    assert rate == pytest.approx(6.50 / (1000 * 8 * 24))
    assert goodput.mtbf_s(16384, rate) / 3600 == pytest.approx(1.8, abs=0.05)
    assert goodput.mtbf_s(131072, rate) / 3600 == pytest.approx(0.23, abs=0.005)
    # the reports span the rates of the band: RSC-2 lowest, OPT-175B (35 manual + 70 automatic restarts in ~2 months) highest
    assert failures.rate_range() == (failures.get("meta_rsc2").unexpected_per_gpu_hour,
                                     failures.get("opt_175b").unexpected_per_gpu_hour)
    assert failures.get("opt_175b").unexpected_per_gpu_hour == pytest.approx(105 / (992 * 60 * 24))


def test_every_report_has_a_source_and_an_unknown_id_gets_a_hint():
    assert all(r.source and r.gpu_hours > 0 for r in failures.reports())
    with pytest.raises(KeyError, match="unknown failure report 'llama3' .did you mean 'llama3_405b'"):
        failures.get("llama3")


def test_young_and_daly_intervals_by_hand():
    # checkpoint 10 s, mean time between failures 1 h
    assert goodput.young_interval(10.0, 3600.0) == pytest.approx(math.sqrt(2 * 10 * 3600))  # 268.33 s
    x = 10 / 7200
    daly = math.sqrt(72000) * (1 + math.sqrt(x) / 3 + x / 9) - 10
    assert goodput.daly_interval(10.0, 3600.0) == pytest.approx(daly) == pytest.approx(261.70, abs=0.01)
    # a checkpoint longer than 2M: checkpoint every M (Daly 2006)
    assert goodput.daly_interval(5000.0, 2000.0) == 2000.0
    # Daly's wall time per unit of work by hand: M e^(R/M) (e^((tau+delta)/M) - 1) / tau
    assert goodput.wall_per_work(100.0, 10.0, 60.0, 1000.0) == pytest.approx(1000 * math.exp(0.06) * (math.exp(0.11) - 1) / 100)


@settings(max_examples=60, deadline=None)
@given(delta=st.floats(1.0, 600.0), mtbf=st.floats(1800.0, 400_000.0))
def test_dalys_interval_is_the_optimum_of_dalys_wall_time(delta, mtbf):
    """Daly's closed form sits at the minimum of his expected wall time (restart time does not move it)."""
    tau = goodput.daly_interval(delta, mtbf)
    grid = tau * np.linspace(0.5, 1.5, 2001)
    wall = goodput.wall_per_work(grid, delta, 300.0, mtbf)
    best = grid[np.argmin(wall)]
    assert best == pytest.approx(tau, rel=0.02)
    assert goodput.wall_per_work(tau, delta, 300.0, mtbf) == pytest.approx(wall.min(), rel=1e-5)


def test_goodput_parts():
    rel = goodput.Reliability(unexpected_per_gpu_hour=1e-5, planned_per_gpu_hour=2e-6, restart_s=600.0,
                              storage_bytes_per_s=2e12)
    b = goodput.breakdown(10_000, goodput.checkpoint_bytes(1e12), rel)
    # 14 bytes per parameter (bf16 weights + fp32 master weights + two fp32 Adam moments) at 2 TB/s
    assert goodput.CHECKPOINT_BYTES_PER_PARAM == 14 and b["checkpoint_s"] == pytest.approx(7.0)
    assert b["mtbf_h"] == pytest.approx(10.0)
    tau = goodput.daly_interval(7.0, 36000.0)
    no_planned = 1 / goodput.wall_per_work(tau, 7.0, 600.0, 36000.0)
    assert b["planned_share"] == pytest.approx(2e-6 * 10_000 * 600 / 3600)
    assert b["goodput"] == pytest.approx(no_planned * (1 - b["planned_share"]))
    # almost no failures: only checkpoints cost time
    quiet = goodput.Reliability(1e-12, 0.0, 600.0, 2e12)
    assert goodput.goodput(1024, 14e12, quiet) == pytest.approx(1.0, abs=1e-3)
    with pytest.raises(ValueError, match="no time to train"):
        goodput.goodput(10_000_000, 14e12, goodput.Reliability(1e-5, 1e-4, 3600.0, 2e12))
    with pytest.raises(ValueError, match="restart_s: must be a positive"):
        goodput.Reliability(1e-5, 0.0, 0.0, 2e12)


def test_default_scenario_goodput_falls_with_scale():
    plan = _plan()
    sizes = np.array([1024, 4096, 16384, 32768, 65536, 100_000])
    g = plan.goodput_at("megatron_1t", sizes)
    assert np.all(np.diff(g) < 0) and g[0] > 0.98 and g[-1] < g[0]
    assert float(plan.goodput_at("megatron_1t", 100_000)) < float(plan.goodput_at("megatron_1t", 1024))
    mid, lo, hi = plan.goodput_band_at("megatron_1t", sizes)
    assert np.all(lo < mid) and np.all(mid < hi)
    # the planner's goodput wins, at every size
    mine = _plan("cluster.goodput=0.95")
    assert float(mine.goodput_at("megatron_1t", 100_000)) == 0.95 and mine.goodput_band_at("kimi_k2", 1024) == (0.95,) * 3


def test_default_inputs_keep_llama3_above_the_90_percent_it_reported():
    """Llama 3 405B on 16,384 H100 had "higher than 90% effective training time" (arXiv 2407.21783
    Sec. 3.3.4): the model with the default restart and storage inputs and Llama 3's own rates agrees."""
    plan = _plan()
    assert plan.failure_report().id == "llama3_405b"
    g = float(plan.goodput_at(models.get("llama31_405b"), 16384))
    assert 0.90 < g < 0.97


def test_your_failure_rate_replaces_the_reports_and_widens_the_band():
    plan = _plan("cluster.reliability.failures_per_gpu_hour=1e-3")
    assert plan.reliability_inputs().unexpected_per_gpu_hour == 1e-3
    assert plan.reliability_inputs().unexpected_high == 1e-3
    assert float(plan.goodput_at("kimi_k2", 1024)) < float(_plan().goodput_at("kimi_k2", 1024))
    s = resolve(overrides=["cluster.reliability.failures_per_gpu_hour=1e-3"])
    assert s.cluster.reliability.failures_source == "your input (--set cluster.reliability.failures_per_gpu_hour=1e-3)"
