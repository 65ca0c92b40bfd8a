"""The decision chapter's computations: plan, searched GPU counts, economics, the advantage
waterfall, break-even prices, H-equivalents, the Rubin claim, sensitivity, and robustness to
scenarios the default does not exercise (no Blackwell, no MoE, a cluster that is too small)."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import yaml

from scaletax import ROOT
from scaletax.inputs import hardware
from scaletax.inputs import models as catalog
from scaletax.inputs.layout import label
from scaletax.model import cost, search
from scaletax.chapters import decision as d
from scaletax.chapters import summary as s
from scaletax.report.chapters import chapter, default_parameters

from objects import as_gpu, as_recipe

DEFAULT = yaml.safe_load((ROOT / "data" / "scenarios" / "default.yaml").read_text())
# fast models for most tests: dense searches take ~0.01-0.05 s
DENSE, SMALL_MOE = "megatron_1t", "qwen3_235b_a22b"


def make(**kw) -> d.Plan:
    p = dict(name="test", models=[DENSE], gpus=["h100_sxm", "h200_sxm", "b200", "gb200"],
             training_tokens=DEFAULT["training"]["tokens"],
             training_global_batch_tokens=DEFAULT["training"]["global_batch_tokens"], training_precision="fp8",
             training_precisions=["bf16", "fp8", "mxfp8", "nvfp4"], cluster_sizes=[4096, 16384],
             cluster_gpus=4096, cluster_target_days=90, economics_prices=DEFAULT["economics"]["prices"],
             economics_energy=DEFAULT["economics"]["energy"], economics_usd_per_mwh=80,
             comparisons=DEFAULT["comparisons"], cluster_goodput=1.0,  # the formulas below: no lost time
             economics_price_includes_power=False, cluster_reliability=DEFAULT["cluster"]["reliability"])
    p.update(kw)
    return d.Plan.from_params(**p)


@pytest.fixture(scope="module")
def plan():
    return make()


@pytest.fixture(scope="module")
def rows(plan):
    return d.decision_rows(plan)


# --- plan ------------------------------------------------------------------------------------
def test_plan_from_params_and_precisions():
    p = make(training_precision="nvfp4")
    assert p.top == 16384 and p.price("gb200") == 4.5 and p.price_assumed("gb200") and not p.price_assumed("h100_sxm")
    assert p.run_precision("h100_sxm") == "fp8"  # Hopper has no NVFP4: its fastest native format
    assert p.run_precision("gb200") == "nvfp4"
    assert p.fastest_precision("gb200") == "nvfp4" and p.fastest_precision("h200_sxm") == "fp8"
    q = make(training_precision="bf16", training_precisions=["bf16"])
    assert q.run_precision("gb200") == q.fastest_precision("gb200") == "bf16"
    e = p.economics("gb200")
    assert (e.usd_per_gpu_hour, e.pue, e.usd_per_mwh) == (4.5, DEFAULT["economics"]["energy"]["pue"], 80.0)
    assert make(economics_prices={}).price("gb200") is None


# --- rows and economics ----------------------------------------------------------------------
def test_rows_match_search_and_cost(plan, rows):
    assert [(r["model"], r["gpu"]) for r in rows] == [(DENSE, g) for g in plan.gpus]
    for r in rows:
        res = search.search(catalog.get(DENSE), as_recipe(r["precision"]), as_gpu(r["gpu"]), plan.cluster_gpus,
                            tokens_per_step=plan.batch_tokens, pareto=False)
        assert r["tps"] == pytest.approx(res.metrics["tokens_per_s_per_gpu"])
        est = cost.train_estimate(plan.tokens, r["tps"], r["gpus"], as_gpu(r["gpu"]), plan.economics(r["gpu"]),
                                  low=r["tps_low"], high=r["tps_high"])
        for k in ("days", "gpu_hours", "energy_mwh", "cost_usd"):
            assert r[k] == pytest.approx(est[k]) and r[k + "_low"] == pytest.approx(est[k + "_low"])
            assert r[k + "_low"] <= r[k] <= r[k + "_high"]
        assert r["usd_per_mtok"] == pytest.approx(r["cost_usd"] / plan.tokens * 1e6)
        assert r["tokens_per_day_low"] <= r["tokens_per_day"] <= r["tokens_per_day_high"]
        assert r["tokens_per_day"] == pytest.approx(plan.tokens / r["days"])


def test_gpus_for_target_is_the_planning_modules(plan, rows):
    """The decision table's GPUs for the target are ``plan.gpus_for_deadline``'s (tests/test_planning.py
    holds it to the deadline, monotone); a shorter deadline needs more."""
    from scaletax.model import plan as planning

    for r in rows:
        t = planning.gpus_for_deadline(plan, catalog.get(DENSE), as_gpu(r["gpu"]), as_recipe(r["precision"]))
        assert (r["need"], r["need_low"], r["need_high"]) == (t["gpus"], t["low"], t["high"])
        assert r["need_low"] <= r["need"] <= r["need_high"]
    shorter = d.gpus_for_target(plan, DENSE, "gb200", days=30)
    assert shorter["gpus"] > d.gpus_for_target(plan, DENSE, "gb200")["gpus"]


def test_nofit_rows_say_how_many_gpus_are_needed():
    p = make(cluster_gpus=16, cluster_sizes=[16])
    rows = d.decision_rows(p, target=False)
    assert all(not r["fits"] and r["tps"] is None and r["days"] is None for r in rows)
    for r in rows:
        res = d.best(p, DENSE, r["gpu"], r["precision"], 16)
        assert r["layout"] == f"does not fit; needs at least {res.min_gpus:,}"
        assert f"needs at least {res.min_gpus:,}" in s.nofit_sentence(rows, p)
    assert "fits on none" in s.table_sentence(rows, p)
    assert all(t["need"] == "–" for t in s.time_table(rows))
    assert d.cost_time_chart_rows(rows, p) == []
    assert s.breakeven_summary(d.breakeven_rows(p, rows), ["gb200"]).startswith("no price comparison")
    assert d.tornado_rows(p, rows) == [] and d.tornado_chart_rows([]) == []


# --- the waterfall ---------------------------------------------------------------------------
def test_hybrid_swaps_only_the_named_fields():
    h = d.hybrid("h100_sxm", "gb200", ("hbm_gib", "nvlink_domain"), "x")
    g, t = hardware.get("h100_sxm"), hardware.get("gb200")
    assert (h.hbm_gib, h.nvlink_domain) == (t.hbm_gib, t.nvlink_domain)
    assert (h.bf16_tflops, h.family, h.nic_gbit_s) == (g.bf16_tflops, g.family, g.nic_gbit_s)
    assert h.id != g.id and hash(h) != hash(g)


@pytest.mark.parametrize("target", ["b200", "gb200"])
def test_waterfall_reaches_the_real_gpu(plan, target):
    assert d.waterfall_check(plan, DENSE, target) == pytest.approx(0.0, abs=1e-12)
    wf = d.waterfall(plan, DENSE, target)
    assert [r["step"] for r in wf] == ["base"] + [f[0] for f in d.FACTORS] + ["precision"]
    gains = [r["gain"] for r in wf[1:]]
    assert math.prod(gains) == pytest.approx(wf[-1]["cumulative"])
    assert sum(r["share"] for r in wf[1:]) == pytest.approx(1.0)
    assert wf[-1]["precision"] == "nvfp4" and wf[0]["precision"] == "fp8"
    assert wf[-1]["tps"] == pytest.approx(d.best(plan, DENSE, target, "nvfp4", plan.cluster_gpus)
                                          .metrics["tokens_per_s_per_gpu"])
    for r in wf:
        assert r["cumulative_low"] <= r["cumulative_high"]
    # the memory factor alone equals the first step (the base plus memory only)
    assert wf[1]["alone"] == pytest.approx(wf[1]["gain"])
    bars = d.waterfall_chart_rows(wf)
    assert [b["order"] for b in bars] == list(range(len(bars)))
    assert bars[-1]["end"] == pytest.approx(wf[-1]["cumulative"]) and bars[-1]["kind"] == "total"
    assert d.main_source(wf)["gain"] == max(gains)


def test_waterfall_targets_fall_back_to_the_catalog():
    assert d.waterfall_targets(make(gpus=["h100_sxm", "b200", "gb200", "gb300"])) == (["b200", "gb200"], True)
    assert d.waterfall_targets(make(gpus=["gb300"])) == (["gb300"], True)
    assert d.waterfall_targets(make(gpus=["h100_sxm"])) == (["b200", "gb200"], False)  # comparisons.heq_blackwell


# --- break-even, H-equivalents, the largest cluster, the Rubin claim ----------------------------
def test_breakeven_price_equalizes_cost_per_token(plan, rows):
    be = d.breakeven_rows(plan, rows)
    assert {r["gpu"] for r in be} == {"b200", "gb200"} and all(r["ref"] == "h200_sxm" for r in be)
    ref = next(r for r in rows if r["gpu"] == "h200_sxm")
    for r in be:
        x = next(q for q in rows if q["gpu"] == r["gpu"])
        e = lambda g: cost.energy_mwh(1.0, hardware.get(g).system_w, plan.utilization, plan.pue)
        per_tok = lambda price, g, tps: (price + e(g) * plan.usd_per_mwh) / (tps * 3600)
        assert per_tok(r["breakeven"], r["gpu"], x["tps"]) == pytest.approx(per_tok(2.50, "h200_sxm", ref["tps"]))
        assert r["ratio"] == pytest.approx(x["tps"] / ref["tps"])
        assert r["breakeven_low"] <= r["breakeven"] <= r["breakeven_high"]
        expect = ("pays" if r["price"] < r["breakeven_low"] else "does not pay" if r["price"] > r["breakeven_high"]
                  else "within band")
        assert r["verdict"] == expect
        assert (r["usd_per_mtok"] < r["ref_usd_per_mtok"]) == (r["price"] < r["breakeven"])


def test_hopper_reference_without_h200():
    p = make(gpus=["h100_sxm", "gb200"])
    rows = d.decision_rows(p, target=False)
    assert d.hopper_reference(p, rows, DENSE) == ("h100_sxm", True)
    q = make(gpus=["gb200"])
    assert d.hopper_reference(q, d.decision_rows(q, target=False), DENSE) == ("h200_sxm", False)


def test_heq_is_the_throughput_ratio(plan):
    rows = d.heq_rows(plan)
    assert len(rows) == len(plan.heq_blackwell) * 2 and plan.heq_blackwell == ("b200", "gb200")
    for r in rows:
        tb = d.best(plan, DENSE, r["gpu"], r["precision"], plan.cluster_gpus).metrics
        for h in plan.heq_hopper:
            th = d.best(plan, DENSE, h, r[f"{h}_precision"], plan.cluster_gpus).metrics
            assert r[h] == pytest.approx(tb["tokens_per_s_per_gpu"] / th["tokens_per_s_per_gpu"])
            assert r[f"{h}_low"] <= r[f"{h}_high"]
    assert "H20" in s.heq_summary(rows, plan.heq_hopper)


def test_top_rows_and_scaling(plan, rows):
    top = d.top_rows(plan, ["gb200"], base_rows=rows)
    r = top[0]
    assert r["gpus"] == plan.top and r["scaling"] == pytest.approx(
        r["tps"] / next(x for x in rows if x["gpu"] == "gb200")["tps"])
    seqs = search.target_sequences(catalog.get(DENSE), plan.batch_tokens)
    assert r["sequences_per_gpu"] == pytest.approx(seqs / plan.top, rel=0.1)
    assert f"{plan.top:,} GB200 NVL72" in s.top_summary(top, plan, ["gb200"])


def test_rubin_claim_counts_meet_the_target():
    p = make(models=[SMALL_MOE])
    c = d.rubin_claim(p)
    assert c["model"] == SMALL_MOE and c["in_scenario"] and c["claim"] == 0.25 and c["claim_cite"] == "nvidiarubin"
    for r in c["rows"]:
        res = d.best(p, SMALL_MOE, r["gpu"], r["precision"], r["gpus"])
        assert cost.days_to_train(p.tokens, res.metrics["tokens_per_s_per_gpu"], r["gpus"],
                                  p.goodput) <= p.target_days * (1 + 1e-9)
    new, old = c["rows"][0], c["rows"][1]
    assert c["ratio"] == new["gpus"] / old["gpus"]  # a ratio of GPU counts (issue 33), not of throughputs
    assert c["tps_ratio"] == pytest.approx(new["tps"] / old["tps"])
    assert c["ratio_low"] < c["ratio"] < c["ratio_high"] and c["tps_ratio_low"] < c["tps_ratio"] < c["tps_ratio_high"]
    assert "announced" in s.claim_sentence(c)
    # no MoE in the scenario: the catalog's trillion-parameter MoE, flagged
    assert d.first_moe([DENSE]) == ("kimi_k2", False)


# --- sensitivity -----------------------------------------------------------------------------
def test_tornado_rows(plan, rows):
    tor = d.tornado_rows(plan, rows)
    ref = d.cheapest(plan, rows, DENSE)
    assert {r["gpu"] for r in tor} == {ref["gpu"]}
    costs = [r for r in tor if r["output"] == "cost_usd"]
    assert {r["input"] for r in costs} == {"tokens_per_s_per_gpu", "tokens", "usd_per_gpu_hour", "pue", "utilization",
                                            "system_w", "gpus"}
    swings = [r["swing_pct"] for r in costs]
    # sorted by swing, largest first; inputs with the same swing (to rounding) in either order
    assert all(a >= b - 1e-9 * abs(b) for a, b in zip(swings, swings[1:]))
    tok = next(r for r in costs if r["input"] == "tokens")
    assert (tok["low_pct"], tok["high_pct"]) == pytest.approx((-25.0, 25.0))  # cost is linear in tokens
    days = [r for r in tor if r["output"] == "days"]
    assert next(r for r in days if r["input"] == "pue")["swing_pct"] == 0.0
    notes = d.tornado_notes(tor, rows, plan)
    assert 0 < notes["energy_share_min"] <= notes["energy_share_max"] < 100
    assert notes["energy_swing_max"] < notes["energy_share_max"]
    assert len(d.tornado_chart_rows(tor)) == 2 * len(tor)


# --- the summary and robustness --------------------------------------------------------------
def test_headline_and_sentences(plan, rows):
    h = s.headline(plan, rows)
    it = h["models"][0]
    assert it["hopper"]["gpu"] in ("h100_sxm", "h200_sxm") and it["blackwell"]["gpu"] in ("b200", "gb200")
    assert it["speedup"] == pytest.approx(it["blackwell"]["tps"] / it["hopper"]["tps"])
    assert it["precision_to"] == "nvfp4" and it["precision_gain"] > 1
    text = s.summary_model_sentence(it, plan)
    assert "from H100 to" in text and "days" in text
    assert "assumed prices for" in s.assumptions_sentence(plan)
    t = s.headline_table(h)[0]
    assert t["blackwell_cost"].endswith("*")  # assumed Blackwell price


def test_scenario_without_blackwell_or_hopper():
    p = make(gpus=["h100_sxm"])
    rows = d.decision_rows(p, target=False)
    be = d.breakeven_rows(p, rows)
    assert {r["gpu"] for r in be} == set(p.heq_blackwell) and not any(r["in_scenario"] for r in be)
    h = s.headline(p, rows)
    assert h["models"][0]["blackwell"] is None
    assert "a catalog GPU not in this scenario" in s.summary_model_sentence(h["models"][0], p)
    q = make(gpus=["gb300"])
    rq = d.decision_rows(q, target=False)
    assert s.headline(q, rq)["models"][0]["hopper"] is None
    assert d.breakeven_rows(q, rq)[0]["ref_in_scenario"] is False


def test_chapters_are_registered_with_their_parameters():
    for slug in ("decision", "summary"):
        ch = chapter(slug)
        src = ch.source.read_text()
        params = default_parameters(slug)
        assert set(params) == {k.replace(".", "_") for k in ch.reads}, slug
        assert params["comparisons"]["baseline"] == DEFAULT["comparisons"]["baseline"]
        assert set(ch.data) >= {"hardware.csv", "models.yaml", "efficiency.yaml", "references.yaml"}
        keys = re.findall(r'glue\("([a-z0-9_]+)"', src)
        prefix = "dec_" if slug == "decision" else "sum_"
        assert keys and all(k.startswith(prefix) for k in keys)
        used = set(re.findall(r"\{glue:text\}`([a-z0-9_]+)", src))
        assert used <= set(keys), used - set(keys)


def test_band_text_and_tables(rows):
    assert s.band_text(None, 1, 2) == "–" and s.band_text(1234.4, None, None) == "1,234"
    assert s.band_text(160.2, 141.0, 173.3) == "160 (141–173)"
    for tab in (s.time_table(rows), s.cost_table(rows)):
        assert len(tab) == len(rows) and all(len([k for k in r if k not in s.CASE_KEYS]) <= 10 for r in tab)
    assert np.all([("assumed" in r["price"]) == rows[i]["price_assumed"] for i, r in enumerate(s.cost_table(rows))])


def test_searches_are_shared_on_disk_by_exactly_their_inputs(tmp_path, monkeypatch):
    """With the build's result cache (scaletax.memo) a search runs once for all processes and
    builds; a price is not one of its inputs, a GPU's catalog fields are."""
    monkeypatch.setenv("SCALETAX_MEMO_DIR", str(tmp_path))
    runs = lambda: len(list(tmp_path.rglob("*.pkl")))  # noqa: E731 - one file per search that ran
    d.clear_cache()
    first = d.best(make(), DENSE, "h100_sxm", "fp8", 4096)
    d.clear_cache()  # a new process: only the disk cache is left
    again = d.best(make(), DENSE, "h100_sxm", "fp8", 4096)
    assert runs() == 1
    assert label(again.best) == label(first.best) and again.metrics == first.metrics
    d.clear_cache()
    before = d.decision_rows(make(), target=False)
    n = runs()
    assert n > 1
    prices = {g: {**p, "usd_per_gpu_hour": p["usd_per_gpu_hour"] * 2} for g, p in DEFAULT["economics"]["prices"].items()}
    d.clear_cache()
    after = d.decision_rows(make(economics_prices=prices), target=False)
    assert runs() == n  # every price changed: no search ran again
    assert [r["layout"] for r in after] == [r["layout"] for r in before]
    edited = hardware.get("h100_sxm").model_copy(update={"hbm_gib": 96.0})
    d.best(make(), DENSE, edited, "fp8", 4096)
    assert runs() == n + 1  # a GPU whose catalog fields changed is a new search
    d.clear_cache()


def test_a_price_that_changes_the_cheapest_gpu_searches_nothing(tmp_path, monkeypatch):
    """The tornado re-searches the cluster size of each model's cheapest case, which a price
    decides: every case a price could make the cheapest is searched at those sizes whatever the
    prices, so a price-only rebuild reads every search from the cache (memo's counters)."""
    from scaletax import memo

    monkeypatch.setenv("SCALETAX_MEMO_DIR", str(tmp_path))
    d.clear_cache()
    p0 = make()
    rows0 = d.decision_rows(p0, target=False)
    d.tornado_rows(p0, rows0)
    assert {c["gpu"] for c in d.price_candidates(rows0, DENSE)} == {"h100_sxm", "h200_sxm", "b200", "gb200"}
    cheap = {g: {**p, "usd_per_gpu_hour": 0.5 if g == "h200_sxm" else p["usd_per_gpu_hour"]}
             for g, p in DEFAULT["economics"]["prices"].items()}
    p1 = make(economics_prices=cheap)
    d.clear_cache()  # a new process: only the disk cache is left
    memo.STATS.clear()
    rows1 = d.decision_rows(p1, target=False)
    tor = d.tornado_rows(p1, rows1)
    assert d.cheapest(p0, rows0, DENSE)["gpu"] != "h200_sxm" and d.cheapest(p1, rows1, DENSE)["gpu"] == "h200_sxm"
    assert {r["gpu"] for r in tor} == {"h200_sxm"}
    assert sum(v["miss"] for v in memo.STATS.values()) == 0 and memo.STATS["scaletax.model.search.search"]["hit"] > 0
    d.clear_cache()


def test_an_mfu_above_every_measured_run_is_named_with_why():
    """Issue 33: GB300 implied ~46% FP8 MFU, above the best measured Blackwell FP8 run, through a
    power-per-FLOP factor no run checks; the decision chapter says so, and says nothing of a case
    within the measured range."""
    from scaletax.chapters import validation

    best = {(r["precision"].lower(), r["family"]): r["measured_mfu_max"] for r in validation.mfu_by_precision()}
    bw = best[("fp8", "blackwell")]
    row = {"model_name": "GPT 1T", "label": "GB300 NVL72", "gpu": "gb300", "precision": "fp8", "mfu": bw + 0.02}
    text = s.mfu_validity_sentence([row])
    assert text.startswith(f"GPT 1T on GB300 NVL72 runs at {100 * (bw + 0.02):.1f}% MFU in FP8, above the best "
                           f"measured Blackwell FP8 run ({100 * bw:.1f}%)")
    assert "power per peak FLOP" in text
    rubin = {**row, "label": "Rubin NVL72", "gpu": "rubin"}
    assert "Blackwell's, carried over with no run on it" in s.mfu_validity_sentence([rubin])
    hopper = {**row, "label": "H100 SXM", "gpu": "h100_sxm", "mfu": best[("fp8", "hopper")] - 0.01}
    assert s.mfu_validity_sentence([hopper, {**row, "mfu": bw}]).startswith("No case runs above")


def test_the_energy_sentence_says_one_percent_when_both_ends_round_alike_and_names_no_fit():
    """ "4 to 4%" says nothing; a scenario where no case fits has no share to state (no NaN crash)."""
    from scaletax.chapters import summary
    nan = float("nan")
    one = summary.energy_sentence({"energy_swing_max": 1.23, "energy_share_min": 3.8, "energy_share_max": 4.2})
    assert one == ("The energy inputs move it by at most 1.2%, because electricity is 4% of the cost of these "
                   "cases at the scenario's prices.")
    assert "3 to 5%" in summary.energy_sentence({"energy_swing_max": 1.0, "energy_share_min": 3.2,
                                                 "energy_share_max": 4.9})
    assert summary.energy_sentence({"energy_swing_max": nan, "energy_share_min": nan, "energy_share_max": nan}) == (
        "No case fits on the scenario's cluster, so there is no cost for the energy inputs to move.")
