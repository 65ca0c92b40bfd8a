"""One question, one answer: every chapter function that reports a best layout for a (model,
GPU, GPU count, precision) reports the layout and step time of ``plan.fastest`` for it (issue 11):
``search.search`` in the measured MoE span (issue 34), the plain search for a dense model.

Reference case: the 1T dense model on 16,384 H100 in FP8 at 16M tokens per step, where the
communication chapter once had its own search (TP8 PP32 DP64 VP4 at 6.52 s) beside the one the
decision chapter and the summary use (TP8 PP16 DP128 VP8 MBS2 ZeRO-2 selective at 6.40 s).
"""
from __future__ import annotations

import dataclasses

import pytest

from scaletax.inputs import models
from scaletax.inputs.layout import label
from scaletax.model import plan as planning
from scaletax.model import search
from scaletax.chapters import communication as cs
from scaletax.chapters import decision as d
from scaletax.report.chapters import default_parameters

from objects import as_gpu, as_recipe

BATCH = 16 * 2**20
CASES = [("megatron_1t", "h100_sxm", 16384, "fp8"), ("kimi_k2", "gb200", 16384, "fp8"),
         ("megatron_1t", "gb200", 4096, "fp8")]


def _plan(model_id, gpu, n, precision) -> d.Plan:
    p = default_parameters("decision")  # the default scenario's prices, energy and comparisons
    p.update(name="t", models=[model_id], gpus=[gpu], training_tokens=1e13, training_global_batch_tokens=BATCH,
             training_precision=precision, training_precisions=[precision], cluster_gpus=n, cluster_sizes=[n],
             cluster_target_days=90.0)
    return d.Plan.from_params(**p)


@pytest.fixture(scope="module", params=CASES, ids=[f"{m}-{g}-{n}" for m, g, n, _ in CASES])
def case(request):
    mid, gpu, n, prec = request.param
    # the one search every chapter runs: plan.fastest (the search inside the measured MoE span)
    res = planning.fastest(models.get(mid), as_gpu(gpu), as_recipe(prec), n, BATCH)
    assert res.fits
    return mid, gpu, n, prec, res


def test_communication_chapter_reports_the_search(case):
    mid, gpu, n, prec, res = case
    (row,) = cs.tax_rows([mid], [gpu], [n], batch_tokens=BATCH, precision=prec)
    assert row["layout"] == label(res.best, models.get(mid))
    assert row["t_step"] == pytest.approx(res.metrics["step_s"], rel=1e-12)
    assert row["t_exposed"] == pytest.approx(res.metrics["exposed_comm_s"], rel=1e-12)


def test_decision_and_summary_report_the_search(case):
    mid, gpu, n, prec, res = case
    d.clear_cache()
    row = d.outcome(_plan(mid, gpu, n, prec), mid, gpu)
    assert row["precision"] == prec
    assert row["layout"] == label(res.best)
    assert row["step_s"] == pytest.approx(res.metrics["step_s"], rel=1e-12)
    assert row["tps"] == pytest.approx(res.metrics["tokens_per_s_per_gpu"], rel=1e-12)


def test_nvl72_domains_are_the_search_with_that_domain():
    mid, gpu, n = "megatron_1t", "gb200", 4096
    rows = cs.domain_rows([mid], gpu, [n], (8, 72), batch_tokens=BATCH)
    for r in rows:
        res = search.search(models.get(mid), as_recipe("fp8"), as_gpu(gpu), n, tokens_per_step=BATCH, pareto=False,
                            space=search.SearchSpace(domain=r["domain"]))
        assert r["layout"] == label(res.best, models.get(mid))
        assert r["t_step"] == pytest.approx(res.metrics["step_s"], rel=1e-12)


def test_summary_nvl72_tax_is_the_search_with_each_domain():
    from scaletax.chapters import summary as s

    plan = _plan("megatron_1t", "h100_sxm", 4096, "fp8")
    plan = dataclasses.replace(plan, gpus=("h100_sxm", "gb200"))
    tax = s.nvl72_tax(plan)
    assert tax["gpu"] == "gb200" and len(tax["pairs"]) == 1
    p = tax["pairs"][0]
    res = {dom: search.search(models.get("megatron_1t"), as_recipe("fp8"), as_gpu("gb200"), 4096, tokens_per_step=BATCH, pareto=False,
                              space=search.SearchSpace(domain=dom)) for dom in (8, 72)}
    assert p["layout_small"] == label(res[8].best, models.get("megatron_1t"))
    assert p["layout_large"] == label(res[72].best, models.get("megatron_1t"))
    assert p["speedup"] == pytest.approx(res[8].metrics["step_s"] / res[72].metrics["step_s"], rel=1e-12)
    # and the communication chapter's NVL72 table holds the same pair
    (pair,) = cs.nvl72_rows(cs.domain_rows(["megatron_1t"], "gb200", [4096], (8, 72), batch_tokens=BATCH))
    assert pair["layout_small"] == p["layout_small"] and pair["speedup"] == pytest.approx(p["speedup"], rel=1e-12)


def test_memory_chapter_fit_is_the_search_with_its_space():
    from scaletax.chapters import memory as ms

    m = models.get("megatron_1t")
    seqs = ms.batch_sequences(m, BATCH)
    (row,) = ms.fit_map_rows(["megatron_1t"], ["h100_sxm"], [16384], "fp8", BATCH,
                             min_rows=ms.min_gpus_rows(["megatron_1t"], ["h100_sxm"], "fp8", BATCH))
    res = search.search(m, as_recipe("fp8"), as_gpu("h100_sxm"), 16384, gbs=seqs, space=ms.SPACE, pareto=False)
    assert row["layout"] == res.best and row["memory_gib"] == pytest.approx(res.metrics["memory_gib"])
    # the same search with the default space gives the communication chapter's fastest layout
    (fast,) = cs.tax_rows(["megatron_1t"], ["h100_sxm"], [16384], batch_tokens=BATCH)
    assert fast["layout"] == label(search.search(m, as_recipe("fp8"), as_gpu("h100_sxm"), 16384, gbs=seqs, pareto=False).best, m)
