"""Tests for scaletax.chapters.communication: the sweeps behind the communication chapter."""
from __future__ import annotations

import numpy as np
import pytest

from scaletax.inputs import models
from scaletax.inputs.layout import Layout, label
from scaletax.model import comm, efficiency, memory, perf, plan, search
from scaletax.model.comm import GROUPS, Overlap
from scaletax.model.topology import Topology
from scaletax.chapters import communication as cs

from objects import as_gpu, as_recipe

BATCH = 16 * 2**20
DENSE = models.get("megatron_1t")
MOE = models.get("kimi_k2")


# --- the best layout -----------------------------------------------------------
def test_best_layout_is_the_search_answer():
    """The chapter's best layout is search.search's, with its step time and per-group traffic."""
    row = cs.best_layout(DENSE, "h100_sxm", 4096, batch_tokens=BATCH)
    res = search.search(DENSE, as_recipe("fp8"), as_gpu("h100_sxm"), 4096, tokens_per_step=BATCH, pareto=False)
    assert row["layout"] == label(res.best, DENSE)
    assert row["t_step"] == pytest.approx(res.metrics["step_s"], rel=1e-12)
    lay = Layout(tp=row["tp"], pp=row["pp"], cp=row["cp"], dp=row["dp"], ep=row["ep"], etp=row["etp"],
                 vp=row["vp"], mbs=row["mbs"], gbs=row["gbs"], zero_stage=row["zero_stage"], recompute=row["recompute"])
    assert lay == res.best
    assert memory.fits(DENSE, lay, as_gpu("h100_sxm"), as_recipe("fp8"))[0]
    assert row["share"] == pytest.approx(row["t_exposed"] / row["t_step"])
    assert sum(row[f"{g}_exposed"] for g in GROUPS) == pytest.approx(row["t_exposed"])
    assert row["t_step"] == pytest.approx(row["t_compute"] + row["t_bubble"] + row["t_exposed"])
    # the traffic is step_traffic's for that layout on the GPU's topology
    st = comm.step_traffic(DENSE, lay, Topology.from_gpu(as_gpu("h100_sxm")), comm.WireFormat.for_recipe(as_recipe("fp8")))
    assert row["dp_nic_gb"] == pytest.approx(float(st.groups["dp"].nic_bytes[0]) / 1e9)
    assert row["t_comm"] == pytest.approx(float(st.seconds[0]))


def test_best_layout_on_another_domain_keeps_tp_aligned():
    row = cs.best_layout(DENSE, "gb200", 4096, batch_tokens=BATCH, domain=36)
    res = search.search(DENSE, as_recipe("fp8"), as_gpu("gb200"), 4096, tokens_per_step=BATCH, pareto=False,
                        space=search.SearchSpace(domain=36))
    assert row["domain"] == 36 and row["layout"] == label(res.best, DENSE)
    assert 36 % row["tp"] == 0


def test_best_layout_none_when_nothing_fits():
    assert cs.best_layout(DENSE, "h100_sxm", 8, batch_tokens=BATCH) is None


# --- sweeps ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tax():
    return cs.tax_rows(["megatron_1t", "kimi_k2"], ["h100_sxm", "gb200"], [1024, 16384, 100000], batch_tokens=BATCH)


def test_tax_rows_cover_the_grid(tax):
    assert len(tax) == 2 * 2 * 3
    assert all(r["fits"] for r in tax)
    assert {r["domain"] for r in tax} == {8, 72}


def test_tax_grows_with_cluster_size_at_fixed_batch(tax):
    for m in ("megatron_1t", "kimi_k2"):
        for g in ("h100_sxm", "gb200"):
            s = {r["gpus"]: r["share"] for r in tax if r["model"] == m and r["gpu"] == g}
            # against the small cluster; between large ones the layouts a count allows decide
            assert s[1024] < s[16384]
    # at 100,000 GPUs and 16M tokens a step (100,000 = 2^5 5^5) the global batch no longer fills the
    # pipeline: Kimi K2, inside the measured MoE span (>= 1,024 tokens per local expert, >= 1.8 layers
    # per chunk), runs a 25-stage pipeline over 2 micro-batches; GPT 1T (2,048-token sequences), inside
    # the measured context-parallel span (>= 2,048 tokens a rank, so no CP at one sequence a
    # micro-batch), 10 or 50 stages. Their bubble, not communication, takes the step
    for r in tax:
        if r["gpus"] == 100000:
            assert r["t_bubble"] > r["t_exposed"] and "CP" not in r["layout"], r
            if r["model"] == "kimi_k2":
                assert "PP25" in r["layout"]


def test_dp_rows_place_groups(tax):
    rows = cs.dp_rows(tax, 100000)
    assert {r["group"] for r in rows} == {"dp", "edp"}
    for r in rows:
        n_in, n_out = r["per_domain"], r["domains"]
        assert n_in * n_out >= r["size"] and n_in <= (72 if r["gpu"] == "gb200" else 8)
        assert r["exposed"] <= r["seconds"] + 1e-12
    s = cs.dp_summary(rows)
    assert s["rows"] == len(rows) and 0 <= s["spanning"] <= len(rows)


def test_tax_table_and_summaries(tax):
    t = cs.tax_table(tax, 1024, 100000)
    assert len(t) == 4 and all(r["share_top"] is not None for r in t)
    assert [r["layout_ref"] for r in t] == [r["layout"] for r in tax if r["gpus"] == 1024]
    ex = cs.extremes(tax, 16384)
    assert ex["min"] <= ex["max"]
    g = cs.growth(tax, 1024, 16384)
    assert g["min"] > 1
    grp = cs.group_rows(tax, 16384)
    for r in tax:
        if r["gpus"] == 16384:
            tot = sum(x["share"] for x in grp if x["model"] == r["model"] and x["gpu"] == r["gpu"])
            assert tot == pytest.approx(r["share"])
    dom = cs.dominant_group(tax, 100000)
    assert set(dom) == {"megatron_1t", "kimi_k2"} and all(g in GROUPS for g, _ in dom.values())
    assert "Kimi K2" in cs.model_sentence(tax, 16384, 100000)


def test_domain_sweep_never_slower_with_a_larger_domain():
    rows = cs.domain_rows(["megatron_1t", "kimi_k2"], "gb200", [16384], (8, 72), batch_tokens=BATCH)
    rel = cs.domain_relative(rows)
    for r in rel:
        assert r["vs_base"] <= 1.0 + 1e-9  # the search can always keep the 8-domain layout
    pairs = cs.nvl72_rows(rows)
    assert len(pairs) == 2 and all(p["speedup"] >= 1 for p in pairs)
    summ = cs.nvl72_summary(pairs)
    assert summ["gain_max"] >= summ["gain_min"] >= 0
    assert "Kimi K2" in cs.nvl72_sentence(summ)


def test_nvl72_rows_skip_missing_cells():
    rows = [{"model": "m", "gpus": 8, "domain": 8, "fits": False}, {"model": "m", "gpus": 8, "domain": 72, "fits": True}]
    assert cs.nvl72_rows(rows) == []
    assert cs.nvl72_sentence(cs.nvl72_summary([])) == "no model fits at both domain sizes"


def test_ep_rows_inside_vs_across_the_domain():
    rows = cs.ep_rows(MOE, ["h100_sxm", "gb200"], 16384, eps=(8, 64, 7), batch_tokens=BATCH)
    assert {r["ep_fixed"] for r in rows} == {8, 64}  # 7 does not divide the expert count
    by = {(r["gpu"], r["ep_fixed"]): r for r in rows}
    assert by[("h100_sxm", 64)]["ep_domains"] == 8 and by[("h100_sxm", 64)]["ep_nic_gb"] > 0
    assert by[("gb200", 64)]["ep_domains"] == 1 and by[("gb200", 64)]["ep_nic_gb"] == 0
    cmp = cs.ep_compare(rows)
    assert [lab for lab, *_ in cmp["inside"]] == ["GB200 NVL72"]
    assert [lab for lab, *_ in cmp["across"]] == ["H100 SXM"]
    assert len(cs.ep_table(rows)) == 4


def test_alltoall_rows_jump_when_leaving_the_domain():
    rows = cs.alltoall_rows(MOE, ["h100_sxm", "gb200"], [8, 16, 64, 128])
    t = {(r["gpu"], r["ep"]): r["seconds"] for r in rows}
    assert t[("h100_sxm", 16)] > 3 * t[("h100_sxm", 8)]
    assert t[("gb200", 64)] < 1.5 * t[("gb200", 8)]
    assert t[("gb200", 128)] > 3 * t[("gb200", 64)]
    m = comm.moe_dispatch_bytes(MOE.seq_len, MOE.moe_top_k, MOE.hidden, 1.0)
    assert rows[0]["message_mb"] == pytest.approx(m / 1e6)
    s = cs.a2a_summary(rows)
    assert s["max_where"] == "H100 SXM" and s["min_where"] == "GB200 NVL72"


# --- bandwidth curves and calibration --------------------------------------------------------
def test_busbw_rows_scopes_and_monotone():
    rows = cs.busbw_rows(["h100_sxm", "gb200"])
    assert {r["scope"] for r in rows} == set(cs.SCOPES)
    for g in ("h100_sxm", "gb200"):
        for op in ("all_reduce", "all_to_all"):
            for sc in cs.SCOPES:
                bw = [r["busbw_gb_s"] for r in rows if r["gpu"] == g and r["op"] == op and r["scope"] == sc]
                assert len(bw) == len(cs.MESSAGE_SIZES)
                assert all(b2 >= b1 - 1e-9 for b1, b2 in zip(bw, bw[1:]))
    big = {(r["gpu"], r["scope"]): r["busbw_gb_s"] for r in rows if r["op"] == "all_reduce"
           and r["message_bytes"] == cs.MESSAGE_SIZES[-1]}
    assert big[("h100_sxm", cs.SCOPES[0])] > 5 * big[("h100_sxm", cs.SCOPES[2])]


def test_calibration_rows_reproduce_the_fit_points():
    rows = cs.calibration_rows()
    ids = {r["point_id"] for r in rows}
    assert {"h100_nvlink_allreduce_ring", "ndr_ib_allreduce_internode"} <= ids
    assert not any("rdma" in i for i in ids)  # cross-domain DeepEP rows are not bus bandwidths
    for r in rows:
        if r["use"].startswith("fit:"):
            assert r["predicted_gb_s"] == pytest.approx(r["measured_gb_s"], rel=1e-3)
        assert r["scope"] in cs.SCOPES


def test_busbw_summary():
    s = cs.busbw_summary("h100_sxm")
    assert s["ratio"] == pytest.approx(s["in_gb_s"] / s["nic_gb_s"])
    assert 0.01 < s["half_mb"] < 1e3


# --- the published layout and prose helpers --------------------------------------------------
def test_405b_table():
    rows = cs.llama405b_traffic(t_compute=50.0)
    assert [r["group"] for r in rows] == list(GROUPS) + ["total"]
    total = rows[-1]
    for col in ("nvlink_gb", "nic_gb", "total_gb", "seconds"):
        assert total[col] == pytest.approx(sum(r[col] for r in rows[:-1]))
    by = {r["group"]: r for r in rows}
    assert by["tp"]["seconds"] > by["dp"]["seconds"] > 0 and by["pp"]["total_gb"] < by["tp"]["total_gb"]
    assert 0 < total["exposed_s"] < total["seconds"]
    # the catalog model is the brief's 405B
    m = models.get("llama31_405b")
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.ffn_hidden, m.vocab, m.seq_len) == \
        (126, 16384, 128, 8, 53248, 128256, 8192)


def test_llama_rows_match_the_step_time_model():
    rows, tc = cs.llama_rows("h100_sxm", "fp8")
    assert tc > 0 and rows[-1]["group"] == "total"
    assert {r["group"] for r in rows[:-1]} == {"tp", "cp", "pp", "dp"}
    lay = Layout(**cs.LLAMA405B_LAYOUT)
    st = perf.step_time(models.get("llama31_405b"), lay, as_recipe("fp8"), as_gpu("h100_sxm"))
    assert tc == pytest.approx(float(st.compute_s[0] + st.other_s[0]))
    ref = cs.llama405b_traffic("h100_sxm", precision="fp8", t_compute=tc, overlap=cs.applied_overlap())
    assert rows[-1]["exposed_s"] == pytest.approx(ref[-1]["exposed_s"])
    assert rows[-1]["total_gb"] == pytest.approx(ref[-1]["total_gb"])
    assert rows[-1]["exposed_s"] <= rows[-1]["seconds"]


def test_applied_overlap_is_the_calibrated_one():
    scaled = cs.applied_overlap()
    assert scaled.tp == pytest.approx(min(1.0, Overlap().tp * efficiency.default_efficiency().overlap_scale))


def test_step_times_at_the_largest_size_say_they_lie_beyond_the_measured_runs(tax):
    """Issue 33: the 100,000-GPU step times were in fig-comm-tax.csv only; the prose states them,
    fastest to slowest GPU per model, and how far past the largest measured runs they lie."""
    from scaletax.chapters import validation as vs
    from scaletax.inputs import runs

    cal = max(int(r["gpu_count"]) for r in runs.read_runs(runs.RUNS_CSV))
    checked = max(cal, *(int(r["gpu_count"]) for r in runs.read_runs(runs.HELDOUT_CSV)))
    assert vs.measured_gpus_max([runs.RUNS_CSV]) == cal and vs.measured_gpus_max() == checked
    assert 10_000 < cal < checked < 100_000  # the calibration's 11,616; Llama 3's held-out 16,384
    text = cs.step_range_sentence(tax, 100000, cal, checked)
    kimi = sorted((r for r in tax if r["model"] == "kimi_k2" and r["gpus"] == 100000), key=lambda r: r["t_step"])
    assert f"one step of Kimi K2 takes {1e3 * kimi[0]['t_step']:,.0f} ms ({kimi[0]['label']}) to " \
           f"{1e3 * kimi[-1]['t_step']:,.0f} ms ({kimi[-1]['label']})" in text
    assert f"{100000 / cal:.1f} times the largest calibration run ({cal:,} GPUs)" in text
    assert f"{100000 / checked:.1f} times the largest run the model is checked on at all ({checked:,} GPUs" in text
    # within the measured range nothing is said about extrapolation
    assert "largest" not in cs.step_range_sentence(tax, 1024, cal, checked)
    none = [{**r, "fits": False} for r in tax]
    assert "GPT 1T fits on no GPU type" in cs.step_range_sentence(none, 1024, cal, checked)


def test_prose_helpers_without_nvl72_or_moe():
    assert cs.nvl72_gpu(["h100_sxm", "b200"]) is None
    assert cs.sweep_gpu(["h100_sxm", "b200"]) == "b200"
    assert "none" in cs.nvl72_note(["h100_sxm"])
    assert cs.sweep_gpu(["h100_sxm", "gb300", "gb200"]) == "gb300"
    assert cs.first_moe(["megatron_1t"]) == models.MOE_1T
    assert cs.first_moe(["megatron_1t", "kimi_k2"]) == "kimi_k2"
    assert cs.eight_gpu(["gb200", "b200"]) == "b200"
    assert cs.sizes_with([4096, 1024], 16384) == [1024, 4096, 16384]


def test_the_growth_sentence_says_where_the_share_peaks(tax):
    """The share grows from the smallest size to the size where it grows most; a largest size that
    grows less is named with the reason (the bubble), so the sentence never says the share grows
    where it does not."""
    text = cs.growth_sentence(tax, [1024, 16384, 100000])
    g16, g100 = cs.growth(tax, 1024, 16384)["mean"], cs.growth(tax, 1024, 100000)["mean"]
    assert g16 > g100
    assert text == (f"From 1,024 GPUs the share grows {g16:.1f} times on average by 16,384 GPUs, and is "
                    f"{g100:.1f} times at 100,000: there the global batch no longer fills the pipeline, and the "
                    "bubble, not the communication, takes the rest of the step.")
    assert cs.growth_sentence(tax, [1024, 16384]) == f"From 1,024 GPUs the share grows {g16:.1f} times on average by 16,384 GPUs."
