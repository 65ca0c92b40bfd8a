"""Tests for scaletax.chapters.communication: the sweeps behind the communication chapter."""
from __future__ import annotations

import numpy as np
import pytest

from scaletax import comm, hardware, memory, models
from scaletax.chapters import communication as cs
from scaletax.comm import GROUPS, Overlap
from scaletax.layout import Layout, LayoutArray

BATCH = 16 * 2**20
DENSE = models.get("megatron_1t")
MOE = models.get("kimi_k2")


# --- compute, bubble, batch ----------------------------------------------------------------
def test_compute_seconds_is_flops_over_rate():
    lay = LayoutArray.from_layouts([Layout(tp=8, pp=8, dp=16, gbs=1024)])
    g = hardware.get("h100_sxm")
    t = cs.compute_seconds(DENSE, lay, g, "fp8", efficiency=0.5)
    expect = DENSE.hardware_flops_per_token("none") * 1024 * DENSE.seq_len / 1024 / (g.peak_flops("fp8") * 0.5)
    assert t[0] == pytest.approx(expect)


def test_compute_seconds_counts_recompute():
    la = LayoutArray.from_arrays(tp=8, pp=8, dp=16, gbs=1024, recompute=np.array([0, 1, 2]))
    t = cs.compute_seconds(DENSE, la, "h100_sxm", "fp8")
    assert t[0] < t[1] < t[2]


def test_bubble_is_narayanan():
    la = LayoutArray.from_arrays(tp=1, pp=np.array([1, 4, 4]), dp=2, vp=np.array([1, 1, 2]), gbs=16)
    b = cs.bubble_seconds(la, 10.0)  # n_micro = 8
    assert b == pytest.approx([0.0, 3 / 8 * 10, 3 / 16 * 10])


def test_with_batch_rounds_to_whole_micro_batches():
    la = LayoutArray.from_arrays(tp=1, pp=1, dp=np.array([3, 1000, 5000]))
    out, ok = cs.with_batch(la, 4096)
    assert list(ok) == [True, True, False]
    assert out.gbs[0] == 3 * round(4096 / 3)
    assert out.gbs[1] == 4000
    assert np.all(out.gbs % out.dp == 0)


def test_target_sequences():
    assert cs.target_sequences(DENSE, BATCH) == BATCH // DENSE.seq_len
    assert cs.target_sequences(MOE, 1) == 1


# --- candidates and best layout --------------------------------------------------------------
def test_tp_choices_divide_domain_and_heads():
    assert cs.tp_choices(DENSE, 8) == [1, 2, 4, 8]
    assert cs.tp_choices(DENSE, 72) == [1, 2, 4, 8]
    assert max(cs.tp_choices(DENSE, 144)) == 16
    assert all(MOE.heads % t == 0 for t in cs.tp_choices(MOE, 144))


def test_candidates_are_valid_and_on_the_batch():
    for model, n, dom in ((DENSE, 4096, 8), (MOE, 16384, 72)):
        seqs = cs.target_sequences(model, BATCH)
        la = cs.candidates(model, n, dom, seqs)
        assert len(la) > 0
        assert np.all(la.valid_mask(model, n))
        assert np.all(la.gpus == n)
        assert np.all(la.dp * la.mbs <= seqs)
        assert np.all(dom % la.tp == 0)
        if model.is_moe:
            assert np.all(la.etp == 1)


def test_candidates_restrict_ep_and_cp():
    la = cs.candidates(MOE, 4096, 8, cs.target_sequences(MOE, BATCH), ep=[64])
    assert set(la.ep.tolist()) == {64}
    assert set(la.cp.tolist()) == {1}  # 4096-token sequences: no context parallelism


FLAT = "flat"  # the stand-in step model: deterministic properties that do not hang on a calibration


def test_evaluate_terms_add_up():
    la = cs.candidates(DENSE, 4096, 8, cs.target_sequences(DENSE, BATCH))
    ev = cs.evaluate(DENSE, la, "h100_sxm", precision="fp8", step_model=FLAT)
    assert np.allclose(ev.t_step, ev.t_compute + ev.t_bubble + ev.t_exposed)
    assert np.all((ev.share >= 0) & (ev.share < 1))
    assert np.all(ev.t_exposed <= ev.step.seconds + 1e-12)
    assert ev.fits.dtype == bool and ev.fits.any() and not ev.fits.all()


def test_no_overlap_exposes_everything():
    la = cs.candidates(DENSE, 4096, 8, cs.target_sequences(DENSE, BATCH))
    ev = cs.evaluate(DENSE, la, "h100_sxm", overlap=Overlap.none(), step_model=FLAT)
    assert np.allclose(ev.t_exposed, ev.step.seconds)


def test_best_layout_is_the_fastest_that_fits():
    row = cs.best_layout(DENSE, "h100_sxm", 4096, batch_tokens=BATCH, step_model=FLAT)
    la = cs.candidates(DENSE, 4096, 8, cs.target_sequences(DENSE, BATCH))
    ev = cs.evaluate(DENSE, la, "h100_sxm", step_model=FLAT)
    assert row["t_step"] == pytest.approx(ev.t_step[ev.fits].min())
    lay = Layout(tp=row["tp"], pp=row["pp"], cp=row["cp"], dp=row["dp"], ep=row["ep"], etp=row["etp"],
                 vp=row["vp"], gbs=row["gbs"], recompute=row["recompute"])
    assert memory.fits(DENSE, lay, "h100_sxm", "fp8")[0]
    assert row["share"] == pytest.approx(row["t_exposed"] / row["t_step"])
    assert sum(row[f"{g}_exposed"] for g in GROUPS) == pytest.approx(row["t_exposed"])


def test_best_layout_none_when_nothing_fits():
    assert cs.best_layout(DENSE, "h100_sxm", 8, batch_tokens=BATCH, step_model=FLAT) is None


def test_layout_label():
    assert cs.layout_label(Layout(tp=8, pp=16, dp=4, vp=2, recompute="selective"), DENSE) == "TP8 PP16 DP4 VP2, selective"
    assert "EP64" in cs.layout_label(Layout(tp=1, pp=8, dp=64, ep=64, etp=1), MOE)


# --- sweeps ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tax():
    return cs.tax_rows(["megatron_1t", "kimi_k2"], ["h100_sxm", "gb200"], [1024, 16384, 100000], batch_tokens=BATCH,
                       step_model=FLAT)


def test_tax_rows_cover_the_grid(tax):
    assert len(tax) == 2 * 2 * 3
    assert all(r["fits"] for r in tax)
    assert {r["domain"] for r in tax} == {8, 72}


def test_tax_grows_with_cluster_size_at_fixed_batch(tax):
    for m in ("megatron_1t", "kimi_k2"):
        for g in ("h100_sxm", "gb200"):
            s = {r["gpus"]: r["share"] for r in tax if r["model"] == m and r["gpu"] == g}
            assert s[1024] < s[16384] < s[100000]


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
    t = cs.tax_table(tax, 16384, 100000)
    assert len(t) == 4 and all(r["share_ref"] < r["share_top"] for r in t)
    ex = cs.extremes(tax, 16384)
    assert ex["min"] <= ex["max"]
    g = cs.growth(tax, 1024, 100000)
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
    rows = cs.domain_rows(["megatron_1t", "kimi_k2"], "gb200", [16384], (8, 72), batch_tokens=BATCH, step_model=FLAT)
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
    rows = cs.ep_rows(MOE, ["h100_sxm", "gb200"], 16384, eps=(8, 64, 7), batch_tokens=BATCH, step_model=FLAT)
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
def test_llama_rows_match_comm():
    rows, tc = cs.llama_rows("h100_sxm", "fp8", step_model=FLAT)
    assert tc > 0 and rows[-1]["group"] == "total"
    assert {r["group"] for r in rows[:-1]} == {"tp", "cp", "pp", "dp"}
    ref = comm.llama405b_traffic("h100_sxm", precision="fp8", t_compute=tc)
    assert rows[-1]["exposed_s"] == pytest.approx(ref[-1]["exposed_s"])
    assert rows[-1]["total_gb"] == pytest.approx(ref[-1]["total_gb"])
    assert rows[-1]["exposed_s"] <= rows[-1]["seconds"]


def test_prose_helpers_without_nvl72_or_moe():
    assert cs.nvl72_gpu(["h100_sxm", "b200"]) is None
    assert cs.sweep_gpu(["h100_sxm", "b200"]) == "b200"
    assert "none" in cs.nvl72_note(["h100_sxm"])
    assert cs.sweep_gpu(["h100_sxm", "gb300", "gb200"]) == "gb300"
    assert cs.first_moe(["megatron_1t"]) == models.MOE_1T
    assert cs.first_moe(["megatron_1t", "kimi_k2"]) == "kimi_k2"
    assert cs.eight_gpu(["gb200", "b200"]) == "b200"
    assert cs.sizes_with([4096, 1024], 16384) == [1024, 4096, 16384]


def test_step_model_switch_rejects_unknown():
    la = cs.candidates(DENSE, 4096, 8, cs.target_sequences(DENSE, BATCH))
    with pytest.raises(ValueError, match="step_model"):
        cs.evaluate(DENSE, la, "h100_sxm", step_model="nope")


def test_perf_step_model_when_calibrated():
    """The switch to the book's step-time model (runs once data/efficiency.yaml exists)."""
    perf = pytest.importorskip("scaletax.perf")
    try:
        perf.default_band()
    except (ValueError, OSError) as exc:
        pytest.skip(f"perf not calibrated yet: {exc}")
    la = cs.candidates(DENSE, 4096, 8, cs.target_sequences(DENSE, BATCH))
    ev = cs.evaluate(DENSE, la, "h100_sxm", step_model="perf")
    assert np.allclose(ev.t_step, ev.t_compute + ev.t_bubble + ev.t_exposed)
    assert np.all((ev.share >= 0) & (ev.share < 1))
    row = cs.best_layout(DENSE, "h100_sxm", 4096, batch_tokens=BATCH, step_model="perf")
    assert row is not None and row["t_step"] > 0
    st = perf.step_time(DENSE, la, "fp8", "h100_sxm")
    assert np.allclose(ev.t_step, st.step_s)
    scaled = cs.applied_overlap(step_model="perf")
    assert scaled.tp == pytest.approx(min(1.0, Overlap().tp * perf.default_efficiency().overlap_scale))
    assert cs.applied_overlap(step_model=FLAT) == Overlap()
