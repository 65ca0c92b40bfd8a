"""Facility power: system power per GPU from data/systems.csv, IT and facility MW of a cluster in
whole systems, the largest cluster a budget holds, and energy from the same per-GPU power."""
from __future__ import annotations

import csv

import numpy as np
import pytest

from scaletax import DATA_DIR
from scaletax.inputs import hardware
from scaletax.model import cost, power

from objects import as_gpu
from scaletax.chapters import decision as d
from scaletax.report import chapters as toc
from scaletax.report.scenario import ScenarioError, resolve


def test_system_power_per_gpu_from_the_sourced_systems():
    # DGX H100 10.2 kW / 8; DGX B200 14.3 kW / 8; GB200 NVL72 132 kW / 72
    assert power.system_w(as_gpu("h100_sxm")) == pytest.approx(1275.0)
    assert power.system_w(as_gpu("b200")) == pytest.approx(14300 / 8)
    assert power.system_w(as_gpu("gb200")) == pytest.approx(132e3 / 72)
    assert hardware.get("gb200").non_gpu_w == pytest.approx(132e3 / 72 - 1200)
    # the planner's overhead over TDP replaces it
    assert power.system_w(as_gpu("h100_sxm"), 1.7) == pytest.approx(1190.0)
    with pytest.raises(ValueError, match="system_overhead: must be >= 1"):
        power.system_w(as_gpu("h100_sxm"), 0.5)


def test_megawatts_of_a_known_rack_and_of_100000_gpus():
    rack = power.cluster_power(as_gpu("gb200"), 72, pue=1.2)
    assert (rack["systems"], rack["gpus_bought"]) == (1, 72)
    assert rack["it_mw"] == pytest.approx(0.132) and rack["facility_mw"] == pytest.approx(0.1584)
    assert power.cluster_power(as_gpu("gb200"), 73, pue=1.2)["systems"] == 2  # racks are bought and powered whole
    big = power.cluster_power(as_gpu("gb200"), 100_000, pue=1.2)  # 1,388.9 racks -> 1,389
    assert (big["systems"], big["gpus_bought"]) == (1389, 100_008)
    assert big["it_mw"] == pytest.approx(1389 * 0.132) and big["facility_mw"] == pytest.approx(1389 * 0.132 * 1.2)
    dgx = power.cluster_power(as_gpu("h100_sxm"), 16384, pue=1.0)  # 2,048 DGX H100 nodes
    assert dgx["it_mw"] == pytest.approx(2048 * 10.2e-3)
    many = power.cluster_power(as_gpu("h100_sxm"), np.array([8, 9, 16384]), pue=1.2)
    assert list(many["systems"]) == [1, 2, 2048]


def test_the_largest_cluster_a_budget_holds():
    fit = power.largest_cluster(as_gpu("gb200"), 200.0, pue=1.2)
    assert fit["systems"] == int(200 / (0.132 * 1.2)) == 1262 and fit["gpus"] == 1262 * 72
    assert fit["facility_mw"] <= 200 < (fit["systems"] + 1) * 0.132 * 1.2
    small = power.largest_cluster(as_gpu("h100_sxm"), np.array([0.01, 10.0]), pue=1.2)
    assert list(small["systems"]) == [0, int(10 / (10.2e-3 * 1.2))]


def test_energy_and_megawatts_use_one_system_power():
    """One answer per question: the energy of a training hour and the megawatts of a cluster come
    from the same system power per GPU (the decision chapter's and `scaletax plan`'s)."""
    plan = d.Plan.from_params(**toc.chapter("decision").parameters(resolve()))
    for gid in plan.gpus:
        mw = d.cluster_power(plan, gid, 1)["w_per_gpu"]
        mwh_per_gpu_hour = cost.energy_mwh(1.0, plan.system_w(gid), plan.utilization, plan.pue)
        assert mwh_per_gpu_hour * 1e6 / (plan.utilization * plan.pue) == pytest.approx(mw) == pytest.approx(
            plan.economics(gid).system_w(hardware.get(gid))), gid


def test_every_system_row_has_a_power_source():
    rows = list(csv.DictReader((DATA_DIR / "systems.csv").open(encoding="utf-8")))
    cat = hardware.catalog()
    assert {r["gpu"] for r in rows} == {g for g in cat if not cat[g].variant_of}
    for g in (g for g in cat.values() if g.variant_of):  # a variant keeps its base part's non-GPU power
        base = cat[g.variant_of]
        assert (g.non_gpu_w, g.system, g.system_gpus) == (base.non_gpu_w, base.system, base.system_gpus), g.id
        assert g.system_w == g.tdp_w + base.non_gpu_w and g.power_source.startswith("ASSUMPTION"), g.id
    for r in rows:
        assert float(r["system_kw"]) * 1e3 >= int(r["gpus_per_system"]) * hardware.get(r["gpu"]).tdp_w, r["gpu"]
        assert r["power_source"].startswith("ASSUMPTION") or any(t in r["power_source"] for t in (".", "arXiv")), r["gpu"]
    assert [r["gpu"] for r in rows if r["power_source"].startswith("ASSUMPTION")] == ["h800_sxm", "h20"]


def test_your_gpu_keeps_its_bases_non_gpu_power_and_a_full_definition_needs_one():
    s = resolve(overrides=["gpus=[h100_sxm, {id: h100_500w, base: h100_sxm, tdp_w: 500}]",
                           "economics.prices.h100_500w={usd_per_gpu_hour: 2.0, source: quote, assumption: false}"])
    s.register()
    try:
        assert power.system_w(hardware.get("h100_500w")) == pytest.approx(500 + 575)  # the DGX's 575 W beyond each GPU's TDP
    finally:
        hardware.unregister()
    full = ("gpus=[{id: mine, name: Mine, label: Mine, family: hopper, status: shipping, nvlink_domain: 8, hbm_gib: 80, "
            "hbm_tb_s: 3.35, bf16_tflops: 989, fp8_tflops: 1979, native_mx: false, nvlink_gb_s_bidir: 900, "
            "nic_gbit_s: 400, tdp_w: 700, sources: my datasheet.pdf}]")
    price = "economics.prices.mine={usd_per_gpu_hour: 2.0, source: quote, assumption: false}"
    with pytest.raises(ScenarioError, match="gpus: mine has no system power: give non_gpu_w"):
        resolve(overrides=[full, price])
    assert resolve(overrides=[full, price, "economics.energy.system_overhead=1.8"]).economics.energy.system_overhead == 1.8
