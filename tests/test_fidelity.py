"""Issue 34: every published run in data/ predicted in sample and leave one source out
(validate.run_accuracy), the MoE all-to-all under a paired schedule, the MoE routing bytes, the
bands per regime, and the NVLink-domain claim on its measured pair."""
from __future__ import annotations

import math

import numpy as np
import pytest

from scaletax.inputs import models, runs
from scaletax.model import efficiency, perf, plan
from scaletax.fit import calibrate, validate
from scaletax import ROOT
from objects import as_gpu, as_recipe
from scaletax.inputs.layout import Layout, LayoutArray


@pytest.fixture(scope="module")
def everything():
    rows, names = validate.published_runs()
    prepared = validate.prepare_rows(rows)
    return prepared, names, validate.run_accuracy(prepared, names)


def test_every_published_run_once_and_the_held_out_runs_never_fitted(everything):
    (inp, plans), names, acc = everything
    assert [names.count(t) for t in validate.RUN_TABLES] == [27, 13, 72]
    dup = [r["run_id"] for r in acc.rows if r["duplicate"]]
    assert sorted(dup) == sorted(["llama3-405b-8192gpu-cp1", "llama3-405b-16384gpu-cp1", "llama3-405b-16384gpu-cp16",
                                  "deepseek-v3-pretrain"])
    assert acc.summary()["runs"] == 27 + 13 + 72 - 4 and acc.summary("validation")["runs"] == 72
    fitted = {r["run_id"] for r in calibrate.load_rows()}
    held = {p.row["run_id"] for p, n in zip(plans, names) if n == "held-out"}
    assert not fitted & held and not fitted & set(dup) and len(fitted) == 95
    # out of sample: each run by a calibration without its source, so a source's runs share one fit
    for src in ("TorchTitan", "MLPerf"):
        idx = [i for i, p in enumerate(plans) if runs.row_source(p.row) == src and p.measured]
        train = [i for i, (p, n) in enumerate(zip(plans, names))
                 if n != "held-out" and not p.row.get("same_run_as") and runs.row_source(p.row) != src]
        want = perf.evaluate(inp, calibrate.calibrate_fold(inp, plans, train).efficiency).tokens_per_s_per_gpu
        got = {r["run_id"]: r["oos_predicted"] for r in acc.rows}
        for i in idx:
            assert got[plans[i].row["run_id"]] == pytest.approx(float(want[i]), rel=1e-9)


def test_the_validation_table_accuracy(everything):
    """The issue's figures on its 72 runs, in sample and leave one source out (the honest one): at the
    start of this work 12.3% median, 72% within 25%, 62.5% in band. The goals (8%, 90%, 80%): the
    median and the band are met out of sample too; the share within 25% is what the chapter states."""
    *_, acc = everything
    s = acc.summary("validation")
    assert s["median"] <= 0.08 and s["in_band"] >= 0.85
    assert s["oos_median"] <= 0.08 and s["oos_within_25"] >= 0.80
    dense = [r for r in acc.select("validation") if "dense" in r["regime"]]
    assert np.median([abs(r["oos_error"]) for r in dense]) <= 0.08
    assert np.mean([abs(r["oos_error"]) <= 0.25 for r in dense]) >= 0.9


def test_the_nvlink_domain_claim_on_its_measured_pair(everything):
    """DeepSeek-V3 on 256 GB200 NVL72 against 256 B200 (Megatron-Bridge 26.04.01): measured 1.28x; the
    model gave 1.67x (B200 -16%, GB200 +15%) with the all-to-all hidden only by the fitted overlap
    scale; with the recipe's overlap_moe_expert_parallel_comm as physics the ratio is within 15%,
    in sample and out of sample."""
    *_, acc = everything
    r = {x["run_id"]: x for x in acc.rows}
    a, b = r["mbridge26.04.01-DeepSeek-V3671B-DGX-GB200-256-MXFP8"], r["mbridge26.04.01-DeepSeek-V3671B-DGX-B200-256-MXFP8"]
    measured = a["measured"] / b["measured"]
    assert measured == pytest.approx(4256 / 3328)
    for key in ("predicted", "oos_predicted"):
        assert a[key] / b[key] == pytest.approx(measured, rel=0.15)


def test_a_paired_schedule_hides_every_all_to_all_with_a_partner():
    qwen = models.get("qwen3_235b_a22b")
    lays = [Layout(tp=1, pp=1, dp=16, ep=16, etp=1, mbs=1, gbs=64),      # 4 micro-batches, no pipeline
            Layout(tp=1, pp=4, dp=4, ep=4, etp=1, mbs=1, gbs=32),        # 8 micro-batches on 4 stages
            Layout(tp=1, pp=4, dp=4, ep=4, etp=1, mbs=1, gbs=16)]        # 4 on 4: none paired
    for sched, want in (("ep_overlap", [0.75, 0.5, 0.0]), ("dualpipe", [0.75, 0.5, 0.0]), ("1f1b", [0.0] * 3)):
        inp = perf.prepare(qwen, lays, as_recipe("bf16"), as_gpu("h100_sxm"), schedule=sched)
        np.testing.assert_allclose(perf.ep_hidden_share(inp, 0.3), want, rtol=1e-12)
    inp = perf.prepare(qwen, lays, as_recipe("bf16"), as_gpu("h100_sxm"))  # unknown: the assumed half x the fitted scale
    np.testing.assert_allclose(perf.ep_hidden_share(inp, 0.3), 0.15, rtol=1e-12)


def test_moe_routing_bytes_are_their_own_term():
    """Router logits and top-k (24 E bytes per token and layer) and the DeepEP-class permutations
    (8 h (k + r) bytes) are the routing bytes, timed with moe_overhead; the rest of the micro-batch
    bytes with memory_overhead."""
    m = models.get("qwen3_235b_a22b")
    la = LayoutArray.from_layouts([Layout(tp=1, pp=1, dp=8, ep=8, etp=1, mbs=1, gbs=8, recompute="none")])
    total, _, route = perf.memory_bound_bytes(m, la, as_recipe("bf16"), routing=True)
    r = float(perf.distinct_groups(m.moe_experts, m.moe_top_k, 8))
    per_tok = 24.0 * m.moe_experts + 8.0 * m.hidden * (m.moe_top_k + r)
    assert float(route[0]) == pytest.approx(m.seq_len * m.n_moe_layers * per_tok, rel=1e-12)
    assert float(total[0]) == pytest.approx(float(perf.memory_bound_bytes(m, la, as_recipe("bf16"))[0][0]), rel=1e-12)
    inp = perf.prepare(m, la, as_recipe("bf16"), as_gpu("h100_sxm"), schedule="1f1b")
    assert float(inp.bytes_route[0]) == pytest.approx(float(route[0]), rel=1e-12)
    eff = efficiency.default_efficiency()
    slow = perf.evaluate(inp, eff.with_params(moe_overhead=2 * eff.moe_overhead))
    base = perf.evaluate(inp, eff)
    assert float(slow.other_s[0] - base.other_s[0]) == pytest.approx(
        eff.moe_overhead * float(route[0]) / 3.35e12, rel=1e-9)
    dense = perf.prepare(models.get("llama31_8b"), Layout(dp=8, mbs=1, gbs=8), as_recipe("bf16"), as_gpu("h100_sxm"))
    assert float(np.broadcast_to(dense.bytes_route, (1,))[0]) == 0.0


def test_a_fixed_time_per_layer_pass_below_its_idle_gemm_calls():
    """Every layer's forward and backward, per micro-batch, costs layer_overhead_us beyond its FLOPs and
    bytes (in the stage's busy time, so the pipeline bubble carries it too). The fit stays at or below
    the 12 GEMM calls of a dense layer pass at the shortest call an idle H200 took (21.7 us, the 512^3
    BF16 GEMM of data/measured/gemm_h200.csv): a step queues its kernels, so it pays less than idle."""
    assert calibrate.gemm_call_floor_us() == pytest.approx(21.728, abs=0.01)
    eff = efficiency.default_efficiency()
    bound = calibrate.LAYER_GEMM_CALLS * calibrate.gemm_call_floor_us()
    assert calibrate.fit_bounds()["layer_overhead_us"][1] == pytest.approx(bound)
    assert 0.0 < eff.layer_overhead_us <= bound + 1e-4  # data/efficiency.yaml keeps 4 decimals
    lay = Layout(tp=2, pp=4, dp=8, mbs=1, gbs=64, recompute="selective")  # 8 micro-batches, 8 layers a stage
    inp = perf.prepare(models.get("llama31_8b"), lay, as_recipe("bf16"), as_gpu("h100_sxm"))
    assert inp.layer_passes[0] == 8 * 8
    none, st = perf.evaluate(inp, eff.with_params(layer_overhead_us=0.0)), perf.evaluate(inp, eff)
    fixed = 64 * eff.layer_overhead_us * 1e-6
    assert st.other_s[0] - none.other_s[0] == pytest.approx(fixed, rel=1e-9)
    assert st.bubble_s[0] - none.bubble_s[0] == pytest.approx(3 / 8 * fixed, rel=1e-9)  # (pp - 1) / n_micro
    with pytest.raises(ValueError, match=r"layer_overhead_us must be >= 0 \(got -1.0\)"):
        eff.with_params(layer_overhead_us=-1.0)


def test_band_widths_by_regime():
    err = np.log1p(np.array([0.01, -0.02, 0.03, 0.05, -0.08, 0.1, 0.12, -0.2, 0.3, 0.5]))
    regs = ["large dense"] * 9 + ["coarse MoE"]
    pooled, per = calibrate.band_widths(err, regs)
    # split-conformal: the ceil(0.8 (n + 1))-th smallest |error|: 9th of 10, 8th of 9
    assert pooled == pytest.approx(0.3)
    assert per["large dense"] == pytest.approx(0.25)  # |log(1 - 0.2)| = log(1.25)
    assert calibrate.conformal_quantile([3.0, 1.0, 2.0]) == 3.0  # ceil(3.2) > 3: the largest
    assert calibrate.conformal_quantile(np.arange(1.0, 20.0)) == 16.0  # ceil(0.8 x 20) = 16th of 19
    assert per["coarse MoE"] == pytest.approx(0.5)  # one run: the pooled width, widened to its error
    assert per["long context"] == pooled  # no run: the pooled width
    assert list(per) == list(runs.REGIMES)


def test_a_stated_regime_band_holds_out_of_sample(everything):
    """data/efficiency.yaml: each regime's band is the leave-one-source-out split-conformal 80% quantile,
    and at least 80% of the fitted runs fall inside a band made without their own source, pooled and in
    every regime of 8 or more fitted runs (the chapter's per-regime column is the same computation)."""
    *_, acc = everything
    band = efficiency.default_band()
    raw = band.meta["band"]
    assert raw["coverage"] >= 0.8 and raw["rows"] == 95
    assert band.regime_spread["large dense"] < band.regime_spread["small dense"] < band.regime_spread["fine-grained MoE"]
    fit = acc.fitted()
    inside = calibrate.nested_inside([math.log1p(r["oos_error"]) for r in fit], [r["regime"] for r in fit],
                                     [r["source"] for r in fit])
    assert len(fit) == 95 and float(np.mean(inside)) == pytest.approx(raw["coverage"], abs=1e-4)
    for r in acc.by_regime():
        n = sum(x["regime"] == r["regime"] for x in fit)
        if n >= calibrate.BAND_MIN_RUNS:
            assert r["oos_in_band"] >= 0.8, r


def test_a_ratio_of_two_predictions_carries_the_error_on_measured_pairs(everything):
    """data/efficiency.yaml's ratio half-width is the 80% quantile of the leave-one-source-out error of
    the measured pairs' ratios (same model, precision, GPU count and source on two GPUs, fitted runs);
    every ratio the book quotes is at least that wide, however its two predictions' corners move."""
    *_, acc = everything
    band = efficiency.default_band()
    recs = [r for r in acc.select() if r["table"] != "held-out"]
    pairs = calibrate.measured_pairs(recs)
    assert len(pairs) == band.meta["band"]["ratio_pairs"] >= 40
    assert band.ratio_spread == pytest.approx(calibrate.ratio_half_width(pairs), abs=1e-4)
    assert 0.05 < band.ratio_spread < 0.3
    w = band.ratio_spread
    # both corners set by one regime's half-width: their ratio is the value, the band is not
    assert plan.ratio_band(2.0, (2.0, 2.0)) == pytest.approx((2.0 / (1 + w), 2.0 * (1 + w)))
    assert plan.ratio_band(2.0, (2.9, 1.2)) == (1.2, 2.9)  # wider corners stay, in either order
    with pytest.raises(ValueError, match="ratio_half_width: no measured pair"):
        calibrate.ratio_half_width([])


def test_the_ep_rdma_rate_is_the_measured_deepep_and_hybridep_curve():
    """comm.ep_rdma_curve: DeepEP V1 normal kernels on H800 and HybridEP kernel-only at 16 SMs on H100
    (data/kernel_benchmarks.csv), "RDMA bandwidth" counting the own node's copy, so x (D-1)/D for the
    bytes that leave the node, over a 400 Gb/s NIC (50 GB/s): 2 nodes (43 + 43 + 68.48 + 71.71 + 62.95)/5
    x 1/2, 4 nodes (58 + 57 + 55.35 + 57.69 + 57.46)/5 x 3/4, 8 nodes (51 + 50 + 46.52 + 49.97 + 49.77)/5
    x 7/8; the factor is each over the 8-node value, held flat outside. Across 8 nodes the kernels reach
    the NIC rate NCCL's all-reduce calibrates (topology.NIC_EFF, an independent measurement) within 2%."""
    from scaletax.model import comm, topology
    nodes, eff = comm.ep_rdma_curve()
    assert list(nodes) == [2, 4, 8]
    want = [(43 + 43 + 68.48 + 71.71 + 62.95) / 5 / 2 / 50, (58 + 57 + 55.35 + 57.69 + 57.46) / 5 * 0.75 / 50,
            (51 + 50 + 46.52 + 49.97 + 49.77) / 5 * 0.875 / 50]
    np.testing.assert_allclose(eff, want, rtol=1e-9)
    np.testing.assert_allclose(comm.ep_rdma_factor([1, 2, 4, 8, 16, 128]),
                               [want[0] / want[2], want[0] / want[2], want[1] / want[2], 1, 1, 1], rtol=1e-9)
    assert want[0] / want[2] < comm.ep_rdma_factor(3) < want[1] / want[2]
    assert eff[-1] == pytest.approx(topology.NIC_EFF, rel=0.02)
    # the method page quotes these values: one number everywhere
    method = " ".join((ROOT / "book" / "method.md").read_text(encoding="utf-8").split())
    f = comm.ep_rdma_factor([2, 4, 8])
    assert (f"relative to eight: {f[0]:.2f} across two, {f[1]:.2f} across four, 1 from eight on" in method)
    assert f"that is {eff[-1]:.2f} of the line rate, the rate NCCL's all-reduce calibrates ({topology.NIC_EFF:.2f})" in method
    assert f"and across two only {eff[0]:.2f}." in method


def test_the_ep_link_rate_is_the_measured_hybridep_curve():
    """comm.ep_link_curve: HybridEP on GB200 NVL72, kernel only at 32 SMs (data/kernel_benchmarks.csv,
    DeepEP hybrid-ep README at 94a9f8f), FP8 dispatch and BF16 combine averaged, over GB200's 900 GB/s
    per direction: 8 ranks (713.98 + 737.13) / 2, 36 ranks (489.27 + 596.99) / 2; held flat outside."""
    from scaletax.model import comm
    from scaletax.inputs import hardware
    assert comm.EP_BENCH_LINK_BW == hardware.get("gb200").nvlink_bw
    ranks, eff = comm.ep_link_curve()
    assert list(ranks) == [8, 16, 24, 32, 36]
    assert eff[0] == pytest.approx((713.98 + 737.13) / 2 / 900, rel=1e-9)
    assert eff[-1] == pytest.approx((489.27 + 596.99) / 2 / 900, rel=1e-9)
    np.testing.assert_allclose(comm.ep_link_eff([2, 8, 36, 72]), [eff[0], eff[0], eff[-1], eff[-1]], rtol=1e-12)
    assert eff[2] < comm.ep_link_eff(20) < eff[1]
