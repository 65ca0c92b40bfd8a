"""Which GPU is the cheapest, and when the model cannot tell: ``decision.cheapest_choice``.

Kimi K2's two cheapest Blackwell GPUs, GB200 and GB300, once cost the same within 0.4%, far
inside the band of a ratio of two predictions, and a small model change flipped the summary's
"cheapest Blackwell" from GB300 (3.23 days) to GB200 (3.95 days). A cost ratio whose band
(``plan.cost_ratio_curve``, ``plan.ratio_band``) holds 1 is a tie: every sentence and table that
names the cheapest names the GPUs tied with their days and cost, and the one case the numbers
need is the fastest of them, whichever is a fraction of a percent cheaper. Rows are constructed
(throughputs set by hand) so that the cost ratio is exactly what each test needs."""
from __future__ import annotations

import pytest
import yaml

from scaletax import ROOT
from scaletax.inputs import hardware
from scaletax.model import efficiency
from scaletax.render.tables import fmt
from scaletax.chapters import decision as d
from scaletax.chapters import summary as s

DEFAULT = yaml.safe_load((ROOT / "data" / "scenarios" / "default.yaml").read_text())
DENSE = "megatron_1t"
BASE_TPS = 800.0  # tokens/s per GPU of GB200 NVL72 in the constructed rows


@pytest.fixture(scope="module")
def plan() -> d.Plan:
    return d.Plan.from_params(
        name="ties", models=[DENSE], gpus=["h200_sxm", "gb200", "gb300"], training_tokens=DEFAULT["training"]["tokens"],
        training_global_batch_tokens=DEFAULT["training"]["global_batch_tokens"], training_precision="fp8",
        training_precisions=["bf16", "fp8"], cluster_sizes=[4096], cluster_gpus=4096, cluster_target_days=90,
        economics_prices=DEFAULT["economics"]["prices"], economics_energy=DEFAULT["economics"]["energy"],
        economics_usd_per_mwh=80, comparisons=DEFAULT["comparisons"], cluster_goodput=1.0,
        economics_price_includes_power=False, cluster_reliability=DEFAULT["cluster"]["reliability"],
        economics_ownership=DEFAULT["economics"].get("ownership"))


def _per_hour(plan: d.Plan, gpu: str) -> float:
    """Price plus electricity per GPU-hour: cost per token is this over the throughput."""
    return plan.price(gpu) + plan.energy_usd_per_gpu_hour(hardware.get(gpu))


def constructed(plan: d.Plan, costs: dict[str, float]) -> list[dict]:
    """Decision rows of ``DENSE`` on the plan's cluster whose cost is ``costs[gpu]`` times GB200's
    (throughput set to give it; band ±10% on every GPU, so a ratio's corners are the ratio)."""
    rows = []
    for g, c in costs.items():
        tps = BASE_TPS * _per_hour(plan, g) / _per_hour(plan, "gb200") / c
        rows.append({"model": DENSE, "model_name": d.model_name(DENSE), "gpu": g, "label": d.gpu_label(g),
                     "gpus": plan.cluster_gpus, "precision": plan.run_precision(g), "fits": True, "message": None,
                     "layout": "constructed", "announced": hardware.get(g).announced, "family": hardware.get(g).family,
                     "tps": tps, "tps_low": 0.9 * tps, "tps_high": 1.1 * tps, "mfu": None,
                     "price": plan.price(g), "price_assumed": plan.price_assumed(g), "price_basis": plan.price_basis(g)})
    return d.economics(rows, plan)


def by_gpu(rows: list[dict]) -> dict[str, dict]:
    return {r["gpu"]: r for r in rows}


def brief(r: dict) -> str:
    return f"{fmt(r['days'])} days, ${fmt(r['cost_usd'] / 1e6)}M"


def test_a_cost_ratio_inside_the_band_is_a_tie_named_with_both_gpus(plan):
    """GB300 costs 0.4% more than GB200: the band of their cost ratio holds 1, so both are named
    with their days and cost, and GB300 (the faster) is the case the numbers use."""
    rows = constructed(plan, {"h200_sxm": 2.0, "gb200": 1.0, "gb300": 1.004})
    r = by_gpu(rows)
    assert r["gb300"]["cost_usd"] / r["gb200"]["cost_usd"] == pytest.approx(1.004)
    c = d.cheapest_choice(plan, rows, DENSE, d.blackwell_ids(plan.gpus))
    assert c["lowest"]["gpu"] == "gb200" and [x["gpu"] for x in c["tied"]] == ["gb200", "gb300"]
    assert c["row"]["gpu"] == "gb300" and c["rule"] == "faster"
    assert r["gb300"]["days"] < r["gb200"]["days"]
    w = efficiency.default_band().ratio_spread  # the band of a ratio of two predictions
    q = c["ratios"]["gb300"]
    assert (q["ratio"], q["ratio_low"], q["ratio_high"]) == pytest.approx((1.004, 1.004 / (1 + w), 1.004 * (1 + w)))
    assert q["ratio_low"] < 1 < q["ratio_high"]
    sentence = ("the cheapest Blackwell is a tie within the model's band between GB200 NVL72 and GB300 NVL72 "
                "(cost 1.00x GB200 NVL72's); the report uses the faster, GB300 NVL72")
    assert s.tie_sentence(c, "Blackwell") == sentence
    # the summary: the headline case is GB300, its sentence and table name GB200 too
    h = s.headline(plan, rows)
    it = h["models"][0]
    assert it["blackwell"]["gpu"] == "gb300" and it["hopper"]["gpu"] == "h200_sxm"
    assert it["speedup"] == pytest.approx(r["gb300"]["tps"] / r["h200_sxm"]["tps"])
    text = s.summary_model_sentence(it, plan)
    assert text.endswith("; " + sentence) and "Hopper is a tie" not in text
    t = s.headline_table(h)[0]
    assert t["blackwell"] == f"GB300 NVL72, tied on cost with GB200 NVL72 ({brief(r['gb200'])})"
    assert t["hopper"] == "H200 SXM" and t["blackwell_id"] == "gb300"
    # the decision chapter: the cheapest shipping GPU over all families, the same tie
    assert s.table_sentence(rows, plan) == (
        f"GPT 1T trains fastest on GB300 NVL72, in {r['gb300']['days']:.0f} days ({r['gb300']['days_low']:.0f}–"
        f"{r['gb300']['days_high']:.0f}), and " + sentence.replace("cheapest Blackwell", "cheapest shipping GPU"))


def test_which_of_two_tied_gpus_is_a_fraction_cheaper_does_not_move_the_pick(plan):
    """The flip that prompted this: GB300 0.4% cheaper than GB200 instead of 0.4% dearer. The
    lowest cost swaps, the tie and the case the numbers use do not."""
    dearer = d.cheapest_choice(plan, constructed(plan, {"gb200": 1.0, "gb300": 1.004}), DENSE)
    cheaper = d.cheapest_choice(plan, constructed(plan, {"gb200": 1.0, "gb300": 0.996}), DENSE)
    assert (dearer["lowest"]["gpu"], cheaper["lowest"]["gpu"]) == ("gb200", "gb300")
    assert dearer["row"]["gpu"] == cheaper["row"]["gpu"] == "gb300"
    assert {x["gpu"] for x in dearer["tied"]} == {x["gpu"] for x in cheaper["tied"]} == {"gb200", "gb300"}


def test_a_cost_ratio_beyond_the_band_names_one_cheapest_gpu(plan):
    """GB300 costs 1.5x GB200's, far beyond the band: GB200 is the cheapest, alone, with no tie
    wording anywhere."""
    rows = constructed(plan, {"h200_sxm": 2.0, "gb200": 1.0, "gb300": 1.5})
    r = by_gpu(rows)
    c = d.cheapest_choice(plan, rows, DENSE, d.blackwell_ids(plan.gpus))
    assert c["row"]["gpu"] == c["lowest"]["gpu"] == "gb200"
    assert [x["gpu"] for x in c["tied"]] == ["gb200"] and c["ratios"] == {} and c["rule"] is None
    assert s.tie_sentence(c, "Blackwell") == "" and s.tied_with_text(c) == ""
    h = s.headline(plan, rows)
    it = h["models"][0]
    assert it["blackwell"]["gpu"] == "gb200"
    assert "tie" not in s.summary_model_sentence(it, plan)
    assert s.headline_table(h)[0]["blackwell"] == "GB200 NVL72"
    g = r["gb200"]  # also the fastest here
    assert s.table_sentence(rows, plan) == (
        f"GPT 1T trains fastest on GB200 NVL72, in {g['days']:.0f} days ({g['days_low']:.0f}–"
        f"{g['days_high']:.0f}), and cheapest on GB200 NVL72, for ${g['cost_usd'] / 1e6:,.0f}M "
        f"({g['cost_usd_low'] / 1e6:,.0f}–{g['cost_usd_high'] / 1e6:,.0f})")


def test_no_price_means_no_tie_and_the_fastest_case():
    rows = [{"model": DENSE, "gpu": g, "tps": t, "days": 100 / t, "announced": False, "cost_usd": None}
            for g, t in (("gb200", 1.0), ("gb300", 2.0))]
    c = d.cheapest_choice(None, rows, DENSE)
    assert c["row"]["gpu"] == "gb300" and len(c["tied"]) == 1 and c["rule"] is None
    assert d.cheapest_choice(None, rows, "kimi_k2") is None


@pytest.mark.parametrize("costs", [{"h200_sxm": 2.0, "gb200": 1.0, "gb300": 1.004},
                                   {"h200_sxm": 2.0, "gb200": 1.0, "gb300": 1.5},
                                   {"h200_sxm": 1.0, "gb200": 1.004, "gb300": 1.3}],
                         ids=["blackwell-tie", "no-tie", "hopper-cheapest-tie"])
def test_summary_and_decision_name_the_same_cheapest(plan, costs):
    """One answer: the summary's headline cases, the decision chapter's sentence, the owning
    table, the GPUs for the target and the sensitivity all use ``cheapest_choice``'s case."""
    rows = constructed(plan, costs)
    pick = d.cheapest_choice(plan, rows, DENSE, d.blackwell_ids(plan.gpus))["row"]["gpu"]
    overall = d.cheapest_choice(plan, rows, DENSE)
    h = s.headline(plan, rows)
    assert h["models"][0]["blackwell"]["gpu"] == pick
    assert h["models"][0]["blackwell_choice"] == d.cheapest_choice(plan, rows, DENSE, d.blackwell_ids(plan.gpus))
    assert [c["row"]["gpu"] for c in d.headline_cases(plan, rows)] == ["h200_sxm", pick]
    assert {r["gpu"] for r in s.deadline_rows(plan, h) if r["gpu"] != "h200_sxm"} == {pick}
    assert [r["gpu"] for r in d.own_rent_rows(plan, rows)] == ["h200_sxm", pick]
    assert {r["gpu"] for r in d.tornado_rows(plan, rows)} == {overall["row"]["gpu"]} == {d.cheapest(plan, rows, DENSE)["gpu"]}
    tie = s.tie_sentence(overall, "shipping GPU")
    text = s.table_sentence(rows, plan)
    if tie:
        assert text.endswith(", and " + tie)
    else:
        assert f"cheapest on {overall['row']['label']}," in text
