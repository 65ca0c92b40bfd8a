"""What a planner asks next (issue 36, phase 2), each from the planning module once: the days band
holds the goodput band; a cluster larger than the batch can use trains on the most of it that
runs; the largest cluster a power budget holds and its MW; own against rent for the headline
cases by hand; the fleets table for the default fleets and a fleet given with --set; the
cost-per-token ratio against the price ratio, whose break-even is the break-even table's."""
from __future__ import annotations

import math

import numpy as np
import pytest

from scaletax.chapters import decision as d
from scaletax.chapters import summary as s
from scaletax.inputs import hardware, models
from scaletax.model import cost, plan, power
from scaletax.report import chapters as toc
from scaletax.report.scenario import resolve

#: Dense models search in hundredths of a second; the default fleets and price pairs on them.
FAST = ("models=[megatron_1t]", "gpus=[h100_sxm,h200_sxm,b200,gb200]", "cluster.sizes=[1024,16384,100000]")
DENSE = models.get("megatron_1t")


def _plan(*overrides) -> d.Plan:
    return d.Plan.from_params(**toc.chapter("decision").parameters(resolve(overrides=[*FAST, *overrides])))


@pytest.fixture(scope="module")
def p():
    return _plan()


@pytest.fixture(scope="module")
def rows(p):
    return d.decision_rows(p, target=False)


# --- the days band holds the goodput band -----------------------------------------------------
def test_the_days_band_pairs_throughput_and_goodput_ends(p):
    row = d.economics([d.outcome(p, "megatron_1t", "gb200", 100_000)], p)[0]
    g, lo, hi = p.goodput_band_at(DENSE, 100_000)
    assert lo < g < hi and (hi - lo) > 0.3  # wide at 100,000 GPUs: the published rates differ 6x
    work = p.tokens / (100_000 * cost.SECONDS_PER_DAY)
    assert row["days"] == pytest.approx(work / (row["tps"] * g), rel=1e-12)
    assert row["days_low"] == pytest.approx(work / (row["tps_high"] * hi), rel=1e-12)
    assert row["days_high"] == pytest.approx(work / (row["tps_low"] * lo), rel=1e-12)
    assert row["cost_usd_high"] == pytest.approx(
        cost.run_costs(p.tokens, row["tps_low"], 100_000, p.system_w("gb200"), p.economics(),
                       usd_per_gpu_hour=p.price("gb200"), goodput=lo)["cost_usd"], rel=1e-12)
    # the planner's goodput has no band: the days band is the throughput's alone
    mine = _plan("cluster.goodput=0.9")
    r = d.economics([d.outcome(mine, "megatron_1t", "gb200", 100_000)], mine)[0]
    assert r["days_low"] == pytest.approx(work / (r["tps_high"] * 0.9), rel=1e-12)
    assert r["days_high"] == pytest.approx(work / (r["tps_low"] * 0.9), rel=1e-12)


def test_gpus_for_a_deadline_band_holds_the_goodput_band(p):
    t = plan.gpus_for_deadline(p, DENSE, hardware.get("h200_sxm"))
    g, lo, hi = p.goodput_band_at(DENSE, t["gpus"])
    days = p.target_days * cost.SECONDS_PER_DAY
    assert t["exact_low"] == pytest.approx(p.tokens / (t["tps_high"] * days * hi))
    assert t["exact_high"] == pytest.approx(p.tokens / (t["tps_low"] * days * lo))
    assert t["low"] <= t["gpus"] <= t["high"]


# --- a cluster larger than the batch can use ---------------------------------------------------
@pytest.mark.parametrize("n", [9, 100, 1025, 65536, 130_712])
def test_the_count_below_is_on_the_grid(n):
    k = plan.prev_count(n)
    assert k < n and plan.round_count(k) == k and plan.next_count(k) >= n


def test_a_cluster_the_batch_cannot_fill_trains_on_the_most_of_it_that_runs(p):
    h100 = hardware.get("h100_sxm")
    whole = plan.case(p, DENSE, h100, 130_712)
    assert not whole["fits"] and "global batch" in whole["message"]
    row = plan.runnable_case(p, DENSE, h100, 130_712)
    assert row["asked"] == 130_712 and row["fits"] and row["gpus"] < 130_712
    assert plan.round_count(row["gpus"]) == row["gpus"]
    k = plan.prev_count(130_712)  # every count of the grid between fails at the scenario's batch
    while k > row["gpus"]:
        assert not plan.case(p, DENSE, h100, k)["fits"], k
        k = plan.prev_count(k)
    same = plan.runnable_case(p, DENSE, h100, 16384)  # a count that runs is kept
    assert same["gpus"] == 16384 and same["tps"] == plan.case(p, DENSE, h100, 16384)["tps"]


# --- power ------------------------------------------------------------------------------------
def test_power_rows_quote_mw_for_the_cluster_and_100000_gpus(p):
    rows = {r["gpu"]: r for r in d.power_rows(p)}
    gb = rows["gb200"]
    # 100,000 GB200: 1,389 NVL72 racks of 132 kW (data/systems.csv), x PUE 1.2
    assert gb["top_gpus"] == 100_000 and gb["top_systems"] == 1389
    assert gb["top_it_mw"] == pytest.approx(1389 * 0.132) and gb["top_facility_mw"] == pytest.approx(1389 * 0.132 * 1.2)
    assert rows["h100_sxm"]["ref_facility_mw"] == pytest.approx(2048 * 10.2e-3 * 1.2)  # 16,384 H100 in DGX nodes
    for r in rows.values():  # the budget's cluster fits it, one more system does not
        per = r["per_system"] * r["w_per_gpu"] * p.pue / 1e6
        assert r["budget_gpus"] / r["per_system"] * per <= p.power_mw < (r["budget_gpus"] / r["per_system"] + 1) * per


def test_the_budget_rows_train_on_the_largest_cluster_that_fits(p):
    rows = d.budget_rows(p)
    assert {r["gpu"] for r in rows} == set(p.gpus)
    for r in rows:
        lc = power.largest_cluster(hardware.get(r["gpu"]), p.power_mw, p.pue)
        assert r["budget_gpus"] == lc["gpus"] and r["gpus"] <= r["budget_gpus"]
        assert r["facility_mw"] <= p.power_mw + 1e-9
        same = d.economics([d.outcome(p, r["model"], r["gpu"], r["gpus"])], p)[0]
        assert r["days"] == same["days"] and r["cost_usd"] == same["cost_usd"]  # one answer
    assert d.budget_rows(_plan("cluster.power_mw=null")) == []


# --- own against rent ---------------------------------------------------------------------------
def test_own_against_rent_for_the_headline_cases_by_hand(p, rows):
    out = d.own_rent_rows(p, rows)
    heads = [h["row"] for h in d.headline_cases(p, rows) if h["row"] is not None]
    assert [(r["model"], r["gpu"]) for r in out] == [(r["model"], r["gpu"]) for r in heads]
    for r in out:
        own = d.owned_price(p, r["gpu"])
        for b in ("", "_low", "_high"):
            assert r["owned_usd" + b] == pytest.approx(
                r["gpu_hours" + b] * (own["capital"] + own["facility"]) + r["energy_mwh" + b] * p.usd_per_mwh)
            assert r["rented_usd" + b] == r["cost_usd" + b]
        assert r["owned"] == pytest.approx(own["total"])
    # an all-in rental price includes power; the owned GPU still pays its electricity
    allin = _plan("economics.price_includes_power=true")
    o = plan.owned_price(allin, hardware.get("h100_sxm"))
    assert o["energy"] > 0 and o["rent_total"] == allin.price("h100_sxm")


def test_own_against_rent_says_when_no_headline_case_fits():
    small = _plan("cluster.gpus=64", "cluster.sizes=[64,1024]")
    rows = d.decision_rows(small, target=False)
    assert not any(r.get("tps") for r in rows)  # a 1T model fits on no 64 GPUs
    assert d.own_rent_rows(small, rows) == []
    assert s.own_rent_sentence([], small, rows) == ("no Hopper or Blackwell case fits on 64 GPUs, so there is no "
                                                    "case to own or rent")
    assert s.own_rent_sentence([]) == "the scenario has no ownership inputs for its headline GPUs (economics.ownership)"


# --- fleets -------------------------------------------------------------------------------------
def test_the_default_fleets_table(p):
    out = d.fleet_rows(p)
    assert len(out) == len(p.fleets) * len(p.models)
    by = {r["fleet_name"]: r for r in out}
    heq = by["H-equivalent fleet"]  # priced and timed as the H100 count it claims
    assert heq["equivalent"] and heq["gpu"] == "h100_sxm" and heq["gpus"] == 20_000
    assert heq["heq"] == heq["heq_low"] == heq["heq_high"] == 20_000
    assert heq["price"] == p.price("h100_sxm")
    front = by["Frontier run on GB200 NVL72"]
    ref = plan.case(p, DENSE, hardware.get("h100_sxm"), front["gpus"])
    q = plan.throughput_ratio(front, ref)
    assert front["heq"] == pytest.approx(100_000 * q["ratio"]) and front["heq_low"] < front["heq"] < front["heq_high"]
    assert front["fleet_facility_mw"] == pytest.approx(1389 * 0.132 * 1.2)
    same = d.economics([d.outcome(p, "megatron_1t", "gb200", front["gpus"])], p)[0]
    assert front["days"] == same["days"]
    table = s.fleet_table(out)
    assert all(not r["verified"] for r in out) and "unverified" in s.fleet_sentence(out, p)
    assert next(t for t in table if t["fleet"] == "H-equivalent fleet")["heq"] == "as reported"


def test_a_fleet_given_with_set_is_in_the_table():
    mine = _plan('fleets=[{name: "Our site", gpu: gb200, count: 8640, source: "our plan"}]')
    out = d.fleet_rows(mine)
    assert [(r["fleet_name"], r["gpu"], r["count"], r["source"]) for r in out] == [("Our site", "gb200", 8640, "our plan")]
    r = out[0]
    assert r["fits"] and r["gpus"] == 8640 and r["days"] > 0
    assert r["fleet_facility_mw"] == pytest.approx(120 * 0.132 * 1.2)  # 8,640 GPUs = 120 NVL72 racks
    assert s.fleet_table(out)[0]["reported"] == "8,640 GB200 NVL72"


def test_a_fleet_set_on_the_command_line_reaches_the_table(tmp_path):
    """``--set 'fleets=[...]'`` as the CLI parses it: the scenario it resolves (``scenario show``)
    gives the fleets table that fleet alone."""
    from conftest import run_cli

    fleet = 'fleets=[{name: "Our site", gpu: gb300, count: 8640, source: "our plan"}]'
    proc = run_cli(["scenario", "show", *(a for o in FAST for a in ("--set", o)), "--set", fleet], tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "shown.yaml").write_text(proc.stdout)
    mine = d.Plan.from_params(**toc.chapter("decision").parameters(resolve(tmp_path / "shown.yaml")))
    out = d.fleet_rows(mine)
    assert [(r["fleet_name"], r["gpu"], r["count"], r["gpus"]) for r in out] == [("Our site", "gb300", 8640, 8640)]
    assert s.fleet_table(out)[0]["reported"] == "8,640 GB300 NVL72"


# --- price ratio curves ---------------------------------------------------------------------------
def test_cost_ratio_curve_is_the_librarys_cost_per_token_and_its_break_even_the_tables(p, rows):
    pairs = d.price_pair_rows(p, rows)
    assert [(r["gpu"], r["ref"]) for r in pairs] == [("b200", "h200_sxm"), ("gb200", "h100_sxm")]
    be = {r["gpu"]: r for r in d.breakeven_rows(p, rows)}
    for r in pairs:
        c = r["curve"]
        a = next(x for x in rows if x["gpu"] == r["gpu"])
        b = next(x for x in rows if x["gpu"] == r["ref"])
        at = c["at"]
        assert at["ratio"] == pytest.approx(a["usd_per_mtok"] / b["usd_per_mtok"], rel=1e-12)
        assert at["ratio_low"] < at["ratio"] < at["ratio_high"]  # a ratio's band is never zero width
        # at the break-even price ratio the newer GPU's cost per token is the older one's (run_costs)
        xb = c["breakeven"] * b["price"]
        per_tok = cost.run_costs(p.tokens, a["tps"], a["gpus"], a["system_w"], p.economics(), usd_per_gpu_hour=xb,
                                 goodput=a["goodput"])["usd_per_mtok"]
        assert per_tok == pytest.approx(b["usd_per_mtok"], rel=1e-9)
        assert c["breakeven_low"] < c["breakeven"] < c["breakeven_high"]
        assert np.all(np.diff(c["ratio"]) > 0)  # dearer newer GPU, dearer token
        assert r["verdict"] == ("pays" if at["ratio_high"] < 1 else "does not pay" if at["ratio_low"] > 1 else "within band")
        if r["ref"] == "h200_sxm":  # the break-even table's B200 against H200 is this curve's
            t = be[r["gpu"]]
            assert t["breakeven"] == pytest.approx(c["breakeven"] * b["price"], rel=1e-12)
            assert t["verdict"] == r["verdict"]
    marks = [m for m in d.price_curve_chart_rows(pairs) if m["kind"] == "scenario"]
    assert {m["price_basis"] for m in marks} == {"scenario prices (assumed)"}  # B200 and GB200 prices are assumed
    mine = d.price_pair_rows(_plan("economics.prices.b200.usd_per_gpu_hour=3.1"), rows)
    assert mine[0]["price_basis"] == "your input"


def test_price_pairs_are_checked():
    from scaletax.report.scenario import ScenarioError

    with pytest.raises(ScenarioError, match="unknown GPU id 'h2000'"):
        resolve(overrides=["comparisons.price_pairs=[[b200, h2000]]"])
    with pytest.raises(ScenarioError, match="at least 2 items"):
        resolve(overrides=["comparisons.price_pairs=[[b200]]"])


# --- goodput against scale ----------------------------------------------------------------------
def test_goodput_rows_fall_with_the_count_and_the_table_shows_the_model(p):
    sc = d.scale_rows(p)
    g = s.goodput_chart_rows(p, d.scale_sizes(p))
    assert [r["gpus"] for r in g] == d.scale_sizes(p)
    vals = [r["goodput"] for r in g if r["model_id"] == "megatron_1t"]
    assert vals == sorted(vals, reverse=True) and vals[0] > vals[-1]
    for r in sc:  # the rows' goodput (the days' goodput) is the chart's, one value per (model, count)
        if r.get("goodput") is not None:
            c = next(x for x in g if (x["model_id"], x["gpus"]) == (r["model"], r["gpus"]))
            assert (r["goodput"], r["goodput_low"], r["goodput_high"]) == (c["goodput"], c["goodput_low"],
                                                                           c["goodput_high"])
    assert s.goodput_scale_sentence(p, [1024, 100_000]).startswith("for GPT 1T, goodput falls from 99% (97–99) "
                                                                   "on 1,024 GPUs to 63% (24–73) on 100,000 GPUs")
    assert s.goodput_scale_sentence(_plan("cluster.goodput=0.9"), [1024]) == (
        "goodput is your 90% at every size (cluster.goodput)")
    t = s.goodput_table(p, "megatron_1t", d.scale_sizes(p))
    assert [r["gpus"] for r in t] == d.scale_sizes(p)
    assert t[-1]["mtbf_h"] == pytest.approx(1 / (p.reliability_inputs().unexpected_per_gpu_hour * 100_000))
    parts = s.band_parts(sc, p)
    assert parts["good_low"] < parts["good_high"] and math.isfinite(parts["tps_pct"])
    assert s.band_parts(sc, _plan("cluster.goodput=0.9"))["good_low"] is None
