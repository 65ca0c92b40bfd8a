"""The planning module (scaletax.model.plan): GPUs for a deadline are monotone in the deadline
and the fewest of the counts tried; the H200 case of issue 33 is explained by the global batch
with the nearby batch offered; MFU has one definition; ratios carry bands of their own; plan,
predict and compare import nothing from the chapters."""
from __future__ import annotations

import ast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scaletax import ROOT
from scaletax.inputs import hardware, models, recipes
from scaletax.model import cost, efficiency, plan, search

TERMS = plan.Terms(tokens=15e12, batch_tokens=16 * 2**20, target_days=90.0, precision="fp8",
                   precisions=("bf16", "fp8", "mxfp8", "nvfp4"), pue=1.3, system_overhead=1.6, utilization=0.9,
                   usd_per_mwh=80.0, goodput=0.9, prices={"h200_sxm": {"usd_per_gpu_hour": 2.5}})
DENSE_1T = models.get("megatron_1t")
H200 = hardware.get("h200_sxm")


def _days(n: int) -> float:
    res = plan.fastest(DENSE_1T, H200, TERMS.recipe(H200), n, TERMS.batch_tokens)
    return cost.days_to_train(TERMS.tokens, res.metrics["tokens_per_s_per_gpu"], n, TERMS.goodput) if res.fits else 1e9


@pytest.mark.parametrize("n", [8, 9, 100, 1000, 1500, 12051, 99_999])
def test_the_count_grid(n):
    r = plan.round_count(n)
    assert r >= n and r % 8 == 0 and plan.next_count(r) > r
    assert (r - n) <= max(8, r / 16)  # resolution about 1/16 of the count


def test_gpus_for_the_target_meet_it_and_no_count_tried_below_does():
    t = plan.gpus_for_deadline(TERMS, DENSE_1T, H200)
    n = t["gpus"]
    assert _days(n) <= 90.0 and t["days"] == pytest.approx(_days(n))
    lo = plan.round_count(cost.gpus_for_days(TERMS.tokens, plan.PROBE_MARGIN * max(
        plan.fastest(DENSE_1T, H200, TERMS.recipe(H200), k, TERMS.batch_tokens).metrics["tokens_per_s_per_gpu"]
        for k in plan.PROBE_COUNTS), 90.0, TERMS.goodput))
    k = lo
    while k < n:  # every count of the grid from the probe bound up misses the deadline
        assert _days(k) > 90.0, k
        k = plan.next_count(k)
    assert t["low"] <= n <= t["high"]


def test_the_h200_case_of_issue_33_is_the_global_batch():
    """H200 trains GPT 1T in 76 days on 16,384 GPUs, yet needs 16,384 for 90 days where linear
    scaling says about 14,000 (15,872 when the search still tried ZeRO-2, which no calibration run
    used): the 8,192-sequence batch does not fill the interleaved pipeline on the counts in
    between; the answer says so and offers the nearby batch."""
    t = plan.gpus_for_deadline(TERMS, DENSE_1T, H200)
    assert t["gpus"] == 16384 and t["batch"] == 8192
    assert t["linear"] < t["gpus"] and t["nearby_gpus"] is not None and t["nearby_gpus"] < t["gpus"]
    gbs = t["nearby_batch"]
    assert abs(gbs / 8192 - 1) <= plan.NEARBY_BATCH_TOLERANCE
    alt = plan.fastest(DENSE_1T, H200, TERMS.recipe(H200), t["nearby_gpus"], gbs=gbs)
    assert cost.days_to_train(TERMS.tokens, alt.metrics["tokens_per_s_per_gpu"], t["nearby_gpus"], TERMS.goodput) <= 90
    assert alt.best.vp > 1  # the nearby batch fills the interleaved pipeline


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.floats(40.0, 200.0), st.floats(1.0, 2.5))
def test_a_longer_deadline_never_needs_more_gpus(days, factor):
    short = plan.gpus_for_deadline(TERMS, DENSE_1T, H200, days=days)
    long = plan.gpus_for_deadline(TERMS, DENSE_1T, H200, days=days * factor)
    assert long["gpus"] <= short["gpus"]


def test_the_counts_searched_do_not_depend_on_the_cluster_size_or_the_deadline_start(monkeypatch):
    """The probes are fixed counts: a cluster-size rebuild searches nothing new for the deadline."""
    seen: list[int] = []
    real = plan.fastest
    monkeypatch.setattr(plan, "fastest", lambda m, g, r, n, *a, **k: (seen.append(n), real(m, g, r, n, *a, **k))[1])
    plan.gpus_for_deadline(TERMS, DENSE_1T, hardware.get("gb200"))
    assert set(plan.PROBE_COUNTS) <= set(seen)
    first = sorted(set(seen))
    seen.clear()
    plan.gpus_for_deadline(TERMS, DENSE_1T, hardware.get("gb200"))
    assert sorted(set(seen)) == first


def test_mfu_is_one_definition():
    """The search's MFU (the step-time model's) is ``plan.mfu`` of its throughput."""
    for mid, gid in (("megatron_1t", "h100_sxm"), ("kimi_k2", "gb200"), ("llama31_405b", "b200")):
        m, g = models.get(mid), hardware.get(gid)
        rec = TERMS.recipe(g)
        res = plan.fastest(m, g, rec, 4096, TERMS.batch_tokens)
        assert res.metrics["mfu"] == pytest.approx(plan.mfu(res.metrics["tokens_per_s_per_gpu"], m, g, rec), rel=1e-12)
        row = plan.case(TERMS, m, g, 4096)
        assert row["mfu"] == pytest.approx(res.metrics["mfu"], rel=1e-12)
        assert row["mfu_low"] < row["mfu"] < row["mfu_high"]


def test_costs_count_goodput():
    row = plan.case(TERMS, DENSE_1T, H200, 16384)
    row["price"] = 2.5
    plan.add_costs([row], TERMS)
    productive = TERMS.tokens / (row["tps"] * 16384 * cost.SECONDS_PER_DAY)
    assert row["days"] == pytest.approx(productive / TERMS.goodput)
    assert row["gpu_hours"] == pytest.approx(TERMS.tokens / row["tps"] / 3600 / TERMS.goodput)
    assert row["days_low"] < row["days"] < row["days_high"]


def test_ratio_bands_are_never_zero_width():
    w = efficiency.default_band().ratio_spread  # the model's error on measured pairs (data/efficiency.yaml)
    assert w > 0
    lo, hi = plan.ratio_band(2.0, (2.0, 2.0))
    assert lo == pytest.approx(2.0 / (1 + w)) and hi == pytest.approx(2.0 * (1 + w))
    lo, hi = plan.ratio_band(2.0, (1.0, 4.0))  # wider corners are kept
    assert (lo, hi) == (1.0, 4.0)
    h100, h200 = (plan.case(TERMS, DENSE_1T, hardware.get(g), 8192) for g in ("h100_sxm", "h200_sxm"))
    q = plan.throughput_ratio(h200, h100)
    assert q["ratio"] == pytest.approx(h200["tps"] / h100["tps"])
    assert q["ratio_low"] < q["ratio"] < q["ratio_high"]


def test_a_gpu_count_ratio_is_a_ratio_of_counts():
    a = {"gpus": 120, "low": 104, "high": 136}
    b = {"gpus": 352, "low": 320, "high": 400}
    q = plan.gpu_count_ratio(a, b)
    assert q["ratio"] == 120 / 352  # not the throughput ratio behind it
    assert q["ratio_low"] < q["ratio"] < q["ratio_high"]
    assert plan.gpu_count_ratio({"gpus": None}, b) is None


def test_terms_take_the_scenario_values():
    from scaletax.report import chapters as toc

    t = plan.Terms.from_params(**toc.default_parameters("decision"))
    assert t.batch_tokens == 16 * 2**20 and t.target_days == 90
    # goodput: the scale model (no cluster.goodput in the default scenario), lower on more GPUs
    assert t.goodput is None and 0.5 < t.goodput_at(DENSE_1T, 65536) < t.goodput_at(DENSE_1T, 1024) < 1
    assert t.recipe(hardware.get("h100_sxm")).name == "fp8" and t.recipe(hardware.get("gb200")) == recipes.get("fp8")
    assert t.economics("gb200").usd_per_gpu_hour == t.price("gb200")


@pytest.mark.parametrize("name", ["plan.py", "predict.py", "compare.py"])
def test_the_commands_import_nothing_from_the_chapters(name):
    """``scaletax plan``, ``predict`` and ``compare`` answer from the model (plan, search, cost)."""
    path = ROOT / "lib" / "scaletax" / "report" / name
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            assert not (node.module or "").startswith("scaletax.chapters"), (name, node.module)
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("scaletax.chapters") for a in node.names), name


def test_no_module_outside_the_model_layer_searches_layouts_or_solves_for_counts():
    """Only the model layer calls the layout search's enumerations and count solvers."""
    banned = ("candidates", "candidate_grid", "min_gpus", "cached_min_gpus", "search_loop", "_choices")
    lib = ROOT / "lib" / "scaletax"
    hits = []
    for path in sorted(lib.rglob("*.py")):
        rel = path.relative_to(lib)
        if rel.parts[0] in ("model", "inputs"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "search" \
                    and node.attr in banned:
                hits.append(f"{rel}:{node.lineno} search.{node.attr}")
    assert hits == []
    assert search.SearchSpace().tp  # the module under test is the one imported


def test_every_term_on_the_method_page_names_a_function_that_exists():
    """The method page's model headings name the functions that compute their terms; each name
    resolves to one in the library (a renamed function fails here)."""
    import importlib
    import re

    text = (ROOT / "book" / "method.md").read_text(encoding="utf-8")
    section = text[text.index("## The models, term by term"):]
    named = 0
    for heading in re.findall(r"^### .*$", section, re.M):
        for name in re.findall(r"`([a-z_]+(?:\.[A-Za-z_]+)+)`", heading):
            parts, obj = name.split("."), None
            for pkg in ("scaletax.model", "scaletax.inputs", "scaletax"):
                for k in range(len(parts), 0, -1):  # the longest prefix that is a module
                    try:
                        obj = importlib.import_module(".".join([pkg, *parts[:k]]))
                        rest = parts[k:]
                        break
                    except ImportError:
                        continue
                if obj is not None:
                    break
            assert obj is not None, name
            for part in rest:
                obj = getattr(obj, part)  # an AttributeError names the missing function
            named += 1
    assert named >= 10
